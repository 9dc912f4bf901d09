"""The lab with systemd as PID 1: for testing what a Debian system runs, e.g. the packaged unit.

    lab = SystemdLab.start()   # boot (systemd), radios, AP, NM + wpa_supplicant, associated
    lab.check("systemctl is-active NetworkManager")
    lab.journal("scanguard")   # journalctl -u scanguard -b -o short-precise
    lab.stop()

Differences from Lab (which runs a bash script as PID 1 and starts every daemon by hand):
- tests/lab/guest-systemd-init.sh prepares the overlay and execs Debian's systemd with
  `lab.target` (sysinit, sockets, dbus, the agent as `lab-agent.service`); see that file.
- udev runs as systemd-udevd.service; the radios and the AP (hostapd, udhcpd, iperf3 in the
  netns) are set up by the agent exactly as in Lab.
- wpa_supplicant and NetworkManager are started with `systemctl start` from Debian's own units
  (`wpa_supplicant -u -s -O "DIR=/run/wpa_supplicant GROUP=netdev"`, NetworkManager
  --no-daemon); they log to the journal, not to /lab/logs.  Nothing of nm-scanguard is put in
  the guest: a test installs it (e.g. the .deb).
"""

from __future__ import annotations

from pathlib import Path

from .lab import NM_CONF, STA_IF, Lab, wait_until


class SystemdLab(Lab):
    INIT = "systemd"

    def _radios(self) -> None:
        # `is-system-running --wait` returns when lab.target's start-up jobs are done
        # ("running", or "degraded" if some unit of the host's sysinit failed here).
        state = self.check("systemctl is-system-running --wait || true", 90).strip()
        self.say(f"systemd start-up finished: {state}")
        if state not in ("running", "degraded"):
            raise RuntimeError(f"systemd state {state!r} after start-up")
        self.check("systemctl is-active --quiet systemd-udevd systemd-journald dbus")
        self.check("modprobe mac80211_hwsim radios=3 && udevadm settle -t 60", 90)
        self.check("ip link show wlan0 && ip link show wlan1 && ip link show wlan2 && "
                   "ip link set hwsim0 up")
        self.sta_mac = self.check(f"cat /sys/class/net/{STA_IF}/address").strip().lower()
        self.spawn("exec stdbuf -oL iw event -t", name="iw-event")

    def _station_daemons(self) -> None:
        # NetworkManager asks polkit here, as on a user's Debian (its default): the package's
        # polkit rule is what refuses other users' scan requests while guarding, and
        # NetworkManager reads auth-polkit only at start.  Root's requests need no polkit.
        conf = NM_CONF.replace("auth-polkit=false\n", "")
        assert conf != NM_CONF, "NM_CONF no longer turns auth-polkit off: update this"
        self.write_file("/etc/NetworkManager/conf.d/99-scanguard-lab.conf", conf)
        self.check("systemctl start wpa_supplicant.service NetworkManager.service", 90)
        wait_until(lambda: self.run(f"nmcli -t -f DEVICE,STATE device | grep -qx "
                                    f"'{STA_IF}:disconnected'", 30)[0] == 0,
                   60, f"NetworkManager managing {STA_IF}", interval=1)

    def journal(self, unit: str | None = None, args: str = "") -> str:
        """This boot's journal (of one unit), as text."""
        what = f"-u {unit}" if unit else ""
        return self.check(f"journalctl -b --no-pager -o short-precise {what} {args}", 60)

    def save_diagnostics(self, reason: str) -> Path | None:
        path = super().save_diagnostics(reason)
        try:
            (self.vm.rundir / f"journal-{reason}.txt").write_text(self.journal())
            (self.vm.rundir / f"units-{reason}.txt").write_text(
                self.check("systemctl list-units --all --no-pager; systemctl --failed "
                           "--no-pager", 60))
        except Exception as e:  # diagnostics must never hide the real error
            (self.vm.rundir / f"journal-{reason}.txt").write_text(f"no journal: {e}\n")
        return path

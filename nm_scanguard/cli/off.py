"""nm-scanguard off by the administrator's choice, as scanguardctl tells it: scanguard.service
masked (`systemctl mask scanguard`), so that bus activation fails, or `enabled = no` in the
settings file, which the running daemon reports in its Off property."""

from __future__ import annotations

import subprocess

from ..text import shown

# What scanguardctl exits with when nm-scanguard is off by the administrator's choice: the
# status `systemctl status` and LSB init scripts give for a service that is not running.
OFF_EXIT = 3

UNIT = "scanguard.service"
# What dbus-daemon answers a call that would start a masked unit: systemd's ActivationFailure
# error, passed on ("Unit scanguard.service is masked.").  dbus-broker answers
# NameHasNoOwner instead, so an unreachable service is also asked of systemctl (masked()).
UNIT_MASKED = "org.freedesktop.systemd1.UnitMasked"
MASKED = (f"nm-scanguard is off: {UNIT} is masked (systemctl unmask scanguard to turn it back "
          "on)")
# systemctl is-enabled asks systemd, which answers every user; it should take milliseconds.
SYSTEMCTL_TIMEOUT = 5.0


def masked() -> bool:
    """Whether scanguard.service is masked, at run time or for good, as `systemctl
    is-enabled` says ("masked", "masked-runtime"); False where it cannot tell (no systemd,
    no answer)."""
    try:
        r = subprocess.run(["systemctl", "is-enabled", UNIT], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, errors="replace",
                           timeout=SYSTEMCTL_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.stdout.strip() in ("masked", "masked-runtime")


def off_by_settings(why: str) -> str:
    """The line `scanguardctl status` begins with while the daemon's Off property says `why`."""
    return (f"nm-scanguard is off: {shown(why)} (set enabled = yes there and run `scanguardctl "
            "reload` to turn it back on)")

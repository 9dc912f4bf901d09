"""The real polkitd (Debian 12: 122) on a private system bus, with our shipped rule.

polkitd reads its rules from /etc/polkit-1/rules.d and /usr/share/polkit-1/rules.d, and our rule
spawns /usr/libexec/nm-scanguard/nm-scanguard-scan-deferral: a private mount namespace (unshare
-m, as root) bind-mounts temporary directories over those three, so the machine's own rules and
files are neither read nor touched.  polkitd drops to user polkitd by itself, as on a real
system, so the helper runs as polkitd and must be able to read the state file.  The state file
is not /run/scanguard/defer-scans (which a test host does not have) but a file named by
SCANGUARD_DEFER_FILE, which polkitd passes on to the helper.

Used by tests/access/test_real_polkit.py and tests/bench/bench_polkit.py.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import PrivateBus, start_private_bus, stop_process

REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "systemd" / "50-nm-scanguard.rules"
HELPER = REPO / "systemd" / "nm-scanguard-scan-deferral"
# How long the rule reuses the helper's answer (REUSE_MS in the rule): after a change of the
# state file, a check sees it once this has passed.
REUSE_S = int(re.search(r"var REUSE_MS = ([0-9]+);", RULE.read_text()).group(1)) / 1000
POLKITD = "/usr/lib/polkit-1/polkitd"
SCAN = "org.freedesktop.NetworkManager.wifi.scan"
# How long flood() waits for one check: polkit.spawn gives the helper 10 s, then polkitd answers.
CHECK_WAIT_S = 30.0
# An action our rule must not look at (NetworkManager's own, installed with it).
UNRELATED = "org.freedesktop.NetworkManager.network-control"

# Stands in for an active local session, which a test host has not: after ours, says yes to
# wifi.scan, as the action's allow_active default would for a desktop user.
SESSION_RULE = """polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.NetworkManager.wifi.scan") {
        return polkit.Result.YES;
    }
});
"""

# polkitd (user polkitd) owns its name, clients (nobody) talk to it: allow everything, this bus
# tests polkit, not a D-Bus policy.
POLICY = """
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>"""


def available() -> str | None:
    """None when this machine can run the real polkitd here, else why not."""
    if os.geteuid() != 0:
        return "needs root (a mount namespace, and polkitd drops to user polkitd itself)"
    for tool in (POLKITD, shutil.which("pkcheck"), shutil.which("unshare"), shutil.which("setpriv")):
        if not tool or not os.path.exists(tool):
            return f"{tool or 'pkcheck/unshare/setpriv'} is not installed"
    if not Path("/usr/share/polkit-1/actions/org.freedesktop.NetworkManager.policy").exists():
        return "NetworkManager's polkit actions are not installed (package network-manager)"
    return None


def process_start(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


class RealPolkit:
    """polkitd with `with_rule` (ours or not) and the session stand-in; stop() when done."""

    def __init__(self, with_rule: bool = True) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="scanguard-polkit-"))
        self.dir.chmod(0o755)
        rules, etc_rules, libexec = self.dir / "rules.d", self.dir / "etc-rules.d", self.dir / "libexec"
        for d in (rules, etc_rules, libexec / "nm-scanguard"):
            d.mkdir(parents=True)
            d.chmod(0o755)
        (libexec / "nm-scanguard").chmod(0o755)
        if with_rule:
            shutil.copy(RULE, rules / RULE.name)
        (rules / "60-test-active-session.rules").write_text(SESSION_RULE)
        for f in rules.iterdir():
            f.chmod(0o644)
        shutil.copy(HELPER, libexec / "nm-scanguard" / HELPER.name)
        (libexec / "nm-scanguard" / HELPER.name).chmod(0o755)
        self.state = self.dir / "defer-scans"
        self.bus: PrivateBus = start_private_bus(POLICY)
        self.log = open(self.dir / "polkitd.log", "w+")
        script = (f"mount --bind {rules} /usr/share/polkit-1/rules.d && "
                  f"mount --bind {etc_rules} /etc/polkit-1/rules.d && "
                  f"mount --bind {libexec} /usr/libexec && "
                  f"exec {POLKITD} --no-debug")
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.bus.address,
                   SCANGUARD_DEFER_FILE=str(self.state))
        self.process = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                        env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not self._owned():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"polkitd did not start: {self.output()}")
            time.sleep(0.05)

    def _owned(self) -> bool:
        r = subprocess.run(["dbus-send", f"--bus={self.bus.address}", "--print-reply",
                            "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                            "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.PolicyKit1"],
                           capture_output=True, text=True)
        return "boolean true" in r.stdout

    def defer(self, pid: int | None = None, mode: str = "defer") -> None:
        """Write what scanguardd writes while guarding ("watch": while running and not
        guarding), naming a live process (this one)."""
        pid = os.getpid() if pid is None else pid
        start = process_start(os.getpid()) if pid == os.getpid() else "1"
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(f"{mode} {pid} {start}\n")
        tmp.chmod(0o644)
        tmp.replace(self.state)
        time.sleep(REUSE_S + 0.05)  # the rule's last answer has expired

    def allow(self) -> None:
        self.state.unlink(missing_ok=True)
        time.sleep(REUSE_S + 0.05)

    def watch(self) -> None:
        self.defer(mode="watch")

    def pkcheck(self, action: str, user: str = "nobody") -> int:
        """pkcheck for its own process as `user`: 0 authorised, 1 not, 2 would need a password."""
        r = self.pkcheck_run(action, user)
        return r.returncode

    def pkcheck_run(self, action: str, user: str = "nobody") -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.bus.address)
        prefix = [] if user == "root" else ["setpriv", f"--reuid={user}", "--regid=nogroup",
                                            "--clear-groups"]
        return subprocess.run(prefix + ["sh", "-c", f'exec pkcheck --action-id {action} --process $$'],
                              env=env, capture_output=True, text=True, timeout=30)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        stop_process(self.process)
        self.bus.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class StandIn:
    """Owns our bus name on polkitd's bus and counts the ScanRequestSeen reports; answers them
    at once, or never (`hang`: a daemon whose loop is stuck)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang
        self.reports: list[list] = []
        self.bus = None

    async def start(self, address: str) -> "StandIn":
        from nm_scanguard.dbuslib import Message, MessageBus, MessageType
        from nm_scanguard.names import BUS_NAME, IFACE

        self.bus = await MessageBus(bus_address=address).connect()

        def on_call(msg: Message) -> bool | None:
            if msg.message_type == MessageType.METHOD_CALL and msg.member == "ScanRequestSeen" \
                    and msg.interface == IFACE:
                self.reports.append(list(msg.body))
                if not self.hang:
                    self.bus.send(Message.new_method_return(msg))
                return True
            return None

        self.bus.add_message_handler(on_call)
        await self.bus.request_name(BUS_NAME)
        return self

    def stop(self) -> None:
        self.bus.disconnect()


async def flood(polkitd: RealPolkit, seconds: float, clients: int = 8) -> dict:
    """`clients` connections asking polkitd about wifi.scan for a process of user nobody, each
    as fast as answers come, for `seconds`; every 20 ms the busctl processes of user polkitd
    are counted.  Returns the checks, their answers, the most reporters seen at once and the
    slowest check in seconds.

    Each check may take up to CHECK_WAIT_S: longer than polkit.spawn's own 10 s limit on the
    helper, so that a check polkitd is slow to answer (a helper it gave up on, a machine that
    stalled) comes back with polkitd's answer and shows in "slowest", instead of ending the
    flood with a timeout of ours that says nothing about which."""
    from nm_scanguard.dbuslib import MessageBus, Variant
    from nm_scanguard.names import POLKIT
    from nm_scanguard.peers.bus import call

    sleeper = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup",
                                "--clear-groups", "sleep", "600"])
    polkit_uid = pwd.getpwnam("polkitd").pw_uid
    buses = [await MessageBus(bus_address=polkitd.bus.address).connect() for _ in range(clients)]
    answers: list[bool] = []
    slowest = 0.0
    most = 0
    await asyncio.sleep(0.1)
    subject = ["unix-process", {"pid": Variant("u", sleeper.pid),
                                "start-time": Variant("t", int(process_start(sleeper.pid))),
                                "uid": Variant("i", 65534)}]
    end = time.monotonic() + seconds

    async def ask(bus) -> None:
        nonlocal slowest
        while time.monotonic() < end:
            asked = time.monotonic()
            ((authorized, _c, _d),) = await call(bus, *POLKIT, "CheckAuthorization",
                                                 "(sa{sv})sa{ss}us", [subject, SCAN, {}, 0, ""],
                                                 timeout=CHECK_WAIT_S)
            slowest = max(slowest, time.monotonic() - asked)
            answers.append(bool(authorized))

    # This polkitd's reporters only (other tests may run their own polkitd meanwhile): the
    # helper's busctl has polkitd's environment, with this bus's address.
    mine = f"DBUS_SYSTEM_BUS_ADDRESS={polkitd.bus.address}".encode()

    def reporters() -> int:
        n = 0
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and (d / "comm").read_text() == "busctl\n" \
                        and d.stat().st_uid == polkit_uid \
                        and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" \
                        and mine in (d / "environ").read_bytes().split(b"\0"):
                    n += 1
            except OSError:
                pass
        return n

    async def count() -> None:
        nonlocal most
        while time.monotonic() < end:
            most = max(most, reporters())
            await asyncio.sleep(0.02)

    try:
        await asyncio.gather(count(), *(ask(b) for b in buses))
    finally:
        for b in buses:
            b.disconnect()
        sleeper.kill()
        sleeper.wait()
    return {"checks": len(answers), "authorized": sum(answers), "most reporters": most,
            "seconds": seconds, "slowest": round(slowest, 3)}


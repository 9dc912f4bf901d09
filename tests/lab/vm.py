"""The lab VM: QEMU (TCG) process management and the host side of the guest agent.

`VM.boot()` starts QEMU with Debian's kernel, our initramfs, the host's / as a read-only 9p share
(the guest overlays a tmpfs on it), a writable 9p share for logs and captures, and a virtio-serial
port to the guest agent. `VM.run()`, `VM.spawn()`, `VM.read_file()`, `VM.write_file()` talk to the
agent. `VM.stop()` powers the guest off and makes sure QEMU is gone, whatever happened before.

Nothing here knows about Wi-Fi: see lab.py for that.
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from .build import KernelImage

REPO = Path(__file__).resolve().parents[2]
QEMU_NAME = "nm-scanguard-lab"   # also our marker for a stale QEMU from a killed earlier run
GUEST_SHARE = "/lab"             # where the guest mounts the writable share
# PID 1 of the guest after switch_root, by boot mode: a bash script that runs the agent itself,
# or one that sets up units and execs systemd (the agent is then a service).
GUEST_INITS = {"shell": "guest-init.sh", "systemd": "guest-systemd-init.sh"}


class LabError(RuntimeError):
    """The lab could not do what was asked; the message says where the logs are."""


class GuestCommandError(LabError):
    pass


def _die_with_parent() -> None:
    """preexec_fn for QEMU: the kernel kills it if our process dies (even by SIGKILL)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# How much longer a guest command may take in a background VM (VM.run).
BACKGROUND_SLOWDOWN = 5


def idle_priority() -> None:
    """Run at SCHED_IDLE: only on CPU time no other program wants (inherited by every thread).
    The package VM runs so alongside the lab's checks (tests/lab/package_vm.py)."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _die_with_parent_at_idle_priority() -> None:
    _die_with_parent()
    idle_priority()


def kill_stale_qemu(pidfile: Path, log=print) -> None:
    """Kill a QEMU left by an earlier run that died before its cleanup (checked by its -name)."""
    try:
        pid = int(pidfile.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return
    if QEMU_NAME.encode() in cmdline:
        log(f"killing stale lab QEMU pid {pid}")
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


class GuestProcess:
    """A background process in the guest (its own session/process group)."""

    def __init__(self, vm: "VM", pid: int, name: str, log: str):
        self.vm, self.pid, self.name, self.log = vm, pid, name, log
        self.rc: int | None = None

    @property
    def host_log(self) -> Path:
        return self.vm.host_path(self.log)

    def wait(self, timeout: float | None = None) -> int | None:
        """Exit status, or None if still running after `timeout` seconds."""
        if self.rc is None:
            reply = self.vm.call("wait", pid=self.pid, timeout=timeout,
                                 _wait=None if timeout is None else timeout + 30)
            self.rc = reply["rc"]
        return self.rc

    def running(self) -> bool:
        return self.wait(0) is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5) -> int:
        """Signal the process group, SIGKILL after `timeout`; returns the exit status."""
        if self.rc is None:
            self.rc = self.vm.call("kill", pid=self.pid, sig=int(sig), timeout=timeout,
                                   _wait=timeout + 30)["rc"]
        return self.rc

    def output(self) -> str:
        return self.host_log.read_text(errors="replace")

    def __repr__(self) -> str:
        return f"<GuestProcess {self.name} pid={self.pid} rc={self.rc}>"


class VM:
    def __init__(self, image: KernelImage, rundir: Path, log=print, init: str = "shell",
                 background: bool = False):
        self.image = image
        self.background = background  # QEMU at SCHED_IDLE (see idle_priority)
        self.init_script = GUEST_INITS[init]
        self.rundir = rundir
        self.share = rundir / "guest"
        self.console = rundir / "console.log"
        self.log = log
        self.qemu: subprocess.Popen | None = None
        # A unix socket path must fit in 108 bytes; fall back to /tmp for a deep $CACHE.
        self._sockdir = rundir if len(str(rundir)) < 90 else \
            Path(tempfile.mkdtemp(prefix="nm-scanguard-lab-"))
        self.sock_path = self._sockdir / "agent.sock"
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, list] = {}
        self._plock = threading.Lock()
        self._wlock = threading.Lock()
        self._dead: str | None = None
        self.hello: dict | None = None
        self.procs: list[GuestProcess] = []

    # ---- paths ---------------------------------------------------------------------------
    def host_path(self, guest_path: str) -> Path:
        """Host path of a file the guest wrote under /lab (the writable share)."""
        rel = os.path.relpath(guest_path, GUEST_SHARE)
        if rel.startswith(".."):
            raise ValueError(f"{guest_path} is not under {GUEST_SHARE}")
        return self.share / rel

    # ---- lifecycle -----------------------------------------------------------------------
    @property
    def own_root(self) -> bool:
        """True when the guest boots a release's root tree rather than the host's /."""
        return self.image.guest_root != Path("/")

    def qemu_command(self) -> list[str]:
        append = " ".join([
            "console=ttyS0", "panic=-1", "mitigations=off", "random.trust_cpu=on",
            f"labinit={REPO}/tests/lab/{self.init_script}",
            f"labmods={self.image.guest_modules_dir}",
            f"labrepo={REPO}",
        ] + (["labrepo9p=1"] if self.own_root else []))
        # A release's own root (trixie) does not contain this checkout: it comes as a third,
        # read-only share that the initramfs mounts at the same path.
        repo_share = ["-fsdev", f"local,id=fsrepo,path={REPO},security_model=none,readonly=on",
                      "-device", "virtio-9p-pci,fsdev=fsrepo,mount_tag=repo"] \
            if self.own_root else []
        return [
            "qemu-system-x86_64", "-name", QEMU_NAME, "-nodefaults", "-no-user-config",
            "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "2048",
            "-kernel", str(self.image.vmlinuz), "-initrd", str(self.image.initramfs),
            "-append", append,
            # Host / read-only. multidevs=remap: without it inode numbers of different host
            # mounts collide and the guest mixes up /proc, /sys and /dev (LAB.md trap 1).
            "-fsdev", f"local,id=fshost,path={self.image.guest_root},security_model=none,"
                      "readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=fshost,mount_tag=host",
            *repo_share,
            "-fsdev", f"local,id=fslab,path={self.share},security_model=none",
            "-device", "virtio-9p-pci,fsdev=fslab,mount_tag=lab",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=agent,path={self.sock_path},server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=lab.agent",
            "-device", "virtio-rng-pci",
            "-nic", "none", "-display", "none", "-serial", f"file:{self.console}",
            "-no-reboot",
        ]

    def boot(self, timeout: float = 120) -> float:
        """Start QEMU and wait for the agent's hello; returns the guest's uptime at that point."""
        self.share.mkdir(parents=True, exist_ok=True)
        cmd = self.qemu_command()
        (self.rundir / "qemu-cmdline.txt").write_text(" ".join(cmd) + "\n")
        self.qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=open(self.rundir / "qemu.log", "wb"),
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent_at_idle_priority
                                     if self.background else _die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.qemu.poll() is not None:
                raise LabError(f"QEMU exited with {self.qemu.returncode} during boot")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(self.sock_path))
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise LabError("QEMU never opened the agent socket")
                time.sleep(0.05)
        self._sock = s
        hello = threading.Event()
        self._pending[0] = [hello, None]
        threading.Thread(target=self._reader, name="lab-agent-reader", daemon=True).start()
        while not hello.wait(0.5):
            if self.qemu.poll() is not None:
                raise LabError(f"QEMU exited with {self.qemu.returncode} during boot")
            if time.monotonic() > deadline:
                raise LabError(f"guest agent not ready after {timeout:.0f} s")
        self.hello = self._pending.pop(0)[1]
        if self.hello is None or "error" in self.hello:
            raise LabError(f"guest agent failed: {self._dead or self.hello}")
        return self.hello["uptime"]

    def _reader(self) -> None:
        buf = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    with self._plock:
                        slot = self._pending.get(msg.get("id"))
                    if slot is not None:
                        slot[1] = msg
                        slot[0].set()
        except OSError:
            pass
        self._dead = "agent connection closed"
        with self._plock:
            for slot in self._pending.values():
                slot[0].set()

    def stop(self, timeout: float = 15) -> None:
        """Power the guest off (agent kills its processes, syncs the share); kill QEMU if needed.

        Safe to call more than once and after any failure.
        """
        if self.qemu is not None and self.qemu.poll() is None:
            if self._dead is None and self._sock is not None:
                try:
                    self.call("shutdown", _wait=10)
                except LabError:
                    pass
            try:
                self.qemu.wait(timeout)
            except subprocess.TimeoutExpired:
                self.qemu.terminate()
                try:
                    self.qemu.wait(5)
                except subprocess.TimeoutExpired:
                    self.qemu.kill()
                    self.qemu.wait()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for p in (self.sock_path,):
            p.unlink(missing_ok=True)
        if self._sockdir != self.rundir:
            try:
                self._sockdir.rmdir()
            except OSError:
                pass

    # ---- agent calls ---------------------------------------------------------------------
    def call(self, op: str, _wait: float | None = 60, **args) -> dict:
        """Send one request and wait up to `_wait` s for its reply; raise LabError on failure."""
        if self._dead:
            raise LabError(f"guest agent unavailable ({self._dead}); op {op}")
        rid = next(self._ids)
        started = time.monotonic()
        slot = [threading.Event(), None]
        with self._plock:
            self._pending[rid] = slot
        data = (json.dumps({"id": rid, "op": op, **args}) + "\n").encode()
        try:
            with self._wlock:
                self._sock.sendall(data)
            if not slot[0].wait(_wait):
                raise LabError(f"guest agent did not answer {op} within {_wait} s")
        finally:
            with self._plock:
                self._pending.pop(rid, None)
            self._trace(op, args, time.monotonic() - started)
        reply = slot[1]
        if reply is None:
            raise LabError(f"guest agent unavailable ({self._dead}); op {op}")
        if "error" in reply:
            raise LabError(f"guest agent: {op} failed: {reply['error']}")
        return reply

    def _trace(self, op: str, args: dict, seconds: float) -> None:
        """One line per agent request in calls.tsv (host time, seconds, op, command): where a
        check's time goes.  Best effort: a failed write never fails a check."""
        what = args.get("cmd") or args.get("path") or ""
        try:
            with open(self.rundir / "calls.tsv", "a", encoding="utf-8") as f:
                f.write(f"{time.monotonic():.2f}\t{seconds:.3f}\t{op}\t"
                        f"{' '.join(str(what).split())[:200]}\n")
        except OSError:
            pass

    def run(self, cmd: str, timeout: float = 60) -> tuple[int, str, str]:
        """Run `cmd` with bash in the guest; (rc, stdout, stderr). Raises LabError on timeout.

        In a background VM the limit is BACKGROUND_SLOWDOWN times longer: at SCHED_IDLE beside
        the checks' VM (both -smp 2) it gets no CPU for minutes at a time, and a limit there
        only guards against a hang (a `scanguardctl status` has taken over 60 s there, an
        `apt-get install` 212 s)."""
        if self.background:
            timeout *= BACKGROUND_SLOWDOWN
        reply = self.call("run", cmd=cmd, timeout=timeout, _wait=timeout + 30)
        if reply.get("timeout"):
            raise GuestCommandError(f"guest command timed out after {timeout} s: {cmd}\n"
                                    f"stdout: {reply['out'][-2000:]}\nstderr: {reply['err'][-2000:]}")
        return reply["rc"], reply["out"], reply["err"]

    def check(self, cmd: str, timeout: float = 60) -> str:
        """Run `cmd`; return stdout, raise GuestCommandError unless it exits 0."""
        rc, out, err = self.run(cmd, timeout)
        if rc != 0:
            raise GuestCommandError(f"guest command failed (rc {rc}): {cmd}\n"
                                    f"stdout: {out[-2000:]}\nstderr: {err[-2000:]}")
        return out

    def spawn(self, cmd: str, name: str, cwd: str | None = None) -> GuestProcess:
        """Start `cmd` in the background; its output goes to /lab/logs/<name>.log."""
        taken = {p.name for p in self.procs}
        base, n = name, 1
        while name in taken:  # a log per process: never append to an earlier one
            n += 1
            name = f"{base}-{n}"
        log = f"{GUEST_SHARE}/logs/{name}.log"
        pid = self.call("spawn", cmd=cmd, log=log, cwd=cwd)["pid"]
        proc = GuestProcess(self, pid, name, log)
        self.procs.append(proc)
        return proc

    def read_file(self, path: str) -> bytes:
        return base64.b64decode(self.call("read", path=path)["data"])

    def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        if isinstance(data, str):
            data = data.encode()
        self.call("write", path=path, data=base64.b64encode(data).decode(), mode=mode)

    def fetch(self, path: str, dest: Path) -> Path:
        """Copy a guest file to the host."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self.read_file(path))
        return dest

    def guest_time(self) -> float:
        """The guest's wall clock (the clock of every timestamp in logs and captures)."""
        return self.call("time")["t"]

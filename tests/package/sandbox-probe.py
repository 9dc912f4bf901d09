#!/usr/bin/python3
"""Probe the sandbox of scanguard.service from inside it: does each directive really apply?

tests/package/vm-check.sh runs this as an extra `ExecStartPre=` of the installed unit (a
temporary drop-in), so it gets exactly the daemon's user, namespaces, mounts, seccomp filter
and capabilities.  Each check provokes what one directive forbids and expects the kernel to
refuse, plus the daemon's own needs (its state directory, AF_UNIX, rtnetlink), which must work.
A directive that silently did nothing (an old kernel, a typo in the unit) fails here.

    sandbox-probe.py RESULT_FILE      one line per check: "ok NAME: detail" or "BAD NAME: detail"

Standard library only; always exits 0 so that the unit still starts and the caller reads the file.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import socket
import stat
import sys

results: list[str] = []


def report(ok: bool, name: str, detail: str) -> None:
    results.append(f"{'ok' if ok else 'BAD'} {name}: {detail}")


def refused(name: str, action, expected: tuple[int, ...], what: str) -> None:
    """`action()` must fail with one of the `expected` errnos."""
    try:
        action()
    except OSError as e:
        report(e.errno in expected, name, f"{what} -> {errno.errorcode.get(e.errno, e.errno)}")
    else:
        report(False, name, f"{what} succeeded")


def works(name: str, action, what: str) -> None:
    try:
        action()
    except OSError as e:
        report(False, name, f"{what} -> {e}")
    else:
        report(True, name, f"{what} works")


def status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


libc = ctypes.CDLL(None, use_errno=True)


def libc_call(fn: str, *args) -> None:
    if getattr(libc, fn)(*args) == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def main() -> None:
    out = sys.argv[1]
    st = status()
    report(st["NoNewPrivs"].strip() == "1", "NoNewPrivileges", f"NoNewPrivs {st['NoNewPrivs']}")
    report(all(int(st[k], 16) == 0 for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")),
           "CapabilityBoundingSet/AmbientCapabilities",
           " ".join(f"{k} {st[k]}" for k in ("CapEff", "CapBnd", "CapAmb")))
    report(st["Seccomp"].strip() == "2", "SystemCallFilter", f"Seccomp mode {st['Seccomp']}")
    report(st.get("Umask") == "0077", "UMask", f"Umask {st.get('Umask')}")

    # MemoryDenyWriteExecute: no memory both writable and executable, no making memory executable.
    refused("MemoryDenyWriteExecute", lambda: mmap.mmap(
        -1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC),
        (errno.EPERM, errno.EACCES), "anonymous mmap(PROT_WRITE|PROT_EXEC)")
    # ctypes callbacks need executable trampolines from libffi; Debian 12's libffi 3.4 uses
    # static trampolines (pre-built code pages), so they must still work under the filter.
    try:
        cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)
        report(cb(41) == 42, "MemoryDenyWriteExecute+ctypes", "a ctypes (libffi) callback runs")
    except Exception as e:  # MemoryError from libffi when it cannot get W+X memory
        report(False, "MemoryDenyWriteExecute+ctypes", f"ctypes callback failed: {e!r}")

    # RestrictAddressFamilies=AF_UNIX AF_NETLINK
    for fam in ("AF_INET", "AF_INET6", "AF_PACKET"):
        refused("RestrictAddressFamilies", lambda fam=fam: socket.socket(getattr(socket, fam),
                socket.SOCK_DGRAM).close(), (errno.EAFNOSUPPORT,), f"socket({fam})")
    works("RestrictAddressFamilies", lambda: socket.socket(socket.AF_UNIX,
          socket.SOCK_STREAM).close(), "socket(AF_UNIX)")
    works("RestrictAddressFamilies", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
          socket.NETLINK_ROUTE).close(), "socket(AF_NETLINK, NETLINK_ROUTE)")

    # SystemCallFilter=~@privileged @resources (errno EPERM); each call below is allowed to an
    # unprivileged process without a filter.
    work = "/run/scanguard/.probe"
    with open(work, "w"):
        pass
    refused("SystemCallFilter", lambda: os.chown(work, -1, -1), (errno.EPERM,),
            "chown(own file, -1, -1) [@privileged]")
    refused("SystemCallFilter", lambda: os.setpriority(os.PRIO_PROCESS, 0, 19), (errno.EPERM,),
            "setpriority(self, 19) [@resources]")
    # RestrictSUIDSGID: the owner may normally set the set-uid bit on its own file.
    refused("RestrictSUIDSGID", lambda: os.chmod(work, 0o4700), (errno.EPERM,),
            "chmod(own file, 04700)")
    os.unlink(work)
    # RestrictNamespaces / LockPersonality / RestrictRealtime
    refused("RestrictNamespaces", lambda: libc_call("unshare", 0x10000000), (errno.EPERM,),
            "unshare(CLONE_NEWUSER)")
    refused("LockPersonality", lambda: libc_call("personality", 0x0008), (errno.EPERM,),
            "personality(PER_LINUX32)")
    refused("RestrictRealtime", lambda: os.sched_setscheduler(0, os.SCHED_FIFO,
            os.sched_param(1)), (errno.EPERM,), "sched_setscheduler(SCHED_FIFO)")

    # File system: ProtectSystem=strict, RuntimeDirectory=, PrivateTmp=, ProtectHome=
    for path in ("/etc/scanguard/probe", "/usr/probe", "/var/lib/probe"):
        refused("ProtectSystem=strict", lambda path=path: open(path, "w").close(), (errno.EROFS,),
                f"create {path}")
    works("RuntimeDirectory", lambda: (open("/run/scanguard/.probe2", "w").close(),
          os.unlink("/run/scanguard/.probe2")), "write in /run/scanguard")
    mode = stat.S_IMODE(os.stat("/run/scanguard").st_mode)
    report(mode == 0o711, "RuntimeDirectoryMode", f"/run/scanguard mode {mode:o}")
    tmp_entries = sorted(os.listdir("/tmp"))
    report(tmp_entries == [] and os.access("/tmp", os.W_OK), "PrivateTmp",
           f"/tmp writable, entries {tmp_entries}")
    for path in ("/home", "/root", "/run/user"):
        if os.path.exists(path):
            m = stat.S_IMODE(os.stat(path).st_mode)
            report(m == 0, "ProtectHome", f"{path} mode {m:o} (inaccessible)")
    # Kernel and control-group file systems read-only.
    for name, path in (("ProtectKernelTunables", "/sys"),
                       ("ProtectControlGroups", "/sys/fs/cgroup")):
        report(bool(os.statvfs(path).f_flag & os.ST_RDONLY), name, f"{path} mounted read-only")
    # ProcSubset=pid: only the process directories; /proc/sys (ProtectKernelTunables= would make
    # it read-only) is not there at all.
    hidden = [p for p in ("/proc/sys", "/proc/net", "/proc/meminfo", "/proc/uptime")
              if os.path.lexists(p)]
    report(hidden == [] and os.path.exists("/proc/self/stat"), "ProcSubset=pid",
           f"/proc/self/stat readable, visible of /proc/sys, /proc/net, /proc/meminfo, "
           f"/proc/uptime: {hidden}")
    modules = "/usr/lib/modules" if os.path.isdir("/usr/lib/modules") else "/lib/modules"
    m = stat.S_IMODE(os.stat(modules).st_mode)
    report(m == 0, "ProtectKernelModules", f"{modules} mode {m:o} (inaccessible)")
    report(not os.path.exists("/dev/kmsg") and not os.access("/proc/kmsg", os.R_OK),
           "ProtectKernelLogs", "/dev/kmsg absent, /proc/kmsg unreadable")
    # PrivateDevices: a minimal /dev (no block or serial devices, no virtio ports).
    dev = set(os.listdir("/dev"))
    minimal = {"char", "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm",
               "mqueue", "hugepages", "log", "stdin", "stdout", "stderr", "fd", "core"}
    report(dev <= minimal, "PrivateDevices", f"/dev has {sorted(dev)}")
    # ProtectProc=invisible: processes of other users are not even listed.
    others = [p for p in os.listdir("/proc") if p.isdigit() and os.stat(f"/proc/{p}").st_uid != os.getuid()]
    report(not os.path.exists("/proc/1") and not others, "ProtectProc=invisible",
           f"/proc/1 hidden, {len(others)} foreign processes visible")
    # PrivateUsers: only root and the service user are mapped.
    with open("/proc/self/uid_map") as f:
        uid_map = [line.split() for line in f]
    report(len(uid_map) <= 2 and all(r[2] == "1" for r in uid_map), "PrivateUsers",
           f"uid_map {uid_map}")
    with open(out, "w") as f:
        f.write("\n".join(results) + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the caller must see a failure, not a missing file
        with open(sys.argv[1], "w") as f:
            f.write("\n".join(results) + f"\nBAD probe: crashed: {e!r}\n")

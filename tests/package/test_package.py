"""The Debian package: it builds from a clean tree, lintian has nothing to say, the unit is
hardened, and the .deb holds exactly the layout the other parts of the project rely on.

Run with /usr/bin/python3 -m pytest tests/package (needs the Makefile's DEPS_DEB).  The build
runs once per session (about 10 s) in a copy of the working tree made of the files git would
commit, so uncommitted work is tested and stray local files are not.  Installing the .deb on
a booted system is tests/package/vm-check.sh, run in the lab VM.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_DENY_POLICY, start_private_bus

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "scanguard.service"
MAX_EXPOSURE = 1.0

# pyenv or a virtualenv on PATH must not leak into the build: Debian builds with /usr/bin.
ENV = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
for _var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DEB_BUILD_OPTIONS", "DEB_BUILD_PROFILES"):
    ENV.pop(_var, None)
# This build is for what the package is (contents, lintian, the unit's hardening, the lab's
# package VM), not for the tests dh_auto_test runs: those ran in `make test`'s unit step, and the
# build with them, Build-Depends alone installed, is the clean-install step's (`make deb` as the
# README has it, on each release).  Running them here again costs ≈55 s per release.
ENV["DEB_BUILD_OPTIONS"] = "nocheck"

# Where this release's debhelper installs units (debian/rules): /lib on Debian 12, /usr/lib on 13.
_VERSION = Path("/etc/debian_version").read_text().strip()  # "12.11", "13.2", or "trixie/sid"
DEBIAN_MAJOR = int(_VERSION.split(".")[0]) if _VERSION[:1].isdigit() else 99  # testing: newest
UNIT_DIR = "./lib/systemd/system" if DEBIAN_MAJOR <= 12 else "./usr/lib/systemd/system"

# Every file the package must install besides the Python package itself: path -> mode.
INSTALLED = {
    f"{UNIT_DIR}/scanguard.service": "-rw-r--r--",
    "./usr/lib/sysusers.d/scanguard.conf": "-rw-r--r--",
    "./usr/share/dbus-1/system.d/io.github.nm_scanguard.ScanGuard1.conf": "-rw-r--r--",
    "./usr/share/dbus-1/system-services/io.github.nm_scanguard.ScanGuard1.service": "-rw-r--r--",
    "./usr/share/dbus-1/interfaces/io.github.nm_scanguard.ScanGuard1.xml": "-rw-r--r--",
    "./usr/share/polkit-1/actions/io.github.nm_scanguard.policy": "-rw-r--r--",
    "./usr/lib/NetworkManager/dispatcher.d/90-scanguard": "-rwxr-xr-x",
    "./usr/share/polkit-1/rules.d/50-nm-scanguard.rules": "-rw-r--r--",
    "./usr/libexec/nm-scanguard/nm-scanguard-scan-deferral": "-rwxr-xr-x",
    "./etc/scanguard/scanguard.conf": "-rw-r--r--",
    "./usr/bin/scanguardd": "-rwxr-xr-x",
    "./usr/bin/scanguardctl": "-rwxr-xr-x",
    "./usr/share/man/man8/scanguardd.8.gz": "-rw-r--r--",
    "./usr/share/man/man1/scanguardctl.1.gz": "-rw-r--r--",
    "./usr/share/man/man5/scanguard.conf.5.gz": "-rw-r--r--",
    "./usr/share/bash-completion/completions/scanguardctl": "-rw-r--r--",
    "./usr/share/doc/nm-scanguard/copyright": "-rw-r--r--",
    "./usr/share/doc/nm-scanguard/docs/demo-example.png": "-rw-r--r--",
    "./usr/share/doc/nm-scanguard/nm_scanguard/io.github.nm_scanguard.ScanGuard1.xml": "lrwxrwxrwx",
    "./usr/lib/python3/dist-packages/nm_scanguard/__init__.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/daemon.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/service.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/bgscan/__init__.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/bgscan/suspension_table.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/guard/guard.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/daemon/api/methods.py": "-rw-r--r--",
    "./usr/lib/python3/dist-packages/nm_scanguard/cli/scanguardctl.py": "-rw-r--r--",
}

DEPENDS = [
    # dbus-fast before 2.0 marshals non-ASCII strings wrongly: Debian 12 gets dbus-next
    "python3-dbus-fast (>= 2) | python3-dbus-next",
    "python3-gi",
    "gir1.2-nm-1.0",
    "python3-systemd",
    "network-manager (>= 1.10)",
    "wpasupplicant",
    "dbus",
]


def run(cmd: list[str], cwd: Path | None = None, check: bool = True,
        preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=ENV, text=True, capture_output=True, check=check,
                          preexec_fn=preexec_fn)


class BuildError(RuntimeError):
    pass


# The last .deb built on this release, under the key of what went into it (build_key): the lab's
# package VM installs the one the package step built instead of building it again beside the
# lab's checks (85 s of the two cores).  One folder per release: Debian 13's root sees the same
# tree (tests/debian_roots/trixie.py).
DEB_CACHE = REPO / ".cache" / "deb" / _VERSION.replace("/", "-")


def _tree_files() -> list[str]:
    """The files of the tree as git sees it (tracked, and untracked but not ignored)."""
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    return sorted(name for name in filter(None, files.stdout.split("\0")) if (REPO / name).is_file())


def build_key() -> str:
    """What a build's .deb depends on: every file's name and bytes, the release and its
    debhelper and dpkg."""
    h = hashlib.sha256()
    for name in _tree_files():
        h.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    tools = run(["dpkg-query", "-W", "-f=${Package} ${Version}\n", "debhelper", "dpkg-dev"],
                check=False).stdout
    h.update((_VERSION + "\n" + tools).encode())
    return h.hexdigest()[:16]


def _keep(built: dict, key: str) -> None:
    shutil.rmtree(DEB_CACHE, ignore_errors=True)
    (DEB_CACHE / key).mkdir(parents=True)
    shutil.copy2(built["deb"], DEB_CACHE / key / built["deb"].name)
    (DEB_CACHE / key / "seconds").write_text(f"{built['seconds']:.1f}\n")


def built_before() -> dict | None:
    """The .deb kept by the last build_deb() if the tree, the release and its build tools are
    the same now ({"deb", "seconds", "key"}), else None."""
    key = build_key()
    debs = sorted((DEB_CACHE / key).glob("nm-scanguard_*_all.deb"))
    if len(debs) != 1:
        return None
    return {"deb": debs[0], "seconds": float((DEB_CACHE / key / "seconds").read_text()), "key": key}


def build_deb(top: Path, preexec_fn=None) -> dict:
    """Copy the tree as git sees it into `top`, build source + binary packages there, return the
    artefacts (raises BuildError) and keep the .deb for built_before().  `preexec_fn` runs in
    dpkg-buildpackage's process (the lab builds at idle priority while its checks run:
    tests/lab/package_vm.py)."""
    for tool in ("dpkg-buildpackage", "lintian", "dh", "git"):
        if not shutil.which(tool, path=ENV["PATH"]):
            raise BuildError(f"{tool} is missing: run `make deps-deb`")
    key = build_key()
    src = top / "nm-scanguard"
    src.mkdir()
    for name in _tree_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    # A private repository in the copy, to see what the build leaves behind.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    run(git + ["init", "-q"], cwd=src)
    run(git + ["add", "-A"], cwd=src)
    run(git + ["commit", "-q", "-m", "snapshot"], cwd=src)

    t0 = time.monotonic()
    proc = run(["dpkg-buildpackage", "-us", "-uc"], cwd=src, check=False, preexec_fn=preexec_fn)
    seconds = time.monotonic() - t0
    (top / "build.log").write_text(proc.stdout + proc.stderr)
    print(f"\n[package] dpkg-buildpackage -us -uc: {seconds:.1f} s, exit {proc.returncode}, "
          f"log {top / 'build.log'}", flush=True)
    if proc.returncode:
        raise BuildError("package build failed:\n" + (proc.stdout + proc.stderr)[-4000:])
    debs = sorted(top.glob("nm-scanguard_*_all.deb"))
    changes = sorted(top.glob("nm-scanguard_*.changes"))
    if len(debs) != 1 or len(changes) != 1:
        raise BuildError(f"expected one .deb and one .changes: {sorted(p.name for p in top.iterdir())}")
    built = {"src": src, "deb": debs[0], "changes": changes[0], "seconds": seconds}
    if key == build_key():  # the tree did not change while it built
        try:
            _keep(built, key)
        except OSError as e:  # Debian 13's root sees the tree read-only
            print(f"[package] the .deb is not kept for the lab ({e})", flush=True)
    return built


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The packages built once per session from a copy of the tree (`build_deb`)."""
    try:
        return build_deb(tmp_path_factory.mktemp("deb"))
    except BuildError as e:
        pytest.fail(str(e))


def test_lintian_clean(build: dict) -> None:
    """lintian on the .changes checks the .dsc, the source and the .deb together."""
    proc = run(["lintian", "--display-info", "--pedantic", str(build["changes"])], check=False)
    out = proc.stdout + proc.stderr
    tags = [line for line in out.splitlines() if re.match(r"^[EWIPXO]: ", line)]
    print("\n[package] lintian tags:\n  " + ("\n  ".join(tags) if tags else "(none)"))
    bad = [line for line in tags if line.startswith(("E: ", "W: "))]
    assert not bad, "lintian errors/warnings:\n" + out


def test_a_killed_daemon_always_comes_back() -> None:
    """The daemon killed while guarding (the OOM killer, a crash) left bgscan "" that only its
    next start restores: Restart= covers every failure and no start limit can leave the unit
    failed after a few kills in a row; RestartSec= paces a crash loop instead."""
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for line in UNIT.read_text().splitlines():
        if re.fullmatch(r"\[\w+\]", line):
            current = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            sections.setdefault(current, {})[key] = value
    assert sections["Unit"].get("StartLimitIntervalSec") == "0"
    assert sections["Service"]["Restart"] in ("on-failure", "always")
    assert sections["Service"].get("RestartSec") == "2s"


def test_unit_exposure() -> None:
    proc = run(["systemd-analyze", "security", "--offline=true", str(UNIT)], check=False)
    out = proc.stdout + proc.stderr
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", out)
    assert m, out
    score = float(m.group(1))
    open_items = [line for line in out.splitlines() if line.startswith("✗")]
    print(f"\n[package] systemd-analyze security --offline=true: exposure {score} "
          f"(limit {MAX_EXPOSURE}; power-profiles-daemon 1.2)\n  " + "\n  ".join(open_items))
    assert score <= MAX_EXPOSURE, out


def test_installed_layout_and_modes(build: dict) -> None:
    listing = run(["dpkg-deb", "-c", str(build["deb"])]).stdout
    modes = {}
    for line in listing.splitlines():
        fields = line.split()
        modes[fields[5]] = (fields[0], fields[1])
    problems = []
    for path, mode in INSTALLED.items():
        if path not in modes:
            problems.append(f"missing {path}")
        elif modes[path] != (mode, "root/root"):
            problems.append(f"{path}: {modes[path]} instead of {mode} root/root")
    assert not problems, "\n".join(problems) + "\n\n" + listing


def test_control_fields(build: dict) -> None:
    fields = run(["dpkg-deb", "-f", str(build["deb"]), "Depends", "Architecture",
                  "Package"]).stdout
    print("\n[package] " + fields.strip().replace("\n", "\n  "))
    depends = [d.strip() for d in re.search(r"^Depends: (.*)$", fields, re.M).group(1).split(",")]
    missing = [d for d in DEPENDS if d not in depends]
    assert not missing, f"Depends lacks {missing}: {depends}"
    # The counters come over rtnetlink with the standard library since issue 21 (netlink.py)
    assert not [d for d in depends if "pyroute2" in d], depends
    assert "Architecture: all" in fields and "Package: nm-scanguard" in fields


def test_maintainer_scripts(build: dict, tmp_path: Path) -> None:
    """Conffile; user created and the bus policy reloaded before the unit starts; started on
    install, stopped on remove."""
    run(["dpkg-deb", "-e", str(build["deb"]), str(tmp_path / "ctl")])
    ctl = tmp_path / "ctl"
    assert (ctl / "conffiles").read_text().split() == ["/etc/scanguard/scanguard.conf"]
    postinst = (ctl / "postinst").read_text()
    sysusers = postinst.find("systemd-sysusers")
    reload = postinst.find("org.freedesktop.DBus.ReloadConfig")
    start = postinst.find("deb-systemd-invoke $_dh_action 'scanguard.service'")
    # the user exists and dbus-daemon has re-read the policy naming it before the first start
    assert 0 <= sysusers < reload < start, postinst
    assert "deb-systemd-helper enable 'scanguard.service'" in postinst
    assert "deb-systemd-invoke stop 'scanguard.service'" in (ctl / "prerm").read_text()
    postrm = (ctl / "postrm").read_text()
    assert "rm -rf /run/scanguard" in postrm and "deb-systemd-helper purge" in postrm


def test_man_pages(build: dict) -> None:
    """Generated pages carry the right section and a whatis line (`name \\- summary`)."""
    pages = build["src"] / "debian" / "nm-scanguard" / "usr" / "share" / "man"
    for rel, name, section in (("man8/scanguardd.8.gz", "scanguardd", "8"),
                               ("man1/scanguardctl.1.gz", "scanguardctl", "1"),
                               ("man5/scanguard.conf.5.gz", "scanguard.conf", "5")):
        text = run(["zcat", str(pages / rel)]).stdout
        th = next(line for line in text.splitlines() if line.startswith(".TH "))
        assert th.startswith(f".TH {name.upper()} {section} "), th
        after_name = text.split(".SH NAME\n", 1)[1].splitlines()[0]
        assert after_name.startswith(f"{name} \\- "), f"{rel}: NAME line is {after_name!r}"


def test_build_leaves_tree_clean(build: dict) -> None:
    status = run(["git", "status", "--porcelain"], cwd=build["src"]).stdout
    assert status == "", f"the build left files git would see:\n{status}"


def test_conf_man_page_and_example_cover_every_key() -> None:
    sys.path.insert(0, str(REPO))
    try:
        from nm_scanguard.config import KEYS
    finally:
        sys.path.pop(0)
    man = (REPO / "systemd" / "scanguard.conf.5").read_text()
    example = (REPO / "nm_scanguard" / "scanguard.conf").read_text()
    undocumented = [k for k in KEYS if f".BI {k} " not in man and f".BR {k} " not in man]
    missing = [k for k in KEYS if not re.search(rf"^#?{k} = ", example, re.M)]
    assert not undocumented, f"scanguard.conf(5) lacks {undocumented}"
    assert not missing, f"nm_scanguard/scanguard.conf lacks {missing}"


def test_dbus_and_polkit_files_are_consistent() -> None:
    """Names in the policy, activation and polkit files agree with the unit."""
    sysd = REPO / "systemd"
    policy = ET.parse(sysd / "io.github.nm_scanguard.ScanGuard1.conf").getroot()
    owners = [(p.get("user"), a.get("own")) for p in policy.iter("policy") for a in p.iter("allow")
              if a.get("own")]
    assert owners == [("scanguard", "io.github.nm_scanguard.ScanGuard1")]
    for p in policy.iter("policy"):
        for a in p.iter("allow"):
            assert a.get("own") or a.get("send_destination") == "io.github.nm_scanguard.ScanGuard1"
    activation = (sysd / "io.github.nm_scanguard.ScanGuard1.service").read_text()
    for line in ("Name=io.github.nm_scanguard.ScanGuard1", "Exec=/bin/false", "User=scanguard",
                 "SystemdService=scanguard.service"):
        assert re.search(rf"^{re.escape(line)}$", activation, re.M), line
    unit = UNIT.read_text()
    for line in ("Type=dbus", "BusName=io.github.nm_scanguard.ScanGuard1", "User=scanguard"):
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line
    actions = {a.get("id"): a for a in ET.parse(sysd / "io.github.nm_scanguard.policy").getroot()
               .iter("action")}
    assert set(actions) == {"io.github.nm_scanguard.hold", "io.github.nm_scanguard.reload"}
    hold = actions["io.github.nm_scanguard.hold"].find("defaults")
    assert [hold.findtext(k) for k in ("allow_any", "allow_inactive", "allow_active")] == \
        ["auth_admin", "auth_admin", "yes"]
    for action in actions.values():
        owner = [a.text for a in action.iter("annotate")
                 if a.get("key") == "org.freedesktop.policykit.owner"]
        assert owner == ["unix-user:scanguard"], "a non-root daemon must own its polkit actions"


OWNER = """
import asyncio, sys
from dbus_fast.aio import MessageBus
async def main():
    bus = await MessageBus(bus_address=sys.argv[1]).connect()
    print(await bus.request_name("io.github.nm_scanguard.ScanGuard1"), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_dbus_policy_on_a_default_deny_bus() -> None:
    """The shipped policy on a bus that denies by default: who may own and what may be sent.

    The test runs as root and cannot become `scanguard` (which may not exist here), so the
    owner rule is exercised with a copy naming root; everything else is the shipped file.
    """
    tmp_path = Path(tempfile.mkdtemp(prefix="scanguard-policy-"))
    policy = tmp_path / "policy.conf"
    policy.write_text((REPO / "systemd" / "io.github.nm_scanguard.ScanGuard1.conf").read_text()
                      .replace('user="scanguard"', 'user="root"'))
    bus = start_private_bus(DEFAULT_DENY_POLICY, includes=[policy])
    owner = None
    try:
        address = bus.address
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

        def send(*call: str, user: list[str] = as_nobody) -> subprocess.CompletedProcess:
            return run(user + ["dbus-send", f"--bus={address}", "--print-reply", *call], check=False)

        # Nobody else may own the name.
        grab = run(as_nobody + ["/usr/bin/python3", "-c", OWNER, address], check=False)
        assert "not allowed to own" in grab.stderr, grab.stderr
        owner = subprocess.Popen(["/usr/bin/python3", "-c", OWNER, address], env=ENV,
                                 stdout=subprocess.PIPE, text=True)
        assert "PRIMARY_OWNER" in owner.stdout.readline()

        dest = ["--dest=io.github.nm_scanguard.ScanGuard1", "/io/github/nm_scanguard/ScanGuard1"]
        ping = send(*dest, "org.freedesktop.DBus.Peer.Ping")
        assert ping.returncode == 0, ping.stderr
        ours = send(*dest, "io.github.nm_scanguard.ScanGuard1.NoSuchMethod")
        assert "AccessDenied" not in ours.stderr and ours.returncode != 0, ours.stderr
        other = send(*dest, "org.freedesktop.DBus.ObjectManager.GetManagedObjects")
        assert "AccessDenied" in other.stderr, other.stderr
    finally:
        if owner:
            owner.kill()
            owner.wait()
        bus.stop()
        shutil.rmtree(tmp_path)

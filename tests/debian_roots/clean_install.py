#!/usr/bin/python3
"""A new user's install, from a clean machine, on Debian 12 and Debian 13 (make test's step
"clean machine"; `make clean-install` alone).

A user's machine is not this one: here every test tool is installed by the steps before, so a
package built here proves nothing about a fresh Debian.  So for each release:

1. **install**: a minimal root as a new machine has it (mmdebstrap --variant=apt plus git, make
   and ca-certificates: what the README's "Install" tells a user to have first), a clone of the
   tree, then the README's install commands word for word (read from README.md, so the README
   cannot drift from what is tested).  Then the installed result: `scanguardctl --version` and
   `scanguardd --version` print debian/changelog's version, `scanguardd --check-config` passes,
   and every file systemd/README.md's table names is where it says.
2. **upgrade**: another clean root builds the previous release from its own commit with its own
   `make deb` (DEB_BUILD_OPTIONS=nocheck: its tests ran when it was released), installs it, edits
   /etc/scanguard/scanguard.conf as an administrator would, then installs step 1's package over
   it as unattended-upgrades does (keeping the edited conffile), and checks the version and that
   the edit is kept.  That the service restarts on the new code needs a booted system: the lab's
   package VM checks it (tests/lab/package_vm.py, upgrade_check).

Each root is a throw-away overlay on a cached bare tree (tests/debian_roots/enter-root.sh), so nothing
a previous step or run installed can help it; what is cached is the bare tree (in
$TRIXIE_CACHE, built again when this file's recipe or the mirror changes) and the downloaded
.debs (apt's archive folder, one per release, bind-mounted).  The clone comes from a snapshot of
the tree as git sees it (committed and uncommitted files, not ignored ones), with its history,
since the root cannot reach the project's public address.

    clean_install.py run [--release bookworm|trixie ...]   both steps; a summary; exit 1 on failure
    clean_install.py check VERSION                          (inside a root) the installed result
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENTER = HERE / "enter-root.sh"
RELEASES = ("bookworm", "trixie")
NUMBER = {"bookworm": 12, "trixie": 13}
# What a new user has besides a minimal Debian: the README's "Install" names these.
USER_PACKAGES = ("git", "make", "ca-certificates")
INSTALL_HEADING = "## Install on Debian 12 or 13"
CLONE = re.compile(r"^git clone \S+( \S+)?$")
CONFFILE = "/etc/scanguard/scanguard.conf"
# The administrator's edit the upgrade must keep: a user's text and one setting.
EDIT = "\n# Café ☕: a local edit\nrelease_after = 20\n"
STEP_TIMEOUT = float(os.environ.get("CLEAN_INSTALL_TIMEOUT") or 900)


def log(message: str) -> None:
    print(message, flush=True)


# --- what the documents say -------------------------------------------------------------------

def readme_install_commands(readme: str) -> list[str]:
    """The shell commands of README.md's install section: the first ```sh block under its
    heading, comments and blank lines dropped, in order."""
    start = readme.find("\n" + INSTALL_HEADING + "\n")
    if start < 0:
        raise ValueError(f"README.md has no heading {INSTALL_HEADING!r}")
    block = re.search(r"^```sh\n(.*?)^```", readme[start:], re.M | re.S)
    if block is None:
        raise ValueError(f"README.md's {INSTALL_HEADING!r} has no ```sh block")
    commands = []
    for line in block.group(1).splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            commands.append(command)
    if not any(CLONE.match(c) for c in commands) or "make deb" not in commands:
        raise ValueError(f"README.md's install block must clone the source and run make deb: {commands}")
    return commands


def local_commands(commands: list[str], source: str) -> list[str]:
    """The README's commands with its `git clone URL [DIR]` cloning `source` instead: a root
    here reaches Debian's mirror, not the project's public address.  Everything else verbatim."""
    out = []
    for command in commands:
        m = CLONE.match(command)
        out.append(f"git clone -q {source}{m.group(1) or ' nm-scanguard'}" if m else command)
    return out


def installed_paths(table: str) -> list[tuple[str, int | None]]:
    """systemd/README.md's table of installed files: every absolute path of its "Installed as"
    column, each with the Debian release it is limited to when "(Debian N)" follows it (the
    unit's folder differs between 12 and 13), else None."""
    paths = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not line.lstrip().startswith("|"):
            continue
        for m in re.finditer(r"`(/[^`]+)`(\s*\(Debian (\d+)\))?", cells[1]):
            paths.append((m.group(1), int(m.group(3)) if m.group(3) else None))
    return paths


def debian_major(debian_version: str) -> int:
    """/etc/debian_version's "12.11" -> 12; a testing "trixie/sid" counts as the newest."""
    return int(debian_version.split(".")[0]) if debian_version[:1].isdigit() else 99


def dep8_names(control: Path = REPO / "debian" / "tests" / "control") -> list[list[str]]:
    """The test names of each stanza of debian/tests/control."""
    return [re.split(r"[\s,]+", m.strip()) for m in
            re.findall(r"^Tests:\s*(.+)$", control.read_text(encoding="utf-8"), re.M)]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def changelog_version(changelog: str) -> str:
    m = re.match(r"nm-scanguard \(([^)]+)\) ", changelog)
    if m is None:
        raise ValueError("debian/changelog does not start with an nm-scanguard entry")
    return m.group(1)


# --- inside a root, after the install ---------------------------------------------------------

def check_installed(version: str, systemd_readme: Path) -> dict:
    """What a user sees after the install; {"check": "PASS"|"FAIL: why"}."""
    seen: dict = {}

    def out(*cmd: str) -> tuple[int, str]:
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return p.returncode, (p.stdout + p.stderr).strip()

    for program in ("scanguardctl", "scanguardd"):
        rc, text = out(program, "--version")
        seen[f"{program} --version"] = ("PASS" if rc == 0 and text == f"{program} {version}"
                                        else f"FAIL: exit {rc}, printed {text!r}, not '{program} {version}'")
    rc, text = out("scanguardd", "--check-config")
    seen["scanguardd --check-config"] = "PASS" if rc == 0 else f"FAIL: exit {rc}: {text[-400:]}"
    release = debian_major(Path("/etc/debian_version").read_text().strip())
    paths = [p for p, only in installed_paths(systemd_readme.read_text(encoding="utf-8"))
             if only is None or only == release]
    missing = [p for p in paths if not os.path.lexists(p)]
    seen[f"{len(paths)} files where systemd/README.md says"] = (
        "PASS" if paths and not missing else f"FAIL: missing {missing or 'the table'}")
    rc, text = out("systemctl", "is-enabled", "scanguard.service")
    seen["scanguard.service enabled"] = "PASS" if text == "enabled" else f"FAIL: {text!r}"
    return seen


# --- on the host ------------------------------------------------------------------------------

@dataclass
class Result:
    release: str
    step: str
    ok: bool = False
    seconds: float = 0.0
    checks: dict = field(default_factory=dict)
    why: str = ""
    log: Path | None = None


def bare_root(release: str, cache: Path, mirror: str, security: str) -> Path:
    """The cached minimal root of `release` (built if missing): what a new machine has."""
    recipe = json.dumps(["mmdebstrap", "--variant=apt", USER_PACKAGES, release, mirror, security])
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    path = cache / f"clean-{release}-{digest}"
    if (path / "usr/bin/git").exists():
        return path
    for old in cache.glob(f"clean-{release}-" + "?" * 12):  # earlier recipes' roots
        shutil.rmtree(old, ignore_errors=True)
    tmp = cache / f".clean-{release}-{digest}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"    building the bare {release} root (mmdebstrap --variant=apt, {', '.join(USER_PACKAGES)})")
    t = time.monotonic()
    sources = [f"deb {mirror} {release} main", f"deb {mirror} {release}-updates main",
               f"deb {security} {release}-security main"]
    proc = subprocess.run(["mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
                           "--components=main", f"--include={','.join(USER_PACKAGES)}",
                           release, str(tmp), *sources], capture_output=True, text=True)
    if proc.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"mmdebstrap {release} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    tmp.rename(path)
    log(f"    bare {release} root built in {time.monotonic() - t:.0f} s: {path}")
    return path


def snapshot(top: Path) -> Path:
    """A clone of the repository with the tree as git sees it committed on top, so that the
    root's clone has the history (the previous release's commit) and uncommitted work."""
    src = top / "nm-scanguard.git"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(src)], check=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=src, capture_output=True, text=True,
                             check=True).stdout
    for name in filter(None, tracked.split("\0")):
        if not (REPO / name).exists():
            (src / name).unlink(missing_ok=True)
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    git = ["git", "-c", "user.name=clean-install", "-c", "user.email=clean-install@localhost"]
    subprocess.run(git + ["add", "-A"], cwd=src, check=True)
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=src).returncode:
        subprocess.run(git + ["commit", "-q", "-m", "the tree as git sees it"], cwd=src, check=True)
    return src


def in_root(root: Path, src: Path, archives: Path, out: Path, script: str, log_path: Path,
            timeout: float) -> int:
    """Run `script` (sh) as root inside a throw-away overlay on `root`, with the network, the
    snapshot at /src, apt's archive folder cached and `out` at /out; its output to log_path."""
    (out / "step.sh").write_text(script, encoding="utf-8")
    env = {**os.environ, "SCANGUARD_ROOT_NETWORK": "1",
           "SCANGUARD_ROOT_BINDS": f"{archives}:/var/cache/apt/archives {out}:/out"}
    with open(log_path, "w") as f:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
             "sh", str(ENTER), str(root), str(src), "sh", "-e", "/out/step.sh"],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        CHILDREN.add(proc)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            f.write(f"\n[clean-install] killed after {timeout:.0f} s\n")
            return 124
        finally:
            if proc.poll() is None:  # unshare --kill-child takes the whole root's processes along
                proc.kill()
                proc.wait()
            CHILDREN.discard(proc)


# The roots' processes, killed when this script is stopped (SIGTERM, SIGINT): a run cut short
# must not leave builds running into the next one's cache.
CHILDREN: set[subprocess.Popen] = set()


def stop_children(signum: int, _frame: object) -> None:
    for proc in list(CHILDREN):
        proc.kill()
    sys.exit(128 + signum)


# Set up as a person at a terminal answers: yes to apt's question, and apt keeps what it
# downloaded in the cache (the `apt` command deletes it by default) so the next run reuses it.
PREAMBLE = """\
printf 'APT::Get::Assume-Yes "true";\\nBinary::apt::APT::Keep-Downloaded-Packages "true";\\n' \\
    >/etc/apt/apt.conf.d/90clean-install
export DEBIAN_FRONTEND=noninteractive
cd /root
"""


def install_script(commands: list[str], version: str) -> str:
    lines = [PREAMBLE, "set -x"]
    lines += commands
    lines += ["set +x",
              "cp ../nm-scanguard_*_all.deb /out/",
              "apt-mark showauto >/out/auto-packages",
              f"python3 /src/tests/debian_roots/clean_install.py check {version} "
              "/src/systemd/README.md >/out/checks.json",
              AUTOPKGTEST]
    return "\n".join(lines) + "\n"


# debian/tests with autopkgtest itself, against the package just installed, from the clone.
# The throw-away root is the clean testbed, so the null runner is the one that fits: its test
# dependencies come from the archive here, as on Debian's CI (the unshare runner would unpack
# a second root inside this one; make archive-check uses it).  dbus-api's isolation-container
# (it starts buses and a network namespace) is what this root is: trixie's null runner would
# skip the test for it, so the restriction is waived here and only here.
AUTOPKGTEST = """\
apt-get install -q autopkgtest >/out/autopkgtest-install.log 2>&1
rc=0; autopkgtest --ignore-restrictions=isolation-container --output-dir /out/autopkgtest \\
    ../nm-scanguard_*_all.deb ./ -- null >/out/autopkgtest.log 2>&1 || rc=$?
echo $rc >/out/autopkgtest-rc
"""


def autopkgtest_results(summary: str) -> dict[str, str]:
    """autopkgtest's summary file (`NAME RESULT [why]` a line) -> {NAME: RESULT [why]}."""
    return {line.split()[0]: " ".join(line.split()[1:]) for line in summary.splitlines() if line.split()}


# README's "Is it scanning?": diagnose from a clone before installing, with Debian's
# python3-dbus-next alone.  A root has no Wi-Fi and no system bus: what this shows is that it
# starts with only those packages and says what is missing in one line (the lab records for real).
DIAGNOSE_FROM_A_CLONE = """\
apt-get update -qq && apt-get install -q python3-dbus-next >/out/diagnose-install.log 2>&1
git clone -q /src nm-scanguard-diagnose
rc=0; (cd nm-scanguard-diagnose && python3 -m nm_scanguard.cli.scanguardctl diagnose --help) \\
    >/out/diagnose-help 2>&1 || rc=$?; echo $rc >/out/diagnose-help-rc
rc=0; (cd nm-scanguard-diagnose && python3 -m nm_scanguard.cli.scanguardctl diagnose --seconds 1) \\
    >/out/diagnose-run 2>&1 || rc=$?; echo $rc >/out/diagnose-run-rc
rm -rf nm-scanguard-diagnose
"""


def upgrade_script(previous_commit: str, previous_version: str, deb_name: str) -> str:
    return PREAMBLE + DIAGNOSE_FROM_A_CLONE + f"""set -x
git clone -q /src nm-scanguard-previous
cd nm-scanguard-previous
git checkout -q {previous_commit}
DEB_BUILD_OPTIONS=nocheck DEB_BUILD_PROFILES=nocheck make deb
apt install ../nm-scanguard_{previous_version}_all.deb
test "$(dpkg-query -W -f '${{Version}}' nm-scanguard)" = {previous_version}
printf '%s' '{EDIT}' >>{CONFFILE}
cp {CONFFILE} /out/conffile-edited
apt-get install -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold /out/{deb_name}
set +x
dpkg-query -W -f '${{Version}}' nm-scanguard >/out/version-after
cp {CONFFILE} /out/conffile-after
rc=0; scanguardd --check-config >/out/check-config 2>&1 || rc=$?; echo $rc >/out/check-config-rc
"""


def previous_release() -> tuple[str, str]:
    sys.path.insert(0, str(REPO))
    from tests.lab.package_vm import previous_release as find  # one rule for "the previous release"
    return find()


def run_release(release: str, root: Path, cache: Path, src: Path, work: Path, version: str,
                previous: tuple[str, str] | None) -> list[Result]:
    """The install step on `root` (a bare root), then the upgrade step if the install passed.
    Two runs at once share only apt's archive folder, which apt locks itself."""
    results = []
    archives = cache / f"clean-archives-{release}"
    archives.mkdir(parents=True, exist_ok=True)
    (archives / "partial").mkdir(exist_ok=True)

    install = Result(release, "install", log=work / f"{release}-install.log")
    out = work / f"{release}-install"
    out.mkdir()
    commands = local_commands(readme_install_commands((REPO / "README.md").read_text("utf-8")), "/src")
    t = time.monotonic()
    rc = in_root(root, src, archives, out, install_script(commands, version), install.log, STEP_TIMEOUT)
    install.seconds = time.monotonic() - t
    try:
        install.checks = json.loads((out / "checks.json").read_text())
    except (OSError, ValueError):
        install.checks = {}
    auto = set(_read(out / "auto-packages").split())
    install.checks["make deb's build tools marked automatic (apt autoremove removes them)"] = (
        "PASS" if {"debhelper", "dh-python"} <= auto else "FAIL: debhelper or dh-python is marked manual")
    tests = autopkgtest_results(_read(out / "autopkgtest" / "summary"))
    expected = [t for stanza in dep8_names() for t in stanza]
    install.checks["autopkgtest (null runner in this root): " + (", ".join(expected))] = (
        "PASS" if tests and all(tests.get(t, "").startswith("PASS") for t in expected)
        else f"FAIL: exit {_read(out / 'autopkgtest-rc').strip()}: {tests or 'no summary'} "
             f"(log {out / 'autopkgtest.log'})")
    bad = [k for k, v in install.checks.items() if v != "PASS"]
    install.ok = rc == 0 and "scanguardctl --version" in install.checks and not bad
    install.why = "" if install.ok else (f"exit {rc}" + (f"; failed: {bad}" if bad else ""))
    results.append(install)
    debs = sorted(out.glob("nm-scanguard_*_all.deb"))
    if not install.ok or len(debs) != 1 or previous is None:
        if previous is None:
            results.append(Result(release, "upgrade", why="no previous release found"))
        elif not install.ok:
            results.append(Result(release, "upgrade", why="not run: the install failed"))
        return results

    prev_version, prev_commit = previous
    upgrade = Result(release, "upgrade", log=work / f"{release}-upgrade.log")
    uout = work / f"{release}-upgrade"
    uout.mkdir()
    shutil.copy2(debs[0], uout / debs[0].name)
    t = time.monotonic()
    rc = in_root(root, src, archives, uout, upgrade_script(prev_commit, prev_version, debs[0].name),
                 upgrade.log, STEP_TIMEOUT)
    upgrade.seconds = time.monotonic() - t

    def read(name: str) -> str:
        p = uout / name
        return p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""

    upgrade.checks = {
        f"{prev_version} ({prev_commit[:10]}) built and installed, then this tree's over it":
            "PASS" if rc == 0 else f"FAIL: exit {rc}",
        f"version after the upgrade is {version}":
            "PASS" if read("version-after") == version else f"FAIL: {read('version-after')!r}",
        "the administrator's edit of scanguard.conf is kept":
            "PASS" if read("conffile-after") and read("conffile-after") == read("conffile-edited")
            and EDIT in read("conffile-after") else "FAIL: the conffile after the upgrade differs",
        "before installing: diagnose --help from a clone with python3-dbus-next alone":
            "PASS" if read("diagnose-help-rc").strip() == "0" and "--seconds" in read("diagnose-help")
            else f"FAIL: exit {read('diagnose-help-rc').strip()}: {read('diagnose-help')[-300:]}",
        "before installing: diagnose from a clone names what is missing, in one line":
            "PASS" if read("diagnose-run-rc").strip() not in ("", "0")
            and len(read("diagnose-run").strip().splitlines()) == 1
            and "Traceback" not in read("diagnose-run")
            else f"FAIL: exit {read('diagnose-run-rc').strip()}: {read('diagnose-run')[-300:]}",
        "scanguardd --check-config passes with the kept edit":
            "PASS" if read("check-config-rc").strip() == "0" else f"FAIL: {read('check-config')[-300:]}",
    }
    upgrade.ok = rc == 0 and all(v == "PASS" for v in upgrade.checks.values())
    upgrade.why = "" if upgrade.ok else "; ".join(k for k, v in upgrade.checks.items() if v != "PASS")
    results.append(upgrade)
    return results


def run(releases: list[str], keep: bool) -> int:
    sys.path.insert(0, str(HERE))
    from trixie import DEFAULT_CACHE, locked, mirror_of_host  # one mirror rule, one cache lock

    signal.signal(signal.SIGTERM, stop_children)
    signal.signal(signal.SIGINT, stop_children)
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None or shutil.which("unshare") is None:
        log("clean_install.py: needs root, unshare and mmdebstrap (make clean-install installs it)")
        return 2
    cache = Path(os.environ.get("TRIXIE_CACHE") or DEFAULT_CACHE)
    mirror = os.environ.get("TRIXIE_MIRROR") or mirror_of_host()
    security = os.environ.get("CLEAN_INSTALL_SECURITY") or re.sub(r"/debian/?$", "/debian-security", mirror)
    version = changelog_version((REPO / "debian" / "changelog").read_text(encoding="utf-8"))
    try:
        previous: tuple[str, str] | None = previous_release()
    except Exception as e:  # reported as the upgrade's failure
        log(f"    previous release: {e}")
        previous = None
    work = Path(tempfile.mkdtemp(prefix="scanguard-clean-install-"))
    log(f"==> a new user's install from clean roots: {', '.join(releases)}; this tree {version}, "
        f"previous release {previous[0] + ' (' + previous[1][:10] + ')' if previous else 'none'}; "
        f"logs in {work}")
    results: list[Result] = []
    src = snapshot(work)
    roots: dict[str, Path] = {}
    per_release: dict[str, list[Result]] = {}
    with locked(cache):  # two runs must not build into one place; the roots are only read after
        for release in releases:
            try:
                roots[release] = bare_root(release, cache, mirror, security)
            except Exception as e:  # reported in the summary
                per_release[release] = [Result(release, "install", why=f"{type(e).__name__}: {e}")]

    def one(release: str) -> None:
        try:
            per_release[release] = run_release(release, roots[release], cache, src, work,
                                               version, previous)
        except Exception as e:  # reported in the summary
            per_release[release] = [Result(release, "install", why=f"{type(e).__name__}: {e}")]

    # The releases run side by side: each is mostly downloads, dpkg and one pytest process.
    threads = [threading.Thread(target=one, args=(r,)) for r in releases if r in roots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for release in releases:
        results += per_release[release]
    failed = False
    for r in results:
        log(f"    {'PASS' if r.ok else 'FAIL'} Debian {NUMBER[r.release]} ({r.release}) {r.step}: "
            f"{r.seconds:.0f} s" + (f" — {r.why}" if r.why else ""))
        for check, verdict in r.checks.items():
            log(f"        {verdict if verdict == 'PASS' else verdict}: {check}")
        if not r.ok:
            failed = True
            if r.log and r.log.exists():
                log(f"    --- last lines of {r.log} ---")
                log("\n".join(r.log.read_text(errors="replace").splitlines()[-60:]))
    if not failed and not keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="both steps on each release; a summary")
    r.add_argument("--release", action="append", choices=RELEASES)
    r.add_argument("--keep", action="store_true", help="keep the logs of a run that passed")
    c = sub.add_parser("check", help="(inside a root) the installed result, as JSON")
    c.add_argument("version")
    c.add_argument("systemd_readme", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "check":
        print(json.dumps(check_installed(args.version, args.systemd_readme), ensure_ascii=False))
        return 0
    return run(args.release or list(RELEASES), args.keep)


if __name__ == "__main__":
    sys.exit(main())

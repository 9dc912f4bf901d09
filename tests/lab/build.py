"""Everything the lab VM boots from, fetched or built on the host under $CACHE.

- Debian's kernel package (the exact ABI package `linux-image-amd64` depends on, fetched with
  `apt-get download` and unpacked with `dpkg -x`): a stock kernel that has mac80211_hwsim,
  unlike the host's own kernel.
- A module tree with `modules.dep` (the package ships none; `depmod -b` makes one on a
  hard-linked copy). The guest bind-mounts it on /lib/modules so `modprobe` works.
- A tiny initramfs: busybox, its shared libraries, the modules needed to mount the host's
  root over 9p, and tests/lab/initramfs-init.sh as /init.

All steps are idempotent; the kernel and module tree are reused between runs.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Loaded with insmod in this order by the initramfs: each needs the ones before it.
INITRAMFS_MODULES = [
    "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
    "netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "overlay",
]


# The guest's release: "bookworm" boots the host's own / (Debian 12, this machine), "trixie" a
# Debian 13 root tree built by tests/debian_roots/trixie.py (issue 10).  Chosen by SCANGUARD_LAB_RELEASE.
RELEASES = ("bookworm", "trixie")


def release() -> str:
    name = os.environ.get("SCANGUARD_LAB_RELEASE") or "bookworm"
    if name not in RELEASES:
        raise RuntimeError(f"SCANGUARD_LAB_RELEASE={name!r}: the lab knows {', '.join(RELEASES)}")
    return name


@dataclass
class KernelImage:
    version: str          # e.g. "6.1.0-56-amd64"
    vmlinuz: Path
    modules_root: Path    # contains lib/modules/<version> with modules.dep
    initramfs: Path
    # The tree the guest boots as its read-only root: the host's / (Debian 12) or a trixie root.
    guest_root: Path = Path("/")

    @property
    def modules_dir(self) -> Path:
        """The host directory of the module tree."""
        return self.modules_root / "lib" / "modules"

    @property
    def guest_modules_dir(self) -> str:
        """The same as the guest sees it, bind-mounted on its /lib/modules."""
        if self.guest_root == Path("/"):
            return str(self.modules_dir)
        return "/" + str(self.modules_dir.relative_to(self.guest_root))


def cache_dir() -> Path:
    default = Path(__file__).resolve().parents[2] / ".cache"
    return Path(os.environ.get("CACHE") or default).resolve()


def kernel_package_name() -> str:
    """The ABI package behind the `linux-image-amd64` metapackage, e.g. linux-image-6.1.0-56-amd64.

    Named exactly: `apt-get download 'linux-image-6.1.0-*-amd64'` would fetch every ABI (1.6 GB).
    """
    out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*Depends:\s*(linux-image-\d[\w.+-]*-amd64)\s*$", out, re.M)
    if not m:
        raise RuntimeError(f"cannot find the kernel ABI package in:\n{out}")
    return m.group(1)


def fetch_kernel(cache: Path) -> tuple[str, Path]:
    """Download and unpack the kernel package once; return (version, unpacked tree)."""
    pkg = kernel_package_name()
    version = pkg.removeprefix("linux-image-")
    base = cache / "kernel" / version
    tree = base / "pkg"
    stamp = base / ".unpacked"
    if stamp.exists():
        return version, tree
    base.mkdir(parents=True, exist_ok=True)
    for old in base.glob("*.deb"):
        old.unlink()
    # apt warns that it downloads "unsandboxed as root" into a directory _apt cannot write: harmless.
    subprocess.run(["apt-get", "download", "-q", pkg], cwd=base, check=True,
                   stdout=subprocess.DEVNULL)
    deb = next(base.glob(f"{pkg}_*.deb"))
    if tree.exists():
        shutil.rmtree(tree)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    deb.unlink()  # 70 MB we no longer need
    stamp.touch()
    return version, tree


def build_module_tree(cache: Path, version: str, tree: Path) -> Path:
    """A copy of lib/modules/<version> (hard links, so it costs no space) plus depmod's files."""
    root = cache / "kernel" / version / "modroot"
    if (root / "lib" / "modules" / version / "modules.dep").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    (root / "lib" / "modules").mkdir(parents=True)
    subprocess.run(["cp", "-al", str(tree / "lib" / "modules" / version),
                    str(root / "lib" / "modules" / version)], check=True)
    subprocess.run(["depmod", "-b", str(root), version], check=True)
    return root


def _shared_libs(binary: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m:
            libs.append(Path(m.group(1)))
    return libs


def build_initramfs(outdir: Path, tree: Path, version: str) -> Path:
    """Assemble the initramfs (≈1.5 MB, 0.1 s) in outdir from the modules of kernel `version`
    under tree/lib/modules; rebuilt every start so init edits take effect."""
    out = outdir / "initramfs.gz"
    staging = outdir / "initramfs"
    if staging.exists():
        shutil.rmtree(staging)
    for d in ("bin", "dev", "proc", "sys", "host", "rw", "newroot", "modules"):
        (staging / d).mkdir(parents=True)
    busybox = Path("/bin/busybox")
    shutil.copy2(busybox, staging / "bin" / "busybox")
    # Debian's busybox is linked against libc: carry its libraries at their usual paths.
    for lib in _shared_libs(busybox):
        real = lib.resolve()
        dest = staging / str(lib).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dest)
    if (staging / "lib64").exists() and not (staging / "lib").exists():
        (staging / "lib").symlink_to("lib64")
    (staging / "bin" / "sh").symlink_to("busybox")
    moddir = tree / "lib" / "modules" / version / "kernel"
    # trixie's kernel ships its modules xz-compressed (*.ko.xz), which busybox insmod cannot load:
    # the initramfs carries them decompressed.  A module of the list that the kernel does not
    # have as a module (6.12 folds fscache into netfs) is left out; the init skips it.
    index = {re.sub(r"\.ko(\.xz)?$", "", p.name): p for p in moddir.rglob("*.ko*")}
    for name in INITRAMFS_MODULES:
        src = index.get(name)
        if src is None:
            continue
        dest = staging / "modules" / f"{name}.ko"
        if src.name.endswith(".xz"):
            dest.write_bytes(lzma.decompress(src.read_bytes()))
        else:
            shutil.copy2(src, dest)
    init = staging / "init"
    shutil.copy2(HERE / "initramfs-init.sh", init)
    init.chmod(0o755)
    # No cpio on the host: busybox has one. Paths are given relative so the archive is rooted.
    names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    archive = subprocess.run(["/bin/busybox", "cpio", "-o", "-H", "newc"], cwd=staging,
                             input="\n".join(names).encode() + b"\n", capture_output=True,
                             check=True).stdout
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wb", compresslevel=6) as f:
        f.write(archive)
    tmp.rename(out)
    return out


def trixie_root(log=print) -> Path:
    """The trixie lab root (built by tests/debian_roots/trixie.py unless cached); its path."""
    script = HERE.parents[1] / "tests" / "debian_roots" / "trixie.py"
    proc = subprocess.run(["/usr/bin/python3", str(script), "lab-root"], stdout=subprocess.PIPE,
                          text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        log(line)
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"tests/debian_roots/trixie.py lab-root failed (exit {proc.returncode}); "
                           "its messages are above")
    return Path(lines[-1])


def prepare_root(cache: Path, root: Path) -> KernelImage:
    """Boot a release's root tree with its own kernel (the one its linux-image-amd64 installed,
    whose postinst ran depmod there): vmlinuz and modules come from the tree itself."""
    versions = sorted(p.name for p in (root / "usr" / "lib" / "modules").iterdir()
                      if (p / "modules.dep").exists())
    if len(versions) != 1:
        raise RuntimeError(f"{root}: expected one kernel with modules.dep under /usr/lib/modules, "
                           f"found {versions or 'none'}")
    version = versions[0]
    initramfs = build_initramfs(cache / "kernel" / f"{root.name}-{version}", root / "usr", version)
    return KernelImage(version=version, vmlinuz=root / "boot" / f"vmlinuz-{version}",
                       modules_root=root / "usr", initramfs=initramfs, guest_root=root)


MEDIUM_SOURCE = HERE / "medium" / "medium.c"


def build_medium(cache: Path) -> Path:
    """Compile the lab's wireless medium (tests/lab/medium/medium.c, libnl-genl) on the host;
    the guest runs it from $CACHE (both releases' roots have libnl-genl-3-200: iw and
    wpasupplicant need it).  Rebuilt when the source changes."""
    import hashlib
    digest = hashlib.sha256(MEDIUM_SOURCE.read_bytes()).hexdigest()[:12]
    out = cache / "medium" / digest / "scanguard-lab-medium"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libnl-genl-3.0"],
                           capture_output=True, text=True)
    if flags.returncode != 0:
        raise RuntimeError("pkg-config libnl-genl-3.0 failed: install libnl-genl-3-dev "
                           "(`make deps-lab` does)")
    tmp = out.with_suffix(f".tmp{os.getpid()}")  # two labs may build it at once
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp),
                    str(MEDIUM_SOURCE), *flags.stdout.split(), "-lm"], check=True)
    tmp.rename(out)
    return out


def prepare(cache: Path | None = None, log=print) -> KernelImage:
    """The kernel, modules and initramfs of a lab guest, made once and kept in `cache`.  Two
    labs may prepare at once (two sessions on one machine): a lock file makes the second wait
    for the first and find its work done."""
    import fcntl
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if release() == "trixie":
            return prepare_root(cache, trixie_root(log))
        version, tree = fetch_kernel(cache)
        modroot = build_module_tree(cache, version, tree)
        initramfs = build_initramfs(cache / "kernel" / version, tree, version)
        return KernelImage(version=version, vmlinuz=tree / "boot" / f"vmlinuz-{version}",
                           modules_root=modroot, initramfs=initramfs)


if __name__ == "__main__":
    img = prepare()
    print(img)

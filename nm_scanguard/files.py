"""Files the daemon reads or writes itself: the crash journal, the settings file, the scan-deferral
file.  Each caller words its own errors; what they share lives here, once:

- a bounded read that cannot hang or eat memory: opened without blocking (a FIFO planted at the
  path must not stop a start), checked with fstat on the open file (no window to swap it) to be a
  regular file of at most `limit` bytes, and never read past that limit even if it grows;
- an atomic write (temporary file, fchmod, optional fsync, rename), so that a reader never sees
  half a file and a crash leaves the old one;
- the words for what else a path can be ("a directory", "a FIFO", ...), and for why a read
  was refused;
- moving an unusable file aside, so that the next write can put a good one in its place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Literal

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)

Why = Literal["symlink", "open", "kind", "size", "grew", "read"]


def kind(mode: int) -> str | None:
    """What a file of `mode` is, for a message ("a FIFO"); None when no word fits."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None


class Unreadable(Exception):
    """`read_regular` refused or failed; `why` says which step, for the caller's own wording:
    "symlink" (refused to follow one), "open" and "read" (`error` says why), "kind" (not a
    regular file; `mode`), "size" (larger than the limit; `size`), "grew" (grew past the limit
    while being read)."""

    def __init__(self, why: Why, error: OSError | None = None, mode: int = 0, size: int = 0) -> None:
        super().__init__(why)
        self.why: Why = why
        self.error = error
        self.mode = mode
        self.size = size

    def describe(self, limit: int, what: str) -> str:
        """What is wrong with the file, as the end of "cannot use F: ..." (`limit` as given
        to read_regular; `what` the file's role, e.g. "a journal")."""
        strerror = self.error.strerror if self.error is not None else None
        if self.why == "symlink":
            return "it is a symbolic link, which is never followed"
        if self.why == "open":
            return f"cannot open it ({strerror})"
        if self.why == "kind":
            name = kind(self.mode)
            return f"it is {name + ', not' if name else 'not'} a regular file"
        if self.why == "size":
            return f"it is {self.size} bytes, more than the {limit} {what} can need"
        if self.why == "grew":
            return f"it grew past {limit} bytes while being read"
        return f"cannot read it ({strerror})"


def read_regular(path: str, limit: int, *, follow_symlinks: bool) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them.  Raises
    FileNotFoundError when nothing is there, Unreadable for anything else that is wrong."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise Unreadable("symlink", e) from None
        raise Unreadable("open", e) from None
    chunks: list[bytes] = []
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("kind", mode=info.st_mode)
        if info.st_size > limit:
            raise Unreadable("size", size=info.st_size)
        size = 0
        while size <= limit:  # the file may grow after fstat: never read past the limit
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Unreadable("grew")
    except OSError as e:
        raise Unreadable("read", e) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def write_atomic(path: str, data: bytes, *, mode: int, durable: bool) -> None:
    """Replace `path` with `data` in one rename, so that a reader sees the old file or the new
    one, never a part.  The directory must exist.  `durable`: fsync before the rename, for a file
    that must survive a crash of the machine as written (the journal), not only of the process.
    The temporary file is `.<name without suffix>.XXXXXXXX.tmp` beside it, removed on failure."""
    import tempfile  # here, not at the top: scanguardd's start does without (daemon/entry.py)

    directory = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def set_aside(path: str, bad: str) -> None:
    """rename(path, bad); if an old `bad` is in the way (a directory, or a file where `path` is
    a directory), remove that first; as a last resort remove `path` itself.  Raises OSError
    only when `path` is still there."""
    try:
        os.replace(path, bad)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        _remove(bad)
    try:
        os.replace(path, bad)
    except OSError:
        _remove(path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    else:
        os.unlink(path)

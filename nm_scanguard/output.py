"""Standard output and standard error of scanguardctl and scanguardd, whatever they are connected
to.  `run_main` wraps each program's main(), so that no print needs handling of its own:

- A reader that has gone (`scanguardctl config show | head -1`).  Python ignores SIGPIPE, so a
  write to a pipe whose reader has gone raises BrokenPipeError, and one still buffered fails
  again while the interpreter exits ("Exception ignored ...").  As Python's documentation of the
  signal module recommends, the program stops writing, points its standard output at /dev/null
  so that nothing is flushed at exit, and ends quietly with 141 (128 + SIGPIPE), what the shell
  reports for cat, ls or any C program killed by that signal: a script with `set -o pipefail`
  sees the same status from us as from them, and not the 1 that means "scanguardctl found a
  problem".  SIGPIPE itself is not restored to its default action: it would also kill the
  process when its D-Bus socket closes.
- Any other failed write (`> /dev/full`, an I/O error): one line on standard error and exit
  status 1, as coreutils do ("write error: No space left on device"); output that went nowhere
  is never reported as success.  This holds where the failure was swallowed on the way too:
  argparse's --help and --version ignore write errors.
- No standard output at all (`>&-`): Python sets sys.stdout to None, and print() then writes
  nothing, silently.  Here a write fails as a write to a closed descriptor does in C (EBADF),
  and is reported as above; a command that writes nothing is not affected.
- Text that the locale's encoding cannot carry (☕ under LANG=en_US.ISO-8859-1, or a byte that
  is not UTF-8 in a file name) is written as \\uXXXX escapes rather than refused: the rest of the
  output is worth having, and inside a --json string the escape reads back as the character.
- Standard error never raises: Python already escapes what its encoding cannot carry
  (backslashreplace), and a write that fails there is dropped, since there is nowhere left to
  report it.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO, cast

CLOSED_PIPE = 141  # 128 + SIGPIPE
WRITE_FAILED = 1
ESCAPE = "nm_scanguard.escape"


def finite(value: Any) -> Any:
    """`value` with NaN and the infinities replaced by None, at any depth: the JSON we print is
    strict (json.dumps(..., allow_nan=False) then cannot fail on a figure nobody measured)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _escape(error: UnicodeError) -> tuple[str, int]:
    """The codec error handler ESCAPE: each character the encoding cannot carry as \\uXXXX, one
    beyond the BMP as the UTF-16 surrogate pair that JSON spells it with."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = []
    for char in error.object[error.start:error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out), error.end


codecs.register_error(ESCAPE, _escape)


class _Closed(io.TextIOBase):
    """What stands for a standard stream that is not open (`>&-`): every write fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")


class _Output:
    """sys.stdout while run_main runs: the real stream, with the first write error kept (a
    caller may swallow it; run_main does not) and unencodable text escaped."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream: TextIO = stream if stream is not None else cast(TextIO, _Closed())
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:  # raised before anything of `text` is written
                encoding = self._stream.encoding or "utf-8"
                return self._stream.write(text.encode(encoding, ESCAPE).decode(encoding))
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self.error = self.error or e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Errors(_Output):
    """sys.stderr while run_main runs: never raises."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null: what is still buffered is flushed there at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no standard output to speak of: nothing will be flushed
        pass


def run_main(prog: str, main: Callable[[], int]) -> int:
    """`main()`'s exit status, with its output flushed; CLOSED_PIPE and nothing said if the
    reader of standard output has gone; WRITE_FAILED and one line on standard error if standard
    output could not be written.  argparse's --help and --version exit through SystemExit,
    whose output is flushed and checked here too."""
    saved = sys.stdout, sys.stderr
    out = _Output(sys.stdout)
    sys.stdout, sys.stderr = cast(TextIO, out), cast(TextIO, _Errors(sys.stderr))
    try:
        return _run(prog, main, out)
    finally:
        sys.stdout, sys.stderr = saved


def _run(prog: str, main: Callable[[], int], out: _Output) -> int:
    status, leaving = 0, None
    try:
        try:
            status = main()
        except SystemExit as e:
            leaving = e
        out.flush()
    except OSError:
        if out.error is None:  # not standard output's: not a write error to explain here
            raise
    if out.error is None:
        if leaving is not None:
            raise leaving
        return status
    _silence_stdout()
    if isinstance(out.error, BrokenPipeError):
        return CLOSED_PIPE
    print(f"{prog}: cannot write to standard output: {out.error.strerror or out.error}",
          file=sys.stderr)
    return WRITE_FAILED

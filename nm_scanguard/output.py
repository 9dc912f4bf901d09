"""Standard output that a reader may close early (`scanguardctl config show | head -1`).

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises BrokenPipeError,
and one still buffered fails again while the interpreter exits ("Exception ignored ...").  As
Python's documentation of the signal module recommends, the program stops writing, points its
standard output at /dev/null so that nothing is flushed at exit, and ends quietly.

It exits with 141 (128 + SIGPIPE), what the shell reports for cat, ls or any C program killed
by that signal: a script with `set -o pipefail` sees the same status from us as from them, and
it is not the 1 that means "scanguardctl found a problem".  SIGPIPE itself is not restored to
its default action: it would also kill the process when its D-Bus socket closes.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any

CLOSED_PIPE = 141  # 128 + SIGPIPE


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


def _silence_stdout() -> int:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no standard output to speak of: nothing will be flushed
        pass
    return CLOSED_PIPE


def closed_pipe_quiet(main: Callable[[], int]) -> int:
    """`main()`'s exit status, with its output flushed; CLOSED_PIPE and no traceback if the
    reader of standard output has gone.  argparse's --help and --version exit through
    SystemExit, whose output is flushed here too."""
    try:
        try:
            status = main()
        except SystemExit:
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _silence_stdout()

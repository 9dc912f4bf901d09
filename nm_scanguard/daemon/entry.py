"""scanguardd's entry point: the console script and `python3 -m nm_scanguard`.

scanguardd speaks D-Bus over a Unix socket and never TLS, yet at start asyncio imports ssl and
hashlib imports _hashlib, and each loads OpenSSL's libcrypto: 3.5 MiB of RSS on Debian 12, 4.3
MiB on Debian 13 (make bench).  Both treat those modules as optional -- asyncio then offers no
TLS, hashlib uses its built-in blake2b, the one hash profile_settings.py takes -- so they are
marked absent before anything imports them.  Only in this process: scanguardctl and the tests import
nm_scanguard without this.

The start is measured up to owning the bus name (make bench), and most of it is loading modules:
- the cyclic garbage collector is off while they load, and what they made is then frozen out of
  its later passes (gc.freeze): loading makes some 30,000 objects that live as long as the
  process and almost no garbage, which the collector would otherwise walk dozens of times for
  nothing (3.6 % of the start's instructions on Python 3.11);
- modules that only later work needs are imported where they are used: json (the journal),
  tempfile (a file written), secrets (a hold's cookie).  tests/unit/daemon/test_entry.py holds
  both this list and NOT_NEEDED.
"""

from __future__ import annotations

import gc
import sys

NOT_NEEDED = ("ssl", "_ssl", "_hashlib")


def main() -> int:
    for name in NOT_NEEDED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    gc.disable()
    try:
        from .service import main as serve
    finally:
        gc.freeze()
        gc.enable()
    return serve()

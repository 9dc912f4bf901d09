"""scanguardd's entry point: the console script and `python3 -m nm_scanguard`.

scanguardd speaks D-Bus over a Unix socket and never TLS, yet at start asyncio imports ssl and
hashlib imports _hashlib, and each loads OpenSSL's libcrypto: 3.5 MiB of RSS on Debian 12, 4.3
MiB on Debian 13 (make bench).  Both treat those modules as optional -- asyncio then offers no
TLS, hashlib uses its built-in blake2b, the one hash profile_settings.py takes -- so they are
marked absent before anything imports them.  Only in this process: scanguardctl and the tests import
nm_scanguard without this.
"""

from __future__ import annotations

import sys

NOT_NEEDED = ("ssl", "_ssl", "_hashlib")


def main() -> int:
    for name in NOT_NEEDED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    from .service import main as serve

    return serve()

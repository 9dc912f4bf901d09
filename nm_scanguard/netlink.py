"""Interface counters from the kernel over rtnetlink (pyroute2).

One RTM_GETLINK per interface per sample (~0.1 ms here); pyroute2's IPRoute is synchronous, which
is fine at this cost, so it is called directly from the event loop.
"""

from __future__ import annotations

import logging
import sys
import time

# pyroute2's package __init__ imports its interactive console (pyroute2.cli.console), which
# imports readline if it can.  A daemon has no use for readline, and on Debian 13 loading it is a
# denied system call: ncurses 6.5 calls setfsuid() while readline initialises, which the unit's
# filter refuses (@privileged; the package VM's log-mode check on trixie logged two).  pyroute2
# catches the ImportError, so readline is made unimportable for this one import and only if
# nobody loaded it before (an interactive interpreter keeps its own).
_hide_readline = "readline" not in sys.modules
if _hide_readline:
    sys.modules["readline"] = None  # type: ignore[assignment]
try:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
finally:
    if _hide_readline:
        del sys.modules["readline"]

from .rates import Counters  # noqa: E402

log = logging.getLogger(__name__)


class LinkCounters:
    def __init__(self) -> None:
        self._ipr: IPRoute | None = None

    def _socket(self) -> IPRoute:
        if self._ipr is None:
            self._ipr = IPRoute()
        return self._ipr

    def read(self, ifname: str) -> Counters | None:
        """Counters of `ifname`, or None if the interface does not exist (any more)."""
        size = len(ifname.encode("utf-8", "surrogatepass"))
        if not 1 <= size <= 15 or "\0" in ifname:
            raise ValueError(f"{ifname!r} is not an interface name Linux can have "
                             "(1 to 15 bytes, no NUL)")
        try:
            msg = self._socket().link("get", ifname=ifname)[0]
        except NetlinkError as e:
            if e.code == 19:  # ENODEV
                return None
            raise
        stats = msg.get_attr("IFLA_STATS64") or msg.get_attr("IFLA_STATS")
        if stats is None:
            return None
        return Counters(
            time=time.monotonic(),
            rx_bytes=stats["rx_bytes"],
            tx_bytes=stats["tx_bytes"],
            rx_packets=stats["rx_packets"],
            tx_packets=stats["tx_packets"],
        )

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None

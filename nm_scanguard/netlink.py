"""Interface counters from the kernel over rtnetlink (pyroute2).

One RTM_GETLINK per interface per sample (~0.1 ms here); pyroute2's IPRoute is synchronous, which
is fine at this cost, so it is called directly from the event loop.
"""

from __future__ import annotations

import logging
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .rates import Counters

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

"""Interface counters from the kernel over rtnetlink, with the standard library's socket.

One RTM_GETLINK for one interface (by name, IFLA_IFNAME) per sample; the answer's IFLA_STATS64
(IFLA_STATS on a kernel without it) carries the four counters the rates need.  The exchange
takes microseconds, so it runs synchronously on the event loop, with a deadline.

Why not pyroute2, which did this until issue 21: its package __init__ loads every component it
registers as an entry point (ndb with sqlite3, ipdb, nftables, dhcp, its console and readline,
...), so no pyroute2 module can be imported alone.  Measured with /usr/bin/python3 (RSS and
modules after the import, import time), `import socket` vs the lightest pyroute2 import
(`pyroute2.netlink.nlsocket`; `import pyroute2` costs the same):
    Debian 12, pyroute2 0.7.2:  9.3 MiB, 62 modules, 3 ms  vs  33.8 MiB, 418 modules, 92 ms
    Debian 13, pyroute2 0.7.7: 10.2 MiB, 55 modules, 4 ms  vs  34.8 MiB, 411 modules, 98 ms
The daemon needs one request and four fields of one attribute of rtnetlink's stable ABI
(include/uapi/linux/{netlink,rtnetlink,if_link}.h), which this module writes and parses itself.

The parser (`parse`) is pure and is what the unit tests feed truncated and hostile datagrams:
it returns what a datagram says about our request or raises `NetlinkError`, nothing else.
Datagrams not sent by the kernel (another process can write to our port) and answers to an
older request (a sequence number not ours) are ignored.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import NamedTuple

from .netlink_wire import (
    NLM_F_MULTI,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSG_NOOP,
    NLMSG_OVERRUN,
    NetlinkSocket,
    attributes,
    messages,
    open_socket,
    pack_attr,
    pack_message,
    receive_before,
)
from .values import valid_ifname


class Counters(NamedTuple):
    """One reading of an interface's kernel counters (IFLA_STATS64)."""

    time: float
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


# include/uapi/linux/rtnetlink.h, if_link.h
NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_GETLINK = 16, 18
IFLA_IFNAME, IFLA_STATS, IFLA_STATS64 = 3, 7, 23

IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
STATS64 = struct.Struct("=4Q")  # rtnl_link_stats64 begins rx/tx packets, rx/tx bytes
STATS32 = struct.Struct("=4I")  # rtnl_link_stats, the same four in 32 bits

RECV_BUFFER = 32768  # one link's answer is 1-3 KiB; a bigger datagram is refused, not grown into
MAX_DATAGRAMS = 32  # datagrams read for one request before giving up (stale or foreign ones)
TIMEOUT = 1.0  # seconds; the kernel answers in microseconds


class NetlinkError(OSError):
    """The kernel refused the request (its errno), or its answer could not be understood
    (EBADMSG: malformed; EMSGSIZE: bigger than the buffer; ETIMEDOUT: no answer)."""


def _malformed(what: str) -> NetlinkError:
    return NetlinkError(errno.EBADMSG, f"netlink {what}")


class LinkStats(NamedTuple):
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


class Reply(NamedTuple):
    """What one datagram says about our request.  `finished`: the request is answered (a link,
    an error, or the end of a multi-part answer); `stats`: the link's counters if it carried
    them; `missing`: the kernel answered ENODEV (no such interface)."""

    finished: bool = False
    stats: LinkStats | None = None
    missing: bool = False


def request(seq: int, ifname: str) -> bytes:
    """RTM_GETLINK for the interface called `ifname` (the caller checked the name)."""
    name = ifname.encode("utf-8") + b"\0"
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + pack_attr(IFLA_IFNAME, name)
    return pack_message(RTM_GETLINK, NLM_F_REQUEST, seq, body)


def _stats(payload: bytes) -> LinkStats | None:
    """The counters in an RTM_NEWLINK's payload (ifinfomsg, then attributes), or None."""
    if len(payload) < IFINFOMSG.size:
        raise NetlinkError(errno.EBADMSG, "RTM_NEWLINK shorter than its ifinfomsg")
    found: dict[int, bytes] = {}
    for kind, value in attributes(payload[IFINFOMSG.size:], "RTM_NEWLINK", _malformed,
                                  tail_ok=True):
        if kind in (IFLA_STATS64, IFLA_STATS):
            found[kind] = value
    for kind, layout in ((IFLA_STATS64, STATS64), (IFLA_STATS, STATS32)):
        data = found.get(kind)
        if data is not None and len(data) >= layout.size:
            rx_packets, tx_packets, rx_bytes, tx_bytes = layout.unpack_from(data)
            return LinkStats(rx_bytes, tx_bytes, rx_packets, tx_packets)
    return None


def parse(data: bytes, seq: int) -> Reply:
    """What the datagram `data`, sent by the kernel, says about our request number `seq`.

    Messages of other sequence numbers are skipped.  Raises NetlinkError for a kernel error
    other than ENODEV and for a malformed message (nothing else); a multi-part answer is
    finished only by its NLMSG_DONE."""
    stats, finished = None, False
    for kind, flags, msg_seq, payload in messages(data, _malformed):
        if msg_seq != seq or kind == NLMSG_NOOP:
            continue
        if kind == NLMSG_ERROR:
            if len(payload) < 4:
                raise NetlinkError(errno.EBADMSG, "NLMSG_ERROR without its error code")
            (code,) = struct.unpack_from("=i", payload)
            if code == -errno.ENODEV:
                return Reply(finished=True, missing=True)
            if code != 0:  # a negative errno; anything else (or beyond MAX_ERRNO) is no errno
                err = -code if -4095 <= code < 0 else errno.EPROTO
                raise NetlinkError(err, f"RTM_GETLINK: {os.strerror(err)} ({code})")
            return Reply(finished=True, stats=stats)  # an acknowledgement ends the request
        if kind == NLMSG_DONE:
            return Reply(finished=True, stats=stats)
        if kind == NLMSG_OVERRUN:
            raise NetlinkError(errno.EBADMSG, "NLMSG_OVERRUN: the kernel lost messages")
        if kind == RTM_NEWLINK:
            stats = _stats(payload) if stats is None else stats
            finished = finished or not flags & NLM_F_MULTI
    return Reply(finished=finished, stats=stats)


def _rtnetlink_socket() -> NetlinkSocket:
    return open_socket(NETLINK_ROUTE)


class LinkCounters:
    """Reads interface counters; one rtnetlink socket, opened at the first read.

    `read` returns None when the interface does not exist (any more), raises ValueError for a
    name Linux cannot have (ifname.valid_ifname) and NetlinkError (an OSError) when the kernel
    refuses or its answer cannot be understood; after an error the socket is replaced, so a
    late answer to that request cannot be taken for the next one's."""

    def __init__(self, opener: Callable[[], NetlinkSocket] | None = None, timeout: float = TIMEOUT) -> None:
        self._open = opener or _rtnetlink_socket
        self._timeout = timeout
        self._sock: NetlinkSocket | None = None
        self._seq = 0

    def read(self, ifname: str) -> Counters | None:
        """Counters of `ifname`, or None if the interface does not exist (any more)."""
        if not valid_ifname(ifname):
            raise ValueError(f"{ifname!r} is not an interface name Linux can have (1 to 15 "
                             "bytes of UTF-8; no '/', ':', whitespace or control character; "
                             "not '.' or '..')")
        try:
            stats = self._exchange(ifname)
        except OSError as e:
            self.close()
            if isinstance(e, NetlinkError):
                raise
            raise NetlinkError(e.errno or errno.EIO, f"rtnetlink: {e.strerror or e}") from e
        if stats is None:
            return None
        return Counters(time=time.monotonic(), rx_bytes=stats.rx_bytes, tx_bytes=stats.tx_bytes,
                        rx_packets=stats.rx_packets, tx_packets=stats.tx_packets)

    def _exchange(self, ifname: str) -> LinkStats | None:
        if self._sock is None:
            self._sock = self._open()
        sock = self._sock
        self._seq = self._seq % 0xFFFFFFFF + 1  # 1 .. 2**32-1; 0 is what unsolicited ones carry
        seq = self._seq
        sock.sendto(request(seq, ifname), (0, 0))
        deadline = time.monotonic() + self._timeout
        stats: LinkStats | None = None
        for _ in range(MAX_DATAGRAMS):
            data, sender = self._receive(sock, deadline)
            if sender != 0:
                continue  # not from the kernel: another process wrote to our port
            reply = parse(data, seq)
            stats = stats or reply.stats
            if reply.missing:
                return None
            if reply.finished:
                if stats is None:  # a link without counters: none to give, as for no link
                    return None
                return stats
        raise NetlinkError(errno.EBADMSG, f"no answer to RTM_GETLINK in {MAX_DATAGRAMS} datagrams")

    def _receive(self, sock: NetlinkSocket, deadline: float) -> tuple[bytes, int]:
        """One datagram and its sender's port id; EINTR retried, EAGAIN waited for."""
        data, port, flags = receive_before(
            sock, RECV_BUFFER, deadline,
            lambda: NetlinkError(errno.ETIMEDOUT, "no answer from the kernel"))
        if flags & socket.MSG_TRUNC:
            raise NetlinkError(errno.EMSGSIZE, f"an answer over {RECV_BUFFER} bytes")
        return data, port

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

"""The netlink framing that rtnetlink (netlink.py) and generic netlink (genetlink.py, nl80211.py)
share: the message header, attributes and their 4-byte alignment, the socket, a datagram's
sender and the wait for a request's answer.

From include/uapi/linux/netlink.h.  The walkers are pure; what breaks the framing raises the
caller's error (`Malformed`: a function from the words to an OSError with EBADMSG), at the
place where it breaks, so that what stands before it has been read first.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
NLM_F_REQUEST, NLM_F_MULTI = 0x1, 0x2
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
NLATTR = struct.Struct("=HH")  # length, type

Malformed = Callable[[str], OSError]


def align(n: int) -> int:
    return (n + 3) & ~3


def pack_message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """One netlink message: its header (our port id 0: the kernel fills it in), then `body`."""
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def pack_attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to the alignment."""
    attr = NLATTR.pack(NLATTR.size + len(payload), kind) + payload
    return attr + b"\0" * (align(len(attr)) - len(attr))


def messages(data: bytes, malformed: Malformed) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, sequence, payload) of each message in the datagram `data`; a length below
    the header or past the datagram, or 1 to 15 bytes after the last message, is malformed."""
    at = 0
    while at + NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _port = NLMSGHDR.unpack_from(data, at)
        if length < NLMSGHDR.size or at + length > len(data):
            raise malformed(f"message of length {length} at byte {at} of a {len(data)}-byte "
                            "datagram")
        yield kind, flags, seq, data[at + NLMSGHDR.size:at + length]
        at += align(length)
    if at < len(data):
        raise malformed(f"{len(data) - at} stray bytes after the last message")


def attributes(data: bytes, what: str, malformed: Malformed,
               tail_ok: bool = False) -> Iterator[tuple[int, bytes]]:
    """(type without its flag bits, payload) of each attribute in `data`, part of `what`; an
    attribute shorter than its header or longer than what is left is malformed, and so are 1-3
    bytes after the last one unless `tail_ok`."""
    at = 0
    while at < len(data):
        if len(data) - at < NLATTR.size:
            if tail_ok:
                return
            raise malformed(f"{len(data) - at} stray bytes after the last attribute of {what}")
        length, kind = NLATTR.unpack_from(data, at)
        if length < NLATTR.size or at + length > len(data):
            raise malformed(f"attribute {kind & NLA_TYPE_MASK} of length {length} at byte {at} "
                            f"of {what} ({len(data)} bytes)")
        yield kind & NLA_TYPE_MASK, data[at + NLATTR.size:at + length]
        at += align(length)


class NetlinkSocket(Protocol):
    """What the readers need of a netlink socket (a fake in the unit tests)."""

    def sendto(self, data: bytes, address: tuple[int, int], /) -> int: ...
    def recvmsg(self, bufsize: int, /) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        ...
    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...
    def setblocking(self, flag: bool, /) -> None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


def open_socket(protocol: int) -> NetlinkSocket:
    """A non-blocking netlink socket of `protocol`, bound to a port id the kernel picks."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    try:
        sock.setblocking(False)
        sock.bind((0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def receive(sock: NetlinkSocket, bufsize: int) -> tuple[bytes, int, int]:
    """One datagram, its sender's port id (0: the kernel; -1: unknown) and recvmsg's flags
    (MSG_TRUNC: it was longer than `bufsize`).  Raises what recvmsg raises."""
    data, _anc, flags, address = sock.recvmsg(bufsize)
    port = address[0] if isinstance(address, tuple) and address else -1
    return data, port if isinstance(port, int) else -1, flags


def receive_before(sock: NetlinkSocket, bufsize: int, deadline: float,
                   timed_out: Callable[[], OSError]) -> tuple[bytes, int, int]:
    """One datagram as `receive` gives it, from a request's exchange: EINTR retried, EAGAIN
    waited for until the deadline (time.monotonic()), then `timed_out()` raised."""
    while True:
        try:
            return receive(sock, bufsize)
        except InterruptedError:
            continue
        except BlockingIOError:
            if not wait_readable(sock.fileno(), deadline):
                raise timed_out() from None


def wait_readable(fileno: int, deadline: float) -> bool:
    """Wait until `fileno` can be read or the deadline (time.monotonic()) passes; False if it
    had passed already.  A signal ends the wait early: the caller reads, and asks again."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    with contextlib.suppress(InterruptedError):
        poller.poll(left * 1000)
    return True

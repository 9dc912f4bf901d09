"""`scanguardctl diagnose`: ICMP echoes to the gateway (or `--target`) from an unprivileged ping
socket bound to the Wi-Fi interface, so that they cross the Wi-Fi also when a VPN owns the
default route; a raw socket where root runs it and ping sockets are not allowed."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Callable

from ..text import NAME_CHARS, quoted, shown
from .findings import ECHO_TIMEOUT, TRY_TARGET, Echo
from .targets import Target

ECHO_INTERVAL = 0.2  # seconds between echoes: five a second
ECHO_ID = 0  # a ping socket's kernel chooses the identifier
ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
ICMP_HEADER = struct.Struct("!BBHHH")  # type, code, checksum, identifier, sequence


def address_argument(text: str) -> str:
    """`--target ADDR` as argparse reads it: the address of one IPv4 host, written as digits
    (names are not looked up: a lookup could go through the VPN's resolver, or hang)."""
    if not text:
        return text  # argparse passes the default "" through here too: the gateway
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not an IPv4 address; give one such as 192.168.1.1 (a host "
            "name is not looked up)") from None
    if address.is_multicast or address.is_unspecified or address.packed == b"\xff" * 4:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not the address of one host; give "
                                         "one such as 192.168.1.1")
    return str(address)


def ping_groups(path: str = "/proc/sys/net/ipv4/ping_group_range") -> str:
    try:
        with open(path, encoding="ascii") as f:
            return " ".join(f.read().split())
    except OSError:
        return "unreadable"


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) that a raw socket's echo must carry itself."""
    if len(data) % 2:
        data += b"\0"
    total = int(sum(struct.unpack(f"!{len(data) // 2}H", data)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(seq: int, ident: int | None = None, payload: bytes = b"nm-scanguard diagnose") -> bytes:
    """An ICMP echo request.  For a ping socket (`ident` None) the kernel sets the identifier
    and the checksum (net/ipv4/ping.c); a raw socket's must carry both."""
    if ident is None:
        return ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ECHO_ID, seq & 0xFFFF) + payload
    bare = ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ident, seq & 0xFFFF) + payload
    return ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, checksum(bare), ident, seq & 0xFFFF) + payload


def echo_reply_seq(data: bytes, ident: int | None = None) -> int | None:
    """The sequence number of an echo reply, or None.  A raw socket receives the IP header
    first and every process's replies: those with another identifier are not ours."""
    if ident is not None:
        if len(data) < 20:
            return None
        data = data[(data[0] & 0x0F) * 4:]
    if len(data) < ICMP_HEADER.size:
        return None
    kind, code, _sum, their_ident, seq = ICMP_HEADER.unpack_from(data)
    if kind != ICMP_ECHO_REPLY or code != 0 or (ident is not None and their_ident != ident):
        return None
    return int(seq)


class Pinger:
    """ICMP echoes to one address from an unprivileged ping socket, ECHO_INTERVAL apart.
    Each echo lands in `link.echoes` once answered or once ECHO_TIMEOUT has passed.

    With `device`, the socket is bound to that interface (SO_BINDTODEVICE, which Linux allows
    an ordinary user since 5.7 on a socket not yet bound): the echoes leave through it whatever
    the routing table prefers, e.g. a VPN's default route.  `bound` says whether that worked."""

    def __init__(self, address: str, echoes: list[Echo], clock: Callable[[], float],
                 raw: bool = False, device: str = "") -> None:
        self.address = address
        self.echoes = echoes
        self.clock = clock
        self.pending: dict[int, float] = {}
        self.seq = 0
        # A raw socket (root only) when the ping socket is not allowed: it needs its own id.
        self.ident = (os.getpid() & 0xFFFF) if raw else None
        kind = socket.SOCK_RAW if raw else socket.SOCK_DGRAM
        self.sock = socket.socket(socket.AF_INET, kind | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                  socket.IPPROTO_ICMP)
        self.bound = False
        if device:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE,
                                     os.fsencode(device))
                self.bound = True
            except OSError:
                pass  # a kernel before 5.7 wants CAP_NET_RAW: the routing table decides
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._receive)

    def send(self) -> None:
        self.expire()
        self.seq = (self.seq + 1) & 0xFFFF
        now = self.clock()
        try:
            self.sock.sendto(echo_request(self.seq, self.ident), (self.address, 0))
        except OSError:
            self.echoes.append(Echo(now, None))  # no route, for instance: as good as lost
            return
        self.pending[self.seq] = now

    def _receive(self) -> None:
        while True:
            try:
                data = self.sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # an ICMP error for an echo: it stays pending and times out
            seq = echo_reply_seq(data, self.ident)
            sent = self.pending.pop(seq, None) if seq is not None else None
            if sent is not None:
                self.echoes.append(Echo(sent, (self.clock() - sent) * 1000.0))

    def expire(self, final: bool = False) -> None:
        now = self.clock()
        for seq, sent in list(self.pending.items()):
            if final or now - sent >= ECHO_TIMEOUT:
                del self.pending[seq]
                if now - sent >= ECHO_TIMEOUT:
                    self.echoes.append(Echo(sent, None))
        self.echoes.sort(key=lambda e: e.sent)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


def open_pinger(target: Target, clock: Callable[[], float], address: str = "") -> Pinger | None:
    """A Pinger for `address` (else the target's gateway) through the target's interface, or
    None.  Says in the target's link how latency is measured, or why not and what to try."""
    link = target.link
    interface = shown(target.interface, NAME_CHARS)
    link.target = address or target.gateway
    if not link.target:
        link.latency_method = (f"{interface} has no IPv4 gateway of its own to send echoes to: "
                               "NetworkManager names none, and no route in the kernel's main "
                               f"table goes through one on {interface}")
        link.latency_try = TRY_TARGET.format(interface=interface)
        return None
    what = (f"ICMP echo to {shown(address, NAME_CHARS)} (--target)" if address else
            f"ICMP echo to the gateway {shown(target.gateway, NAME_CHARS)}")
    try:
        pinger = Pinger(link.target, link.echoes, clock, device=target.interface)
        how = "unprivileged ping socket"
    except PermissionError:
        try:
            pinger = Pinger(link.target, link.echoes, clock, raw=True, device=target.interface)
        except OSError:
            link.latency_method = (f"unprivileged ICMP echo is not allowed here "
                                   f"(net.ipv4.ping_group_range is '{ping_groups()}', which "
                                   "does not include your groups); root can widen it, e.g. "
                                   "sysctl net.ipv4.ping_group_range='0 2147483647'")
            return None
        how = "raw socket: the ping socket is not allowed, but you may open raw ones"
    except OSError as e:
        link.latency_method = f"cannot open an ICMP socket ({e.strerror or e})"
        return None
    through = (f"through {interface}" if pinger.bound else
               f"not bound to {interface}: the routing table chooses the way")
    link.latency_method = f"{what} {through} every {ECHO_INTERVAL:g} s ({how})"
    return pinger

"""Every Wi-Fi scan the kernel runs, from nl80211's "scan" multicast group, with the standard
library's socket.

Any process, root or not, may join the "scan" group of the nl80211 generic-netlink family and
then receives, for every wireless interface of its network namespace, NL80211_CMD_TRIGGER_SCAN
when a scan starts (with the SSIDs it probes and the frequencies it visits), and
NL80211_CMD_NEW_SCAN_RESULTS or NL80211_CMD_SCAN_ABORTED when it ends.  Whoever asked
(wpa_supplicant for NetworkManager, iw, a driver's own scan), the kernel announces it; that is
what `scanguardctl diagnose` records and attribution.py labels.

The exchange: one CTRL_CMD_GETFAMILY to the generic-netlink controller (genetlink.py) resolves
the name "nl80211" to its (dynamic) family id and the "scan" group to its id, synchronously with a
deadline like netlink.py's request (the kernel answers in microseconds); the socket then joins
the group (setsockopt NETLINK_ADD_MEMBERSHIP) and is read from the asyncio loop (add_reader).
pyroute2 is not used, for the reason netlink.py's docstring measures: no pyroute2 module can be
imported without some 350 others and 25 MiB, for what is a few structs of a stable ABI.

The parsers (`parse_family`, `parse_events`) are pure and are what the unit tests feed hand-made,
truncated and hostile datagrams.  Their rule, as in netlink.py: a datagram is either understood
or refused whole with `Nl80211Error` (EBADMSG) -- a message or attribute whose length runs past
its container, an attribute shorter than its header, stray bytes after the last message, a
fixed-size attribute (u32, u64) of the wrong size, a nested attribute that is itself broken --
and nothing else (no IndexError or struct.error) escapes.  Messages that are not read are not
judged: other types, other families and other nl80211 commands are skipped by their header's
length without looking inside.  The listener counts a refused datagram in `malformed` and goes
on.  Datagrams not sent by the kernel (sender port id not 0: another process can write to our
port) are ignored and counted in `foreign`.

What the kernel sends (net/wireless/nl80211.c, nl80211_prep_scan_msg and nl80211_add_scan_req):
NL80211_ATTR_WIPHY, NL80211_ATTR_IFINDEX (absent for a P2P-device wdev without a netdev),
NL80211_ATTR_WDEV, then NL80211_ATTR_SCAN_SSIDS nested -- present and *empty* for a passive scan,
so `ScanEvent.ssids` is `()` then; it is None only when the attribute is missing (an event
without its scan request) -- and NL80211_ATTR_SCAN_FREQUENCIES nested (u32 MHz; if the requester
asked for NL80211_SCAN_FLAG_FREQ_KHZ, NL80211_ATTR_SCAN_FREQ_KHZ in kHz instead, reported here
in whole MHz).  The kernel numbers the nested entries from 0 (iw numbers its requests from 1);
their numbers are not used, only their order.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

from ..text import INVISIBLE
from . import genetlink
from .genetlink import CTRL_CMD_NEWFAMILY, GENL_ID_CTRL, U32, Family, number
from .netlink_wire import (
    NLMSG_ERROR,
    NetlinkSocket,
    attributes,
    messages,
    open_socket,
    receive,
    receive_before,
)

# include/uapi/linux/netlink.h
NETLINK_GENERIC = 16
NETLINK_ADD_MEMBERSHIP = 1  # a socket option at level SOL_NETLINK
NLA_F_NESTED, NLA_F_NET_BYTEORDER = 0x8000, 0x4000
# include/linux/socket.h (not uapi; glibc's bits/socket.h has it too; Python's socket lacks it)
SOL_NETLINK = 270

# include/uapi/linux/nl80211.h
NL80211_GENL_NAME = "nl80211"
NL80211_MULTICAST_GROUP_SCAN = "scan"
CMD_TRIGGER_SCAN, CMD_NEW_SCAN_RESULTS, CMD_SCAN_ABORTED = 33, 34, 35
ATTR_WIPHY, ATTR_IFINDEX = 1, 3
ATTR_IE = 42  # the probe request's extra IEs (not read)
ATTR_SCAN_FREQUENCIES, ATTR_SCAN_SSIDS = 44, 45
ATTR_WDEV = 153
ATTR_SCAN_FLAGS = 158
ATTR_SCAN_FREQ_KHZ = 292  # instead of ATTR_SCAN_FREQUENCIES if NL80211_SCAN_FLAG_FREQ_KHZ

U64 = struct.Struct("=Q")

Kind = Literal["started", "finished", "aborted"]
KINDS: dict[int, Kind] = {CMD_TRIGGER_SCAN: "started", CMD_NEW_SCAN_RESULTS: "finished",
                          CMD_SCAN_ABORTED: "aborted"}

RECV_BUFFER = 65536  # a scan event is 0.3-4 KiB (nlmsg_new(NLMSG_DEFAULT_SIZE)); more is refused
MAX_DATAGRAMS = 32  # datagrams read for the family request before giving up
MAX_BATCH = 64  # datagrams read per wake-up of the loop; the reader is called again for more
TIMEOUT = 1.0  # seconds; the kernel answers in microseconds

NO_WIFI = "this kernel has no Wi-Fi (cfg80211/nl80211) support loaded"


class Nl80211Error(OSError):
    """The kernel refused the request (its errno; ENOENT for the family: no Wi-Fi support), or a
    datagram could not be understood (EBADMSG: malformed; ETIMEDOUT: no answer)."""


def _bad(what: str) -> Nl80211Error:
    return Nl80211Error(errno.EBADMSG, f"malformed netlink datagram: {what}")


class ScanEvent(NamedTuple):
    """One scan announcement.  `kind`: "started" (TRIGGER_SCAN), "finished" (NEW_SCAN_RESULTS)
    or "aborted" (SCAN_ABORTED); `ssids`: the probed SSIDs in the kernel's order, b"" being the
    wildcard, () for a passive scan, None if the event carried no list; `frequencies`: MHz;
    `flags`: NL80211_SCAN_FLAG_* (0 if absent); `wiphy`: the radio's index."""

    kind: Kind
    ifindex: int | None = None
    wdev: int | None = None
    ssids: tuple[bytes, ...] | None = None
    frequencies: tuple[int, ...] = ()
    flags: int = 0
    wiphy: int | None = None


# ---- parsing ------------------------------------------------------------------------------------

def _messages(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, sequence, payload) of each netlink message in a datagram; EBADMSG if the framing
    is broken anywhere in it."""
    return [(kind, seq, payload) for kind, _flags, seq, payload in messages(data, _bad)]


def _attrs(data: bytes, what: str) -> Iterator[tuple[int, bytes]]:
    """(type without its flag bits, payload) of each attribute in `data`; EBADMSG for an
    attribute shorter than its header or longer than what is left, or 1-3 stray bytes."""
    return attributes(data, what, _bad)


def _number(data: bytes, layout: struct.Struct, what: str) -> int:
    return number(data, layout, what, _bad)


def family_request(seq: int) -> bytes:
    """CTRL_CMD_GETFAMILY for the family called "nl80211"."""
    return genetlink.family_request(NL80211_GENL_NAME, seq)


def parse_family(data: bytes, seq: int) -> Family | None:
    """nl80211's family as the datagram `data`, sent by the kernel, answers request `seq`, or
    None if it holds no answer to it (messages of other sequence numbers are skipped).

    Raises Nl80211Error: the kernel's errno (ENOENT: no nl80211 family, i.e. no Wi-Fi support
    loaded), EPROTO for an error code that is no errno, EBADMSG for a malformed datagram."""
    for kind, msg_seq, payload in _messages(data):
        if msg_seq != seq:
            continue
        if kind == NLMSG_ERROR:
            if len(payload) < 4:
                raise _bad("NLMSG_ERROR without its error code")
            (code,) = struct.unpack_from("=i", payload)
            if code == 0:
                raise _bad("CTRL_CMD_GETFAMILY acknowledged without an answer")
            if code == -errno.ENOENT:
                raise Nl80211Error(errno.ENOENT, f"{NO_WIFI} (the kernel knows no generic-"
                                                 f"netlink family {NL80211_GENL_NAME!r})")
            err = -code if -4095 <= code < 0 else errno.EPROTO
            raise Nl80211Error(err, f"CTRL_CMD_GETFAMILY {NL80211_GENL_NAME!r}: "
                                    f"{os.strerror(err)} ({code})")
        if kind == GENL_ID_CTRL:
            cmd, attrs = genetlink.command(payload, "the controller's answer", _bad)
            if cmd == CTRL_CMD_NEWFAMILY:
                return genetlink.family(attrs, NL80211_GENL_NAME, _bad)
    return None


def _event(kind: Kind, attrs: bytes) -> ScanEvent:
    ifindex = wdev = wiphy = None
    ssids: tuple[bytes, ...] | None = None
    freqs: tuple[int, ...] = ()
    khz: tuple[int, ...] | None = None
    flags = 0
    for akind, value in _attrs(attrs, f"a scan event ({kind})"):
        if akind == ATTR_IFINDEX:
            ifindex = _number(value, U32, "NL80211_ATTR_IFINDEX")
        elif akind == ATTR_WIPHY:
            wiphy = _number(value, U32, "NL80211_ATTR_WIPHY")
        elif akind == ATTR_WDEV:
            wdev = _number(value, U64, "NL80211_ATTR_WDEV")
        elif akind == ATTR_SCAN_FLAGS:
            flags = _number(value, U32, "NL80211_ATTR_SCAN_FLAGS")
        elif akind == ATTR_SCAN_SSIDS:
            ssids = tuple(ssid for _i, ssid in _attrs(value, "NL80211_ATTR_SCAN_SSIDS"))
        elif akind == ATTR_SCAN_FREQUENCIES:
            freqs = tuple(_number(f, U32, "a scan frequency")
                          for _i, f in _attrs(value, "NL80211_ATTR_SCAN_FREQUENCIES"))
        elif akind == ATTR_SCAN_FREQ_KHZ:
            khz = tuple(_number(f, U32, "a scan frequency in kHz")
                        for _i, f in _attrs(value, "NL80211_ATTR_SCAN_FREQ_KHZ"))
    if khz is not None and not freqs:
        freqs = tuple(f // 1000 for f in khz)
    return ScanEvent(kind, ifindex=ifindex, wdev=wdev, ssids=ssids, frequencies=freqs,
                     flags=flags, wiphy=wiphy)


def parse_events(data: bytes, family_id: int) -> list[ScanEvent]:
    """The scan events in the datagram `data`, sent by the kernel to the "scan" group of
    nl80211 (whose id is `family_id`), in order.  Other message types, families and commands
    are skipped unread; a malformed datagram raises Nl80211Error (EBADMSG), nothing else."""
    events = []
    for kind, _seq, payload in _messages(data):
        if kind != family_id:
            continue
        cmd, attrs = genetlink.command(payload, "an nl80211 message", _bad)
        scan = KINDS.get(cmd)
        if scan is not None:
            events.append(_event(scan, attrs))
    return events


def ssid_text(ssid: bytes) -> str:
    """An SSID as a person can read it: its UTF-8 text ("Café ☕"), each byte that is not UTF-8
    as \\xNN, a control or other unprintable character (and a letter that draws nothing, such as
    a Hangul filler: text.INVISIBLE) as \\xNN / \\uNNNN / \\UNNNNNNNN, a backslash as \\\\ (so
    that no SSID reads as another's escape); b"" as "(wildcard)"."""
    if ssid == b"":
        return "(wildcard)"
    out = []
    for char in ssid.decode("utf-8", errors="surrogateescape"):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (always >= 0x80)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif char.isprintable() and char not in INVISIBLE:
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


# ---- the listener -------------------------------------------------------------------------------

def _genetlink_socket() -> NetlinkSocket:
    return open_socket(NETLINK_GENERIC)


OnEvent = Callable[[ScanEvent, float, float], None]


class ScanEvents:
    """Calls `on_event(event, monotonic, realtime)` for each scan event the kernel multicasts,
    from the asyncio loop that ran `ScanEvents.open(on_event)`; the two times are
    time.monotonic() and time.time() when the datagram was read.  `async with await
    ScanEvents.open(...) as events:` closes it at the end.

    Counters: `overruns` (ENOBUFS: the socket's buffer overflowed and the kernel dropped
    events), `malformed` (datagrams refused by parse_events), `foreign` (datagrams not from the
    kernel).  An exception from `on_event` propagates to the loop's exception handler; later
    datagrams are still delivered.  Any other receive error closes the listener and is kept in
    `failure`.  `close()` is idempotent."""

    def __init__(self, on_event: OnEvent, opener: Callable[[], NetlinkSocket] | None = None,
                 timeout: float = TIMEOUT) -> None:
        self._on_event = on_event
        self._open = opener or _genetlink_socket
        self._timeout = timeout
        self._sock: NetlinkSocket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.family: Family | None = None
        self.overruns = 0
        self.malformed = 0
        self.foreign = 0
        self.failure: OSError | None = None

    @classmethod
    async def open(cls, on_event: OnEvent, opener: Callable[[], NetlinkSocket] | None = None,
                   timeout: float = TIMEOUT) -> ScanEvents:
        """A listener calling `on_event` from the running loop: nl80211 resolved, its "scan"
        group joined.  Raises Nl80211Error (ENOENT: no Wi-Fi support loaded, or no "scan"
        group; ETIMEDOUT: no answer in `timeout` seconds; the errno of any socket error)."""
        events = cls(on_event, opener, timeout)
        events._start(asyncio.get_running_loop())
        return events

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            sock = self._open()
        except OSError as e:
            raise Nl80211Error(e.errno or errno.EIO, f"generic netlink: {e.strerror or e}") from e
        try:
            sock.setblocking(False)
            family = self._resolve(sock)
            group = family.groups.get(NL80211_MULTICAST_GROUP_SCAN)
            if group is None:
                raise Nl80211Error(errno.ENOENT, f"nl80211 has no {NL80211_MULTICAST_GROUP_SCAN!r} "
                                                 "multicast group (it has: "
                                                 f"{', '.join(sorted(family.groups)) or 'none'}), "
                                                 "so this kernel cannot report its scans")
            sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
            loop.add_reader(sock.fileno(), self._readable)
        except BaseException as e:
            sock.close()
            if isinstance(e, OSError) and not isinstance(e, Nl80211Error):
                raise Nl80211Error(e.errno or errno.EIO,
                                   f"nl80211 scan group: {e.strerror or e}") from e
            raise
        self._sock, self._loop, self.family = sock, loop, family

    def _resolve(self, sock: NetlinkSocket) -> Family:
        seq = 1  # a fresh socket: nothing else is numbered on it
        sock.sendto(family_request(seq), (0, 0))
        deadline = time.monotonic() + self._timeout
        for _ in range(MAX_DATAGRAMS):
            data, port, flags = receive_before(
                sock, RECV_BUFFER, deadline,
                lambda: Nl80211Error(errno.ETIMEDOUT, "no answer from the kernel's generic-netlink "
                                                      "controller"))
            if port != 0:
                continue
            if flags & socket.MSG_TRUNC:
                raise Nl80211Error(errno.EMSGSIZE, f"an answer over {RECV_BUFFER} bytes")
            family = parse_family(data, seq)
            if family is not None:
                return family
        raise _bad(f"no answer to CTRL_CMD_GETFAMILY in {MAX_DATAGRAMS} datagrams")

    def _readable(self) -> None:
        for _ in range(MAX_BATCH):
            sock = self._sock
            if sock is None:  # closed, possibly by on_event
                return
            try:
                data, port, flags = receive(sock, RECV_BUFFER)
            except (BlockingIOError, InterruptedError):
                return  # drained (EINTR: the loop calls again, the socket still being readable)
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the kernel dropped events; the socket still works
                    self.overruns += 1
                    continue
                self.failure = e
                self.close()
                return
            monotonic, realtime = time.monotonic(), time.time()
            if port != 0:
                self.foreign += 1
                continue
            if flags & socket.MSG_TRUNC or self.family is None:
                self.malformed += 1
                continue
            try:
                events = parse_events(data, self.family.id)
            except Nl80211Error:
                self.malformed += 1
                continue
            for event in events:
                self._on_event(event, monotonic, realtime)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(sock.fileno())
        self._loop = None
        sock.close()

    async def __aenter__(self) -> ScanEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

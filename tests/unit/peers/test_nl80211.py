"""nm_scanguard.peers.nl80211 without Wi-Fi: the family request's bytes, the parsers fed hand-made
datagrams (as net/wireless/nl80211.c builds them), truncated and hostile ones, ssid_text, and the
ScanEvents listener over a fake socket on the real asyncio loop.  One test opens the real socket:
on a kernel without cfg80211 it must say so in words; on a Wi-Fi machine it must join "scan".
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time
from typing import Any, Awaitable, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nm_scanguard.peers import nl80211
from nm_scanguard.peers.genetlink import (
    CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_MCAST_GROUPS, CTRL_ATTR_MCAST_GRP_ID,
    CTRL_ATTR_MCAST_GRP_NAME, CTRL_CMD_GETFAMILY, GENL_ID_CTRL, Family,
)
from nm_scanguard.peers.netlink_wire import NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
from nm_scanguard.peers.nl80211 import (
    ATTR_IE, ATTR_IFINDEX, ATTR_SCAN_FLAGS, ATTR_SCAN_FREQ_KHZ, ATTR_SCAN_FREQUENCIES,
    ATTR_SCAN_SSIDS, ATTR_WDEV, ATTR_WIPHY, CMD_NEW_SCAN_RESULTS, CMD_SCAN_ABORTED,
    CMD_TRIGGER_SCAN, NETLINK_ADD_MEMBERSHIP, SOL_NETLINK,
    Nl80211Error, ScanEvent, ScanEvents, family_request, parse_events, parse_family, ssid_text,
)

SEQ = 1  # what ScanEvents numbers its family request
NL80211 = 0x1C  # a family id as the controller hands it out (dynamic: 28 on a Debian 12 laptop)
GROUPS = {"config": 5, "scan": 6, "regulatory": 7, "mlme": 8, "vendor": 9, "nan": 10}
CAFE = "Café ☕".encode()
assert CAFE == b"Caf\xc3\xa9 \xe2\x98\x95"
FREQS = (2412, 2417, 2422, 2427, 2432, 2437, 2442, 2447, 2452, 2457, 2462, 2467, 2472,
         5180, 5200, 5220, 5240, 5260, 5280, 5300, 5320, 5500, 5520, 5540, 5560, 5580)
assert len(FREQS) == 26
CTRL_CMD_NEWFAMILY = 1
CTRL_ATTR_VERSION, CTRL_ATTR_HDRSIZE, CTRL_ATTR_MAXATTR, CTRL_ATTR_OPS = 3, 4, 5, 6
CMD_GET_SCAN, CMD_START_SCHED_SCAN, CMD_NEW_INTERFACE = 32, 75, 7  # nl80211.h, other commands


# ---- what the kernel would send, built here ---------------------------------------------------

def attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def u64(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=Q", value))


def nested(kind: int, items: list[bytes], first: int = 0) -> bytes:
    """A nest whose entries are numbered from `first` (the kernel's scan events: 0)."""
    return attr(kind, b"".join(attr(first + i, item) for i, item in enumerate(items)))


def message(kind: int, payload: bytes, seq: int = 0, flags: int = 0) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload
    return raw + b"\0" * (-len(raw) % 4)


def genl(family: int, cmd: int, *attrs: bytes, seq: int = 0) -> bytes:
    return message(family, struct.pack("=BBH", cmd, 1, 0) + b"".join(attrs), seq)


def scan(cmd: int = CMD_TRIGGER_SCAN, *, family: int = NL80211, ifindex: int | None = 3,
         ssids: list[bytes] | None = None, freqs: tuple[int, ...] = FREQS,
         flags: int | None = None, extra: bytes = b"") -> bytes:
    """A scan event as nl80211_prep_scan_msg builds it: wiphy, ifindex, wdev, the SSIDs' nest
    (empty for a passive scan; None here leaves it out), the frequencies' nest, IEs, flags."""
    attrs = [u32(ATTR_WIPHY, 0)]
    if ifindex is not None:
        attrs.append(u32(ATTR_IFINDEX, ifindex))
    attrs.append(u64(ATTR_WDEV, 1))
    if ssids is not None:
        attrs.append(nested(ATTR_SCAN_SSIDS, ssids))
    attrs.append(nested(ATTR_SCAN_FREQUENCIES, [struct.pack("=I", f) for f in freqs]))
    attrs.append(attr(ATTR_IE, b"\x7f\x08\x04\x00\x0a\x02\x00\x00\x00\x40"))
    if flags is not None:
        attrs.append(u32(ATTR_SCAN_FLAGS, flags))
    return genl(family, cmd, *attrs, extra)


def error(code: int, seq: int = SEQ) -> bytes:
    """NLMSG_ERROR: the (negative) errno, then the request's header as the kernel echoes it."""
    return message(NLMSG_ERROR, struct.pack("=i", code) + family_request(seq)[:16], seq)


def family_answer(groups: dict[str, int] = GROUPS, seq: int = SEQ, fid: int = NL80211,
                  name: bytes = b"nl80211\0") -> bytes:
    """CTRL_CMD_NEWFAMILY as genetlink's ctrl_fill_info builds it (ops abridged)."""
    ops = nested(CTRL_ATTR_OPS, [u32(1, 1) + u32(2, 0x0e)], first=1)
    mcast = nested(CTRL_ATTR_MCAST_GROUPS,
                   [u32(CTRL_ATTR_MCAST_GRP_ID, gid) + attr(CTRL_ATTR_MCAST_GRP_NAME,
                                                            n.encode() + b"\0")
                    for n, gid in groups.items()], first=1)
    return genl(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, u16(CTRL_ATTR_FAMILY_ID, fid),
                attr(CTRL_ATTR_FAMILY_NAME, name), u32(CTRL_ATTR_VERSION, 1),
                u32(CTRL_ATTR_HDRSIZE, 0), u32(CTRL_ATTR_MAXATTR, 330), ops, mcast, seq=seq)


# ---- the family request and its answer ----------------------------------------------------------

def test_family_request_asks_the_controller_for_nl80211_by_name() -> None:
    data = family_request(0xFFFFFFFF)
    assert data == (struct.pack("=IHHII", 32, GENL_ID_CTRL, NLM_F_REQUEST, 0xFFFFFFFF, 0)
                    + struct.pack("=BBH", CTRL_CMD_GETFAMILY, 1, 0)
                    + struct.pack("=HH", 12, CTRL_ATTR_FAMILY_NAME) + b"nl80211\0")
    assert len(data) % 4 == 0


def test_the_answer_gives_the_family_id_and_every_group() -> None:
    assert parse_family(family_answer(), SEQ) == Family(NL80211, GROUPS)


def test_no_nl80211_family_says_there_is_no_wifi_support() -> None:
    with pytest.raises(Nl80211Error) as e:
        parse_family(error(-errno.ENOENT), SEQ)
    assert e.value.errno == errno.ENOENT
    assert "this kernel has no Wi-Fi (cfg80211/nl80211) support loaded" in str(e.value)


def test_other_kernel_errors_keep_their_errno() -> None:
    with pytest.raises(Nl80211Error) as e:
        parse_family(error(-errno.EPERM), SEQ)
    assert e.value.errno == errno.EPERM and "Wi-Fi" not in str(e.value)
    with pytest.raises(Nl80211Error) as e:
        parse_family(error(-2**31), SEQ)  # no errno: beyond MAX_ERRNO
    assert e.value.errno == errno.EPROTO


def test_answers_to_other_requests_are_ignored() -> None:
    assert parse_family(family_answer(seq=SEQ + 1), SEQ) is None
    assert parse_family(error(-errno.ENOENT, seq=SEQ + 1), SEQ) is None
    assert parse_family(message(NLMSG_DONE, b"\0" * 4, seq=SEQ), SEQ) is None
    both = error(-errno.ENOENT, seq=SEQ + 1) + family_answer()
    assert parse_family(both, SEQ) == Family(NL80211, GROUPS)


BAD_ANSWERS = [
    (family_answer()[:30], "answer cut short"),
    (family_answer() + b"\0\0", "stray bytes"),
    (error(0), "an acknowledgement instead of an answer"),
    (message(NLMSG_ERROR, b"\0\0", seq=SEQ), "error without its code"),
    (message(GENL_ID_CTRL, b"\1", seq=SEQ), "no genlmsghdr"),
    (genl(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, attr(CTRL_ATTR_FAMILY_NAME, b"nl80211\0"), seq=SEQ),
     "no family id"),
    (genl(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, u32(CTRL_ATTR_FAMILY_ID, NL80211), seq=SEQ),
     "a family id of 4 bytes"),
    (family_answer(name=b"nlctrl\0"), "another family's answer"),
    (family_answer(name=b"\xff\0"), "a name that is not UTF-8"),
    (genl(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, u16(CTRL_ATTR_FAMILY_ID, NL80211),
          nested(CTRL_ATTR_MCAST_GROUPS, [u32(CTRL_ATTR_MCAST_GRP_ID, 6)], first=1), seq=SEQ),
     "a group without its name"),
    (genl(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, u16(CTRL_ATTR_FAMILY_ID, NL80211),
          attr(CTRL_ATTR_MCAST_GROUPS, attr(1, struct.pack("=HH", 40, 1))), seq=SEQ),
     "a group's attribute past its nest"),
]


@pytest.mark.parametrize("data, what", BAD_ANSWERS, ids=[what for _d, what in BAD_ANSWERS])
def test_a_malformed_answer_raises_ebadmsg(data: bytes, what: str) -> None:
    with pytest.raises(Nl80211Error) as e:
        parse_family(data, SEQ)
    assert e.value.errno == errno.EBADMSG, what


# ---- scan events --------------------------------------------------------------------------------

def test_an_active_trigger_gives_its_ssids_in_order_and_its_frequencies() -> None:
    data = scan(ssids=[CAFE, b""], flags=0x4)
    assert parse_events(data, NL80211) == [
        ScanEvent("started", ifindex=3, wdev=1, ssids=(CAFE, b""), frequencies=FREQS, flags=0x4,
                  wiphy=0)]


def test_ssids_keep_the_kernels_order_whatever_their_numbers() -> None:
    """The kernel numbers the entries from 0, iw from 1; only the order counts."""
    ssids = [b"b", b"", b"a"]
    for first in (0, 1, 7):
        data = genl(NL80211, CMD_TRIGGER_SCAN, nested(ATTR_SCAN_SSIDS, ssids, first=first))
        assert parse_events(data, NL80211)[0].ssids == (b"b", b"", b"a")


def test_a_passive_trigger_has_no_ssids() -> None:
    """The kernel sends an empty nest for a passive scan: (); without the attribute: None."""
    (empty,) = parse_events(scan(ssids=[]), NL80211)
    assert empty.ssids == () and empty.frequencies == FREQS
    (absent,) = parse_events(scan(ssids=None), NL80211)
    assert absent.ssids is None and absent.kind == "started"


def test_results_and_abort_end_a_scan() -> None:
    (done,) = parse_events(scan(CMD_NEW_SCAN_RESULTS, ssids=[b""], freqs=(2412,)), NL80211)
    assert done == ScanEvent("finished", ifindex=3, wdev=1, ssids=(b"",), frequencies=(2412,),
                             wiphy=0)
    (aborted,) = parse_events(scan(CMD_SCAN_ABORTED, ssids=[b"x"], ifindex=7), NL80211)
    assert (aborted.kind, aborted.ifindex, aborted.ssids, aborted.flags) == \
        ("aborted", 7, (b"x",), 0)


def test_a_wdev_without_a_netdev_has_no_ifindex() -> None:
    (event,) = parse_events(scan(ifindex=None, ssids=[]), NL80211)
    assert event.ifindex is None and event.wdev == 1


def test_a_bare_event_has_the_defaults() -> None:
    assert parse_events(genl(NL80211, CMD_SCAN_ABORTED), NL80211) == [ScanEvent("aborted")]


def test_attribute_flag_bits_do_not_hide_an_attribute() -> None:
    data = genl(NL80211, CMD_TRIGGER_SCAN, u32(ATTR_IFINDEX | 0x4000, 9),
                nested(ATTR_SCAN_SSIDS | 0x8000, [b"n"]),
                nested(ATTR_SCAN_FREQUENCIES | 0x8000, [struct.pack("=I", 5180)]))
    assert parse_events(data, NL80211) == [ScanEvent("started", ifindex=9, ssids=(b"n",),
                                                     frequencies=(5180,))]


def test_khz_frequencies_are_reported_in_mhz() -> None:
    khz = nested(ATTR_SCAN_FREQ_KHZ | 0x8000, [struct.pack("=I", f * 1000) for f in FREQS[:3]])
    (event,) = parse_events(genl(NL80211, CMD_TRIGGER_SCAN, khz), NL80211)
    assert event.frequencies == FREQS[:3]


def test_two_messages_in_one_datagram_give_two_events_in_order() -> None:
    data = scan(ssids=[b"a"], ifindex=3) + scan(CMD_NEW_SCAN_RESULTS, ssids=[b"a"], ifindex=4)
    events = parse_events(data, NL80211)
    assert [(e.kind, e.ifindex) for e in events] == [("started", 3), ("finished", 4)]


def test_other_commands_families_and_types_are_skipped() -> None:
    foreign_cmd = genl(NL80211, CMD_START_SCHED_SCAN, u32(ATTR_IFINDEX, 3))
    get_scan = genl(NL80211, CMD_GET_SCAN, b"\xff" * 7)  # not read, so not judged
    other_family = scan(family=NL80211 + 1, ssids=[b"x"])
    assert parse_events(foreign_cmd, NL80211) == []
    assert parse_events(other_family, NL80211) == []
    assert parse_events(message(NLMSG_DONE, b"\0" * 4) + genl(NL80211, CMD_NEW_INTERFACE)
                        + get_scan, NL80211) == []
    mixed = foreign_cmd + other_family + scan(CMD_SCAN_ABORTED, ssids=[]) + get_scan
    assert [e.kind for e in parse_events(mixed, NL80211)] == ["aborted"]


def test_an_empty_datagram_has_no_events() -> None:
    assert parse_events(b"", NL80211) == []


TRIGGER = scan(ssids=[CAFE, b""], flags=0x4)


BAD_EVENTS = [
    (TRIGGER[:10], "a truncated header"),
    (TRIGGER[:-4], "a message longer than the datagram"),
    (TRIGGER + b"\0" * 3, "stray bytes after the last message"),
    (struct.pack("=IHHII", 8, NL80211, 0, 0, 0), "a message length below its header"),
    (message(NL80211, b"\x21\x01"), "no genlmsghdr"),
    (genl(NL80211, CMD_TRIGGER_SCAN, struct.pack("=HH", 2, ATTR_IFINDEX)), "attr length < 4"),
    (genl(NL80211, CMD_TRIGGER_SCAN, struct.pack("=HH", 200, ATTR_IFINDEX) + b"\0" * 4),
     "attr length past the end"),
    (genl(NL80211, CMD_TRIGGER_SCAN, u32(ATTR_IFINDEX, 3), b"\0\0"),
     "stray bytes after the last attribute"),
    (genl(NL80211, CMD_TRIGGER_SCAN, attr(ATTR_IFINDEX, b"\3\0")), "a u32 of 2 bytes"),
    (genl(NL80211, CMD_TRIGGER_SCAN, u32(ATTR_WDEV, 1)), "a u64 of 4 bytes"),
    (genl(NL80211, CMD_TRIGGER_SCAN, attr(ATTR_SCAN_FLAGS, b"")), "empty flags"),
    (genl(NL80211, CMD_TRIGGER_SCAN, attr(ATTR_SCAN_SSIDS, struct.pack("=HH", 40, 0) + b"ab")),
     "a nested SSID past its nest"),
    (genl(NL80211, CMD_TRIGGER_SCAN, attr(ATTR_SCAN_SSIDS, struct.pack("=HH", 3, 0))),
     "a nested SSID shorter than its header"),
    (genl(NL80211, CMD_TRIGGER_SCAN, attr(ATTR_SCAN_SSIDS, b"\1")), "a one-byte SSID nest"),
    (genl(NL80211, CMD_TRIGGER_SCAN, nested(ATTR_SCAN_FREQUENCIES, [b"\x6c\x09"])),
     "a nested frequency of 2 bytes"),
    (scan(ssids=[b"a"]) + TRIGGER[:-4], "a good message, then a broken one"),
]


@pytest.mark.parametrize("data, what", BAD_EVENTS, ids=[what for _d, what in BAD_EVENTS])
def test_malformed_datagrams_raise_ebadmsg(data: bytes, what: str) -> None:
    with pytest.raises(Nl80211Error) as e:
        parse_events(data, NL80211)
    assert e.value.errno == errno.EBADMSG, what


def test_every_truncation_of_an_event_raises_ebadmsg_or_loses_only_padding() -> None:
    whole = parse_events(TRIGGER, NL80211)
    assert len(whole) == 1
    for cut in range(1, len(TRIGGER)):
        try:
            got = parse_events(TRIGGER[:cut], NL80211)
        except Nl80211Error as e:
            assert e.errno == errno.EBADMSG
        else:
            assert got == whole, cut  # only the message's trailing padding was cut


# ---- hostile bytes (Hypothesis) -----------------------------------------------------------------

def _check_events(data: bytes) -> None:
    try:
        events = parse_events(data, NL80211)
    except Nl80211Error as e:
        assert e.errno == errno.EBADMSG
    else:
        for event in events:
            assert event.kind in ("started", "finished", "aborted")
            assert all(0 <= f < 2**32 for f in event.frequencies)
            assert event.ssids is None or all(isinstance(s, bytes) for s in event.ssids)


def _check_family(data: bytes) -> None:
    try:
        family = parse_family(data, SEQ)
    except Nl80211Error as e:
        assert e.errno is not None and 0 < e.errno < 4096
    else:
        assert family is None or 0 <= family.id < 2**16


@settings(max_examples=300, deadline=1000)
@given(st.binary(max_size=512))
def test_garbage_gives_events_or_raises_nl80211error(data: bytes) -> None:
    _check_events(data)
    _check_family(data)


ATTR_KINDS = st.sampled_from([ATTR_WIPHY, ATTR_IFINDEX, ATTR_WDEV, ATTR_SCAN_SSIDS,
                              ATTR_SCAN_FREQUENCIES, ATTR_SCAN_FREQ_KHZ, ATTR_SCAN_FLAGS, ATTR_IE,
                              ATTR_SCAN_SSIDS | 0x8000, CTRL_ATTR_FAMILY_ID,
                              CTRL_ATTR_MCAST_GROUPS, 0])


@st.composite
def attrs(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Attributes with lying lengths, some of them nests of the same."""
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        if depth < 2 and draw(st.booleans()):
            body = draw(attrs(depth + 1))
        else:
            body = draw(st.binary(max_size=12))
        length = draw(st.one_of(st.just(4 + len(body)), st.integers(0, 0xFFFF)))
        out += struct.pack("=HH", length, draw(ATTR_KINDS)) + body
        out += b"\0" * draw(st.sampled_from([0, -len(body) % 4]))
    return out


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """Datagrams that look right at first: plausible headers, commands and attributes with
    lying lengths, cut anywhere."""
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        cmd = draw(st.sampled_from([CMD_TRIGGER_SCAN, CMD_NEW_SCAN_RESULTS, CMD_SCAN_ABORTED,
                                    CTRL_CMD_NEWFAMILY, 0, 255]))
        payload = draw(st.sampled_from([b"", struct.pack("=BBH", cmd, 1, 0)])) + draw(attrs())
        if draw(st.booleans()):
            payload = struct.pack("=i", draw(st.integers(-2**31, 2**31 - 1))) + payload
        length = draw(st.one_of(st.just(16 + len(payload)), st.integers(0, 0xFFFFFFFF)))
        kind = draw(st.sampled_from([NL80211, GENL_ID_CTRL, NLMSG_ERROR, NLMSG_DONE, 0xFFFF]))
        out += struct.pack("=IHHII", length, kind, 0, draw(st.sampled_from([SEQ, 0])), 0)
        out += payload + b"\0" * (-len(payload) % 4)
    return out[:draw(st.integers(0, len(out)))]


@settings(max_examples=500, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(hostile())
def test_hostile_datagrams_give_events_or_raise_nl80211error(data: bytes) -> None:
    _check_events(data)
    _check_family(data)


# ---- ssid_text ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ssid, text", [
    (CAFE, "Café ☕"),
    (b"", "(wildcard)"),
    (b"home\xff\xfe", "home\\xff\\xfe"),  # not UTF-8: the bytes, escaped
    (b"Caf\xc3", "Caf\\xc3"),  # a cut sequence
    (b"\xed\xb2\x80", "\\xed\\xb2\\x80"),  # an encoded surrogate is not UTF-8 either
    (b"a\x00b\nc\x1b[31m\x7f", "a\\x00b\\x0ac\\x1b[31m\\x7f"),  # controls, a terminal escape
    ("\u0085\u202eevil".encode(), "\\u0085\\u202eevil"),  # C1 control, right-to-left override
    (b"C:\\x41", "C:\\\\x41"),  # a backslash, doubled: no SSID reads as another's escape
    ("\U000e0001".encode(), "\\U000e0001"),
    ("Café\u3164☕".encode(), "Café\\u3164☕"),  # a letter that draws nothing
])
def test_ssid_text(ssid: bytes, text: str) -> None:
    assert ssid_text(ssid) == text


def test_ssid_text_tells_a_c1_character_from_a_stray_byte() -> None:
    assert ssid_text("\u0085".encode()) != ssid_text(b"\x85")


@settings(max_examples=300, deadline=1000)
@given(st.binary(min_size=1, max_size=32))
def test_ssid_text_is_always_printable(ssid: bytes) -> None:
    text = ssid_text(ssid)
    assert text.isprintable() and text
    assert text.encode("utf-8")  # no lone surrogate left in it


# ---- the listener over a fake socket ------------------------------------------------------------

class FakeKernel:
    """A socket the test plays the kernel's side of.  Each queued item is a datagram (bytes,
    sender port) or an exception for recvmsg to raise; one byte per item waits in a socketpair
    whose read end is fileno(), so the loop's add_reader and the resolver's poll see it.
    `answer(seq)` gives what the controller sends back for the family request (None: nothing)."""

    def __init__(self, answer: Callable[[int], bytes | None] | None = None) -> None:
        self.answer = answer if answer is not None else (lambda seq: family_answer(seq=seq))
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self.items: list[Any] = []
        self.sent: list[bytes] = []
        self.options: list[tuple[int, int, int]] = []
        self.blocking: bool | None = None
        self.closed = 0

    def queue(self, item: Any, port: int = 0) -> None:
        self.items.append(item if isinstance(item, BaseException) else (item, port))
        self._w.send(b"!")

    def sendto(self, data: bytes, address: tuple[int, int], /) -> int:
        assert address == (0, 0)
        self.sent.append(data)
        reply = self.answer(struct.unpack_from("=I", data, 8)[0])
        if reply is not None:
            self.queue(reply)
        return len(data)

    def recvmsg(self, bufsize: int, /) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        assert bufsize == nl80211.RECV_BUFFER and not self.closed
        try:
            self._r.recv(1)
        except BlockingIOError:
            raise BlockingIOError(errno.EAGAIN, "no data") from None
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        data, port = item
        return data, [], 0, (port, 0 if port else 64)  # (port id, groups)

    def setsockopt(self, level: int, option: int, value: int, /) -> None:
        self.options.append((level, option, value))

    def setblocking(self, flag: bool, /) -> None:
        self.blocking = flag

    def fileno(self) -> int:
        return self._r.fileno()

    def close(self) -> None:
        self.closed += 1

    def release(self) -> None:
        self._r.close()
        self._w.close()


@pytest.fixture
def kernels() -> Iterator[list[FakeKernel]]:
    made: list[FakeKernel] = []
    yield made
    for k in made:
        k.release()


Received = list[tuple[ScanEvent, float, float]]


def listener(kernels: list[FakeKernel], kernel: FakeKernel | None = None, timeout: float = 0.5
             ) -> tuple[Callable[[], Awaitable[ScanEvents]], FakeKernel, Received]:
    """What opens a ScanEvents on `kernel`, the kernel, and the list the callback fills."""
    fake = kernel or FakeKernel()
    kernels.append(fake)
    got: Received = []

    async def start() -> ScanEvents:
        return await ScanEvents.open(lambda e, m, r: got.append((e, m, r)),
                                     opener=lambda: fake, timeout=timeout)

    return start, fake, got


async def eventually(condition: Callable[[], object], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not true in time"
        await asyncio.sleep(0.005)


async def settle() -> None:
    """Let the loop run its readers for a while (to see that nothing arrives)."""
    for _ in range(10):
        await asyncio.sleep(0.005)


async def test_the_listener_joins_scan_and_delivers_events_with_times(
        kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    events = await start()
    assert kernel.sent == [family_request(SEQ)]
    assert kernel.options == [(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, GROUPS["scan"])]
    assert kernel.blocking is False
    assert events.family == Family(NL80211, GROUPS)
    before_m, before_r = time.monotonic(), time.time()
    kernel.queue(scan(ssids=[CAFE, b""]) + scan(CMD_NEW_SCAN_RESULTS, ssids=[CAFE, b""]))
    await eventually(lambda: len(got) == 2)
    (first, mono, real), (second, mono2, real2) = got
    assert first == ScanEvent("started", ifindex=3, wdev=1, ssids=(CAFE, b""),
                              frequencies=FREQS, wiphy=0)
    assert second.kind == "finished"
    assert before_m <= mono <= time.monotonic() and before_r - 1 <= real <= time.time() + 1
    assert (mono, real) == (mono2, real2)  # one datagram, one reading of the clocks
    events.close()


async def test_enobufs_is_counted_and_the_listener_goes_on(kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    events = await start()
    kernel.queue(OSError(errno.ENOBUFS, "No buffer space available"))
    kernel.queue(scan(CMD_SCAN_ABORTED, ssids=[]))
    await eventually(lambda: len(got) == 1)
    assert events.overruns == 1 and got[0][0].kind == "aborted"
    kernel.queue(OSError(errno.ENOBUFS, "No buffer space available"))
    await eventually(lambda: events.overruns == 2)
    kernel.queue(scan(ssids=[b"x"]))
    await eventually(lambda: len(got) == 2)
    assert got[1][0].ssids == (b"x",) and events.failure is None
    events.close()


async def test_a_datagram_not_from_the_kernel_is_ignored(kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    events = await start()
    kernel.queue(scan(ssids=[b"forged"]), port=4242)  # another process, writing to our port
    kernel.queue(scan(ssids=[b"real"]))
    await eventually(lambda: len(got) == 1)
    await settle()
    assert [e.ssids for e, _m, _r in got] == [(b"real",)] and events.foreign == 1
    events.close()


async def test_a_malformed_datagram_is_counted_and_skipped(kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    events = await start()
    kernel.queue(TRIGGER[:-4])
    kernel.queue(genl(NL80211, CMD_START_SCHED_SCAN))  # not a scan event: nothing, no count
    kernel.queue(TRIGGER)
    await eventually(lambda: len(got) == 1)
    await settle()
    assert got[0][0].ssids == (CAFE, b"") and events.malformed == 1 and len(got) == 1
    events.close()


async def test_another_receive_error_closes_the_listener_and_is_kept(
        kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    events = await start()
    kernel.queue(OSError(errno.EBADF, "Bad file descriptor"))
    await eventually(lambda: kernel.closed == 1)
    assert events.failure is not None and events.failure.errno == errno.EBADF and got == []


async def test_close_is_idempotent_and_stops_delivery(kernels: list[FakeKernel]) -> None:
    start, kernel, got = listener(kernels)
    async with await start() as events:
        kernel.queue(scan(ssids=[]))
        await eventually(lambda: len(got) == 1)
    assert kernel.closed == 1
    events.close()
    events.close()
    assert kernel.closed == 1
    kernel.queue(scan(ssids=[]))  # the reader is gone: nothing reads it, nothing is delivered
    await settle()
    assert len(got) == 1 and kernel.items


async def test_an_exception_in_the_callback_does_not_stop_later_events(
        kernels: list[FakeKernel]) -> None:
    kernel = FakeKernel()
    kernels.append(kernel)
    got: list[ScanEvent] = []
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))

    def on_event(event: ScanEvent, monotonic: float, realtime: float) -> None:
        got.append(event)
        if len(got) == 1:
            raise RuntimeError("the caller's bug")

    events = await ScanEvents.open(on_event, opener=lambda: kernel)
    kernel.queue(scan(ssids=[b"1"]))
    kernel.queue(scan(ssids=[b"2"]))
    await eventually(lambda: len(got) == 2)
    assert [e.ssids for e in got] == [(b"1",), (b"2",)]
    assert isinstance(errors[0].get("exception"), RuntimeError)
    events.close()
    loop.set_exception_handler(None)


async def test_no_wifi_support_is_said_in_words_and_the_socket_closed(
        kernels: list[FakeKernel]) -> None:
    start, kernel, _got = listener(kernels, FakeKernel(lambda seq: error(-errno.ENOENT, seq)))
    with pytest.raises(Nl80211Error) as e:
        await start()
    assert e.value.errno == errno.ENOENT and "no Wi-Fi (cfg80211/nl80211) support" in str(e.value)
    assert kernel.closed == 1 and kernel.options == []


async def test_no_scan_group_is_an_error_naming_it(kernels: list[FakeKernel]) -> None:
    groups = {k: v for k, v in GROUPS.items() if k != "scan"}
    start, kernel, _got = listener(kernels, FakeKernel(lambda seq: family_answer(groups, seq)))
    with pytest.raises(Nl80211Error) as e:
        await start()
    assert "'scan' multicast group" in str(e.value) and "mlme" in str(e.value)
    assert kernel.closed == 1 and kernel.options == []


async def test_the_family_request_waits_through_noise_and_times_out(
        kernels: list[FakeKernel]) -> None:
    kernel = FakeKernel(lambda seq: None)
    kernel.queue(family_answer(seq=SEQ), port=99)  # forged, not from the kernel
    kernel.queue(family_answer(seq=SEQ + 5))  # an answer to another request
    kernel.queue(InterruptedError(errno.EINTR, "signal"))
    start, kernel, _got = listener(kernels, kernel, timeout=0.05)
    started = time.monotonic()
    with pytest.raises(Nl80211Error) as e:
        await start()
    assert e.value.errno == errno.ETIMEDOUT and 0.05 <= time.monotonic() - started < 1.0
    assert kernel.items == [] and kernel.closed == 1


async def test_a_socket_that_cannot_be_opened_is_an_nl80211error() -> None:
    def opener() -> FakeKernel:
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(Nl80211Error) as e:
        await ScanEvents.open(lambda *a: None, opener=opener)
    assert e.value.errno == errno.EACCES


# ---- the real kernel ----------------------------------------------------------------------------

async def test_the_real_kernel_reports_scans_or_says_it_has_no_wifi() -> None:
    """Runs anywhere: with cfg80211 loaded the listener joins "scan"; without (this CI host),
    the error says so in words."""
    try:
        events = await ScanEvents.open(lambda *a: None)
    except Nl80211Error as e:
        assert e.errno == errno.ENOENT and "Wi-Fi" in str(e) and "support" in str(e)
    else:
        assert events.family is not None and "scan" in events.family.groups
        assert events.family.id >= GENL_ID_CTRL
        events.close()
        events.close()

"""nm_scanguard.peers.netlink without the kernel: the request's bytes, the parser (errors, multi-part
answers, other requests' answers, truncated and hostile datagrams) and LinkCounters' exchange
over a fake socket (EINTR, EAGAIN, a foreign sender, a stale answer, a timeout, truncation).

The kernel's side of the same ABI is tested in tests/contract/test_netlink_contract.py.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nm_scanguard.peers import netlink
from nm_scanguard.peers.netlink import (
    IFLA_IFNAME, IFLA_STATS, IFLA_STATS64, NLM_F_MULTI, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR,
    NLMSG_NOOP, NLMSG_OVERRUN, RTM_GETLINK, RTM_NEWLINK, LinkCounters, LinkStats, NetlinkError,
    Reply, parse, request,
)

USER_TEXT = "Café ☕"  # no interface can have it (a space): refused before anything is sent
SEQ = 7
STATS = LinkStats(rx_bytes=10_000_000_000, tx_bytes=2_000, rx_packets=30, tx_packets=4)


# ---- what the kernel would send, built here ---------------------------------------------------

def attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def stats64(s: LinkStats = STATS, extra: int = 20) -> bytes:
    """rtnl_link_stats64: rx/tx packets, rx/tx bytes, then `extra` more u64 (errors, drops)."""
    return struct.pack("=4Q", s.rx_packets, s.tx_packets, s.rx_bytes, s.tx_bytes) \
        + b"\x11" * 8 * extra


def stats32(s: LinkStats) -> bytes:
    """rtnl_link_stats: the same four in 32 bits (the kernel keeps their low halves)."""
    return struct.pack("=4I", *(v & 0xFFFFFFFF for v in (s.rx_packets, s.tx_packets, s.rx_bytes,
                                                          s.tx_bytes))) + b"\0" * 76


def message(kind: int, payload: bytes, seq: int = SEQ, flags: int = 0) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload
    return raw + b"\0" * (-len(raw) % 4)


def newlink(*attrs: bytes, seq: int = SEQ, flags: int = 0) -> bytes:
    ifinfo = struct.pack("=BxHiII", 0, 1, 3, 0x1003, 0)
    return message(RTM_NEWLINK, ifinfo + b"".join(attrs), seq, flags)


def error(code: int, seq: int = SEQ) -> bytes:
    """NLMSG_ERROR: the (negative) errno, then the request's header as the kernel echoes it."""
    return message(NLMSG_ERROR, struct.pack("=i", code) + struct.pack("=IHHII", 40, RTM_GETLINK,
                                                                      NLM_F_REQUEST, seq, 0), seq)


A_LINK = newlink(attr(IFLA_IFNAME, b"wl\xc3\xa9\0"), attr(IFLA_STATS, stats32(STATS)),
                 attr(IFLA_STATS64, stats64()))


# ---- the request --------------------------------------------------------------------------------

@pytest.mark.parametrize("ifname", ["wlan0", "wlé☕", "x" * 15])
def test_request_asks_for_one_link_by_name(ifname: str) -> None:
    data = request(0xFFFFFFFF, ifname)
    length, kind, flags, seq, port = struct.unpack_from("=IHHII", data)
    assert (length, kind, flags, seq, port) == (len(data), RTM_GETLINK, NLM_F_REQUEST,
                                                0xFFFFFFFF, 0)
    family, _type, index, _flags, _change = struct.unpack_from("=BxHiII", data, 16)
    assert (family, index) == (socket.AF_UNSPEC, 0)  # index 0: the kernel looks the name up
    alen, akind = struct.unpack_from("=HH", data, 32)
    name = ifname.encode() + b"\0"
    assert (alen, akind, data[36:36 + len(name)]) == (4 + len(name), IFLA_IFNAME, name)
    assert len(data) % 4 == 0 and data[36 + len(name):] == b"\0" * (len(data) - 36 - len(name))


# ---- the parser ---------------------------------------------------------------------------------

def test_a_link_gives_its_64_bit_counters() -> None:
    assert parse(A_LINK, SEQ) == Reply(finished=True, stats=STATS)


def test_without_stats64_the_32_bit_counters_are_used() -> None:
    small = LinkStats(rx_bytes=5, tx_bytes=6, rx_packets=7, tx_packets=8)
    assert parse(newlink(attr(IFLA_STATS, stats32(small))), SEQ).stats == small


def test_a_link_without_counters_finishes_with_none() -> None:
    assert parse(newlink(attr(IFLA_IFNAME, b"lo\0")), SEQ) == Reply(finished=True, stats=None)


def test_attribute_flag_bits_do_not_hide_an_attribute() -> None:
    """NLA_F_NESTED / NLA_F_NET_BYTEORDER are flags in the type's top bits, not the type."""
    assert parse(newlink(attr(IFLA_STATS64 | 0x8000, stats64())), SEQ).stats == STATS


def test_a_stats_attribute_too_short_for_the_four_counters_is_not_used() -> None:
    assert parse(newlink(attr(IFLA_STATS64, b"\1" * 24)), SEQ).stats is None
    small = LinkStats(1, 2, 3, 4)
    assert parse(newlink(attr(IFLA_STATS64, b"\1" * 24), attr(IFLA_STATS, stats32(small))),
                 SEQ).stats == small


def test_enodev_means_missing() -> None:
    assert parse(error(-errno.ENODEV), SEQ) == Reply(finished=True, missing=True)


@pytest.mark.parametrize("code", [errno.EPERM, errno.EINVAL, errno.ENOBUFS])
def test_other_kernel_errors_raise_with_their_errno(code: int) -> None:
    with pytest.raises(NetlinkError) as e:
        parse(error(-code), SEQ)
    assert e.value.errno == code


@pytest.mark.parametrize("code", [5, 2**31 - 1, -4096, -2**31])
def test_an_error_code_that_is_no_negative_errno_is_a_protocol_error(code: int) -> None:
    """The kernel's errnos are 1..4095 (MAX_ERRNO); -2**31 once made os.strerror overflow."""
    with pytest.raises(NetlinkError) as e:
        parse(error(code), SEQ)
    assert e.value.errno == errno.EPROTO


def test_an_acknowledgement_finishes() -> None:
    assert parse(error(0), SEQ) == Reply(finished=True)


def test_multi_part_answer_finishes_only_at_done() -> None:
    first = parse(newlink(attr(IFLA_STATS64, stats64()), flags=NLM_F_MULTI), SEQ)
    assert first == Reply(finished=False, stats=STATS)
    assert parse(message(NLMSG_DONE, b"\0" * 4, flags=NLM_F_MULTI), SEQ) == Reply(finished=True)
    # both in one datagram: the first link's counters, finished
    both = newlink(attr(IFLA_STATS64, stats64()), flags=NLM_F_MULTI) \
        + newlink(attr(IFLA_STATS64, stats64(LinkStats(1, 1, 1, 1))), flags=NLM_F_MULTI) \
        + message(NLMSG_DONE, b"\0" * 4, flags=NLM_F_MULTI)
    assert parse(both, SEQ) == Reply(finished=True, stats=STATS)


def test_answers_to_other_requests_and_noops_are_skipped() -> None:
    stale = newlink(attr(IFLA_STATS64, stats64(LinkStats(1, 1, 1, 1))), seq=SEQ - 1)
    assert parse(stale, SEQ) == Reply()
    assert parse(error(-errno.EPERM, seq=SEQ + 1), SEQ) == Reply()
    assert parse(stale + message(NLMSG_NOOP, b"") + A_LINK, SEQ) == Reply(finished=True,
                                                                         stats=STATS)


def test_an_unknown_message_type_is_skipped() -> None:
    assert parse(message(0x7777, b"\xff" * 12) + A_LINK, SEQ).stats == STATS


def test_an_empty_datagram_says_nothing() -> None:
    assert parse(b"", SEQ) == Reply()


@pytest.mark.parametrize("data, what", [
    (A_LINK[:20], "message longer than the datagram"),
    (A_LINK + b"\0" * 3, "stray bytes"),
    (struct.pack("=IHHII", 8, RTM_NEWLINK, 0, SEQ, 0), "length below a header"),
    (message(RTM_NEWLINK, b"\0" * 8), "RTM_NEWLINK without its ifinfomsg"),
    (newlink(struct.pack("=HH", 2, IFLA_STATS64)), "attribute shorter than its header"),
    (newlink(struct.pack("=HH", 200, IFLA_STATS64) + b"\0" * 8), "attribute past the message"),
    (message(NLMSG_ERROR, b"\0\0"), "error without its code"),
    (message(NLMSG_OVERRUN, b""), "overrun"),
])
def test_malformed_datagrams_raise_ebadmsg(data: bytes, what: str) -> None:
    with pytest.raises(NetlinkError) as e:
        parse(data, SEQ)
    assert e.value.errno == errno.EBADMSG, what


def test_every_truncation_of_a_link_returns_or_raises_ebadmsg() -> None:
    """Cut anywhere, the answer is either unfinished-and-empty or malformed: never a number
    read from a half attribute."""
    for cut in range(len(A_LINK)):
        try:
            reply = parse(A_LINK[:cut], SEQ)
        except NetlinkError as e:
            assert e.errno == errno.EBADMSG
        else:
            assert reply == Reply(), cut


# ---- hostile bytes (Hypothesis) -----------------------------------------------------------------

def _check(data: bytes, seq: int) -> None:
    try:
        reply = parse(data, seq)
    except NetlinkError as e:
        assert e.errno is not None and e.errno > 0
    else:
        assert isinstance(reply, Reply)
        if reply.stats is not None:
            assert all(0 <= v < 2**64 for v in (reply.stats.rx_bytes, reply.stats.tx_bytes,
                                                 reply.stats.rx_packets, reply.stats.tx_packets))


@settings(max_examples=400, deadline=1000)
@given(st.binary(max_size=512), st.integers(0, 2**32 - 1))
def test_garbage_returns_a_reply_or_raises_netlinkerror(data: bytes, seq: int) -> None:
    _check(data, seq)


HEADER_KINDS = st.sampled_from([NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN,
                                RTM_NEWLINK, RTM_GETLINK, 0, 0xFFFF])
ATTR_KINDS = st.sampled_from([IFLA_STATS64, IFLA_STATS, IFLA_IFNAME, IFLA_STATS64 | 0xC000, 0])


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """Datagrams that look right at first: plausible headers with lying lengths and flags,
    attributes with lying lengths, cut anywhere."""
    out = b""
    for _ in range(draw(st.integers(1, 4))):
        attrs = b""
        for _ in range(draw(st.integers(0, 4))):
            body = draw(st.binary(max_size=64))
            alen = draw(st.one_of(st.just(4 + len(body)), st.integers(0, 0xFFFF)))
            attrs += struct.pack("=HH", alen, draw(ATTR_KINDS)) + body
        code = draw(st.one_of(st.integers(-2**31, 2**31 - 1),
                              st.sampled_from([-2**31, -4096, -errno.ENODEV, 0])))
        payload = draw(st.sampled_from([b"", struct.pack("=i", code)])) \
            + draw(st.binary(min_size=0, max_size=20)) + attrs
        length = draw(st.one_of(st.just(16 + len(payload)), st.integers(0, 0xFFFFFFFF)))
        out += struct.pack("=IHHII", length, draw(HEADER_KINDS),
                           draw(st.sampled_from([0, NLM_F_MULTI, 0xFFFF])),
                           draw(st.sampled_from([SEQ, SEQ + 1, 0])), 0) + payload
    return out[:draw(st.integers(0, len(out)))]


@settings(max_examples=400, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(hostile())
def test_hostile_datagrams_return_a_reply_or_raise_netlinkerror(data: bytes) -> None:
    _check(data, SEQ)


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(hostile(), st.binary(max_size=64)), min_size=1, max_size=40))
def test_read_ends_on_any_stream_of_datagrams(datagrams: list[bytes]) -> None:
    """Whatever the kernel's side sends, read() gives counters, None or NetlinkError, and
    returns (a bounded number of datagrams, or the fake's EAGAIN and a short deadline)."""
    sock = FakeSocket([(d, 0) for d in datagrams])
    reader = LinkCounters(opener=lambda: sock, timeout=0.01)
    reader._seq = SEQ - 1  # the request is number SEQ, which hostile() mostly answers
    try:
        got = reader.read("wlan0")
    except NetlinkError as e:  # EBADMSG, ETIMEDOUT, or whatever errno a forged error carries
        assert e.errno is not None and e.errno > 0
    else:
        assert got is None or got.rx_bytes >= 0
    reader.close()


# ---- LinkCounters over a fake socket ------------------------------------------------------------

class FakeSocket:
    """Plays the kernel's side: each queued item is a datagram (bytes, sender port), an
    exception to raise from recvmsg, or a callable of the request's sequence number giving a
    datagram.  Out of items: EAGAIN (and poll() finds nothing: the fd is a pipe never written)."""

    def __init__(self, items: list[Any], flags: int = 0) -> None:
        self.items = list(items)
        self.sent: list[bytes] = []
        self.closed = False
        self.flags = flags
        self._r, self._w = os.pipe()

    def sendto(self, data: bytes, address: tuple[int, int], /) -> int:
        assert address == (0, 0)
        self.sent.append(data)
        return len(data)

    @property
    def seq(self) -> int:
        return int(struct.unpack_from("=I", self.sent[-1], 8)[0])

    def recvmsg(self, bufsize: int, /) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        assert bufsize == netlink.RECV_BUFFER
        if not self.items:
            raise BlockingIOError(errno.EAGAIN, "no data")
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item(self.seq)
        data, port = item
        return data, [], self.flags, (port, 0)

    def fileno(self) -> int:
        return self._r

    def close(self) -> None:
        self.closed = True
        os.close(self._r)
        os.close(self._w)


def link_for(seq: int) -> tuple[bytes, int]:
    return newlink(attr(IFLA_STATS64, stats64()), seq=seq), 0


@pytest.fixture
def opened() -> Iterator[list[FakeSocket]]:
    socks: list[FakeSocket] = []
    yield socks
    for sock in socks:
        if not sock.closed:
            sock.close()


def reader_with(opened: list[FakeSocket], *batches: list[Any], flags: int = 0,
                timeout: float = 0.05) -> LinkCounters:
    """A LinkCounters whose n-th socket plays batches[n]."""
    queue = list(batches)

    def opener() -> FakeSocket:
        sock = FakeSocket(queue.pop(0), flags=flags)
        opened.append(sock)
        return sock

    return LinkCounters(opener=opener, timeout=timeout)


def test_read_gives_counters_with_a_time(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [link_for])
    got = reader.read("wlé0")
    assert got is not None
    assert (got.rx_bytes, got.tx_bytes, got.rx_packets, got.tx_packets) == \
        (STATS.rx_bytes, STATS.tx_bytes, STATS.rx_packets, STATS.tx_packets)
    assert opened[0].sent == [request(1, "wlé0")]


def test_eintr_and_eagain_are_waited_through(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [InterruptedError(errno.EINTR, "signal"),
                                  BlockingIOError(errno.EAGAIN, "later"), link_for])
    assert reader.read("wlan0") is not None


def test_no_answer_times_out_and_replaces_the_socket(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [], [link_for], timeout=0.02)
    with pytest.raises(NetlinkError) as e:
        reader.read("wlan0")
    assert e.value.errno == errno.ETIMEDOUT and opened[0].closed
    assert reader.read("wlan0") is not None and len(opened) == 2


def test_a_datagram_not_from_the_kernel_is_ignored(opened: list[FakeSocket]) -> None:
    forged = (error(-errno.ENODEV, seq=1), 4242)  # another process, writing to our port
    reader = reader_with(opened, [forged, link_for])
    assert reader.read("wlan0") is not None


def test_a_late_answer_to_an_earlier_request_is_not_taken(opened: list[FakeSocket]) -> None:
    stale = (newlink(attr(IFLA_STATS64, stats64(LinkStats(1, 1, 1, 1)))), 0)  # seq 7
    reader = reader_with(opened, [stale, link_for])
    got = reader.read("wlan0")
    assert got is not None and got.rx_bytes == STATS.rx_bytes


def test_sequence_numbers_grow_and_wrap_past_zero(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [link_for, link_for, link_for])
    reader._seq = 0xFFFFFFFE
    for _ in range(3):
        reader.read("wlan0")
    assert [struct.unpack_from("=I", d, 8)[0] for d in opened[0].sent] == [0xFFFFFFFF, 1, 2]


def test_enodev_is_none_and_the_socket_stays(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [lambda seq: (error(-errno.ENODEV, seq), 0), link_for])
    assert reader.read("wlan0") is None
    assert reader.read("wlan0") is not None and len(opened) == 1


def test_a_kernel_error_raises_and_replaces_the_socket(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [lambda seq: (error(-errno.EPERM, seq), 0)], [link_for])
    with pytest.raises(NetlinkError) as e:
        reader.read("wlan0")
    assert e.value.errno == errno.EPERM and opened[0].closed
    assert reader.read("wlan0") is not None


def test_a_truncated_datagram_raises_emsgsize(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [link_for], flags=socket.MSG_TRUNC)
    with pytest.raises(NetlinkError) as e:
        reader.read("wlan0")
    assert e.value.errno == errno.EMSGSIZE


def test_endless_foreign_datagrams_end_in_ebadmsg(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [(A_LINK, 99)] * (netlink.MAX_DATAGRAMS + 5))
    with pytest.raises(NetlinkError) as e:
        reader.read("wlan0")
    assert e.value.errno == errno.EBADMSG


def test_a_socket_error_becomes_netlinkerror(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [OSError(errno.ENOBUFS, "No buffer space available")])
    with pytest.raises(NetlinkError) as e:
        reader.read("wlan0")
    assert e.value.errno == errno.ENOBUFS and opened[0].closed


def test_multi_part_over_two_datagrams(opened: list[FakeSocket]) -> None:
    first = lambda seq: (newlink(attr(IFLA_STATS64, stats64()), seq=seq, flags=NLM_F_MULTI), 0)  # noqa: E731
    done = lambda seq: (message(NLMSG_DONE, b"\0" * 4, seq=seq, flags=NLM_F_MULTI), 0)  # noqa: E731
    reader = reader_with(opened, [first, done])
    got = reader.read("wlan0")
    assert got is not None and got.tx_packets == STATS.tx_packets


@pytest.mark.parametrize("ifname", [USER_TEXT, "", "x" * 16, "wl/0", "\udcff"])
def test_a_name_linux_cannot_have_is_refused_before_any_socket(
        opened: list[FakeSocket], ifname: str) -> None:
    reader = reader_with(opened, [link_for])
    with pytest.raises(ValueError) as e:
        reader.read(ifname)
    assert repr(ifname) in str(e.value)
    assert opened == []


def test_close_is_idempotent(opened: list[FakeSocket]) -> None:
    reader = reader_with(opened, [link_for])
    reader.read("wlan0")
    reader.close()
    reader.close()
    assert opened[0].closed

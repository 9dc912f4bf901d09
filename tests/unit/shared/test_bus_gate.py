"""bus_gate.Gate on a socket pair: whole messages passed on byte for byte, an oversized one
dropped from its fixed header without being held, whatever the reads' sizes and however the
bytes arrive; the sender named in the warning, once a minute."""

from __future__ import annotations

import logging
import socket
import struct

import pytest

from nm_scanguard import bus_gate
from nm_scanguard.bus_gate import Gate, GateSocket
from nm_scanguard.dbuslib import Message, MessageType


def signal(size: int, sender: str = ":1.42") -> bytes:
    """A marshalled signal of about `size` bytes, with the SENDER field the bus adds."""
    msg = Message(message_type=MessageType.SIGNAL, path="/", interface="org.example.Flood",
                  member="Big", signature="ay", body=[b"\xe2" * size], serial=1)
    try:
        raw = bytes(msg._marshall())
    except TypeError:  # dbus-fast 2.x: _marshall(negotiate_unix_fd)
        raw = bytes(msg._marshall(False))
    (length,) = struct.unpack_from("<I", raw, 12)
    fields, body = raw[16:16 + length], raw[16 + length + (-length % 8):]
    fields += b"\0" * (-len(fields) % 8) + bytes([7, 1]) + b"s\0"
    fields += b"\0" * (-len(fields) % 4)
    fields += struct.pack("<I", len(sender.encode())) + sender.encode() + b"\0"
    head = bytearray(raw[:16])
    struct.pack_into("<I", head, 12, len(fields))
    return bytes(head) + fields + b"\0" * (-len(fields) % 8) + body


def read_all(gate: Gate, n: int) -> bytes:
    out = b""
    while (data := gate.read(n)) is not None and data:
        out += data
    return out


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("n", [1, 16, 4096, 1 << 20])
def test_messages_under_the_cap_pass_whole_and_one_over_it_is_dropped(pair, n, caplog):
    a, b = pair
    small, big, last = signal(100), signal(50_000), signal(3, ":1.9")
    gate = Gate(b, limit=10_000)
    a.sendall(small + big + last)
    with caplog.at_level(logging.WARNING, logger="scanguard"):
        out = read_all(gate, n)
        out += read_all(gate, n)  # the drop may end a read: the next goes on
    assert out == small + last
    assert gate.dropped == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "longer than 10000 bytes" in line and f"{len(big)} bytes" in line
    assert "1 from :1.42" in line


def test_a_message_arriving_in_pieces_is_dropped_piece_by_piece(pair):
    a, b = pair
    big, after = signal(200_000), signal(10)
    gate = Gate(b, limit=1000)
    a.sendall(big[:10])  # not even the fixed header yet
    assert gate.read(4096) is None
    for start in range(10, len(big), 30_000):
        a.sendall(big[start:start + 30_000])
        assert gate.read(4096) is None  # dropped so far, nothing to pass on
    a.sendall(after)
    assert read_all(gate, 4096) == after


def test_the_end_of_the_stream_reaches_the_library(pair):
    a, b = pair
    gate = Gate(b)
    a.sendall(signal(10)[:20])
    a.close()
    assert gate.read(16) == signal(10)[:16]
    assert gate.read(100) == signal(10)[16:20]
    assert gate.read(100) == b""


def test_the_socket_form_raises_eagain_when_empty_as_a_socket_does(pair):
    a, b = pair
    sock = GateSocket(Gate(b, limit=1000), b)
    with pytest.raises(BlockingIOError):
        sock.recv(4096)
    a.sendall(signal(5000) + signal(5))
    assert sock.recv(4096) == signal(5)
    assert sock.fileno() == b.fileno()


def test_warnings_are_one_a_minute_with_the_count_per_sender(pair, caplog, monkeypatch):
    a, b = pair
    now = [1000.0]
    monkeypatch.setattr(bus_gate.time, "monotonic", lambda: now[0])
    gate = Gate(b, limit=100)
    with caplog.at_level(logging.WARNING, logger="scanguard"):
        for n in range(50):
            a.sendall(signal(200, f":1.{n % 2}"))
            read_all(gate, 4096)
            now[0] += 1.0
    assert gate.dropped == 50
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1  # the first; the next waits for a minute to pass
    now[0] += 60
    a.sendall(signal(200, ":1.7"))
    with caplog.at_level(logging.WARNING, logger="scanguard"):
        read_all(gate, 4096)
    assert "25 from :1.1, 24 from :1.0, 1 from :1.7" in caplog.records[-1].getMessage()


def test_the_daemons_connection_reads_through_a_gate(tmp_path):
    from nm_scanguard import dbuslib
    if dbuslib.LIBRARY == "dbus_next":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(tmp_path / "bus"))
        server.listen(1)
        try:
            bus = dbuslib.MessageBus(bus_address=f"unix:path={tmp_path / 'bus'}")
            assert dbuslib.gate_incoming(bus) is None
            assert isinstance(bus._unmarshaller.stream, bus_gate.GateStream)
            bus._sock.close()
        finally:
            server.close()
    else:  # dbus-fast 2.x: the reader its connect() builds gets a GateSocket
        assert dbuslib._GATED_BUILDER is None

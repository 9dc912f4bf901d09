"""The size of every D-Bus message the daemon reads, decided from its fixed header before the
D-Bus library reads it.

Both libraries unmarshal a whole message before any handler, match rule or signature check
sees it, and the bus lets any local user send a signal to our unique name or call our
interface.  An array of variants grows about 30 times in memory as Python objects and parses at
about 0.5 s per MB: one 7 MB signal from `nobody` took the daemon past the unit's MemoryMax
(192 MiB) and the kernel killed it.  So the bytes of each message go through a Gate on their
way from the socket to the library: the fixed header (16 bytes: the body's and the header
fields' lengths) says how long the message is, and one longer than MAX_MESSAGE_BYTES is read
and dropped in pieces, never held whole, with a warning at most once a minute.

MAX_MESSAGE_BYTES is 1 MiB.  The largest messages our peers send are a few kilobytes to a few
tens: NetworkManager's GetSettings of a profile (a certificate inline is at most a few tens
of KB), a GetAll of an access point or of wpa_supplicant's interface (a list of BSS paths),
polkit's answers.  A dropped reply would make our call time out (25 s), as if the peer had
not answered, and be reported so; a dropped signal or call from a local user is what the cap
is for.  Under it a message costs the daemon at most about 30 MiB and 0.5 s, once.

The Gate never holds bytes back: it reads from the socket only what it passes on (up to the
end of the current message) or drops, so whenever it has nothing to give the socket is empty
and the event loop calls the reader again once it is not.  It peeks (MSG_PEEK) at each
message's start, which leaves the bytes in the socket for the library.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from typing import Any

log = logging.getLogger("scanguard")

MAX_MESSAGE_BYTES = 1 << 20
FIXED_HEADER = 16
DROP_CHUNK = 1 << 16
WARN_EVERY = 60.0  # seconds between two warnings about dropped messages
SENDER_FIELD = 7  # the header field that names the sender (the bus fills it in)


class Gate:
    """One connection's incoming bytes, whole messages up to `limit` passed on, longer ones
    dropped.  `read(n)`: up to n bytes, b"" at the end of the stream, None when the socket has
    nothing now (as a non-blocking stream's read)."""

    def __init__(self, sock: socket.socket, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._sock = sock
        self.limit = limit
        self._left = 0  # bytes of the current message still to pass on
        self._drop = 0  # bytes of the current (oversized) message still to drop
        self.dropped = 0  # messages dropped, in all
        self._unreported: dict[str, int] = {}  # sender -> messages dropped since the last warning
        self._warned_at: float | None = None

    def read(self, n: int) -> bytes | None:
        try:
            while True:
                if self._drop:
                    data = self._sock.recv(min(self._drop, DROP_CHUNK))
                    if not data:
                        return b""
                    self._drop -= len(data)
                    continue
                if not self._left and not self._start():
                    return None
                if self._drop:
                    continue
                data = self._sock.recv(min(n, self._left))
                self._left -= len(data)
                return data
        except BlockingIOError:
            return None

    def _start(self) -> bool:
        """At a message's start: its length from the fixed header; False while the header has
        not all arrived.  The end of the stream is for the library to meet (read gives b"")."""
        head = self._sock.recv(FIXED_HEADER, socket.MSG_PEEK)
        if not head:
            self._left = 1  # let the library's read meet the end of the stream
            return True
        if len(head) < FIXED_HEADER:
            return False
        order = "<" if head[0] == ord("l") else ">"  # anything else: the library refuses it
        body, _serial, fields = struct.unpack_from(order + "III", head, 4)
        total = FIXED_HEADER + fields + (-fields % 8) + body
        if total <= self.limit:
            self._left = total
            return True
        sender = ""
        if fields <= 4096:
            sender = _sender(self._sock.recv(FIXED_HEADER + fields, socket.MSG_PEEK), order) or ""
        self._drop = total
        self.dropped += 1
        self._warn(sender or "an unnamed sender", total)
        return True

    def _warn(self, sender: str, size: int) -> None:
        self._unreported[sender] = self._unreported.get(sender, 0) + 1
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY:
            return
        self._warned_at = now
        who = ", ".join(f"{n} from {s}" for s, n in sorted(self._unreported.items(),
                                                           key=lambda item: -item[1])[:4])
        log.warning("dropped D-Bus message(s) longer than %d bytes, the most any peer of ours "
                    "sends (the last one %d bytes): %s; a local program is sending them",
                    self.limit, size, who)
        self._unreported.clear()


def _sender(header: bytes, order: str) -> str | None:
    """The SENDER header field of a message whose fixed header and header fields are
    `header`, if it can be read; the bus writes it, so it names who sent the message."""
    try:
        pos, end = FIXED_HEADER, len(header)
        while pos < end:
            pos += -pos % 8
            code, size = header[pos], header[pos + 1]
            signature = header[pos + 2:pos + 2 + size]
            pos += 3 + size
            if signature in (b"s", b"o"):
                pos += -pos % 4
                (length,) = struct.unpack_from(order + "I", header, pos)
                value = header[pos + 4:pos + 4 + length]
                pos += 5 + length
            elif signature == b"g":
                length = header[pos]
                value = header[pos + 1:pos + 1 + length]
                pos += 2 + length
            elif signature in (b"u", b"h"):
                pos += -pos % 4 + 4
                continue
            else:
                return None
            if code == SENDER_FIELD:
                return value.decode("utf-8", "replace")
    except (IndexError, struct.error):
        pass
    return None


class GateStream:
    """A Gate as dbus-next's unmarshaller reads a stream; anything else goes to the library's
    own stream."""

    def __init__(self, gate: Gate, stream: Any) -> None:
        self.gate = gate
        self._stream = stream

    def read(self, n: int) -> bytes | None:
        return self.gate.read(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class GateSocket:
    """A Gate as dbus-fast 2.x's reader reads the socket (recv, EAGAIN when empty); every other
    use goes to the socket itself.  Only recv goes through the Gate: the daemon never
    negotiates Unix fd passing, so the library never calls recvmsg."""

    def __init__(self, gate: Gate, sock: socket.socket) -> None:
        self.gate = gate
        self._sock = sock

    def recv(self, n: int, *flags: int) -> bytes:
        if flags:
            return self._sock.recv(n, *flags)
        data = self.gate.read(n)
        if data is None:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

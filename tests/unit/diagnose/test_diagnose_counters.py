"""diagnose reads the byte counters the way the daemon does (peers/netlink.py, LinkCounters)."""

from __future__ import annotations

from nm_scanguard.diagnose.record import read_bytes
from nm_scanguard.peers.netlink import NetlinkError
from nm_scanguard.peers.netlink import Counters


class Reader:
    def __init__(self, answer: Counters | None | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def read(self, ifname: str) -> Counters | None:
        self.asked.append(ifname)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_bytes_each_way_or_none_when_they_cannot_be_read():
    c = Counters(time=1.0, rx_bytes=1500, tx_bytes=40, rx_packets=2, tx_packets=1)
    reader = Reader(c)
    assert read_bytes(reader, "wlan0") == (1500, 40) and reader.asked == ["wlan0"]  # type: ignore[arg-type]
    assert read_bytes(Reader(None), "wlan9") is None  # type: ignore[arg-type]
    assert read_bytes(Reader(NetlinkError(13, "refused")), "wlan0") is None  # type: ignore[arg-type]
    assert read_bytes(Reader(ValueError("Café ☕ is no name")), "Café ☕") is None  # type: ignore[arg-type]

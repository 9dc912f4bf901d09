"""Counters to rates.  Pure: no I/O, the caller passes the time of each sample."""

from __future__ import annotations

from typing import NamedTuple


class Counters(NamedTuple):
    """One reading of an interface's kernel counters (IFLA_STATS64)."""

    time: float
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


class Rates(NamedTuple):
    rx_bps: float  # bits per second
    tx_bps: float
    pps: float  # packets per second, rx + tx
    seconds: float = 0.0  # the interval these rates cover, ending at the sample's time

    @property
    def mbit(self) -> float:
        """The busier direction, in Mbit/s: an upload is as busy as a download."""
        return max(self.rx_bps, self.tx_bps) / 1e6


class RateMeter:
    """Turns successive counter readings into rates.

    A counter that goes down means the interface was reset or re-created (or a 32-bit counter
    wrapped): we cannot know how much traffic passed, so that interval yields no rate and the
    new reading becomes the baseline.  Guessing would risk engaging on a phantom burst.
    """

    def __init__(self) -> None:
        self._last: Counters | None = None

    def reset(self) -> None:
        self._last = None

    def update(self, now: Counters) -> Rates | None:
        last, self._last = self._last, now
        if last is None:
            return None
        dt = now.time - last.time
        deltas = (
            now.rx_bytes - last.rx_bytes,
            now.tx_bytes - last.tx_bytes,
            now.rx_packets - last.rx_packets,
            now.tx_packets - last.tx_packets,
        )
        if dt <= 0 or min(deltas) < 0:
            return None
        rx, tx, rxp, txp = deltas
        return Rates(rx_bps=rx * 8 / dt, tx_bps=tx * 8 / dt, pps=(rxp + txp) / dt, seconds=dt)

"""nm_scanguard.peers.netlink against the real kernel (rtnetlink's RTM_GETLINK is the peer): every
interface of this host and `lo` checked against /sys/class/net/IF/statistics; `lo` counting the
datagrams a test sends over it; veth links (ASCII and non-ASCII names) checked against what
`ip -s -j link` reports; a veth pair carrying traffic; None for a missing or vanished interface;
names Linux cannot have.  The parser's own cases (errors, multi-part, hostile bytes) are unit
tests: tests/unit/peers/test_netlink.py.

Creating links and packet sockets needs root: those tests fail (not skip) without it, like the
other contract tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from nm_scanguard.peers.netlink import LinkCounters
from nm_scanguard.peers.netlink import Counters

if TYPE_CHECKING:
    from tests.peers import Link

ROOT = Path(__file__).resolve().parents[2]
USER_TEXT = "Café ☕"  # 9 bytes: a legal length, but no interface can have a space in its name


COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")


def _sysfs(ifname: str) -> dict[str, int] | None:
    """The kernel's counters through sysfs (the same dev_get_stats(), another door); None if the
    interface went away meanwhile (other people's tests create and delete links here)."""
    try:
        return {key: int(Path("/sys/class/net", ifname, "statistics", key).read_text())
                for key in COUNTERS}
    except FileNotFoundError:
        return None


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("tests/unit/peers/test_netlink.py creates veth links: run it as root")


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def _ip_stats(ifname: str) -> dict[str, int]:
    """The kernel's counters as iproute2 reads them: the independent witness."""
    (info,) = json.loads(_ip("-s", "-j", "link", "show", "dev", ifname))
    s = info["stats64"]
    return {"rx_bytes": s["rx"]["bytes"], "tx_bytes": s["tx"]["bytes"],
            "rx_packets": s["rx"]["packets"], "tx_packets": s["tx"]["packets"]}


def _as_dict(c: Counters) -> dict[str, int]:
    return {"rx_bytes": c.rx_bytes, "tx_bytes": c.tx_bytes,
            "rx_packets": c.rx_packets, "tx_packets": c.tx_packets}


class Veth:
    """A veth pair, both ends here, IPv6 off: its counters move only when the test sends.

    (This kernel has no dummy driver; veth is what the D-Bus tests use as well.)  Frames go
    out through a packet socket, so the test knows each one's exact length."""

    def __init__(self, ifname: str) -> None:
        self.ifname = ifname
        self.peer = f"sgp{_tag()}"
        _ip("link", "add", "name", ifname, "type", "veth", "peer", "name", self.peer)

    def up(self) -> None:
        for end in (self.ifname, self.peer):
            Path("/proc/sys/net/ipv6/conf", end, "disable_ipv6").write_text("1")
        for end in (self.ifname, self.peer):
            _ip("link", "set", "dev", end, "up")

    def send(self, count: int, size: int) -> int:
        """`count` Ethernet frames of `size` bytes to the peer; returns the frame length."""
        frame = bytes.fromhex("ffffffffffff" "020000000001" "88b5")  # local experimental type
        frame += b"\0" * (size - len(frame))
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((self.ifname, 0))
            for _ in range(count):
                s.send(frame)
        return len(frame)

    def remove(self) -> None:  # removes both ends
        subprocess.run(["ip", "link", "del", "dev", self.ifname], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _tag() -> str:
    return uuid.uuid4().hex[:4]  # other engineers run tests on this machine at the same time


def _fifteen_bytes(tag: str) -> str:
    name = f"☕é{tag}é"  # 3 + 2 + 4 + 2 = 11 bytes
    name += "x" * (15 - len(name.encode()))
    assert len(name.encode()) == 15
    return name


@pytest.fixture
def reader() -> Iterator[LinkCounters]:
    lc = LinkCounters()
    yield lc
    lc.close()


@pytest.fixture(params=["ascii", "non-ascii", "15 bytes"])
def veth(request: pytest.FixtureRequest) -> Iterator[Veth]:
    _need_root()
    tag = _tag()
    name = {"ascii": f"sgd{tag}", "non-ascii": f"wlé{tag}",
            "15 bytes": _fifteen_bytes(tag)}[request.param]
    v = Veth(name)
    try:
        yield v
    finally:
        v.remove()


def test_reads_the_counters_iproute2_sees(reader: LinkCounters, veth: Veth) -> None:
    before = reader.read(veth.ifname)
    assert before is not None
    assert _as_dict(before) == _ip_stats(veth.ifname)  # down, so quiet: no race


def test_counts_frames_sent_through_the_link(reader: LinkCounters, veth: Veth) -> None:
    veth.up()
    before, peer_before = reader.read(veth.ifname), reader.read(veth.peer)
    assert before is not None and peer_before is not None
    count = 37
    length = veth.send(count, 1000)
    after, peer_after = reader.read(veth.ifname), reader.read(veth.peer)
    assert after is not None and peer_after is not None
    assert _as_dict(after) == _ip_stats(veth.ifname)
    assert (after.tx_packets - before.tx_packets, after.tx_bytes - before.tx_bytes) \
        == (count, count * length)
    assert (peer_after.rx_packets - peer_before.rx_packets,
            peer_after.rx_bytes - peer_before.rx_bytes) == (count, count * length)
    assert after.time > before.time


def test_veth_with_traffic(reader: LinkCounters, link: Link) -> None:
    """The daemon's bench and D-Bus tests read a veth pair whose peer is in its own namespace."""
    _need_root()
    first = reader.read(link.ifname)
    assert first is not None
    link.send(mbit=8)
    try:
        deadline = time.monotonic() + 5
        latest = first
        while time.monotonic() < deadline and latest.tx_packets - first.tx_packets < 100:
            time.sleep(0.05)
            now = reader.read(link.ifname)
            assert now is not None
            latest = now
    finally:
        link.stop()
    assert latest.tx_packets - first.tx_packets >= 100
    assert latest.tx_bytes - first.tx_bytes >= 100 * 1400  # Link sends 1400-byte payloads
    # iproute2, read between two of our reads, sees counters between ours (ARP may still talk)
    ours_before, theirs, ours_after = reader.read(link.ifname), _ip_stats(link.ifname), \
        reader.read(link.ifname)
    assert ours_before is not None and ours_after is not None
    for key, value in theirs.items():
        assert _as_dict(ours_before)[key] <= value <= _as_dict(ours_after)[key], key


@pytest.mark.parametrize("ifname", ["sgnone0", "wlé-none", "☕é" + "x" * 10])
def test_missing_interface_is_none(reader: LinkCounters, ifname: str) -> None:
    assert reader.read(ifname) is None
    assert reader.read("lo") is not None  # the socket is still usable after ENODEV


def test_interface_that_vanishes_between_reads(reader: LinkCounters) -> None:
    _need_root()
    v = Veth(f"wlé{_tag()}")
    try:
        assert reader.read(v.ifname) is not None
    finally:
        v.remove()
    assert reader.read(v.ifname) is None


@pytest.mark.parametrize("ifname", ["", "x" * 16, "é" * 8, "sg\0x", USER_TEXT, USER_TEXT * 2,
                                    "wl/0", "wl:0", ".", "..", "wlan0\n", "\udcff"])
def test_names_linux_cannot_have_raise_valueerror(reader: LinkCounters, ifname: str) -> None:
    """The one interface-name rule (nm_scanguard.peers.ifname), not a second one of netlink's."""
    from nm_scanguard.peers.values import valid_ifname

    assert not valid_ifname(ifname)
    with pytest.raises(ValueError) as e:
        reader.read(ifname)
    assert repr(ifname) in str(e.value) and "1 to 15 bytes" in str(e.value)


def test_every_interface_here_agrees_with_sysfs(reader: LinkCounters) -> None:
    """Each interface's counters read between two of ours lie between them: exact on a quiet
    link, and no tolerance to tune on a busy one."""
    checked = []
    for ifname in sorted(os.listdir("/sys/class/net")):
        before = reader.read(ifname)
        theirs = _sysfs(ifname)
        after = reader.read(ifname)
        if before is None or theirs is None or after is None:
            continue  # created or deleted by somebody else's test meanwhile
        for key in COUNTERS:
            assert _as_dict(before)[key] <= theirs[key] <= _as_dict(after)[key], (ifname, key)
        checked.append(ifname)
    assert "lo" in checked, checked


def test_lo_counts_what_is_sent_over_it(reader: LinkCounters) -> None:
    """Datagrams to 127.0.0.1 go out and come back in through lo: each is one packet each way,
    with at least its payload in bytes (other processes may talk over lo too, so at least)."""
    count, payload = 25, 1000
    before = reader.read("lo")
    assert before is not None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        for _ in range(count):
            tx.sendto(b"\0" * payload, rx.getsockname())
        rx.settimeout(5)
        for _ in range(count):
            rx.recv(payload)  # all arrived: the kernel has counted them
    after = reader.read("lo")
    assert after is not None
    assert after.tx_packets - before.tx_packets >= count
    assert after.rx_packets - before.rx_packets >= count
    assert after.tx_bytes - before.tx_bytes >= count * payload
    assert after.rx_bytes - before.rx_bytes >= count * payload
    assert _sysfs("lo") is not None


def test_importing_netlink_loads_only_the_standard_library() -> None:
    """No pyroute2 (213 modules, ~10 MiB in the daemon) and no readline (ncurses' set-up calls
    setfsuid() on Debian 13, which the unit's filter denies).  A fresh interpreter: pytest has
    loaded much already."""
    code = ("import sys; before = set(sys.modules); import nm_scanguard.peers.netlink\n"
            "new = sorted(m for m in set(sys.modules) - before\n"
            "             if m.split('.')[0] not in sys.stdlib_module_names)\n"
            "print(' '.join(new))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["nm_scanguard", "nm_scanguard.peers", "nm_scanguard.peers.netlink",
                                   "nm_scanguard.peers.netlink_wire", "nm_scanguard.peers.values"]

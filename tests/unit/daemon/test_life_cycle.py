"""The daemon's life cycle and its state directory: guards are made only between start and
stop, and an instance that never started leaves the running instance's files alone.  The
Daemon with fake peers: NetworkManager answers when the test says."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nm_scanguard.config import Settings
from nm_scanguard.daemon import daemon as daemon_module
from nm_scanguard.daemon.bgscan.journal import FILE_NAME as JOURNAL_FILE
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.deferral import DEFER_FILE
from nm_scanguard.daemon.service import Supervisor


class SlowNetworkManager:
    """Answers wifi_devices at once with nothing activated, or, once `hold` is set, when the
    test releases the answer (the device it then gives is activated)."""

    def __init__(self, name: str) -> None:
        self.device = SimpleNamespace(ifname="wlan0", activated=True, settings_error=None,
                                      user_data={}, connection_id=name, connection_uuid="u-1")
        self.hold = False
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def wifi_devices(self) -> list[SimpleNamespace]:
        if not self.hold:
            return []
        self.asked.set()
        await self.answer.wait()
        return [self.device]


class JournaledBgscan:
    """The bgscan core with one entry journaled; records whether a replay ran."""

    def __init__(self) -> None:
        self.replays = 0

    def kept(self, _ifname: str | None = None) -> int:
        return 1  # an entry is in the journal: a stop of a started daemon replays it

    async def replay(self, *_args, **_kwargs) -> int:
        self.replays += 1
        return 0


def daemon_on(tmp_path, name: str, monkeypatch) -> tuple[Daemon, SlowNetworkManager, list]:
    made: list[str] = []

    def guard(dev, *_args, **_kwargs):
        made.append(dev.ifname)
        raise AssertionError(f"a guard was made for {dev.ifname}")

    monkeypatch.setattr(daemon_module, "Guard", guard)
    daemon = Daemon(Settings(), None, str(tmp_path), tasks=Supervisor())
    nm = SlowNetworkManager(name)
    daemon._peers = SimpleNamespace(bus=SimpleNamespace(connected=True), nm=nm,  # type: ignore[assignment]
                                    supplicant=None, bgscan=JournaledBgscan())

    async def no_scan_events(_bus) -> None:
        return None

    monkeypatch.setattr(daemon.who_asked, "follow_scans", no_scan_events)
    return daemon, nm, made


@pytest.mark.parametrize("name", ["Home", "Café ☕"])
async def test_a_sync_answered_after_the_stop_makes_no_guard(tmp_path, monkeypatch, name):
    """A Reload (run in its bus call's task, which the stop does not cancel) asked
    NetworkManager for its devices; the daemon stopped before the answer came.  A guard made
    then would be stopped by nobody, and could suspend bgscan after the stop restored it."""
    daemon, nm, made = daemon_on(tmp_path, name, monkeypatch)
    await daemon.start()
    nm.hold = True
    reload = asyncio.ensure_future(daemon.reload())
    await asyncio.wait_for(nm.asked.wait(), 5)
    await daemon.stop()
    nm.answer.set()
    await asyncio.wait_for(reload, 5)
    assert made == [] and dict(daemon.guards) == {}


async def test_an_instance_that_never_started_leaves_the_state_directory_alone(tmp_path,
                                                                              monkeypatch):
    """The name was another instance's, so start never ran: the journal and the scan-deferral
    file in the directory are that instance's, and a NetworkManager signal heard before the
    name was refused makes no guard."""
    journal = tmp_path / JOURNAL_FILE
    deferral = tmp_path / DEFER_FILE
    journal.write_text('{"entries": "the running instance\'s"}', encoding="utf-8")
    deferral.write_text("the running instance's\n", encoding="utf-8")
    daemon, nm, made = daemon_on(tmp_path, "Café ☕", monkeypatch)
    nm.hold = True
    nm.answer.set()
    await daemon.sync()  # what schedule_sync runs for a signal of NetworkManager's
    await daemon.stop()
    assert journal.read_text(encoding="utf-8") == '{"entries": "the running instance\'s"}'
    assert deferral.read_text(encoding="utf-8") == "the running instance's\n"
    assert daemon._peers.bgscan.replays == 0 and made == []

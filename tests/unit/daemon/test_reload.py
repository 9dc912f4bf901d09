"""A reload reads the settings file as the start did: a file named with --config that was
deleted since is refused, the settings in force stay, and the reason is said (the log for
SIGHUP, the error reply for Reload).  The Daemon without a bus: a refused reload asks no peer."""

from __future__ import annotations

import logging

import pytest

from nm_scanguard.config import ConfigError, Settings, load_file
from nm_scanguard.daemon import service
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.service import Supervisor


def started(tmp_path, name: str) -> tuple[Daemon, str]:
    """A daemon started with --config FILE (threshold_mbit = 7), as service.main makes it."""
    conf = tmp_path / f"{name}.conf"
    conf.write_text("[scanguard]\nthreshold_mbit = 7\n", encoding="utf-8")
    settings = load_file(str(conf), required=True)
    return Daemon(settings, str(conf), str(tmp_path), tasks=Supervisor()), str(conf)


def missing(path: str) -> str:
    return (f"{path}: no such file, and the service reads only this file (its --config): put "
            "it back, or restart it without --config")


@pytest.mark.parametrize("name", ["plain", "Café ☕"])
async def test_a_reload_after_the_config_file_was_deleted_keeps_the_settings(tmp_path, name):
    daemon, conf = started(tmp_path, name)
    (tmp_path / f"{name}.conf").unlink()
    with pytest.raises(ConfigError) as refused:
        await daemon.reload()
    assert str(refused.value) == missing(conf)
    assert daemon.settings.threshold_mbit == 7.0
    assert daemon.settings.source("threshold_mbit") == conf


@pytest.mark.parametrize("name", ["plain", "Café ☕"])
async def test_sighup_after_the_config_file_was_deleted_logs_why(tmp_path, name, caplog):
    daemon, conf = started(tmp_path, name)
    (tmp_path / f"{name}.conf").unlink()
    with caplog.at_level(logging.INFO, logger="scanguard"):
        await service._reload(daemon)
    assert [r.getMessage() for r in caplog.records] == [
        f"{missing(conf)}; keeping the previous settings"]
    assert daemon.settings.threshold_mbit == 7.0


async def test_a_daemon_without_a_config_file_reloads_the_defaults(tmp_path):
    """The restore-only daemon (service.restore_left_over) names no file: nothing to refuse."""
    daemon = Daemon(Settings(threshold_mbit=3.0), None, str(tmp_path), tasks=Supervisor())
    daemon.sync = _no_sync  # type: ignore[method-assign]
    await daemon.reload()
    assert daemon.settings == Settings()


async def _no_sync() -> None:
    pass

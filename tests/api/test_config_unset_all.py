"""scanguardctl config unset --all [CONNECTION] (issue 50, item 10): `apt purge` cannot reach the
scanguard.* user data in NetworkManager profiles (a maintainer script runs as root, without the
user's session, and must not rewrite profiles), so the CLI removes it: every scanguard.* key,
known to this version or not, from one profile or from every profile NetworkManager shows, other
user data left alone; a profile that cannot be changed is said and the others are still done.

libnm against python-dbusmock's NetworkManager, as tests/api/test_config_cli.py; no daemon is
needed for profiles."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.harness import scanguardctl
from tests.peers import CONN_IFACE, NetworkManagerMock


def ctl(nm: NetworkManagerMock, *args: str):
    return asyncio.to_thread(scanguardctl, nm.address, "config", "unset", *args)


@pytest.fixture
def profiles(nm_mock: NetworkManagerMock) -> dict[str, str]:
    """Three profiles: two with scanguard.* settings (one named with non-ASCII, one with a key
    this version does not know), one with other user data only."""
    dev, _, home = nm_mock.add_wifi("wlx0", "Home", "Home")
    conns = {"Home": home, "Café ☕": nm_mock.add_profile(dev, "cafe", "Home"),
             "Office": nm_mock.add_profile(dev, "Office", "Home")}
    nm_mock.rename_profile(conns["Café ☕"], "Café ☕")  # (the mock names its object by the name)
    nm_mock.set_user_data(conns["Home"], {"scanguard.threshold_mbit": "5", "other.app": "x"})
    nm_mock.set_user_data(conns["Café ☕"], {"scanguard.enabled": "no", "scanguard.old_key": "1"})
    nm_mock.set_user_data(conns["Office"], {"other.app": "y"})
    return conns


async def test_all_of_one_profile(nm_mock, profiles):
    r = await ctl(nm_mock, "--all", "Café ☕")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == "Café ☕: removed scanguard.enabled, scanguard.old_key\n"
    assert nm_mock.user_data(profiles["Café ☕"]) == {}
    assert nm_mock.user_data(profiles["Home"]) == {"scanguard.threshold_mbit": "5", "other.app": "x"}

    r = await ctl(nm_mock, "--all", "Café ☕")
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr == "scanguardctl: profile 'Café ☕' has no scanguard.* settings\n"


async def test_all_of_every_profile_leaves_other_user_data(nm_mock, profiles):
    r = await ctl(nm_mock, "--all")
    assert (r.returncode, r.stderr) == (0, "")
    assert sorted(r.stdout.splitlines()) == ["Café ☕: removed scanguard.enabled, scanguard.old_key",
                                             "Home: removed scanguard.threshold_mbit"]
    assert nm_mock.user_data(profiles["Home"]) == {"other.app": "x"}
    assert nm_mock.user_data(profiles["Café ☕"]) == {}
    assert nm_mock.user_data(profiles["Office"]) == {"other.app": "y"}

    r = await ctl(nm_mock, "--all")
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr == "scanguardctl: no NetworkManager profile you can see has scanguard.* settings\n"


async def test_a_profile_that_keeps_its_settings_is_said_and_the_others_are_done(nm_mock, profiles):
    # A store that keeps what it had: Update2 answers, and nothing changes.
    nm_mock.mock_object(profiles["Home"]).AddMethod(
        CONN_IFACE, "Update2", "a{sa{sv}}ua{sv}", "a{sv}", "ret = dbus.Dictionary({}, signature='sv')")
    r = await ctl(nm_mock, "--all")
    assert r.returncode == 1
    assert r.stdout == "Café ☕: removed scanguard.enabled, scanguard.old_key\n"
    assert r.stderr.startswith("scanguardctl: NetworkManager saved 'Home', but it reads back with "
                               "scanguard.threshold_mbit=5 (still there)"), r.stderr
    assert r.stderr.count("\n") == 1
    assert nm_mock.user_data(profiles["Café ☕"]) == {}


@pytest.mark.parametrize("args,error", [
    (["Home"], "config unset: give CONNECTION and the KEYs to remove, or --all [CONNECTION] to "
               "remove every scanguard.* setting"),
    ([], "config unset: give CONNECTION and the KEYs to remove, or --all [CONNECTION] to "
         "remove every scanguard.* setting"),
    (["--all", "Home", "threshold_mbit"],
     "config unset --all removes every scanguard.* setting: give no KEY with it"),
    (["--all", "Café ☕", "Café ☕"],
     "config unset --all removes every scanguard.* setting: give no KEY with it"),
])
def test_what_to_remove_is_said_before_networkmanager_is_asked(args, error):
    # No bus at this address: the mistake is said without asking NetworkManager.
    r = scanguardctl("unix:path=/nonexistent", "config", "unset", *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"scanguardctl: {error}\n")

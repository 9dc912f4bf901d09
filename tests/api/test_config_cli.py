"""scanguardctl config show/set/unset: libnm against python-dbusmock's NetworkManager, and the
running daemon picking the change up.

What this covers: libnm's client, lookup by name and UUID, NMSettingUser, the commit (Update2),
validation before anything is written.  What it cannot: NetworkManager's own checks of user data
keys and its polkit rules for settings.modify.*; the lab VM runs the same commands against a real
NetworkManager 1.42.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from nm_scanguard.config import KEYS
from tests.api.harness import REPO, scanguardctl
from tests.conftest import assert_eventually


async def ctl(scenario, *args):
    return await asyncio.to_thread(scanguardctl, scenario.address, "config",
                                   "--config", str(scenario.daemon.config), *args)


async def test_config_set_writes_user_data_and_the_daemon_follows(scenario):
    r = await ctl(scenario, "set", "Home", "threshold_mbit=5", "scanguard.release_below_mbit=2")
    assert r.returncode == 0, r.stderr
    assert scenario.nm.user_data(scenario.conn) == {"scanguard.threshold_mbit": "5",
                                                     "scanguard.release_below_mbit": "2"}
    # libnm sent the whole profile back: nothing else was lost on the way
    assert scenario.nm.settings(scenario.conn)["connection"]["id"] == "Home"

    async def applied():
        d = await scenario.device()
        return d["settings"]["threshold_mbit"] == 5.0 and \
            d["settings_sources"]["threshold_mbit"] == "profile Home"
    await assert_eventually(applied, message="daemon re-read the profile")

    r = await ctl(scenario, "set", "Home", "enabled=no")
    assert r.returncode == 0, r.stderr
    await assert_eventually(lambda: _state(scenario, "disabled"), message="disabled by the profile")

    show = await ctl(scenario, "show", "Home")
    assert show.returncode == 0, show.stderr
    lines = {line.split()[0]: line.split()[1:] for line in show.stdout.splitlines()[1:]}
    assert lines["threshold_mbit"] == ["5", "profile", "Home"]
    assert lines["enabled"] == ["no", "profile", "Home"]
    assert lines["sample_interval"] == ["0.2", str(scenario.daemon.config)]
    assert lines["engage_after"] == ["3", "default"]

    r = await ctl(scenario, "unset", "Home", "enabled", "threshold_mbit", "release_below_mbit")
    assert r.returncode == 0, r.stderr
    assert scenario.nm.user_data(scenario.conn) == {}
    await assert_eventually(lambda: _state(scenario, "idle"), message="enabled again")


@pytest.mark.parametrize("profile", ["Home", "Café ☕"])
async def test_roam_scans_a_word_from_the_profile_reaches_the_daemon(scenario, profile):
    if profile != "Home":
        scenario.nm.rename_profile(scenario.conn, profile)
    r = await ctl(scenario, "set", profile, "roam_scans=Café ☕")
    assert r.returncode == 1
    assert "roam_scans = 'Café ☕' is not valid; expected targeted or full" in r.stderr, r.stderr
    assert scenario.nm.user_data(scenario.conn) == {}

    r = await ctl(scenario, "set", profile, "roam_scans=full")
    assert r.returncode == 0, r.stderr
    assert scenario.nm.user_data(scenario.conn) == {"scanguard.roam_scans": "full"}

    async def applied():
        d = await scenario.device()
        return d["settings"]["roam_scans"] == "full" and \
            d["settings_sources"]["roam_scans"] == f"profile {profile}"
    await assert_eventually(applied, message="daemon took roam_scans from the profile")
    show = await ctl(scenario, "show", profile)
    assert show.returncode == 0, show.stderr
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in show.stdout.splitlines()[1:]}
    assert lines["roam_scans"] == ["full", f"profile {profile}"]


async def _state(scenario, state):
    return await scenario.state() == state


async def test_config_set_validates_before_writing(scenario):
    cases = {
        ("threshold_mbit=fast",): "threshold_mbit = 'fast' is not valid; expected a number of Mbit/s",
        ("speed=3",): "unknown key 'speed' (known keys: enabled, threshold_mbit",
        ("enabled",): "'enabled' is not KEY=VALUE",
        ("release_below_mbit=50",): "release_below_mbit (50) must not be above threshold_mbit (1)",
    }
    for args, message in cases.items():
        r = await ctl(scenario, "set", "Home", *args)
        assert r.returncode == 1
        assert message in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert scenario.nm.user_data(scenario.conn) == {}


async def test_unknown_and_ambiguous_connection_names(scenario):
    r = await ctl(scenario, "set", "Office", "enabled=no")
    assert r.returncode == 1
    assert "NetworkManager has no connection profile 'Office'" in r.stderr

    other = scenario.nm.add_profile(scenario.dev, "home2", "Home")  # a second profile named Home
    uuid = str(scenario.nm.settings(other)["connection"]["uuid"])
    r = await ctl(scenario, "set", "Home", "enabled=no")
    assert r.returncode == 1
    assert "2 NetworkManager profiles are named 'Home'" in r.stderr and uuid in r.stderr
    assert "give the UUID instead" in r.stderr

    r = await ctl(scenario, "set", uuid, "enabled=no")
    assert r.returncode == 0, r.stderr
    assert scenario.nm.user_data(other) == {"scanguard.enabled": "no"}
    assert scenario.nm.user_data(scenario.conn) == {}


async def test_config_show_without_connection_and_with_a_broken_file(scenario):
    r = await ctl(scenario, "show")
    assert r.returncode == 0
    assert any(line.split()[:3] == ["sample_interval", "0.2", str(scenario.daemon.config)]
               for line in r.stdout.splitlines())
    scenario.daemon.config.write_text("[scanguard]\nsample_interval = often\n")
    for args in (("show",), ("show", "Home")):  # an error, as --check-config says it
        r = await ctl(scenario, *args)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr == (f"scanguardctl: {scenario.daemon.config} [scanguard]: sample_interval "
                            "= 'often' is not valid; expected a number of seconds from 0.1 to 60\n")
    # config set still checks the profile's values, against the defaults, and says so.
    r = await ctl(scenario, "set", "Home", "threshold_mbit=5")
    assert r.returncode == 0, r.stderr
    assert "sample_interval = 'often' is not valid" in r.stderr
    assert "Checking against the built-in defaults instead" in r.stderr


def daemon_check(*args):
    return subprocess.run([sys.executable, "-m", "nm_scanguard", "--check-config", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("name", ["plain", "Café ☕"])
def test_check_config_and_config_show_print_the_same_values_the_same_way(system_bus, tmp_path,
                                                                        name):
    conf = tmp_path / f"{name}.conf"
    conf.write_text("[scanguard]\nthreshold_mbit = 7\nenabled = no\nrelease_below_mbit = .5\n"
                    "signal_floor_dbm = -80.25\nroam_scans = Full\n", encoding="utf-8")
    check = daemon_check("-c", str(conf))
    assert check.returncode == 0, check.stderr
    header, *table = check.stdout.splitlines()
    assert header == f"{conf}: OK; the effective settings:"
    # --config after the verb, as after `config`
    show = scanguardctl(system_bus.address, "config", "show", "--config", str(conf))
    assert show.returncode == 0, show.stderr
    assert show.stdout.splitlines() == table
    values = {line.split()[0]: line.split()[1] for line in table}
    assert values["threshold_mbit"] == "7" and values["enabled"] == "no"
    assert values["release_below_mbit"] == "0.5" and values["signal_floor_dbm"] == "-80.25"
    assert values["release_after"] == "15" and values["abort_scans"] == "yes"
    assert values["roam_scans"] == "full"
    assert f"threshold_mbit        7           {conf}" in table  # signal_hysteresis_db's width


@pytest.mark.parametrize("name", ["nope", "Café ☕"])
def test_a_config_file_named_on_the_command_line_must_exist(system_bus, tmp_path, name):
    missing = tmp_path / f"{name}.conf"
    words = (f"{missing}: no such file; give the path of an existing file, or leave --config "
             "out to use /etc/scanguard/scanguard.conf (which may be absent: then the built-in "
             "defaults apply)")
    check = daemon_check("-c", str(missing))
    assert check.returncode == 1 and check.stdout == ""
    assert check.stderr == f"scanguardd: {words}\n"
    for where in (("config", "--config", str(missing), "show"),
                  ("config", "show", "--config", str(missing)),
                  ("config", "set", "--config", str(missing), "Home", "enabled=no")):
        r = scanguardctl(system_bus.address, *where)
        assert r.returncode == 1, where
        assert r.stderr == f"scanguardctl: {words}\n", where


@pytest.mark.parametrize("profile", ["Home", "Café ☕"])
async def test_config_set_says_so_when_the_setting_did_not_survive(scenario, profile):
    conn = scenario.conn
    if profile != "Home":
        scenario.nm.rename_profile(conn, profile)
    scenario.nm.lose_user_data(conn)
    r = await ctl(scenario, "set", profile, "threshold_mbit=5", "enabled=no")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == (
        f"scanguardctl: NetworkManager saved '{profile}', but it reads back without "
        "scanguard.threshold_mbit=5 (missing), without scanguard.enabled=no (missing): the "
        "change did not survive and is not in effect. Some profile stores lose user data (netplan on "
        "Ubuntu: canonical/netplan#615); set it for every network in "
        "/etc/scanguard/scanguard.conf instead\n")
    assert scenario.nm.user_data(conn) == {}


@pytest.mark.parametrize("profile", ["Home", "Café ☕"])
async def test_config_unset_refuses_an_unknown_key(scenario, profile):
    """A mistyped key is not "not set": it is refused, before anything is removed; a key the
    profile has that this version does not know (`config show` lists it as ignored) goes."""
    if profile != "Home":
        scenario.nm.rename_profile(scenario.conn, profile)
    scenario.nm.set_user_data(scenario.conn, {"scanguard.threshold_mbit": "5",
                                              "scanguard.old_key": profile})
    r = await ctl(scenario, "unset", profile, "threshold_mbit", "threshhold_mbit")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("scanguardctl: unknown key 'threshhold_mbit'; did you mean threshold_mbit? "
                        "(known keys: " + ", ".join(KEYS) + ")\n")
    assert scenario.nm.user_data(scenario.conn) == {"scanguard.threshold_mbit": "5",
                                                     "scanguard.old_key": profile}

    r = await ctl(scenario, "unset", profile, "threshold_mbit", "scanguard.old_key", "enabled")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{profile}: removed scanguard.threshold_mbit, scanguard.old_key\n"
    assert r.stderr == f"scanguardctl: {profile}: scanguard.enabled is not set\n"
    assert scenario.nm.user_data(scenario.conn) == {}


async def test_config_unset_says_so_when_a_setting_stays(scenario):
    r = await ctl(scenario, "set", "Home", "threshold_mbit=5")
    assert r.returncode == 0, r.stderr
    # A store that keeps what it had: Update2 answers, and nothing changes.
    scenario.nm.mock_object(scenario.conn).AddMethod(
        "org.freedesktop.NetworkManager.Settings.Connection", "Update2", "a{sa{sv}}ua{sv}",
        "a{sv}", "ret = dbus.Dictionary({}, signature='sv')")
    r = await ctl(scenario, "unset", "Home", "threshold_mbit")
    assert r.returncode == 1
    assert ("NetworkManager saved 'Home', but it reads back with scanguard.threshold_mbit=5 "
            "(still there): the change did not survive") in r.stderr, r.stderr

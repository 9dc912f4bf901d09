"""Who may do what, on a default-deny system bus with our shipped policy file and polkit mocked.

The client is a separate process running as user nobody (setpriv); the daemon runs as root.
Each refusal is checked to change nothing: no hold, bgscan untouched, settings unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import xml.etree.ElementTree as ET

from nm_scanguard.names import ACTION_HOLD, ACTION_RELOAD, BUS_NAME as NAME, IFACE
from tests.api.harness import BGSCAN, api_call, error_of, named_holds, props, scanguardctl
from tests.conftest import assert_eventually
from tests.access.conftest import SHIPPED_POLICY

ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
QUOTED = f'"{BGSCAN}"'


def untouched(scenario) -> bool:
    """No Properties Set ever reached the wpa_supplicant network."""
    return scenario.bgscan() == QUOTED and list(scenario.wpa.control.GetPropertiesSets(scenario.net)) == []


async def test_unprivileged_user_can_read_status(strict_scenario, polkit):
    r = await asyncio.to_thread(scanguardctl, strict_scenario.address, "status", "--json", user="nobody")
    assert r.returncode == 0, r.stderr
    (dev,) = json.loads(r.stdout)["devices"]
    assert dev["interface"] == strict_scenario.ifname and dev["state"] == "idle"
    human = await asyncio.to_thread(scanguardctl, strict_scenario.address, "status", user="nobody")
    assert human.returncode == 0 and strict_scenario.ifname in human.stdout


async def test_unprivileged_user_may_use_only_the_allowed_interfaces(strict_scenario, nobody):
    client = nobody()
    assert "body" in client.call("Introspect", iface="org.freedesktop.DBus.Introspectable")
    assert "body" in client.call("Ping", iface="org.freedesktop.DBus.Peer")
    assert "body" in client.call("Get", "ss", [IFACE, "Version"], iface="org.freedesktop.DBus.Properties")
    # Anything else on our name is stopped by the bus itself, before the daemon sees it.
    denied = client.call("GetManagedObjects", iface="org.freedesktop.DBus.ObjectManager")
    assert denied["error"] == ACCESS_DENIED and "Rejected send message" in denied["text"]
    # and only the service user may own the name
    assert client.request(own=NAME)["error"] == ACCESS_DENIED


def test_shipped_policy_lets_only_the_service_user_own_the_name():
    root = ET.parse(SHIPPED_POLICY).getroot()
    owners = [(p.attrib, a.attrib["own"]) for p in root.iter("policy") for a in p.iter("allow")
              if "own" in a.attrib or "own_prefix" in a.attrib]
    assert owners == [({"user": "scanguard"}, NAME)]
    default = [p for p in root.iter("policy") if p.attrib == {"context": "default"}]
    allowed = sorted(a.attrib["send_interface"] for p in default for a in p.iter("allow"))
    assert allowed == sorted([IFACE, "org.freedesktop.DBus.Properties",
                              "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer"])
    assert all(a.attrib.get("send_destination") == NAME for p in default for a in p.iter("allow"))


async def test_unprivileged_user_cannot_call_device_event(strict_scenario, nobody):
    reply = nobody().call("DeviceEvent", "sss", [strict_scenario.ifname, "up", ""])
    assert reply["error"] == ACCESS_DENIED
    assert "only root may call DeviceEvent" in reply["text"]
    assert "dispatcher:" not in strict_scenario.daemon.log()


async def test_unprivileged_user_cannot_reload(strict_scenario, nobody, polkit):
    strict_scenario.daemon.config.write_text("[scanguard]\nsample_interval = 0.2\nthreshold_mbit = 9\n")
    reply = nobody().call("Reload")
    assert reply["error"] == ACCESS_DENIED
    assert ACTION_RELOAD in reply["text"] and "Traceback" not in reply["text"]
    assert (await strict_scenario.device())["settings"]["threshold_mbit"] == 1.0
    assert "configuration reloaded" not in strict_scenario.daemon.log()


async def test_hold_refused_by_polkit_changes_nothing(strict_scenario, nobody, polkit):
    polkit.allow(ACTION_RELOAD)  # something else, to show the action is what is checked
    reply = nobody().call("Hold", "sss", ["call", "org.example.Call", ""])
    assert reply["error"] == ACCESS_DENIED
    assert ACTION_HOLD in reply["text"] and "said no" in reply["text"]
    assert (await props(strict_scenario.bus))["ActiveHolds"] == []
    assert (await strict_scenario.state()) == "idle"
    assert untouched(strict_scenario)

    r = await asyncio.to_thread(scanguardctl, strict_scenario.address, "hold", "--strict", "--",
                                "true", user="nobody")
    assert r.returncode == 125
    assert r.stderr.startswith("scanguardctl: no hold could be taken, so true was not run "
                               "(--strict): permission denied: not authorised"), r.stderr
    # Without --strict the command runs all the same, and the warning says why it is unheld.
    r = await asyncio.to_thread(scanguardctl, strict_scenario.address, "hold", "--", "sh", "-c",
                                "exit 3", user="nobody")
    assert r.returncode == 3
    assert r.stderr.startswith("scanguardctl: warning: running sh without a hold, so Wi-Fi "
                               "background scans may run during it: permission denied: not "
                               "authorised"), r.stderr
    assert untouched(strict_scenario)


async def test_hold_allowed_by_polkit_only_the_holder_may_release(strict_scenario, nobody, polkit):
    polkit.allow(ACTION_HOLD)
    holder, other = nobody(), nobody()
    reply = holder.call("Hold", "sss", ["call", "org.example.Call", ""])
    (cookie,) = reply["body"]
    await assert_eventually(lambda: strict_scenario.bgscan() == '""', message="bgscan suspended")
    (hold,) = await named_holds(strict_scenario.bus)  # as root
    assert hold["caller"] == holder.unique_name and hold["caller_uid"] == 65534

    stolen = other.call("Release", "u", [cookie])
    assert stolen["error"] == ACCESS_DENIED and "belongs to another client" in stolen["text"]
    assert [h["cookie"] for h in (await props(strict_scenario.bus))["ActiveHolds"]] == [cookie]
    assert strict_scenario.bgscan() == '""'

    assert holder.call("Release", "u", [cookie]) == {"body": []}
    await assert_eventually(lambda: strict_scenario.bgscan() == QUOTED, message="bgscan restored")


async def test_scanguardctl_hold_as_unprivileged_user_when_polkit_allows(strict_scenario, polkit):
    polkit.allow(ACTION_HOLD)
    r = await asyncio.to_thread(
        scanguardctl, strict_scenario.address, "hold", "--reason", "backup", "--",
        "sh", "-c", f'{sys.executable} -m nm_scanguard.cli.scanguardctl status | grep -q ": held for"', user="nobody")
    assert r.returncode == 0, r.stderr
    assert (await props(strict_scenario.bus))["ActiveHolds"] == []
    await assert_eventually(lambda: strict_scenario.bgscan() == QUOTED, message="bgscan restored")


async def test_without_polkit_only_root_may_hold(strict_scenario, nobody, polkit):
    polkit.close()  # polkitd not running (it is only Recommended by the package)
    reply = nobody().call("Hold", "sss", ["call", "", ""])
    assert reply["error"] == IFACE + ".Error.NotReady"
    assert "is polkitd installed and running?" in reply["text"]
    assert (await props(strict_scenario.bus))["ActiveHolds"] == []
    assert untouched(strict_scenario)
    r = await asyncio.to_thread(scanguardctl, strict_scenario.address, "hold", "--", "true")
    assert r.returncode == 0, r.stderr  # root needs no polkit


async def test_a_user_sees_who_holds_and_why_only_for_their_own_holds(strict_scenario, nobody,
                                                                      polkit):
    """Every local user reads ActiveHolds; it must not show them another user's reason,
    application or uid (issue 47, item 6).  GetActiveHolds names the caller's user's own
    holds, and root's call names every hold; scanguardctl status shows the same."""
    polkit.allow(ACTION_HOLD)
    secret = "Café ☕ appel chez le médecin"
    reply = await api_call(strict_scenario.bus, "Hold", "sss", [secret, "org.example.Root", ""])
    assert error_of(reply) is None, reply.body
    (theirs,) = reply.body
    holder = nobody()
    (mine,) = holder.call("Hold", "sss", ["Café ☕ mine", "org.example.Mine", ""])["body"]
    public_keys = {"cookie", "interface", "since"}

    seen = holder.call("GetAll", "s", [IFACE], iface="org.freedesktop.DBus.Properties")
    assert [set(h) for h in seen["body"][0]["ActiveHolds"]] == [public_keys, public_keys]
    assert [h["cookie"] for h in seen["body"][0]["ActiveHolds"]] == [theirs, mine]
    assert "médecin" not in json.dumps(seen, ensure_ascii=False)

    (holds,) = nobody().call("GetActiveHolds")["body"]  # another connection of the same user
    assert set(holds[0]) == public_keys and holds[0]["cookie"] == theirs
    assert (holds[1]["reason"], holds[1]["application_id"], holds[1]["caller_uid"]) == (
        "Café ☕ mine", "org.example.Mine", 65534)

    every = await named_holds(strict_scenario.bus)  # as root
    assert [(h["reason"], h["caller_uid"]) for h in every] == [(secret, 0), ("Café ☕ mine", 65534)]

    r = await asyncio.to_thread(scanguardctl, strict_scenario.address, "status", user="nobody")
    assert r.returncode == 0, r.stderr
    assert f"hold {theirs} by another user on every interface for" in r.stdout
    assert f"hold {mine} by org.example.Mine (uid 65534) on every interface" in r.stdout
    assert "Café ☕ mine" in r.stdout and "médecin" not in r.stdout
    j = await asyncio.to_thread(scanguardctl, strict_scenario.address, "status", "--json",
                                user="nobody")
    assert [set(h) for h in json.loads(j.stdout)["holds"]][0] == public_keys
    assert "médecin" not in j.stdout
    assert holder.call("Release", "u", [mine]) == {"body": []}
    assert error_of(await api_call(strict_scenario.bus, "Release", "u", [theirs])) is None

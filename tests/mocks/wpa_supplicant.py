"""wpa_supplicant 2.10 mock template for python-dbusmock (``dbusmock --template PATH``).

Mocks the part of ``fi.w1.wpa_supplicant1`` that nm-scanguard uses, behaving like the real
binary (Debian 12, 2:2.10-12+deb12u3) as checked by tests/contract/test_wpa_supplicant_contract.py.
Where the mock cannot be checked against the binary without a radio, the behaviour follows
wpa_supplicant/dbus/dbus_new_handlers.c of 2.10 and the comment says so.  The rules it shares
with the model rung's wpa_supplicant (tests/model/peers.py) are in tests/wpa_supplicant_rules.py
(``rules`` here): the error names and texts, the network fields and how a value reads back, the
checks of ``Scan``'s options and ``Roam``'s address, the interface's and a BSS's properties.

Real behaviour reproduced
-------------------------
* ``fi.w1.wpa_supplicant1`` at /fi/w1/wpa_supplicant1: ``GetInterface(s) -> o`` (error
  ``fi.w1.wpa_supplicant1.InterfaceUnknown``), ``CreateInterface(a{sv}) -> o`` (``Ifname``
  required, ``Driver`` optional; ``InterfaceExists`` if taken; ``UnknownError`` if no such
  netdev in /sys/class/net), ``RemoveInterface(o)``; signals ``InterfaceAdded(o, a{sv})`` and
  ``InterfaceRemoved(o)`` (preceded by ``NetworkRemoved`` for every network of it).
* Interface objects ``/fi/w1/wpa_supplicant1/Interfaces/N`` (N never reused): properties
  ``Ifname``, ``Driver``, ``State``, ``Scanning``, ``CurrentNetwork`` ("/" when none),
  ``CurrentBSS``, ``Networks``, ``BSSs``, ``ApScan``, ``BSSExpireAge`` (180; Set below 10:
  ``Failed`` "BSSExpireAge must be >= 10"), ``BSSExpireCount`` (2), ``RoamTime``,
  ``RoamComplete``; methods ``AddNetwork(a{sv}) -> o``, ``RemoveNetwork(o)``,
  ``SelectNetwork(o)``, ``Scan(a{sv})``, ``AbortScan()``, ``Roam(s)``, ``SignalPoll() -> v``;
  signals ``NetworkAdded(o, a{sv})``, ``NetworkRemoved(o)``, ``NetworkSelected(o)``,
  ``ScanDone(b)``, ``BSSAdded(o, a{sv})``, ``BSSRemoved(o)``.  ``Introspect`` on an interface
  lists its methods, signals and properties (with read/readwrite) as the real one does.
* ``Scan`` options (``Type``, ``SSIDs``, ``IEs``, ``Channels`` a(uu), ``AllowRoam`` b) are checked
  in the order given; a bad one fails with ``fi.w1.wpa_supplicant1.InvalidArgs`` "Did not
  receive correct message arguments." plus a *second string* naming the fault (the unknown key,
  or e.g. "Wrong Channels value type. Array of structs required"), as
  tests/contract/wpa_roaming_scenarios.py pins.  ``Roam(s)``: a malformed address, InvalidArgs
  "Invalid hardware address format"; no selected network, ``fi.w1.wpa_supplicant1.NotConnected``
  "This interface is not connected"; no BSS of that address with the network's SSID,
  InvalidArgs "Target BSS not found"; else (not checkable on driver "none": following
  wpas_dbus_handler_roam) ``CurrentBSS`` moves to that BSS at once, announced.
* ``SignalPoll`` replies with a *variant* holding ``a{sv}`` (the introspection says ``a{sv}``,
  the C code wraps it in a variant), keys rssi (i), linkspeed (i, Mbit/s), noise (i),
  frequency (u), width (s), avg-rssi (i).  When the driver cannot read the signal (not
  associated, or driver "none") it fails with ``org.freedesktop.DBus.Error.Failed``
  "Failed to read signal".
* Network objects ``<iface>/Networks/N`` (N = highest existing id + 1): ``Properties``
  (a{sv}, all values strings) and ``Enabled`` (b).  Setting ``Properties`` merges only the
  keys given, in order, and is not atomic (keys before a bad one stay set).  String values are
  wrapped in double quotes unless the key is in ``rules.DONT_QUOTE``, so ``bgscan`` sent as
  ``simple:30:-70:86400`` reads back as ``"simple:30:-70:86400"``; sent as ``""`` (empty) it
  reads back as ``""`` (two quote characters; there is no way back to "absent"); a value sent
  with its quotes is quoted again.  int32/uint32 values are written in decimal; integer
  fields reject strings (they get quoted).  ``psk`` is never read back.  A network that never
  had a ``bgscan`` has no ``bgscan`` key.  Unknown keys and other value types fail with
  ``org.freedesktop.DBus.Error.InvalidArgs`` "invalid message format".  Keys this mock knows
  are those of ``rules.NETWORK_FIELDS`` plus ``psk`` (the real one accepts ~200 more).
  Setting ``Properties`` emits no signal.
* ``NetworkAdded(o, a{sv})`` is sent while the new network is still a zeroed struct, before
  defaults and AddNetwork's arguments are applied: its ``Properties`` hold only the integer
  fields, all "0", and ``Enabled`` is true.  Read ``Properties`` instead of trusting it.  A
  failing AddNetwork emits ``NetworkAdded`` then ``NetworkRemoved``.
* Property changes are announced 5 ms later, batched per object, first as
  ``org.freedesktop.DBus.Properties.PropertiesChanged`` then as the deprecated
  ``<interface>.PropertiesChanged(a{sv})``, like wpa_supplicant's flush timer.
  ``SelectNetwork`` sets ``CurrentNetwork`` *without* announcing it (the real one does the same
  on driver "none"; it announces it once association starts) and enables the selected network,
  disabling the others (``Enabled`` changes are announced).  Removing the current network
  announces ``CurrentNetwork: "/"``.
* Properties Get/GetAll/Set: unknown property (or interface) in Get/Set: ``InvalidArgs``
  "No such property"; read-only property: ``InvalidArgs`` "Property is read-only"; ``Enabled``
  set to a non-boolean: ``org.freedesktop.DBus.Error.Failed`` "wrong property type"; GetAll
  of an interface the object does not have: an empty dict.  Calls on a removed object fail
  with ``org.freedesktop.DBus.Error.UnknownMethod`` (libdbus's answer for an unknown path, in
  both).
* Driver "none" (as the contract test uses on ``lo``): scans fail, i.e. ``Scan`` is accepted
  and followed by ``ScanDone(false)``; ``SignalPoll`` always fails.  Any other driver: the scan
  succeeds, ``Scanning`` goes true then false around ``ScanDone(true)``.

BSS objects (tests/mocks/wpa_supplicant_bss.py) exist only through ``AddBSS``: a scan finds none.

Not reproduced: BSS expiry, a scan finding BSSes, WPS/P2P/mesh interfaces, the real scan retry loop (every second
while an enabled network is not connected, the real one emits ``ScanDone(false)`` and
``State``/``Scanning`` changes on driver "none"), key validation beyond psk length and
integer syntax.

Mock control methods (interface ``org.freedesktop.DBus.Mock`` on /fi/w1/wpa_supplicant1)
------------------------------------------------------------------------------------------
``AddWifiInterface(s ifname) -> o``
    Adds an interface with a working (mock) radio, driver "nl80211", State "disconnected",
    emitting ``InterfaceAdded`` like CreateInterface.  No netdev check.
``AddNetworkWithBgscan(o iface, s ssid, s bgscan) -> o``
    Adds a network the way NetworkManager does (``ssid``, ``key_mgmt`` "WPA-PSK", a psk, and
    ``bgscan`` unless *bgscan* is "" which means "no bgscan key at all", as NM does for
    BSSID-locked or AP-mode profiles).  Emits ``NetworkAdded``.  Not selected, not enabled.
``SetCurrentNetwork(o iface, o network)``
    Simulates association: enables *network*, then sets ``CurrentNetwork`` to it and
    ``State`` to "completed", announced together in one PropertiesChanged batch.  With "/",
    simulates a disconnection: ``CurrentNetwork`` "/" and ``State`` "disconnected".  (A real
    association spreads this over several batches: associating, associated, 4way_handshake,
    completed.  Do not rely on seeing both keys in one signal.)
``SetState(o iface, s state)``
    Sets and announces ``State`` only.
``EmitScanDone(o iface)``
    A scan somebody else asked for (GNOME Shell, nmcli, GeoClue): ``ScanDone(true)``.
``SetScanDuration(o iface, u ms)``
    How long a scan on *iface* runs from now on (default 20 ms), ``Scan``'s and ``StartScan``'s.
``StartScan(o iface)``
    A scan somebody else asked for starts now: ``Scanning`` true, then after the scan duration
    ``ScanDone(true)`` and ``Scanning`` false.  ``AbortScan`` ends a running scan at once the
    same way (2.10: its requester sees it done, with what was found so far); with none running
    it fails with ``fi.w1.wpa_supplicant1.Interface.ScanError`` "Abort failed or no scan in
    progress".  A scan asked for while one runs fails with ScanError "Scan request rejected".
``SetSignal(o iface, i rssi)``
    What ``SignalPoll`` reports as rssi and avg-rssi (default -50 dBm).
``SetSignalPollFails(o iface, b fails)``
    Makes ``SignalPoll`` fail even while "completed".
``SetSignalPollError(o iface, s error_name)``
    Makes every ``SignalPoll`` on *iface* fail with *error_name* (e.g.
    ``org.freedesktop.DBus.Error.AccessDenied``, which a bus policy that does not let the caller
    call ``SignalPoll`` answers), until set back to "".  Only ``SignalPoll``: the other calls
    go on working, unlike ``SetFailNext``.
``AddBSS(o iface, ay ssid, s bssid, q frequency, n signal, s security) -> o``
    A BSS seen by a scan: ``<iface>/BSSs/N``, announced with ``BSSAdded`` and a ``BSSs``
    change.  *security*: "open", "wpa-psk", "wpa2-psk" or "sae" (fills ``RSN``, ``WPA``,
    ``Privacy``).  See tests/mocks/wpa_supplicant_bss.py for its properties.
``RemoveBSS(o bss)``
    The BSS expired: ``BSSRemoved``, a ``BSSs`` change, and ``CurrentBSS`` "/" if it was current.
``GetPropertiesSets(o network) -> aa{sv}``
    Every dict sent to ``Properties`` Set on *network*, in order, as the client sent it
    (values unquoted), e.g. ``[{"bgscan": ""}, {"bgscan": "simple:30:-70:86400"}]``.  The same
    data is in dbusmock's call log: ``GetMethodCalls("Set")`` on the network object's path
    returns ``(timestamp, [interface, property, value])`` rows; ``ClearCalls()`` resets it.

``SetSetDelay(u ms)``
    From now on, ``Properties`` Set on a *network* is carried out at once but answered (reply
    or error) only *ms* milliseconds later: a slow wpa_supplicant, or with *ms* beyond the
    caller's timeout, a late reply to a call that did take effect.  0 restores prompt replies.
``SetHang(b hang)``
    While true, ``Properties`` Get, GetAll and Set on every wpa_supplicant object, and
    ``Scan``, are neither carried out nor answered: they wait in arrival order.  ``SetHang(false)`` carries them out
    and answers them then, like a process that was stuck (in a driver call) catching up: a
    Set the caller has long given up on still takes effect.  The delay of ``SetSetDelay``
    applies to those Sets too.
``SetAbortHang(b hang)``
    Like ``SetHang``, for ``AbortScan`` alone: while true, AbortScan calls wait unanswered (the
    scan runs on); ``SetAbortHang(false)`` carries them out and answers them.
``SetFailNext(s error_name, u count)``
    The next *count* calls of the kind a client such as nm-scanguard makes (``Properties``
    Get/GetAll/Set on any wpa_supplicant object, ``GetInterface``, ``SignalPoll``, ``Scan``,
    ``AbortScan``, ``Roam``)
    fail with *error_name* and a text saying the failure was injected, without doing anything.  The
    calls NetworkManager makes (AddNetwork, RemoveNetwork, SelectNetwork, CreateInterface...)
    are not counted.  A count of 0 clears what is left.
``GetFaults() -> a{sv}``
    What the three controls above are set to now: ``set_delay_ms`` (u), ``hang`` (b),
    ``hung_calls`` (u, calls waiting), ``fail_error`` (s), ``fail_left`` (u).

Removing networks and interfaces goes through the normal API (``RemoveNetwork`` on the
interface, ``RemoveInterface``), as NetworkManager does.  To simulate a wpa_supplicant restart,
stop the mock process and start a new one (the name owner changes).
"""

import functools
import importlib.util
import os
import sys
import time

import dbus
from gi.repository import GLib

import dbusmock
from dbusmock import MOCK_IFACE

BUS_NAME = "fi.w1.wpa_supplicant1"
MAIN_OBJ = "/fi/w1/wpa_supplicant1"
MAIN_IFACE = "fi.w1.wpa_supplicant1"
SYSTEM_BUS = True


def _load(relative, name):
    """A module by its path from this file, once per process: dbusmock loads a template by
    path, outside any package."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(os.path.dirname(__file__), relative))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_bss = _load("wpa_supplicant_bss.py", "wpa_supplicant_mock_bss")
# What wpa_supplicant accepts and answers, shared with the model rung's wpa_supplicant.
rules = _load("../wpa_supplicant_rules.py", "wpa_supplicant_mock_rules")

INTERFACE_IFACE = MAIN_IFACE + ".Interface"
NETWORK_IFACE = MAIN_IFACE + ".Network"
PROPS_IFACE = dbus.PROPERTIES_IFACE

ERR_INVALID_ARGS = rules.DBUS_INVALID_ARGS
ERR_FAILED = rules.DBUS_FAILED

# wpa_supplicant's flush timer for property changes (WPA_DBUS_SEND_PROP_CHANGED_TIMEOUT).
FLUSH_MS = 5

# Read-only properties per D-Bus interface; the others in the object's props are writable.
_READ_ONLY = {
    MAIN_IFACE: {"Interfaces"},
    INTERFACE_IFACE: rules.INTERFACE_READ_ONLY,
    NETWORK_IFACE: set(),
    rules.BSS_IFACE: rules.BSS_PROPERTIES,
}

# The signals an interface object sends, for its introspection (dbusmock knows only methods).
_INTERFACE_SIGNALS = {"ScanDone": "b", "BSSAdded": "oa{sv}", "BSSRemoved": "o",
                      "NetworkAdded": "oa{sv}", "NetworkRemoved": "o", "NetworkSelected": "o",
                      "PropertiesChanged": "a{sv}"}


def _error(name, text):
    return dbus.exceptions.DBusException(text, name=name)


def _answer(e):
    """A rules.WpaError as the exception dbus-python answers with.  A second string (`detail`)
    is sent only by the calls _carry_out answers by hand (Scan, Roam): dbus-python sends one."""
    error = _error(e.name, e.text)
    error.detail = e.detail
    return error


# --- dbus-python values and the rules' (signature, plain value) pairs ----------------------

_SIGNATURES = ((dbus.Boolean, "b"), (dbus.String, "s"), (dbus.ObjectPath, "o"),
               (dbus.Signature, "g"), (dbus.Byte, "y"), (dbus.Int16, "n"), (dbus.UInt16, "q"),
               (dbus.Int32, "i"), (dbus.UInt32, "u"), (dbus.Int64, "x"), (dbus.UInt64, "t"),
               (dbus.Double, "d"), (dbus.ByteArray, "ay"))


def _signature(value):
    """The D-Bus signature of a value as dbus-python received it (guess_signature says "v"
    for anything that came in a variant)."""
    if isinstance(value, dbus.Dictionary):
        return "a{" + value.signature + "}"
    if isinstance(value, dbus.Array):
        return "a" + value.signature
    if isinstance(value, dbus.Struct):
        return "(" + "".join(_signature(v) for v in value) + ")"
    return next((s for kind, s in _SIGNATURES if isinstance(value, kind)), "")


_DBUS_TYPES = {"s": dbus.String, "o": dbus.ObjectPath, "b": dbus.Boolean, "q": dbus.UInt16,
               "n": dbus.Int16, "i": dbus.Int32, "u": dbus.UInt32}


def _to_dbus(signature, value):
    """A value the rules give as (signature, plain value), in dbus-python's types."""
    if signature == "ay":
        return dbus.ByteArray(bytes(value))
    if signature == "a{sv}":
        return dbus.Dictionary({k: _to_dbus(*v) for k, v in value.items()}, signature="sv")
    if signature.startswith("a"):
        return dbus.Array([_to_dbus(signature[1:], v) for v in value], signature=signature[1:])
    return _DBUS_TYPES[signature](value)


# --- Network "Properties": what set_network_properties() and wpa_config_set() do ----------

def _apply_network_entry(net, key, value):
    """Set one key on a mock network the way wpa_supplicant 2.10 does, or raise InvalidArgs."""
    try:
        text = rules.network_value(key, _signature(value), value)
    except rules.WpaError as e:
        raise _answer(e) from None
    if key == "psk":
        net.wpa_psk = text
    else:
        net.wpa_config[key] = text


def _network_properties(net):
    return dbus.Dictionary(
        {k: dbus.String(net.wpa_config[k]) for k, _ in rules.NETWORK_FIELDS
         if net.wpa_config.get(k) is not None},
        signature="sv")


def _network_enabled(net):
    return dbus.Boolean(net.wpa_config["disabled"] == "0")


def _refresh_network_props(net):
    net.props[NETWORK_IFACE]["Properties"] = _network_properties(net)
    net.props[NETWORK_IFACE]["Enabled"] = _network_enabled(net)

# --- change announcements -------------------------------------------------------------

def _mark_changed(obj, interface, changes):
    """Store new property values now, announce them FLUSH_MS later, batched like the real one."""
    obj.props[interface].update(changes)
    pending = obj.wpa_pending
    if not pending:
        GLib.timeout_add(FLUSH_MS, _flush_changes, obj)
    pending.setdefault(interface, {}).update(changes)


def _flush_changes(obj):
    pending, obj.wpa_pending = obj.wpa_pending, {}
    if dbusmock.mockobject.objects.get(obj.path) is not obj:
        return False  # removed meanwhile
    for interface, changes in pending.items():
        values = dbus.Dictionary(changes, signature="sv")
        obj.EmitSignal(PROPS_IFACE, "PropertiesChanged", "sa{sv}as",
                       [interface, values, dbus.Array([], signature="s")])
        obj.EmitSignal(interface, "PropertiesChanged", "a{sv}", [values])
    return False


def _later(ms, fn, *args):
    def run():
        fn(*args)
        return False
    GLib.timeout_add(ms, run)


# --- org.freedesktop.DBus.Properties with wpa_supplicant's errors --------------------------

def _props_get(obj, interface, name):
    props = obj.props.get(interface, {}) if interface == obj.interface else {}
    if name not in props:
        raise _error(*rules.NO_SUCH_PROPERTY)
    if interface == NETWORK_IFACE and name == "Properties":
        return _network_properties(obj)
    return props[name]


def _props_get_all(obj, interface):
    if interface != obj.interface:
        return dbus.Dictionary({}, signature="sv")
    if interface == NETWORK_IFACE:
        _refresh_network_props(obj)
    return dbus.Dictionary(obj.props[interface], signature="sv")


def _props_set(obj, interface, name, value):
    props = obj.props.get(interface, {}) if interface == obj.interface else {}
    if name not in props:
        raise _error(*rules.NO_SUCH_PROPERTY)
    if name in _READ_ONLY.get(interface, ()):
        raise _error(*rules.READ_ONLY)
    if interface == NETWORK_IFACE and name == "Properties":
        if not isinstance(value, dbus.Dictionary):
            raise _error(*rules.INVALID_NETWORK_FORMAT)
        obj.wpa_sets.append(dbus.Dictionary(value, signature="sv"))
        try:
            for key, entry in value.items():
                _apply_network_entry(obj, str(key), entry)
        finally:
            _refresh_network_props(obj)
        return
    if interface == INTERFACE_IFACE and name == "BSSExpireAge":
        try:
            rules.check_expire_age(int(value))
        except rules.WpaError as e:
            raise _answer(e) from None
    if interface == NETWORK_IFACE and name == "Enabled":
        if not isinstance(value, dbus.Boolean):
            raise _error(*rules.WRONG_PROPERTY_TYPE)
        _set_enabled(obj, bool(value))
        return
    _mark_changed(obj, interface, {name: value})


def _install_properties(obj):
    obj.wpa_pending = {}
    obj.AddMethod(PROPS_IFACE, "Get", "ss", "v", _props_get)
    obj.AddMethod(PROPS_IFACE, "GetAll", "s", "a{sv}", _props_get_all)
    obj.AddMethod(PROPS_IFACE, "Set", "ssv", "", _props_set)


# --- objects --------------------------------------------------------------------------

def _iface(path):
    obj = dbusmock.mockobject.objects.get(str(path))
    if obj is None or obj.interface != INTERFACE_IFACE:
        raise _error(*rules.INTERFACE_UNKNOWN)
    return obj


def _network_of(iface, path):
    """The network object at *path* on *iface*, with wpa_supplicant's error choices."""
    path = str(path)
    prefix = iface.path + "/Networks/"
    if not path.startswith(prefix) or not path[len(prefix):].isdigit():
        raise _answer(rules.BadArguments())
    net = dbusmock.mockobject.objects.get(path)
    if net is None:
        raise _error(*rules.NETWORK_UNKNOWN)
    return net


def _networks(iface):
    nets = [o for p, o in dbusmock.mockobject.objects.items()
            if o.interface == NETWORK_IFACE and p.startswith(iface.path + "/Networks/")]
    return sorted(nets, key=lambda n: n.wpa_id)


def _interface_path(main, ifname):
    for path in main.props[MAIN_IFACE]["Interfaces"]:
        if dbusmock.mockobject.objects[path].props[INTERFACE_IFACE]["Ifname"] == ifname:
            return dbus.ObjectPath(path)
    return None


def _add_interface(main, ifname, driver):
    if _interface_path(main, ifname):
        raise _error(*rules.INTERFACE_EXISTS)
    path = f"{MAIN_OBJ}/Interfaces/{main.wpa_next_iface}"
    main.wpa_next_iface += 1
    given = {"Ifname": ifname, "Driver": driver}
    props = {name: _to_dbus(signature, given.get(name, fresh))
             for name, (signature, fresh, _) in rules.INTERFACE_PROPERTIES.items()}
    main.AddObject(path, INTERFACE_IFACE, props, [])
    iface = dbusmock.get_object(path)
    iface.wpa_rssi = -50
    iface.wpa_signal_fails = False
    iface.wpa_signal_error = ""
    _install_properties(iface)
    iface.AddMethod(INTERFACE_IFACE, "AddNetwork", "a{sv}", "o", _iface_add_network)
    iface.AddMethod(INTERFACE_IFACE, "RemoveNetwork", "o", "", _iface_remove_network)
    iface.AddMethod(INTERFACE_IFACE, "SelectNetwork", "o", "", _iface_select_network)
    iface.AddMethod(INTERFACE_IFACE, "Scan", "a{sv}", "", _iface_scan)
    iface.AddMethod(INTERFACE_IFACE, "AbortScan", "", "", _iface_abort_scan)
    iface.AddMethod(INTERFACE_IFACE, "Roam", "s", "", _iface_roam)
    iface.AddMethod("org.freedesktop.DBus.Introspectable", "Introspect", "", "s",
                    _iface_introspect)
    iface.wpa_next_bss = 0
    iface.wpa_scan_ms = 20
    iface.wpa_scan_id = 0  # the running scan's number; 0: none
    iface.wpa_next_scan = 1
    iface.AddMethod(INTERFACE_IFACE, "SignalPoll", "", "v", _iface_signal_poll)
    main.props[MAIN_IFACE]["Interfaces"] = dbus.Array(
        list(main.props[MAIN_IFACE]["Interfaces"]) + [dbus.ObjectPath(path)], signature="o")
    main.EmitSignal(MAIN_IFACE, "InterfaceAdded", "oa{sv}",
                    [dbus.ObjectPath(path), dbus.Dictionary(props, signature="sv")])
    _mark_changed(iface, INTERFACE_IFACE, {"State": dbus.String("disconnected")})
    return dbus.ObjectPath(path)


def _add_network(iface, args):
    nets = _networks(iface)
    net_id = max((n.wpa_id for n in nets), default=-1) + 1
    path = f"{iface.path}/Networks/{net_id}"
    iface.AddObject(path, NETWORK_IFACE, {"Properties": dbus.Dictionary({}, signature="sv"),
                                          "Enabled": dbus.Boolean(False)}, [])
    net = dbusmock.get_object(path)
    net.wpa_id = net_id
    net.wpa_iface = iface.path
    net.wpa_config = dict(rules.FIELD_DEFAULTS)
    net.wpa_psk = None
    net.wpa_sets = []
    _install_properties(net)
    _refresh_network_props(net)
    _update_networks_prop(iface)
    # wpa_supplicant announces the network while its struct is still zeroed: before defaults
    # and arguments are applied, so every integer field reads "0" and Enabled is true.
    zeroed = dbus.Dictionary({k: dbus.String("0") for k, _ in rules.NETWORK_FIELDS
                              if k in rules.INT_FIELDS}, signature="sv")
    iface.EmitSignal(INTERFACE_IFACE, "NetworkAdded", "oa{sv}",
                     [dbus.ObjectPath(path), dbus.Dictionary(
                         {"Properties": zeroed, "Enabled": dbus.Boolean(True)}, signature="sv")])
    try:
        for key, value in args.items():
            _apply_network_entry(net, str(key), value)
    except dbus.exceptions.DBusException:
        _remove_network(iface, net)
        raise
    _refresh_network_props(net)
    return dbus.ObjectPath(path)


def _update_networks_prop(iface):
    iface.props[INTERFACE_IFACE]["Networks"] = dbus.Array(
        [dbus.ObjectPath(n.path) for n in _networks(iface)], signature="o")


def _remove_network(iface, net):
    iface.EmitSignal(INTERFACE_IFACE, "NetworkRemoved", "o", [dbus.ObjectPath(net.path)])
    iface.RemoveObject(net.path)
    _update_networks_prop(iface)
    if iface.props[INTERFACE_IFACE]["CurrentNetwork"] == net.path:
        _mark_changed(iface, INTERFACE_IFACE, {"CurrentNetwork": dbus.ObjectPath("/")})


def _set_enabled(net, enabled):
    value = "0" if enabled else "1"
    if net.wpa_config["disabled"] == value:
        return
    net.wpa_config["disabled"] = value
    _refresh_network_props(net)
    _mark_changed(net, NETWORK_IFACE, {"Enabled": dbus.Boolean(enabled)})


# --- fi.w1.wpa_supplicant1.Interface methods (first argument: the interface object) -----

def _iface_add_network(iface, args):
    return _add_network(iface, args)


def _iface_remove_network(iface, path):
    _remove_network(iface, _network_of(iface, path))


def _iface_select_network(iface, path):
    net = _network_of(iface, path)
    for other in _networks(iface):
        _set_enabled(other, other is net)
    # Stored, not announced: wpa_supplicant_select_network() sets current_ssid directly.
    iface.props[INTERFACE_IFACE]["CurrentNetwork"] = dbus.ObjectPath(net.path)
    iface.EmitSignal(INTERFACE_IFACE, "NetworkSelected", "o", [dbus.ObjectPath(net.path)])


def _iface_scan(iface, args):
    try:
        rules.scan_request({str(k): (_signature(v), v) for k, v in args.items()})
    except rules.WpaError as e:
        raise _answer(e) from None
    if iface.props[INTERFACE_IFACE]["Driver"] == "none":
        _later(0, _emit_scan_done, iface, False)
        _mark_changed(iface, INTERFACE_IFACE, {"Scanning": dbus.Boolean(False)})
        return
    _start_scan(iface)


def _start_scan(iface):
    if iface.wpa_scan_id:
        raise _error(*rules.SCAN_REJECTED)
    iface.wpa_scan_id = scan_id = iface.wpa_next_scan
    iface.wpa_next_scan += 1
    _mark_changed(iface, INTERFACE_IFACE, {"Scanning": dbus.Boolean(True)})
    _later(iface.wpa_scan_ms, _finish_scan, iface, scan_id)


def _finish_scan(iface, scan_id):
    if iface.wpa_scan_id != scan_id:
        return  # aborted
    iface.wpa_scan_id = 0
    _emit_scan_done(iface, True)
    _mark_changed(iface, INTERFACE_IFACE, {"Scanning": dbus.Boolean(False)})


def _iface_abort_scan(iface):
    """As 2.10 does: the running scan ends at once and its requester sees it done (ScanDone
    true, with what it found so far); with none running, ScanError."""
    if not iface.wpa_scan_id:
        raise _error(*rules.NOTHING_TO_ABORT)
    _finish_scan(iface, iface.wpa_scan_id)


def _iface_roam(iface, address):
    """As wpas_dbus_handler_roam(); the mock then moves CurrentBSS to the BSS at once."""
    if not isinstance(address, dbus.String):
        raise _error(ERR_INVALID_ARGS, "")  # the object layer's signature check: no text
    current = iface.props[INTERFACE_IFACE]["CurrentNetwork"]

    def find(bssid):
        ssid = dbusmock.mockobject.objects[str(current)].wpa_config.get("ssid")
        return _bss.find_bss(iface, rules.bssid_bytes(bssid),
                             rules.parse_string(ssid) if ssid else b"")
    try:
        bss = rules.roam_target(str(address), current != "/", find)
    except rules.WpaError as e:
        raise _answer(e) from None
    _mark_changed(iface, INTERFACE_IFACE, {"CurrentBSS": dbus.ObjectPath(bss.path)})


def _add_bss(iface, props):
    bss = _bss.add_bss(iface, props)
    _install_properties(bss)
    _mark_changed(iface, INTERFACE_IFACE, {"BSSs": _bss.bss_paths(iface)})
    return dbus.ObjectPath(bss.path)


def _remove_bss(iface, bss):
    _bss.remove_bss(iface, bss)
    changes = {"BSSs": _bss.bss_paths(iface)}
    if iface.props[INTERFACE_IFACE]["CurrentBSS"] == bss.path:
        changes["CurrentBSS"] = dbus.ObjectPath("/")
    _mark_changed(iface, INTERFACE_IFACE, changes)


def _iface_introspect(iface):
    """The interface object's Introspect, built from what the mock really has: its methods,
    its properties (with their access) and the signals it sends."""
    def args(signature, direction):
        return "".join(f'<arg type="{t}" direction="{direction}"/>'
                       for t in dbus.Signature(signature))
    methods = "".join(
        f'<method name="{name}">{args(m[0], "in")}{args(m[1], "out")}</method>'
        for name, m in sorted(iface.methods.get(INTERFACE_IFACE, {}).items()))
    signals = "".join(f'<signal name="{name}">' + "".join(
        f'<arg type="{t}"/>' for t in dbus.Signature(sig)) + "</signal>"
        for name, sig in _INTERFACE_SIGNALS.items())
    props = "".join(
        f'<property name="{name}" type="{dbus.lowlevel.Message.guess_signature(value)}" '
        f'access="{"read" if name in _READ_ONLY[INTERFACE_IFACE] else "readwrite"}"/>'
        for name, value in iface.props[INTERFACE_IFACE].items())
    return (f'<node><interface name="{INTERFACE_IFACE}">{methods}{signals}{props}'
            "</interface></node>")


def _emit_scan_done(iface, success):
    if dbusmock.mockobject.objects.get(iface.path) is iface:
        iface.EmitSignal(INTERFACE_IFACE, "ScanDone", "b", [dbus.Boolean(success)])


def _iface_signal_poll(iface):
    props = iface.props[INTERFACE_IFACE]
    if iface.wpa_signal_error:
        raise _error(iface.wpa_signal_error, "Rejected send message (SignalPoll; injected by the "
                     "wpa_supplicant mock: SetSignalPollError)")
    if props["Driver"] == "none" or props["State"] != "completed" or iface.wpa_signal_fails:
        raise _error(*rules.SIGNAL_UNREADABLE)
    return dbus.Dictionary({
        "rssi": dbus.Int32(iface.wpa_rssi), "linkspeed": dbus.Int32(433),
        "noise": dbus.Int32(9999), "frequency": dbus.UInt32(5180),
        "width": dbus.String("80 MHz"), "avg-rssi": dbus.Int32(iface.wpa_rssi),
    }, signature="sv")


# --- the template ---------------------------------------------------------------------

def load(mock, parameters):
    """Set up the main object: no interfaces yet, as wpa_supplicant -u starts."""
    mock.wpa_next_iface = 0
    mock.AddProperties(MAIN_IFACE, {"Interfaces": dbus.Array([], signature="o")})
    _install_properties(mock)
    mock.wpa_set_delay_ms = 0
    mock.wpa_hang = False
    mock.wpa_abort_hang = False
    mock.wpa_abort_hung = []
    mock.wpa_hung = []  # (connection, message) waiting for SetHang(false)
    mock.wpa_fail = ("", 0)  # (error name, calls left to fail)
    mock.connection.add_message_filter(functools.partial(_fault_filter, mock))


@dbus.service.method(MAIN_IFACE, in_signature="s", out_signature="o")
def GetInterface(self, ifname):
    path = _interface_path(self, ifname)
    if path:
        return path
    raise _error(*rules.INTERFACE_UNKNOWN)


@dbus.service.method(MAIN_IFACE, in_signature="a{sv}", out_signature="o")
def CreateInterface(self, args):
    ifname = args.get("Ifname")
    if not isinstance(ifname, dbus.String):
        raise _answer(rules.BadArguments())
    if not _interface_path(self, ifname) and not os.path.exists(f"/sys/class/net/{ifname}"):
        raise _error(*rules.CANNOT_GRAB)
    return _add_interface(self, str(ifname), str(args.get("Driver", "nl80211")))


@dbus.service.method(MAIN_IFACE, in_signature="o", out_signature="")
def RemoveInterface(self, path):
    iface = _iface(path)
    for net in _networks(iface):
        iface.EmitSignal(INTERFACE_IFACE, "NetworkRemoved", "o", [dbus.ObjectPath(net.path)])
        iface.RemoveObject(net.path)
    self.RemoveObject(iface.path)
    self.props[MAIN_IFACE]["Interfaces"] = dbus.Array(
        [p for p in self.props[MAIN_IFACE]["Interfaces"] if p != path], signature="o")
    self.EmitSignal(MAIN_IFACE, "InterfaceRemoved", "o", [dbus.ObjectPath(path)])


@dbus.service.method(MOCK_IFACE, in_signature="s", out_signature="o")
def AddWifiInterface(self, ifname):
    return _add_interface(self, str(ifname), "nl80211")


@dbus.service.method(MOCK_IFACE, in_signature="oss", out_signature="o")
def AddNetworkWithBgscan(self, iface_path, ssid, bgscan):
    args = {"ssid": dbus.String(ssid), "key_mgmt": dbus.String("WPA-PSK"),
            "psk": dbus.String("mock-passphrase")}
    if bgscan:
        args["bgscan"] = dbus.String(bgscan)
    return _add_network(_iface(iface_path), args)


@dbus.service.method(MOCK_IFACE, in_signature="oo", out_signature="")
def SetCurrentNetwork(self, iface_path, net_path):
    iface = _iface(iface_path)
    if net_path == "/":
        _mark_changed(iface, INTERFACE_IFACE, {"CurrentNetwork": dbus.ObjectPath("/"),
                                               "State": dbus.String("disconnected")})
        return
    net = _network_of(iface, net_path)
    _set_enabled(net, True)
    _mark_changed(iface, INTERFACE_IFACE, {"CurrentNetwork": dbus.ObjectPath(net.path),
                                           "State": dbus.String("completed")})


@dbus.service.method(MOCK_IFACE, in_signature="os", out_signature="")
def SetState(self, iface_path, state):
    _mark_changed(_iface(iface_path), INTERFACE_IFACE, {"State": dbus.String(state)})


@dbus.service.method(MOCK_IFACE, in_signature="o", out_signature="")
def EmitScanDone(self, iface_path):
    _emit_scan_done(_iface(iface_path), True)


@dbus.service.method(MOCK_IFACE, in_signature="ou", out_signature="")
def SetScanDuration(self, iface_path, ms):
    _iface(iface_path).wpa_scan_ms = int(ms)


@dbus.service.method(MOCK_IFACE, in_signature="o", out_signature="")
def StartScan(self, iface_path):
    _start_scan(_iface(iface_path))


@dbus.service.method(MOCK_IFACE, in_signature="oi", out_signature="")
def SetSignal(self, iface_path, rssi):
    _iface(iface_path).wpa_rssi = int(rssi)


@dbus.service.method(MOCK_IFACE, in_signature="ob", out_signature="")
def SetSignalPollFails(self, iface_path, fails):
    _iface(iface_path).wpa_signal_fails = bool(fails)


@dbus.service.method(MOCK_IFACE, in_signature="os", out_signature="")
def SetSignalPollError(self, iface_path, error_name):
    _iface(iface_path).wpa_signal_error = str(error_name)


@dbus.service.method(MOCK_IFACE, in_signature="o", out_signature="aa{sv}")
def GetPropertiesSets(self, net_path):
    net = dbusmock.mockobject.objects.get(str(net_path))
    if net is None or net.interface != NETWORK_IFACE:
        raise _error(*rules.NETWORK_UNKNOWN)
    return dbus.Array(net.wpa_sets, signature="a{sv}")


@dbus.service.method(MOCK_IFACE, in_signature="oaysqns", out_signature="o")
def AddBSS(self, iface_path, ssid, bssid, frequency, signal, security):
    try:
        props = {name: _to_dbus(*value) for name, value in rules.bss_properties(
            bytes(ssid), str(bssid), int(frequency), int(signal), str(security)).items()}
    except ValueError as e:
        raise _error(ERR_INVALID_ARGS, str(e)) from None
    return _add_bss(_iface(iface_path), props)


@dbus.service.method(MOCK_IFACE, in_signature="o", out_signature="")
def RemoveBSS(self, bss_path):
    bss_path = str(bss_path)
    iface = _iface(bss_path.rsplit("/BSSs/", 1)[0])
    bss = _bss.bss_of(iface, bss_path)
    if bss is None:
        raise _error(ERR_INVALID_ARGS, f"no BSS {bss_path}")
    _remove_bss(iface, bss)


# --- injected faults: slow, stuck and failing calls (SetSetDelay, SetHang, SetFailNext) ---
#
# dbus-python answers a method as soon as it returns, so delaying or withholding a reply needs
# the message itself: a filter on the connection sees every call before the objects do, and
# answers the ones a fault applies to by hand.

# The calls a client like nm-scanguard makes; SetFailNext counts only these.
_CLIENT_CALLS = {(PROPS_IFACE, "Get"), (PROPS_IFACE, "GetAll"), (PROPS_IFACE, "Set"),
                 (MAIN_IFACE, "GetInterface"), (INTERFACE_IFACE, "SignalPoll"),
                 (INTERFACE_IFACE, "Scan"), (INTERFACE_IFACE, "AbortScan"),
                 (INTERFACE_IFACE, "Roam")}
_NOT_OURS = dbus.lowlevel.HANDLER_RESULT_NOT_YET_HANDLED
_PROPERTIES_CALLS = {(PROPS_IFACE, "Get"), (PROPS_IFACE, "GetAll"), (PROPS_IFACE, "Set")}
_HANGING_CALLS = _PROPERTIES_CALLS | {(INTERFACE_IFACE, "Scan"), (INTERFACE_IFACE, "AbortScan")}
# The calls whose InvalidArgs carry a second string (rules.BadArguments): always answered by
# hand.
_DETAILED_CALLS = {(INTERFACE_IFACE, "Scan"), (INTERFACE_IFACE, "Roam")}


def _fault_filter(mock, connection, message):
    """Answer the calls an injected fault applies to; let every other message through."""
    if not isinstance(message, dbus.lowlevel.MethodCallMessage):
        return _NOT_OURS
    path = message.get_path() or ""
    if path != MAIN_OBJ and not path.startswith(MAIN_OBJ + "/"):
        return _NOT_OURS
    call = (message.get_interface(), message.get_member())
    error, left = mock.wpa_fail
    if left > 0 and call in _CLIENT_CALLS:
        mock.wpa_fail = (error, left - 1)
        mock.log(f"injected failure {error} for {path} {call[0]}.{call[1]} ({left - 1} left)")
        connection.send_message(dbus.lowlevel.ErrorMessage(
            message, error, f"failure injected by the wpa_supplicant mock (SetFailNext) "
            f"into {call[1]}"))
        return dbus.lowlevel.HANDLER_RESULT_HANDLED
    if call not in _HANGING_CALLS | _DETAILED_CALLS:
        return _NOT_OURS
    if mock.wpa_abort_hang and call == (INTERFACE_IFACE, "AbortScan"):
        mock.wpa_abort_hung.append((connection, message))
        mock.log(f"hanging {path} AbortScan")
        return dbus.lowlevel.HANDLER_RESULT_HANDLED
    if mock.wpa_hang and call in _HANGING_CALLS:
        mock.wpa_hung.append((connection, message))
        mock.log(f"hanging {path} {call[0]}.{call[1]} ({len(mock.wpa_hung)} waiting)")
        return dbus.lowlevel.HANDLER_RESULT_HANDLED
    if mock.wpa_set_delay_ms and call[1] == "Set" and _is_network(path):
        _carry_out(mock, connection, message)
        return dbus.lowlevel.HANDLER_RESULT_HANDLED
    if call in _DETAILED_CALLS and _is_interface(path):
        _carry_out(mock, connection, message)
        return dbus.lowlevel.HANDLER_RESULT_HANDLED
    return _NOT_OURS


def _is_interface(path):
    obj = dbusmock.mockobject.objects.get(path)
    return obj is not None and obj.interface == INTERFACE_IFACE


def _is_network(path):
    obj = dbusmock.mockobject.objects.get(path)
    return obj is not None and obj.interface == NETWORK_IFACE


def _carry_out(mock, connection, message):
    """Do what a Properties call (or a hung Scan) asks, as the object would, and answer it
    (later for a Set on a network while SetSetDelay is on)."""
    path, member = message.get_path(), message.get_member()
    args = message.get_args_list()
    obj = dbusmock.mockobject.objects.get(path)
    try:
        if obj is None:
            raise _error("org.freedesktop.DBus.Error.UnknownMethod",
                         f"No such interface 'org.freedesktop.DBus.Properties' at object path '{path}'")
        obj.log(f"{member}{tuple(args)!r}")
        obj.call_log.append((int(time.time()), member, args))
        if member == "Get":
            reply = dbus.lowlevel.MethodReturnMessage(message)
            reply.append(_props_get(obj, *args), signature="v")
        elif member == "GetAll":
            reply = dbus.lowlevel.MethodReturnMessage(message)
            reply.append(_props_get_all(obj, *args), signature="a{sv}")
        elif member == "Scan":
            _iface_scan(obj, *args)
            reply = dbus.lowlevel.MethodReturnMessage(message)
        elif member == "AbortScan":
            _iface_abort_scan(obj)
            reply = dbus.lowlevel.MethodReturnMessage(message)
        elif member == "Roam":
            _iface_roam(obj, *args)
            reply = dbus.lowlevel.MethodReturnMessage(message)
        else:
            _props_set(obj, *args)
            reply = dbus.lowlevel.MethodReturnMessage(message)
    except dbus.exceptions.DBusException as e:
        reply = dbus.lowlevel.ErrorMessage(message, e.get_dbus_name() or ERR_FAILED,
                                           e.get_dbus_message())
        if getattr(e, "detail", None) is not None:
            reply.append(e.detail, signature="s")
    except (TypeError, ValueError) as e:  # wrong argument count or types
        reply = dbus.lowlevel.ErrorMessage(message, ERR_INVALID_ARGS, str(e))
    delay = mock.wpa_set_delay_ms if member == "Set" and obj is not None \
        and obj.interface == NETWORK_IFACE else 0
    if delay:
        mock.log(f"answering {member} on {path} in {delay} ms")
        _later(delay, connection.send_message, reply)
    else:
        connection.send_message(reply)


@dbus.service.method(MOCK_IFACE, in_signature="u", out_signature="")
def SetSetDelay(self, ms):
    self.wpa_set_delay_ms = int(ms)


@dbus.service.method(MOCK_IFACE, in_signature="b", out_signature="")
def SetAbortHang(self, hang):
    self.wpa_abort_hang = bool(hang)
    if not self.wpa_abort_hang:
        _release_hung(self, "wpa_abort_hung")


@dbus.service.method(MOCK_IFACE, in_signature="b", out_signature="")
def SetHang(self, hang):
    self.wpa_hang = bool(hang)
    if not self.wpa_hang:
        _release_hung(self, "wpa_hung")


def _release_hung(self, queue):
    """Carry out, in order, the calls held back in the list attribute `queue`."""
    waiting = getattr(self, queue)
    setattr(self, queue, [])
    for connection, message in waiting:
        _carry_out(self, connection, message)


@dbus.service.method(MOCK_IFACE, in_signature="su", out_signature="")
def SetFailNext(self, error_name, count):
    if count and not error_name:
        raise _error(ERR_INVALID_ARGS, "SetFailNext needs an error name, e.g. "
                     "org.freedesktop.DBus.Error.Failed")
    self.wpa_fail = (str(error_name), int(count))


@dbus.service.method(MOCK_IFACE, in_signature="", out_signature="a{sv}")
def GetFaults(self):
    return dbus.Dictionary({
        "set_delay_ms": dbus.UInt32(self.wpa_set_delay_ms), "hang": dbus.Boolean(self.wpa_hang),
        "hung_calls": dbus.UInt32(len(self.wpa_hung)), "fail_error": dbus.String(self.wpa_fail[0]),
        "fail_left": dbus.UInt32(self.wpa_fail[1]),
    }, signature="sv")

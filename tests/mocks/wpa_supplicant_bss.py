"""BSS objects of the wpa_supplicant 2.10 mock (tests/mocks/wpa_supplicant.py loads this file).

The real binary, on driver "none" as the contract tests run it, never finds a BSS: its scans
fail.  So what a BSS object holds is not checked against it; it follows the D-Bus API
documentation of 2.10 and wpa_supplicant/dbus/dbus_new_handlers.c (wpas_dbus_getter_bss_*), as
tests/wpa_supplicant_rules.py (bss_properties, SECURITY) writes it down for the model rung too:

``<iface>/BSSs/N`` (N counts up per interface, never reused), interface
``fi.w1.wpa_supplicant1.BSS``, every property read-only: ``BSSID`` (ay, 6 bytes), ``SSID`` (ay),
``WPA`` and ``RSN`` (a{sv}: ``KeyMgmt`` as, ``Pairwise`` as, ``Group`` s, and for RSN
``MgmtGroup`` s; empty lists and "" when the BSS sends no such element), ``WPS`` (a{sv}),
``IEs`` (ay), ``Privacy`` (b), ``Mode`` (s, "infrastructure"), ``Frequency`` (q, MHz),
``Rates`` (au, bit/s), ``Signal`` (n, dBm), ``Age`` (u, seconds since last seen).
Adding one sends ``BSSAdded(o, a{sv})`` with every property, then the interface's ``BSSs``
change; removing one sends ``BSSRemoved(o)`` and, if it was ``CurrentBSS``, ``CurrentBSS``
"/".
"""

import dbus
import dbusmock

BSS_IFACE = "fi.w1.wpa_supplicant1.BSS"


def bss_objects(iface):
    found = [o for p, o in dbusmock.mockobject.objects.items()
             if o.interface == BSS_IFACE and p.startswith(iface.path + "/BSSs/")]
    return sorted(found, key=lambda b: b.wpa_id)


def bss_paths(iface):
    return dbus.Array([dbus.ObjectPath(b.path) for b in bss_objects(iface)], signature="o")


def add_bss(iface, props):
    """A new BSS object under *iface*, announced with BSSAdded; the caller updates BSSs."""
    bss_id = iface.wpa_next_bss
    iface.wpa_next_bss += 1
    path = f"{iface.path}/BSSs/{bss_id}"
    iface.AddObject(path, BSS_IFACE, props, [])
    bss = dbusmock.get_object(path)
    bss.wpa_id = bss_id
    iface.EmitSignal(iface.interface, "BSSAdded", "oa{sv}",
                     [dbus.ObjectPath(path), dbus.Dictionary(props, signature="sv")])
    return bss


def remove_bss(iface, bss):
    """Remove *bss*, announced with BSSRemoved; the caller updates BSSs and CurrentBSS."""
    iface.EmitSignal(iface.interface, "BSSRemoved", "o", [dbus.ObjectPath(bss.path)])
    iface.RemoveObject(bss.path)


def bss_of(iface, path):
    bss = dbusmock.mockobject.objects.get(str(path))
    if bss is None or bss.interface != BSS_IFACE or not bss.path.startswith(iface.path + "/"):
        return None
    return bss


def find_bss(iface, bssid, ssid):
    """The BSS wpa_bss_get() would find: this BSSID and this SSID (both bytes), or None."""
    for bss in bss_objects(iface):
        props = bss.props[BSS_IFACE]
        if bytes(props["BSSID"]) == bssid and bytes(props["SSID"]) == ssid:
            return bss
    return None

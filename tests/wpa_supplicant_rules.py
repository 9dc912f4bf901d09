"""What wpa_supplicant 2.10 accepts and answers, written once for both simulations of it.

The D-Bus mock (tests/mocks/wpa_supplicant.py, a python-dbusmock template) and the model rung's
simulated wpa_supplicant (tests/model/peers.py and radio.py) each carry D-Bus messages their own
way; the rules they follow are here: the error names and texts, how a network's ``Properties``
take and read back a value, the checks of ``Scan``'s options and of ``Roam``'s address, the
interface's and a BSS object's properties, and what the RSN and WPA elements hold per kind of
network.  Plain Python without a D-Bus library: a D-Bus value comes as its signature and its
plain value, and a property goes out the same way, for each simulation to wrap in its own types.

The real binary's answers are pinned in tests/contract (wpa_scenarios.py,
wpa_roaming_scenarios.py), which both simulations pass; tests/unit/tools/
test_wpa_supplicant_rules.py holds these rules against those same tables.  What driver "none"
cannot show (a BSS object's contents) follows wpa_supplicant/dbus/dbus_new_handlers.c of 2.10.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeVar

WPA = "fi.w1.wpa_supplicant1"
DBUS_INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
DBUS_FAILED = "org.freedesktop.DBus.Error.Failed"
SCAN_ERROR = WPA + ".Interface.ScanError"

# wpa_supplicant's own InvalidArgs (wpas_dbus_error_invalid_args): always this text, then, as a
# second string, the offending key or a sentence naming the fault, if any.
INVALID_ARGS = WPA + ".InvalidArgs"
BAD_ARGUMENTS = "Did not receive correct message arguments."

# Its other errors, as (D-Bus error name, text).
INTERFACE_UNKNOWN = (WPA + ".InterfaceUnknown", "wpa_supplicant knows nothing about this interface.")
INTERFACE_EXISTS = (WPA + ".InterfaceExists", "wpa_supplicant already controls this interface.")
CANNOT_GRAB = (WPA + ".UnknownError", "wpa_supplicant couldn't grab this interface.")
NETWORK_UNKNOWN = (WPA + ".NetworkUnknown", "There is no such a network in this interface.")
NOT_CONNECTED = (WPA + ".NotConnected", "This interface is not connected")
SCAN_REJECTED = (SCAN_ERROR, "Scan request rejected")  # a scan is running already
NOTHING_TO_ABORT = (SCAN_ERROR, "Abort failed or no scan in progress")
SIGNAL_UNREADABLE = (DBUS_FAILED, "Failed to read signal")  # SignalPoll, not associated
NO_SUCH_PROPERTY = (DBUS_INVALID_ARGS, "No such property")
READ_ONLY = (DBUS_INVALID_ARGS, "Property is read-only")
INVALID_NETWORK_FORMAT = (DBUS_INVALID_ARGS, "invalid message format")  # a Properties entry
WRONG_PROPERTY_TYPE = (DBUS_FAILED, "wrong property type")
EXPIRE_AGE_TOO_LOW = (DBUS_FAILED, "BSSExpireAge must be >= 10")
MIN_EXPIRE_AGE = 10


class WpaError(Exception):
    """An error wpa_supplicant answers: its D-Bus name, its text and, for its own InvalidArgs,
    a second string naming the fault (None: none)."""

    def __init__(self, name: str, text: str, detail: str | None = None) -> None:
        super().__init__(name, text, detail)
        self.name, self.text, self.detail = name, text, detail


class BadArguments(WpaError):
    """wpa_supplicant's own InvalidArgs, with `detail` as its second string (None: none)."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(INVALID_ARGS, BAD_ARGUMENTS, detail)


def check_expire_age(seconds: int) -> None:
    """Setting the interface's BSSExpireAge."""
    if seconds < MIN_EXPIRE_AGE:
        raise WpaError(*EXPIRE_AGE_TOO_LOW)


# --- the interface object --------------------------------------------------------------

# Its properties, in the order GetAll and InterfaceAdded list them: (signature, the value of a
# fresh interface (None: given when it is made), writable).
INTERFACE_PROPERTIES: dict[str, tuple[str, object, bool]] = {
    "Ifname": ("s", None, False), "Driver": ("s", None, False),
    "State": ("s", "disconnected", False), "Scanning": ("b", False, False),
    "CurrentNetwork": ("o", "/", False), "CurrentBSS": ("o", "/", False),
    "Networks": ("ao", [], False), "BSSs": ("ao", [], False), "ApScan": ("u", 1, True),
    "BSSExpireAge": ("u", 180, True), "BSSExpireCount": ("u", 2, True),
    "RoamTime": ("u", 0, False), "RoamComplete": ("b", False, False),
}
INTERFACE_READ_ONLY = frozenset(k for k, (_, _, writable) in INTERFACE_PROPERTIES.items()
                                if not writable)
EXPIRE_AGE = 180  # BSSExpireAge: seconds unseen before a BSS object goes
EXPIRE_COUNT = 2  # BSSExpireCount: scans of its channel in a row that missed it


# --- a network's Properties: set_network_properties() and wpa_config_set() -------------

# Keys whose string values are passed on without quotes (dont_quote[] in dbus_new_handlers.c).
DONT_QUOTE = frozenset({
    "key_mgmt", "proto", "pairwise", "auth_alg", "group", "eap", "bssid", "scan_freq",
    "freq_list", "scan_ssid", "bssid_hint", "bssid_ignore", "bssid_accept", "bssid_blacklist",
    "bssid_whitelist", "group_mgmt", "ignore_broadcast_ssid", "mesh_basic_rates",
    "go_p2p_dev_addr", "p2p_client_list", "psk_list", "roaming_consortium",
    "required_roaming_consortium",
})

# Fields holding a string: stored from a quoted value or hex bytes, read back quoted (hex if
# not printable).
STRING_FIELDS = frozenset({"ssid", "id_str", "bgscan"})

# Every key wpa_supplicant 2.10 lists in a Network's Properties, in its order, with what a
# network fresh from AddNetwork({}) reads back; None: the key is listed only once set.
NETWORK_FIELDS = (
    ("ssid", None), ("scan_ssid", "0"), ("bssid", None), ("mem_only_psk", "0"),
    ("proto", "WPA RSN"), ("key_mgmt", "WPA-PSK WPA-EAP"), ("bg_scan_period", "-1"),
    ("pairwise", "CCMP TKIP"), ("group", "CCMP TKIP"), ("auth_alg", None), ("scan_freq", None),
    ("freq_list", None), ("ht", "1"), ("vht", "1"), ("ht40", "0"), ("max_oper_chwidth", "-1"),
    ("vht_center_freq1", "0"), ("vht_center_freq2", "0"), ("engine", "0"), ("engine2", "0"),
    ("machine_engine", "0"), ("machine_ocsp", "0"), ("eapol_flags", "3"), ("sim_num", "1"),
    ("erp", "0"), ("wep_tx_keyidx", "0"), ("priority", "0"), ("eap_workaround", "-1"),
    ("fragment_size", "1398"), ("ocsp", "0"), ("ocsp2", "0"), ("mode", "0"), ("no_auto_peer", "0"),
    ("mesh_fwding", "1"), ("mesh_rssi_threshold", "1"), ("proactive_key_caching", "-1"),
    ("disabled", "1"), ("id_str", None), ("ieee80211w", "3"), ("ocv", "0"), ("mixed_cell", "0"),
    ("frequency", "0"), ("fixed_freq", "0"), ("enable_edmg", "0"), ("edmg_channel", "0"),
    ("acs", "0"), ("dot11MeshMaxRetries", "2"), ("dot11MeshRetryTimeout", "40"),
    ("dot11MeshConfirmTimeout", "40"), ("dot11MeshHoldingTimeout", "40"), ("wpa_ptk_rekey", "0"),
    ("wpa_deny_ptk0_rekey", "0"), ("group_rekey", "0"), ("bgscan", None),
    ("ignore_broadcast_ssid", "0"), ("disable_ht", "0"), ("disable_ht40", "0"),
    ("disable_sgi", "0"), ("disable_ldpc", "0"), ("ht40_intolerant", "0"), ("tx_stbc", "-1"),
    ("rx_stbc", "-1"), ("disable_max_amsdu", "-1"), ("ampdu_factor", "-1"),
    ("ampdu_density", "-1"), ("disable_vht", "0"), ("vht_capa", "0"), ("vht_capa_mask", "0"),
    ("vht_rx_mcs_nss_1", "-1"), ("vht_rx_mcs_nss_2", "-1"), ("vht_rx_mcs_nss_3", "-1"),
    ("vht_rx_mcs_nss_4", "-1"), ("vht_rx_mcs_nss_5", "-1"), ("vht_rx_mcs_nss_6", "-1"),
    ("vht_rx_mcs_nss_7", "-1"), ("vht_rx_mcs_nss_8", "-1"), ("vht_tx_mcs_nss_1", "-1"),
    ("vht_tx_mcs_nss_2", "-1"), ("vht_tx_mcs_nss_3", "-1"), ("vht_tx_mcs_nss_4", "-1"),
    ("vht_tx_mcs_nss_5", "-1"), ("vht_tx_mcs_nss_6", "-1"), ("vht_tx_mcs_nss_7", "-1"),
    ("vht_tx_mcs_nss_8", "-1"), ("ap_max_inactivity", "0"), ("dtim_period", "0"),
    ("beacon_int", "0"), ("macsec_policy", "0"), ("macsec_integ_only", "0"),
    ("macsec_replay_protect", "0"), ("macsec_replay_window", "0"), ("macsec_port", "0"),
    ("mka_priority", "255"), ("update_identifier", "0"), ("mac_addr", "-1"), ("pbss", "0"),
    ("wps_disabled", "0"), ("fils_dh_group", "0"), ("dpp_netaccesskey_expiry", "0"),
    ("dpp_pfs", "0"), ("owe_group", "0"), ("owe_only", "0"), ("owe_ptk_workaround", "0"),
    ("multi_ap_backhaul_sta", "0"), ("ft_eap_pmksa_caching", "0"), ("beacon_prot", "0"),
    ("transition_disable", "0"), ("sae_pk", "0"),
)
FIELD_DEFAULTS = dict(NETWORK_FIELDS)
INT_FIELDS = frozenset(k for k, v in NETWORK_FIELDS if v is not None and v.lstrip("-").isdigit())


def _invalid_format() -> WpaError:
    return WpaError(*INVALID_NETWORK_FORMAT)


def config_text(key: str, signature: str, value: object) -> str:
    """The text wpa_supplicant hands to wpa_config_set() for one Properties entry: bytes as
    hex, a string quoted unless its key is in DONT_QUOTE, an int32/uint32 in decimal; any
    other type is refused."""
    if signature == "ay":
        raw = bytes(value)
        if not raw:
            raise _invalid_format()
        return raw.hex()
    if signature == "s":
        return str(value) if key in DONT_QUOTE else f'"{value}"'
    if signature in ("i", "u"):
        return str(int(value))
    raise _invalid_format()


def read_back_string(raw: bytes) -> str:
    """A string field as Properties reads it: quoted if printable ASCII, else hex."""
    if all(32 <= b < 127 for b in raw):
        return '"' + raw.decode("ascii") + '"'
    return raw.hex()


def parse_string(text: str) -> bytes:
    """The bytes of a string field's config text (or of its read-back form)."""
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise _invalid_format()
        return text[1:-1].encode("utf-8")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise _invalid_format() from None


def network_value(key: str, signature: str, value: object) -> str:
    """Setting `key` of a network to `value`: what its Properties then read back for it (for
    ``psk``, the text kept, which is never read back), or WpaError "invalid message format"."""
    text = config_text(key, signature, value)
    if key == "psk":
        if text.startswith('"'):
            if not 8 <= len(text) - 2 <= 63:
                raise _invalid_format()
        elif len(text) != 64:
            raise _invalid_format()
        return text
    if key not in FIELD_DEFAULTS:
        raise _invalid_format()
    if key in STRING_FIELDS:
        raw = parse_string(text)
        if key == "ssid" and len(raw) > 32:
            raise _invalid_format()
        return read_back_string(raw)
    if key in INT_FIELDS:
        try:
            return str(int(text, 0))
        except ValueError:
            raise _invalid_format() from None
    if text.startswith('"'):
        raise _invalid_format()
    return text


# --- Scan(a{sv}) -------------------------------------------------------------------------

class ScanRequest(NamedTuple):
    kind: str  # active, passive
    channels: tuple[int, ...]  # MHz; () every channel
    allow_roam: bool


def scan_request(options: Mapping[str, tuple[str, object]] | None) -> ScanRequest:
    """Scan's options, each as (signature, plain value), checked in the order given as
    wpas_dbus_handler_scan() does; None: the argument is not a dict at all."""
    if options is None:
        raise BadArguments(None)
    kind, key, ssids, channels, allow_roam = None, None, [], (), True
    for key, (signature, value) in options.items():
        if key == "Type":
            if signature != "s":
                raise BadArguments("Wrong Type value type. String required")
            kind = str(value)
        elif key in ("SSIDs", "IEs"):
            if signature != "aay":
                raise BadArguments(f"Wrong {key} value type. Array of arrays of bytes required")
            if key == "SSIDs" and any(len(s) > 32 for s in value):
                raise BadArguments("Invalid SSID: too long")
            ssids.extend(value)
        elif key == "Channels":
            # A non-empty array of structs starting with two uint32s (centre MHz, width MHz);
            # more fields are ignored (wpas_dbus_get_scan_channels()).
            if not signature.startswith("a(") or not value:
                raise BadArguments("Wrong Channels value type. Array of structs required")
            if not signature.startswith("a(uu"):
                raise BadArguments("Wrong Channel struct. Two UINT32s required")
            # Channel 0 is accepted and means no channel: a scan of every one.
            channels = tuple(int(c[0]) for c in value if int(c[0]))
        elif key == "AllowRoam":
            if signature != "b":
                raise BadArguments("Wrong Type value type. Boolean required")  # sic, 2.10
            allow_roam = bool(value)
        else:
            raise BadArguments(str(key))
    if kind is None:
        raise BadArguments(None if key is None else str(key))
    if kind == "passive" and ssids:
        raise BadArguments("You can specify only Channels in passive scan")
    if kind not in ("active", "passive"):
        raise BadArguments("Wrong scan type")
    return ScanRequest(kind, channels, allow_roam)


# --- Roam(s) -------------------------------------------------------------------------------

# hwaddr_aton(): six two-digit hex numbers joined by ":"; whatever follows is ignored.
HWADDR = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")

Found = TypeVar("Found")


def roam_target(address: str, connected: bool, find: Callable[[str], Found | None]) -> Found:
    """Roam's checks in wpas_dbus_handler_roam()'s order: the address, then a selected
    network (`connected`), then `find(bssid)`: the known BSS of that address with the
    selected network's SSID."""
    if not HWADDR.match(address):
        raise BadArguments("Invalid hardware address format")
    if not connected:
        raise WpaError(*NOT_CONNECTED)
    found = find(address[:17])
    if found is None:
        raise BadArguments("Target BSS not found")
    return found


# --- BSS objects (fi.w1.wpa_supplicant1.BSS) -------------------------------------------------

BSS_IFACE = WPA + ".BSS"

# What the RSN and WPA elements hold, and Privacy, for each kind of network.
_NONE: dict[str, object] = {"KeyMgmt": [], "Pairwise": [], "Group": ""}
SECURITY: dict[str, tuple[dict[str, object], dict[str, object], bool]] = {
    "open": ({**_NONE, "MgmtGroup": ""}, _NONE, False),
    "wpa2-psk": ({"KeyMgmt": ["wpa-psk"], "Pairwise": ["ccmp"], "Group": "ccmp",
                  "MgmtGroup": ""}, _NONE, True),
    "sae": ({"KeyMgmt": ["sae"], "Pairwise": ["ccmp"], "Group": "ccmp",
             "MgmtGroup": "aes128cmac"}, _NONE, True),
    "wpa-psk": ({**_NONE, "MgmtGroup": ""},
                {"KeyMgmt": ["wpa-psk"], "Pairwise": ["tkip"], "Group": "tkip"}, True),
}


def bssid_bytes(bssid: str) -> bytes:
    """b"\\x02..." from "02:00:00:00:01:00" (any case)."""
    return bytes(int(part, 16) for part in bssid.split(":"))


def _element(values: dict[str, object]) -> tuple[str, dict[str, tuple[str, object]]]:
    return "a{sv}", {k: ("as" if isinstance(v, list) else "s", v) for k, v in values.items()}


def bss_properties(ssid: bytes, bssid: str, frequency: int, signal: int, security: str,
                   age: int = 0) -> dict[str, tuple[str, object]]:
    """GetAll on a BSS object, each property as (signature, plain value); an a{sv} holds such
    pairs in turn.  Every one is read-only."""
    if security not in SECURITY:
        raise ValueError(f"security must be one of {sorted(SECURITY)}")
    rsn, wpa, privacy = SECURITY[security]
    return {
        "BSSID": ("ay", bssid_bytes(bssid)), "SSID": ("ay", bytes(ssid)),
        "WPA": _element(wpa), "RSN": _element(rsn), "WPS": ("a{sv}", {}), "IEs": ("ay", b""),
        "Privacy": ("b", privacy), "Mode": ("s", "infrastructure"),
        "Frequency": ("q", frequency), "Rates": ("au", []), "Signal": ("n", signal),
        "Age": ("u", age),
    }


BSS_PROPERTIES = frozenset(bss_properties(b"", "00:00:00:00:00:00", 0, 0, "open"))

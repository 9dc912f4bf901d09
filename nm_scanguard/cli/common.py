"""scanguardctl's way to the service and its output: the bus, the errors it explains, the
JSON it prints."""

from __future__ import annotations

import json
import re
from typing import Any

from ..dbuslib import MessageBus
from ..names import ACCESS_DENIED, IFACE, PATH, UNKNOWN_METHOD, UNREACHABLE
from ..names import BUS_NAME as NAME
from ..output import finite
from ..peers.bus import (
    BusError,
    NoSystemBus,
    call,
    connect_system,
    get_all,
    unwrap,
)
from ..text import escaped, shown
from .off import MASKED, OFF_EXIT, UNIT_MASKED, masked

HOLD_TIMEOUT = 130.0  # Hold and Reload: polkit may be asking for a password



class Failure(Exception):
    """An error message for the user; scanguardctl prints it and exits with `code` (1)."""

    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.code = code


# ---- talking to the service ---------------------------------------------------------------------

async def connect() -> MessageBus:
    try:
        return await connect_system()
    except NoSystemBus as e:
        raise Failure(str(e)) from None


def explain(e: BusError) -> Failure:
    # A service that cannot be started because the administrator masked it is off by choice,
    # not broken: said so, with how to undo it.
    if e.name == UNIT_MASKED or (e.name in UNREACHABLE and masked()):
        return Failure(MASKED, OFF_EXIT)
    if e.name in UNREACHABLE:
        return Failure("the scanguard service is not running and could not be started "
                       f"({e.name}); see `systemctl status scanguard`")
    if e.name == ACCESS_DENIED:
        return Failure(f"permission denied: {shown(e.text or e.name)}")
    return Failure(shown(e.text or e.name))


async def properties(bus: MessageBus) -> dict[str, Any]:
    """The service's properties, with ActiveHolds as GetActiveHolds gives it: the property
    names nobody, the method names this user's own holds (root's: every hold)."""
    try:
        props = await get_all(bus, NAME, PATH, IFACE)
    except BusError as e:
        raise explain(e) from None
    props["ActiveHolds"] = await active_holds(bus, props.get("ActiveHolds", []))
    return props


async def active_holds(bus: MessageBus, public: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GetActiveHolds, or `public` (the property) from a daemon older than the method."""
    try:
        (holds,) = unwrap(await call(bus, NAME, PATH, IFACE, "GetActiveHolds"))
    except BusError as e:
        if e.name == UNKNOWN_METHOD:
            return public
        raise explain(e) from None
    return list(holds)



_NOT_ASCII = re.compile("[^\x00-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not escaped(char):
        return char
    code = ord(char)
    if code > 0xFFFF:  # JSON spells it as a UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_text(doc: Any) -> str:
    """What --json prints: strict JSON, which JavaScript's JSON.parse and jq accept.  A figure the
    daemon could not compute is null, never NaN or Infinity (allow_nan=False would rather fail).
    Non-ASCII text stays readable ("Café ☕"); every character a terminal would act on or that
    hides is written as a \\uXXXX escape, which any parser reads back as the same string."""
    text = json.dumps(finite(doc), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return _NOT_ASCII.sub(_json_escape, text)

"""Generic netlink (include/uapi/linux/genetlink.h), as nl80211.py speaks it: the genlmsghdr
before each message's attributes, the attribute values its families send, and the controller's
CTRL_CMD_GETFAMILY, which resolves a family's name to its (dynamic) id and its multicast
groups' ids.

Pure, like netlink_wire.py: what breaks the framing raises the caller's error (`Malformed`).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .netlink_wire import NLM_F_REQUEST, Malformed, attributes, pack_attr, pack_message

GENL_ID_CTRL = 0x10  # NLMSG_MIN_TYPE: the controller's fixed family id
CTRL_CMD_NEWFAMILY, CTRL_CMD_GETFAMILY = 1, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_MCAST_GROUPS = 1, 2, 7
CTRL_ATTR_MCAST_GRP_NAME, CTRL_ATTR_MCAST_GRP_ID = 1, 2

GENLMSGHDR = struct.Struct("=BBH")  # command, version, reserved
U16, U32 = struct.Struct("=H"), struct.Struct("=I")


class Family(NamedTuple):
    """A generic-netlink family's id and its multicast groups' ids by name."""

    id: int
    groups: dict[str, int]


def number(data: bytes, layout: struct.Struct, what: str, malformed: Malformed) -> int:
    """A fixed-size number attribute; one of any other size is malformed."""
    if len(data) != layout.size:
        raise malformed(f"{what} of {len(data)} bytes, not {layout.size}")
    value: int = layout.unpack(data)[0]
    return value


def string(data: bytes, what: str, malformed: Malformed) -> str:
    """A NUL-terminated string attribute (the NUL and anything after it dropped)."""
    try:
        return data.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise malformed(f"{what} is not UTF-8") from None


def command(payload: bytes, what: str, malformed: Malformed) -> tuple[int, bytes]:
    """The command of a generic-netlink message and the attributes after its genlmsghdr."""
    if len(payload) < GENLMSGHDR.size:
        raise malformed(f"{what} shorter than its genlmsghdr")
    cmd, _version, _reserved = GENLMSGHDR.unpack_from(payload)
    return cmd, payload[GENLMSGHDR.size:]


def family_request(name: str, seq: int) -> bytes:
    """CTRL_CMD_GETFAMILY for the family called `name`."""
    body = GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + pack_attr(CTRL_ATTR_FAMILY_NAME,
                                                                  name.encode() + b"\0")
    return pack_message(GENL_ID_CTRL, NLM_F_REQUEST, seq, body)


def _groups(data: bytes, malformed: Malformed) -> dict[str, int]:
    groups: dict[str, int] = {}
    for _index, entry in attributes(data, "CTRL_ATTR_MCAST_GROUPS", malformed):
        name: str | None = None
        gid: int | None = None
        for kind, value in attributes(entry, "a multicast group", malformed):
            if kind == CTRL_ATTR_MCAST_GRP_NAME:
                name = string(value, "a multicast group's name", malformed)
            elif kind == CTRL_ATTR_MCAST_GRP_ID:
                gid = number(value, U32, "a multicast group's id", malformed)
        if name is None or gid is None:
            raise malformed("a multicast group without its name or id")
        groups[name] = gid
    return groups


def family(attrs: bytes, name: str, malformed: Malformed) -> Family:
    """The family in CTRL_CMD_NEWFAMILY's attributes `attrs`, which must be about `name`."""
    fid: int | None = None
    groups: dict[str, int] = {}
    for kind, value in attributes(attrs, "CTRL_CMD_NEWFAMILY", malformed):
        if kind == CTRL_ATTR_FAMILY_ID:
            fid = number(value, U16, "CTRL_ATTR_FAMILY_ID", malformed)
        elif kind == CTRL_ATTR_FAMILY_NAME:
            named = string(value, "CTRL_ATTR_FAMILY_NAME", malformed)
            if named != name:
                raise malformed(f"the answer is about family {named!r}, not {name!r}")
        elif kind == CTRL_ATTR_MCAST_GROUPS:
            groups = _groups(value, malformed)
    if fid is None:
        raise malformed("CTRL_CMD_NEWFAMILY without CTRL_ATTR_FAMILY_ID")
    return Family(fid, groups)

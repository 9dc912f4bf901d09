"""The crash journal, `{network path: {"ifname", "bgscan"}}` in the unit's RuntimeDirectory
(kept across restarts, gone with a reboot, like the networks it names); the format is the
first release's.  What is in it goes back to wpa_supplicant, so every load distrusts it: opened
without following symlinks or blocking, used only as a regular file of at most MAX_BYTES, each
entry checked on its own (a bad one is logged and dropped), and a file that cannot be used at
all moved aside to `suspended.json.bad`, so that the next write succeeds.  Writes are atomic
(temporary file, fsync, rename); forgets can be batched into one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

from ...files import Unreadable, read_regular, set_aside, write_atomic
from ...peers.values import valid_bgscan, valid_ifname, valid_network_path
from ...text import cut, json_type

log = logging.getLogger("scanguard")

DEFAULT_STATE_DIR = "/run/scanguard"
FILE_NAME = "suspended.json"
MAX_BYTES = 64 * 1024  # one entry is ~100 bytes and we keep one per Wi-Fi interface
SHOW = 80  # characters of a bad key or entry that go into the log

def _show(value: object) -> str:
    return cut(repr(value), SHOW)  # repr: control characters stay visible


class JournalEntry(NamedTuple):
    ifname: str  # checked against wpa_supplicant's objects on replay
    bgscan: str


class _BadFile(Exception):
    """The file exists but cannot be used; the text says why."""


class Journal:
    """`<state_dir>/suspended.json` and its entries in memory (`max_bytes`: for stress tests)."""

    def __init__(self, state_dir: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = os.path.join(state_dir, FILE_NAME)
        self.max_bytes = max_bytes
        self._entries: dict[str, JournalEntry] = {}
        self._loaded = False
        self._dirty = False  # the file no longer says what _entries says
        self._batch = 0

    def load(self) -> dict[str, JournalEntry]:
        """What a previous instance left.  Never raises for what is in or at the path."""
        self._loaded = True
        self._dirty = False
        try:
            data = self._read()
        except FileNotFoundError:
            data = {}
        except _BadFile as e:
            bad = self.path + ".bad"
            try:
                set_aside(self.path, bad)
                done = f"moved it to {bad} for inspection"
            except OSError as e2:
                done = (f"could not move it aside ({e2.strerror}), so recording a suspension "
                        "will fail until it is removed by hand")
            log.error("cannot use the journal %s: %s; %s. A bgscan a previous instance left off, "
                      "if any, cannot be restored from it: reconnecting the Wi-Fi restores "
                      "NetworkManager's setting", self.path, e, done)
            data = {}
        self._entries = {}
        for key, raw in data.items():
            if (problem := self._problem(key, raw)) is not None:
                log.warning("%s: dropping entry %s: %s", self.path, _show(key), problem)
                self._dirty = True
            else:
                self._entries[key] = JournalEntry(ifname=raw["ifname"], bgscan=raw["bgscan"])
        return dict(self._entries)

    def _read(self) -> dict[str, Any]:
        import json  # here and in _flush: scanguardd's start does without it (entry.py)

        try:
            raw = read_regular(self.path, self.max_bytes, follow_symlinks=False)
        except Unreadable as e:
            raise _BadFile(e.describe(self.max_bytes, "a journal")) from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise _BadFile(f"it is not valid JSON ({_show(str(e))})") from None
        if not isinstance(data, dict):
            raise _BadFile(f"it holds a JSON {json_type(data)}, not an object")
        return data

    @staticmethod
    def _problem(key: str, raw: object) -> str | None:
        if not valid_network_path(key):
            return "the key is not a wpa_supplicant network object path"
        if not isinstance(raw, dict):
            return f"the entry is a JSON {json_type(raw)}, not an object"
        ifname = raw.get("ifname")
        if not isinstance(ifname, str) or not valid_ifname(ifname):
            return f"ifname {_show(ifname)} is not a valid interface name"
        if not valid_bgscan(raw.get("bgscan")):
            return (f"bgscan {_show(raw.get('bgscan'))} is not a bgscan setting "
                    "(module[:parameters], printable ASCII without quotes, non-empty)")
        return None

    def entries(self) -> dict[str, JournalEntry]:
        self._ensure_loaded()
        return dict(self._entries)

    def get(self, network: str) -> JournalEntry | None:
        self._ensure_loaded()
        return self._entries.get(network)

    def record(self, network: str, ifname: str, bgscan: str) -> None:
        """On disk before it returns, even inside batch(): the caller sets "" only then.
        Raises ValueError for what a later load() would drop, OSError if it cannot write."""
        if (problem := self._problem(network, {"ifname": ifname, "bgscan": bgscan})) is not None:
            raise ValueError(problem)
        self._ensure_loaded()
        before = dict(self._entries)
        self._entries[network] = JournalEntry(ifname=ifname, bgscan=bgscan)
        self._dirty = True
        try:
            self._flush()
        except BaseException:
            self._entries = before  # not on disk, so not recorded: the caller sets no "" either
            raise

    def forget(self, *networks: str) -> None:
        """Drop entries, written at once or at the end of batch().  A failed write is logged and
        left to the next: a stale entry only makes a later start look and find nothing."""
        self._ensure_loaded()
        for network in networks:
            if self._entries.pop(network, None) is not None:
                self._dirty = True
        if self._batch == 0:
            try:
                self._flush()
            except OSError as e:
                log.warning("cannot update %s (%s); the next start will check its entries "
                            "again", self.path, e.strerror or e)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Defer the writes of forget() until the block ends, then write once."""
        self._batch += 1
        try:
            yield
        finally:
            self._batch -= 1
            if self._batch == 0:
                self.forget()

    def _ensure_loaded(self) -> None:
        # Writing without reading first would overwrite what a previous instance left.
        if not self._loaded:
            self.load()

    def _flush(self) -> None:
        import json

        if not self._dirty:
            return
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        data = {net: {"ifname": e.ifname, "bgscan": e.bgscan} for net, e in self._entries.items()}
        text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
        write_atomic(self.path, text.encode("utf-8"), mode=0o600, durable=True)
        self._dirty = False


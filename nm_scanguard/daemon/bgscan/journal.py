"""The crash journal: what we set to "" in wpa_supplicant, so that no instance leaves it off.

An entry is written *before* a network's bgscan is set to "" and removed once it is restored.  A
daemon that starts and finds entries (the previous one crashed or got SIGKILL) restores them.  The
file lives in the unit's RuntimeDirectory (/run/scanguard): kept across restarts, gone with a
reboot, exactly like the wpa_supplicant networks it describes.

Whatever is in the file is handed back to wpa_supplicant, so it is distrusted on every load:
- it is opened without following symlinks and without blocking (a FIFO planted there must not
  hang the start), and used only if it is a regular file of at most `MAX_BYTES`;
- each entry is checked on its own (network object path, kernel interface name, a bgscan string
  of the form NetworkManager writes); a bad entry is logged and dropped, never fatal;
- a file that cannot be used at all is moved aside to `suspended.json.bad`, so that the next
  write succeeds and the daemon does not fail the same way on every start.

Writes are atomic (temporary file, fsync, rename) and can be batched: restoring many entries at
start costs one write, not one per entry.  The format has not changed since the first release,
so a journal left by an older version is read.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ...files import Unreadable, read_regular, set_aside, write_atomic
from ...peers.ifname import valid_ifname
from ...peers.supplicant_values import valid_bgscan, valid_network_path
from ...text import cut, json_type

log = logging.getLogger("scanguard")

DEFAULT_STATE_DIR = "/run/scanguard"
FILE_NAME = "suspended.json"
MAX_BYTES = 64 * 1024  # one entry is ~100 bytes and we keep one per Wi-Fi interface
SHOW = 80  # characters of a bad key or entry that go into the log

def _show(value: object) -> str:
    """A bad value for the log: repr (so control characters stay visible), cut to SHOW chars."""
    return cut(repr(value), SHOW)


class JournalEntry(NamedTuple):
    """One suspended network: the interface it belongs to (checked against wpa_supplicant on
    replay) and the bgscan value to put back."""

    ifname: str
    bgscan: str


class _BadFile(Exception):
    """The journal file exists but cannot be used; the text says what is wrong with it."""


class Journal:
    """The file `<state_dir>/suspended.json` and its entries in memory.  `max_bytes` exists for
    stress tests; a real journal holds one entry per Wi-Fi interface."""

    def __init__(self, state_dir: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = os.path.join(state_dir, FILE_NAME)
        self.max_bytes = max_bytes
        self._entries: dict[str, JournalEntry] = {}
        self._loaded = False
        self._dirty = False  # the file no longer says what _entries says
        self._batch = 0

    # ---- reading --------------------------------------------------------------------------

    def load(self) -> dict[str, JournalEntry]:
        """Read what a previous instance left: network path -> entry.  Never raises for what
        is in or at the path: a damaged file is reported, moved aside and read as empty."""
        self._loaded = True
        self._dirty = False
        try:
            data = self._read()
        except FileNotFoundError:
            data = {}
        except _BadFile as e:
            self._set_aside(str(e))
            data = {}
        entries: dict[str, JournalEntry] = {}
        for key, raw in data.items():
            problem = self._problem(key, raw)
            if problem is not None:
                log.warning("%s: dropping entry %s: %s", self.path, _show(key), problem)
                self._dirty = True
                continue
            entries[key] = JournalEntry(ifname=raw["ifname"], bgscan=raw["bgscan"])
        self._entries = entries
        return dict(entries)

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

    def _set_aside(self, problem: str) -> None:
        """Move the unusable file out of the way, so the next write can put a journal there."""
        bad = self.path + ".bad"
        try:
            set_aside(self.path, bad)
            done = f"moved it to {bad} for inspection"
        except OSError as e:
            done = (f"could not move it aside ({e.strerror}), so recording a suspension will "
                    f"fail until it is removed by hand")
        log.error("cannot use the journal %s: %s; %s. A bgscan a previous instance left off, "
                  "if any, cannot be restored from it: reconnecting the Wi-Fi restores "
                  "NetworkManager's setting", self.path, problem, done)

    # ---- the entries ----------------------------------------------------------------------

    def entries(self) -> dict[str, JournalEntry]:
        """What is recorded now (a copy): network path -> entry."""
        self._ensure_loaded()
        return dict(self._entries)

    def get(self, network: str) -> JournalEntry | None:
        self._ensure_loaded()
        return self._entries.get(network)

    def record(self, network: str, ifname: str, bgscan: str) -> None:
        """Note that `network`'s bgscan was `bgscan` before we set it to "".  Written to disk
        before returning, even inside batch(): the caller sets "" only once this succeeded.
        Raises ValueError for what a later load() would drop, OSError if it cannot write."""
        if (problem := self._problem(network, {"ifname": ifname, "bgscan": bgscan})) is not None:
            raise ValueError(problem)
        self._ensure_loaded()
        before = self._entries.get(network)
        self._entries[network] = JournalEntry(ifname=ifname, bgscan=bgscan)
        self._dirty = True
        try:
            self._flush()
        except BaseException:
            # Not on disk, so not recorded: the caller will not set "" either.
            if before is None:
                del self._entries[network]
            else:
                self._entries[network] = before
            raise

    def forget(self, network: str) -> None:
        """Drop one entry; written at once, or at the end of the current batch()."""
        self.forget_many((network,))

    def forget_many(self, networks: Iterable[str]) -> None:
        """Drop several entries with a single write (none if nothing changed)."""
        self._ensure_loaded()
        for network in networks:
            if self._entries.pop(network, None) is not None:
                self._dirty = True
        if self._batch == 0:
            self._flush()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Defer the writes of forget() until the block ends, then write once (if anything
        changed).  Deferring a forget is safe: a stale entry only makes a later start look at
        a network and find nothing to restore."""
        self._batch += 1
        try:
            yield
        except BaseException:
            self._batch -= 1
            if self._batch == 0:
                try:
                    self._flush()
                except OSError as e:  # do not hide what ended the block
                    log.error("cannot write %s (%s); its stale entries stay until the next "
                              "write", self.path, e.strerror)
            raise
        self._batch -= 1
        if self._batch == 0:
            self._flush()

    # ---- writing --------------------------------------------------------------------------

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


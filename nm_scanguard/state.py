"""The journal of what we changed, so that no instance ever leaves a user's bgscan off.

An entry is written *before* bgscan is set to "" and removed after it is restored.  A daemon that
starts and finds entries (the previous one crashed or was killed with SIGKILL) restores them.
The file lives in the unit's RuntimeDirectory (/run/scanguard), which is kept across restarts
and vanishes with a reboot, exactly like the wpa_supplicant networks it describes.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = "/run/scanguard"


class Journal:
    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, "suspended.json")
        self._entries: dict[str, dict[str, str]] = {}

    def load(self) -> dict[str, dict[str, str]]:
        """Entries left by a previous instance: network path -> {"ifname", "bgscan"}."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as e:
            log.error("cannot read %s (%s): bgscan left off by a previous instance, if any, "
                      "cannot be restored; reconnecting the Wi-Fi restores it", self.path, e)
            data = {}
        if not isinstance(data, dict):
            data = {}
        self._entries = {
            str(net): {"ifname": str(e.get("ifname", "")), "bgscan": str(e.get("bgscan", ""))}
            for net, e in data.items()
            if isinstance(e, dict) and isinstance(e.get("bgscan"), str)
        }
        return dict(self._entries)

    def record(self, network: str, ifname: str, bgscan: str) -> None:
        self._entries[network] = {"ifname": ifname, "bgscan": bgscan}
        self._write()

    def forget(self, network: str) -> None:
        if self._entries.pop(network, None) is not None:
            self._write()

    def _write(self) -> None:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".suspended.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._entries, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

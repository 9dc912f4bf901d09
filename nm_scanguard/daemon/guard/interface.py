"""wpa_supplicant's object for one guarded interface, as the guard and its helpers call it.

Looked up when first needed (GetInterface) and kept: NetworkManager may remove the interface
and add it again at a new path, with no sample in between that missed the link, so a call
answered "no such object" (ObjectGone) forgets the path and the next call looks it up anew.
"""

from __future__ import annotations

from collections.abc import Callable

from ...peers.supplicant import ObjectGone, SupplicantError, WpaSupplicant


class Interface:
    def __init__(self, ifname: str, supplicant: WpaSupplicant) -> None:
        self.ifname = ifname
        self._supplicant = supplicant
        self.path: str | None = None  # None: not looked up yet, or found gone
        # Told when the object was found gone: what was announced on it is void.
        self.on_gone: Callable[[], None] = lambda: None

    async def __call__(self) -> str:
        """The object's path, looked up if it is not known."""
        if self.path is None:
            self.path = await self._supplicant.interface(self.ifname)
        return self.path

    def look_up_again_if_gone(self, e: SupplicantError) -> None:
        """After a failed call: an object that is gone makes the next call look it up anew."""
        if isinstance(e, ObjectGone):
            self.path = None
            self.on_gone()

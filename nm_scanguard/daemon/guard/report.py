"""What the status shows of one guard: its Devices entry and the STATUS= line.  Reads a guard
(the state it shows is the guard's: guard.shown_state); changes nothing."""

from __future__ import annotations

from typing import Protocol

from ...config import Settings
from ...peers.nm import WifiDevice
from ...status import DeviceStatus, device_line
from ..bgscan import Suspended
from .policy import Policy
from .problems import Problems
from .roaming import Roaming
from .sampling import Sampler
from .scans import ScanWatch
from .targeted import Targeted


class Reported(Protocol):
    """What a guard's status is made of."""

    ifname: str
    dev: WifiDevice
    policy: Policy
    sampler: Sampler
    roaming: Roaming
    targeted: Targeted
    state: str
    reason: str
    since: float
    scans: ScanWatch
    problems: Problems

    @property
    def settings(self) -> Settings: ...

    @property
    def suspended(self) -> Suspended | None: ...


def device_status(g: Reported) -> DeviceStatus:
    """The guard's entry in the Devices property."""
    r, suspended, scans, settings = g.sampler.rates, g.suspended, g.scans, g.settings
    return DeviceStatus(
        interface=g.ifname,
        state=g.state,
        reason=g.reason,
        since=g.since,
        rx_bps=r.rx_bps if r else 0.0,
        tx_bps=r.tx_bps if r else 0.0,
        pps=r.pps if r else 0.0,
        signal_dbm=g.policy.signal,
        suspended_bgscan=suspended.saved if suspended else "",
        network=suspended.network if suspended else "",
        scans_guarding=scans.scans_guarding,
        scans_idle=scans.scans_idle,
        deferring_scans=scans.deferring and scans.deferral_in_force is not False,
        scan_requests_deferred=scans.scan_requests_deferred,
        scans_aborted=dict(scans.scans_aborted),
        own_scans=list(g.roaming.own_scans),
        own_scan_details=[{"at": o.at, "kind": o.kind, "channels": list(o.channels)}
                          for o in g.roaming.own],
        roam_candidates=g.targeted.candidates_status(),
        roams=g.targeted.roams,
        last_move=g.targeted.last_move,
        scans_by_source=dict(scans.scans_by_source),
        last_scan=scans.last_scan,
        connection_id=g.dev.connection_id,
        connection_uuid=g.dev.connection_uuid,
        error=g.problems.text(),
        settings=settings.values(),
        settings_sources={k: settings.source(k) for k in settings.values()},
    )


def status_line(status: DeviceStatus) -> str:
    """For sd_notify STATUS= (systemctl status): the CLI's line without the connection's name
    and the state's age (one formatter, status.device_line)."""
    return device_line(status.as_plain(), connection=False, age=False)

"""The decision: should bgscan be suspended on this interface right now?

Pure and level-triggered: the policy is fed rates, signal readings and holds with the time they
were taken, and says what *should* be (`want_engaged`, `state`, `reason`).  The daemon compares
that with what it has done and acts; if an action fails it simply tries again on the next
sample, so no decision can be lost.
"""

from __future__ import annotations

from ...config import Settings
from .sampling import Rates

IDLE = "idle"
GUARDING = "guarding"
HELD = "held"
WEAK = "released-weak-signal"
# Busy or held, the signal below the floor, and the guard roaming by targeted scans of the
# network's other known access points (roaming.py) with bgscan still suspended; a few seconds
# at most, then the station has moved (back to GUARDING/HELD) or the guard releases (WEAK).
ROAMING = "roaming"
DISABLED = "disabled"
NO_BGSCAN = "no-bgscan"  # decided by the daemon: the network has no bgscan to suspend
# Decided by the daemon: it would guard, but suspending bgscan failed, or it would not, but
# restoring it failed (the guard's error says why).  GUARDING and HELD are shown only while
# bgscan is really suspended, the other states of the policy only once it is given back.
ERROR = "error"
# The states in which a scan hurts the transfer: it is aborted (abort_scans) and other
# programs' scan requests are refused (defer_client_scans).  Not WEAK, where scans are what
# roaming needs, nor IDLE.  Also where bgscan is not suspended, because the network has none
# (NO_BGSCAN) or suspending it failed (ERROR): neither needs the crash journal (AbortScan
# changes nothing that lasts, and the deferral file names this process, so a crash cannot
# leave it refusing), and both keep other programs' scans off the transfer.
GUARDED = (GUARDING, HELD, NO_BGSCAN, ERROR, ROAMING)
# The states in which bgscan should be suspended.  ROAMING too: its scans are the guard's own,
# of a few channels, and bgscan back on would scan every channel.
ENGAGED = (GUARDING, HELD, ROAMING)


# Within this many dB above the floor the signal is read every sample (signal_poll_due):
# one SignalPoll a second while the link is marginal, where a walk out of range crosses the
# floor within seconds.
NEAR_FLOOR_DB = 10.0


def off_reason(s: Settings) -> str:
    """Why nm-scanguard is off for every connection: `enabled = no` in the settings file, the
    administrator's off switch, which no profile turns back on (Daemon.settings_for); "" while
    the file leaves it on."""
    if s.enabled:
        return ""
    source = s.source("enabled")
    return "enabled = no" + (f" in {source}" if source != "default" else "")


def disabled_reason(s: Settings) -> str:
    """Why a connection is left alone, by where its `enabled = no` came from: its profile
    ("profile <id>"), a profile that cannot be read ("unreadable profile <id>",
    Daemon.settings_for), or the settings file, which turns nm-scanguard off everywhere."""
    source = s.source("enabled")
    if source.startswith("unreadable profile "):
        return "its profile cannot be read (see the problem)"
    if source.startswith("profile "):
        return f"enabled = no in {source}"
    return f"nm-scanguard is off: {off_reason(s)}"


def threshold_words(s: Settings) -> str:
    """What makes a link busy, in the words of the status and the log."""
    pps = f" or {s.threshold_pps} packets/s" if s.threshold_pps > 0 else ""
    return f"threshold {s.threshold_mbit:g} Mbit/s{pps}"


class Policy:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.busy = False  # traffic has been high long enough and not yet quiet long enough
        self.held = False
        self.weak = False  # signal under the floor, until it is back above floor + hysteresis
        # The guard handles this weak signal by targeted scans (ROAMING), not by a release:
        # set by Roaming, and only meaningful while weak.
        self.targeted = False
        self.signal: float | None = None
        self._busy_samples = 0
        self._quiet_since: float | None = None
        self._last_poll: float | None = None
        self._unknown_since: float | None = None  # no sample since then (observe_unknown)
        self._reason = "no traffic yet"

    # ---- inputs ---------------------------------------------------------------------------

    def observe(self, now: float, rates: Rates | None) -> None:
        """One sample.  `None` (counters reset) counts neither as busy nor as quiet."""
        self._unknown_since = None
        if rates is None:
            return
        s = self.settings
        busy = rates.mbit >= s.threshold_mbit or (s.threshold_pps > 0 and rates.pps >= s.threshold_pps)
        quiet = rates.mbit < s.release_below_mbit and (
            s.threshold_pps == 0 or rates.pps < s.release_below_pps
        )
        self._busy_samples = self._busy_samples + 1 if busy else 0
        if quiet:
            if self._quiet_since is None:
                # The link has been quiet since the start of the interval this sample covers,
                # not since the sample: counting from `now` would hold bgscan off one sample
                # longer than release_after (seen in the lab: 7.1 s for 5 s + 1 s samples).
                self._quiet_since = now - rates.seconds
        else:
            self._quiet_since = None

        if not self.busy and self._busy_samples >= s.engage_after:
            self.busy = True
        elif self.busy and self._quiet_since is not None and now - self._quiet_since >= s.release_after:
            self.busy = False
            self._reason = f"quiet for {now - self._quiet_since:.0f} s"
            self._last_poll = None  # next engagement starts with a fresh signal reading
            return
        if self.busy and not self.weak:
            # While traffic is what guards, the reason gives this sample's figures, not those
            # of the moment the guard engaged.
            self._reason = self._traffic(now, rates)
        elif not self.busy and not self.held:
            # Idle, the reason answers "why is it not guarding?" with this sample's figures
            # against the thresholds: a reason kept from an earlier event goes stale.
            self._reason = self._idle(rates)

    def observe_unknown(self, now: float) -> None:
        """No sample this time: the counters could not be read, or the interface vanished.
        A guard that cannot see the link gives bgscan back once release_after has passed
        without a sample, as after that long a quiet link: kept off blind, it could stay off
        for as long as the failure lasts."""
        self._busy_samples = 0
        if self._unknown_since is None:
            self._unknown_since = now
        unknown = now - self._unknown_since
        if self.busy and unknown >= self.settings.release_after:
            self.busy = False
            self._reason = f"traffic unknown for {unknown:.0f} s (no counters)"
            self._last_poll = None
        elif self.busy and not self.weak:
            self._reason = (f"traffic unknown for {unknown:.0f} s (no counters; released after "
                            f"{self.settings.release_after:g} s)")
        elif not self.busy and not self.held:
            self._reason = f"traffic unknown for {unknown:.0f} s (no counters)"

    def _idle(self, rates: Rates) -> str:
        s = self.settings
        figures = f"traffic {rates.mbit:.1f} Mbit/s, {rates.pps:.0f} packets/s received and sent"
        if self._busy_samples:
            return (f"{figures} ({threshold_words(s)}; guarding after {s.engage_after} busy "
                    f"samples in a row, {self._busy_samples} so far)")
        return f"{figures}, under the {threshold_words(s)}"

    def _traffic(self, now: float, rates: Rates) -> str:
        s = self.settings
        figures = f"traffic {rates.mbit:.1f} Mbit/s, {rates.pps:.0f} packets/s received and sent"
        if self._quiet_since is not None:
            return (f"{figures}, quiet for {now - self._quiet_since:.0f} s "
                    f"(released after {s.release_after:g} s)")
        return f"{figures} ({threshold_words(s)})"

    def observe_signal(self, now: float, rssi: float | None) -> None:
        """A SignalPoll result; `None` means the poll failed and changes nothing."""
        self._last_poll = now
        if rssi is None:
            return
        self.signal = rssi
        s = self.settings
        if rssi < s.signal_floor_dbm and not self.weak:
            self.weak = True
            self._reason = (f"signal {rssi:.0f} dBm below the floor of {s.signal_floor_dbm:.0f} dBm: "
                            "bgscan left on so it can roam")
        elif self.weak and rssi >= s.signal_floor_dbm + s.signal_hysteresis_db:
            self.weak = self.targeted = False
            self._reason = (
                f"signal {rssi:.0f} dBm back above {s.signal_floor_dbm + s.signal_hysteresis_db:.0f} dBm"
            )

    def set_targeted(self, targeted: bool, why: str) -> None:
        """Roaming takes this weak signal on by targeted scans (True), or gives it to a
        release and a scan of every channel (False)."""
        if targeted != self.targeted:
            self.targeted = targeted
            self._reason = why

    def set_held(self, held: bool) -> None:
        if held != self.held:
            self.held = held
            self._reason = "held by an application" if held else "last hold released"
            if not held and not self.busy:
                self._last_poll = None

    def update_settings(self, settings: Settings) -> None:
        if settings != self.settings:
            self.settings = settings
            self._reason = "settings changed"

    # ---- outputs --------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if not self.settings.enabled:
            return DISABLED
        if not (self.busy or self.held):
            return IDLE
        if self.weak:
            return ROAMING if self.targeted else WEAK
        return GUARDING if self.busy else HELD

    @property
    def want_engaged(self) -> bool:
        return self.state in ENGAGED

    @property
    def reason(self) -> str:
        if not self.settings.enabled:
            return disabled_reason(self.settings)
        return self._reason

    def signal_poll_due(self, now: float) -> bool:
        """Signal matters only while we want to guard; then read it every poll interval."""
        if not self.settings.enabled or not (self.busy or self.held):
            return False
        if self.targeted and self.weak:
            return True  # every sample: the station's move ends ROAMING as soon as it lands
        interval = self.settings.signal_poll_interval
        if self.signal is not None and self.signal < self.settings.signal_floor_dbm + NEAR_FLOOR_DB:
            # Near the floor, every sample: a fade is seen within one, not a poll interval
            # (lab: the targeted scan started 4 s after a fade with a 2 s poll interval).
            interval = min(interval, self.settings.sample_interval)
        return self._last_poll is None or now - self._last_poll >= interval

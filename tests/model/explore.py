"""The model rung's systematic mode: every sequence of events up to a bound, not a sample.

`python3 -m tests.model.explore [--depth K] [--from SITUATIONS] [--jobs N]` (`make
model-exhaustive`) runs the daemon's real code against the model's simulated peers
(tests/model/world.py, the same world the sampled rung uses) through **every** sequence of at
most K events drawn from EVENTS below, from each of the starting situations asked for
(SITUATIONS: the world after a fixed prefix, e.g. a restore under way while wpa_supplicant
stalls), and checks after every event what the sampled rung checks after every step (World.violations:
only `bgscan` is ever sent, never two suspensions of one object, the journal on disk names
every object carrying our "", a restore writes only where our "" stands, nothing raised
unhandled), and at the end of every sequence the promise (settle: every bgscan is
NetworkManager's; a clean stop while guarding restores at once).  Liveness (busy_for_a_while:
a busy link with answering peers gets guarded) is an event of its own, so that it is checked
after every prefix and sequences also end without it (it engages the guard, which would adopt
and so hide a "" that the journal replay should have restored).

What one event is: something a machine does to the daemon at one instant, with no time passing
(`then=0`), so that what events start interleaves with the next ones; time passes only through
the events that let it (`moment`, `tick`, `timeout`, `busy`, `quiet`, `idle`).  Peer replies are ordered by the
events too: a fault or a race armed for the daemon's next call of one kind decides which call
meets it, and a re-activation, restart or SIGKILL between two calls decides which reply is
still wanted.  The world is small: two interfaces, one network each, NetworkManager's bgscan;
the events act on wlan0 (wlan1 stays activated, idle, and is checked all the same).

How the count stays tractable: the situations (a sequence spends none of its K events on
reaching a call under way), re-execution from the start for every prefix (the simulation is
deterministic, so a prefix always leads to the same state), split by situation and first event
over one worker process per core.  Nothing is pruned unless `--prune` is given: then a prefix whose
fingerprint (`fingerprint()`: peers, journal, published states, Bgscan's records, the
faults, races, calls and timers pending) was seen at the same or a smaller depth is not extended.
The fingerprint leaves out the guards' sample history and the clock's phase, so pruning is
a heuristic for going deeper, not part of the bound's claim.

It prints `explored: N states, M transitions, depth K from …, T s` (N distinct fingerprints, M
events applied over all sequences, the situations' prefixes included; the bound as the depth
from each group of situations), and every failing sequence as code a regression test can call.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.model.peers import NM_BGSCAN  # noqa: E402
from tests.model.test_model import ACCESS_DENIED, Machine  # noqa: E402

CAFE = "Café ☕"


@dataclass(frozen=True)
class Event:
    name: str
    calls: tuple[str, ...]  # how a regression test replays it: `state.<call>` for each

    def apply(self, m: Machine) -> None:
        for call in self.calls:
            eval(f"m.{call}", {"m": m, "NM_BGSCAN": NM_BGSCAN})  # noqa: S307 - our own table


def _e(name: str, *calls: str) -> Event:
    return Event(name, calls)


AD = repr(ACCESS_DENIED)
# The alphabet.  Each row is one thing a machine can do at one instant; see the module
# docstring for what the bound covers.
EVENTS: tuple[Event, ...] = (
    # the link and the user
    _e("busy", "traffic(ifname='wlan0', mbit=50.0, then=5.0)"),
    _e("quiet", "traffic(ifname='wlan0', mbit=0.0, then=4.0)"),
    # quiet past release_after (15 s): a guard releases in one event, its restore under way
    _e("idle", "traffic(ifname='wlan0', mbit=0.0, then=16.0)"),
    _e("moment", "advance(t=0.0003)"),  # a call or two answered, no sample taken
    _e("tick", "advance(t=1.0)"),
    _e("timeout", "advance(t=11.0)"),
    _e("hold", f"hold(client=0, reason={CAFE!r}, interface='wlan0', then=0.0)"),
    _e("release", "release(client=0, which=0, then=0.0)"),
    _e("holder-left", "leave(client=0, then=0.0)"),
    # two Holds of one client a moment apart: the second is still being authorised when the
    # next event (a release of the first, the client leaving) comes
    _e("hold-twice", f"hold(client=0, reason={CAFE!r}, interface='', then=0.001)",
       f"hold(client=0, reason={CAFE!r}, interface='', then=0.001)"),
    _e("weak", "signal(ifname='wlan0', rssi=-90, then=0.0)"),
    # the administrator turns the guard off (a reload stops every guard)
    _e("disable", "reload(config='[scanguard]\\nenabled = no\\n', then=0.0)"),
    _e("strong", "signal(ifname='wlan0', rssi=-40, then=0.0)"),
    # the radio (targeted roaming): a second access point of wlan0's network on another
    # channel, which another program's scan of every channel (7 s) finds; wlan0's access point
    # fading below the floor while the network's others are strong, wpa_supplicant moving to
    # one by itself on a scan's results, or (stays) only when asked to (Roam)
    _e("second-ap", "second_ap(ifname='wlan0', same=True, then=0.0)",
       "scan(ifname='wlan0', then=0.0)"),
    _e("fade", "fade(ifname='wlan0', itself=True, then=0.0)"),
    _e("fade-stays", "fade(ifname='wlan0', itself=False, then=0.0)"),
    # between the floor and bgscan's threshold: the guard refreshes its candidates (one channel)
    _e("marginal", "signal(ifname='wlan0', rssi=-72, then=0.0)"),
    # a walk: past the first look before the floor, the guard scans the candidates' channels
    # and asks for a Roam to one clearly better
    _e("walk", "signal(ifname='wlan0', rssi=-74, then=0.0)"),
    # liveness, where it can be judged (World.busy_check): both links busy for a while
    _e("busy-check", "busy_for_a_while()"),
    # wpa_supplicant: faults of the daemon's next call of one kind
    _e("set-refused", f"fault(kind='error', member='Set', error={AD}, t=0.001, count=1, then=0.0)"),
    _e("set-lost", f"fault(kind='lost', member='Set', error={AD}, t=0.001, count=1, then=0.0)"),
    _e("set-late", f"fault(kind='late', member='Set', error={AD}, t=11.0, count=1, then=0.0)"),
    _e("set-hang-after", f"fault(kind='hang-after', member='Set', error={AD}, t=25.0, count=1, "
                         "then=0.0)"),
    # wpa_supplicant stalls before carrying the Set out: unanswered, and not applied until it
    # recovers (or restarts)
    _e("set-hang-before", f"fault(kind='hang-before', member='Set', error={AD}, t=25.0, "
                          "count=1, then=0.0)"),
    # the next read of a network's bgscan (Bgscan's reads) refused, or unanswered
    _e("read-refused", f"fault(kind='error', member='Get.Properties', error={AD}, t=0.001, "
                       "count=1, then=0.0)"),
    _e("read-lost", f"fault(kind='lost', member='Get.Properties', error={AD}, t=0.001, count=1, "
                    "then=0.0)"),
    _e("get-hang-before", f"fault(kind='hang-before', member='Get', error={AD}, t=25.0, "
                          "count=1, then=0.0)"),
    _e("lookup-refused", f"fault(kind='error', member='GetInterface', error={AD}, t=0.001, "
                         "count=6, then=0.0)"),
    # the next Scan refused; the next Roam refused, or carried out with its answer lost
    _e("scan-refused", f"fault(kind='error', member='Scan', error={AD}, t=0.001, count=1, "
                       "then=0.0)"),
    _e("roam-refused", f"fault(kind='error', member='Roam', error={AD}, t=0.001, count=1, "
                       "then=0.0)"),
    _e("roam-lost", f"fault(kind='lost', member='Roam', error={AD}, t=0.001, count=1, "
                    "then=0.0)"),
    _e("recover", "recover(then=0.0)"),
    # what another party does just before the daemon's next call of one kind
    _e("race-reactivate@Set", "race(what='activate', member='Set', ifname='wlan0', "
                              "bgscan=NM_BGSCAN, then=0.0)"),
    _e("race-wpa-restart@Set", "race(what='wpa-restart', member='Set', ifname='wlan0', "
                               "bgscan=NM_BGSCAN, then=0.0)"),
    _e("race-daemon-restart@Set", "race(what='daemon-restart', member='Set', ifname='wlan0', "
                                  "bgscan=NM_BGSCAN, then=0.0)"),
    _e("race-other-set@Get", "race(what='other-set', member='Get', ifname='wlan0', "
                             "bgscan=NM_BGSCAN, then=0.0)"),
    # NetworkManager and wpa_supplicant
    _e("reactivate", "activate(ifname='wlan0', bgscan=NM_BGSCAN, gap=0.001, then=0.0)"),
    _e("deactivate", "deactivate(ifname='wlan0', then=0.0)"),
    _e("wpa-restart", "restart_supplicant(gap=0.5, then=0.0)"),
    # back at once, its networks added again before the calls already on the bus reach it
    _e("wpa-restart-quick", "restart_supplicant(gap=0.0003, then=0.0)"),
    _e("recreate", "recreate_interface(ifname='wlan0', then=0.0)"),
    _e("nm-restart", "restart_nm(gap=1.0, then=0.0)"),
    # NetworkManager killed, back after 1 s: the network it selected stays in wpa_supplicant,
    # the devices disconnected (30) until a re-activation, so the daemon stops their guards
    _e("nm-crash", "crash_nm(gap=1.0, then=0.0)"),
    # scanguardd itself
    _e("sigkill", "sigkill(then=0.0)"),
    _e("journal-crash", "crash_in_journal_write(then=0.0)"),
    _e("lost-bus", "lose_bus(then=0.0)"),
    _e("restart", "systemctl_restart(then=0.0)"),
)


# Events that only situations use (below): they put a call sequence at a given point.
PREFIX_ONLY: tuple[Event, ...] = (
    _e("first-call-late", f"fault(kind='late', member=None, error={AD}, t=3.0, count=1, "
                          "then=0.0)"),
    _e("hold-1s", f"hold(client=0, reason={CAFE!r}, interface='', then=1.0)"),
    _e("recover-1ms", "recover(then=0.001)"),
    _e("wpa-restart-quick-11s", "restart_supplicant(gap=0.0003, then=11.0)"),
    _e("wpa-restart-at-once", "restart_supplicant(gap=0.0, then=0.0003)"),
    _e("race-activate", "race(what='activate', member=None, ifname='wlan0', bgscan=NM_BGSCAN, "
                        "then=0.0)"),
    _e("set-lost-twice", "fault(kind='lost', member='Set', "
                         "error='org.freedesktop.DBus.Error.Failed', t=0.001, count=2, then=0.0)"),
    _e("recreate-10ms", "recreate_interface(ifname='wlan0', then=0.01)"),
    # a hold on wlan0, then 6.2 ms: its suspend's Set was handled at 6.0 ms, its answer (and the
    # put-back a re-creation calls for) not yet (the put-back reaches wpa_supplicant at 6.4 ms)
    _e("hold-6ms", f"hold(client=0, reason={CAFE!r}, interface='wlan0', then=0.0062)"),
    # the next two reads of a network's bgscan refused (AccessDenied: a policy reload denying
    # the daemon answers every call so, for as long as it stands)
    _e("read-refused-twice", f"fault(kind='error', member='Get.Properties', error={AD}, "
                             "t=0.001, count=2, then=0.0)"),
    _e("wait-9.5s", "advance(t=9.5)"),
    _e("wait-3.1s", "advance(t=3.1)"),
    # wpa_supplicant answers the daemon's next Set, then leaves at once (a restart): the answer
    # and the NameOwnerChanged reach the daemon together, before it has handled the answer
    _e("wpa-restart-after@Set", "race(what='wpa-restart-after', member='Set', ifname='wlan0', "
                                "bgscan=NM_BGSCAN, then=0.0)"),
)
ALL = EVENTS + PREFIX_ONLY


def fingerprint(m: Machine) -> str:
    """What the world and the daemon hold after a prefix, as far as it decides what follows
    (see the module docstring for what it leaves out)."""
    w = m.world
    now = w.loop.time()
    nets = sorted((n.ifname, n.path, n.bgscan, n.expected, n.ours, n.raced, n.overridden)
                  for n in w.wpa.live_nets())
    currents = sorted((i.ifname, i.current.path if i.current else None, i.rssi, i.scanning)
                      for i in w.wpa.ifaces.values())
    daemon: Any = None
    if w.instance is not None and w.instance.alive:
        d = w.instance.daemon
        s = None if d._peers is None else d._peers.bgscan
        daemon = {
            "guards": sorted((g.ifname, g.state, bool(g.engaged), g.interface.path)
                             for g in d.guards.values()),
            "holds": sorted((h.caller, h.interface) for h in d.holds.all()),
            "bgscan": None if s is None else (
                sorted((k, repr(v)) for k, v in s.ledger._states.items()),
                sorted(s.ledger._generations.items())),
        }
    timers = sorted(round(h.when() - now, 3) for h in w.loop._scheduled  # type: ignore[attr-defined]
                    if not h.cancelled())
    state = {
        "nets": nets, "ifaces": currents, "wpa": (w.wpa.alive, bool(w.wpa.stalled)),
        "faults": [(f.kind, f.member, f.error, f.seconds, f.count) for f in w.wpa.faults],
        "races": [(r.name, r.member) for r in w.wpa.races],
        "nm": (w.nm.alive, sorted((d.ifname, d.state) for d in w.nm.devices.values())),
        "journal": w.journal_on_disk(), "daemon": daemon,
        "instance": None if w.instance is None else w.instance.alive,
        "restoring": w.restoring is not None and not w.restoring.done(),
        "clients": sorted((n, len(c.cookies), c.conn.alive) for n, c in w.clients.items()),
        "links": sorted(w.link._rate.items()),
        "armed": w._journal_os.armed, "timers": timers, "tasks": len(w.loop._ready),  # type: ignore[attr-defined]
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=repr).encode()).hexdigest()


@dataclass
class Outcome:
    nodes: int = 0  # prefixes executed (each one a sequence checked to its end)
    transitions: int = 0  # events applied over all sequences
    fingerprints: set[str] = field(default_factory=set)
    failures: list[tuple[tuple[int, ...], str]] = field(default_factory=list)


def run_sequence(seq: tuple[int, ...]) -> tuple[str | None, str]:
    """Run one sequence from the start; returns (the fingerprint after it, or None if it
    failed; the failure, or "")."""
    m = Machine()
    try:
        for i in seq:
            ALL[i].apply(m)
            m.bgscan_is_safe()
        fp = fingerprint(m)
    except AssertionError as e:
        _quiet_teardown(m)
        return None, str(e)
    try:
        m.teardown()
    except AssertionError as e:
        return None, str(e)
    return fp, ""


def _quiet_teardown(m: Machine) -> None:
    try:
        m.teardown()
    except AssertionError:
        pass


BUSY_CHECK = next(i for i, e in enumerate(EVENTS) if e.name == "busy-check")
INDEX = {e.name: i for i, e in enumerate(ALL)}


def _situation(*names: str) -> tuple[int, ...]:
    return tuple(INDEX[n] for n in names)


# Where a sequence starts.  Each situation is the world after a fixed prefix of events, and the
# bound is K events from each: so the states in which a call sequence of the suspension table
# waits (a Set or a read under way, a suspension in doubt, a restore under way) are each met by
# every K-event continuation, without spending the K events on reaching them.
SITUATIONS: dict[str, tuple[int, ...]] = {
    # the daemon just started, both links idle
    "start": (),
    # both links busy for a while: both networks SUSPENDED, the journal names them
    "guarding": _situation("busy-check"),
    # a hold asked for suspensions while wpa_supplicant answered late; it has just caught up,
    # and the suspends' reads are on the bus, not yet handled (READING)
    "suspending-late": _situation("moment", "first-call-late", "hold-1s", "recover-1ms"),
    # a suspend whose Set and read-back both went unanswered (wpa_supplicant stalled before
    # handling them): IN_DOUBT, the Set still queued
    "suspend-in-doubt": _situation("set-hang-before", "busy", "timeout", "timeout"),
    # guarding, then the link went quiet and the guard released wlan0 while wpa_supplicant
    # stalled before handling the restoring Set: RESTORING, the Set queued
    "restoring-stalled": _situation("busy-check", "set-hang-before", "idle"),
    # guarding, then SIGKILL while wpa_supplicant refused look-ups, so that the next start's
    # journal replay could not restore: both entries LEFTOVER, their "" still standing
    "left-over": _situation("busy-check", "lookup-refused", "sigkill", "tick"),
    # guarding; a restart while a suspend's Set is answered 11 s late, and a second restart
    # at once: the read-back of that Set reaches a process with no network yet (IN_DOUBT)
    "suspend-late-across-restarts": _situation("busy-check", "set-late", "wpa-restart-quick-11s",
                                               "wpa-restart-at-once"),
    # guarding; a deactivation raced by a re-activation, the next suspend's Set lost (its
    # read-back answered late), then NetworkManager re-created the interface object: the
    # suspension under the old object ended by NetworkRemoved, a suspend under way on the new
    # one (SETTING)
    "interface-recreated": _situation("busy-check", "deactivate", "race-activate",
                                      "set-lost-twice", "busy-check", "recreate-10ms"),
    # the same with one Set lost (it landed): the re-creation's NetworkRemoved leaves that
    # suspend in doubt under the object that went, and no later signal ends it, so only the
    # guard's check for a replaced interface lets it go and suspends on the new object's network
    "interface-recreated-once": _situation("busy-check", "deactivate", "race-activate",
                                           "set-lost", "busy-check", "recreate-10ms"),
    # a hold's suspend whose Set met a re-activation (our "" on the new object: PUTTING_BACK),
    # and its put-back meeting a second re-activation and refused (AccessDenied), the next two
    # reads refused too: the release that each CurrentNetwork change of the re-activations asks
    # for cannot read, so only the table's generation check keeps the guard from counting
    # itself engaged on the object that went
    "put-back-refused-recreated": _situation("race-reactivate@Set", "hold-6ms",
                                             "race-reactivate@Set", "set-refused",
                                             "read-refused-twice"),
    # guarding; the link went quiet and the guard's release sent its Set, which landed but whose
    # answer was lost; the read-back after the call timeout refused: IN_DOUBT (bgscan is
    # NetworkManager's again), the guard's retried release half a second away
    "restore-unknown": _situation("busy-check", "set-lost", "idle", "read-refused", "wait-9.5s"),
    # guarding, the next Set refused, and NetworkManager killed (World.crash_nm: back after
    # 1 s, the devices disconnected): on its return the daemon stops both guards while
    # wpa_supplicant keeps their networks, our "" on them; the first stop's restore is refused,
    # and what it could not restore is the journal's retry's (LEFTOVER), no guard's
    "nm-crashed": _situation("busy-check", "set-refused", "nm-crash"),
    # wlan0 busy; wpa_supplicant answered the suspend's Set and was restarted, back at once,
    # before the daemon handled the answer: the "" went with the old process, the new one's
    # network at the same path has NetworkManager's bgscan (IN_DOUBT, the guard still on)
    "suspend-answered-across-restart": _situation("wpa-restart-after@Set", "busy"),
    # both links busy and guarded, a second access point of wlan0's network known to the
    # daemon (learned from another program's scan before the link got busy)
    "two-aps-guarding": _situation("second-ap", "timeout", "busy-check"),
    # ...then wlan0's access point faded while the other is strong, and wpa_supplicant's own
    # selection keeps the station there: ROAMING, the targeted scan of the two channels under
    # way (it ends within 0.5 s; at the next sample the guard asks for a Roam)
    "roaming": _situation("second-ap", "timeout", "busy-check", "fade-stays", "wait-3.1s"),
    # ...and that Roam refused: ROAMING, the guard waiting for a move that will not come, its
    # fallback (release, a scan of every channel) due 6 s after the fade was seen
    "roam-refused": _situation("second-ap", "timeout", "busy-check", "roam-refused",
                               "fade-stays", "wait-3.1s", "tick"),
}

# make model-exhaustive's bound: depth 2 from the situations where a call sequence of the
# suspension table waits (and from the start), depth 1 from the rest; it ends within 600 s on
# the 2-core machine (docs/testing.md has the figures and what each part covers).
EXHAUSTIVE = ("all:1,start:2,guarding:2,suspending-late:2,suspend-in-doubt:2,restoring-stalled:2,"
              "put-back-refused-recreated:2,nm-crashed:2")


def explore_subtree(root: tuple[int, ...], first: int, depth: int, prune: bool,
                    stop_at_first: bool, close: bool = False) -> Outcome:
    """Every sequence that begins with `root` then EVENTS[first], up to `depth` events after
    `root`, depth first; with `close`, each sequence of `depth` events is also run followed by
    the liveness check (the shorter ones have it among their next events already)."""
    warnings.simplefilter("ignore")
    out = Outcome()
    seen: dict[str, int] = {}

    def visit(seq: tuple[int, ...]) -> str | None:
        """Run one sequence and record it; its fingerprint, or None if it failed."""
        out.nodes += 1
        out.transitions += len(seq)
        fp, why = run_sequence(seq)
        if fp is None:
            out.failures.append((seq, why))
        else:
            out.fingerprints.add(fp)
        return fp

    stack: list[tuple[int, ...]] = [root + (first,)]
    while stack:
        seq = stack.pop()
        fp = visit(seq)
        if fp is None:
            if stop_at_first:
                return out
            continue
        k = len(seq) - len(root)
        if prune and seen.get(fp, depth + 1) <= k:
            continue
        seen[fp] = k
        if k < depth:
            stack.extend(seq + (i,) for i in reversed(range(len(EVENTS))))
        elif close and seq[-1] != BUSY_CHECK and visit(seq + (BUSY_CHECK,)) is None \
                and stop_at_first:
            return out
    return out


def as_code(seq: tuple[int, ...]) -> str:
    return "\n".join(f"state.{call}" for i in seq for call in ALL[i].calls)


def parse_plan(spec: str, depth: int) -> dict[str, int]:
    """`--from`: comma-separated `SITUATION` or `SITUATION:K` (K events from it; bare names
    take `depth`), `all` for every situation, `exhaustive` for EXHAUSTIVE; a later item
    overrides an earlier one for the same situation.  Raises ValueError naming what is wrong."""
    plan: dict[str, int] = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        name, _, k = item.partition(":")
        if name == "exhaustive":
            if k:
                raise ValueError(f"{item!r}: exhaustive gives each situation its own depth; "
                                 "write SITUATION:K for others")
            plan.update(parse_plan(EXHAUSTIVE, depth))
            continue
        names = list(SITUATIONS) if name == "all" else [name]
        if name != "all" and name not in SITUATIONS:
            raise ValueError(f"no such situation {name!r}; choose among "
                             f"{', '.join(SITUATIONS)}, all or exhaustive")
        if k and not (k.isdigit() and int(k) >= 1):
            raise ValueError(f"{item!r}: the depth after ':' must be a whole number, at least 1")
        plan.update(dict.fromkeys(names, int(k) if k else depth))
    if not plan:
        raise ValueError("no situation given")
    return plan


def describe(plan: dict[str, int]) -> str:
    """`depth 2 from start, guarding; depth 1 from the other 14` (or `from every situation`)."""
    depths = sorted(set(plan.values()), reverse=True)
    parts = []
    for k in depths:
        names = [s for s, d in plan.items() if d == k]
        if len(names) == len(SITUATIONS):
            where = "every situation"
        elif k == depths[-1] and len(depths) > 1 and len(names) > 3:
            where = f"the other {len(names)}"
        else:
            where = ", ".join(names)
        parts.append(f"depth {k} from {where}")
    return "; ".join(parts)


def explore(plan: dict[str, int], jobs: int, prune: bool = False, stop_at_first: bool = False,
            out=sys.stdout, close: bool = False) -> Outcome:
    started = time.monotonic()
    total = Outcome()
    roots = [(SITUATIONS[s], k) for s, k in plan.items()]
    for root, _ in roots:  # each situation itself, before any event of the bound
        fp, why = run_sequence(root)
        total.nodes += 1
        total.transitions += len(root)
        if fp is None:
            total.failures.append((root, why))
        else:
            total.fingerprints.add(fp)
    if stop_at_first and total.failures:
        roots = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        # The deepest first, so that the many small jobs fill in at the end.
        futures = [pool.submit(explore_subtree, r, f, k, prune, stop_at_first, close)
                   for r, k in sorted(roots, key=lambda rk: -rk[1]) for f in range(len(EVENTS))]
        for f in futures:
            part = f.result()
            total.nodes += part.nodes
            total.transitions += part.transitions
            total.fingerprints |= part.fingerprints
            total.failures += part.failures
            if stop_at_first and total.failures:
                for rest in futures:
                    rest.cancel()
                break
    took = time.monotonic() - started
    print(f"explored: {len(total.fingerprints)} states, {total.transitions} transitions, "
          f"{describe(plan)}{' + the liveness check' if close else ''}, {took:.0f} s "
          f"({total.nodes} sequences over {len(EVENTS)} events"
          f"{', pruned by fingerprint' if prune else ', none pruned'})", file=out, flush=True)
    for seq, why in total.failures[:5]:
        names = " → ".join(ALL[i].name for i in seq) or "(no event)"
        print(f"FAILED: {names}\n  {why.splitlines()[0] if why else ''}\n  as code:\n"
              + "\n".join("    " + line for line in as_code(seq).splitlines()), file=out)
    if len(total.failures) > 5:
        print(f"... and {len(total.failures) - 5} more failing sequences", file=out)
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python3 -m {__spec__.name}" if __spec__ else None,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=2,
                   help="events per sequence at most, from the situations named without :K "
                        "(default 2)")
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4),
                   help="worker processes (default: the cores, at most 4)")
    p.add_argument("--prune", action="store_true",
                   help="do not extend a prefix whose fingerprint was seen (a heuristic)")
    p.add_argument("--stop-at-first", action="store_true", help="stop at the first failure")
    p.add_argument("--from", dest="situations", default="start", metavar="SITUATIONS",
                   help="comma-separated situations the sequences start from, each as NAME "
                        "(--depth events) or NAME:K (K events): "
                        f"{', '.join(SITUATIONS)}; all for every one; exhaustive for make "
                        f"model-exhaustive's bound ({EXHAUSTIVE}) (default: start)")
    p.add_argument("--close", action="store_true",
                   help="also run every sequence of DEPTH events followed by the liveness check "
                        "(busy-check)")
    args = p.parse_args(argv)
    if args.depth < 1:
        p.error("--depth must be at least 1")
    try:
        plan = parse_plan(args.situations, args.depth)
    except ValueError as e:
        p.error(f"--from: {e}")
    print(f"systematic model rung: every sequence over its {len(EVENTS)} events, {describe(plan)}"
          f"{', each of the longest also closed by the liveness check' if args.close else ''}"
          f", {args.jobs} worker(s)", flush=True)
    total = explore(plan, args.jobs, args.prune, args.stop_at_first, close=args.close)
    return 1 if total.failures else 0


if __name__ == "__main__":
    sys.exit(main())

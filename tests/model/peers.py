"""Simulated peers for the model rung: wpa_supplicant, NetworkManager and polkitd as Python
objects on the in-process bus (tests/model/bus.py), and the interface counters.

They answer what scanguardd asks the way the real programs do (the D-Bus mock in
tests/mocks/wpa_supplicant.py and this wpa_supplicant run the scenarios the real one passes,
tests/contract/wpa_scenarios.py, which marks what this one leaves out on purpose; see also
../shared/FACTS.md), and take the rules they share (error texts, read-back, Scan's and Roam's
checks) from tests/wpa_supplicant_rules.py:
- wpa_supplicant numbers a new network "highest id + 1", so NetworkManager's remove-then-add on
  every activation brings back the *same* path with a fresh object; a restart numbers its
  interfaces from 0 again; calls on a removed object fail with UnknownMethod; `bgscan` reads
  back quoted; Set merges only the keys given.
- wpa_supplicant is single-threaded: a stall holds back everything it would process or send,
  in order.  Faults are drawn per call: refuse, lose the reply, answer late after applying,
  start late, hang (before or after applying) until it recovers or restarts.

The wpa_supplicant model also *watches* every bgscan write, and keeps what the invariant needs:
which objects carry a "" of ours, what NetworkManager (or another program) set on each object,
and every write that broke a rule (`violations`).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from nm_scanguard.dbuslib import Message, MessageType, Variant
from nm_scanguard.peers.netlink import Counters
from tests.model.bus import UNKNOWN_METHOD, Service, SimBus
from tests.model.radio import (ALL_CHANNELS, NETWORK_SECURITY, NETWORK_SSID, ROAM_SECONDS, Ap,
                               Bss, BssList, bss_properties, roam_margin, scan_request)
from tests.wpa_supplicant_rules import (INTERFACE_PROPERTIES, INTERFACE_UNKNOWN,
                                        INVALID_NETWORK_FORMAT, NO_SUCH_PROPERTY,
                                        NOTHING_TO_ABORT, SCAN_REJECTED, SIGNAL_UNREADABLE,
                                        WpaError, check_expire_age, network_value, roam_target)

WPAS = "fi.w1.wpa_supplicant1"
WPAS_PATH = "/fi/w1/wpa_supplicant1"
WPAS_IFACE = WPAS + ".Interface"
WPAS_NETWORK = WPAS + ".Network"
WPAS_BSS = WPAS + ".BSS"
UNKNOWN_OBJECT = "org.freedesktop.DBus.Error.UnknownObject"
PROPS = "org.freedesktop.DBus.Properties"
NM = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
POLKIT = "org.freedesktop.PolicyKit1"

NM_BGSCAN = "simple:30:-70:86400"
NM_BGSCANS = (NM_BGSCAN, "simple:30:-65:300", None)  # None: no bgscan key (BSSID-locked, AP)
# A scan of all 26 channels under load, as the lab measures it (~7 s).  With 3 s, a guard that
# re-engages while its own roaming scan still runs was too rare to sample (a mutant that aborts
# that scan went uncaught in 2000 sequences; with 7 s, caught after 843).
SCAN_SECONDS = 7.0
FLUSH = 0.005  # wpa_supplicant announces property changes from a 5 ms timer


def _error(msg: Message, name: str, text: str) -> Message:
    return Message.new_error(msg, name, text)


def _answer(msg: Message, e: WpaError) -> Message:
    """wpa_supplicant's error: its text and, for its own InvalidArgs, a second string naming
    the fault."""
    return Message(message_type=MessageType.ERROR, reply_serial=msg.serial,
                   destination=msg.sender, error_name=e.name,
                   signature="s" if e.detail is None else "ss",
                   body=[e.text] + ([] if e.detail is None else [e.detail]))


# ---- wpa_supplicant ---------------------------------------------------------------------------

_object_ids = itertools.count(1)


@dataclass(eq=False)
class Net:
    path: str
    ifname: str
    bgscan: str | None  # as set, without wpa_supplicant's quotes; None: no key at all
    expected: str | None  # what NetworkManager (or another program) last set: the promise
    # When NetworkManager created it or another program last wrote its bgscan, in wpa_supplicant's
    # own order of events (not time: many share an instant).
    changed: int
    oid: int = field(default_factory=lambda: next(_object_ids))
    alive: bool = True
    ours: bool = False  # bgscan is "" because scanguardd set it
    ours_by: str = ""  # the bus name of the scanguardd connection that set it
    # A write of ours landed after someone else changed it since our last read (the object was
    # re-created at that path, or another program wrote bgscan): wpa_supplicant's API has no
    # compare-and-set, so nothing can prevent that; the daemon logs the re-creation case.
    raced: bool = False
    # Another program wrote bgscan after the daemon's last write: the daemon leaves that value
    # alone (it restores only its own "") until it suspends this object anew.
    overridden: bool = False
    born: float = 0.0  # when wpa_supplicant created it (virtual time)


@dataclass(eq=False)
class WpaIface:
    ifname: str
    path: str
    nets: dict[int, Net] = field(default_factory=dict)
    current: Net | None = None
    # The access points in range (Supplicant.radio: they outlive the interface object), the one
    # the station is with (None: not associated, or no AP of the network in range), and the BSS
    # objects wpa_supplicant keeps (radio.py).
    aps: list[Ap] = field(default_factory=list)
    bss: Ap | None = None
    bsses: BssList = field(default_factory=lambda: BssList(""))
    roam_time: int = 0  # ms, RoamTime; RoamComplete once a roam has ended
    roam_complete: bool = False
    alone_rssi: int = -50  # the signal when no AP of the radio is the current one
    scanning: bool = False
    scan_id: int = 0  # the running scan's number (an aborted scan's end timer is stale)
    scan_began: float = 0.0
    scan_plan: tuple[int, ...] = ()  # the channels the running scan visits, in order
    scan_roams: bool = True  # the running scan's results may make wpa_supplicant move
    # The bus name of the daemon whose Scan started the running scan, answered without a fault:
    # that daemon knows it for its own roaming scan, which it must never abort.  ("": someone
    # else's.  A daemon started after a crash cannot know its predecessor's scan, so a restart
    # that guards before it has read the signal aborts that one, as it should.)
    scan_own: str = ""

    @property
    def rssi(self) -> int:
        """The signal SignalPoll reads: the current AP's, as the station hears it."""
        return self.bss.signal if self.bss is not None else self.alone_rssi

    @rssi.setter
    def rssi(self, value: int) -> None:
        if self.bss is not None:
            self.bss.signal = value
        else:
            self.alone_rssi = value


@dataclass
class Fault:
    kind: str  # error, lost, late, slow, hang-before, hang-after
    # Get, Set, GetAll, GetInterface, Scan, AbortScan, SignalPoll, Roam; None: any call;
    # "Get.<property>": only reads of that property (Get.Properties: a network's bgscan, read
    # by Bgscan; Get.BSSs, Get.CurrentBSS)
    member: str | None
    error: str = "org.freedesktop.DBus.Error.AccessDenied"  # test_model.POSSIBLE_ERRORS
    seconds: float = 0.0
    count: int = 1  # for this many calls in a row (a failing streak)


@dataclass
class Race:
    """Something another client of wpa_supplicant does (`work`), processed just before the
    daemon's next call of kind `member`: the bus may deliver two senders' messages in either
    order, and the ones that matter are the ones between the daemon's read and its write.
    `after`: just after that call is answered (a restart then: the answer and wpa_supplicant's
    leaving reach the daemon together, before it has handled the answer)."""

    member: str | None
    work: Callable[[], None]
    name: str
    after: bool = False


class Supplicant(Service):
    def __init__(self, bus: SimBus, record: Callable[[str], None]) -> None:
        super().__init__(bus, WPAS)
        self.loop = bus.loop
        self.ifaces: dict[str, WpaIface] = {}
        self.faults: deque[Fault] = deque()
        self.races: list[Race] = []
        self.violations: list[str] = []
        self.every_net: list[Net] = []  # every object ever created, for the checks
        self.last_fault_at = -math.inf  # when a drawn fault last hit a call (virtual time)
        # Called after each call is handled: the world checks the journal at every change of
        # wpa_supplicant's state, not only between steps (a "" can be unjournaled for a moment).
        self.after_call: Callable[[], None] | None = None
        self.last_read: dict[tuple[str, str], float] = {}  # (caller, path) -> order of a Get
        self._order = itertools.count()
        self.counts: dict[str, int] = {}
        self.aborted = 0  # scans AbortScan ended
        # The access points in range of each interface name: the world's radio, which outlives
        # wpa_supplicant's interface objects and the process itself.
        self.radio: dict[str, list[Ap]] = {}
        # Every scan started: (virtual time, interface name, who asked for it over the bus ("":
        # another program), the channels it visits, () for every one).
        self.scans: list[tuple[float, str, str, tuple[int, ...]]] = []
        # Called with each Scan call as wpa_supplicant takes it in (World checks whose it is).
        self.on_scan: Callable[[Message], None] | None = None
        self._record = record  # the interleaving: one word per event
        self._busy = False
        self._backlog: deque[Callable[[], None]] = deque()
        self._resume: asyncio.TimerHandle | None = None
        self._iface_numbers = itertools.count()

    # ---- life -------------------------------------------------------------------------

    def start(self) -> None:
        self._iface_numbers = itertools.count()  # a new process numbers its objects from 0
        super().start()

    def stop(self) -> None:
        for iface in self.ifaces.values():
            for net in iface.nets.values():
                net.alive = False
        self.ifaces.clear()
        self._backlog.clear()
        self._held = None
        self._busy = False
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        super().stop()

    @property
    def stalled(self) -> bool:
        return self._busy

    def stall(self, seconds: float) -> None:
        """Busy: nothing is processed or sent for `seconds` (math.inf: until recover())."""
        self._busy = True
        self.hold_output()
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if seconds != math.inf:
            self._resume = self.loop.call_later(seconds, self.recover)

    def recover(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if not self._busy:
            return
        self._busy = False
        self.release_output()
        while self._backlog and not self._busy:
            self._backlog.popleft()()

    def submit(self, work: Callable[[], None]) -> None:
        """Work from NetworkManager or the radio: done now, or in turn after a stall."""
        if not self.alive:
            return
        if self._busy:
            self._backlog.append(work)
        else:
            work()

    # ---- what NetworkManager does to it -----------------------------------------------

    def add_interface(self, ifname: str) -> WpaIface:
        path = f"{WPAS_PATH}/Interfaces/{next(self._iface_numbers)}"
        iface = WpaIface(ifname, path, aps=self.radio.setdefault(ifname, []),
                         bsses=BssList(path))
        self.ifaces[ifname] = iface
        return iface

    def add_network(self, ifname: str, bgscan: str | None) -> None:
        """NetworkManager's AddNetwork and SelectNetwork, and the association that follows."""
        iface = self.ifaces.get(ifname)
        if iface is None:
            return
        self.select(iface, self.new_network(iface, bgscan))

    def new_network(self, iface: WpaIface, bgscan: str | None) -> Net:
        """AddNetwork: the next number is the highest in use + 1."""
        number = max(iface.nets, default=-1) + 1
        net = Net(f"{iface.path}/Networks/{number}", iface.ifname, bgscan, bgscan,
                  next(self._order), born=self.loop.time())
        iface.nets[number] = net
        self.every_net.append(net)
        self._record("add")
        self.signal(iface.path, WPAS_IFACE, "NetworkAdded", "oa{sv}", [net.path, {}])
        return net

    def select(self, iface: WpaIface, net: Net) -> None:
        """SelectNetwork, taken as associated at once: CurrentNetwork is announced by the flush
        timer (the real one announces it on association).  The scan before the association
        sees every AP in range, and the station joins the network's strongest."""
        iface.current = net
        self._results(iface, ALL_CHANNELS)
        ours = [ap for ap in iface.aps if ap.network() == (NETWORK_SSID, NETWORK_SECURITY)]
        iface.bss = max(ours, key=lambda ap: ap.signal, default=None)
        self._announce(iface, {"CurrentNetwork": Variant("o", net.path),
                               "CurrentBSS": Variant("o", self._bss_path(iface))})

    def _bss_path(self, iface: WpaIface) -> str:
        bss = iface.bsses.by_bssid.get(iface.bss.bssid) if iface.bss is not None else None
        return bss.path if bss is not None else "/"

    def add_ap(self, ifname: str, ap: Ap) -> None:
        """An access point comes into range of `ifname` (wpa_supplicant sees it at its next
        scan of that channel)."""
        self.radio.setdefault(ifname, []).append(ap)
        self._record("ap")

    def remove_current(self, ifname: str) -> None:
        iface = self.ifaces.get(ifname)
        if iface is None or iface.current is None:
            return
        self.remove_network(iface, iface.current)

    def remove_network(self, iface: WpaIface, net: Net) -> None:
        """RemoveNetwork; the current one's removal announces CurrentNetwork "/"."""
        net.alive = False
        del iface.nets[int(net.path.rsplit("/", 1)[1])]
        current = iface.current is net
        if current:
            iface.current = iface.bss = None
            # A roaming scan serves the association it was asked for: once NetworkManager
            # re-activates, the daemon guards the new one afresh and the scan is nobody's own
            # (the new activation's guard, held before its first signal reading, aborts the
            # scan the old one asked for, and asks for its own once it reads the weak signal).
            iface.scan_own = ""
        self._record("remove")
        self.signal(iface.path, WPAS_IFACE, "NetworkRemoved", "o", [net.path])
        if current:
            self._announce(iface, {"CurrentNetwork": Variant("o", "/"),
                                   "CurrentBSS": Variant("o", "/")})

    def remove_interface(self, ifname: str) -> None:
        """RemoveInterface: its networks go first (NetworkRemoved each), then the interface; a
        new one gets the next number (a running wpa_supplicant never reuses one)."""
        iface = self.ifaces.pop(ifname, None)
        if iface is None:
            return
        for net in iface.nets.values():
            net.alive = False
            self.signal(iface.path, WPAS_IFACE, "NetworkRemoved", "o", [net.path])
        iface.nets.clear()
        self._record("remove-interface")
        self.signal(WPAS_PATH, WPAS, "InterfaceRemoved", "o", [iface.path])

    def other_program_sets(self, ifname: str, value: str) -> None:
        """Someone else (wpa_cli, a user) writes bgscan: from then on that is what must stay."""
        iface = self.ifaces.get(ifname)
        if iface is None or iface.current is None:
            return
        net = iface.current
        net.bgscan = net.expected = value
        net.ours = False
        net.overridden = True
        net.changed = next(self._order)
        self._record("other-set")

    def scan(self, ifname: str, own: str = "", channels: tuple[int, ...] = (),
             roam: bool = True, by: str = "") -> bool:
        """A scan of `channels` (MHz; () every channel), asked by `by` (a bus name, "" another
        program), and `own`: by a daemon that will know it for its own (answered without a
        fault).  A few channels take that share of a full scan's time."""
        iface = self.ifaces.get(ifname)
        if iface is None or iface.scanning:
            return False
        iface.scanning, iface.scan_own, iface.scan_roams = True, own, roam
        iface.scan_plan = tuple(sorted(set(channels))) or ALL_CHANNELS
        iface.scan_began = self.loop.time()
        iface.scan_id = scan_id = next(self._order)
        self.scans.append((iface.scan_began, ifname, by or own, tuple(channels)))
        self._record("scan" if not channels else f"scan:{len(channels)}")
        self._announce(iface, {"Scanning": Variant("b", True)})
        seconds = SCAN_SECONDS * len(iface.scan_plan) / len(ALL_CHANNELS)
        self.loop.call_later(seconds,
                             lambda: self.submit(lambda: self._scan_done(iface, scan_id)))
        return True

    def _abort(self, msg: Message, iface: WpaIface) -> Message:
        if not iface.scanning:
            return _error(msg, *NOTHING_TO_ABORT)
        if iface.scan_own and iface.scan_own == msg.sender:
            self.violations.append(f"AbortScan by {msg.sender} ended the daemon's own roaming "
                                   f"scan on {iface.path}")
        self._record("aborted")
        self.aborted += 1
        self.counts["scan aborted"] = self.counts.get("scan aborted", 0) + 1
        self._scan_done(iface, iface.scan_id, aborted=True)
        return Message.new_method_return(msg)

    def _scan_done(self, iface: WpaIface, scan_id: int, aborted: bool = False) -> None:
        if self.ifaces.get(iface.ifname) is not iface or not iface.scanning \
                or iface.scan_id != scan_id:
            return
        iface.scanning, iface.scan_own = False, ""
        visited = iface.scan_plan
        if aborted:  # the channels visited so far
            share = (self.loop.time() - iface.scan_began) / (
                SCAN_SECONDS * len(visited) / len(ALL_CHANNELS))
            visited = visited[:int(len(visited) * min(1.0, share))]
        self._results(iface, visited)
        self.signal(iface.path, WPAS_IFACE, "ScanDone", "b", [True])
        self._announce(iface, {"Scanning": Variant("b", False)})
        if iface.scan_roams:
            self._roam_by_itself(iface, visited)

    # ---- the BSS list and roaming (radio.py) ------------------------------------------

    def _results(self, iface: WpaIface, visited: tuple[int, ...]) -> None:
        """What a scan of `visited` found goes into the BSS list, announced."""
        added, removed = iface.bsses.results(iface.aps, visited, iface.bss, self.loop.time())
        self._bss_changes(iface, added, removed)

    def _expire(self, iface: WpaIface) -> None:
        """BSSes unseen for BSSExpireAge go (the real one checks every 10 s; read when asked
        is the same to a client)."""
        self._bss_changes(iface, [], iface.bsses.expire(self.loop.time(), iface.bss))

    def _bss_changes(self, iface: WpaIface, added: list, removed: list) -> None:
        now = self.loop.time()
        for bss in added:
            self.signal(iface.path, WPAS_IFACE, "BSSAdded", "oa{sv}",
                        [bss.path, bss_properties(bss, now)])
        for bss in removed:
            self.signal(iface.path, WPAS_IFACE, "BSSRemoved", "o", [bss.path])
        if added or removed:
            self._announce(iface, {"BSSs": Variant("ao", iface.bsses.paths())})

    def _roam_by_itself(self, iface: WpaIface, visited: tuple[int, ...]) -> None:
        """wpa_supplicant's own selection on a scan's results (AllowRoam): the strongest AP of
        the current network this scan saw, if stronger by its margin and not kept off by its
        throughput estimate (Ap.chosen)."""
        current = iface.bss
        if current is None or iface.current is None:
            return
        seen = [ap for ap in iface.aps if ap.frequency in visited and ap is not current
                and ap.network() == current.network() and ap.chosen]
        best = max(seen, key=lambda ap: ap.signal, default=None)
        if best is not None and best.signal >= current.signal + roam_margin(current.signal):
            self._record("roam:itself")
            self.counts["roamed by itself"] = self.counts.get("roamed by itself", 0) + 1
            self._move_later(iface, best)

    def _move_later(self, iface: WpaIface, ap: Ap) -> None:
        """Associate with `ap` after ROAM_SECONDS, if the station is still on that network."""
        net, began = iface.current, self.loop.time()

        def move() -> None:
            if self.ifaces.get(iface.ifname) is not iface or iface.current is not net \
                    or ap not in iface.aps:
                return
            iface.bss = ap
            iface.roam_time, iface.roam_complete = int((self.loop.time() - began) * 1000), True
            self._record("moved")
            self._announce(iface, {"CurrentBSS": Variant("o", self._bss_path(iface)),
                                   "RoamComplete": Variant("b", True)})
        self.loop.call_later(ROAM_SECONDS, lambda: self.submit(move))

    def _roam(self, msg: Message, iface: WpaIface) -> Message:
        """Roam(s), checked as wpas_dbus_handler_roam does: the address, a selected network,
        a known BSS of that address with the network's SSID; the reply comes at once, the
        move after ROAM_SECONDS."""
        if msg.signature != "s":  # the object layer's signature check: no text, no body
            return Message(message_type=MessageType.ERROR, reply_serial=msg.serial,
                           destination=msg.sender,
                           error_name="org.freedesktop.DBus.Error.InvalidArgs")

        def find(bssid: str) -> Bss | None:
            self._expire(iface)
            return iface.bsses.find(bssid, NETWORK_SSID)
        try:
            bss = roam_target(str(msg.body[0]), iface.current is not None, find)
        except WpaError as e:
            return _answer(msg, e)
        if iface.bss is not None and bss.ap.network() != iface.bss.network():
            self.violations.append(f"Roam to {bss.ap.bssid} on {iface.path}: an AP of another "
                                   f"network ({bss.ap.security}, the station's is "
                                   f"{iface.bss.security})")
        self._record("roam:asked")
        self.counts["roamed on request"] = self.counts.get("roamed on request", 0) + 1
        self._move_later(iface, bss.ap)
        return Message.new_method_return(msg)

    def _announce(self, iface: WpaIface, changes: dict[str, Variant]) -> None:
        def flush() -> None:
            if self.ifaces.get(iface.ifname) is iface:
                self.signal(iface.path, PROPS, "PropertiesChanged", "sa{sv}as",
                            [WPAS_IFACE, changes, []])
        self.loop.call_later(FLUSH, lambda: self.submit(flush))

    # ---- calls over the bus -----------------------------------------------------------

    def handle(self, msg: Message) -> Message | None:
        self.submit(lambda: self._process(msg))
        return None

    def _member(self, msg: Message) -> str:
        if msg.interface == PROPS:
            return str(msg.member)  # Get, Set, GetAll
        return str(msg.member)

    def _take_fault(self, member: str, msg: Message) -> Fault | None:
        read = f"Get.{msg.body[1]}" if member == "Get" and len(msg.body) > 1 else None
        for fault in self.faults:
            if fault.member is None or fault.member in (member, read):
                fault.count -= 1
                if fault.count <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    def _process(self, msg: Message) -> None:
        try:
            self._process_one(msg)
        finally:
            if self.after_call is not None:
                self.after_call()

    def _process_one(self, msg: Message) -> None:
        member = self._member(msg)
        for race in list(self.races):
            if not race.after and (race.member is None or race.member == member):
                self.races.remove(race)
                self._record(f"race:{race.name}:{member}")
                race.work()
                if not self.alive:
                    return  # it restarted: the call dies with it (callers get NoReply)
        if member == "Scan" and self.on_scan is not None:
            self.on_scan(msg)
        fault = self._take_fault(member, msg)
        kind = fault.kind if fault else "ok"
        if fault is not None:
            self.last_fault_at = self.loop.time()
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._record(f"{member}:{kind}")
        if fault is None:
            self.emit(self._apply(msg))
            for race in [r for r in self.races if r.after and r.member in (None, member)][:1]:
                self.races.remove(race)
                self._record(f"race:{race.name}:{member}")
                race.work()
        elif fault.kind == "error":
            self.emit(_error(msg, fault.error, "simulated failure"))
        elif fault.kind == "lost":
            self._apply(msg, clean=False)  # carried out; the reply never comes
        elif fault.kind in ("late", "hang-after"):
            reply = self._apply(msg, clean=False)
            self.stall(fault.seconds if fault.kind == "late" else math.inf)
            self.emit(reply)
        elif fault.kind in ("slow", "hang-before"):
            self.stall(fault.seconds if fault.kind == "slow" else math.inf)
            self._backlog.appendleft(lambda: self.emit(self._apply(msg, clean=False)))

    def _apply(self, msg: Message, clean: bool = True) -> Message:
        """Carry out a call; `clean`: it met no fault, so the caller learns the outcome."""
        if msg.path == WPAS_PATH and msg.member == "GetInterface":
            iface = self.ifaces.get(msg.body[0])
            if iface is None:
                return _error(msg, *INTERFACE_UNKNOWN)
            return Message.new_method_return(msg, "o", [iface.path])
        iface = next((i for i in self.ifaces.values() if i.path == msg.path), None)
        net = self._net(msg.path)
        if iface is None and net is None:
            return self._bss_call(msg)
        if msg.interface == PROPS and msg.member == "Get":
            name = msg.body[1]
            if iface is not None and name in _IFACE_PROPERTIES:
                return Message.new_method_return(msg, "v", [self._iface_property(iface, name)])
            if net is not None and name == "Properties":
                self.last_read[(msg.sender, net.path)] = next(self._order)
                props = {"ssid": Variant("s", network_value("ssid", "ay", NETWORK_SSID))}
                if net.bgscan is not None:
                    props["bgscan"] = Variant("s", network_value("bgscan", "s", net.bgscan))
                return Message.new_method_return(msg, "v", [Variant("a{sv}", props)])
        if msg.interface == PROPS and msg.member == "Set" and net is not None:
            return self._set(msg, net)
        if msg.interface == PROPS and msg.member == "Set" and iface is not None \
                and msg.body[1] in ("BSSExpireAge", "BSSExpireCount"):
            return self._set_expiry(msg, iface)
        if iface is not None and msg.member == "AbortScan":
            return self._abort(msg, iface)
        if iface is not None and msg.member == "Scan":
            try:
                request = scan_request(msg.body[0] if msg.body else None)
            except WpaError as e:
                return _answer(msg, e)
            if not self.scan(iface.ifname, own=(msg.sender or "") if clean else "",
                             channels=request.channels, roam=request.allow_roam,
                             by=msg.sender or ""):
                return _error(msg, *SCAN_REJECTED)
            return Message.new_method_return(msg)
        if iface is not None and msg.member == "Roam":
            return self._roam(msg, iface)
        if iface is not None and msg.member == "SignalPoll":
            if iface.current is None:
                return _error(msg, *SIGNAL_UNREADABLE)
            return Message.new_method_return(msg, "a{sv}", [{"rssi": Variant("i", iface.rssi)}])
        return _error(msg, *NO_SUCH_PROPERTY)

    def _iface_property(self, iface: WpaIface, name: str) -> Variant:
        if name in ("BSSs", "CurrentBSS"):
            self._expire(iface)
        value = {"Scanning": iface.scanning,
                 "CurrentNetwork": iface.current.path if iface.current else "/",
                 "BSSs": iface.bsses.paths(), "CurrentBSS": self._bss_path(iface),
                 "BSSExpireAge": int(iface.bsses.expire_age),
                 "BSSExpireCount": iface.bsses.expire_count,
                 "RoamTime": iface.roam_time, "RoamComplete": iface.roam_complete}[name]
        return Variant(_IFACE_PROPERTIES[name], value)

    def _set_expiry(self, msg: Message, iface: WpaIface) -> Message:
        name, value = msg.body[1], msg.body[2]
        number = int(value.value if isinstance(value, Variant) else value)
        if name == "BSSExpireAge":
            try:
                check_expire_age(number)
            except WpaError as e:
                return _answer(msg, e)
            iface.bsses.expire_age = float(number)
        else:
            iface.bsses.expire_count = number
        return Message.new_method_return(msg)

    def _bss_call(self, msg: Message) -> Message:
        """A call on a BSS object: GetAll (what the daemon reads) and Get; once the BSS is
        gone, the object is unknown."""
        iface = next((i for i in self.ifaces.values()
                      if msg.path.startswith(i.path + "/BSSs/")), None)
        if iface is not None:
            self._expire(iface)
        bss = iface.bsses.at(msg.path) if iface is not None else None
        if bss is None:
            name = UNKNOWN_OBJECT if "/BSSs/" in msg.path else UNKNOWN_METHOD
            return _error(msg, name, f"No such interface or object: {msg.path}")
        props = bss_properties(bss, self.loop.time())
        if msg.interface == PROPS and msg.member == "GetAll" and msg.body[0] == WPAS_BSS:
            return Message.new_method_return(msg, "a{sv}", [props])
        if msg.interface == PROPS and msg.member == "Get" and msg.body[1] in props:
            return Message.new_method_return(msg, "v", [props[msg.body[1]]])
        return _error(msg, *NO_SUCH_PROPERTY)

    def _net(self, path: str) -> Net | None:
        for iface in self.ifaces.values():
            for net in iface.nets.values():
                if net.path == path:
                    return net
        return None

    def _set(self, msg: Message, net: Net) -> Message:
        interface, name, value = msg.body
        props = value.value if isinstance(value, Variant) else value
        if interface != WPAS_NETWORK or name != "Properties" or not isinstance(props, dict):
            return _error(msg, *INVALID_NETWORK_FORMAT)
        others = sorted(set(props) - {"bgscan"})
        if others:
            self.violations.append(f"Set sent {others} besides bgscan on {net.path}: "
                                   "wpa_supplicant flushes the PMKSA cache for those")
        if "bgscan" not in props:
            return Message.new_method_return(msg)
        text = props["bgscan"].value
        younger = net.changed > self.last_read.get((msg.sender, net.path), -math.inf)
        if younger:
            net.raced = True
        if text == "":
            if net.bgscan == "" and net.ours:
                self.violations.append(f"bgscan set to \"\" twice on {net.path} (object "
                                       f"{net.oid}): two suspensions of one network")
            net.ours = True
            net.ours_by = msg.sender or ""
        elif not (net.bgscan == "" and net.ours) and not younger and net.bgscan != text:
            self.violations.append(
                f"restore wrote \"{text}\" on {net.path} (object {net.oid}) over "
                f"{net.bgscan!r}, which was not our \"\"")
            net.ours = False
        else:
            net.ours = False
        net.overridden = False
        net.bgscan = text
        return Message.new_method_return(msg)

    # ---- what the checks read ---------------------------------------------------------

    def live_nets(self) -> list[Net]:
        return [n for i in self.ifaces.values() for n in i.nets.values()]


# The interface's properties the model has, with their signatures.
_IFACE_PROPERTIES = {name: INTERFACE_PROPERTIES[name][0] for name in (
    "Scanning", "CurrentNetwork", "BSSs", "CurrentBSS", "BSSExpireAge", "BSSExpireCount",
    "RoamTime", "RoamComplete")}


# ---- NetworkManager ---------------------------------------------------------------------------

@dataclass(eq=False)
class Profile:
    path: str
    id: str
    uuid: str
    user_data: dict[str, str] = field(default_factory=dict)
    readable: bool = True


@dataclass(eq=False)
class Device:
    path: str
    ifname: str
    profile: Profile
    state: int = 30  # disconnected
    active: str = "/"


class NetworkManager(Service):
    def __init__(self, bus: SimBus, supplicant: Supplicant, record: Callable[[str], None]) -> None:
        super().__init__(bus, NM)
        self.loop = bus.loop
        self.wpa = supplicant
        self.devices: dict[str, Device] = {}
        self._record = record
        self._actives = itertools.count(1)

    def add_device(self, ifname: str, profile_id: str) -> Device:
        n = len(self.devices) + 1
        profile = Profile(f"{NM_PATH}/Settings/{n}", profile_id, f"0000000{n}-cafe-4a00-8000-00000000000{n}")
        dev = self.devices[ifname] = Device(f"{NM_PATH}/Devices/{n}", ifname, profile)
        return dev

    def _state(self, dev: Device, state: int) -> None:
        old, dev.state = dev.state, state
        self.signal(dev.path, NM + ".Device", "StateChanged", "uuu", [state, old, 0])

    def activate(self, ifname: str, bgscan: str | None, gap: float = 0.0) -> None:
        """NetworkManager's activation: remove the old network, after `gap` add a new one with
        NetworkManager's bgscan and select it (wpa_supplicant does both in turn)."""
        if not self.alive:
            return  # NetworkManager is down (restarting): it does nothing
        dev = self.devices[ifname]
        self.deactivate(ifname)

        def second_half() -> None:
            def in_wpa() -> None:
                if ifname not in self.wpa.ifaces:
                    self.wpa.add_interface(ifname)
                self.wpa.add_network(ifname, bgscan)
                if self.alive:
                    dev.active = f"{NM_PATH}/ActiveConnection/{next(self._actives)}"
                    self._state(dev, 100)
            self.wpa.submit(in_wpa)
        if gap > 0:
            self.loop.call_later(gap, second_half)
        else:
            second_half()

    def deactivate(self, ifname: str) -> None:
        if not self.alive:
            return  # NetworkManager is down (restarting): it does nothing
        if self._down(self.devices[ifname], 30):
            self.wpa.submit(lambda: self.wpa.remove_current(ifname))

    def _down(self, dev: Device, state: int) -> bool:
        """An activated device goes to `state` (30 disconnected, 20 unavailable); False if it
        was not activated."""
        if dev.state != 100:
            return False
        self._state(dev, state)
        dev.active = "/"
        return True

    def recreate_interface(self, ifname: str) -> None:
        """The device leaves and comes back (rfkill, unmanaged and managed again): NetworkManager
        deactivates it, removes its wpa_supplicant interface, adds it anew and activates."""
        if not self.alive:
            return  # NetworkManager is down (restarting): it does nothing
        self._down(self.devices[ifname], 20)

        def in_wpa() -> None:
            self.wpa.remove_interface(ifname)
            self.wpa.add_interface(ifname)
        self.wpa.submit(in_wpa)
        self.activate(ifname, NM_BGSCAN)

    def supplicant_back(self) -> None:
        """A new wpa_supplicant: NetworkManager adds the interfaces and activates again."""
        for dev in self.devices.values():
            if dev.ifname not in self.wpa.ifaces:
                self.wpa.add_interface(dev.ifname)
            self.activate(dev.ifname, NM_BGSCAN)

    def supplicant_gone(self) -> None:
        for dev in self.devices.values():
            self._down(dev, 20)  # unavailable

    def update_profile(self, ifname: str, user_data: dict[str, str], readable: bool = True) -> None:
        if not self.alive:
            return  # NetworkManager is down (restarting): it does nothing
        profile = self.devices[ifname].profile
        profile.user_data = dict(user_data)
        profile.readable = readable
        self._record("profile")
        self.signal(profile.path, NM + ".Settings.Connection", "Updated", "", [])

    # ---- calls ----------------------------------------------------------------------------

    def handle(self, msg: Message) -> Message | None:
        if msg.path == NM_PATH and msg.member == "GetDevices":
            return Message.new_method_return(msg, "ao", [[d.path for d in self.devices.values()]])
        dev = next((d for d in self.devices.values() if d.path == msg.path), None)
        if dev is not None and msg.interface == PROPS and msg.member == "GetAll":
            return Message.new_method_return(msg, "a{sv}", [{
                "DeviceType": Variant("u", 2), "Interface": Variant("s", dev.ifname),
                "State": Variant("u", dev.state), "ActiveConnection": Variant("o", dev.active)}])
        active = next((d for d in self.devices.values() if d.active == msg.path != "/"), None)
        if active is not None and msg.interface == PROPS:
            values = {"Connection": Variant("o", active.profile.path),
                      "Id": Variant("s", active.profile.id), "Uuid": Variant("s", active.profile.uuid)}
            if msg.member == "Get" and msg.body[1] in values:
                return Message.new_method_return(msg, "v", [values[msg.body[1]]])
            if msg.member == "GetAll":
                return Message.new_method_return(msg, "a{sv}", [values])
        profile = next((d.profile for d in self.devices.values() if d.profile.path == msg.path),
                       None)
        if profile is not None and msg.member == "GetSettings":
            if not profile.readable:
                return _error(msg, NM + ".Settings.PermissionDenied",
                              "Insufficient privileges")
            return Message.new_method_return(msg, "a{sa{sv}}", [{
                "connection": {"id": Variant("s", profile.id), "uuid": Variant("s", profile.uuid)},
                "user": {"data": Variant("a{ss}", dict(profile.user_data))}}])
        return _error(msg, UNKNOWN_METHOD, f"No such interface or object: {msg.path}")


class Polkit(Service):
    """polkitd that says yes: the policy itself is tested against the real polkitd elsewhere."""

    def __init__(self, bus: SimBus) -> None:
        super().__init__(bus, POLKIT)

    def handle(self, msg: Message) -> Message | None:
        if msg.member == "CheckAuthorization":
            return Message.new_method_return(msg, "(bba{ss})", [[True, False, {}]])
        return _error(msg, UNKNOWN_METHOD, "no such method")


# ---- the interface counters -------------------------------------------------------------------

class Link:
    """The kernel's counters: bytes grow at each interface's current rate, in virtual time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._rate: dict[str, float] = {}  # bits per second
        self._bytes: dict[str, float] = {}
        self._since: dict[str, float] = {}

    def set_rate(self, ifname: str, mbit: float) -> None:
        self._bytes[ifname] = self._now_bytes(ifname)
        self._since[ifname] = self.loop.time()
        self._rate[ifname] = mbit * 1e6

    def _now_bytes(self, ifname: str) -> float:
        return self._bytes.get(ifname, 0.0) + self._rate.get(ifname, 0.0) / 8 * (
            self.loop.time() - self._since.get(ifname, self.loop.time()))

    def read(self, ifname: str) -> Counters | None:
        total = int(self._now_bytes(ifname))
        packets = total // 1400
        return Counters(time=self.loop.time(), rx_bytes=0, tx_bytes=total, rx_packets=0,
                        tx_packets=packets)

    def close(self) -> None:
        pass

    def mbit(self, ifname: str) -> float:
        return self._rate.get(ifname, 0.0) / 1e6

"""scanguardctl: look at what the scan guard does, hold it around a command, edit profile settings."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..config import (
    DEFAULT_CONFIG_PATH,
    KEYS,
    ConfigError,
)
from ..output import run_main
from ..peers.bus import (
    BusError,
)
from ..status import state_words
from ..text import quoted, shown
from .common import Failure, json_text
from .configure import cmd_config_set, cmd_config_show, cmd_config_unset
from .history import cmd_history
from .hold import HOLD_FAILED, QUICK_EXIT, cmd_hold, cmd_reload
from .off import OFF_EXIT
from .profiles import ProfileError
from .show import cmd_monitor, cmd_status
from .since import EXAMPLES, since_argument

# ---- arguments -------------------------------------------------------------------------------

def _utf8(text: str) -> str:
    """An argument passed on to the service or NetworkManager, which take text in UTF-8 only.
    Python gives bytes of an argument that are not UTF-8 as lone surrogates (PEP 383), which
    no D-Bus library can send: refused here, naming the argument, not later as a bus failure."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        where = f"after {quoted(text[:e.start])}" if e.start else "at the start"
        raise argparse.ArgumentTypeError(f"not valid UTF-8 ({what} {where}); write it in "
                                         "UTF-8") from None
    return text


# ---- diagnose ---------------------------------------------------------------------------------

def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a number of seconds") from None
    if not math.isfinite(value) or not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give between 1 and 86400 seconds")
    return value


def _plot_file(text: str) -> str:
    from ..diagnose import plot  # imports matplotlib only when --plot is given
    return plot.argument(text)


def _target_address(text: str) -> str:
    from ..diagnose.ping import address_argument
    return address_argument(text)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from ..diagnose import document
    from ..diagnose import record as diagnose
    plot = None
    if args.plot:
        from ..diagnose import plot as plotting
        try:
            plot = plotting.require()  # before recording: a missing matplotlib is said at once
            plotting.file_format(args.plot, plot)
            plotting.check_writable(args.plot)
        except plotting.PlotError as e:
            raise Failure(str(e)) from None
    on_terminal = sys.stderr.isatty() and not args.json
    if on_terminal:
        print(f"Recording for {args.seconds:g} s: latency to {args.target or 'the gateway'}, "
              "throughput and every "
              "Wi-Fi scan. Use the link as you normally do; Ctrl-C ends early.", file=sys.stderr)
    try:
        rec = diagnose.run(args.seconds, args.interface or None, on_terminal, args.target)
    except (LookupError, ConnectionError) as e:
        raise Failure(str(e)) from None
    except BusError as e:
        raise Failure(f"NetworkManager could not be asked ({shown(e.text or e.name)}); is it "
                      "running?") from None
    # The findings first: a plot that cannot be drawn must not cost the recording.
    if args.json:
        print(json_text(document.as_json(rec)), flush=True)
    else:
        print(document.report(rec), end="", flush=True)
    if plot is not None:
        try:
            plotting.draw(rec, args.plot, plot)
        except plotting.PlotError as e:
            raise Failure(str(e)) from None
        if not args.json:
            print(f"Plot: {args.plot}")
    return 0


# ---- command line ----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse's parser, with two changes: a usage error exits with `usage_status` (argparse's
    2 unless set: hold's is HOLD_FAILED), and an unrecognised argument is reported by the
    verb's own parser, with that verb's usage and status."""

    usage_status = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(verb_parser=self)  # a verb's parser sets it after the main one

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(self.usage_status, f"{self.prog}: error: {message}\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            getattr(parsed, "verb_parser", self).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def _verb(verbs: Any, name: str, func: Callable[[argparse.Namespace], Any], line: str,
          description: str | None = None, epilog: str | None = None) -> _Parser:
    """Verb `name` of `verbs` (an add_subparsers), run by `func`: `line` says what it does in
    the list of verbs, `description` on its own --help (and man page), `epilog` after its
    options.  `func` returns the exit status; a coroutine function runs in asyncio.run."""
    parser: _Parser = verbs.add_parser(name, help=line, description=description, epilog=epilog)
    parser.set_defaults(func=func)
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="scanguardctl",
        description="Look at and control nm-scanguard, which suspends wpa_supplicant background "
                    "scans while a Wi-Fi link is busy.",
        epilog="Per-connection settings are NetworkManager profile user data (scanguard.KEY), "
               "which nmcli cannot write: use `scanguardctl config set`. See scanguardd(8) and "
               "scanguard.conf(5).",
    )
    p.man_short_description = (  # type: ignore[attr-defined]  # read by man/build.py
        "look at and control the Wi-Fi scan guard")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND", required=True)

    s = _verb(sub, "status", cmd_status, "show each Wi-Fi interface's state and the active holds",
              description="One line per guarded Wi-Fi interface, then the holds: who "
                          "holds and why for your own, \"by another user\" for the "
                          "others' (root sees all). Needs no privileges. While "
                          "nm-scanguard is off by the administrator's choice "
                          "(scanguard.service masked, or enabled = no in the settings "
                          f"file), it says so first and exits {OFF_EXIT}.",
              epilog=state_words())
    s.add_argument("--json", action="store_true",
                   help="print {version, off, devices, holds} as JSON, for scripts")

    h = _verb(sub, "hold", cmd_hold, "keep bgscan suspended until Ctrl-C, or while a command "
                                     "runs",
              description="Take a hold (bgscan stays suspended whatever the traffic; "
                          "when the signal fades below the floor, the guard scans the "
                          "known access points' channels itself so that the station can "
                          "roam, and gives bgscan back only if that finds nothing "
                          "better). Without COMMAND, hold until "
                          "Ctrl-C, SIGTERM or SIGHUP, then release the hold and exit 0: "
                          "run it in a terminal for as long as a call lasts. With "
                          "COMMAND, run it, release the hold when it exits and exit with "
                          "its status; a COMMAND that hands its work to a program "
                          "already running (`firefox URL`) exits at once, and a hold "
                          f"that ended within {QUICK_EXIT:g} s says so. COMMAND runs even "
                          "if no hold can be taken (the scanguard service is not "
                          "running, polkit says no, ...): a warning says why, unless "
                          "--strict. When the service restarts, the hold is taken "
                          "again. The hold ends when COMMAND exits or scanguardctl is "
                          "killed.",
              epilog=f"Exit status: COMMAND's own (without COMMAND: 0 once ended by a "
                     f"signal); {HOLD_FAILED} when hold itself "
                     "fails (a usage error, no hold under --strict or without COMMAND); "
                     "126 when COMMAND cannot be run, 127 when it is not found; 128+N "
                     "when it was killed by signal N.")
    h.usage_status = HOLD_FAILED
    h.add_argument("--reason", default="", type=_utf8,
                   help="why, shown in your and root's status (e.g. \"video call\")")
    h.add_argument("--app-id", default="scanguardctl", type=_utf8,
                   help="application id shown in your and root's status")
    h.add_argument("--interface", default="", metavar="IFACE", type=_utf8,
                   help="hold only this Wi-Fi interface (default: all)")
    h.add_argument("--strict", action="store_true",
                   help=f"do not run COMMAND unless the hold is taken (exit {HOLD_FAILED})")
    h.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                   help="the command to run while holding (none: hold until Ctrl-C)")

    _verb(sub, "reload", cmd_reload, "make the service re-read its settings file",
          description="Ask the running service to re-read its settings file (as "
                      "`systemctl reload scanguard` does). A file with an error is "
                      "refused: the reason is printed, the exit status is 1 and "
                      "the previous settings stay in force. Needs root or the "
                      "polkit action io.github.nm_scanguard.reload "
                      "(administrators).")

    c = sub.add_parser("config", help="show or change settings, globally or per connection",
                       description="Settings come from built-in defaults, "
                                   f"{DEFAULT_CONFIG_PATH}, and NetworkManager profile user data "
                                   "(scanguard.KEY), in that order.")
    config_help = (f"global settings file (default: {DEFAULT_CONFIG_PATH}, which may be absent; "
                   "a file given here must exist)")
    c.add_argument("--config", default=DEFAULT_CONFIG_PATH, metavar="FILE", help=config_help)
    csub = c.add_subparsers(dest="config_verb", metavar="ACTION", required=True)

    def config_option(verb: argparse.ArgumentParser) -> None:
        """--config after the action too (`config show --config F`); given nowhere, the
        default of `config`'s own option stays (SUPPRESS adds nothing to the namespace)."""
        verb.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE", help=config_help)

    cs = _verb(csub, "show", cmd_config_show, "effective settings and where each one came from")
    config_option(cs)
    cs.add_argument("connection", nargs="?", metavar="CONNECTION", type=_utf8,
                    help="a NetworkManager profile name or UUID")
    cset = _verb(csub, "set", cmd_config_set, "store settings in a NetworkManager profile",
                 description="Validate, then write scanguard.KEY user data into the "
                             "profile through libnm. The daemon picks the change up "
                             "at once.")
    config_option(cset)
    cset.add_argument("connection", metavar="CONNECTION", type=_utf8, help="profile name or UUID")
    cset.add_argument("assignments", nargs="+", metavar="KEY=VALUE",
                      help=f"keys: {', '.join(KEYS)}")
    cu = _verb(csub, "unset", cmd_config_unset, "remove settings from a NetworkManager profile",
               description="Remove the KEYs (scanguard.KEY user data) from the profile, or "
                           "with --all every scanguard.* setting. Before `apt purge "
                           "nm-scanguard`, which cannot reach the profiles, `sudo scanguardctl "
                           "config unset --all` removes them from every profile.")
    config_option(cu)
    cu.add_argument("--all", action="store_true",
                    help="remove every scanguard.* setting, known or not: from CONNECTION, "
                         "or without it from every profile NetworkManager shows you (as "
                         "root: every profile)")
    cu.add_argument("connection", nargs="?", metavar="CONNECTION", type=_utf8,
                    help="profile name or UUID")
    cu.add_argument("keys", nargs="*", metavar="KEY")

    d = _verb(sub, "diagnose", cmd_diagnose, "find out whether Wi-Fi stalls are scans, and who "
                                             "asked for them",
              description="Record, for N seconds (--seconds), the latency to the Wi-Fi "
                          "interface's own gateway or to --target (several ICMP echoes "
                          "a second, sent through that interface), the throughput per "
                          "second and every "
                          "Wi-Fi scan the kernel announces, with who asked for it "
                          "(bgscan, a program through NetworkManager, a program that "
                          "calls wpa_supplicant directly such as GeoClue, the guard's "
                          "own roaming scan, or unknown) and how that was established; "
                          "then say whether the latency spikes fell inside scans and "
                          "what to do about each source; what could not be measured "
                          "is said to be unknown, with what to try. Needs no "
                          "privileges and "
                          "changes nothing; works whether or not the guard is "
                          "installed or guarding.")
    d.add_argument("--seconds", type=_positive_seconds, default=120.0, metavar="N",
                   help="how long to record (default: %(default)g; bgscan's short interval is "
                        "30 s, its long one 300 s)")
    d.add_argument("--interface", default="", metavar="IFACE", type=_utf8,
                   help="only this Wi-Fi interface (default: every connected one)")
    d.add_argument("--json", action="store_true",
                   help="print the recording and the findings as JSON, for scripts")
    d.add_argument("--target", default="", metavar="ADDR", type=_target_address,
                   help="send the echoes to this IPv4 address instead of the interface's own "
                        "gateway (for a gateway that does not answer pings, or none found); "
                        "either way they leave through the Wi-Fi interface, also when a VPN "
                        "owns the default route")
    d.add_argument("--plot", default="", metavar="FILE.png", type=_plot_file,
                   help="also draw latency and throughput over time with scans shaded by "
                        "source, in the format of the file's suffix (png, svg, pdf, ...; png "
                        "without one); an existing file is overwritten, a symbolic link or a "
                        "file with other hard links is refused (needs python3-matplotlib)")

    _verb(sub, "monitor", cmd_monitor, "follow state changes, rates, scans and holds live",
          description="Print changes as they happen until interrupted (Ctrl-C).")

    hi = _verb(sub, "history", cmd_history, "what the guard did: guarded spells, scans refused "
                                            "or aborted and who asked, roams",
               description="Read the systemd journal of scanguard.service and show, in local "
                           "time: each guarded spell (bgscan suspended, then restored, and for "
                           "how long), other programs' scan requests that the polkit rule "
                           "refused and who asked, scans aborted while guarding, roams, and "
                           "bgscan restored at a start after a crash. Needs root or a member "
                           "of the systemd-journal or adm group: journald shows anyone else "
                           "only their own entries, and history then says what to do and "
                           "exits 1.")
    hi.add_argument("--since", type=since_argument, default="today", metavar="TIME",
                    help=f"show what happened from TIME on (default: today, from midnight), "
                         f"local time as journalctl takes it: {EXAMPLES}")
    hi.add_argument("--json", action="store_true",
                    help="print {unit, since, until, events} as JSON, for scripts")
    # `--since -1h` as journalctl takes it: argparse reads a word after an option as its value
    # only if it does not look like an option, and "-1h" looks like one unless it is "negative
    # number"-like; this verb has no option that starts with a digit.
    hi._negative_number_matcher = re.compile(r"^-[0-9]")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main("scanguardctl", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="scanguardctl: %(levelname)s: %(message)s", level=logging.WARNING)
    try:
        if inspect.iscoroutinefunction(args.func):
            return int(asyncio.run(args.func(args)))
        return int(args.func(args))
    except Failure as e:
        print(f"scanguardctl: {e}", file=sys.stderr)
        return e.code
    except (ConfigError, ProfileError) as e:
        print(f"scanguardctl: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

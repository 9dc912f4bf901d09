#!/usr/bin/python3
"""Build nm-scanguard's manual pages into a directory:

    python3 man/build.py OUTDIR

debian/rules runs exactly this, and tests/unit/docs/test_man_pages.py runs it too, so what the test
reads is what the package installs.

scanguardd(8) and scanguardctl(1) are written from the programs' own argument parsers
(`build_parser()`), so their options cannot drift from `--help`: the main options under OPTIONS,
each verb (and each verb's verb, `config show`) under a heading of its own with its own options,
and each parser's epilog.  What a parser cannot say -- signals, exit status, files, the D-Bus
name, SEE ALSO -- is written by hand in man/PAGE.extra and appended.  scanguard.conf(5) is
written by hand (systemd/scanguard.conf.5); only its .TH line is filled in here.

Not argparse-manpage: version 1.2 (Debian 12) lists the main parser's options, and a verb's own
options, after the last sub-verb's, under that sub-verb's heading (`--version` under `monitor`,
`config --config` under `config unset`), drops the epilog, and always writes section 1;
version 4 (Debian 13) lays pages out differently.  One package source has to build the same
pages on both releases.

The date on each page is the release's: SOURCE_DATE_EPOCH (dpkg-buildpackage sets it from
debian/changelog), else the top debian/changelog entry's; the version is nm_scanguard's.
"""

from __future__ import annotations

import argparse
import datetime
import email.utils
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# argparse wraps usage lines at the terminal's width; man fills lines itself.
os.environ["COLUMNS"] = "1000"
sys.path.insert(0, str(REPO))

from nm_scanguard import __version__  # noqa: E402
from nm_scanguard.cli import scanguardctl as cli  # noqa: E402
from nm_scanguard.daemon import service  # noqa: E402

HERE = Path(__file__).resolve().parent
# (parser, page name, section, manual title)
GENERATED: list[tuple[Callable[[], argparse.ArgumentParser], str, str, str]] = [
    (service.build_parser, "scanguardd", "8", "System Administration"),
    (cli.build_parser, "scanguardctl", "1", "User Commands"),
]
HAND_WRITTEN = [(REPO / "systemd" / "scanguard.conf.5", "scanguard.conf", "5", "File Formats")]


# ---- troff ------------------------------------------------------------------------------------

def esc(text: str) -> str:
    """Plain text as troff: backslashes and hyphens escaped, `code` in bold, no line starting
    with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line
                     for line in text.splitlines())


def bold(text: str) -> str:
    return f"\\fB{esc(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{esc(text)}\\fR"


# ---- parsers ----------------------------------------------------------------------------------

def verbs(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each verb of `parser`, in the order --help lists them."""
    out = []
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def entries(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of `parser` itself that get an entry: not --help, not its verbs."""
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help != argparse.SUPPRESS]


def invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """`-c FILE, --config FILE` in bold and italics; a positional's name in italics."""
    formatter = parser._get_formatter()
    if not action.option_strings:
        return italic(action.metavar if isinstance(action.metavar, str) else action.dest)
    if action.nargs == 0:
        return ", ".join(bold(o) for o in action.option_strings)
    args = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return ", ".join(f"{bold(o)} {italic(args)}" for o in action.option_strings)


def options(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = []
    for action in entries(parser):
        lines += [".TP", invocation(parser, action)]
        if action.help:
            lines.append(esc(formatter._expand_help(action)))
    return lines


def usage(parser: argparse.ArgumentParser) -> list[str]:
    """The synopsis of one parser: its program name in bold, the rest as --help prints it."""
    text = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    rest = text.removeprefix(parser.prog).strip()
    return [f".B {esc(parser.prog)}", esc(rest)] if rest else [f".B {esc(parser.prog)}"]


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser a command line ends in: `scanguardctl status`, `scanguardctl config show`..."""
    subs = verbs(parser)
    return [leaf for _, _, sub in subs for leaf in leaves(sub)] if subs else [parser]


def commands(parser: argparse.ArgumentParser) -> list[str]:
    """A heading per verb, depth first: its description (or --help's line for it), its own
    arguments, its epilog; then its verbs."""
    lines = []
    for _, short, sub in verbs(parser):
        lines += [f'.SS "{esc(sub.prog)}"', ".PP", *usage(sub), ".PP", esc(sub.description or short)]
        lines += options(sub)
        if sub.epilog:
            lines += [".PP", esc(sub.epilog)]
        lines += commands(sub)
    return lines


def generated_page(parser: argparse.ArgumentParser, name: str, section: str, title: str,
                   date: str, extra: str) -> str:
    short = getattr(parser, "man_short_description", "")
    lines = [f".\\\" {name}({section}): generated by man/build.py from build_parser(); edit the",
             f".\\\" parser or man/{name}.{section}.extra, not this file.",
             th(name, section, date, title), ".SH NAME", f"{esc(name)} \\- {esc(short)}",
             ".SH SYNOPSIS"]
    tops = [parser, *leaves(parser)] if verbs(parser) else [parser]
    for i, leaf in enumerate(tops):
        lines += ([".br"] if i else []) + usage(leaf)
    lines += [".SH DESCRIPTION", esc(parser.description or "")]
    if parser.epilog:
        lines += [".PP", esc(parser.epilog)]
    if entries(parser):
        lines += [".SH OPTIONS", *options(parser)]
    if verbs(parser):
        lines += [".SH COMMANDS", *commands(parser)]
    return "\n".join(lines) + "\n" + extra


def th(name: str, section: str, date: str, title: str) -> str:
    return f'.TH {name.upper()} {section} "{date}" "nm-scanguard {__version__}" "{title}"'


# ---- the date ---------------------------------------------------------------------------------

def release_date() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        when = datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
    else:
        changelog = (REPO / "debian" / "changelog").read_text(encoding="utf-8")
        trailer = re.search(r"^ -- .*?>  (.*)$", changelog, re.M)
        if trailer is None:
            raise SystemExit("man/build.py: debian/changelog has no trailer line ( -- NAME <MAIL>  DATE)")
        when = email.utils.parsedate_to_datetime(trailer.group(1)).astimezone(datetime.UTC)
    return when.strftime("%Y-%m-%d")


def build(outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    date = release_date()
    written = []
    for make_parser, name, section, title in GENERATED:
        extra = (HERE / f"{name}.{section}.extra").read_text(encoding="utf-8")
        page = generated_page(make_parser(), name, section, title, date, extra)
        written.append(outdir / f"{name}.{section}")
        written[-1].write_text(page, encoding="utf-8")
    for source, name, section, title in HAND_WRITTEN:
        text = source.read_text(encoding="utf-8")
        header = th(name, section, date, title)
        text, n = re.subn(r"^\.TH .*$", lambda _, header=header: header, text, count=1,
                          flags=re.M)
        if n != 1:
            raise SystemExit(f"man/build.py: {source} has no .TH line")
        written.append(outdir / f"{name}.{section}")
        written[-1].write_text(text, encoding="utf-8")
    return written


def main() -> int:
    p = argparse.ArgumentParser(description="Write nm-scanguard's manual pages into OUTDIR.")
    p.add_argument("outdir", type=Path, metavar="OUTDIR")
    for path in build(p.parse_args().outdir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Write scanguardctl's bash completion from its own argument parser (cli.build_parser).

    PYTHONPATH=. python3 completion/bash_completion.py > scanguardctl

debian/rules runs it at build time and installs the result as
/usr/share/bash-completion/completions/scanguardctl, where bash-completion loads it on the
first <Tab> after `scanguardctl`.  Verbs, actions and options are read from the parser, so
they cannot drift from --help; what a value means is read from its metavar (KINDS).  A
metavar missing from KINDS is completed as free text, and tests/unit/cli/test_completion.py
fails until it is added here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nm_scanguard.cli.scanguardctl import build_parser  # noqa: E402
from nm_scanguard.config import KEYS  # noqa: E402

# What each metavar's value is, and so how it is completed (see _scanguardctl_value below).
KINDS = {
    "FILE": "file", "FILE.png": "file",
    "IFACE": "wifi",
    "CONNECTION": "profile",
    "KEY=VALUE": "assignment", "KEY": "key",
    "-- COMMAND [ARGS...]": "command",
    "REASON": "text", "APP_ID": "text", "N": "text", "ADDR": "text",
    "TIME": "time",
}

# The settings keys that take one of a few words, with those words (yes/no, targeted/full).
KEY_WORDS = {k: spec.words for k, spec in KEYS.items() if spec.words}


def metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    return action.dest.upper()


def kind(action: argparse.Action) -> str:
    """How the value of `action` is completed; free text if its metavar is not in KINDS."""
    return KINDS.get(metavar(action), "text")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def walk(parser: argparse.ArgumentParser,
         path: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every parser with its path of verbs ("" for the top, "config show"), parents first."""
    found = [(path, parser)]
    for name, sub in subparsers(parser).items():
        found += walk(sub, f"{path} {name}".strip())
    return found


def words(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """What the completion needs of one parser: its options; those that take a value, as
    OPTION=KIND; its verbs; and the kind of each positional in order (`...` after the last when
    it may repeat)."""
    opts, valued, args = [], [], []
    for action in parser._actions:
        if action.option_strings:
            opts += action.option_strings
            if action.nargs != 0:
                valued += [f"{o}={kind(action)}" for o in action.option_strings]
        elif not isinstance(action, argparse._SubParsersAction):
            repeat = action.nargs in ("+", "*", argparse.REMAINDER)
            args.append(kind(action) + ("..." if repeat else ""))
    return {"opts": opts, "valued": valued, "verbs": list(subparsers(parser)), "args": args}


def _quoted_list(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def key_word_cases() -> str:
    """The case arms of _scanguardctl_key_words: keys with the same words share one."""
    arms: dict[tuple[str, ...], list[str]] = {}
    for key, words in KEY_WORDS.items():
        arms.setdefault(words, []).append(key)
    return "\n".join(f"        {'|'.join(keys)}) printf '%s\\n' {' '.join(words)} ;;"
                     for words, keys in arms.items())  # identifiers and words: nothing to quote


def generate(parser: argparse.ArgumentParser) -> str:
    cases = []
    for path, sub in walk(parser):
        w = words(sub)
        cases.append(f"        {shlex.quote(path)})\n"
                     f"            _sgc_opts={_quoted_list(w['opts'])}\n"
                     f"            _sgc_valued={_quoted_list(w['valued'])}\n"
                     f"            _sgc_verbs={_quoted_list(w['verbs'])}\n"
                     f"            _sgc_args={_quoted_list(w['args'])} ;;")
    return (TEMPLATE.replace("@CASES@", "\n".join(cases))
            .replace("@KEYS@", " ".join(KEYS))  # identifiers: nothing to quote
            .replace("@KEY_WORDS@", key_word_cases()))


TEMPLATE = r"""# bash completion for scanguardctl(1)                                   -*- shell-script -*-
# Generated from scanguardctl's argument parser by completion/bash_completion.py: do not edit.

# The words of one parser, by its path of verbs ('' for scanguardctl itself, 'config show'):
# options, options that take a value (OPTION=KIND), verbs, kinds of the positionals.
_scanguardctl_words()
{
    case $1 in
@CASES@
        *) _sgc_opts= _sgc_valued= _sgc_verbs= _sgc_args= ;;
    esac
}

# Add each line of $2 that starts with $1 to COMPREPLY, quoted for the command line.
_scanguardctl_add()
{
    local word
    while IFS= read -r word; do
        [[ -n $word && $word == "$1"* ]] && COMPREPLY+=("$(printf '%q' "$word")")
    done <<<"$2"
}

# Complete $2 as a value of kind $1.
_scanguardctl_value()
{
    case $1 in
        file)  # readline quotes file names itself (-o filenames)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$2") ;;
        wifi)
            _scanguardctl_add "$2" "$(nmcli -t -f DEVICE,TYPE device 2>/dev/null |
                sed -n 's/:wifi$//p')" ;;
        profile)  # nmcli -t writes ':' and '\' in a name as '\:' and '\\'
            _scanguardctl_add "$2" "$(nmcli -t -f NAME connection show 2>/dev/null |
                sed 's/\\\(.\)/\1/g')" ;;
        assignment)
            compopt -o nospace 2>/dev/null
            _scanguardctl_add "$2" "$(printf '%s=\n' @KEYS@)" ;;
        key)
            _scanguardctl_add "$2" "$(printf '%s\n' @KEYS@)" ;;
        time)  # history --since: the forms people use most; any journalctl time is taken
            _scanguardctl_add "$2" "$(printf '%s\n' today yesterday -1h -24h)" ;;
    esac
}

# The words settings key $1 takes, one a line; fails for a key that takes a number.
_scanguardctl_key_words()
{
    case $1 in
@KEY_WORDS@
        *) return 1 ;;
    esac
}

# The kind of value option $1 takes in the current parser; fails if it takes none.
_scanguardctl_option_kind()
{
    local entry
    for entry in $_sgc_valued; do
        [[ ${entry%=*} == "$1" ]] && { printf '%s' "${entry##*=}"; return 0; }
    done
    return 1
}

_scanguardctl()
{
    local cur=${COMP_WORDS[COMP_CWORD]} path= word i n=0 value= start= kind
    local _sgc_opts _sgc_valued _sgc_verbs _sgc_args
    COMPREPLY=()
    _scanguardctl_words ''
    # The words before the cursor: a verb narrows the parser, an option that takes a value
    # skips it, other words are positional arguments.  bash splits KEY=VALUE and --opt=VALUE
    # at '=' (COMP_WORDBREAKS), so '=' and the word after it are a value.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ $word == = ]]; then value=${value:-=}; continue; fi
        if [[ -n $value ]]; then value=; continue; fi
        if [[ $_sgc_args == command* && ( $word == -- || $word != -* ) ]]; then
            [[ $word == -- ]] && start=$((i + 1)) || start=$i
            break
        fi
        if [[ $word == -* ]]; then
            _scanguardctl_option_kind "$word" >/dev/null && value=$word
        elif [[ " $_sgc_verbs " == *" $word "* ]]; then
            path="${path:+$path }$word"
            _scanguardctl_words "$path"
            n=0
        else
            n=$((n + 1))
        fi
    done

    if [[ -z $start && -z $value && $_sgc_args == command* && $cur != -* ]]; then
        start=$COMP_CWORD  # hold's COMMAND starts at its first word that is not an option
    fi
    if [[ -n $start ]]; then  # hold's COMMAND [ARGS...]
        if ((COMP_CWORD == start)); then
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
        elif declare -F _command_offset >/dev/null; then
            _command_offset "$start"  # bash-completion's: complete as that command would
        else
            _scanguardctl_value file "$cur"
        fi
        return 0
    fi
    # The value after KEY= or --option=: bash's current word is '=' or the text after it.
    local key= words
    if [[ $cur == = ]]; then
        key=${COMP_WORDS[COMP_CWORD - 1]} cur=
    elif ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[COMP_CWORD - 1]} == = ]]; then
        key=${COMP_WORDS[COMP_CWORD - 2]}
    fi
    if [[ -n $key ]]; then
        if kind=$(_scanguardctl_option_kind "$key"); then
            _scanguardctl_value "$kind" "$cur"
        elif words=$(_scanguardctl_key_words "$key"); then
            _scanguardctl_add "$cur" "$words"
        fi
        return 0
    fi
    if [[ -n $value ]]; then  # the value of an option, as a word of its own
        _scanguardctl_value "$(_scanguardctl_option_kind "$value")" "$cur"
        return 0
    fi
    if [[ $cur == -* ]]; then
        _scanguardctl_add "$cur" "$(printf '%s\n' $_sgc_opts)"
    elif [[ -n $_sgc_verbs ]]; then
        _scanguardctl_add "$cur" "$(printf '%s\n' $_sgc_verbs)"
    else
        local args=($_sgc_args)
        if ((n < ${#args[@]})); then
            _scanguardctl_value "${args[n]%...}" "$cur"
        elif ((${#args[@]})) && [[ ${args[-1]} == *... ]]; then
            _scanguardctl_value "${args[-1]%...}" "$cur"
        fi
    fi
    return 0
} &&
    complete -F _scanguardctl scanguardctl

# ex: filetype=sh
"""


if __name__ == "__main__":
    sys.stdout.write(generate(build_parser()))

"""``sessionstore completion bash|zsh|fish``: a shell completion script, made from the parser.

The script lists the commands, their actions (``db upgrade``) and every option, as the parser
has them when it is generated: regenerate it after an upgrade. Completing a value (a session id,
a path) falls back to the shell's file names.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import TextIO

__all__ = ["SHELLS", "add_commands", "completion_script", "run_completion"]

SHELLS = ("bash", "zsh", "fish")


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_db: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``completion``; ``add_db`` is unused (the command reads no database)."""
    del add_db
    completion = commands.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    completion.add_argument("shell", choices=SHELLS)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in _options(parser) for flag in action.option_strings if flag.startswith("--")]


def _taking_values(parser: argparse.ArgumentParser) -> set[str]:
    """Every option (of any command) followed by a value: the word after it is not a command."""
    found = {flag for action in _options(parser) if action.nargs != 0 for flag in action.option_strings}
    for sub in _subcommands(parser).values():
        found |= _taking_values(sub)
    return found


def _bash(parser: argparse.ArgumentParser) -> str:
    cases = []
    for name, sub in _subcommands(parser).items():
        actions = _subcommands(sub)
        if actions:
            inner = "".join(
                f"            {shlex.quote(action)}) words={shlex.quote(' '.join(_flags(asub)))};;\n"
                for action, asub in actions.items()
            )
            inner += f"            *) words={shlex.quote(' '.join(actions))}; options=0;;\n"
            cases.append(f'        {shlex.quote(name)})\n          case "$sub" in\n{inner}          esac;;\n')
        else:
            cases.append(f"        {shlex.quote(name)}) words={shlex.quote(' '.join(_flags(sub)))};;\n")
    top = " ".join([*_subcommands(parser), *_flags(parser)])
    valued = "|".join(sorted(_taking_values(parser)))
    return f"""# bash completion for sessionstore (made by `sessionstore completion bash`)
_sessionstore() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" sub="" words="" options=1 i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        case "$w" in
            {valued}) ((i++)); continue;;
            -*) continue;;
        esac
        if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi
    done
    case "$cmd" in
        "") words={shlex.quote(top)};;
{"".join(cases)}    esac
    # After a command (and its action), a word that is no option is a value: the shell's file names.
    if [[ -n $cmd && $cur != -* && $options == 1 ]]; then return 0; fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _sessionstore sessionstore
"""


def _fish_options(parser: argparse.ArgumentParser, after: str) -> list[str]:
    """``complete`` lines for each long option of ``parser``, offered once ``after`` was typed."""
    return [
        f"complete -c sessionstore -n '__fish_seen_subcommand_from {after}' -l {flag[2:]} "
        f"-d {shlex.quote(option.help or '')}"
        for option in _options(parser)
        for flag in option.option_strings
        if flag.startswith("--")
    ]


def _fish(parser: argparse.ArgumentParser) -> str:
    lines = ["# fish completion for sessionstore (made by `sessionstore completion fish`)"]
    helps = _helps(parser)
    lines += [f"complete -c sessionstore -n __fish_use_subcommand -l {flag[2:]}" for flag in _flags(parser)]
    for name, sub in _subcommands(parser).items():
        about = shlex.quote(helps.get(name, ""))
        lines.append(f"complete -c sessionstore -f -n __fish_use_subcommand -a {name} -d {about}")
        actions = _subcommands(sub)
        action_helps = _helps(sub)
        for action, asub in actions.items():
            lines.append(
                f"complete -c sessionstore -f -n '__fish_seen_subcommand_from {name}; "
                f"and not __fish_seen_subcommand_from {' '.join(actions)}' -a {action} "
                f"-d {shlex.quote(action_helps.get(action, ''))}"
            )
            lines += _fish_options(asub, action)
        lines += _fish_options(sub, name)
    return "\n".join(lines) + "\n"


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (zsh runs the bash one through ``bashcompinit``)."""
    if shell == "fish":
        return _fish(parser)
    if shell == "zsh":
        return (
            "# zsh completion for sessionstore (made by `sessionstore completion zsh`)\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + _bash(parser)
        )
    return _bash(parser)


def run_completion(parser: argparse.ArgumentParser, shell: str, out: TextIO) -> int:
    """Print the script."""
    out.write(completion_script(parser, shell))
    return 0

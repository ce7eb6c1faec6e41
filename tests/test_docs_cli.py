"""docs/cli.md documents every command the parser has (read from argparse, so none is missed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sessionstore.cli._main import _parser

CLI_DOC = Path(__file__).parent.parent / "docs" / "cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_every_command_has_a_section_and_an_example() -> None:
    """Each command: a `### sessionstore NAME` heading and an example line running it."""
    text = CLI_DOC.read_text()
    commands = _subcommands(_parser())

    assert len(commands) >= 20
    for name, sub in commands.items():
        assert f"### `sessionstore {name}`" in text, f"docs/cli.md has no section for `{name}`"
        assert f"sessionstore {name} " in text.split(f"### `sessionstore {name}`", 1)[1], name
        for action in _subcommands(sub):  # db upgrade / current / downgrade
            assert f"`{name} {action}" in text, f"docs/cli.md does not describe `{name} {action}`"


def test_the_readmes_cli_block_lists_every_command() -> None:
    """A newcomer reads the README's CLI block first: it names every command the parser has."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("## CLI", 1)[1].split("```", 2)[1]
    listed = {line.split()[1] for line in block.splitlines() if line.startswith("sessionstore ")}

    assert sorted(set(_subcommands(_parser())) - listed) == []


def test_the_conventions_section_lists_every_convention() -> None:
    """docs/cli.md "Conventions" names each thing every command does the same way."""
    section = CLI_DOC.read_text().split("## Conventions", 1)[1].split("\n## ", 1)[0]

    for needle in (
        "`--db`",
        "before or after",
        "`--version`",
        "`python -m sessionstore`",
        "one-line description",
        "`sessionstore completion bash|zsh|fish`",
        "fit the terminal",
        "`NO_COLOR`",
        "pager",
        "`--no-pager`",
        "`--type TYPE`",
        "`--since SEQ`",
        "`--tail N`",
        "progress bars",
        "`demo --db :memory:`",
        "source .venv/bin/activate",
        "sessionstore revert SESSION EVENT_ID",
        "python -X importtime -m sessionstore --help",
    ):
        assert needle in section, needle

"""The command line's conventions: global options, --version, --help, completion, output."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from sessionstore.cli import main


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _python_m(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sessionstore", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file holding session ``s-1`` with two messages."""
    path = str(tmp_path / "conventions.db")
    _run("db", "upgrade", "--db", path)
    _run("new", "--db", path, "--id", "s-1")
    _run("append", "--db", path, "s-1", "--text", "hello")
    _run("append", "--db", path, "s-1", "--text", "hi", "--role", "assistant")
    return path


class TestGlobalDatabaseOption:
    def test_db_before_the_command_is_the_same_as_after_it(self, db: str) -> None:
        """`sessionstore --db X events S` and `sessionstore events S --db X` print the same."""
        before = _run("--db", db, "events", "s-1", "--json")
        after = _run("events", "s-1", "--json", "--db", db)

        assert before[0] == 0
        assert before == after
        assert len(before[1].splitlines()) == 2

    def test_db_after_the_command_wins_over_db_before_it(self, db: str, tmp_path: Path) -> None:
        """The option nearest the command's arguments is the one used."""
        code, out = _run("--db", str(tmp_path / "missing.db"), "sessions", "--db", db)

        assert code == 0
        assert out.startswith("s-1 ")

    def test_db_before_a_nested_action(self, tmp_path: Path) -> None:
        """`--db` before `db upgrade` reaches the action."""
        path = tmp_path / "nested.db"

        assert _run("--db", str(path), "db", "upgrade")[0] == 0
        assert path.exists()

    def test_schema_before_rls_sql_is_not_reset_to_the_default(self) -> None:
        """`rls sql` defaults to public, but a --schema given before the command is kept."""
        before = _run("--schema", "agents", "rls", "sql")[1]
        default = _run("rls", "sql")[1]

        assert '"agents".' in before and '"public".' not in before
        assert '"public".' in default


class TestHelpAndVersion:
    def test_version_prints_the_installed_version(self) -> None:
        """`--version` (and `python -m sessionstore --version`) prints the distribution's version."""
        done = _python_m("--version")

        assert done.returncode == 0
        assert done.stdout == f"sessionstore {version('sessionstore')}\n"

    def test_every_command_has_a_description_in_help(self) -> None:
        """`--help` lists each command with a description, and each command's --help repeats it."""
        from sessionstore.cli._main import _parser

        parser = _parser()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        described = {choice.dest: choice.help for choice in commands._choices_actions}
        text = parser.format_help()

        assert set(described) == set(commands.choices)
        for name, sub in commands.choices.items():
            assert described[name], f"`{name}` has no description in --help"
            assert "\n" not in described[name]
            assert name in text
            assert sub.description == described[name]

    def test_help_imports_no_database_or_model_library(self) -> None:
        """`--help` builds the parser only: SQLAlchemy, Pydantic and the SDK stay unimported."""
        probe = (
            "import sys, contextlib, io\n"
            "from sessionstore.cli import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['--help'])\n"
            "heavy = ('sqlalchemy', 'pydantic', 'anthropic', 'tiktoken', 'rich', 'sessionstore.store')\n"
            "print(sorted(name for name in heavy if name in sys.modules))\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)

        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"

    def test_a_usage_error_imports_no_database_library(self) -> None:
        """A malformed command line fails (exit 2) before anything heavy is imported."""
        probe = (
            "import sys, contextlib, io\n"
            "from sessionstore.cli import main\n"
            "with contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            "        main(['events'])\n"
            "    except SystemExit as e:\n"
            "        print(e.code, 'sqlalchemy' in sys.modules)\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)

        assert done.stdout.split() == ["2", "False"]

    def test_import_sessionstore_is_lazy_but_complete(self) -> None:
        """`import sessionstore` loads no layer until a name is used; then the name is the layer's."""
        probe = (
            "import sys, sessionstore\n"
            "lazy = 'sqlalchemy' not in sys.modules\n"
            "from sessionstore.store import open_store\n"
            "import sessionstore.audit\n"
            "print(json.dumps([lazy, sessionstore.open_store is open_store,\n"
            "                  callable(sessionstore.audit), sessionstore.audit.__module__]))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", "import json\n" + probe], capture_output=True, text=True, timeout=60
        )

        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [True, True, True, "sessionstore.audit._audit"]

"""The command line's conventions: global options, --version, --help, completion, output."""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import shlex
import struct
import subprocess
import sys
import termios
from importlib.metadata import version
from pathlib import Path

import pytest

import sessionstore
from sessionstore.cli import main
from sessionstore.cli._output import pager_command, use_color

from .test_tamper import _recompute_chain, _tamper


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
            help_text = described[name]
            assert help_text, f"`{name}` has no description in --help"
            assert "\n" not in help_text
            assert name in text
            assert sub.description == help_text

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


def _on_terminal(*argv: str, env: dict[str, str], rows: int = 12, cols: int = 100) -> str:
    """Run the CLI with a pseudo-terminal as stdin, stdout and stderr; what the terminal shows."""
    master, replica = os.openpty()
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    command = [sys.executable, "-m", "sessionstore", *argv]
    with subprocess.Popen(command, stdin=replica, stdout=replica, stderr=replica, env=env) as process:
        os.close(replica)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            shown += chunk
        process.wait(timeout=60)
    os.close(master)
    return shown.decode()


def _env(**changes: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NO_COLOR", "PAGER", "SESSIONSTORE_PAGER", "COLUMNS", "LINES")
    }
    env["TERM"] = "xterm"
    return {**env, **changes}


class TestEventsFilters:
    def test_type_tail_and_since_select_events(self, db: str) -> None:
        """--type keeps one type (repeatable), --tail N the last N, --since SEQ those after SEQ."""
        _run("append", "--db", db, "s-1", "--text", "third")

        def seqs(*options: str) -> list[int]:
            code, out = _run("events", "s-1", "--db", db, "--json", *options)
            assert code == 0
            return [json.loads(line)["seq"] for line in out.splitlines()]

        assert seqs() == [1, 2, 3]
        assert seqs("--tail", "2") == [2, 3]
        assert seqs("--tail", "0") == []
        assert seqs("--since", "1") == [2, 3]
        assert seqs("--since", "3") == []
        assert seqs("--type", "message_appended", "--tail", "1") == [3]
        assert seqs("--type", "session_started") == []
        assert seqs("--since", "1", "--tail", "5") == [2, 3]

    def test_a_negative_tail_is_a_usage_error(self, db: str, capsys: pytest.CaptureFixture[str]) -> None:
        """`--tail -1` and `--since x` are refused by the parser (exit 2), naming the value."""
        with pytest.raises(SystemExit) as exited:
            _run("events", "s-1", "--db", db, "--since", "x")

        assert exited.value.code == 2
        assert "'x'" in capsys.readouterr().err


class TestTerminalOutput:
    def test_colour_only_on_a_terminal_and_never_with_no_color(self) -> None:
        """use_color: a terminal yes, a pipe or NO_COLOR or TERM=dumb no."""
        master, replica = os.openpty()
        try:
            with open(replica, "w", closefd=False) as tty:
                assert use_color(tty, {"TERM": "xterm"}) is True
                assert use_color(tty, {"TERM": "xterm", "NO_COLOR": "1"}) is False
                assert use_color(tty, {"TERM": "dumb"}) is False
                assert use_color(tty, {"TERM": "xterm", "NO_COLOR": ""}) is True  # empty: unset
            assert use_color(io.StringIO(), {"TERM": "xterm"}) is False
        finally:
            os.close(master)
            os.close(replica)

    def test_events_on_a_terminal_are_coloured_unless_no_color(self, db: str) -> None:
        """The real CLI on a pseudo-terminal: ANSI colour, none with NO_COLOR, none in a pipe."""
        coloured = _on_terminal("events", "s-1", "--db", db, env=_env())
        plain = _on_terminal("events", "s-1", "--db", db, env=_env(NO_COLOR="1"))
        piped = _python_m("events", "s-1", "--db", db, env=_env())

        assert "\033[" in coloured and "message_appended" in coloured
        assert "\033[" not in plain and "message_appended" in plain
        assert "\033[" not in piped.stdout

    def test_lines_fit_the_terminal_width(self, db: str) -> None:
        """On a 60-column terminal no line of `events` or `show` is wider than 60."""
        _run("append", "--db", db, "s-1", "--text", "word " * 200)
        shown = _on_terminal("events", "s-1", "--db", db, env=_env(NO_COLOR="1"), cols=60)
        shown += _on_terminal("show", "s-1", "--db", db, env=_env(NO_COLOR="1"), cols=60)
        lines = shown.replace("\r", "").splitlines()

        assert len(lines) >= 6
        assert max(len(line) for line in lines) <= 60

    def test_tables_fit_the_terminal_width(self, db: str) -> None:
        """The /context table is drawn for the terminal's width (COLUMNS)."""
        narrow = _python_m("context", "s-1", "--db", db, "--breakdown", env=_env(COLUMNS="50"))

        assert narrow.returncode == 0, narrow.stderr
        assert max(len(line) for line in narrow.stdout.splitlines()) <= 50


class TestPager:
    @pytest.mark.parametrize(
        ("lines", "terminal", "no_pager", "environ", "expected"),
        [
            (100, True, False, {}, "less"),
            (100, True, False, {"PAGER": "more"}, "more"),
            (100, True, False, {"PAGER": "more", "SESSIONSTORE_PAGER": "less -S"}, "less -S"),
            (100, False, False, {}, None),  # a pipe or a file
            (100, True, True, {}, None),  # --no-pager
            (10, True, False, {}, None),  # fits the screen
            (24, True, False, {}, "less"),  # one line too many: the prompt needs one
            (100, True, False, {"PAGER": "cat"}, None),
            (100, True, False, {"PAGER": ""}, None),
        ],
    )
    def test_the_pager_decision(
        self, lines: int, terminal: bool, no_pager: bool, environ: dict[str, str], expected: str | None
    ) -> None:
        """Like git: only on a terminal, only longer than the screen, PAGER respected."""
        chosen = pager_command(lines, is_terminal=terminal, no_pager=no_pager, rows=24, environ=environ)

        assert chosen == expected

    def test_long_output_on_a_terminal_goes_through_the_pager(self, db: str, tmp_path: Path) -> None:
        """On a 12-row terminal, 30 events go to $PAGER; with --no-pager they go to the terminal."""
        for n in range(30):
            _run("append", "--db", db, "s-1", "--text", f"message {n}")
        paged = tmp_path / "paged.txt"
        env = _env(PAGER=f"cat > {paged}", NO_COLOR="1")

        shown = _on_terminal("events", "s-1", "--db", db, env=env)
        assert paged.read_text().count("message_appended") == 32
        assert "message_appended" not in shown
        paged.unlink()

        direct = _on_terminal("events", "s-1", "--db", db, "--no-pager", env=env)
        short = _on_terminal("events", "s-1", "--db", db, "--tail", "3", env=env)

        assert not paged.exists()
        assert direct.count("message_appended") == 32
        assert short.count("message_appended") == 3

    def test_a_command_that_fails_part_way_shows_its_output_then_the_error(self, db: str) -> None:
        """What a paged command printed before it failed comes first, then the one error line."""
        store = sessionstore.open_store(db)
        try:
            _tamper(store, "UPDATE events SET payload = '{{{' WHERE session_id = 's-1' AND seq = 2")
            # Re-hashed: the read's hash checks pass, and the event fails only when decoded.
            _recompute_chain(store, "s-1", 2)
        finally:
            store.close()

        shown = _on_terminal("events", "s-1", "--json", "--db", db, env=_env(PAGER="cat", NO_COLOR="1"))

        first, error = shown.splitlines()
        assert json.loads(first)["seq"] == 1
        assert error.startswith("sessionstore: session 's-1', seq 2: the stored message_appended event")


class TestCompletion:
    def _complete(self, script: str, *words: str) -> list[str]:
        """Run bash with the generated script and complete ``words`` (the last one being typed)."""
        probe = (
            script
            + f"COMP_WORDS=({' '.join(shlex.quote(w) for w in ('sessionstore', *words))})\n"
            + 'COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n_sessionstore\necho "${COMPREPLY[@]}"\n'
        )
        done = subprocess.run(
            ["bash", "--norc", "--noprofile"], input=probe, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    def test_bash_completes_commands_actions_and_options(self) -> None:
        """`sessionstore completion bash`, sourced in bash, completes what the parser has."""
        script = _python_m("completion", "bash").stdout

        assert self._complete(script, "ev") == ["events"]
        assert self._complete(script, "--db", "x.db", "pl") == ["plot"]
        assert self._complete(script, "db", "") == ["upgrade", "downgrade", "current"]
        assert set(self._complete(script, "events", "S", "--t")) == {"--type", "--tail", "--table-prefix"}
        assert self._complete(script, "events", "") == []  # a value: the shell's file names
        assert "completion" in self._complete(script, "")

    def test_zsh_and_fish_scripts_name_every_command(self) -> None:
        """zsh loads the bash script through bashcompinit; fish gets one `complete` per command."""
        from sessionstore.cli._main import _parser

        commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
        zsh = _python_m("completion", "zsh").stdout
        fish = _python_m("completion", "fish").stdout

        assert (
            zsh.startswith("# zsh")
            and "bashcompinit" in zsh
            and "complete -o default -F _sessionstore" in zsh
        )
        for name in commands:
            assert f"-a {name} -d " in fish, name
        assert "__fish_seen_subcommand_from events' -l tail" in fish


def test_compact_says_what_it_did_and_how_to_undo_it(db: str) -> None:
    """The text output names the boundary event (as --json does) and the revert that undoes it."""
    for n in range(4):
        _run("append", "--db", db, "s-1", "--text", f"question {n} " * 50)
        _run("append", "--db", db, "s-1", "--text", f"answer {n} " * 50, "--role", "assistant")

    code, out = _run("compact", "s-1", "--db", db)
    boundary = json.loads(_run("events", "s-1", "--db", db, "--json", "--type", "compact_boundary")[1])

    assert code == 0
    assert f"boundary {boundary['event_id']}" in out
    assert f"undo with `sessionstore revert s-1 {boundary['event_id']}`" in out


class TestProgress:
    def _transcript(self, tmp_path: Path) -> Path:
        path = tmp_path / "small.jsonl"
        parent = None
        with path.open("w") as f:
            for n in range(5):
                uuid = f"00000000-0000-4000-8000-{n:012d}"
                entry = {
                    "type": "user",
                    "uuid": uuid,
                    "parentUuid": parent,
                    "sessionId": "small-session",
                    "message": {"role": "user", "content": f"line {n}"},
                }
                f.write(json.dumps(entry) + "\n")
                parent = uuid
        return path

    def test_import_on_a_terminal_shows_the_read_and_write_phases(self, db: str, tmp_path: Path) -> None:
        """rich's bars on stderr: each file as it is read (name, bytes, lines), then the lines written."""
        path = self._transcript(tmp_path)

        shown = _on_terminal("import", "--db", db, str(path), env=_env(NO_COLOR="1"))

        size = path.stat().st_size
        assert "reading 1 of 1 file, 5 lines: small.jsonl" in shown
        assert f"{size}/{size} bytes" in shown
        assert "writing events, lines" in shown and "5/5" in shown
        assert "small-session: 5 lines" in shown

    def test_verify_of_every_session_counts_them_on_a_terminal(self, db: str) -> None:
        """`verify` without a session draws a counting bar on stderr."""
        shown = _on_terminal("verify", "--db", db, "--no-pager", env=_env(NO_COLOR="1"))

        assert "verifying sessions" in shown and "1/?" in shown
        assert "1 sessions verified: 1 ok" in shown

    def test_no_progress_is_drawn_off_a_terminal(self, db: str, tmp_path: Path) -> None:
        """Piped, stderr holds no progress: the results alone, on stdout (verify's one line on
        stderr says what it did not check)."""
        path = self._transcript(tmp_path)

        imported = _python_m("import", "--db", db, str(path), env=_env())
        verified = _python_m("verify", "--db", db, env=_env())
        purged = _python_m("purge", "--db", db, "--older-than", "1d", "--dry-run", env=_env())

        assert imported.returncode == verified.returncode == purged.returncode == 0
        assert imported.stderr == purged.stderr == ""
        assert verified.stderr.splitlines() == [
            "sessionstore: token counts made after COMMIT (outside the hash chain) were not recounted: "
            "run `verify --counts` to check them (a tokenizer pass over the text)"
        ]
        assert imported.stdout.startswith("small-session: 5 lines")

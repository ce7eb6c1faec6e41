"""The command line, run in-process and as the installed console script."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sessionstore
from sessionstore.cli import main
from sessionstore.store import SCHEMA_REVISION


def _run(
    *argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[int, str]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_demo_runs_on_the_embedded_default_and_verifies(tmp_path: Path) -> None:
    """The main job: a fresh home gets a database, and the generated session goes through every
    stage with a gauge per turn, then the audit table and the checks."""
    code, out = _run("demo")
    lines = out.splitlines()
    gauges = [line for line in lines if line.startswith("turn ")]

    assert code == 0
    assert lines[0].startswith("database: sqlite:") and str(tmp_path / "home") in lines[0]
    assert 40 <= len(gauges) <= 80
    assert all(re.search(r"\[[#.|]{30}\] +[\d,]+/72,000 +\d+% left", line) for line in gauges)
    fired = " ".join(gauges)
    for stage in ("budget -", "microcompact -", "snip -", "collapse staged", "collapse -", "compact -"):
        assert stage in fired, stage
    assert "equal byte for byte to the log replayed without the collapse: True" in out
    assert "audit of " in out and "reverted collapse_committed" in out  # the rich table
    assert re.search(r"events: \d+; hash chain: ok", out)
    assert re.search(r"the last \(turn \d+\) rebuilt from the log matches its fingerprint", out)
    assert lines[-1].endswith("every check passed")


def test_demo_json_summary() -> None:
    """`demo --json` prints one object: every stage fired, the rollback restored the request,
    the chain verified and the last request replays to its fingerprint."""
    code, out = _run("demo", "--json")
    summary = json.loads(out)
    turns = summary["turns"]
    rollback = summary["collapse_rollback"]
    entries = summary["audit"]["entries"]

    assert code == 0
    assert summary["ok"] is True and all(summary["checks"].values())
    assert set(summary["stages"]) >= {
        "tool_result_persisted",
        "snip_applied",
        "microcompact_applied",
        "collapse_staged",
        "collapse_committed",
        "context_edit_reverted",
        "compact_boundary",
    }
    assert all(count >= 1 for count in summary["stages"].values())
    assert rollback["restored_byte_for_byte"] is True
    assert rollback["bytes_restored"] > rollback["bytes_collapsed"]
    reverted = next(e for e in entries if e["event_id"] == rollback["collapse_event_id"])
    assert reverted["kind"] == "collapse_committed" and reverted["reverted_by"] == rollback["revert_event_id"]
    with sessionstore.open_store(summary["database"]) as store:
        stored_events = store.last_seq(summary["session_id"])
    assert summary["verify"] == {"ok": True, "events": stored_events, "first_bad_seq": None}
    assert summary["replay"]["matches"] is True
    assert summary["replay"]["turn"] == summary["requests_served"] == len(turns)
    assert all(row["used"] < row["effective_window"] for row in turns)
    assert any(r["stage"] == "auto_compact" for row in turns for r in row["reports"])


def test_session_lifecycle_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """db upgrade, new, append (text and JSON lines), events, verify."""
    db = str(tmp_path / "cli.db")

    assert _run("db", "upgrade", "--db", db)[0] == 0
    assert _run("db", "current", "--db", db)[1].strip() == SCHEMA_REVISION
    assert _run("new", "--db", db, "--id", "cli-1")[1].strip() == "cli-1"
    assert _run("append", "--db", db, "cli-1", "--text", "hello", "--expected", "0")[1].startswith("seqs [1]")
    lines = json.dumps({"type": "message_appended", "role": "assistant", "content": "hi"}) + "\n"
    assert (
        _run("append", "--db", db, "cli-1", "--expected", "1", stdin=lines, monkeypatch=monkeypatch)[0] == 0
    )
    code, out = _run("events", "--db", db, "cli-1", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [e["payload"]["content"] for e in events] == ["hello", "hi"]
    assert _run("verify", "--db", db, "cli-1") == (0, "cli-1: ok (2 events)\n")

    code, _ = _run("append", "--db", db, "cli-1", "--text", "late", "--expected", "0")
    assert code == 1
    assert "expected last seq 0, but it is 2" in capsys.readouterr().err


def test_unmigrated_database_error_names_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configured but empty database fails with one line saying how to migrate it."""
    code, _ = _run("sessions", "--db", str(tmp_path / "empty.db"))

    assert code == 1
    assert "sessionstore db upgrade" in capsys.readouterr().err


def test_console_script_is_installed(tmp_path: Path) -> None:
    """`sessionstore` is on PATH next to the interpreter and runs."""
    script = shutil.which("sessionstore", path=str(Path(sys.executable).parent))
    assert script is not None
    (tmp_path / "x.db").touch()  # an empty SQLite database: `db current` never creates one

    done = subprocess.run(
        [script, "db", "current", "--db", str(tmp_path / "x.db")], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    """`python -m sessionstore` is the same command: same output, same exit status, same errors."""
    db = str(tmp_path / "m.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "m-1")

    def python_m(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "sessionstore", *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    verified = python_m("verify", "--db", db, "m-1")
    missing = python_m("verify", "--db", db, "no-such-session")
    usage = python_m("--help")

    assert verified.returncode == 0, verified.stderr
    assert verified.stdout == _run("verify", "--db", db, "m-1")[1]
    assert missing.returncode == 1
    assert missing.stderr.startswith("sessionstore: ") and "no-such-session" in missing.stderr
    assert usage.returncode == 0 and usage.stdout.startswith("usage: sessionstore ")


def test_context_and_show_print_the_views_as_json(tmp_path: Path) -> None:
    """`context --json` prints the request and token state; `show --json` every entry."""
    db = str(tmp_path / "views.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "v-1")
    _run("append", "--db", db, "v-1", "--text", "hello there")
    _run("append", "--db", db, "v-1", "--text", "hi!", "--role", "assistant")

    code, out = _run("context", "--db", db, "v-1", "--json")
    shown = [json.loads(line) for line in _run("show", "--db", db, "v-1", "--json")[1].splitlines()]
    readable = _run("show", "--db", db, "v-1")[1]

    payload = json.loads(out)
    assert code == 0
    assert payload["request"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hi!"}]},
    ]
    assert payload["tokens"]["used"] > 0
    assert payload["tokens"]["effective_window"] == 180_000
    assert [entry["seq"] for entry in shown] == [1, 2]
    assert "hello there" in readable


def test_every_printing_command_takes_json(tmp_path: Path) -> None:
    """sessions, new, append and verify print JSON with --json."""
    db = str(tmp_path / "j.db")
    _run("db", "upgrade", "--db", db)

    created = json.loads(_run("new", "--db", db, "--id", "j-1", "--json")[1])
    appended = json.loads(_run("append", "--db", db, "j-1", "--text", "x", "--json")[1])
    listed = json.loads(_run("sessions", "--db", db, "--json")[1])
    verified = json.loads(_run("verify", "--db", db, "j-1", "--json")[1])

    assert created["id"] == "j-1"
    assert appended["seqs"] == [1]
    assert listed["last_seq"] == 1
    assert verified["ok"] is True


def test_sessions_names_the_parent_of_a_fork_and_of_a_sub_agent(tmp_path: Path) -> None:
    """A fork's line says where it forked (`parent=P@SEQ`); a sub-agent's, which forks at no
    seq, only its parent (it printed `parent=P@None`)."""
    db = str(tmp_path / "lineage.db")
    with sessionstore.open_store(db, migrate=True) as store:
        store.create_session("p", events=[sessionstore.MessageAppended(role="user", content="hi")])
        store.create_session("p.fork", parent_session_id="p", fork_seq=1)
        store.create_session("p.agent", parent_session_id="p")

    lines = {line.split()[0]: line for line in _run("sessions", "--db", db)[1].splitlines()}

    assert lines["p.fork"].endswith("last_seq=1 parent=p@1")
    assert lines["p.agent"].endswith("last_seq=0 parent=p")


def test_snip_microcompact_and_revert_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each edit prints what it freed and the event a revert takes; revert restores the request."""
    db = str(tmp_path / "edits.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "e-1")
    store_lines = []
    for n in range(3):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"n": n}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "output line\n" * 200}
        store_lines += [
            {"type": "message_appended", "role": "user", "content": f"step {n}"},
            {"type": "message_appended", "role": "assistant", "content": [call], "api_message_id": f"m{n}"},
            {"type": "message_appended", "role": "user", "content": [result]},
        ]
    stdin = "".join(json.dumps(line) + "\n" for line in store_lines)
    monkeypatch = pytest.MonkeyPatch()
    try:
        _run("append", "--db", db, "e-1", stdin=stdin, monkeypatch=monkeypatch)
    finally:
        monkeypatch.undo()
    before = json.loads(_run("context", "--db", db, "e-1", "--json")[1])["request"]

    snipped = json.loads(_run("snip", "--db", db, "e-1", "--rounds", "1", "--json")[1])
    cleared = json.loads(_run("microcompact", "--db", db, "e-1", "--keep", "1", "--json")[1])
    readable = _run("revert", "--db", db, "e-1", cleared["event_id"])[1]
    _run("revert", "--db", db, "e-1", snipped["event_id"])
    after = json.loads(_run("context", "--db", db, "e-1", "--json")[1])["request"]
    code, _ = _run("revert", "--db", db, "e-1", snipped["event_id"])

    assert snipped["tokens_freed"] > 0
    assert cleared["tokens_freed"] > 0
    assert readable.startswith(f"reverted {cleared['event_id']}")
    assert after == before
    assert code == 1
    assert "already reverted" in capsys.readouterr().err


def test_db_commands_take_json(tmp_path: Path) -> None:
    """db upgrade / current / downgrade print {"database", "revision"} with --json."""
    db = str(tmp_path / "dbj.db")

    up = json.loads(_run("db", "upgrade", "--db", db, "--json")[1])
    now = json.loads(_run("db", "current", "--db", db, "--json")[1])
    down = json.loads(_run("db", "downgrade", "base", "--db", db, "--json")[1])

    assert (up["revision"], now["revision"], down["revision"]) == (SCHEMA_REVISION, SCHEMA_REVISION, None)


def test_collapse_from_the_cli_prints_tokens_and_reverts(tmp_path: Path) -> None:
    """collapse --from/--to records a revertible commit and prints tokens before and after."""
    db = str(tmp_path / "collapse.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "c-1")
    lines = []
    for n in range(4):
        lines += [
            {"type": "message_appended", "role": "user", "content": f"question {n}", "message_uuid": f"u{n}"},
            {
                "type": "message_appended",
                "role": "assistant",
                "content": f"answer {n} " * 50,
                "message_uuid": f"a{n}",
            },
        ]
    monkeypatch = pytest.MonkeyPatch()
    try:
        _run(
            "append",
            "--db",
            db,
            "c-1",
            stdin="".join(json.dumps(x) + "\n" for x in lines),
            monkeypatch=monkeypatch,
        )
    finally:
        monkeypatch.undo()
    before = json.loads(_run("context", "--db", db, "c-1", "--json")[1])["request"]

    outcome = json.loads(_run("collapse", "--db", db, "c-1", "--from", "u0", "--to", "a1", "--json")[1])
    collapsed = json.loads(_run("context", "--db", db, "c-1", "--json")[1])["request"]
    _run("revert", "--db", db, "c-1", outcome["event_id"])

    assert outcome["tokens_after"] < outcome["tokens_before"]
    assert len(collapsed["messages"]) == len(before["messages"]) - 4 + 1 - 1
    assert json.loads(_run("context", "--db", db, "c-1", "--json")[1])["request"] == before


def test_compact_from_the_cli_records_a_boundary(tmp_path: Path) -> None:
    """compact prints the boundary it recorded and the tokens before and after (offline summarizer)."""
    db = str(tmp_path / "compact.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "k-1")
    for n in range(3):
        _run("append", "--db", db, "k-1", "--text", f"question {n}")
        _run("append", "--db", db, "k-1", "--text", f"answer {n} " * 400, "--role", "assistant")

    code, out = _run("compact", "--db", db, "k-1", "--instructions", "keep numbers", "--json")
    outcome = json.loads(out)
    request = json.loads(_run("context", "--db", db, "k-1", "--json")[1])["request"]

    assert code == 0
    assert outcome["ok"] is True
    assert outcome["tokens_after"] < outcome["tokens_before"]
    assert len(request["messages"]) == 1
    assert "question 0" in request["messages"][0]["content"][0]["text"]


def test_compact_from_the_cli_is_refused_when_compaction_is_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With SESSIONSTORE_DISABLE_COMPACTION set, compact exits 1 with a clear error and records nothing."""
    db = str(tmp_path / "off.db")
    _run("db", "upgrade", "--db", db)
    _run("new", "--db", db, "--id", "k-1")
    _run("append", "--db", db, "k-1", "--text", "question")
    _run("append", "--db", db, "k-1", "--text", "answer " * 400, "--role", "assistant")
    before = json.loads(_run("context", "--db", db, "k-1", "--json")[1])["request"]
    monkeypatch.setenv("SESSIONSTORE_DISABLE_COMPACTION", "1")

    code, out = _run("compact", "--db", db, "k-1", "--json")

    assert code == 1
    assert out == ""
    assert "compaction is disabled for session 'k-1'" in capsys.readouterr().err
    assert json.loads(_run("context", "--db", db, "k-1", "--json")[1])["request"] == before


def test_demo_on_a_new_file_says_where_it_wrote_and_how_to_remove_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --db FILE` creates and migrates the file, and its hint erases the demo session."""
    monkeypatch.chdir(tmp_path)

    code, out = _run("demo", "--db", "try.db")
    hint = next(line for line in out.splitlines() if line.startswith("to remove the demo session: "))
    command = hint.split(": ", 1)[1].split(" (or delete", 1)[0]
    erased = _run(*shlex.split(command)[1:])

    assert code == 0
    assert f"(or delete {tmp_path / 'try.db'}, which the demo created)" in hint
    assert out.splitlines()[-1].endswith("every check passed")
    assert erased[0] == 0 and "erased" in erased[1]


def test_demo_in_memory_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`demo --db :memory:` says nothing was kept and writes no file, not even the embedded default."""
    monkeypatch.chdir(tmp_path)

    code, out = _run("demo", "--db", ":memory:")
    summary = json.loads(_run("demo", "--db", ":memory:", "--json")[1])

    assert code == 0
    assert "the database was in memory: nothing was kept" in out
    assert summary["remove"] is None
    assert list(tmp_path.iterdir()) == []

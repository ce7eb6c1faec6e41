"""Bad input: a typed ``SessionStoreError`` from the API, one ``sessionstore: ...`` line and a
documented exit status from the CLI, and nothing written."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sessionstore
from sessionstore import MessageAppended
from sessionstore.cli import main

from .test_audit import _scripted

SCRIPT = str(Path(sys.executable).parent / "sessionstore")


def _cli(
    *argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[int, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _one_error_line(err: str) -> str:
    """The single stderr line of a failed command (no traceback, nothing else)."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sessionstore: "), err
    assert "Traceback" not in err
    return lines[0]


def _console(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *argv], capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file holding session ``s-1`` with two messages."""
    path = str(tmp_path / "bad.db")
    with sessionstore.open_store(path, migrate=True) as store:
        store.create_session(
            "s-1",
            events=[
                MessageAppended(role="user", content="hello"),
                MessageAppended(role="assistant", content="hi"),
            ],
        )
    return path


# --- exit statuses ----------------------------------------------------------------------------


def test_a_malformed_expected_seq_is_a_usage_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--expected abc` is a malformed command line: argparse's usage error, exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(["append", "--db", db, "s-1", "--text", "x", "--expected", "abc"])

    assert exited.value.code == 2
    assert "argument --expected: must be an integer or 'any', not 'abc'" in capsys.readouterr().err


def test_invalid_json_on_stdin_is_one_error_line(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad stdin line names the line; exit 1; nothing of the batch is written."""
    lines = '{"type": "message_appended", "role": "user", "content": "ok"}\n{not json\n'

    code, _ = _cli("append", "--db", db, "s-1", stdin=lines, monkeypatch=monkeypatch)

    assert code == 1
    assert _one_error_line(capsys.readouterr().err).startswith("sessionstore: stdin line 2: invalid JSON")
    with sessionstore.open_store(db) as store:
        assert store.last_seq("s-1") == 2


def test_a_tampered_log_exits_with_the_integrity_status(tmp_path: Path) -> None:
    """verify and served exit 3 on tampering: distinct from an error (1) and a usage error (2)."""
    db = str(tmp_path / "t.db")
    with sessionstore.open_store(db, migrate=True) as store:
        session = _scripted(store)
        with store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql("DROP TRIGGER events_append_only_update")
            conn.exec_driver_sql(
                "UPDATE events SET payload = replace(payload, 'turn 0', 'turn X') WHERE seq = 2"
            )

    assert _cli("verify", "--db", db, session.id)[0] == 3
    assert _cli("served", "--db", db, session.id, "--turn", "1")[0] == 3


def test_export_to_a_missing_folder_is_one_error_line(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export -o /missing/dir/x`: exit 1, the path and the reason, nothing written."""
    target = tmp_path / "missing" / "dir" / "x.jsonl"

    code, _ = _cli("export", "--db", db, "s-1", "-o", str(target))

    assert code == 1
    assert _one_error_line(capsys.readouterr().err) == f"sessionstore: {target}: No such file or directory"
    assert not (tmp_path / "missing").exists()


def test_export_over_an_existing_file_needs_force(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing output file is kept unless --force: one line, exit 1."""
    target = tmp_path / "x.jsonl"
    target.write_text("keep me")

    code, _ = _cli("export", "--db", db, "s-1", "-o", str(target))

    assert code == 1
    assert "exists (use --force to overwrite)" in _one_error_line(capsys.readouterr().err)
    assert target.read_text() == "keep me"


def test_a_closed_pipe_ends_the_command_quietly(db: str) -> None:
    """`sessionstore events SID | head`: when the reader goes away, no traceback, no message."""
    with sessionstore.open_store(db) as store:
        store.append("s-1", [MessageAppended(role="user", content="x" * 200) for _ in range(2000)], "any")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already gone: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [SCRIPT, "events", "--db", db, "s-1"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)

    assert done.stderr == ""
    assert done.returncode == 141


def test_ctrl_c_during_an_import_prints_one_line(tmp_path: Path) -> None:
    """SIGINT in the middle of an import: one line on stderr, exit 130, no traceback."""
    transcript = tmp_path / "big.jsonl"
    with transcript.open("w") as f:
        parent = None
        for n in range(40_000):
            uuid = f"00000000-0000-4000-8000-{n:012d}"
            entry = {
                "type": "user",
                "uuid": uuid,
                "parentUuid": parent,
                "sessionId": "big-session",
                "message": {"role": "user", "content": f"line {n} " + "word " * 20},
            }
            f.write(json.dumps(entry) + "\n")
            parent = uuid
    db = str(tmp_path / "i.db")
    sessionstore.open_store(db, migrate=True).close()
    with subprocess.Popen(
        [SCRIPT, "import", "--db", db, "--progress", str(transcript)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stderr is not None
        assert proc.stderr.read(len(b"\rimporting:")) == b"\rimporting:"  # the import is under way
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read().decode()
        proc.wait(timeout=120)

    assert proc.returncode == 130
    assert "Traceback" not in rest
    assert rest.splitlines()[-1] == "sessionstore: interrupted"

"""`sessionstore erase` and `sessionstore purge`: receipts printed, forks refused, dry runs."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest

import sessionstore
from sessionstore.cli import main
from sessionstore.cli._erasure import parse_age
from sessionstore.errors import EXIT_ERROR, EXIT_OK, ValidationError


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "s.db")
    with sessionstore.open_store(path, migrate=True, token_counter=None) as store:
        store.create_session("root", events=[sessionstore.SessionStarted()])
        store.create_session("fork", parent_session_id="root", fork_seq=1)
        store.create_session("alone", events=[sessionstore.SessionStarted()], user="alice", tenant="t1")
    return path


def test_erase_prints_a_receipt_and_verify_shows_the_session_as_ok(db: str) -> None:
    status, out = _run("erase", "alone", "--reason", "user request", "--db", db, "--json")
    assert status == EXIT_OK
    receipt = json.loads(out)
    assert (receipt["session_id"], receipt["method"]) == ("alone", "purged")
    assert receipt["reason"] == "user request"
    assert receipt["event_count"] == 1
    status, out = _run("verify", "alone", "--db", db, "--json")
    assert status == EXIT_OK and json.loads(out)["chain_ok"]
    assert json.loads(out)["erasure"] == receipt
    status, out = _run("verify", "alone", "--db", db)
    assert status == EXIT_OK and "erased (purged" in out and "user request" in out
    status, out = _run("audit", "alone", "--db", db, "--json")
    assert status == EXIT_OK and json.loads(out)["erasure"] == receipt and json.loads(out)["entries"] == []
    status, out = _run("audit", "alone", "--db", db)
    assert status == EXIT_OK and out.startswith("audit of alone: erased (purged") and "user request" in out


def test_erase_refuses_a_parent_with_forks_unless_asked(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = _run("erase", "root", "--reason", "r", "--db", db)
    assert status == EXIT_ERROR
    assert "fork" in capsys.readouterr().err
    status, out = _run("erase", "root", "--with-forks", "--reason", "r", "--db", db)
    assert status == EXIT_OK
    assert [line.split()[0] for line in out.splitlines()] == ["root", "fork"]


def test_erase_by_user(db: str) -> None:
    argv = ["erase", "--user", "alice", "--tenant", "t1", "--reason", "account deleted", "--db", db]
    status, out = _run(*argv)
    assert status == EXIT_OK and out.split()[0] == "alone"
    with sessionstore.open_store(db, token_counter=None) as store:
        assert store.erasure("alone") is not None and store.erasure("root") is None


def test_purge_dry_run_changes_nothing_and_a_young_store_has_nothing_to_purge(db: str) -> None:
    status, out = _run("purge", "--older-than", "30d", "--dry-run", "--db", db)
    assert (status, out) == (EXIT_OK, "")
    with sessionstore.open_store(db, token_counter=None) as store:
        assert store.erasures() == []


def test_an_encrypted_session_is_read_with_the_master_key_from_the_environment(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SESSIONSTORE_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    assert _run("new", "--id", "secret", "--db", db)[0] == EXIT_OK
    assert _run("append", "secret", "--text", "hidden words", "--db", db)[0] == EXIT_OK
    assert "hidden words" in _run("events", "secret", "--db", db, "--json")[1]
    monkeypatch.delenv("SESSIONSTORE_MASTER_KEY")
    assert _run("events", "secret", "--db", db)[0] == EXIT_ERROR
    assert "encrypted" in capsys.readouterr().err
    assert b"hidden words" not in Path(db).read_bytes()


def test_the_audit_of_a_shredded_session_shows_its_receipt(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSIONSTORE_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    assert _run("new", "--id", "secret", "--db", db)[0] == EXIT_OK
    assert _run("append", "secret", "--text", "hidden words", "--db", db)[0] == EXIT_OK
    assert _run("erase", "secret", "--reason", "gdpr", "--db", db)[0] == EXIT_OK

    status, out = _run("audit", "secret", "--db", db, "--json")

    assert status == EXIT_OK
    assert json.loads(out)["erasure"]["method"] == "shredded" and "hidden words" not in out


def test_ages() -> None:
    assert parse_age("30d").days == 30 and parse_age("12h").seconds == 12 * 3600
    with pytest.raises(ValidationError, match="not an age"):
        parse_age("30 days")


def test_verify_all_with_kept_heads_explains_a_purged_session(db: str, tmp_path: Path) -> None:
    heads = tmp_path / "heads.txt"
    status, out = _run("heads", "--db", db)
    heads.write_text(out)
    assert _run("erase", "alone", "--reason", "gone for good", "--db", db)[0] == EXIT_OK

    status, out = _run("verify", "--heads", str(heads), "--db", db)

    assert status == EXIT_OK, out
    line = next(line for line in out.splitlines() if line.startswith("alone"))
    assert "ok" in line and "erased (purged" in line and "gone for good" in line
    assert out.splitlines()[-1].endswith("0 failed")

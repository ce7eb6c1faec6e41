"""The requests Claude Code recorded sending (``api-request*`` lines), rebuilt from the log.

The fixture was written by the real CLI (2.1.332); tests/test_claude_code_follow.py checks,
against the real CLI, that the rebuilt bodies are the ones the Messages API received.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sessionstore import Session, SessionStore, open_store
from sessionstore.claude_code import (
    compare_all_sent,
    compare_sent,
    export_claude_code,
    import_claude_code,
    sent_requests,
)
from sessionstore.cli import main
from sessionstore.errors import ValidationError

FIXTURE = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-agent"
SESSION = "257a4592-7adc-457b-93a7-b8b7d3494930"
MAIN_FILE = FIXTURE / f"{SESSION}.jsonl"


def _session(store: SessionStore) -> Session:
    import_claude_code(store, [FIXTURE])
    return Session(store, SESSION)


def test_every_recorded_request_is_rebuilt_in_order(store: SessionStore) -> None:
    session = _session(store)
    sent = sent_requests(session)

    lines = [json.loads(line) for line in MAIN_FILE.read_text().splitlines()]
    recorded = [entry for entry in lines if entry["type"] == "api-request"]
    assert [r.request_id for r in sent] == [entry["id"] for entry in recorded]
    assert [r.turn for r in sent] == list(range(1, len(recorded) + 1))
    first = sent[0].request
    assert first["model"] == "claude-opus-5-5" and "betas" not in first
    assert [b["text"] for b in first["system"]] == [
        "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
        "Be terse.",
    ]
    assert {tool["name"] for tool in first["tools"]} >= {"Read", "Write", "Bash", "Agent"}
    # The prompt with the reminder Claude Code put before it, then the environment block.
    assert [m["role"] for m in first["messages"]] == ["user", "system"]
    assert first["messages"][0]["content"][1]["text"] == "do it"
    # Each request keeps its base's messages and adds the turn's: the response, then the result.
    for earlier, later in itertools.pairwise(sent):
        kept = later.request["messages"][: len(earlier.request["messages"])]
        assert [m["role"] for m in kept] == [m["role"] for m in earlier.request["messages"]]
    last = sent[-1].request["messages"]
    assert any(b.get("id") == "toolu_4" for m in last if isinstance(m["content"], list) for b in m["content"])
    # The cache markers sit where Claude Code put them: the last message's first block.
    assert last[-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_the_log_rebuilds_what_was_sent_but_what_the_transcript_does_not_carry(store: SessionStore) -> None:
    session = _session(store)

    second = compare_sent(session, 2)
    assert second.differences == (
        "sent only: user message 1: system reminder: <system-reminder> Attribution for git commits and pull "
        "requests you create from ",
        "sent only: system message 2: text: # Environment You have been invoked in the following "
        "environment: - Primary work",
    )
    assert not second.same_messages
    last = compare_sent(session, len(sent_requests(session)))
    extra = last.differences[len(second.differences) :]
    # The task notification: plain user text in the transcript, a reminder in the request.
    assert extra[0].startswith("sent only: user message 12: system reminder: <system-reminder> [SYSTEM NOTIF")
    assert extra[1].startswith("rebuilt only: user message 11: text: <task-notification>")
    assert len(extra) == 2


def test_no_such_turn(store: SessionStore) -> None:
    session = _session(store)
    with pytest.raises(ValidationError, match="recorded 6 requests Claude Code sent; there is no turn 7"):
        compare_sent(session, 7)
    with pytest.raises(ValidationError, match="no turn 0"):
        compare_sent(session, 0)


def test_a_request_naming_a_blob_that_is_not_there_is_refused_naming_its_line(
    store: SessionStore, tmp_path: Path
) -> None:
    lines = MAIN_FILE.read_text().splitlines(keepends=True)
    first_blob = next(i for i, line in enumerate(lines) if '"type":"api-request-blob"' in line)
    path = tmp_path / MAIN_FILE.name
    path.write_text("".join(lines[:first_blob] + lines[first_blob + 1 :]))
    import_claude_code(store, [path])
    session = Session(store, SESSION)

    with pytest.raises(ValidationError, match=r"api-request entry on line \d+: names blobs not recorded"):
        sent_requests(session)
    # The lines themselves are kept as they were: export is unchanged by the modelling.
    assert "".join(line + "\n" for line in export_claude_code(store, SESSION)) == path.read_text()


def test_the_cli_shows_what_was_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "store.db")
    assert main(["db", "upgrade", "--db", db]) == 0
    assert main(["import", "--db", db, str(FIXTURE)]) == 0
    capsys.readouterr()

    assert main(["served", "--db", db, SESSION, "--turn", "2", "--as-sent"]) == 0
    text = capsys.readouterr().out
    assert "the log's rebuild differs" in text and "sent only: system message 2" in text

    assert main(["served", "--db", db, SESSION, "--turn", "2", "--as-sent", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["turn"] == 2 and len(shown["sent"]["messages"]) == 4 and len(shown["differences"]) == 2


def test_audit_sums_up_what_was_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "store.db")
    assert main(["db", "upgrade", "--db", db]) == 0
    assert main(["import", "--db", db, str(FIXTURE)]) == 0
    capsys.readouterr()

    assert main(["audit", "--db", db, SESSION]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Claude Code recorded 6 requests; at 6 of them the log's rebuild differs (14 blocks" in text

    assert main(["audit", "--db", db, SESSION, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["claude_code_requests"]
    with open_store(db) as store:
        expected = [c.differences for c in compare_all_sent(Session(store, SESSION))]
        assert expected == [compare_sent(Session(store, SESSION), turn).differences for turn in range(1, 7)]
    assert [tuple(turn["differences"]) for turn in listed] == expected
    assert [turn["turn"] for turn in listed] == [1, 2, 3, 4, 5, 6]

"""Compactions as current Claude Code (2.1.3xx) writes them: messages kept across the summary.

Since 2.1.3xx an automatic compaction keeps the latest messages verbatim: the transcript holds
the ``compact_boundary`` (``compactMetadata.preservedSegment`` {headUuid, anchorUuid, tailUuid},
``preservedMessages.uuids``, ``postTokens``, ``cumulativeDroppedTokens``), then attachment lines,
then the ``isCompactSummary`` line (the anchor). The request is the summary, then the kept
messages, then what followed.

The fixture was written by the real CLI (Claude Code 2.1.332, ``--bare``) against the local
Messages API: a prompt, then two resumed prompts each answered first with prompt-too-long, so
it compacted twice. ``test_the_real_cli_...`` writes such a transcript afresh when
``claude-agent-sdk`` (which ships the CLI) is installed, and compares our request with the one
Claude Code itself sent.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import Session, SessionStore, audit, validate_request
from sessionstore.claude_code import export_claude_code, import_claude_code
from sessionstore.cli import main

from ._claude_cli import project_folder, run_claude
from .messages_api import prompt_too_long, text_message

FIXTURE = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]


def _stripped(message: dict[str, Any]) -> list[str]:
    return [text.rstrip("\n") for text in _texts(message)]


def _check_imported(path: Path, store: SessionStore) -> tuple[str, dict[str, Any]]:
    """Everything the shape means, checked against the file itself; the session id and request."""
    lines = _lines(path)
    by_uuid = {line["uuid"]: line for line in lines if "uuid" in line}
    boundaries = [line for line in lines if line.get("subtype") == "compact_boundary"]
    session_id = import_claude_code(store, [path]).sessions[0].session_id
    events = store.read(session_id)
    compactions = [e.payload_dict() for e in events if e.type == "compact_boundary"]
    seq_of_message = {e.payload_dict()["message_uuid"]: e.seq for e in events if e.type == "message_appended"}
    request = Session(store, session_id).request()

    assert len(boundaries) == len(compactions) == 2
    for line, compaction in zip(boundaries, compactions, strict=True):
        metadata = line["compactMetadata"]
        summary = by_uuid[metadata["preservedSegment"]["anchorUuid"]]
        assert summary["isCompactSummary"] is True
        assert summary["parentUuid"] != line["uuid"]  # attachment lines come between
        assert compaction["summary"] == summary["message"]["content"]
        assert compaction["keep_from_seq"] == seq_of_message[metadata["preservedMessages"]["uuids"][0]]
    last = boundaries[-1]["compactMetadata"]
    kept = [by_uuid[u]["message"]["content"] for u in last["preservedMessages"]["uuids"]]
    validate_request(request)
    assert _texts(request["messages"][0]) == [compactions[-1]["summary"], *kept]
    assert "\n".join(export_claude_code(store, session_id)) == path.read_text(encoding="utf-8").rstrip("\n")
    return session_id, request


def test_the_fixture_imports_with_summaries_kept_messages_and_an_exact_export(tmp_path: Path) -> None:
    """Summary from the anchor, kept messages after it, a valid request, byte-identical export."""
    store = sessionstore.open_store(":memory:")
    _, request = _check_imported(FIXTURE, store)

    assert [(m["role"], _texts(m)[-1]) for m in request["messages"]][1:] == [("assistant", "pears are fine")]
    store.close()


def test_audit_shows_what_claude_code_recorded_about_each_compaction(tmp_path: Path) -> None:
    """Kept messages, tokens after and dropped so far: in the table and in --json."""
    db = str(tmp_path / "audit.db")
    assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
    assert main(["import", "--db", db, str(FIXTURE)], out=io.StringIO()) == 0
    session_id = _lines(FIXTURE)[0]["sessionId"]
    table, rows = io.StringIO(), io.StringIO()
    assert main(["audit", "--db", db, session_id], out=table) == 0
    assert main(["audit", "--db", db, session_id, "--json"], out=rows) == 0
    boundaries = [line for line in _lines(FIXTURE) if line.get("subtype") == "compact_boundary"]
    with sessionstore.open_store(db) as store:
        entries = [e for e in audit(Session(store, session_id)).entries if e.kind == "compact_boundary"]

    assert [e.details["source_metadata"] for e in entries] == [b["compactMetadata"] for b in boundaries]
    assert "878 dropped so far" in entries[1].what
    assert "1 messages kept verbatim from seq" in " ".join(table.getvalue().split())
    listed = json.loads(rows.getvalue())["entries"]
    assert [e["details"]["source_metadata"]["postTokens"] for e in listed] == [329, 329]


def _compacted_then_answered(answer: str) -> list[tuple[int, dict[str, Any]]]:
    """Prompt too long, so the CLI compacts: the summary, then the answer to the retried prompt."""
    return [
        prompt_too_long(250_000),
        text_message("<summary>We talked about fruit.</summary>"),
        text_message(answer),
    ]


@pytest.mark.claude_cli
def test_the_real_cli_compacts_twice_and_the_import_sends_what_it_sent(tmp_path: Path) -> None:
    """Claude Code's own request after its second compaction is the imported session's request."""
    home = tmp_path / "home"
    run_claude(home, [text_message("apples are red")], "first question about apples")
    (transcript,) = project_folder(home).glob("*.jsonl")
    resume = ("--resume", transcript.stem)
    run_claude(home, _compacted_then_answered("pears are green"), *resume, "second question about pears")
    sent = run_claude(
        home, _compacted_then_answered("plums are purple"), *resume, "third question about plums"
    )
    copy = tmp_path / transcript.name
    shutil.copyfile(transcript, copy)

    store = sessionstore.open_store(":memory:")
    _, request = _check_imported(copy, store)
    store.close()

    # Claude Code's request also holds attachments (rendered outside the transcript) and ends its
    # summary block with a newline the transcript line does not have: compare the messages' texts.
    theirs = [(m["role"], _stripped(m)) for m in sent[-1]["messages"] if m["role"] in ("user", "assistant")]
    ours = [(m["role"], _stripped(m)) for m in request["messages"]]
    assert ours == [*theirs, ("assistant", ["plums are purple"])]


def test_a_transcript_cut_before_the_summary_line_still_gives_a_valid_request(tmp_path: Path) -> None:
    """Claude Code stopped after writing the boundary: no empty text block, the kept prompt is sent."""
    lines = FIXTURE.read_text(encoding="utf-8").split("\n")
    boundary = next(i for i, line in enumerate(lines) if '"subtype":"compact_boundary"' in line)
    cut = tmp_path / FIXTURE.name
    cut.write_text("\n".join(lines[: boundary + 1]) + "\n", encoding="utf-8")
    kept = json.loads(lines[boundary])["compactMetadata"]["preservedMessages"]["uuids"]
    store = sessionstore.open_store(":memory:")
    session_id = import_claude_code(store, [cut]).sessions[0].session_id
    request = Session(store, session_id).request()
    prompts = {line["uuid"]: line["message"]["content"] for line in _lines(cut) if line.get("type") == "user"}

    validate_request(request)
    assert [_texts(m) for m in request["messages"]] == [[prompts[u] for u in kept]]
    store.close()


@pytest.mark.claude_cli
def test_the_real_clis_manual_compact_imports_with_its_summary(tmp_path: Path) -> None:
    """``/compact`` still writes the summary as the boundary's child: found, and nothing is kept."""
    home = tmp_path / "home"
    run_claude(home, [text_message("apples are red")], "first question about apples")
    (transcript,) = project_folder(home).glob("*.jsonl")
    run_claude(
        home,
        [text_message("<summary>We talked about apples.</summary>")],
        "--resume",
        transcript.stem,
        "/compact",
    )
    lines = _lines(transcript)
    boundary = next(line for line in lines if line.get("subtype") == "compact_boundary")
    summary = next(line for line in lines if line.get("isCompactSummary"))
    store = sessionstore.open_store(":memory:")
    session_id = import_claude_code(store, [transcript]).sessions[0].session_id
    (compaction,) = [e.payload_dict() for e in store.read(session_id) if e.type == "compact_boundary"]
    request = Session(store, session_id).request()

    assert summary["parentUuid"] == boundary["uuid"]
    assert compaction["summary"] == summary["message"]["content"]
    assert compaction["keep_from_seq"] == 0
    assert _texts(request["messages"][0])[0] == summary["message"]["content"]
    assert "first question about apples" not in json.dumps(request)
    store.close()

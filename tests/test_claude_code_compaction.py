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
import threading
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import Session, SessionStore, audit, validate_request
from sessionstore.claude_code import export_claude_code, follow_claude_code, import_claude_code
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


# --- preservedMessages as the boundary's only record of what it kept -------------------------

SID = "5e55c0de-0000-4000-8000-000000000001"


def _line(kind: str, key: str | None, parent: str | None, **fields: Any) -> dict[str, Any]:
    return {"parentUuid": parent, "type": kind, "uuid": key, "sessionId": SID, "version": "2.1.332", **fields}


def say(role: str, content: object) -> dict[str, Any]:
    return {"role": role, "content": content}


def _kept_transcript(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """A prompt, its answer, a second prompt kept across an automatic compaction: the boundary,
    an attachment, the summary (the kept messages' anchor), then the answer after it."""
    return [
        _line("user", "u1", None, message=say("user", "first question")),
        _line(
            "assistant",
            "a1",
            "u1",
            message={
                **say("assistant", [{"type": "text", "text": "first answer"}]),
                "id": "msg_a1",
                "model": "claude-opus-5-5",
                "stop_reason": "end_turn",
            },
        ),
        _line("user", "u2", "a1", message=say("user", "second question")),
        _line(
            "system",
            "b",
            None,
            subtype="compact_boundary",
            logicalParentUuid="u2",
            content="Conversation compacted",
            compactMetadata={"trigger": "auto", "preTokens": 900, **metadata},
        ),
        _line("attachment", "t", "b", attachment={"type": "date", "date": "2026-12-02"}),
        _line("user", "s", "t", isCompactSummary=True, message=say("user", "Summary: we talked.")),
        _line(
            "assistant",
            "a2",
            "s",
            message={
                **say("assistant", [{"type": "text", "text": "second answer"}]),
                "id": "msg_a2",
                "model": "claude-opus-5-5",
                "stop_reason": "end_turn",
            },
        ),
    ]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text(
        "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8"
    )
    return path


def _imported(path: Path) -> tuple[SessionStore, str, dict[str, Any], dict[str, int]]:
    """The store, the session, its compaction and each message uuid's seq."""
    store = sessionstore.open_store(":memory:")
    session_id = import_claude_code(store, [path]).sessions[0].session_id
    events = store.read(session_id)
    (compaction,) = [e.payload_dict() for e in events if e.type == "compact_boundary"]
    seqs = {e.payload_dict()["message_uuid"]: e.seq for e in events if e.type == "message_appended"}
    return store, session_id, compaction, seqs


SEGMENT = {"headUuid": "u2", "anchorUuid": "s", "tailUuid": "u2"}


def test_preserved_messages_alone_name_the_summary_and_the_kept_messages(tmp_path: Path) -> None:
    """No preservedSegment (Claude Code leaves it out when no kept message is on disk, or an
    older writer): the anchor and uuids of preservedMessages are enough."""
    path = _write(
        tmp_path / f"{SID}.jsonl",
        _kept_transcript({"preservedMessages": {"anchorUuid": "s", "uuids": ["u2"]}}),
    )
    store, session_id, compaction, seqs = _imported(path)
    request = Session(store, session_id).request()

    assert compaction["summary"] == "Summary: we talked."
    assert compaction["keep_from_seq"] == seqs["u2"]
    validate_request(request)
    assert [_texts(m) for m in request["messages"]] == [
        ["Summary: we talked.", "second question"],
        ["second answer"],
    ]
    assert "\n".join(export_claude_code(store, session_id)) == path.read_text(encoding="utf-8").rstrip("\n")
    store.close()


@pytest.mark.parametrize(
    "malformed",
    [
        "u2",
        {"anchorUuid": "s", "uuids": "u2"},
        {"anchorUuid": "s", "uuids": [["u2"]]},
        {"anchorUuid": "s", "uuids": [{"u2": 1}, "u2"]},
        {"anchorUuid": ["s"], "uuids": None},
    ],
)
def test_a_malformed_preserved_messages_falls_back_to_the_segment(tmp_path: Path, malformed: object) -> None:
    """Not an object, or uuids not a list of strings: ignored, the segment read instead."""
    metadata = {"preservedSegment": SEGMENT, "preservedMessages": malformed}
    path = _write(tmp_path / f"{SID}.jsonl", _kept_transcript(metadata))
    store, session_id, compaction, seqs = _imported(path)

    assert compaction["summary"] == "Summary: we talked."
    assert compaction["keep_from_seq"] == seqs["u2"]
    assert "\n".join(export_claude_code(store, session_id)) == path.read_text(encoding="utf-8").rstrip("\n")
    store.close()


def test_a_huge_kept_list_is_read_as_claude_code_reads_it_back_its_last_1536(tmp_path: Path) -> None:
    """Claude Code keeps the last 1,536 uuids of a longer list: u1, before them, is not kept."""
    uuids = ["u1", *(f"gone-{i}" for i in range(1_536)), "u2"]
    path = _write(
        tmp_path / f"{SID}.jsonl",
        _kept_transcript({"preservedMessages": {"anchorUuid": "s", "uuids": uuids}}),
    )
    store, _, compaction, seqs = _imported(path)

    assert compaction["keep_from_seq"] == seqs["u2"]
    store.close()


def test_audit_shows_tokens_after_and_duration_only_when_recorded_as_counts(tmp_path: Path) -> None:
    kept = {"preservedMessages": {"anchorUuid": "s", "uuids": ["u2"]}}
    what = []
    for name, recorded in (
        ("counted", {"postTokens": 52, "durationMs": 7}),
        ("hostile", {"postTokens": "52; DROP", "durationMs": -1}),
    ):
        (tmp_path / name).mkdir()
        path = _write(tmp_path / name / f"{SID}.jsonl", _kept_transcript({**kept, **recorded}))
        store, session_id, _, _ = _imported(path)
        (entry,) = [e for e in audit(Session(store, session_id)).entries if e.kind == "compact_boundary"]
        what.append(entry.what)
        store.close()

    assert what[0].endswith("[Claude Code: 1 messages kept verbatim from seq 7; 52 tokens after; took 7 ms]")
    assert what[1].endswith("[Claude Code: 1 messages kept verbatim from seq 7]")


def test_the_follower_settles_a_boundary_whose_summary_only_preserved_messages_names(tmp_path: Path) -> None:
    """Its summary hangs off an attachment, not the boundary: the anchor says it is written."""
    folder = tmp_path / "project"
    folder.mkdir()
    _write(
        folder / f"{SID}.jsonl", _kept_transcript({"preservedMessages": {"anchorUuid": "s", "uuids": ["u2"]}})
    )
    store = sessionstore.open_store(":memory:")
    stop = threading.Event()
    stop.set()  # one poll, then stop
    report = follow_claude_code(store, [folder], stop=stop, poll_interval=0.01)
    (compaction,) = [e.payload_dict() for e in store.read(SID) if e.type == "compact_boundary"]

    assert report.held == 0
    assert compaction["summary"] == "Summary: we talked."
    store.close()

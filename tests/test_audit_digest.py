"""The audit and the replays read the transcript's digest and the views the API context kept:
the same answers from snapshots as from the log, across compactions, and on a fork."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionStore
from sessionstore.audit._audit import audit, served_request, view_diff
from sessionstore.audit._tokens import token_timeline
from sessionstore.claude_code import compare_all_sent, import_claude_code, sent_requests
from sessionstore.claude_code._sent import _message_hash
from sessionstore.errors import DataCorruptionError, ValidationError
from sessionstore.pipeline._collapse import collapse
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import OfflineSummarizer
from sessionstore.projections._api_context import ApiContextProjection
from sessionstore.projections._api_records import ViewAtChange
from sessionstore.projections._base import PAGE, read_pages, rebuild
from sessionstore.projections._digest import DIGEST_WHOLE, TranscriptDigestProjection
from sessionstore.projections._snapshots import take_snapshots
from sessionstore.store import SnapshotRecord

from .test_audit import _named_turns, _scripted
from .test_claude_code_sent import FIXTURE, MAIN_FILE, SESSION


def _report(store: SessionStore, session_id: str, *, use_snapshots: bool = True) -> dict[str, Any]:
    return audit(Session(store, session_id, use_snapshots=use_snapshots)).to_dict()


def _resumed_report(
    store: SessionStore, session_id: str, snapshot_seq: int, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The audit resumed from the snapshots, asserting it read nothing before ``snapshot_seq``
    (the snapshots were used, not ignored and the log folded from seq 1)."""
    reads: list[int] = []
    read = store.read

    def spy(sid: str, from_seq: int = 1, to_seq: int | None = None) -> Any:
        reads.append(from_seq)
        return read(sid, from_seq, to_seq)

    with monkeypatch.context() as patch:
        patch.setattr(store, "read", spy)
        report = _report(store, session_id)
    assert reads and min(reads) >= snapshot_seq
    return report


def _digest_snapshots(store: SessionStore, session_id: str) -> list[int]:
    """Seqs of the session's digest snapshots (the store keeps only the latest reachable)."""
    projection = TranscriptDigestProjection()
    tokenizer = Session(store, session_id).tokenizer
    found = store.latest_snapshot(session_id, projection.name, projection.version, tokenizer)
    return [] if found is None else [found.seq]


def test_the_audit_is_the_same_from_snapshots_as_from_the_log(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot half way, then a snip, a collapse and a compaction after it: a reader resuming from
    the snapshots (digest and API context) lists what a fold from seq 1 lists, and so does the
    live session whose digest its appends kept current."""
    session = _named_turns(store, 8)
    live_before = audit(session).to_dict()  # builds the live session's digest, kept current from here
    take_snapshots(store, [session.id])
    assert _digest_snapshots(store, session.id) == [session.last_seq]
    assert _report(store, session.id, use_snapshots=False) == live_before
    snapshot_seq = session.last_seq
    assert _resumed_report(store, session.id, snapshot_seq, monkeypatch) == live_before

    sessionstore.pipeline.snip(session, rounds=2)
    collapse(session, OfflineSummarizer(), "p2", "a3")
    Pipeline(PipelineConfig()).prepare(session)
    compact(session, OfflineSummarizer(), up_to_uuid="a5")
    Pipeline(PipelineConfig()).prepare(session)

    from_log = _report(store, session.id, use_snapshots=False)
    kinds = [e["kind"] for e in from_log["entries"]]
    assert kinds == ["snip_applied", "collapse_staged", "collapse_committed", "compact_boundary"]
    assert from_log["requests_served"] == 2
    boundary = from_log["entries"][-1]
    # turn 0 snipped, turns 2-3 collapsed: what the boundary summarizes is turn 1 and turns 4-5
    replaced = ["p1", "c1", "r1", "a1", "p4", "c4", "r4", "a4", "p5", "c5", "r5", "a5"]
    assert boundary["details"]["replaced"]["uuids"] == replaced
    assert boundary["tokens_after"] is not None
    assert (
        _resumed_report(store, session.id, snapshot_seq, monkeypatch) == from_log
    )  # and the tail after them
    assert audit(session).to_dict() == from_log  # the live session's digest, folded as it went

    take_snapshots(store, [session.id])  # now past the compaction
    assert _resumed_report(store, session.id, session.last_seq, monkeypatch) == from_log


def test_the_scripted_audit_and_its_replays_are_the_same_from_snapshots(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every stage, a revert and served requests: the audit, each served replay, a view diff and
    the token gauge are the same resumed from snapshots taken at the end as folded from the log."""
    session = _scripted(store)
    without = Session(store, session.id, use_snapshots=False)
    expected = audit(without).to_dict()
    replays = [served_request(without, turn) for turn in range(1, expected["requests_served"] + 1)]
    diff = view_diff(without, 3, session.last_seq - 1)
    gauge = token_timeline(without).to_dict()
    assert [turn["source"] for turn in gauge["turns"]] == ["served"] * expected["requests_served"]

    take_snapshots(store, [session.id])
    assert _resumed_report(store, session.id, session.last_seq, monkeypatch) == expected
    resumed = Session(store, session.id)
    assert token_timeline(resumed).to_dict() == gauge
    assert audit(resumed).to_dict() == expected
    assert [served_request(resumed, r.turn) for r in replays] == replays
    assert all(r.matches for r in replays)
    assert view_diff(resumed, 3, session.last_seq - 1) == diff


def test_a_fork_audits_its_parents_compaction_from_its_own_fold_and_from_its_snapshot(
    store: SessionStore,
) -> None:
    """A fork made after a compaction lists it as the parent does, whether the fork's views are
    folded through the parent's events or resumed from the fork's own snapshots."""
    session = _named_turns(store, 6)
    compact(session, OfflineSummarizer(), up_to_uuid="a3")
    Pipeline(PipelineConfig()).prepare(session)
    fork = session.fork()
    sessionstore.pipeline.snip(fork, rounds=2)

    parent = _report(store, session.id)["entries"]
    parent_boundary = next(e for e in parent if e["kind"] == "compact_boundary")
    folded = _report(store, fork.id, use_snapshots=False)
    assert [e["kind"] for e in folded["entries"]] == ["compact_boundary", "snip_applied"]
    assert folded["entries"][0] == parent_boundary
    assert audit(fork).to_dict() == folded
    take_snapshots(store, [fork.id])
    assert _digest_snapshots(store, fork.id) == [fork.last_seq]
    assert _report(store, fork.id) == folded


def test_the_digest_is_the_transcript_cut_down(store: SessionStore) -> None:
    """The digest keeps the audited and served events whole and the main-thread messages as their
    role, uuid and blocks' types and tool-call ids, in seq order; its snapshot loads back equal."""
    session = _scripted(store)
    digest = session.transcript_digest
    transcript = session.transcript

    whole = [e for e in transcript if e.type in DIGEST_WHOLE]
    assert [e for e in digest if e.type in DIGEST_WHOLE] == whole
    messages = [e for e in transcript if e.type == "message_appended"]
    kept = [e for e in digest if e.type == "message_appended"]
    assert [e.seq for e in kept] == [e.seq for e in messages]
    for cut, full in zip(kept, messages, strict=True):
        assert cut.payload["role"] == full.payload["role"]
        assert cut.payload.get("message_uuid") == full.payload.get("message_uuid")
        content = full.payload["content"]
        if isinstance(content, str):
            assert cut.payload["content"] == ""
        else:
            assert [b["type"] for b in cut.payload["content"]] == [b["type"] for b in content]
            assert [b.get("id") or b.get("tool_use_id") for b in cut.payload["content"]] == [
                b.get("id") or b.get("tool_use_id") for b in content
            ]
    assert [e.seq for e in digest] == sorted(e.seq for e in digest)
    projection = TranscriptDigestProjection()
    state = projection.load(projection.dump(projection.initial()))
    for entry in digest:
        state.entries.append(entry)
    assert projection.load(projection.dump(state)).entries == digest


def test_the_requests_claude_code_sent_are_the_same_from_the_digest_snapshot(store: SessionStore) -> None:
    """Every recorded request, every comparison with the log's rebuild, and the token gauge of
    the API's usage reports, from a digest snapshot as from a fold of the log."""
    import_claude_code(store, [FIXTURE])
    expected = [c.to_dict() for c in compare_all_sent(Session(store, SESSION, use_snapshots=False))]
    assert len(expected) == 6
    gauge = token_timeline(Session(store, SESSION, use_snapshots=False)).to_dict()
    assert gauge["turns"] and {turn["source"] for turn in gauge["turns"]} == {"usage"}
    take_snapshots(store, [SESSION])
    assert _digest_snapshots(store, SESSION)
    assert [c.to_dict() for c in compare_all_sent(Session(store, SESSION))] == expected
    assert token_timeline(Session(store, SESSION)).to_dict() == gauge


@pytest.mark.parametrize("where", ["after the last request", "with no request at all"])
def test_a_malformed_blob_anywhere_is_refused_naming_its_line(
    store: SessionStore, tmp_path: Path, where: str
) -> None:
    """A blob line without a hash is refused, even after the last request or in a transcript that
    records no request: the digest says where it is without the log being read."""
    lines = MAIN_FILE.read_text().splitlines(keepends=True)
    if where == "with no request at all":
        lines = [line for line in lines if '"type":"api-request"' not in line]
    blob = json.loads(next(line for line in lines if '"type":"api-request-blob"' in line))
    del blob["hash"]
    lines.append(json.dumps(blob) + "\n")
    path = tmp_path / MAIN_FILE.name
    path.write_text("".join(lines))
    import_claude_code(store, [path])

    for use_snapshots in (False, True):
        with pytest.raises(ValidationError, match=rf"on line {len(lines)}: a blob needs a string 'hash'"):
            sent_requests(Session(store, SESSION, use_snapshots=use_snapshots))
        take_snapshots(store, [SESSION])


def test_a_paged_read_of_a_fork_is_its_whole_log(store: SessionStore) -> None:
    """Pages that straddle the fork point, ranges that stop short and run past the end."""
    session = _named_turns(store, 3)
    fork = session.fork(at_seq=7)
    fork.append([sessionstore.MessageAppended(role="user", content=f"more {n}") for n in range(4)])
    whole = [(e.seq, e.event_id) for e in fork.log.read(1, None)]
    assert len(whole) == 11
    for page in (1, 3, 7, 500):
        assert [(e.seq, e.event_id) for e in read_pages(fork.log.read, 1, None, page)] == whole
        assert [(e.seq, e.event_id) for e in read_pages(fork.log.read, 2, 9, page)] == whole[1:9]
        assert [(e.seq, e.event_id) for e in read_pages(fork.log.read, 5, 99, page)] == whole[4:]
    assert list(read_pages(fork.log.read, 12, None)) == []


TWO_COMPACTIONS = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as its blob recorded it: no ``cache_control`` markers."""
    content = message["content"]
    if isinstance(content, list):
        content = [{k: v for k, v in block.items() if k != "cache_control"} for block in content]
    return {**message, "content": content}


def _hashes(message: dict[str, Any]) -> set[str]:
    """The blob hashes ``message`` may be recorded under (a string is also one text block)."""
    found = {_message_hash(_unmarked(message))}
    if isinstance(message["content"], str):
        found.add(_message_hash({**message, "content": [{"type": "text", "text": message["content"]}]}))
    elif len(message["content"]) == 1 and message["content"][0].get("type") == "text":
        found.add(_message_hash({**message, "content": message["content"][0]["text"]}))
    return found


def test_every_rebuilt_sent_message_is_the_blob_its_request_names(
    store: SessionStore, tmp_path: Path
) -> None:
    """A response's blob is the message as it stood when a request named it: a later line with
    the same API message id (the two-compactions transcript's ``msg_after`` again, after its last
    request) changes no request rebuilt before it. A request repeated at the end makes the
    rebuild read that line."""
    lines = TWO_COMPACTIONS.read_text().splitlines()
    last = json.loads([text for text in lines if '"type":"api-request",' in text][-1])
    transcript = tmp_path / TWO_COMPACTIONS.name
    transcript.write_text("\n".join([*lines, json.dumps({**last, "id": "repeated"})]) + "\n")
    session = Session(store, import_claude_code(store, [transcript]).sessions[0].session_id)
    tails = {}
    for text in transcript.read_text().splitlines():
        line = json.loads(text)
        if line.get("type") == "api-request":
            tails[line["id"]] = line["tail"]
    sent = sent_requests(session)
    assert len(sent) == len(tails) == 6
    for request in sent:
        tail = tails[request.request_id]
        messages = request.request["messages"][len(request.request["messages"]) - len(tail) :]
        for digest, message in zip(tail, messages, strict=True):
            assert digest in _hashes(message), (request.turn, digest)
    compared = [c.to_dict() for c in compare_all_sent(session)]
    continued = "user message 1: text: This session"
    summary = [f"sent only: {continued}", f"rebuilt only: {continued}"]
    assert [
        (c["turn"], c["seq"], [d[: d.index(": text: ") + 20] for d in c["differences"]]) for c in compared
    ] == [
        (1, 9, []),
        (2, 25, []),
        (3, 35, summary),
        (4, 48, summary),
        (5, 58, summary),
        (6, 63, [*summary, "rebuilt only: assistant message 2: text: pears are fi"]),
    ]
    turn_4 = compared[3]["sent"]["messages"]
    assert [m["content"] for m in turn_4 if m["role"] == "assistant"] == [
        [{"type": "text", "text": "pears are fine"}]
    ]


def _tampered_api_snapshot(store: SessionStore, session: Session, change: Any) -> None:
    """A newer api_context snapshot whose views at changes ``change`` rewrote (a snapshot is
    database data: it can hold anything)."""
    session.append([MessageAppended(role="user", content="after the snapshots")])
    projection = ApiContextProjection()
    state = Session(store, session.id).api_state
    state.views_at_changes = change(state.views_at_changes)
    record = SnapshotRecord(
        session.id,
        projection.name,
        projection.version,
        session.tokenizer,
        session.last_seq,
        projection.dump(state),
    )
    store.put_snapshot(record)


@pytest.mark.parametrize(
    "change",
    [
        lambda views: [],
        lambda views: [v for v in views if v.tokens_after is None],
        lambda views: [dataclasses.replace(v, tokens_after=None) for v in views],
    ],
    ids=["no views", "no view at the boundary", "no token count after the boundary"],
)
def test_a_snapshot_lacking_a_view_at_a_change_is_a_corruption_naming_the_session(
    store: SessionStore, change: Any
) -> None:
    session = _named_turns(store, 6)
    sessionstore.pipeline.snip(session, rounds=1)
    compact(session, OfflineSummarizer(), up_to_uuid="a4")
    take_snapshots(store, [session.id])
    _tampered_api_snapshot(store, session, change)
    assert _report(store, session.id, use_snapshots=False)["entries"]
    with pytest.raises(
        DataCorruptionError, match=f"session {session.id}: the api_context snapshot"
    ) as raised:
        _report(store, session.id)
    assert raised.value.session_id == session.id


def test_a_snapshot_view_of_the_wrong_types_is_ignored_and_refolded(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    session = _named_turns(store, 6)
    compact(session, OfflineSummarizer(), up_to_uuid="a4")
    take_snapshots(store, [session.id])
    _tampered_api_snapshot(
        store, session, lambda views: [dataclasses.replace(v, seq=str(v.seq)) for v in views]
    )
    with caplog.at_level(logging.WARNING):
        assert _report(store, session.id) == _report(store, session.id, use_snapshots=False)
    assert "ignoring unreadable api_context snapshot" in caplog.text
    with pytest.raises(ValueError, match="bad seq"):
        ViewAtChange.from_json({**ViewAtChange(1, None, (), (), (), 0, 0).to_json(), "seq": "1"})
    with pytest.raises(ValueError, match="bad collapse_end_seqs"):
        ViewAtChange.from_json(
            {**ViewAtChange(1, None, ("c",), (1,), (2,), 0, 0).to_json(), "collapse_end_seqs": [None]}
        )


def _put(store: SessionStore, session: Session, projection: Any, seq: int, state: bytes) -> None:
    record = SnapshotRecord(session.id, projection.name, projection.version, session.tokenizer, seq, state)
    store.put_snapshot(record)


def test_an_unreadable_digest_or_api_snapshot_is_ignored_with_the_warning_every_reader_gives(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The digest and ``api_state_at`` resume through the same loader as every view: a snapshot
    that does not load is logged (projection, session, seq) and the log is folded instead."""
    session = _named_turns(store, 4)
    compact(session, OfflineSummarizer(), up_to_uuid="a2")
    expected = _report(store, session.id, use_snapshots=False)
    at = session.last_seq - 1
    view_at = Session(store, session.id, use_snapshots=False).api_state_at(at)
    _put(store, session, TranscriptDigestProjection(), session.last_seq, b"{not json")
    _put(store, session, ApiContextProjection(), at, b"{not json")
    with caplog.at_level(logging.WARNING, logger="sessionstore.projections._base"):
        assert _report(store, session.id) == expected
    assert f"ignoring unreadable transcript_digest snapshot of session {session.id}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sessionstore.projections._base"):
        assert Session(store, session.id, use_snapshots=False).api_state_at(at) == view_at
        assert Session(store, session.id).api_state_at(at) == view_at
    assert f"ignoring unreadable api_context snapshot of session {session.id} at seq {at}" in caplog.text


def test_take_snapshots_ignores_a_snapshot_past_the_head_and_snapshots_the_log(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot labelled beyond the last event is not resumed from by ``take_snapshots`` either:
    it warns, folds the log and writes a snapshot at the real last seq."""
    session = _named_turns(store, 3)
    projection = TranscriptDigestProjection()
    state = projection.initial()
    for event in store.read(session.id):
        state = projection.apply(state, event)
    _put(store, session, projection, session.last_seq + 5, projection.dump(state))
    with caplog.at_level(logging.WARNING, logger="sessionstore.projections._base"):
        take_snapshots(store, [session.id])
    assert f"transcript_digest snapshot of session {session.id} at seq {session.last_seq + 5}" in caplog.text
    assert "past the log's last event" in caplog.text
    found = store.latest_snapshot(
        session.id, projection.name, projection.version, session.tokenizer, session.last_seq
    )
    assert found is not None and found.seq == session.last_seq


def test_a_view_resumed_from_a_snapshot_reads_its_seq_alone_then_pages(store: SessionStore) -> None:
    """``rebuild`` checks the snapshot's own event exists by reading that seq alone, then reads the
    tail a page at a time, never the whole tail in one call."""
    session = _named_turns(store, 3)
    take_snapshots(store, [session.id])
    snapshot_seq = session.last_seq
    session.append([MessageAppended(role="user", content=f"more {n}") for n in range(4)])
    log = store.visible_log(session.id)
    reads: list[tuple[int, int | None]] = []

    def read(from_seq: int, to_seq: int | None) -> list[Any]:
        reads.append((from_seq, to_seq))
        return log.read(from_seq, to_seq)

    projection = ApiContextProjection()
    state, last = rebuild(store, session.id, projection, tokenizer=session.tokenizer, read=read)
    assert last == session.last_seq
    assert projection.dump(state) == projection.dump(
        Session(store, session.id, use_snapshots=False).api_state
    )
    assert reads[0] == (snapshot_seq, snapshot_seq)
    assert reads[1] == (snapshot_seq + 1, snapshot_seq + PAGE)

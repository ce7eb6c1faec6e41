"""The audit timeline, served-context replay and view diffs."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig
from sessionstore.audit._audit import audit, served_request, view_diff
from sessionstore.cli import main
from sessionstore.pipeline._collapse import collapse
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import AnthropicSummarizer, OfflineSummarizer

from .messages_api import prompt_too_long, text_message

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _scripted(store: sessionstore.SessionStore) -> Session:
    """A session that goes through every no-model stage, a collapse, a revert and a compaction."""
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0, cache_control=True)
    )
    pipeline = Pipeline(PipelineConfig(), clock=lambda: T0 + timedelta(minutes=5))
    for n in range(8):
        size = 60_000 if n == 1 else 800
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"n": n}}
        session.append(
            [
                MessageAppended(role="user", content=f"turn {n}", message_uuid=f"p{n}", timestamp=T0),
                MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}", timestamp=T0),
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "y\n" * (size // 2)}],
                ),
                MessageAppended(
                    role="assistant", content=f"finished {n}", message_uuid=f"a{n}", timestamp=T0
                ),
            ]
        )
        pipeline.prepare(session)
    late = Pipeline(PipelineConfig(), clock=lambda: T0 + timedelta(hours=2))
    late.prepare(session)  # the cache went cold: micro-compact clears old results
    report = collapse(session, OfflineSummarizer(), "p2", "a3")
    sessionstore.revert(session, report.event_ids[1])
    compact(session, OfflineSummarizer(), custom_instructions="keep the turn numbers")
    Pipeline(PipelineConfig(), clock=lambda: T0 + timedelta(hours=2, minutes=1)).prepare(session)
    return session


def test_audit_lists_every_operation_with_token_figures(store: sessionstore.SessionStore) -> None:
    """On every backend: persisted, micro-compact, collapse, revert and compaction, in order."""
    session = _scripted(store)

    report = audit(session)

    kinds = [e.kind for e in report.entries]
    assert kinds == [
        "tool_result_persisted",
        "microcompact_applied",
        "collapse_staged",
        "collapse_committed",
        "context_edit_reverted",
        "compact_boundary",
    ]
    persisted, cleared, _, committed, reverted, boundary = report.entries
    assert persisted.tokens_freed and persisted.tokens_freed > 10_000
    assert cleared.tokens_freed and cleared.tokens_freed > 0
    assert committed.reverted_by == reverted.event_id
    assert boundary.tokens_before and boundary.tokens_after is not None
    assert boundary.tokens_after < boundary.tokens_before
    assert boundary.details["summary"].startswith("1. Primary request and intent")
    assert report.requests_served == 10
    assert not report.breaker_open
    json.dumps(report.to_dict())


def test_served_replay_matches_each_recorded_request() -> None:
    """Every served request is rebuilt from the log byte for byte (fingerprint matches)."""
    store = sessionstore.open_store(":memory:")
    session = _scripted(store)

    replays = [served_request(session, n) for n in range(1, 11)]

    assert all(r.matches for r in replays)
    assert replays[-1].request["messages"][0]["content"][0]["text"].startswith("This session continues")
    assert replays[0].request != replays[-1].request


def test_tampered_event_breaks_the_replay_and_verify(tmp_path: Path) -> None:
    """Editing a stored message (as the owner) makes replay disagree and verify name the seq."""
    store = sessionstore.open_store(tmp_path / "t.db", migrate=True)
    session = _scripted(store)
    engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER events_append_only_update")
        conn.exec_driver_sql("UPDATE events SET payload = replace(payload, 'turn 0', 'turn X') WHERE seq = 2")

    tampered = Session(store, session.id, use_snapshots=False)

    assert not served_request(tampered, 1).matches
    assert store.verify(session.id).first_bad_seq == 2


def test_view_diff_shows_what_changed() -> None:
    """The diff between two seqs shows the added message."""
    store = sessionstore.open_store(":memory:")
    session = Session.create(store)
    session.append([MessageAppended(role="user", content="first")])
    before = session.last_seq
    session.append([MessageAppended(role="assistant", content="second")])

    diff = view_diff(session, before, session.last_seq)

    assert '+     "text": "second"' in diff
    assert "first" not in "".join(line for line in diff.splitlines() if line.startswith(("+", "-")))


def test_audit_served_and_diff_from_the_cli(tmp_path: Path, capsys: Any) -> None:
    """audit (table and --json), served --turn and diff print what the API returns."""
    db = tmp_path / "cli.db"
    store = sessionstore.open_store(db, migrate=True)
    session = _scripted(store)
    store.close()
    out_lines: list[str] = []

    def run(*argv: str) -> str:
        import io

        out = io.StringIO()
        code = main([*argv[:1], "--db", str(db), *argv[1:]], out=out)
        out_lines.append(str(code))
        return out.getvalue()

    table = run("audit", session.id)
    data = json.loads(run("audit", session.id, "--json"))
    served = json.loads(run("served", session.id, "--turn", "3", "--json"))
    diff = run("diff", session.id, "1", "5")

    assert "compact_boundary" in table
    assert "breaker: closed" in table
    assert len(data["entries"]) == 6
    assert served["matches"] is True
    assert diff.startswith("--- seq 1")
    assert out_lines == ["0", "0", "0", "0"]


def _named_turns(store: sessionstore.SessionStore, turns: int, *, prompt_after_result: int = -1) -> Session:
    """Turns of prompt p{n} -> call c{n} -> result r{n} -> answer a{n}, every uuid named. Turn
    ``prompt_after_result`` has no answer: the next prompt shares an API message with r{n}."""
    session = Session.create(store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0))
    for n in range(turns):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"n": n}}
        result = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"output {n}\n" * 200}]
        events = [
            MessageAppended(role="user", content=f"turn {n}", message_uuid=f"p{n}"),
            MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}", message_uuid=f"c{n}"),
            MessageAppended(role="user", content=result, message_uuid=f"r{n}"),
        ]
        if n != prompt_after_result:
            events.append(MessageAppended(role="assistant", content=f"done {n}", message_uuid=f"a{n}"))
        session.append(events)
    return session


def _seqs(session: Session, uuids: list[str]) -> list[int]:
    by_uuid = {e.payload.get("message_uuid"): e.seq for e in session.transcript}
    return [by_uuid[u] for u in uuids]


class TestWhatWasReplaced:
    def test_a_collapse_lists_the_messages_it_replaced_and_the_turn(
        self, store: sessionstore.SessionStore
    ) -> None:
        """The messages of the span, not the result it keeps (r0 answers a call before it), but the
        result after it that answers a call inside it (r2); the first request it shaped; its summary."""
        session = _named_turns(store, 5, prompt_after_result=0)
        pipeline = Pipeline(PipelineConfig())
        pipeline.prepare(session)  # turn 1: before the collapse
        collapse(session, OfflineSummarizer(), "p1", "a2")
        pipeline.prepare(session)  # turn 2: the first request without turns 1-2

        committed = next(e for e in audit(session).entries if e.kind == "collapse_committed")

        replaced = ["p1", "c1", "r1", "a1", "p2", "c2", "r2", "a2"]
        seqs = _seqs(session, replaced)
        assert committed.details["replaced"] == {
            "count": 8,
            "first_seq": seqs[0],
            "last_seq": seqs[-1],
            "uuids": replaced,
        }
        assert committed.turn == 2
        assert committed.details["summary"].startswith("1. Primary request and intent")
        assert f"replaced 8 messages (seq {seqs[0]}-{seqs[-1]})" in committed.what

    def test_a_compaction_lists_what_it_summarized_but_not_what_was_gone_already(
        self, store: sessionstore.SessionStore
    ) -> None:
        """After a snip and a collapse, a partial compaction replaces only the raw messages still
        shown: not the snipped turn, not the collapsed turns (their summary went), not what it keeps."""
        session = _named_turns(store, 6)
        sessionstore.pipeline.snip(session, rounds=2)  # turn 0
        collapse(session, OfflineSummarizer(), "p1", "a2")
        compact(session, OfflineSummarizer(), up_to_uuid="a4")

        boundary = next(e for e in audit(session).entries if e.kind == "compact_boundary")

        assert boundary.details["replaced"]["uuids"] == ["p3", "c3", "r3", "a3", "p4", "c4", "r4", "a4"]
        assert "ptl_dropped" not in boundary.details
        assert boundary.turn is None  # no request was served after it

    def test_a_compaction_lists_what_the_prompt_too_long_retries_dropped(
        self, store: sessionstore.SessionStore, messages_api: Any
    ) -> None:
        """The messages dropped before summarizing are listed: exactly those the retry did not send."""
        session = _named_turns(store, 6)
        summarizer = AnthropicSummarizer(
            anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0), "claude-opus-5-5"
        )
        messages_api.queue += [prompt_too_long(200_900), text_message("<summary>the later turns</summary>")]

        compact(session, summarizer)
        boundary = next(e for e in audit(session).entries if e.kind == "compact_boundary")

        retried = json.dumps(messages_api.requests[-1]["body"]["messages"])
        dropped = boundary.details["ptl_dropped"]["uuids"]
        replaced = boundary.details["replaced"]["uuids"]
        assert dropped and dropped == replaced[: len(dropped)] and len(dropped) < len(replaced)
        sent = {  # what each message puts in a request, by its uuid's letter
            "p": lambda n: f'"turn {n}"',
            "c": lambda n: f'"id": "t{n}"',
            "r": lambda n: f'"tool_use_id": "t{n}"',
            "a": lambda n: f'"done {n}"',
        }
        assert dropped == [u for u in replaced if sent[u[0]](u[1:]) not in retried]
        assert "dropped unsummarized (prompt too long)" in boundary.what

    def test_the_cli_audit_shows_the_replaced_uuids(self, tmp_path: Path) -> None:
        """`audit` (table and --json) answers which messages went at which turn and what replaced them."""
        db = tmp_path / "replaced.db"
        store = sessionstore.open_store(db, migrate=True)
        session = _named_turns(store, 5)
        collapse(session, OfflineSummarizer(), "p1", "a2")
        Pipeline(PipelineConfig()).prepare(session)
        store.close()

        def run(*argv: str) -> str:
            out = io.StringIO()
            assert main(["audit", "--db", str(db), session.id, *argv], out=out) == 0
            return out.getvalue()

        data = json.loads(run("--json"))
        table = run()

        committed = next(e for e in data["entries"] if e["kind"] == "collapse_committed")
        assert committed["details"]["replaced"]["uuids"] == ["p1", "c1", "r1", "a1", "p2", "c2", "r2", "a2"]
        assert committed["turn"] == 1
        assert "replaced: p1 c1 r1 a1 p2 c2 r2 a2" in table

    def test_a_snip_lists_the_messages_it_removed(self, store: sessionstore.SessionStore) -> None:
        """A snip removes turn 0 raw; a later one across a collapse removes turn 3 and the collapse's
        summary, not the collapsed messages again (the collapse lists them)."""
        session = _named_turns(store, 6)
        sessionstore.pipeline.snip(session, rounds=2)
        report = collapse(session, OfflineSummarizer(), "p1", "a2")
        sessionstore.pipeline.snip(session, rounds=6)  # turns 1-2 (collapsed) and turn 3

        first, second = (e for e in audit(session).entries if e.kind == "snip_applied")

        assert first.details["replaced"]["uuids"] == ["p0", "c0", "r0", "a0"]
        assert second.details["replaced"]["uuids"] == ["p3", "c3", "r3", "a3"]
        assert second.details["collapses_removed"] == [report.event_ids[1]]
        assert "removed 4 messages" in second.what and "the summaries of 1 collapse(s)" in second.what


def test_a_boundary_recorded_before_the_field_existed_reads_as_nothing_dropped() -> None:
    """A version-1 compact_boundary (no ptl_dropped_before_seq) is upcast: nothing dropped."""
    from sessionstore.events._base import decode_event, encode_event
    from sessionstore.events._context import CompactBoundary

    event = CompactBoundary(
        trigger="manual",
        strategy="llm",
        summarizer="offline",
        summary="s",
        pre_compact_tokens=10,
        post_compact_raw_tokens=2,
        ptl_retries=1,
    )
    payload = json.loads(encode_event(event))
    del payload["ptl_dropped_before_seq"]

    decoded = decode_event("compact_boundary", 1, json.dumps(payload), str(event.event_id))

    assert isinstance(decoded, CompactBoundary)
    assert (decoded.ptl_retries, decoded.ptl_dropped_before_seq) == (1, 0)
    assert CompactBoundary.SCHEMA_VERSION == 2

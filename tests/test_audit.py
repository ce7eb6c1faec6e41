"""The audit timeline, served-context replay and view diffs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig
from sessionstore._audit import audit, served_request, view_diff
from sessionstore._collapse import collapse
from sessionstore._compaction import compact
from sessionstore._summarizers import OfflineSummarizer
from sessionstore.cli import main

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

"""``sessionstore verify``: hash chains plus every projection snapshot against a full rebuild.

A snapshot that loads but disagrees with the rebuild is a failure (readers would serve it); one
that does not load is reported as ignored, because every reader skips it (docs/auditing.md).
"""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig
from sessionstore.audit._verify import verify_all, verify_session
from sessionstore.checkpoints import FileHistory
from sessionstore.cli import main
from sessionstore.projections._api_context import ApiContextProjection
from sessionstore.projections._base import Projection, fold
from sessionstore.projections._digest import TranscriptDigestProjection
from sessionstore.projections._file_history import FileHistoryProjection
from sessionstore.projections._transcript import TranscriptProjection
from sessionstore.store._contract import SnapshotRecord

from .test_store import _bypass_triggers_and_run

T0 = datetime(2026, 1, 1, tzinfo=UTC)


pytestmark = pytest.mark.store_contract


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _busy_session(store: sessionstore.SessionStore, root: Path, session_id: str = "busy") -> Session:
    """Turns with tool results, file checkpoints, pipeline edits and a revert, with snapshots
    written along the way (every 5 events) so each is folded forward over later events."""
    session = Session.create(
        store, session_id, model="claude-opus-5-5", config=SessionConfig(snapshot_every=5)
    )
    history = FileHistory(session, root)
    pipeline = Pipeline(PipelineConfig(), clock=lambda: T0 + timedelta(minutes=5))
    for n in range(6):
        history.snapshot_turn(f"p{n}")
        (root / f"f{n % 2}.txt").write_text(f"version {n}\n")
        history.track_before_edit(f"f{n % 2}.txt", tool_use_id=f"t{n}")
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
                MessageAppended(role="assistant", content=f"done {n}", message_uuid=f"a{n}", timestamp=T0),
            ]
        )
        pipeline.prepare(session)
        if n == 2:
            session.transcript  # noqa: B018 - load the transcript so snapshots include it
            session.transcript_digest  # noqa: B018 - and its digest
            history.save_snapshot()
    cleared = sessionstore.pipeline.microcompact(session, keep_recent=1)
    sessionstore.revert(session, cleared.event_ids[0])
    session.append([MessageAppended(role="user", content="one more")])
    return session


def _snapshot_seqs(store: sessionstore.SessionStore, sid: str) -> dict[str, int | None]:
    tokenizer = Session(store, sid).tokenizer
    seqs: dict[str, int | None] = {}
    for projection in (
        ApiContextProjection,
        TranscriptProjection,
        FileHistoryProjection,
        TranscriptDigestProjection,
    ):
        name = projection.name
        found = store.latest_snapshot(sid, name, projection.version, tokenizer)
        seqs[name] = None if found is None else found.seq
    return seqs


def test_a_clean_session_verifies_with_every_snapshot_matching(
    store: sessionstore.SessionStore, tmp_path: Path
) -> None:
    """On every backend: chain ok, and each projection's snapshot folded forward equals a rebuild."""
    session = _busy_session(store, tmp_path)
    last = store.last_seq(session.id)
    seqs = _snapshot_seqs(store, session.id)

    result = verify_session(store, session.id)

    assert result.ok, result.to_dict()
    assert result.chain.events_checked == last
    checks = {c.projection: c for c in result.projections}
    blobs = checks.pop("blobs")  # the session's backups and persisted tool results, read back
    assert set(checks) == {"api_context", "transcript", "file_history", "transcript_digest"}
    assert all(c.status == "match" for c in checks.values())
    assert (blobs.status, blobs.detail) == ("match", "3 blobs read")
    # Every snapshot is behind the head: the check folds it forward, it does not just reload it.
    assert all(seq is not None and seq < last for seq in seqs.values()), seqs
    assert {name: c.snapshot_seq for name, c in checks.items()} == seqs
    assert _snapshot_seqs(store, session.id) == seqs  # verify wrote no snapshot


def test_a_session_without_snapshots_reports_none(store: sessionstore.SessionStore) -> None:
    """No snapshot: only the chain is checked, and the line is the one it always was."""
    info = store.create_session("plain", events=[MessageAppended(role="user", content="hi")])

    result = verify_session(store, info.id)

    assert result.ok
    assert {c.status for c in result.projections} == {"none"}
    assert result.summary() == "plain: ok (1 events)"


def test_a_tampered_event_is_reported_with_its_seq(store: sessionstore.SessionStore, tmp_path: Path) -> None:
    """Editing a stored payload as the database owner: the chain names the seq (every backend)."""
    session = _busy_session(store, tmp_path)
    target = next(r for r in store.read(session.id) if '"turn 1"' in r.payload)
    _bypass_triggers_and_run(
        store,
        "UPDATE events SET payload = replace(payload, 'turn 1', 'turn X') "
        "WHERE session_id = :sid AND seq = :seq",
        sid=session.id,
        seq=target.seq,
    )

    result = verify_session(store, session.id)

    assert not result.ok
    assert result.chain.first_bad_seq == target.seq
    assert result.summary().startswith(f"busy: BROKEN at seq {target.seq}: stored content")
    # The edit is also before every snapshot, so the rebuild disagrees with them.
    mismatched = {c.projection for c in result.projections if c.status == "mismatch"}
    assert {"api_context", "transcript"} <= mismatched


def _put_stale(store: sessionstore.SessionStore, sid: str, tokenizer: str) -> int:
    """A snapshot labelled with the head's seq that holds the state of three events earlier."""
    last = store.last_seq(sid)
    projections: tuple[Projection[Any], ...] = (ApiContextProjection(), TranscriptProjection())
    for projection in projections:
        state = fold(projection, store.read(sid, 1, last - 3))
        record = SnapshotRecord(
            sid, projection.name, projection.version, tokenizer, last, projection.dump(state)
        )
        store.put_snapshot(record)
    return last


def test_a_stale_snapshot_is_a_mismatch(store: sessionstore.SessionStore, tmp_path: Path) -> None:
    """A snapshot that loads but holds the wrong state fails: readers would serve its request."""
    session = _busy_session(store, tmp_path)
    last = _put_stale(store, session.id, session.tokenizer)

    result = verify_session(store, session.id)

    assert result.chain.ok and not result.ok
    checks = {c.projection: c for c in result.projections}
    assert checks["api_context"].status == "mismatch"
    assert checks["api_context"].snapshot_seq == last
    assert "request bytes differ" in checks["api_context"].detail
    assert "used_tokens" in checks["api_context"].detail
    assert checks["transcript"].status == "mismatch"
    assert checks["file_history"].status == "match"
    assert f"busy: SNAPSHOT MISMATCH ({last} events); snapshots: api_context@{last} MISMATCH (" in (
        result.summary()
    )


def test_an_unreadable_snapshot_is_reported_but_ignored(store: sessionstore.SessionStore) -> None:
    """A snapshot that does not load is skipped by every reader, so it cannot change a result."""
    session = Session.create(store, "unreadable")
    session.append([MessageAppended(role="user", content="hello")])
    version = ApiContextProjection.version
    store.put_snapshot(SnapshotRecord(session.id, "api_context", version, session.tokenizer, 2, b"{not json"))

    result = verify_session(store, session.id)

    check = next(c for c in result.projections if c.projection == "api_context")
    assert (check.status, check.snapshot_seq, check.ok) == ("unreadable", 2, True)
    assert "ValueError: api_context snapshot has no header line" in check.detail
    assert result.ok
    assert "api_context@2 UNREADABLE" in result.summary()


def test_verify_all_pages_through_every_session(store: sessionstore.SessionStore) -> None:
    """Every session, in id order, whatever the page size."""
    ids = [f"s{n}" for n in range(5)]
    for sid in reversed(ids):
        store.create_session(sid, events=[MessageAppended(role="user", content=sid)])

    assert [r.session_id for r in verify_all(store, page_size=2)] == ids
    assert [r.session_id for r in verify_all(store, page_size=5)] == ids


def test_the_cli_verifies_one_session_or_all(tmp_path: Path) -> None:
    """verify [SESSION] [--json]: one line per session and a total; exit 3 when any fails."""
    db = str(tmp_path / "v.db")
    store = sessionstore.open_store(db, migrate=True)
    busy = _busy_session(store, tmp_path)
    store.create_session("calm", events=[MessageAppended(role="user", content="hi")])
    busy_events = store.last_seq(busy.id)
    snapshot_seqs = _snapshot_seqs(store, busy.id)
    store.close()

    code, out = _run("verify", "--db", db)
    assert code == 0
    assert out.splitlines() == [
        f"busy: ok ({busy_events} events); snapshots: "
        + ", ".join(f"{name}@{seq} ok" for name, seq in sorted(snapshot_seqs.items()))
        + "; blobs: ok (3 blobs read)",
        "calm: ok (1 events)",
        "2 sessions verified: 2 ok, 0 failed",
    ]

    store = sessionstore.open_store(db)
    _put_stale(store, busy.id, busy.tokenizer)
    store.close()
    code, out = _run("verify", "--db", db)
    assert code == 3
    assert "busy: SNAPSHOT MISMATCH" in out
    assert out.endswith("2 sessions verified: 1 ok, 1 failed\n")

    code, out = _run("verify", "--db", db, "busy", "--json")
    single = json.loads(out)
    assert code == 3
    assert (single["ok"], single["chain_ok"], single["first_bad_seq"]) == (False, True, None)
    assert {p["projection"]: p["status"] for p in single["projections"]}["api_context"] == "mismatch"

    code, out = _run("verify", "--db", db, "calm")
    assert (code, out) == (0, "calm: ok (1 events)\n")

    code, out = _run("verify", "--db", db, "--json")
    everything = json.loads(out)
    assert code == 3
    assert (everything["total"], everything["failed"], everything["ok"]) == (2, 1, False)
    assert [s["session_id"] for s in everything["sessions"]] == ["busy", "calm"]


def test_the_cli_names_a_tampered_seq(tmp_path: Path) -> None:
    """The brief's tamper: drop the SQLite trigger, UPDATE a payload; verify exits 3 naming the seq."""
    db = str(tmp_path / "t.db")
    store = sessionstore.open_store(db, migrate=True)
    store.create_session("t-1", events=[MessageAppended(role="user", content=f"m{n}") for n in range(4)])
    engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER events_append_only_update")
        conn.exec_driver_sql("UPDATE events SET payload = replace(payload, 'm2', 'mX') WHERE seq = 3")
    store.close()

    code, out = _run("verify", "--db", db, "t-1")
    assert (code, out) == (3, "t-1: BROKEN at seq 3: stored content does not match its hash\n")
    code, out = _run("verify", "--db", db, "--json")
    report = json.loads(out)
    assert code == 3
    assert report["sessions"][0]["first_bad_seq"] == 3


def _put_beyond_head(store: sessionstore.SessionStore, sid: str, tokenizer: str, ahead: int = 5) -> int:
    """Snapshots of today's state, labelled ``ahead`` seqs past the log's last event: what a
    truncated tail, or a row written straight into the snapshots table, leaves behind."""
    last = store.last_seq(sid)
    projections: tuple[Projection[Any], ...] = (ApiContextProjection(), TranscriptProjection())
    for projection in projections:
        state = fold(projection, store.read(sid))
        store.put_snapshot(
            SnapshotRecord(
                sid, projection.name, projection.version, tokenizer, last + ahead, projection.dump(state)
            )
        )
    return last + ahead


def test_readers_ignore_a_snapshot_past_the_head(
    store: sessionstore.SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot labelled beyond the last event is not served: the reader folds from seq 1,
    warns, and the next append succeeds (it would otherwise expect a seq that does not exist)."""
    session = Session.create(store, "ahead", config=SessionConfig(snapshot_every=0))
    session.append([MessageAppended(role="user", content="hello")])
    last = session.last_seq
    _put_beyond_head(store, session.id, session.tokenizer)

    with caplog.at_level(logging.WARNING, logger="sessionstore.projections._base"):
        resumed = Session(store, session.id, SessionConfig(snapshot_every=0))
    assert resumed.last_seq == last
    assert resumed.request_bytes() == Session(store, session.id, use_snapshots=False).request_bytes()
    assert [entry.seq for entry in resumed.transcript] == list(range(1, last + 1))
    assert f"snapshot of session ahead at seq {last + 5}" in caplog.text
    assert "past the log's last event" in caplog.text

    resumed.append([MessageAppended(role="user", content="still appendable")])
    assert store.last_seq(session.id) == last + 1


def test_verify_fails_on_a_snapshot_past_the_head(store: sessionstore.SessionStore) -> None:
    """verify names the projection and both seqs, and fails."""
    session = Session.create(store, "ahead")
    session.append([MessageAppended(role="user", content="hello")])
    beyond = _put_beyond_head(store, session.id, session.tokenizer)

    result = verify_session(store, session.id)

    assert result.chain.ok and not result.ok
    checks = {c.projection: c for c in result.projections}
    assert checks["api_context"].status == "beyond_head"
    assert checks["api_context"].snapshot_seq == beyond
    assert checks["transcript"].status == "beyond_head"
    assert checks["file_history"].status == "none"
    assert f"api_context@{beyond} BEYOND_HEAD (snapshot seq {beyond} is past the log's last seq 2" in (
        result.summary()
    )


@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_a_blob_deleted_or_replaced_behind_the_store_fails_plain_verify_at_its_seq(
    store: sessionstore.SessionStore, change: str
) -> None:
    """Blobs are outside the hash chain: plain verify reads back every blob the session's events
    name, so one deleted (through a guard row, every trigger in place) or replaced (triggers off)
    fails it, naming the seq and the blob; a blob no event names is not the session's to check."""
    sid = store.create_session("s", events=[sessionstore.SessionStarted()]).id
    ref = store.put_blob(b"full tool output " * 100, session_id=sid)
    persisted = sessionstore.ToolResultPersisted(
        tool_use_id="t1", blob_sha256=ref.sha256, original_chars=ref.size,
        preview="p", reason="size", location="l",
    )  # fmt: skip
    store.append(sid, [persisted], expected_seq=1)
    store.put_blob(b"named by no event", session_id=sid)
    clean = verify_session(store, sid)
    assert clean.ok and clean.summary() == "s: ok (2 events); blobs: ok (1 blob read)"

    if change == "deleted":
        with store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(text("INSERT INTO erasure_guard (target) VALUES (:t)"), {"t": f"blob:{ref.sha256}"})
            conn.execute(text("DELETE FROM blobs WHERE sha256 = :h"), {"h": ref.sha256})
            conn.execute(text("DELETE FROM erasure_guard"))
    else:
        _bypass_triggers_and_run(
            store,
            "UPDATE blobs SET data = :d, compression = 'none' WHERE sha256 = :h",
            d=b"other",
            h=ref.sha256,
        )
    result = verify_session(store, sid)

    assert result.chain.ok  # the event still names the blob: the chain proves no more
    assert not result.ok
    what = "missing" if change == "deleted" else "does not match its hash"
    assert result.summary().startswith(
        "s: BLOB MISMATCH (2 events); blobs: MISMATCH "
        f"(1 of 1 blobs missing or altered: seq 2: blob {ref.sha256} "
    )
    assert what in result.summary()

"""Erasure on the append-only log, on every backend: the guarded purge of plaintext sessions,
crypto-shredding of encrypted ones, receipts in verify, forks, and retention.

The proof that erasure is real: a unique marker written into messages, tool results, blobs and
snapshots is nowhere in the database files afterwards (the SQLite file and its WAL after a
checkpoint; a pg_dump of the test schema).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from sessionstore import SessionStore
from sessionstore.audit import audit
from sessionstore.errors import (
    AppendOnlyViolation,
    EncryptionKeyError,
    ErasureRefusedError,
    SessionErasedError,
    SessionExistsError,
    SessionNotFoundError,
    ValidationError,
)
from sessionstore.events import MessageAppended, SessionStarted, ToolResultPersisted
from sessionstore.projections import Session, SessionConfig
from sessionstore.store import SnapshotRecord
from sessionstore.store._crypto import LocalKeyProvider
from sessionstore.store._schema import ERASED_GUARDED
from sessionstore.store._sql import translate_errors

from .conftest import PG_URL, Backend

# Every test runs against the sync store and the async one (through tests/_async_adapter.py).
pytestmark = pytest.mark.store_contract

PG_DUMP = "/usr/lib/postgresql/15/bin/pg_dump"
MASTER = LocalKeyProvider(bytes(range(32)))


@pytest.fixture(params=["plaintext", "encrypted"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def estore(backend: Backend, mode: str) -> Iterator[SessionStore]:
    """A store on each backend, plaintext or encrypted."""
    store = backend.open(encryption=MASTER if mode == "encrypted" else None)
    yield store
    store.close()


def _conversation(store: SessionStore, sid: str, marker: str, **create: Any) -> None:
    """A session whose message, tool result, persisted blob and snapshot all hold ``marker``."""
    store.create_session(sid, events=[SessionStarted()], **create)
    blob = store.put_blob(f"full tool output {marker} ".encode() * 40, session_id=sid)
    store.visible_log(sid).append(
        [
            MessageAppended(role="user", content=f"my secret is {marker}"),
            MessageAppended(
                role="assistant",
                content=[{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"q": marker}}],
            ),
            MessageAppended(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": "toolu_1", "content": f"found {marker}"}],
            ),
            ToolResultPersisted(
                tool_use_id="toolu_1",
                blob_sha256=blob.sha256,
                original_chars=blob.size,
                preview=f"preview {marker}",
                reason="size",
                location=f"sessionstore blob {blob.sha256}",
            ),
        ],
        "any",
    )
    session = Session(store, sid, SessionConfig(snapshot_every=0))
    session.snapshot()
    assert store.latest_snapshot(sid, "api_context", session._api_projection.version, session.tokenizer)


def _database_bytes(backend: Backend) -> bytes:
    """Everything the database holds on disk (SQLite: file + WAL after a checkpoint) or in a dump."""
    if backend.is_postgres:
        schema = re.search(r"search_path%3D(\w+)", backend.url)
        assert schema is not None and PG_URL is not None
        dump = subprocess.run(
            [PG_DUMP, "--schema", schema.group(1), PG_URL.replace("postgresql+psycopg://", "postgresql://")],
            check=True,
            capture_output=True,
        )
        return dump.stdout
    path = Path(backend.url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


# --- erase: the common contract --------------------------------------------------------------


def test_an_erased_session_reads_as_erased_and_verifies_with_its_receipt(
    estore: SessionStore, mode: str
) -> None:
    _conversation(estore, "s1", "MARK-A")
    _conversation(estore, "keep", "MARK-KEEP")
    head = estore.head("s1")
    events = estore.last_seq("s1")

    (receipt,) = estore.erase("s1", reason="user request #7")

    assert receipt.method == ("shredded" if mode == "encrypted" else "purged")
    assert (receipt.head_hash, receipt.event_count, receipt.reason) == (head.hash, events, "user request #7")
    assert receipt.snapshots_dropped >= 1
    assert estore.erasure("s1") == receipt
    with pytest.raises(SessionErasedError, match=r"s1.*erased"):
        estore.read("s1")
    with pytest.raises(SessionErasedError):
        estore.append("s1", [MessageAppended(role="user", content="more")], expected_seq="any")
    with pytest.raises(SessionErasedError):
        estore.put_blob(b"x", session_id="s1")
    assert estore.latest_snapshot("s1", "api_context", 1, "cl100k_base") is None
    report = estore.verify("s1")
    assert report.ok and report.erasure == receipt and report.head == head.hash
    assert estore.verify("s1", head=head).ok  # the anchor kept outside still matches
    # The other session is untouched.
    assert estore.verify("keep").ok
    assert "MARK-KEEP" in estore.read("keep")[1].payload
    # Erasing again is idempotent: the same receipt, nothing else changes.
    assert estore.erase("s1", reason="again") == [receipt]
    # The id is not reused.
    with pytest.raises(SessionExistsError):
        estore.create_session("s1")


def test_the_audit_of_an_erased_session_is_its_receipt(estore: SessionStore, mode: str) -> None:
    _conversation(estore, "s1", "MARK-A")
    _conversation(estore, "keep", "MARK-KEEP")
    (receipt,) = estore.erase("s1", reason="user request #7")

    report = audit(estore, "s1")

    assert report.erasure == receipt and report.entries == [] and report.requests_served == 0
    assert report.to_dict()["erasure"] == receipt.to_dict()
    assert "MARK-A" not in json.dumps(report.to_dict())
    kept = audit(estore, "keep")
    assert kept.erasure is None and kept.to_dict()["erasure"] is None
    assert [entry.kind for entry in kept.entries] == ["tool_result_persisted"]
    assert kept == audit(Session(estore, "keep"))
    with pytest.raises(SessionErasedError):
        Session(estore, "s1")


def test_no_plaintext_of_an_erased_session_is_left_in_the_database(
    shared_backend: Backend, mode: str
) -> None:
    """The database files (an in-memory database has none) hold no trace of the marker."""
    marker = f"ERASE-ME-{uuid.uuid4().hex}"
    with shared_backend.open(encryption=MASTER if mode == "encrypted" else None) as store:
        _conversation(store, "gone", marker)
        _conversation(store, "kept", "STILL-HERE-5f1c")
        if mode == "plaintext":  # the marker really is in the files before
            assert marker.encode() in _database_bytes(shared_backend)

        store.erase("gone", reason="gdpr")

        stored = _database_bytes(shared_backend)
    assert marker.encode() not in stored
    assert (b"STILL-HERE-5f1c" in stored) == (mode == "plaintext")


def test_verify_after_a_purge_states_the_gap(estore: SessionStore, mode: str) -> None:
    _conversation(estore, "a", "M1")
    before = [e.position for e in estore.read("a")]
    _conversation(estore, "b", "M2")

    (receipt,) = estore.erase("a", reason="retention")

    assert (receipt.first_position, receipt.last_position) == (before[0], before[-1])
    assert "retention" in receipt.summary() and f"positions {before[0]}-{before[-1]}" in receipt.summary()
    remaining = estore.read_all()
    if mode == "plaintext":
        assert all(e.session_id == "b" for e in remaining)
    else:  # shredded: the sealed events stay, marked, and cannot be decoded
        erased = [e for e in remaining if e.session_id == "a"]
        assert len(erased) == len(before) and all(e.erased for e in erased)
        with pytest.raises(SessionErasedError):
            _ = erased[0].event
        assert estore.verify("a").events_checked == len(before)


def test_an_erasure_needs_a_reason_and_an_existing_session(estore: SessionStore) -> None:
    estore.create_session("x")
    with pytest.raises(ValidationError, match="reason"):
        estore.erase("x", reason="  ")
    with pytest.raises(SessionNotFoundError):
        estore.erase("nope", reason="r")
    assert estore.erasure("x") is None


# --- forks and sub-agents --------------------------------------------------------------------


def test_erasing_a_parent_is_refused_with_its_forks_listed(estore: SessionStore) -> None:
    _conversation(estore, "root", "R")
    estore.create_session("fork1", parent_session_id="root", fork_seq=2)
    estore.create_session("child", parent_session_id="fork1")

    with pytest.raises(ErasureRefusedError) as refused:
        estore.erase("root", reason="r")

    assert refused.value.descendants == ("fork1", "child")
    assert estore.erasures() == []
    assert len(estore.visible_log("fork1").read()) == 2  # nothing changed


def test_with_forks_erases_the_whole_tree_in_one_go(estore: SessionStore) -> None:
    _conversation(estore, "root", "R")
    estore.create_session("fork1", parent_session_id="root", fork_seq=2)
    estore.create_session("child", parent_session_id="fork1")
    estore.create_session("other")

    receipts = estore.erase("root", reason="r", with_forks=True)

    assert [r.session_id for r in receipts] == ["root", "fork1", "child"]
    assert [r.parent_session_id for r in receipts] == [None, "root", "fork1"]
    for sid in ("root", "fork1", "child"):
        with pytest.raises(SessionErasedError):
            estore.visible_log(sid).read()
        assert estore.verify(sid).ok
    estore.read("other")


def test_erasing_a_fork_leaves_its_parent(estore: SessionStore) -> None:
    _conversation(estore, "root", "R")
    estore.create_session("fork1", parent_session_id="root", fork_seq=2)
    estore.visible_log("fork1").append([MessageAppended(role="user", content="fork only")], "any")

    estore.erase("fork1", reason="r")

    assert len(estore.read("root")) == 5
    assert estore.verify("root").ok
    with pytest.raises(SessionErasedError):
        estore.create_session("fork2", parent_session_id="fork1")


# --- the guard: ordinary changes stay refused --------------------------------------------------


def _raw(store: SessionStore, statement: str) -> None:
    with translate_errors(), store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text(statement))


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM events WHERE session_id = 's'",
        "UPDATE events SET payload = '{}' WHERE session_id = 's'",
        "DELETE FROM sessions WHERE id = 's'",
        "UPDATE sessions SET metadata = '{}' WHERE id = 's'",
        "DELETE FROM blobs",
        "UPDATE blobs SET size = 0",
        "DELETE FROM erasures",
        "UPDATE erasures SET reason = 'forged'",
    ],
)
def test_ordinary_updates_and_deletes_are_still_refused(backend: Backend, statement: str) -> None:
    store = backend.open()
    try:
        _conversation(store, "s", "M")
        store.create_session("t")
        store.erase("t", reason="a receipt to protect")
        with pytest.raises(AppendOnlyViolation):
            _raw(store, statement)
        # A guard for another session opens nothing of this one (and UPDATE never).
        if "events" in statement or "sessions" in statement:
            engine = store.engine  # type: ignore[attr-defined]
            with pytest.raises(AppendOnlyViolation), translate_errors(), engine.begin() as conn:
                conn.execute(text("INSERT INTO erasure_guard (target) VALUES ('session:other')"))
                conn.execute(text(statement))
        assert store.verify("s").ok and len(store.read("s")) == 5
    finally:
        store.close()


# --- an erased id stays erased ----------------------------------------------------------------


def _snapshot_of(sid: str, seq: int = 1) -> SnapshotRecord:
    return SnapshotRecord(sid, "api_context", 1, "cl100k_base", seq, b'{"forged": true}')


def test_no_store_writes_a_snapshot_or_blob_of_an_erased_session(backend: Backend, mode: str) -> None:
    """After an erasure, a store with the key provider and one without both refuse a snapshot and
    a blob of the session: nothing of it is written again, and verify still shows the receipt."""
    keyed = backend.open(encryption=MASTER if mode == "encrypted" else None)
    try:
        _conversation(keyed, "s1", "MARK-A")
        (receipt,) = keyed.erase("s1", reason="user request")
        stores = [keyed] if backend.name == "sqlite-memory" else [keyed, backend.open()]
        try:
            for store in stores:
                with pytest.raises(SessionErasedError, match=r"'s1' was erased") as caught:
                    store.put_snapshot(_snapshot_of("s1"))
                assert (caught.value.session_id, caught.value.method) == ("s1", receipt.method)
                with pytest.raises(SessionErasedError):
                    store.put_blob(b"new bytes", session_id="s1")
                assert store.latest_snapshot("s1", "api_context", 1, "cl100k_base") is None
                report = store.verify("s1")
                assert report.ok and report.erasure == receipt
        finally:
            for store in stores[1:]:
                store.close()
    finally:
        keyed.close()


def test_a_store_without_the_key_writes_no_plaintext_snapshot_or_blob_of_an_encrypted_session(
    shared_backend: Backend,
) -> None:
    """A snapshot or blob written in the clear beside sealed events would be read back as the
    session's own by the keyed store: a store without the key provider refuses both."""
    with shared_backend.open(encryption=MASTER) as keyed:
        keyed.create_session("s", events=[SessionStarted(), MessageAppended(role="user", content="hi")])
    with shared_backend.open() as plain:
        with pytest.raises(EncryptionKeyError, match=r"'s' is encrypted: a snapshot"):
            plain.put_snapshot(_snapshot_of("s", 2))
        with pytest.raises(EncryptionKeyError, match=r"'s' is encrypted: a blob"):
            plain.put_blob(b"in the clear", session_id="s")
    with shared_backend.open(encryption=MASTER) as keyed:
        assert keyed.latest_snapshot("s", "api_context", 1, "cl100k_base") is None
        with translate_errors(), keyed.engine.connect() as conn:  # type: ignore[attr-defined]
            refs = conn.execute(text("SELECT count(*) FROM blob_refs")).scalar()
            blobs = conn.execute(text("SELECT count(*) FROM blobs")).scalar()
    assert (refs, blobs) == (0, 0)


def _erased_row(table: str, sid: str) -> tuple[str, dict[str, Any]]:
    """An INSERT of a row naming ``sid`` into ``table``, and its parameters."""
    now: dict[str, Any] = {"at": datetime.now(UTC)}
    statements: dict[str, tuple[str, dict[str, Any]]] = {
        "sessions": ("INSERT INTO sessions (id, created_at, metadata) VALUES (:s, :at, '{}')", now),
        "events": (
            "INSERT INTO events (session_id, seq, event_id, type, schema_version, payload, prev_hash, "
            "hash, created_at) VALUES (:s, 99, :id, 'message_appended', 1, '{}', :h, :h, :at)",
            {**now, "id": str(uuid.uuid4()), "h": "0" * 64},
        ),
        "snapshots": (
            "INSERT INTO snapshots (session_id, projection, projection_version, tokenizer, seq, state, "
            "created_at) VALUES (:s, 'api_context', 1, 'cl100k_base', 1, :state, :at)",
            {**now, "state": b"{}"},
        ),
        "session_keys": (
            "INSERT INTO session_keys (session_id, key_id, wrapped_key, created_at) "
            "VALUES (:s, 'k', :w, :at)",
            {**now, "w": b"key"},
        ),
        "blob_refs": ("INSERT INTO blob_refs (session_id, sha256) VALUES (:s, :h)", {"h": "a" * 64}),
        "token_counts": ("INSERT INTO token_counts (session_id, seq, token_count) VALUES (:s, 2, 5)", {}),
    }
    statement, params = statements[table]
    return statement, {**params, "s": sid}


_MOVES = {
    "snapshots": "UPDATE snapshots SET session_id = :s WHERE session_id = 'live'",
    "blob_refs": "UPDATE blob_refs SET session_id = :s WHERE session_id = 'live'",
}


@pytest.mark.parametrize("case", [*(f"insert {t}" for t in ERASED_GUARDED), *(f"move {t}" for t in _MOVES)])
def test_the_database_refuses_every_row_naming_an_erased_session(
    backend: Backend, mode: str, case: str
) -> None:
    """Past the store, with every trigger in place: a row naming an erased session (shredded or
    purged), inserted or moved there, is refused by the database as SessionErasedError."""
    kind, table = case.split()
    store = backend.open(encryption=MASTER if mode == "encrypted" else None)
    try:
        _conversation(store, "s1", "MARK-A")
        _conversation(store, "live", "MARK-LIVE", metadata={})
        (receipt,) = store.erase("s1", reason="user request")
        engine = store.engine  # type: ignore[attr-defined]
        with translate_errors(), engine.begin() as conn:  # a live session's row to move
            conn.execute(
                text("INSERT INTO blob_refs (session_id, sha256) VALUES ('live', :h)"), {"h": "b" * 64}
            )
        statement, params = _erased_row(table, "s1") if kind == "insert" else (_MOVES[table], {"s": "s1"})
        with pytest.raises(SessionErasedError) as caught, translate_errors(), engine.begin() as conn:
            conn.execute(text(statement), params)
        if backend.is_postgres:  # SQLite's trigger can raise a literal only: the store names it
            assert (caught.value.session_id, caught.value.method) == ("s1", receipt.method)
        assert "session erased" in str(caught.value) or "'s1' was erased" in str(caught.value)
        assert store.latest_snapshot("s1", "api_context", 1, "cl100k_base") is None
        assert store.verify("s1").ok
    finally:
        store.close()


@pytest.mark.parametrize("store_api", ["sync"], indirect=True)  # patches this process's store module
def test_the_database_refusal_names_the_session_when_the_stores_check_is_skipped(
    backend: Backend, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that does not check for the receipt (an older version, a race) is refused by the
    database; the store raises the session's full SessionErasedError on both backends."""
    from sessionstore.store import _sql

    store = backend.open(encryption=MASTER if mode == "encrypted" else None)
    try:
        _conversation(store, "s1", "MARK-A")
        (receipt,) = store.erase("s1", reason="user request")
        monkeypatch.setattr(_sql, "erased_error", lambda *args: None)
        monkeypatch.setattr(type(store), "_sealing", lambda self, sid: _sql._PLAINTEXT)
        monkeypatch.setattr(type(store), "_refuse_plaintext", lambda self, conn, sid, what: None)
        with pytest.raises(SessionErasedError) as caught:
            store.put_snapshot(_snapshot_of("s1"))
        erased_at = receipt.erased_at.isoformat()
        assert (caught.value.session_id, caught.value.method, caught.value.erased_at) == (
            "s1",
            receipt.method,
            erased_at,
        )
        assert store.latest_snapshot("s1", "api_context", 1, "cl100k_base") is None
    finally:
        store.close()


def _counts_of(store: SessionStore, sid: str) -> int:
    with translate_errors(), store.engine.connect() as conn:  # type: ignore[attr-defined]
        query = text("SELECT count(*) FROM token_counts WHERE session_id = :s")
        return int(conn.execute(query, {"s": sid}).scalar_one())


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE token_counts SET token_count = token_count + 168900",
        "DELETE FROM token_counts WHERE session_id = 's'",
        "TRUNCATE token_counts",
    ],
)
def test_deferred_token_counts_are_append_only_and_go_only_with_an_erasure(
    backend: Backend, mode: str, statement: str
) -> None:
    """token_counts refuses UPDATE, DELETE (and TRUNCATE on PostgreSQL) like the log, with every
    trigger in place; an erasure still removes the session's counts."""
    if statement.startswith("TRUNCATE") and not backend.is_postgres:
        pytest.skip("SQLite has no TRUNCATE")
    store = backend.open(encryption=MASTER if mode == "encrypted" else None)
    try:
        _conversation(store, "s", "M")
        store.read("s")
        store.store_token_counts()
        stored = _counts_of(store, "s")
        assert stored > 0

        with pytest.raises(AppendOnlyViolation, match="append-only"):
            _raw(store, statement)
        assert _counts_of(store, "s") == stored
        store.erase("s", reason="user request")
        assert _counts_of(store, "s") == 0
    finally:
        store.close()


# --- encryption at rest ----------------------------------------------------------------------


def test_encrypted_payloads_blobs_and_snapshots_are_sealed(backend: Backend) -> None:
    store = backend.open(encryption=MASTER)
    try:
        _conversation(store, "s", "SEALED-MARK")
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            payloads = [p for (p,) in conn.execute(text("SELECT payload FROM events"))]
            blob_rows = [bytes(d) for (d,) in conn.execute(text("SELECT data FROM blobs"))]
            states = [bytes(s) for (s,) in conn.execute(text("SELECT state FROM snapshots"))]
        assert payloads and all(p.startswith("sessionstore-sealed:v1:") for p in payloads)
        assert blob_rows and all(b"SEALED-MARK" not in b for b in blob_rows)
        assert states and all(b"SEALED-MARK" not in s for s in states)
        # Reading gives the plaintext, and the chain (over the ciphertext) verifies.
        assert "SEALED-MARK" in store.read("s", verify=True)[1].payload
        persisted = store.read("s")[-1].event
        assert isinstance(persisted, ToolResultPersisted)
        assert b"SEALED-MARK" in store.get_blob(persisted.blob_sha256, session_id="s")
        assert store.verify("s").ok
    finally:
        store.close()


def test_an_encrypted_append_is_still_idempotent(backend: Backend) -> None:
    store = backend.open(encryption=MASTER)
    try:
        store.create_session("s")
        event = MessageAppended(role="user", content="hello")
        first = store.append("s", [event], expected_seq=0)
        again = store.append("s", [event], expected_seq=0)  # a retry after a lost reply
        assert again.deduplicated and again.seqs == first.seqs
        changed = event.model_copy(update={"content": "other"})
        with pytest.raises(Exception, match="different content"):
            store.append("s", [changed], expected_seq="any")
    finally:
        store.close()


def test_blobs_of_encrypted_sessions_are_not_shared(backend: Backend) -> None:
    store = backend.open(encryption=MASTER)
    try:
        store.create_session("a")
        store.create_session("b")
        ref_a = store.put_blob(b"same bytes", session_id="a")
        ref_b = store.put_blob(b"same bytes", session_id="b")
        assert ref_a == ref_b  # the caller's reference is the content's SHA-256 ...
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            rows = [k for (k,) in conn.execute(text("SELECT sha256 FROM blobs"))]
        assert len(rows) == 2 and ref_a.sha256 not in rows  # ... the rows are per session, keyed
        store.erase("a", reason="r")
        assert store.get_blob(ref_b.sha256, session_id="b") == b"same bytes"
        with pytest.raises(SessionErasedError):
            store.get_blob(ref_a.sha256, session_id="a")
        with pytest.raises(ValidationError, match="session_id"):
            store.put_blob(b"no session")
    finally:
        store.close()


def test_a_fork_reads_its_parents_sealed_prefix_and_blobs(backend: Backend) -> None:
    store = backend.open(encryption=MASTER)
    try:
        _conversation(store, "root", "PREFIX")
        store.create_session("fork", parent_session_id="root", fork_seq=5)
        visible = store.visible_log("fork").read()
        assert "PREFIX" in visible[1].payload
        persisted = visible[-1].event
        assert isinstance(persisted, ToolResultPersisted)
        assert b"PREFIX" in store.get_blob(persisted.blob_sha256, session_id="fork")
    finally:
        store.close()


def test_encrypted_sessions_need_their_master_key(shared_backend: Backend) -> None:
    backend = shared_backend  # several stores open one database
    with backend.open(encryption=MASTER) as store:
        store.create_session("s", events=[MessageAppended(role="user", content="x")])
    with backend.open() as plain, pytest.raises(EncryptionKeyError, match="key provider"):
        plain.read("s")
    with backend.open() as plain, pytest.raises(EncryptionKeyError, match="key provider"):
        plain.append("s", [MessageAppended(role="user", content="in the clear?")], expected_seq="any")
    other = LocalKeyProvider(os.urandom(32))
    with backend.open(encryption=other) as wrong, pytest.raises(EncryptionKeyError, match="master key"):
        wrong.read("s")
    # Erasing needs no key: destroying it is the point.
    with backend.open() as plain:
        assert plain.erase("s", reason="r")[0].method == "shredded"


def test_a_sealed_blob_read_without_the_key_says_the_session_is_encrypted(shared_backend: Backend) -> None:
    """Not a KeyError (no such blob): the blob is there, sealed; the error says the session is
    encrypted and what reads it, for the session and for its fork."""
    backend = shared_backend  # several stores open one database
    with backend.open(encryption=MASTER) as store:
        store.create_session("s", events=[SessionStarted()])
        ref = store.put_blob(b"tool output " * 40, session_id="s")
        store.create_session("fork", parent_session_id="s", fork_seq=1)

    for session_id in ("s", "fork"):
        refused = pytest.raises(EncryptionKeyError, match="is encrypted: open the store with its key")
        with backend.open() as plain, refused:
            plain.get_blob(ref.sha256, session_id=session_id)
    with backend.open(encryption=MASTER) as store:
        assert store.get_blob(ref.sha256, session_id="fork") == b"tool output " * 40


# --- retention -------------------------------------------------------------------------------


def _between(store: SessionStore, before: str, after: str) -> Any:
    """A moment after ``before``'s last activity and before ``after``'s first event."""
    older, newer = store.read(before)[-1].created_at, store.read(after)[0].created_at
    assert older < newer
    return older + (newer - older) / 2


def _midway(earlier: datetime, later: datetime) -> datetime:
    """The moment halfway between two timestamps the store wrote, the first strictly earlier."""
    assert earlier < later
    return earlier + (later - earlier) / 2


def _last_activity(store: SessionStore, sid: str) -> datetime:
    """The session's newest event's timestamp, or its creation's when it has none."""
    events = store.read(sid)
    return events[-1].created_at if events else store.get_session(sid).created_at


def _dangling(store: SessionStore) -> list[str]:
    """Sessions whose row names a parent that has no row."""
    rows = store.list_sessions(limit=1000)
    ids = {info.id for info in rows}
    return [info.id for info in rows if info.parent_session_id not in (None, *ids)]


def test_retention_erases_what_the_policy_selects(estore: SessionStore) -> None:
    estore.create_session("old", events=[SessionStarted()])
    estore.create_session("old-parent", events=[SessionStarted()])
    estore.create_session("old-fork", parent_session_id="old-parent", events=[SessionStarted()])
    estore.create_session("fresh", events=[SessionStarted()])
    now = _between(estore, "old-fork", "fresh") + timedelta(days=30)

    plan = estore.retention_plan(timedelta(days=30), now=now)
    assert plan.expired == ("old", "old-parent", "old-fork") and plan.kept == {}

    dry = estore.purge_expired(timedelta(days=30), reason="30-day policy", dry_run=True, now=now)
    assert dry.expired == plan.expired and dry.receipts == () and estore.erasures() == []

    done = estore.purge_expired(timedelta(days=30), reason="30-day policy", now=now)
    assert [r.session_id for r in done.receipts] == ["old", "old-parent", "old-fork"]
    assert all(r.reason == "30-day policy" for r in done.receipts)
    assert [r.session_id for r in estore.erasures()] == ["old", "old-fork", "old-parent"]
    assert estore.retention_plan(timedelta(days=30), now=now).expired == ()
    estore.read("fresh")


def test_retention_keeps_a_parent_whose_fork_is_still_active(estore: SessionStore) -> None:
    estore.create_session("parent", events=[SessionStarted()])
    estore.create_session("fork", parent_session_id="parent", fork_seq=1, events=[SessionStarted()])
    now = _between(estore, "parent", "fork") + timedelta(days=30)

    plan = estore.retention_plan(timedelta(days=30), now=now)

    assert plan.expired == () and plan.kept == {"parent": ("fork",)}
    assert estore.purge_expired(timedelta(days=30), reason="r", now=now).receipts == ()
    assert len(estore.read("parent")) == 1
    with pytest.raises(ValidationError, match="older_than"):
        estore.retention_plan(timedelta(0))


def test_retention_goes_by_the_newest_event_not_the_creation(estore: SessionStore) -> None:
    """A session created before the cutoff but written to after it is kept; one whose newest
    event, or whose creation when it has none, is before the cutoff is erased."""
    estore.create_session("busy", events=[SessionStarted()])
    estore.create_session("quiet", events=[SessionStarted(), MessageAppended(role="user", content="bye")])
    estore.create_session("quiet-empty")
    estore.create_session("fresh-empty")
    estore.create_session("busy-fork", parent_session_id="busy", fork_seq=1)
    estore.append("busy", [MessageAppended(role="user", content="still here")], expected_seq=1)
    cutoff = _midway(_last_activity(estore, "quiet-empty"), _last_activity(estore, "fresh-empty"))
    now = cutoff + timedelta(days=30)
    assert estore.get_session("busy").created_at < cutoff < _last_activity(estore, "busy")
    assert _last_activity(estore, "quiet") < cutoff

    plan = estore.retention_plan(timedelta(days=30), now=now)
    done = estore.purge_expired(timedelta(days=30), reason="30-day policy", now=now)

    assert plan.cutoff == cutoff
    assert plan.expired == ("quiet", "quiet-empty") and plan.kept == {}
    assert [r.session_id for r in done.receipts] == ["quiet", "quiet-empty"]
    assert len(estore.read("busy")) == 2 and estore.verify("busy").ok
    assert [e.type for e in estore.visible_log("busy-fork").read()] == ["session_started"]
    assert estore.erasure("fresh-empty") is None


@pytest.mark.parametrize("hours", [5, -5])
def test_retention_takes_now_in_any_time_zone(estore: SessionStore, hours: int) -> None:
    """``now`` with a UTC offset is the same instant as in UTC: the cutoff and what it selects
    do not move by the offset (SQLite keeps timestamps as UTC text)."""
    estore.create_session("old", events=[SessionStarted()])
    estore.create_session("new", events=[SessionStarted()])
    now_utc = _between(estore, "old", "new") + timedelta(days=30)
    elsewhere = now_utc.astimezone(timezone(timedelta(hours=hours)))

    plan = estore.retention_plan(timedelta(days=30), now=elsewhere)
    done = estore.purge_expired(timedelta(days=30), reason="r", now=elsewhere)

    assert plan.cutoff == now_utc - timedelta(days=30)
    assert plan.expired == ("old",) and [r.session_id for r in done.receipts] == ["old"]
    assert len(estore.read("new")) == 1


def test_retention_refuses_a_now_without_a_time_zone(estore: SessionStore) -> None:
    """A naive ``now`` names no instant (PostgreSQL would read it in the server's time zone,
    SQLite as UTC): refused before anything is read."""
    estore.create_session("s", events=[SessionStarted()])
    naive = datetime(2100, 1, 1)

    with pytest.raises(ValidationError, match="time zone") as refused:
        estore.retention_plan(timedelta(days=30), now=naive)
    with pytest.raises(ValidationError, match="time zone"):
        estore.purge_expired(timedelta(days=30), reason="r", now=naive)

    assert refused.value.field == "now"
    assert estore.erasures() == [] and len(estore.read("s")) == 1


def test_retention_erases_a_tree_from_its_root_in_one_transaction(estore: SessionStore, mode: str) -> None:
    """An expired tree goes as ``erase(root, with_forks=True)`` takes it, whatever its ids'
    order: the root first, one transaction, and no row left naming a parent that is gone."""
    estore.create_session("zz-root", events=[SessionStarted(), MessageAppended(role="user", content="root")])
    estore.create_session("mm-fork", parent_session_id="zz-root", fork_seq=2)
    estore.append("mm-fork", [MessageAppended(role="user", content="fork")], expected_seq=0)
    estore.create_session("aa-child", parent_session_id="mm-fork", events=[SessionStarted()])
    estore.create_session("fresh", events=[SessionStarted()])
    now = _between(estore, "aa-child", "fresh") + timedelta(days=30)

    plan = estore.retention_plan(timedelta(days=30), now=now)
    done = estore.purge_expired(timedelta(days=30), reason="r", now=now)

    method = "shredded" if mode == "encrypted" else "purged"
    assert plan.expired == ("zz-root", "mm-fork", "aa-child") and plan.kept == {}
    assert [(r.session_id, r.method) for r in done.receipts] == [
        ("zz-root", method),
        ("mm-fork", method),
        ("aa-child", method),
    ]
    assert len({r.erased_at for r in done.receipts}) == 1
    for sid in ("zz-root", "mm-fork", "aa-child"):
        assert estore.verify(sid).ok
    assert _dangling(estore) == []


@pytest.mark.parametrize(
    ("parent_mode", "child_mode"), [("plaintext", "encrypted"), ("encrypted", "plaintext")]
)
def test_retention_erases_a_fork_encrypted_unlike_its_parent_with_it(
    shared_backend: Backend, parent_mode: str, child_mode: str
) -> None:
    """A fork encrypted while its parent is plaintext (or the other way round) goes with its
    parent as ``erase(with_forks=True)`` takes it: the fork of a purged parent is purged with it
    (it shares the parent's prefix, and its row points at the parent's), never shredded alone and
    left pointing at a parent that is gone."""
    with shared_backend.open(encryption=MASTER) as keyed, shared_backend.open() as plain:
        by_mode = {"encrypted": keyed, "plaintext": plain}
        by_mode[parent_mode].create_session(
            "zz-parent", events=[SessionStarted(), MessageAppended(role="user", content="parent")]
        )
        by_mode[child_mode].create_session(
            "aa-child", parent_session_id="zz-parent", fork_seq=2, events=[SessionStarted()]
        )
        now = _last_activity(keyed, "aa-child") + timedelta(days=30, seconds=1)

        plan = keyed.retention_plan(timedelta(days=30), now=now)
        done = keyed.purge_expired(timedelta(days=30), reason="r", now=now)

        parent_method = "shredded" if parent_mode == "encrypted" else "purged"
        assert plan.expired == ("zz-parent", "aa-child") and plan.kept == {}
        assert [(r.session_id, r.method) for r in done.receipts] == [
            ("zz-parent", parent_method),
            ("aa-child", "purged"),
        ]
        assert len({r.erased_at for r in done.receipts}) == 1
        assert _dangling(keyed) == []
        for sid in ("zz-parent", "aa-child"):
            assert keyed.verify(sid).ok
            with pytest.raises(SessionErasedError):
                keyed.read(sid)
        with pytest.raises(SessionErasedError):
            keyed.get_session("aa-child")  # purged: no row left to point at the parent
        assert keyed.retention_plan(timedelta(days=30), now=now).expired == ()


def test_retention_erases_a_parent_whose_fork_was_shredded_before(backend: Backend) -> None:
    """A fork shredded by an earlier purge (it went idle first) keeps its row, but no longer
    keeps its parent: once the parent is idle too, it is erased."""
    with backend.open(encryption=MASTER) as store:
        store.create_session("zz-parent", events=[SessionStarted()])
        store.create_session("aa-fork", parent_session_id="zz-parent", fork_seq=1, events=[SessionStarted()])
        store.append("zz-parent", [MessageAppended(role="user", content="later")], expected_seq=1)
        store.create_session("fresh", events=[SessionStarted()])
        first = _midway(_last_activity(store, "aa-fork"), _last_activity(store, "zz-parent"))
        second = _midway(_last_activity(store, "zz-parent"), _last_activity(store, "fresh"))

        early = store.purge_expired(timedelta(days=30), reason="r", now=first + timedelta(days=30))
        plan = store.retention_plan(timedelta(days=30), now=second + timedelta(days=30))
        late = store.purge_expired(timedelta(days=30), reason="r", now=second + timedelta(days=30))

        assert [(r.session_id, r.method) for r in early.receipts] == [("aa-fork", "shredded")]
        assert plan.expired == ("zz-parent",) and plan.kept == {}
        assert [(r.session_id, r.method) for r in late.receipts] == [("zz-parent", "shredded")]
        assert store.verify("zz-parent").ok and store.verify("aa-fork").ok
        assert _dangling(store) == []
        assert len(store.read("fresh")) == 1


def test_a_plaintext_session_a_shredded_fork_points_at_is_kept_not_purged(shared_backend: Backend) -> None:
    """A shredded session keeps its row, which names its parent's: a plaintext parent (or
    one purged with a plaintext ancestor) cannot be purged under it. ``erase`` refuses with that
    fork listed and changes nothing, and retention keeps the parent, naming the fork."""
    with shared_backend.open(encryption=MASTER) as keyed, shared_backend.open() as plain:
        keyed.create_session("m-root", events=[SessionStarted(), MessageAppended(role="user", content="r")])
        plain.create_session("z-mid", parent_session_id="m-root", fork_seq=2, events=[SessionStarted()])
        keyed.create_session("a-leaf", parent_session_id="z-mid", fork_seq=1, events=[SessionStarted()])
        now = _last_activity(keyed, "a-leaf") + timedelta(days=30, seconds=1)
        (shredded,) = keyed.erase("a-leaf", reason="its user asked")

        with pytest.raises(ErasureRefusedError) as refused:
            keyed.erase("m-root", reason="r", with_forks=True)
        plan = keyed.retention_plan(timedelta(days=30), now=now)
        done = keyed.purge_expired(timedelta(days=30), reason="r", now=now)

        assert shredded.method == "shredded"
        assert refused.value.descendants == ("a-leaf",)
        assert plan.expired == () and plan.kept == {"m-root": ("a-leaf",), "z-mid": ("a-leaf",)}
        assert done.receipts == () and keyed.erasures() == [shredded]
        assert _dangling(keyed) == []
        for sid in ("m-root", "z-mid", "a-leaf"):
            assert keyed.verify(sid).ok
        assert len(keyed.visible_log("z-mid").read()) == 3


def test_a_purge_keeps_blobs_another_session_references(backend: Backend) -> None:
    with backend.open() as store:
        shared = store.put_blob(b"shared output " * 50, session_id=None)
        own = store.put_blob(b"only mine " * 50)
        for sid, refs in (("a", (shared, own)), ("b", (shared,))):
            store.create_session(sid)
            store.append(
                sid,
                [
                    ToolResultPersisted(
                        tool_use_id=f"t{i}",
                        blob_sha256=ref.sha256,
                        original_chars=ref.size,
                        preview="p",
                        reason="size",
                        location="l",
                    )
                    for i, ref in enumerate(refs)
                ],
                expected_seq=0,
            )

        (receipt,) = store.erase("a", reason="r")

        assert receipt.blobs_removed == 1
        assert store.get_blob(shared.sha256) == b"shared output " * 50
        with pytest.raises(KeyError):
            store.get_blob(own.sha256)


def test_a_blob_stored_by_several_sessions_goes_with_the_last_of_them(backend: Backend) -> None:
    """Sessions that store the same bytes share one row; erasing one keeps it for the others, and
    erasing the last deletes it, whatever its payloads say (they are compressed)."""
    data = b"the same large tool output " * 400
    with backend.open() as store:
        for sid in ("a", "b", "c"):
            store.create_session(sid, events=[MessageAppended(role="user", content="long text " * 300)])
            ref = store.put_blob(data, session_id=sid)
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            rows = conn.execute(text("SELECT compression, length(data) FROM blobs")).all()
            packed = conn.execute(
                text("SELECT count(*) FROM events WHERE payload_packed IS NOT NULL")
            ).scalar()

        first = store.erase("a", reason="r")[0].blobs_removed
        second = store.erase("b", reason="r")[0].blobs_removed
        still_there = store.get_blob(ref.sha256, session_id="c")
        last = store.erase("c", reason="r")[0].blobs_removed

        assert rows == [("zstd", rows[0][1])] and rows[0][1] < len(data) / 10
        assert packed == 3
        assert (first, second, last) == (0, 0, 1)
        assert still_there == data
        with pytest.raises(KeyError):
            store.get_blob(ref.sha256)


async def _async_round(url: str) -> None:
    from sessionstore.store import open_async_store

    store = await open_async_store(url, migrate=True, encryption=MASTER)
    try:
        await store.create_session("a", events=[MessageAppended(role="user", content="ASYNC-SECRET")])
        ref = await store.put_blob(b"ASYNC-BLOB", session_id="a")
        assert "ASYNC-SECRET" in (await store.read("a"))[0].payload
        assert await store.get_blob(ref.sha256, session_id="a") == b"ASYNC-BLOB"
        (receipt,) = await store.erase("a", reason="async request")
        assert receipt.method == "shredded" and await store.erasure("a") == receipt
        with pytest.raises(SessionErasedError):
            await store.read("a")
        assert (await store.verify("a")).ok
    finally:
        await store.close()


def test_the_async_store_encrypts_and_erases_the_same_way(shared_backend: Backend) -> None:
    import asyncio

    asyncio.run(_async_round(shared_backend.url))


def test_erasure_works_on_prefixed_tables(shared_backend: Backend, mode: str) -> None:
    """The guard, the receipts and the keys live beside a store's own (prefixed) tables."""
    encryption = MASTER if mode == "encrypted" else None
    with shared_backend.open(table_prefix="ss_", encryption=encryption) as store:
        _conversation(store, "s", "PREFIXED")
        store.create_session("other", events=[SessionStarted()])

        (receipt,) = store.erase("s", reason="r")

        assert receipt.method == ("shredded" if encryption else "purged")
        assert store.verify("s").ok and store.verify("other").ok
        with pytest.raises(SessionErasedError):
            store.read("s")
        with pytest.raises(AppendOnlyViolation):
            _raw(store, "DELETE FROM ss_events WHERE session_id = 'other'")


def _persisted(ref: Any, tool_use_id: str = "t") -> ToolResultPersisted:
    return ToolResultPersisted(
        tool_use_id=tool_use_id,
        blob_sha256=ref.sha256,
        original_chars=ref.size,
        preview="p",
        reason="size",
        location="l",
    )


def test_a_blob_one_session_stored_is_kept_while_another_sessions_payload_names_it(backend: Backend) -> None:
    """A stored the blob with a ref; B stored the same bytes without a session and names it in a
    payload: erasing A keeps the blob for B, and erasing B too removes it."""
    data = b"shared tool output " * 50
    with backend.open() as store:
        store.create_session("a")
        store.create_session("b")
        store.put_blob(data, session_id="a")
        ref = store.put_blob(data)
        store.append("b", [_persisted(ref)], expected_seq=0)

        (first,) = store.erase("a", reason="r")

        assert first.blobs_removed == 0
        assert store.get_blob(ref.sha256) == data
        assert store.erase("b", reason="r")[0].blobs_removed == 1
        with pytest.raises(KeyError):
            store.get_blob(ref.sha256)


def test_refs_of_sessions_that_do_not_exist_keep_no_blob(backend: Backend) -> None:
    """A ref naming a session that was never created (an import that failed after storing its
    blobs) does not keep the blob when its last real session is erased."""
    data = b"imported tool output " * 50
    with backend.open() as store:
        ref = store.put_blob(data, session_id="never-created")
        store.create_session("a")
        store.put_blob(data, session_id="a")

        (receipt,) = store.erase("a", reason="r")

        assert receipt.blobs_removed == 1
        with pytest.raises(KeyError):
            store.get_blob(ref.sha256)

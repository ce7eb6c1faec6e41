"""Tampering outside the hash chain, as an attacker with direct SQL access would do it.

Every case switches enforcement off first (the append-only triggers, and foreign keys where a
row is deleted), changes rows the chain of events does not itself hash (the ``sessions`` row,
``events.position``) or rewrites the chain consistently, and then checks what ``verify`` names.
Runs on every backend (SQLite file and memory, PostgreSQL).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, text

import sessionstore
from sessionstore import MessageAppended, SessionStarted, SessionStore
from sessionstore.audit._verify import all_heads, verify_all, verify_session
from sessionstore.cli import main
from sessionstore.errors import DataCorruptionError
from sessionstore.events._base import Event, register_event
from sessionstore.store import ChainHead, RecordedEvent, _codec
from sessionstore.store._codec import pack_payload, unpack_payload
from sessionstore.store._hashing import LEGACY_GENESIS_HASH, event_hash, fork_point_hash
from sessionstore.store._schema import APPEND_ONLY_TABLES, sqlite_append_only_ddl

from .conftest import Backend
from .strategies import examples

pytestmark = pytest.mark.store_contract


def _messages(n: int, prefix: str = "message") -> list[MessageAppended]:
    return [MessageAppended(role="user", content=f"{prefix} {i}") for i in range(n)]


def _tamper(store: SessionStore, *statements: str, **params: Any) -> None:
    """Run ``statements`` in one transaction as the database owner, enforcement off."""
    engine = store.engine  # type: ignore[attr-defined]
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers, no FKs
            for statement in statements:
                conn.execute(text(statement), params)
        return
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("PRAGMA foreign_keys=OFF")  # only outside a transaction
        cursor.execute("BEGIN")
        ddl = [sqlite_append_only_ddl(table) for table in APPEND_ONLY_TABLES]
        for _, drops in ddl:
            for drop in drops:
                cursor.execute(drop)
        for statement in statements:
            cursor.execute(statement, params)
        for creates, _ in ddl:
            for create in creates:
                cursor.execute(create)
        cursor.execute("COMMIT")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        raw.close()


def _recompute_chain(store: SessionStore, session_id: str, from_seq: int, start: str | None = None) -> None:
    """Re-hash every event from ``from_seq`` on after an edit, as a careful attacker would.

    ``start``: the prev_hash to give ``from_seq`` (default: the stored one).
    """
    stored = store.read(session_id, from_seq)
    prev = start if start is not None else stored[0].prev_hash
    statements: list[str] = []
    params: dict[str, str] = {}
    for n, e in enumerate(stored):
        digest = event_hash(
            prev,
            e.session_id,
            e.seq,
            e.event_id,
            e.type,
            e.schema_version,
            None if e.token_count_deferred else e.token_count,  # a deferred count is not hashed
            e.created_at,
            e.payload,
            deferred=e.token_count_deferred,  # that it is deferred is
        )
        statements.append(
            f"UPDATE events SET prev_hash = :prev{n}, hash = :hash{n} "
            f"WHERE session_id = :sid AND seq = {e.seq}"
        )
        params |= {f"prev{n}": prev, f"hash{n}": digest}
        prev = digest
    _tamper(store, *statements, sid=session_id, **params)


def _forked(store: SessionStore, at: int = 3, own: int = 2) -> tuple[str, str]:
    """A parent with 6 events and a fork of it at ``at`` with ``own`` events of its own."""
    parent = store.create_session("parent", events=[SessionStarted(model="m"), *_messages(5, "parent")]).id
    fork = store.create_session("fork", parent_session_id=parent, fork_seq=at).id
    if own:
        store.append(fork, _messages(own, "fork"), expected_seq=0)
    return parent, fork


class TestSessionsRow:
    def test_an_edited_fork_point_breaks_the_fork_at_seq_1(self, store: SessionStore) -> None:
        """fork_seq moved: the fork would silently share another prefix; verify names seq 1 and the row."""
        _, fork = _forked(store, at=3)
        assert store.verify(fork).ok

        _tamper(store, "UPDATE sessions SET fork_seq = 5 WHERE id = :sid", sid=fork)

        report = store.verify(fork)
        assert not report.ok
        assert report.first_bad_seq == 1
        assert "sessions row" in (report.reason or "")
        assert (report.reason or "").endswith(": fork_seq is 5, but the chain was started at fork point 3")
        assert verify_session(store, fork).summary().startswith("fork: BROKEN at seq 1: ")
        with pytest.raises(sessionstore.DataCorruptionError):
            store.read(fork, verify=True)

    def test_a_replaced_parent_breaks_the_fork(self, store: SessionStore) -> None:
        """parent_session_id pointed at a look-alike: same length, other history."""
        _, fork = _forked(store, at=3)
        store.create_session("other", events=[SessionStarted(model="m"), *_messages(5, "other")])

        _tamper(store, "UPDATE sessions SET parent_session_id = 'other' WHERE id = :sid", sid=fork)

        report = store.verify(fork)
        assert (report.ok, report.first_bad_seq) == (False, 1)

    def test_a_plain_session_made_into_a_fork_is_found(self, store: SessionStore) -> None:
        """A session given a parent and fork point after the fact would show a history it never had."""
        parent, _ = _forked(store)
        store.create_session("plain", events=_messages(2, "plain"))

        _tamper(
            store,
            "UPDATE sessions SET parent_session_id = :parent, fork_seq = 2 WHERE id = 'plain'",
            parent=parent,
        )

        report = store.verify("plain")
        assert report.first_bad_seq == 1
        assert (report.reason or "").endswith(
            ": it was not a fork or child session when its chain started (parent_session_id set later)"
        )

    def test_edited_creation_time_or_metadata_is_found(self, store: SessionStore) -> None:
        """The rest of the row is what the session is too."""
        store.create_session("a", metadata={"owner": "ann"}, events=_messages(1))
        store.create_session("b", events=_messages(1))

        _tamper(
            store,
            """UPDATE sessions SET metadata = '{"owner":"eve"}' WHERE id = 'a'""",
            "UPDATE sessions SET created_at = :moment WHERE id = 'b'",
            moment=store.get_session("a").created_at.replace(year=2001),
        )

        assert store.verify("a").first_bad_seq == 1
        assert store.verify("b").first_bad_seq == 1

    def test_a_deleted_sessions_row_is_found_by_its_events(self, store: SessionStore) -> None:
        """The row gone, its events stay: verify of everything still reports the session, as failed."""
        store.create_session("kept", events=_messages(2))
        store.create_session("gone", events=_messages(3))

        _tamper(store, "DELETE FROM sessions WHERE id = 'gone'")

        assert store.orphaned_sessions() == ["gone"]
        report = store.verify("gone")
        assert not report.ok
        assert report.reason == "3 events but no sessions row: the session's row was deleted"
        results = {r.session_id: r for r in verify_all(store)}
        assert set(results) == {"kept", "gone"}
        assert results["kept"].ok and not results["gone"].ok
        assert results["gone"].summary() == (
            "gone: BROKEN: 3 events but no sessions row: the session's row was deleted"
        )
        with pytest.raises(sessionstore.SessionNotFoundError):
            store.verify("never-existed")

    def test_an_empty_fork_is_protected_only_by_its_anchored_head(self, store: SessionStore) -> None:
        """No events, no chain to break: the head (its genesis) kept outside still shows the edit."""
        _, fork = _forked(store, at=3, own=0)
        anchor = store.head(fork)
        assert anchor.seq == 0

        _tamper(store, "UPDATE sessions SET fork_seq = 1 WHERE id = :sid", sid=fork)

        assert store.verify(fork).ok  # nothing inside the database contradicts the row
        report = store.verify(fork, head=anchor)
        assert not report.ok
        assert "seq 0 does not hold the anchored head" in (report.reason or "")


class TestPositions:
    def test_swapped_positions_within_a_session_are_found(self, store: SessionStore) -> None:
        """Swapping two events' positions reorders read_all and every subscriber."""
        sid = store.create_session("s", events=_messages(4)).id
        a, b = (e.position for e in store.read(sid, 2, 3))

        _tamper(
            store,
            "UPDATE events SET position = :tmp WHERE position = :a",
            "UPDATE events SET position = :a WHERE position = :b",
            "UPDATE events SET position = :b WHERE position = :tmp",
            a=a,
            b=b,
            tmp=10_000,
        )

        assert [e.seq for e in store.read_all()] == [1, 3, 2, 4]  # what a subscriber now sees
        report = store.verify(sid)
        assert report.first_bad_seq == 3
        assert report.reason == (
            f"position {a} is not after seq 2's position {b}: the global order was changed"
        )


class TestRewrittenChain:
    def test_a_recomputed_chain_passes_alone_but_not_its_anchor_or_forks(self, store: SessionStore) -> None:
        """The attacker edits a payload and re-hashes it and everything after it consistently.

        Nothing inside the database contradicts that log any more, except what is bound to the
        old hashes: a fork's genesis (bound to the parent's event at the fork point) and a head
        kept outside the database.
        """
        parent, fork = _forked(store, at=4)
        anchor = store.head(parent)
        target = store.read(parent, 3, 3)[0]
        _tamper(
            store,
            "UPDATE events SET payload = replace(payload, 'parent 1', 'parent X') "
            "WHERE session_id = :sid AND seq = 3",
            sid=parent,
        )
        _recompute_chain(store, parent, from_seq=target.seq)

        assert store.verify(parent).ok  # undetectable from inside: the documented limit
        assert store.head(parent) != anchor
        by_hash = store.verify(parent, head=anchor.hash)
        assert not by_hash.ok and "is not in the chain" in (by_hash.reason or "")
        by_head = store.verify(parent, head=anchor)
        assert not by_head.ok and f"seq {anchor.seq} does not hold the anchored head" in (
            by_head.reason or ""
        )
        fork_report = store.verify(fork)  # forked after the edit: its genesis holds the old hash
        assert (fork_report.ok, fork_report.first_bad_seq) == (False, 1)

    def test_a_truncated_tail_is_found_only_with_an_anchored_head(self, store: SessionStore) -> None:
        """Deleting the last events leaves a valid shorter chain; the anchor says how much is gone."""
        sid = store.create_session("t", events=_messages(5)).id
        anchor = store.head(sid)

        _tamper(store, "DELETE FROM events WHERE session_id = :sid AND seq > 3", sid=sid)

        assert store.verify(sid).ok
        report = store.verify(sid, head=anchor)
        assert report.reason == (
            "the log ends at seq 3, before the anchored head at seq 5: events were removed from the end"
        )

    def test_an_earlier_anchor_still_verifies_as_the_session_grows(self, store: SessionStore) -> None:
        """An anchor is a point in the chain, not its end: appending later does not break it."""
        sid = store.create_session("g", events=_messages(2)).id
        anchor = store.head(sid)
        store.append(sid, _messages(3, "later"), expected_seq=2)

        assert anchor == ChainHead(sid, 2, store.read(sid, 2, 2)[0].hash)
        assert store.verify(sid, head=anchor).ok
        assert store.verify(sid, head=anchor.hash).ok
        assert store.verify(sid).head == store.head(sid).hash


class TestCompressedPayloads:
    """Payloads of 256 bytes or more are stored compressed; the chain is over their text."""

    @staticmethod
    def _long_session(store: SessionStore) -> str:
        events = [
            MessageAppended(role="user", content=f"long message {i} " + "tool output line\n" * 60)
            for i in range(4)
        ]
        sid = store.create_session("long", events=events).id
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            packed = conn.execute(
                text("SELECT count(*) FROM events WHERE payload_packed IS NOT NULL")
            ).scalar()
        assert packed == 4
        return sid

    def test_recompressed_edited_text_is_found(self, store: SessionStore) -> None:
        """An edit of the text, compressed again as the store would, breaks that event's hash."""
        sid = self._long_session(store)
        edited = store.read(sid, 2, 2)[0].payload.replace("long message 1", "long message X")
        _tamper(
            store,
            "UPDATE events SET payload_packed = :packed WHERE session_id = :sid AND seq = 2",
            packed=pack_payload(edited),
            sid=sid,
        )

        report = store.verify(sid)

        assert (report.ok, report.first_bad_seq, report.reason) == (
            False,
            2,
            "stored content does not match its hash",
        )

    def test_altered_compressed_bytes_are_found_and_fail_only_where_read(self, store: SessionStore) -> None:
        """Bytes that no longer decompress: verify names the event; a read succeeds, and only the
        altered payload raises DataCorruptionError when it is used."""
        sid = self._long_session(store)
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            packed = bytes(conn.execute(text("SELECT payload_packed FROM events WHERE seq = 3")).scalar_one())
        damaged = packed[:10] + bytes(b ^ 0xFF for b in packed[10:20]) + packed[20:]
        _tamper(store, "UPDATE events SET payload_packed = :packed WHERE seq = 3", packed=damaged)

        report = store.verify(sid)
        events = store.read(sid)

        assert (report.ok, report.first_bad_seq) == (False, 3)
        assert report.reason in (
            "its stored payload does not decompress",
            "stored content does not match its hash",
        )
        assert "long message 1" in events[1].payload
        with pytest.raises(
            DataCorruptionError, match="seq 3: the stored payload does not decompress"
        ) as caught:
            _ = events[2].event
        assert (caught.value.session_id, caught.value.seq) == (sid, 3)

    def test_a_payload_moved_between_its_stored_forms_verifies_the_same(self, store: SessionStore) -> None:
        """The hash is over the text, not over the way it is stored."""
        sid = self._long_session(store)
        text_of_2 = store.read(sid, 2, 2)[0].payload
        _tamper(
            store,
            "UPDATE events SET payload = :text, payload_packed = NULL WHERE session_id = :sid AND seq = 2",
            text=text_of_2,
            sid=sid,
        )

        assert store.verify(sid).ok
        assert store.read(sid, 2, 2)[0].payload == text_of_2

    @pytest.mark.parametrize("value", ["not bytes", 12345], ids=["text", "integer"])
    def test_a_packed_payload_that_is_not_bytes_is_data_corruption(
        self, store: SessionStore, value: object
    ) -> None:
        """A TEXT or INTEGER value in ``payload_packed`` (SQLite keeps what it is given) is an
        altered row: reading it raises DataCorruptionError naming the event, verify reports the
        session broken there, and an integer is not taken as a size to allocate."""
        if store.engine.dialect.name != "sqlite":  # type: ignore[attr-defined]
            pytest.skip("a PostgreSQL bytea column holds only bytes")
        sid = self._long_session(store)
        _tamper(store, "UPDATE events SET payload_packed = :value WHERE seq = 3", value=value)

        report = store.verify(sid)
        events = store.read(sid)

        assert (report.ok, report.first_bad_seq) == (False, 3)
        assert "long message 1" in events[1].payload
        kind = type(value).__name__
        with pytest.raises(
            DataCorruptionError, match=f"seq 3: the stored payload is not bytes but {kind}"
        ) as caught:
            _ = events[2].event
        assert (caught.value.session_id, caught.value.seq) == (sid, 3)

    @pytest.mark.parametrize("value", ["not bytes", 12345, 1.5], ids=["text", "integer", "real"])
    def test_unpacking_refuses_what_is_not_bytes(self, value: object) -> None:
        """The check every backend's read goes through: only bytes, bytearray or memoryview."""
        with pytest.raises(DataCorruptionError, match="session 's', seq 2: the stored payload is not bytes"):
            unpack_payload(value, session_id="s", seq=2)
        packed = pack_payload("x" * 1000)
        assert packed is not None
        for form in (packed, bytearray(packed), memoryview(packed)):
            assert unpack_payload(form) == "x" * 1000

    @pytest.mark.parametrize("codec", ["zstd", "zstd-unsized", "zlib"])
    def test_a_payload_that_decompresses_past_the_limit_is_data_corruption(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch, codec: str
    ) -> None:
        """Decompression stops at MAX_DECOMPRESSED_BYTES: a small altered row that expands
        further raises DataCorruptionError (verify reports it) instead of allocating it all."""
        import zlib

        import zstandard

        sid = self._long_session(store)
        text_of_3 = store.read(sid, 3, 3)[0].payload
        limit = len(text_of_3.encode()) + 1000  # above every stored payload
        data = text_of_3.encode() + b" " * 2000  # a row altered to expand past it
        if codec == "zlib":
            packed = b"\x01" + zlib.compress(data)
        else:
            packed = b"\x02" + zstandard.ZstdCompressor(write_content_size=codec == "zstd").compress(data)
        _tamper(store, "UPDATE events SET payload_packed = :packed WHERE seq = 3", packed=packed)
        monkeypatch.setattr(_codec, "MAX_DECOMPRESSED_BYTES", limit)

        report = store.verify(sid)

        assert (report.ok, report.first_bad_seq, report.reason) == (
            False,
            3,
            "its stored payload does not decompress",
        )
        events = store.read(sid)
        assert "long message 1" in events[1].payload
        with pytest.raises(
            DataCorruptionError, match="seq 3: the stored payload does not decompress"
        ) as caught:
            _ = events[2].event
        assert (caught.value.session_id, caught.value.seq) == (sid, 3)
        if codec != "zstd-unsized":  # zstd stops at the limit short of the frame's end
            assert "more than" in str(caught.value)

    def test_a_blob_that_decompresses_past_the_limit_is_data_corruption(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stored blob is read under the same limit."""
        data = b"tool output line\n" * 1000
        ref = store.put_blob(data)
        assert store.get_blob(ref.sha256) == data
        monkeypatch.setattr(_codec, "MAX_DECOMPRESSED_BYTES", len(data) - 1)

        with pytest.raises(DataCorruptionError, match=f"blob {ref.sha256} does not decompress"):
            store.get_blob(ref.sha256)


def test_a_deleted_first_event_is_a_gap_at_seq_1(store: SessionStore) -> None:
    """The chain must start at seq 1: a log that starts later lost its beginning."""
    sid = store.create_session("headless", events=_messages(3)).id

    _tamper(store, "DELETE FROM events WHERE session_id = :sid AND seq = 1", sid=sid)

    report = store.verify(sid)
    assert (report.first_bad_seq, report.reason) == (2, "seq gap: expected 1")
    with pytest.raises(sessionstore.DataCorruptionError, match="seq gap: expected 1"):
        store.read(sid, verify=True)


class TestLegacyChains:
    def test_a_chain_from_before_identity_binding_still_verifies(self, store: SessionStore) -> None:
        """Chains written by earlier versions start from 64 zeros: they verify (marked unbound),
        and appending to them continues the same chain."""
        sid = store.create_session("old", events=_messages(3)).id
        _recompute_chain(store, sid, from_seq=1, start=LEGACY_GENESIS_HASH)  # what older versions wrote

        report = store.verify(sid)
        assert report.ok and not report.identity_bound
        assert (
            verify_session(store, sid).summary()
            == "old: ok (3 events, sessions row not bound: an older chain)"
        )
        store.append(sid, _messages(2, "new"), expected_seq=3)
        assert store.verify(sid).ok
        assert len(store.read(sid, verify=True)) == 5
        assert store.verify(store.create_session("new", events=_messages(1)).id).identity_bound

    def test_heads_of_empty_sessions_are_their_genesis(self, store: SessionStore) -> None:
        """The first append chains from the head an empty session reports."""
        sid = store.create_session("empty").id
        genesis = store.head(sid)
        assert genesis.seq == 0 and genesis.hash != LEGACY_GENESIS_HASH

        store.append(sid, _messages(1), expected_seq=0)

        assert store.read(sid)[0].prev_hash == genesis.hash
        assert store.verify(sid, head=genesis).ok


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_the_cli_checks_heads_kept_elsewhere(shared_backend: Backend, tmp_path: Path) -> None:
    """`heads` prints an anchor per session; `verify --heads FILE` and `--head HASH` check them:
    a truncated tail, a recomputed chain and a session deleted outright all exit 3."""
    store = shared_backend.open()
    try:
        for sid in ("a", "b", "c"):
            store.create_session(sid, events=_messages(4, sid))
        code, printed = _cli("heads", "--db", shared_backend.url)
        assert code == 0
        assert printed.splitlines() == [f"{h.session_id} {h.seq} {h.hash}" for h in map(store.head, "abc")]
        kept = tmp_path / "heads.txt"
        kept.write_text(printed)
        code, one = _cli("heads", "--db", shared_backend.url, "b", "--json")
        assert (code, json.loads(one)) == (0, {"session_id": "b", "seq": 4, "hash": store.head("b").hash})
        store.append("a", _messages(1, "later"), expected_seq=4)  # growing after the anchor is fine

        assert _cli("verify", "--db", shared_backend.url, "--heads", str(kept))[0] == 0

        _tamper(store, "DELETE FROM events WHERE session_id = 'b' AND seq = 4")
        _tamper(
            store,
            "UPDATE events SET payload = replace(payload, 'a 1', 'a X') WHERE session_id = 'a' AND seq = 2",
        )
        _recompute_chain(store, "a", from_seq=2)
        _tamper(store, "DELETE FROM events WHERE session_id = 'c'", "DELETE FROM sessions WHERE id = 'c'")
        assert _cli("verify", "--db", shared_backend.url)[0] == 0  # nothing inside contradicts it now
    finally:
        store.close()

    code, report = _cli("verify", "--db", shared_backend.url, "--heads", str(kept))
    assert code == 3
    lines = report.splitlines()
    assert lines[0].startswith("a: BROKEN: seq 4 does not hold the anchored head ")
    assert lines[1] == (
        "b: BROKEN: the log ends at seq 3, before the anchored head at seq 4: "
        "events were removed from the end"
    )
    assert lines[2] == "c: BROKEN: anchored at seq 4, but the session and all its events are gone"
    assert lines[3] == "3 sessions verified: 0 ok, 3 failed"

    anchor_a = printed.splitlines()[0].split()[2]
    code, single = _cli("verify", "--db", shared_backend.url, "a", "--head", anchor_a, "--json")
    assert code == 3 and "is not in the chain" in json.loads(single)["reason"]
    assert _cli("verify", "--db", shared_backend.url, "c", "--heads", str(kept))[0] == 3
    assert _cli("verify", "--db", shared_backend.url, "--head", anchor_a)[0] == 2  # --head needs a SESSION
    kept.write_text("a 4\n")
    assert _cli("verify", "--db", shared_backend.url, "--heads", str(kept))[0] == 1  # a bad heads file


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "device", "binary"])
def test_a_heads_file_that_is_not_text_is_refused_without_reading_forever(
    special: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verify --heads` on a FIFO or a device (or a symlink to /dev/zero) or binary data: one error line,
    exit 1, instead of blocking or reading until memory runs out."""
    db = str(tmp_path / "h.db")
    sessionstore.open_store(db, migrate=True).close()
    target = tmp_path / "heads"
    if special == "fifo":
        os.mkfifo(target)
    elif special == "device":
        target.symlink_to("/dev/zero")
    else:
        target.write_bytes(b"\xff\xfe\x00 not text")

    code, _ = _cli("verify", "--db", db, "--heads", str(target))
    err = capsys.readouterr().err

    assert code == 1
    assert err.count("\n") == 1 and err.startswith("sessionstore: ") and str(target) in err


def test_a_fork_of_a_fork_is_bound_to_the_event_it_shares_with_its_grandparent(store: SessionStore) -> None:
    """A fork point inside the parent's own inherited prefix resolves to the grandparent's event:
    the grandchild verifies, and rewriting that grandparent event (hashes recomputed) breaks it."""
    store.create_session("root", events=_messages(5, "root"))
    store.create_session("mid", parent_session_id="root", fork_seq=4)
    store.append("mid", _messages(2, "mid"), expected_seq=0)  # mid's seqs 5, 6 in its own history
    store.create_session("leaf", parent_session_id="mid", fork_seq=3)  # shares root's seqs 1..3
    store.append("leaf", _messages(1, "leaf"), expected_seq=0)
    store.create_session("tip", parent_session_id="mid", fork_seq=6)  # shares root 1..4 and mid's 2
    store.append("tip", _messages(1, "tip"), expected_seq=0)
    assert all(store.verify(sid).ok for sid in ("root", "mid", "leaf", "tip"))

    _tamper(
        store,
        "UPDATE events SET payload = replace(payload, 'root 2', 'root X') "
        "WHERE session_id = 'root' AND seq = 3",
    )
    _recompute_chain(store, "root", from_seq=3)

    assert store.verify("root").ok  # consistently rewritten
    assert store.verify("leaf").first_bad_seq == 1  # bound to root's seq 3
    assert store.verify("mid").first_bad_seq == 1  # bound to root's seq 4, re-hashed too
    assert store.verify("tip").ok  # bound to mid's own seq 2, unchanged: mid's own report shows the break


_ROW_EDITS = {
    "fork_seq": "UPDATE sessions SET fork_seq = :value WHERE id = 'fork'",
    "parent_session_id": "UPDATE sessions SET parent_session_id = :value WHERE id = 'fork'",
    "created_at": "UPDATE sessions SET created_at = :value WHERE id = 'fork'",
    "metadata": "UPDATE sessions SET metadata = :value WHERE id = 'fork'",
}


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parent_events=st.integers(1, 6),
    data=st.data(),
    column=st.sampled_from(sorted(_ROW_EDITS)),
)
def test_any_edit_of_a_sessions_row_breaks_its_chain_at_seq_1(
    parent_events: int, data: st.DataObject, column: str
) -> None:
    """Whatever column of a fork's row changes, to whatever other valid value, verify fails at seq 1
    (and the unedited fork verifies)."""
    fork_seq = data.draw(st.integers(0, parent_events), label="fork point")
    with sessionstore.open_store(":memory:") as store:
        store.create_session("parent", events=_messages(parent_events, "p"))
        store.create_session("other", events=_messages(parent_events, "o"))
        store.create_session("fork", parent_session_id="parent", fork_seq=fork_seq, metadata={"k": "v"})
        store.append("fork", _messages(data.draw(st.integers(1, 3), label="own events")), expected_seq=0)
        assert store.verify("fork").ok
        row = store.get_session("fork")
        if column == "fork_seq":
            value: object = data.draw(st.integers(0, parent_events).filter(lambda v: v != fork_seq))
        elif column == "parent_session_id":
            value = "other"
        elif column == "created_at":
            shift = data.draw(st.integers(1, 10**9), label="microseconds later")
            value = (row.created_at + timedelta(microseconds=shift)).replace(tzinfo=None)
        else:
            value = json.dumps(data.draw(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
            assume(json.loads(str(value)) != row.metadata)

        _tamper(store, _ROW_EDITS[column], value=value)

        assert store.verify("fork").first_bad_seq == 1


@pytest.mark.parametrize(
    ("payload", "is_json_object"),
    [("{{{", False), ("[1, 2]", False), ('{"role": "user", "content": 5}', True)],  # the last: not a message
)
def test_a_payload_altered_so_it_no_longer_decodes_is_data_corruption(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str], payload: str, is_json_object: bool
) -> None:
    """Reading an event whose stored payload was changed into something that is not the event
    raises DataCorruptionError naming the session and seq (not a decoder's traceback); the CLI
    prints nothing of that read (it checks the hashes of what it reads) and exits as an integrity
    failure."""
    store = shared_backend.open()
    try:
        sid = store.create_session("s", events=_messages(4)).id
        _tamper(
            store,
            "UPDATE events SET payload = :payload WHERE session_id = :sid AND seq = 3",
            sid=sid,
            payload=payload,
        )
        events = store.read(sid)

        assert [e.event.content for e in events[:2] if isinstance(e.event, MessageAppended)] == [
            "message 0",
            "message 1",
        ]
        reads: list[Callable[[RecordedEvent], object]] = (
            [lambda e: e.event] if is_json_object else [lambda e: e.event, lambda e: e.to_dict()]
        )
        for read in reads:
            with pytest.raises(sessionstore.DataCorruptionError) as caught:
                read(events[2])
            assert (caught.value.session_id, caught.value.seq) == (sid, 3)
            assert "session 's', seq 3: the stored message_appended event does not decode" in str(
                caught.value
            )
        with pytest.raises(sessionstore.DataCorruptionError, match="seq 3"):
            sessionstore.Session(store, sid, use_snapshots=False)
        assert verify_session(store, sid).summary().startswith("s: BROKEN at seq 3")

        # The command line checks what it reads against the hashes: nothing of the read is shown.
        code, printed = _cli("events", sid, "--json", "--db", shared_backend.url)
        assert (code, printed) == (sessionstore.errors.EXIT_INTEGRITY, "")
        assert capsys.readouterr().err.startswith(
            "sessionstore: session 's', seq 3: the event read does not match its hash"
        )
    finally:
        store.close()


@register_event
class _TamperNoteV2(Event):
    """A test-only event at schema version 2, to read a stored version 1 through an upcaster."""

    SCHEMA_VERSION: ClassVar[int] = 2
    type: Literal["test_tamper_note"] = "test_tamper_note"
    text: str


def test_an_upcasters_own_error_is_not_reported_as_corruption(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a payload that is not JSON or not the event is corruption: a ValueError an upcaster
    raises (a bug in the code, not in the row) reaches the caller as it is."""
    from sessionstore.events._base import _UPCASTERS

    def buggy(payload: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("upcaster bug")

    monkeypatch.setitem(_UPCASTERS, ("test_tamper_note", 1), buggy)
    sid = store.create_session("s", events=[*_messages(1), _TamperNoteV2(text="n")]).id
    _tamper(store, "UPDATE events SET schema_version = 1 WHERE session_id = :sid AND seq = 2", sid=sid)
    events = store.read(sid)

    first = events[0].event
    assert isinstance(first, MessageAppended)
    assert first.content == "message 0"
    with pytest.raises(ValueError, match="upcaster bug") as caught:
        _ = events[1].event
    assert not isinstance(caught.value, DataCorruptionError)


# Values SQLite keeps in a column of another type (it stores whatever is written): each is
# reported as the altered row it is, by every reader, not as a parser's TypeError or ValueError.
_MISTYPED = {
    "an event's created_at that is no timestamp": (
        "UPDATE events SET created_at = 'garbage' WHERE session_id = :sid AND seq = 2",
        "seq 2: the event row's created_at is 'garbage'",
    ),
    "an event's created_at that is a number": (
        "UPDATE events SET created_at = 12345 WHERE session_id = :sid AND seq = 2",
        "seq 2: the event row's created_at is '12345'",
    ),
    "an event's token count that is text": (
        "UPDATE events SET token_count = 'abc' WHERE session_id = :sid AND seq = 2",
        "an event row's token_count is 'abc'",
    ),
    "an event's payload that is a blob": (
        "UPDATE events SET payload = X'7b7d', payload_packed = NULL WHERE session_id = :sid AND seq = 2",
        "seq 2: the event row's payload is bytes, not text",
    ),
    "a session's created_at that is no timestamp": (
        "UPDATE sessions SET created_at = 'garbage' WHERE id = :sid",
        "its sessions row's created_at is 'garbage'",
    ),
    "a session's fork_seq that is text": (
        "UPDATE sessions SET fork_seq = 'x', parent_session_id = 'p' WHERE id = :sid",
        "its sessions row's fork_seq is 'x'",
    ),
}


@pytest.mark.parametrize("case", sorted(_MISTYPED))
def test_a_value_of_the_wrong_type_in_a_sqlite_row_is_data_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """The store's reads raise DataCorruptionError naming the session (and the seq, for an
    event), and every command that reads the session exits 3 with that one line."""
    statement, reason = _MISTYPED[case]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with sessionstore.open_store(url, migrate=True) as store:
        store.create_session("p", events=_messages(2))
        sid = store.create_session("s", events=_messages(3)).id
        _tamper(store, statement, sid=sid)

        with pytest.raises(DataCorruptionError, match=reason) as caught:
            store.read(sid) if "event" in case else store.get_session(sid)
        assert caught.value.session_id == sid
    for command in (["events", sid, "--json"], ["show", sid], ["context", sid], ["export", sid, "-o", "x"]):
        code, _ = _cli(*command, "--db", url)
        err = capsys.readouterr().err

        assert code == sessionstore.errors.EXIT_INTEGRITY, (command, err)
        assert err.startswith(f"sessionstore: session '{sid}'") and reason in err
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    if "session's" in case:
        code, _ = _cli("sessions", "--db", url)
        assert code == sessionstore.errors.EXIT_INTEGRITY
        assert reason in capsys.readouterr().err


@pytest.mark.parametrize("metadata", ["not json", "[1, 2]", "[" * 100_000])
def test_session_metadata_that_is_not_a_json_object_is_data_corruption(
    store: SessionStore, metadata: str
) -> None:
    """A sessions row's metadata changed into something create_session never stores (text that is
    not JSON, an array, JSON nested 100,000 deep) is DataCorruptionError on every backend."""
    sid = store.create_session("s", events=_messages(1), metadata={"k": "v"}).id
    _tamper(store, "UPDATE sessions SET metadata = :metadata WHERE id = :sid", sid=sid, metadata=metadata)

    with pytest.raises(DataCorruptionError, match="its sessions row's metadata is") as caught:
        store.get_session(sid)
    assert caught.value.session_id == sid
    with pytest.raises(DataCorruptionError):
        store.list_sessions()


def _loop_fork_ancestry(store: SessionStore, loop: str) -> None:
    """Sessions ``p`` and its fork ``f``; then ``p``'s row names itself or ``f`` as its parent."""
    store.create_session("p", events=_messages(3))
    store.create_session("f", parent_session_id="p", fork_seq=2, events=_messages(1))
    parent = "p" if loop == "itself" else "f"
    loop_back = "UPDATE sessions SET parent_session_id = :parent, fork_seq = 1 WHERE id = 'p'"
    _tamper(store, loop_back, parent=parent)


@pytest.mark.parametrize("loop", ["itself", "its fork"])
def test_a_fork_ancestry_that_loops_is_data_corruption(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str], loop: str
) -> None:
    """A sessions row altered to name the session itself, or its own fork, as its parent: reading
    the history says so (it recursed until RecursionError), and the commands exit 3."""
    store = shared_backend.open()
    try:
        _loop_fork_ancestry(store, loop)

        for sid in ("p", "f"):
            with pytest.raises(DataCorruptionError, match="its fork ancestry comes back to session"):
                sessionstore.store.SessionLog(store, sid)
            for command in (["events", sid], ["context", sid], ["audit", sid]):
                code, _ = _cli(*command, "--db", shared_backend.url)
                err = capsys.readouterr().err
                assert code == sessionstore.errors.EXIT_INTEGRITY, (command, err)
                assert "its fork ancestry comes back to session" in err and len(err.splitlines()) == 1
        for sid in ("p", "f"):
            assert verify_session(store, sid).summary().startswith(f"{sid}: BROKEN")
    finally:
        store.close()


@pytest.mark.parametrize("loop", ["itself", "its fork"])
def test_a_fork_ancestry_that_loops_is_found_after_a_few_lookups(store: SessionStore, loop: str) -> None:
    """verify looks each ancestor up once, so a loop is found as soon as one comes round again:
    it walked 10,000 ancestors, one query each (seconds per session, for `sessionstore verify` too)."""
    _loop_fork_ancestry(store, loop)
    inner = getattr(store, "inner", None)  # the async store's own engine, under the test's adapter
    engine = inner.engine.sync_engine if inner is not None else store.engine  # type: ignore[attr-defined]
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        reports = [store.verify(sid) for sid in ("p", "f")]
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert [(r.ok, r.first_bad_seq) for r in reports] == [(False, 1), (False, 1)]
    assert len(statements) < 100, f"{len(statements)} statements to verify two sessions"


class TestForkPointHash:
    @staticmethod
    def _walk(
        rows: dict[str, tuple[str | None, int | None]], parent: str, fork_seq: int
    ) -> tuple[str | None, list[str]]:
        """The fork point of ``parent`` at ``fork_seq`` over ``rows``, and the sessions looked up."""
        looked_up: list[str] = []

        def lineage(sid: str) -> tuple[str | None, int | None] | None:
            looked_up.append(sid)
            return rows.get(sid)

        return fork_point_hash(parent, fork_seq, lineage, lambda sid, seq: f"{sid}@{seq}"), looked_up

    @pytest.mark.parametrize(
        "rows",
        [{"a": ("a", 5)}, {"a": ("b", 5), "b": ("a", 5)}, {"a": ("b", 5), "b": ("c", 5), "c": ("b", 5)}],
        ids=["itself", "two", "a loop above"],
    )
    def test_an_ancestry_that_loops_is_none_after_each_ancestor_is_looked_up_once(
        self, rows: dict[str, tuple[str | None, int | None]]
    ) -> None:
        """A loop of parents (only an altered row makes one) has no fork point: found when an
        ancestor comes round again, not after 10,000 lookups."""
        point, looked_up = self._walk(rows, "a", 3)

        assert point is None
        assert looked_up == list(rows)

    def test_the_fork_point_is_the_event_of_the_ancestor_that_holds_it(self) -> None:
        """Below a parent's own fork point the event is its parent's: the walk goes up until an
        ancestor's own events hold the seq."""
        rows: dict[str, tuple[str | None, int | None]] = {"c": ("b", 4), "b": ("a", 2), "a": (None, None)}

        assert self._walk(rows, "c", 6) == ("c@2", ["c"])
        assert self._walk(rows, "c", 3) == ("b@1", ["c", "b"])
        assert self._walk(rows, "c", 2) == ("a@2", ["c", "b", "a"])
        assert self._walk({"c": ("gone", 4)}, "c", 2) == (None, ["c", "gone"])
        assert fork_point_hash(None, None, rows.get, lambda sid, seq: "x") == ""
        assert fork_point_hash("c", 0, rows.get, lambda sid, seq: "x") == ""


def test_a_payload_nested_too_deeply_is_data_corruption(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A payload altered into JSON nested 100,000 deep (no append stores one) is corruption for
    every reader of the payload, not a RecursionError."""
    store = shared_backend.open()
    try:
        sid = store.create_session("s", events=_messages(3)).id
        deep = '{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"
        _tamper(
            store,
            "UPDATE events SET payload = :payload, payload_packed = NULL WHERE session_id = :sid AND seq = 2",
            sid=sid,
            payload=deep,
        )
        second = store.read(sid)[1]

        undecodable = "seq 2: the stored message_appended event does not decode"
        for read in (lambda: second.payload_dict(), lambda: second.to_dict(), lambda: second.event):
            with pytest.raises(DataCorruptionError, match=undecodable):
                read()
        for command in (["events", sid, "--json"], ["export", sid, "-o", str(tmp_path / "out.jsonl")]):
            code, _ = _cli(*command, "--db", shared_backend.url)
            err = capsys.readouterr().err
            assert code == sessionstore.errors.EXIT_INTEGRITY, (command, err)
            assert "seq 2" in err and len(err.splitlines()) == 1
    finally:
        store.close()


def test_export_of_a_payload_without_the_fields_of_its_type_is_data_corruption(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    """Export reads payloads' fields as stored; one altered into ``{}`` is reported as the altered
    event (its seq), not as the exporter's KeyError."""
    store = shared_backend.open()
    try:
        sid = store.create_session("s", events=_messages(3)).id
        _tamper(
            store,
            "UPDATE events SET payload = '{}', payload_packed = NULL WHERE session_id = :sid AND seq = 2",
            sid=sid,
        )

        with pytest.raises(DataCorruptionError, match="seq 2") as caught:
            sessionstore.claude_code.export_claude_code(store, sid)
        assert caught.value.seq == 2
        code, _ = _cli("export", sid, "--db", shared_backend.url)
        assert code == sessionstore.errors.EXIT_INTEGRITY
        assert "seq 2" in capsys.readouterr().err
    finally:
        store.close()


def test_an_exporters_own_error_is_not_reported_as_corruption(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over an intact log, a KeyError in the exporter (a bug in the code, not in the rows)
    reaches the caller as it is."""
    from sessionstore.claude_code import _export

    def buggy(index: Any) -> Any:
        raise KeyError("exporter bug")
        yield ""

    monkeypatch.setattr(_export, "_synthesized", buggy)
    sid = store.create_session("s", events=_messages(2)).id

    with pytest.raises(KeyError, match="exporter bug"):
        _export.export_claude_code(store, sid)


def test_export_of_a_sub_agent_whose_first_event_was_altered_is_data_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export --dir`` names each sub-agent's file after its first event's ``agent_id``: that
    event altered into one whose metadata is no object is the altered event, and nothing is
    written (it was an AttributeError traceback)."""
    from ._claude_code_corpus import corpus_file

    main_id = "b6240830-5041-465e-aad0-910c13cd9b6c"
    names = [f"rcgray__claude-code-bug-phantom-reads-17407__{n}.jsonl" for n in (main_id, "agent-1698e3ad")]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with sessionstore.open_store(url, migrate=True) as store:
        sessionstore.import_claude_code(store, [corpus_file(name) for name in names])
        child = f"{main_id}.agent-1698e3ad"
        assert store.read(child, 1, 1)[0].type == "session_started"
        _tamper(
            store,
            "UPDATE events SET payload = :payload, payload_packed = NULL WHERE session_id = :sid AND seq = 1",
            sid=child,
            payload=json.dumps({"metadata": [1]}),
        )

    code, _ = _cli("export", main_id, "--dir", str(tmp_path / "out"), "--db", url)
    err = capsys.readouterr().err

    assert code == sessionstore.errors.EXIT_INTEGRITY, err
    assert err.startswith(f"sessionstore: session '{child}', seq 1: the event read does not match its hash")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


def test_verify_all_goes_on_past_a_sessions_row_altered_so_it_does_not_read(store: SessionStore) -> None:
    """One altered ``sessions`` row is reported BROKEN, and every other session is still verified
    and its head listed (the row stopped the whole walk where list_sessions raised)."""
    for sid in ("a", "b", "c"):
        store.create_session(sid, events=_messages(2))
    _tamper(store, "UPDATE sessions SET metadata = '[1]' WHERE id = 'b'")

    results = {r.chain.session_id: r for r in verify_all(store, page_size=2)}

    assert sorted(results) == ["a", "b", "c"]
    assert results["a"].ok and results["c"].ok
    assert not results["b"].ok and "its sessions row's metadata is '[1]'" in str(results["b"].chain.reason)
    assert [head.session_id for head in all_heads(store, page_size=2)] == ["a", "b", "c"]


def test_a_legitimate_value_read_from_a_deep_stack_is_not_reported_as_corruption(store: SessionStore) -> None:
    """Metadata nested as deep as appends allow, read where the caller's own stack is
    nearly full: json.loads' RecursionError reaches the caller as it is, not as an altered row."""
    import inspect
    import sys

    deep: dict[str, Any] = {}
    for _ in range(150):
        deep = {"k": deep}
    sid = store.create_session("s", metadata=deep).id
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(len(inspect.stack(0)) + 120)  # room for the calls, not for 150 levels
        with pytest.raises(RecursionError):
            store.get_session(sid)
    finally:
        sys.setrecursionlimit(limit)
    assert store.get_session(sid).metadata == deep

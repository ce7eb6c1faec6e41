"""The store contract, run against every backend (SQLite file, SQLite :memory:, PostgreSQL)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import (
    ANY,
    ConcurrencyError,
    MessageAppended,
    SessionExistsError,
    SessionNotFoundError,
    SessionStarted,
    SessionStore,
    UsageRecorded,
    ValidationError,
)
from sessionstore.errors import DuplicateEventError
from sessionstore.store import AppendResult, SessionWrite, _contract, _sql

pytestmark = pytest.mark.store_contract


def _messages(n: int, prefix: str = "message") -> list[MessageAppended]:
    return [
        MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"{prefix} {i}") for i in range(n)
    ]


def _new_session(store: SessionStore) -> str:
    return store.create_session(events=[SessionStarted(model="claude-sonnet-4-5")]).id


class TestAppendAndRead:
    def test_events_read_back_equal_in_order_with_gap_free_seqs(self, store: SessionStore) -> None:
        """What was appended is what is read: same events, seq 1..n, increasing positions."""
        sid = _new_session(store)
        batch = [*_messages(3), UsageRecorded(input_tokens=10, output_tokens=2)]

        result = store.append(sid, batch, expected_seq=1)
        recorded = store.read(sid)

        assert result.seqs == (2, 3, 4, 5)
        assert result.last_seq == 5
        assert [r.seq for r in recorded] == [1, 2, 3, 4, 5]
        assert [r.event for r in recorded[1:]] == batch
        assert [r.position for r in recorded[1:]] == list(result.positions)
        assert list(result.positions) == sorted(set(result.positions))

    def test_read_range_and_last_seq(self, store: SessionStore) -> None:
        """Reads honour from_seq / to_seq; last_seq is the head."""
        sid = _new_session(store)
        store.append(sid, _messages(5), expected_seq=ANY)

        assert [r.seq for r in store.read(sid, 3, 4)] == [3, 4]
        assert [r.seq for r in store.read(sid, 5)] == [5, 6]
        assert store.last_seq(sid) == 6

    def test_token_counts_are_stored_with_message_events(self, backend: Any) -> None:
        """Message events carry the tokenizer's count; events without text carry None."""
        counted = backend.open()
        try:
            sid = _new_session(counted)
            counted.append(sid, [MessageAppended(role="user", content="hello world")], expected_seq=1)
            started, message = counted.read(sid)
        finally:
            counted.close()

        assert started.token_count is None
        assert message.token_count == sessionstore.store.TiktokenCounter().count_text("hello world") == 2

    def test_counting_off_stores_no_counts(self, backend: Any) -> None:
        """token_counter=None turns counting off."""
        uncounted = backend.open(token_counter=None)
        try:
            sid = _new_session(uncounted)
            uncounted.append(sid, _messages(1), expected_seq=1)
            recorded = uncounted.read(sid)
        finally:
            uncounted.close()

        assert [r.token_count for r in recorded] == [None, None]

    def test_read_all_returns_every_session_in_global_order(self, store: SessionStore) -> None:
        """read_all pages through all sessions by position."""
        a, b = _new_session(store), _new_session(store)
        store.append(a, _messages(2), expected_seq=1)
        store.append(b, _messages(2), expected_seq=1)

        everything = store.read_all()
        first_page = store.read_all(0, limit=3)
        rest = store.read_all(first_page[-1].position)

        assert [r.position for r in everything] == sorted(r.position for r in everything)
        assert len(everything) == 6
        assert store.max_position() == everything[-1].position
        assert first_page + rest == everything
        assert {r.session_id for r in everything} == {a, b}

    def test_unknown_session_is_a_clear_error(self, store: SessionStore) -> None:
        """Every per-session call names a missing session."""
        for call in (
            lambda: store.append("nope", _messages(1), expected_seq=0),
            lambda: store.read("nope"),
            lambda: store.last_seq("nope"),
            lambda: store.get_session("nope"),
        ):
            with pytest.raises(SessionNotFoundError, match="'nope'"):
                call()


class TestValidation:
    def test_one_invalid_event_in_a_batch_writes_nothing_and_names_the_field(
        self, store: SessionStore
    ) -> None:
        """A bad dict at index 1 fails the whole batch; the error names index, type and field."""
        sid = _new_session(store)
        before = store.max_position()
        batch: list[Any] = [
            {"type": "message_appended", "role": "user", "content": "fine"},
            {"type": "message_appended", "role": "robot", "content": "bad role"},
        ]

        with pytest.raises(ValidationError) as caught:
            store.append(sid, batch, expected_seq=1)

        assert caught.value.index == 1
        assert caught.value.event_type == "message_appended"
        assert caught.value.field == "role"
        assert "#1" in str(caught.value)
        assert "'role'" in str(caught.value)
        assert store.last_seq(sid) == 1
        assert store.max_position() == before

    def test_unknown_event_type_is_rejected(self, store: SessionStore) -> None:
        """An unregistered type names the field 'type' and the known types."""
        sid = _new_session(store)

        with pytest.raises(ValidationError, match="unknown event type 'nonsense'") as caught:
            store.append(sid, [{"type": "nonsense"}], expected_seq=ANY)

        assert caught.value.field == "type"

    def test_content_blocks_need_a_type(self, store: SessionStore) -> None:
        """Content blocks are kept verbatim but each must say what it is."""
        sid = _new_session(store)

        with pytest.raises(ValidationError, match="content"):
            store.append(sid, [{"type": "message_appended", "role": "user", "content": [{"text": "x"}]}], ANY)

    def test_same_event_id_twice_in_one_batch_is_rejected(self, store: SessionStore) -> None:
        """Duplicate ids inside one batch are a validation error, not a silent merge."""
        sid = _new_session(store)
        event = MessageAppended(role="user", content="x")

        with pytest.raises(ValidationError, match="appears twice"):
            store.append(sid, [event, event], expected_seq=ANY)

    @pytest.mark.parametrize("bad", [-1, "3", None, 1.5])
    def test_expected_seq_must_be_a_count_or_any(self, store: SessionStore, bad: Any) -> None:
        """expected_seq is validated before anything is read or written."""
        sid = _new_session(store)

        with pytest.raises(ValidationError, match="expected_seq"):
            store.append(sid, _messages(1), expected_seq=bad)

    def test_a_single_event_must_be_wrapped_in_a_list(self, store: SessionStore) -> None:
        """Passing one event instead of a sequence is a clear error."""
        sid = _new_session(store)

        with pytest.raises(ValidationError, match="sequence"):
            store.append(sid, MessageAppended(role="user", content="x"), expected_seq=ANY)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad_id", ["", "has space", "x" * 65, "-leading", "a/b"])
    def test_session_ids_are_checked(self, store: SessionStore, bad_id: str) -> None:
        """Session ids are short, printable and safe in paths and URLs."""
        with pytest.raises(ValidationError, match="invalid session id"):
            store.create_session(bad_id)


class TestConcurrencyControl:
    def test_stale_expected_seq_raises_and_writes_nothing(self, store: SessionStore) -> None:
        """A writer that read an old head gets ConcurrencyError with both numbers."""
        sid = _new_session(store)
        store.append(sid, _messages(2), expected_seq=1)

        with pytest.raises(ConcurrencyError) as caught:
            store.append(sid, _messages(1), expected_seq=1)

        assert (caught.value.expected, caught.value.actual) == (1, 3)
        assert store.last_seq(sid) == 3

    def test_any_skips_the_check(self, store: SessionStore) -> None:
        """ANY appends after whatever the head is."""
        sid = _new_session(store)

        assert store.append(sid, _messages(2), expected_seq=ANY).seqs == (2, 3)

    def test_empty_append_checks_and_reports_the_head(self, store: SessionStore) -> None:
        """An empty batch writes nothing, still checks expected_seq, and returns the head."""
        sid = _new_session(store)

        assert store.append(sid, [], expected_seq=1).last_seq == 1
        assert store.append(sid, [], expected_seq=ANY).last_seq == 1
        with pytest.raises(ConcurrencyError):
            store.append(sid, [], expected_seq=0)


class TestIdempotency:
    def test_retry_after_lost_acknowledgement_returns_original_positions(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The commit happens, the reply is lost; the retry writes nothing and gets the same answer."""
        sid = _new_session(store)
        batch = _messages(3)
        real_result = AppendResult  # what _sql builds its results with, replaced below
        lost: list[Any] = []

        def lose_the_reply(*args: Any, **kwargs: Any) -> Any:
            lost.append(real_result(*args, **kwargs))
            raise ConnectionResetError("reply lost after commit")

        monkeypatch.setattr(_sql, "AppendResult", lose_the_reply)
        with pytest.raises(ConnectionResetError):
            store.append(sid, batch, expected_seq=1)
        monkeypatch.setattr(_sql, "AppendResult", real_result)
        retry = store.append(sid, batch, expected_seq=1)

        assert retry.deduplicated
        assert retry.positions == lost[0].positions
        assert retry.seqs == (2, 3, 4)
        assert store.last_seq(sid) == 4
        assert len(store.read(sid)) == 4

    def test_retry_still_deduplicates_after_the_session_moved_on(self, store: SessionStore) -> None:
        """Even with ANY or an old expected_seq, a stored batch is recognised, not re-appended."""
        sid = _new_session(store)
        batch = _messages(2)
        first = store.append(sid, batch, expected_seq=1)
        store.append(sid, _messages(2, "later"), expected_seq=3)

        for expected in (1, ANY):
            again = store.append(sid, batch, expected_seq=expected)
            assert again.deduplicated
            assert again.positions == first.positions
        assert store.last_seq(sid) == 5

    def test_dict_events_with_the_same_id_are_idempotent_too(self, store: SessionStore) -> None:
        """Idempotency is by event_id and content, whether the event came as a model or a dict."""
        sid = _new_session(store)
        event = MessageAppended(role="user", content="from json")
        as_dict = event.model_dump(mode="json")

        first = store.append(sid, [event], expected_seq=1)
        again = store.append(sid, [as_dict], expected_seq=1)

        assert again.deduplicated
        assert again.positions == first.positions

    def test_write_sessions_settles_a_redelivery_at_the_current_head_as_append_does(
        self, store: SessionStore
    ) -> None:
        """A batch already stored, written again with the head it left: the original result, not
        an IntegrityError; the other writes of the transaction still go in."""
        sid, other = _new_session(store), _new_session(store)
        event = MessageAppended(role="user", content="once")
        first = store.append(sid, [event], expected_seq=1)

        again, beside = store.write_sessions(
            [SessionWrite(sid, [event], expected_seq=2), SessionWrite(other, _messages(1), expected_seq=1)]
        )

        assert again.deduplicated and again.positions == first.positions
        assert beside.seqs == (2,) and store.last_seq(sid) == 2
        forged = MessageAppended(event_id=event.event_id, role="user", content="changed")
        with pytest.raises(DuplicateEventError, match="different content"):
            store.write_sessions([SessionWrite(sid, [forged], expected_seq=2)])

    def test_same_id_with_different_content_is_an_error(self, store: SessionStore) -> None:
        """Reusing an event_id for other content is refused and writes nothing."""
        sid = _new_session(store)
        original = MessageAppended(role="user", content="original")
        store.append(sid, [original], expected_seq=1)
        forged = MessageAppended(event_id=original.event_id, role="user", content="changed")

        with pytest.raises(DuplicateEventError, match="different content"):
            store.append(sid, [forged], expected_seq=ANY)
        assert store.last_seq(sid) == 2

    def test_partially_stored_batch_is_an_error(self, store: SessionStore) -> None:
        """A batch mixing stored and new ids cannot be a retry; nothing is written."""
        sid = _new_session(store)
        stored = _messages(1)
        store.append(sid, stored, expected_seq=1)

        with pytest.raises(DuplicateEventError, match="part of this batch"):
            store.append(sid, [*stored, *_messages(1)], expected_seq=ANY)
        assert store.last_seq(sid) == 2

    def test_event_id_stored_in_another_session_is_an_error(self, store: SessionStore) -> None:
        """Event ids are unique across the store."""
        a, b = _new_session(store), _new_session(store)
        event = MessageAppended(role="user", content="x")
        store.append(a, [event], expected_seq=1)

        with pytest.raises(DuplicateEventError, match="already stored in session"):
            store.append(b, [event], expected_seq=1)


class TestSessions:
    def test_create_with_events_is_atomic(self, store: SessionStore) -> None:
        """A bad initial event leaves no session behind."""
        with pytest.raises(ValidationError):
            store.create_session("atomic-1", events=[{"type": "usage_recorded", "input_tokens": -1}])

        with pytest.raises(SessionNotFoundError):
            store.get_session("atomic-1")

    def test_duplicate_id_is_refused(self, store: SessionStore) -> None:
        """Session ids are unique."""
        store.create_session("dup-1")

        with pytest.raises(SessionExistsError):
            store.create_session("dup-1")

    def test_metadata_and_lineage_round_trip(self, store: SessionStore) -> None:
        """Parent and fork point are stored; a fork beyond the parent's head is refused."""
        parent = _new_session(store)
        store.append(parent, _messages(2), expected_seq=1)

        child = store.create_session(
            "child-1", parent_session_id=parent, fork_seq=2, metadata={"k": [1, "v"]}
        )
        loaded = store.get_session("child-1")

        assert loaded == child
        assert (loaded.parent_session_id, loaded.fork_seq, loaded.metadata) == (parent, 2, {"k": [1, "v"]})
        with pytest.raises(ValidationError, match="beyond"):
            store.create_session(parent_session_id=parent, fork_seq=9)
        with pytest.raises(SessionNotFoundError):
            store.create_session(parent_session_id="missing-parent")
        with pytest.raises(ValidationError, match="JSON"):
            store.create_session(metadata={"x": object()})

    def test_list_sessions_pages_by_id(self, store: SessionStore) -> None:
        """list_sessions is ordered and resumable."""
        for name in ("s-b", "s-a", "s-c"):
            store.create_session(name)

        first = store.list_sessions(limit=2)
        rest = store.list_sessions(after=first[-1].id)

        assert [s.id for s in first + rest] == ["s-a", "s-b", "s-c"]


class TestBlobs:
    def test_put_is_content_addressed_and_deduplicated(self, store: SessionStore) -> None:
        """The same bytes are stored once; get returns them exactly."""
        big = ("line of tool output\n" * 5000).encode()

        ref = store.put_blob(big)
        again = store.put_blob(big)
        tiny = store.put_blob(b"x")

        assert ref == again
        assert ref.size == len(big)
        assert store.get_blob(ref.sha256) == big
        assert store.get_blob(tiny.sha256) == b"x"
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            assert conn.execute(text("SELECT count(*) FROM blobs")).scalar_one() == 2

    def test_missing_blob_is_a_key_error(self, store: SessionStore) -> None:
        """get_blob of an unknown hash raises KeyError."""
        with pytest.raises(KeyError):
            store.get_blob("0" * 64)


class TestVerify:
    def test_untouched_chain_verifies(self, store: SessionStore) -> None:
        """A normal session verifies end to end, and ranged verified reads pass."""
        sid = _new_session(store)
        store.append(sid, _messages(4), expected_seq=1)

        report = store.verify(sid)

        assert report.ok
        assert report.events_checked == 5
        assert len(store.read(sid, 3, verify=True)) == 3


@pytest.fixture
def raw_sql(store: SessionStore) -> Callable[[str], None]:
    """Run one statement through the store's engine, translating errors like the store does."""

    def run(statement: str) -> None:
        with _sql.translate_errors(), store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(text(statement))

    return run


class TestAppendOnly:
    @pytest.mark.parametrize(
        "statement",
        [
            "UPDATE events SET payload = '{}'",
            "DELETE FROM events",
            "UPDATE blobs SET size = 0",
            "DELETE FROM blobs",
            "UPDATE sessions SET metadata = '{}'",
            "DELETE FROM sessions",
        ],
    )
    def test_database_rejects_changes(
        self, store: SessionStore, raw_sql: Callable[[str], None], statement: str
    ) -> None:
        """The database itself refuses UPDATE and DELETE on events, blobs and sessions."""
        sid = _new_session(store)
        store.append(sid, _messages(2), expected_seq=1)
        store.put_blob(b"payload")

        with pytest.raises(sessionstore.errors.AppendOnlyViolation, match="append-only"):
            raw_sql(statement)
        assert store.verify(sid).ok
        assert store.get_blob(store.put_blob(b"payload").sha256) == b"payload"

    @pytest.mark.postgres
    @pytest.mark.parametrize("table", ["events", "blobs", "sessions"])
    def test_postgres_rejects_truncate(self, pg_backend: Any, table: str) -> None:
        """TRUNCATE skips row triggers; a statement trigger refuses it on PostgreSQL."""
        pg_store = pg_backend.open()
        try:
            _new_session(pg_store)
            with (
                pytest.raises(sessionstore.errors.AppendOnlyViolation),
                _sql.translate_errors(),
                pg_store.engine.begin() as conn,
            ):
                conn.execute(text(f"TRUNCATE {table} CASCADE"))
            assert pg_store.max_position() == 1
        finally:
            pg_store.close()


def _bypass_triggers_and_run(store: SessionStore, statement: str, **params: Any) -> None:
    """As the database owner, switch enforcement off for one statement (tamper simulation)."""
    engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            conn.execute(text(statement), params)
        else:
            conn.execute(text("DROP TRIGGER events_append_only_update"))
            conn.execute(text("DROP TRIGGER blobs_append_only_update"))
            conn.execute(text(statement), params)
            for table in ("events", "blobs"):
                conn.execute(
                    text(
                        f"CREATE TRIGGER {table}_append_only_update BEFORE UPDATE ON {table} "
                        "BEGIN SELECT RAISE(ABORT, 'sessionstore: append-only table'); END"
                    )
                )


class TestTamperEvidence:
    @pytest.fixture
    def paged(self, store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> str:
        """A session of 10 events that ``verify`` walks 3 events at a time."""
        monkeypatch.setattr(_contract, "VERIFY_PAGE", 3)
        sid = _new_session(store)
        store.append(sid, _messages(9), expected_seq=1)
        return sid

    def test_a_chain_walked_a_page_at_a_time_verifies_whole_and_holds_its_anchors(
        self, store: SessionStore, paged: str
    ) -> None:
        events = store.read(paged)
        report = store.verify(paged)
        assert (report.ok, report.events_checked, report.head) == (True, 10, events[-1].hash)
        assert store.verify(paged, head=events[1].hash).ok  # a hash in the first page
        assert store.verify(paged, head=events[4].hash).ok  # in the middle page
        assert store.verify(paged, head=store.head(paged)).ok
        gone = store.verify(paged, head=sessionstore.store.ChainHead(paged, 11, events[-1].hash))
        assert (gone.ok, gone.events_checked) == (False, 10)
        assert "the log ends at seq 10" in (gone.reason or "")
        assert not store.verify(paged, head="0" * 64).ok

    def test_a_tamper_in_a_later_page_is_found_at_its_seq(self, store: SessionStore, paged: str) -> None:
        _bypass_triggers_and_run(
            store,
            "UPDATE events SET payload = replace(payload, 'message 6', 'message X') "
            "WHERE session_id = :s AND seq = 8",
            s=paged,
        )
        report = store.verify(paged)
        assert (report.ok, report.first_bad_seq, report.events_checked) == (False, 8, 10)

    def test_positions_out_of_order_across_a_page_boundary_are_found(
        self, store: SessionStore, paged: str
    ) -> None:
        """seq 4 opens the second page: its position must still follow seq 3's."""
        _bypass_triggers_and_run(
            store, "UPDATE events SET position = 0 WHERE session_id = :s AND seq = 4", s=paged
        )
        report = store.verify(paged)
        assert (report.ok, report.first_bad_seq) == (False, 4)
        assert "position 0 is not after seq 3" in (report.reason or "")

    @pytest.mark.parametrize("moved_to", [12, 2**62])
    def test_a_gap_is_found_wherever_the_next_row_is(
        self, store: SessionStore, paged: str, moved_to: int
    ) -> None:
        """A row moved past the end (even near 2**63) leaves a gap at its seq: found, not walked to."""
        _bypass_triggers_and_run(
            store, "UPDATE events SET seq = :to WHERE session_id = :s AND seq = 7", s=paged, to=moved_to
        )
        report = store.verify(paged)
        assert (report.ok, report.events_checked, report.first_bad_seq) == (False, 10, 8)
        assert report.reason == "seq gap: expected 7"

    @pytest.mark.parametrize(
        ("statement", "problem"),
        [
            ("UPDATE events SET seq = 1e19 WHERE session_id = :s AND seq = 7", "seq gap: expected 7"),
            ("UPDATE events SET seq = 5.5 WHERE session_id = :s AND seq = 7", "seq is 5.5, not an integer"),
            ("UPDATE events SET seq = 'seven' WHERE session_id = :s AND seq = 7", "seq is 'seven', not"),
            (  # one row more, between the last two whole seqs
                "INSERT INTO events (session_id, seq, event_id, type, schema_version, payload, prev_hash, "
                "hash, created_at) SELECT session_id, 10.5, 'forged', type, schema_version, payload, "
                "prev_hash, hash, created_at FROM events WHERE session_id = :s AND seq = 10",
                "seq is 10.5, not an integer",
            ),
        ],
    )
    def test_a_seq_sqlite_keeps_as_real_or_text_is_reported_not_raised(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, statement: str, problem: str
    ) -> None:
        """SQLite keeps a REAL or TEXT in the seq column: verify reports the altered row (the
        walk a page at a time may not step over it, nor ``int(5.5)`` hide it), never raises."""
        monkeypatch.setattr(_contract, "VERIFY_PAGE", 3)
        with sessionstore.open_store(tmp_path / "t.db", migrate=True, token_counter=None) as store:
            sid = _new_session(store)
            store.append(sid, _messages(9), expected_seq=1)
            _bypass_triggers_and_run(store, statement, s=sid)
            report = store.verify(sid)
        assert not report.ok
        assert problem in (report.reason or "")

    def test_flipped_byte_is_found_at_its_seq(self, store: SessionStore) -> None:
        """Change one byte of one payload: verify names that seq, verified reads raise."""
        sid = _new_session(store)
        store.append(sid, _messages(5), expected_seq=1)
        _bypass_triggers_and_run(
            store,
            f"UPDATE events SET payload = replace(payload, 'message 2', 'message 3') "
            f"WHERE session_id = '{sid}' AND seq = 4",
        )

        report = store.verify(sid)

        assert not report.ok
        assert report.first_bad_seq == 4
        assert "hash" in (report.reason or "")
        with pytest.raises(sessionstore.DataCorruptionError) as caught:
            store.read(sid, verify=True)
        assert caught.value.seq == 4
        assert len(store.read(sid)) == 6  # unverified reads still work, for forensics

    def test_rewritten_hash_breaks_the_link_to_the_next_event(self, store: SessionStore) -> None:
        """Editing a payload and recomputing that row's hash still breaks the next row's prev_hash."""
        sid = _new_session(store)
        store.append(sid, _messages(3), expected_seq=1)
        original = store.read(sid)[1]
        forged = dataclasses.replace(original, payload=original.payload.replace("message 0", "message X"))
        assert forged.payload != original.payload
        _bypass_triggers_and_run(
            store,
            "UPDATE events SET payload = :payload, hash = :hash WHERE session_id = :sid AND seq = 2",
            payload=forged.payload,
            hash=forged.computed_hash(),
            sid=sid,
        )

        tampered = store.read(sid)[1]
        report = store.verify(sid)

        assert tampered.computed_hash() == tampered.hash  # the edited row checks out on its own
        assert report.first_bad_seq == 3
        assert report.reason == "prev_hash does not match the previous event's hash"

    def test_tampered_blob_is_detected_on_read(self, store: SessionStore) -> None:
        """A blob whose bytes no longer match its hash raises instead of returning them."""
        ref = store.put_blob(b"tiny original")
        _bypass_triggers_and_run(
            store, "UPDATE blobs SET data = :data WHERE sha256 = :sha", data=b"\x00", sha=ref.sha256
        )

        with pytest.raises(sessionstore.DataCorruptionError, match="blob"):
            store.get_blob(ref.sha256)


def test_a_very_large_batch_is_stored_whole(store: SessionStore) -> None:
    """More events than a driver allows parameters in one statement (PostgreSQL: 65,535) still work."""
    sid = store.create_session().id
    batch = [UsageRecorded(input_tokens=i, output_tokens=0) for i in range(70_000)]

    result = store.append(sid, batch, expected_seq=ANY)
    again = store.append(sid, batch[:3], expected_seq=ANY)

    assert result.last_seq == 70_000
    assert again.deduplicated

"""Token counts made after COMMIT (``open_store(defer_token_counts=True)``, the default).

An append stores an event with text without its count; the first read that returns it counts
it, and the count is stored with the session's next write (an append, a snapshot) or when the
store closes. What a reader sees is the count an append would have stored: every view, token
estimate and request is the same as with counting inside the append.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import MessageAppended, Session, SessionStarted, UsageRecorded
from sessionstore.store import TiktokenCounter

from .conftest import Backend
from .strategies import examples, message_events, turn_logs


class _Recording(TiktokenCounter):
    """cl100k, remembering which events it counted."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[str] = []

    def count(self, event: sessionstore.Event) -> int | None:
        self.counted.append(str(event.event_id))
        return super().count(event)


def _rows(backend: Backend, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` on the backend's database, through a connection of the test's own."""
    engine = create_engine(sessionstore.store.resolve_url(backend.url))
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def _stored_counts(backend: Backend, session_id: str) -> dict[int, int | None]:
    rows = _rows(backend, "SELECT seq, token_count FROM token_counts WHERE session_id = :s", s=session_id)
    return {int(seq): count for seq, count in rows}


def _conversation() -> list[Any]:
    return [
        SessionStarted(model="claude-sonnet-4-5"),
        MessageAppended(role="user", content="Read a.py and explain it."),
        MessageAppended(
            role="assistant",
            content=[{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}}],
            api_message_id="msg_1",
        ),
        MessageAppended(
            role="user",
            content=[{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1\n" * 50}],
        ),
        UsageRecorded(input_tokens=900, output_tokens=40),
        MessageAppended(role="assistant", content="It sets x to one, fifty times.", api_message_id="msg_2"),
    ]


def test_an_append_stores_no_count_and_a_read_gives_the_count_inline_counting_stores(
    shared_backend: Backend,
) -> None:
    """The row holds NULL (hashed as NULL) and the deferred flag; a read reports the very count a
    store counting inside the append stores in its row; the chain verifies."""
    deferred = shared_backend.open()
    inline = shared_backend.open(defer_token_counts=False)
    try:
        late = deferred.create_session(events=_conversation()).id
        early = inline.create_session(events=_conversation()).id

        rows = _rows(
            shared_backend,
            "SELECT seq, token_count, token_count_deferred FROM events WHERE session_id = :s ORDER BY seq",
            s=late,
        )
        read_late, read_early = deferred.read(late), inline.read(early)
        stored = deferred.read_stored(late)
    finally:
        deferred.close()
        inline.close()

    texts = {2, 3, 4, 6}  # the start and the usage have no text: no count, nothing deferred
    assert [(seq, count, bool(flag)) for seq, count, flag in rows] == [
        (seq, None, seq in texts) for seq in range(1, 7)
    ]
    assert [e.token_count for e in read_late] == [e.token_count for e in read_early]
    assert read_early[3].token_count and read_early[3].token_count > 50
    assert [e.token_count_deferred for e in read_late] == [e.seq in texts for e in read_late]
    assert not any(e.token_count_deferred for e in read_early)
    assert [e.token_count for e in stored] == [None] * 6  # as stored: nothing filled in
    reopened = shared_backend.open()
    try:
        assert reopened.verify(late).ok
        assert reopened.read(late, verify=True)[1].token_count == read_early[1].token_count
    finally:
        reopened.close()


def test_counts_ride_along_with_the_session_s_next_append(shared_backend: Backend) -> None:
    """A read's counts are stored by the next append of the session (no write of their own);
    a store opened afterwards reads them and counts nothing."""
    store = shared_backend.open()
    try:
        sid = store.create_session(events=_conversation()).id
        first = store.read(sid)
        assert _stored_counts(shared_backend, sid) == {}
        store.append(sid, [MessageAppended(role="user", content="thanks")], expected_seq=6)
        after_append = _stored_counts(shared_backend, sid)
    finally:
        store.close()

    assert after_append == {e.seq: e.token_count for e in first if e.token_count_deferred}
    counter = _Recording()
    later = shared_backend.open(token_counter=counter)
    try:
        again = later.read(sid)
    finally:
        later.close()
    assert [e.token_count for e in again[:6]] == [e.token_count for e in first]
    assert counter.counted == [again[6].event_id]  # only the event appended after the read


def test_a_snapshot_and_close_store_the_counts_and_a_lost_backlog_is_counted_again(
    shared_backend: Backend,
) -> None:
    store = shared_backend.open()
    sid = store.create_session(events=_conversation()).id
    session = Session(store, sid)  # its rebuild reads (and counts) the log
    used = session.used_tokens()
    session.snapshot()
    assert set(_stored_counts(shared_backend, sid)) == {2, 3, 4, 6}

    other = store.create_session(events=_conversation()).id
    store.read(other)
    assert store.store_token_counts() == 4
    assert store.store_token_counts() == 0
    assert set(_stored_counts(shared_backend, other)) == {2, 3, 4, 6}

    third = store.create_session(events=_conversation()).id
    store.read(third)
    store.close()  # stores the backlog
    assert set(_stored_counts(shared_backend, third)) == {2, 3, 4, 6}

    # A process that dies before storing its counts loses nothing: the next reader counts.
    crashed = shared_backend.open()
    fourth = crashed.create_session(events=_conversation()).id
    counts = [e.token_count for e in crashed.read(fourth)]
    crashed._counts.forget(fourth)  # type: ignore[attr-defined]  # what dies with the process
    crashed.close()
    assert _stored_counts(shared_backend, fourth) == {}
    fresh = shared_backend.open()
    try:
        assert [e.token_count for e in fresh.read(fourth)] == counts
        assert Session(fresh, sid).used_tokens() == used
    finally:
        fresh.close()


def test_a_store_without_a_counter_reads_stored_counts_and_counts_nothing(shared_backend: Backend) -> None:
    store = shared_backend.open()
    sid = store.create_session(events=_conversation()).id
    blind = shared_backend.open(token_counter=None)
    try:
        assert [e.token_count for e in blind.read(sid)] == [None] * 6
        counted = [e.token_count for e in store.read(sid)]
        store.store_token_counts()
        assert [e.token_count for e in blind.read(sid)] == counted
        assert blind.store_token_counts() == 0
    finally:
        blind.close()
        store.close()


def test_counts_are_stored_only_for_events_that_wait_for_one(shared_backend: Backend) -> None:
    """The insert guard: no row for an event counted inside its append, a missing seq, or an
    event of another session; a count stored twice keeps the first."""
    inline = shared_backend.open(defer_token_counts=False)
    store = shared_backend.open()
    try:
        counted_inline = inline.create_session(events=_conversation()).id
        sid = store.create_session(events=_conversation()).id
        store._counts.add(counted_inline, {2: 999})  # type: ignore[attr-defined]
        store._counts.add(sid, {2: 7, 5: 7, 99: 7})  # type: ignore[attr-defined]
        store.store_token_counts()
        store._counts.add(sid, {2: 8})  # type: ignore[attr-defined]
        store.store_token_counts()
        assert _stored_counts(shared_backend, counted_inline) == {}
        assert _stored_counts(shared_backend, sid) == {2: 7}  # seq 5 has no text, seq 99 no event
    finally:
        store.close()
        inline.close()


def test_erasure_takes_the_counts_with_the_session(shared_backend: Backend) -> None:
    store = shared_backend.open()
    try:
        sid = store.create_session(events=_conversation()).id
        kept = store.create_session(events=_conversation()).id
        store.read(sid)
        store.read(kept)
        store.store_token_counts()
        store.read(sid, 6, 6)
        store.erase(sid, reason="user asked")
        assert store.store_token_counts() == 0
    finally:
        store.close()
    assert _stored_counts(shared_backend, sid) == {}
    assert len(_stored_counts(shared_backend, kept)) == 4


def test_an_encrypted_session_s_counts_are_made_from_its_decrypted_text(tmp_path: Path) -> None:
    master = sessionstore.store.LocalKeyProvider(bytes(range(32)))
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with sessionstore.open_store(url, encryption=master, migrate=True) as store:
        sid = store.create_session(events=_conversation()).id
        counts = [e.token_count for e in store.read(sid)]
    with sessionstore.open_store(url, defer_token_counts=False, migrate=True) as plain:
        expected = [e.token_count for e in plain.read(plain.create_session(events=_conversation()).id)]
    with sessionstore.open_store(url, encryption=master, migrate=True) as store:
        assert [e.token_count for e in store.read(sid)] == counts == expected
        assert store.verify(sid).ok


def test_an_undecodable_payload_keeps_no_count_and_fails_only_where_it_is_used(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with sessionstore.open_store(url, migrate=True) as store:
        sid = store.create_session(events=[MessageAppended(role="user", content="short")]).id
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER events_append_only_update"))
        conn.execute(text("UPDATE events SET payload = '{\"role\": 5}' WHERE seq = 1"))
    engine.dispose()
    with sessionstore.open_store(url) as store:
        (read,) = store.read(sid)
        assert read.token_count is None and read.token_count_deferred
        with pytest.raises(sessionstore.errors.DataCorruptionError):
            read.event  # noqa: B018
        assert not store.verify(sid).ok


@settings(max_examples=examples(25), deadline=None)
@given(log=turn_logs(), extra=message_events())
def test_a_session_reads_the_same_whether_counts_are_deferred_or_not(log: list[Any], extra: Any) -> None:
    """Deferred or inline, a live session, a resumed one and a rebuilt one hold the same counts,
    the same token estimate and the same request bytes."""
    events = [*log, extra]
    results = []
    for defer in (False, True):
        with sessionstore.open_store(":memory:", defer_token_counts=defer) as store:
            sid = store.create_session(events=events[:2]).id
            live = Session(store, sid)
            live.append(events[2:])
            resumed = Session(store, sid, use_snapshots=False)
            results.append(
                (
                    [e.token_count for e in store.read(sid)],
                    live.used_tokens(),
                    live.request_bytes(),
                    resumed.used_tokens(),
                    resumed.request_bytes(),
                )
            )
    assert results[0] == results[1]
    assert results[0][1] == results[0][3]


def test_no_count_is_stored_for_an_erased_session_even_by_a_process_that_counted_before(
    tmp_path: Path,
) -> None:
    """A shredded session keeps its event rows: the guard still refuses its counts."""
    master = sessionstore.store.LocalKeyProvider(bytes(range(32)))
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    reader = sessionstore.open_store(url, encryption=master, migrate=True)
    eraser = sessionstore.open_store(url, encryption=master)
    try:
        sid = reader.create_session(events=_conversation()).id
        reader.read(sid)  # counted: waiting in the reader's backlog
        eraser.erase(sid, reason="user asked")
        assert reader.store_token_counts() == 0
    finally:
        reader.close()
        eraser.close()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one() == 0
    engine.dispose()


def test_an_altered_count_is_reported_as_corruption(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with sessionstore.open_store(url, migrate=True) as store:
        sid = store.create_session(events=_conversation()).id
        store.read(sid)
    engine = create_engine(url)
    with engine.begin() as conn:  # as the owner, past the append-only trigger (revision 0008)
        conn.execute(text("DROP TRIGGER token_counts_append_only_update"))
        conn.execute(text("UPDATE token_counts SET token_count = 'abc' WHERE seq = 2"))
    engine.dispose()
    with sessionstore.open_store(url) as store:
        with pytest.raises(
            sessionstore.errors.DataCorruptionError, match="seq 2: the stored token count 'abc'"
        ):
            store.read(sid)
        assert len(store.read(sid, 3, 4)) == 2  # the rest of the session still reads


def test_storing_counts_never_fails_an_append_and_a_large_backlog_waits(tmp_path: Path) -> None:
    """Counts that cannot be stored stay in memory and the append commits; an append stores at
    most 256 of them along; close stores the rest and leaves no connection open."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = sessionstore.open_store(url, migrate=True)
    sid = store.create_session(events=[MessageAppended(role="user", content=f"m{i}") for i in range(300)]).id
    store.read(sid)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("CREATE TRIGGER refuse BEFORE INSERT ON token_counts BEGIN SELECT RAISE(ABORT, 'no'); END")
        )
    store.append(sid, [MessageAppended(role="user", content="still appended")], expected_seq=300)
    assert store.read(sid, 301, 301)[0].token_count == 2
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER refuse"))
        assert conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one() == 0
    store.append(sid, [MessageAppended(role="user", content="again")], expected_seq=301)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one() == 256
    store.close()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one() == 301
    engine.dispose()
    assert store._writer is None  # type: ignore[attr-defined]  # nothing reopened by the close


def test_store_token_counts_says_how_many_rows_it_added(shared_backend: Backend) -> None:
    first, second, third = shared_backend.open(), shared_backend.open(), shared_backend.open()
    try:
        sid = first.create_session(events=_conversation()).id
        for store in (first, second, third):
            store.read(sid)  # each counts the four events with text
        assert first.store_token_counts() == 4
        assert second.store_token_counts() == 0  # the same counts, stored already
        # Counts another process stored first leave an append's backlog all the same.
        third.append(sid, [MessageAppended(role="user", content="more")], expected_seq=6)
        assert len(third._counts) == 0  # type: ignore[attr-defined]
    finally:
        for store in (first, second, third):
            store.close()

"""The hash chain proves every column of an event row.

Each test edits one column of one stored event with raw SQL, enforcement off, as the database's
owner could (``tests/test_tamper.py`` ``_tamper``), and checks that ``verify`` names that seq.
Where an edit cannot change anything a reader gets (a column reads never use, a value that
means the same), the test says so by checking that every read returns what it returned before.
The one column the chain cannot cover, ``position``, is held to what docs/storage.md says:
within a session positions must increase with seq, and that is all ``verify`` can check.

The known answers at the end pin the hash function itself: a change to what is hashed, or how,
fails them even where every chain written and verified by the same code would still agree.
"""

from __future__ import annotations

import itertools
import uuid
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from sessionstore import MessageAppended, SessionStarted, SessionStore
from sessionstore.store import ChainHead
from sessionstore.store._driver import sqlite_timestamp
from sessionstore.store._hashing import (
    LEGACY_GENESIS_HASH,
    SessionIdentity,
    as_utc,
    event_hash,
    session_genesis,
)
from sessionstore.store._schema import DEFAULT_TABLES

from .conftest import Backend
from .strategies import examples
from .test_tamper import _tamper

# The session every example edits, one row of each kind a store writes:
#   1 session_started: no text, no count          4 a short message counted in the append
#   2 a short message, its count deferred         5 a message appended without a counter
#   3 a long message (packed), count deferred     6 a long message (packed), counted in the append
ROWS = 6
_LONG = "tool output line\n" * 40


@pytest.fixture
def stores(shared_backend: Backend) -> Iterator[tuple[SessionStore, SessionStore, SessionStore]]:
    """(counts deferred, counted in the append, no counter) on one database, shared by the examples."""
    deferred = shared_backend.open()
    inline = shared_backend.open(defer_token_counts=False)
    blind = shared_backend.open(token_counter=None)
    try:
        yield deferred, inline, blind
    finally:
        for store in (deferred, inline, blind):
            store.close()


def _session(stores: tuple[SessionStore, SessionStore, SessionStore]) -> str:
    """A new session holding one row of each kind (``ROWS``)."""
    deferred, inline, blind = stores
    sid = f"s-{uuid.uuid4().hex[:12]}"
    deferred.create_session(
        sid,
        events=[
            SessionStarted(model="m"),
            MessageAppended(role="user", content="a short question"),
            MessageAppended(role="assistant", content="long answer\n" + _LONG),
        ],
    )
    inline.append(sid, [MessageAppended(role="user", content="counted in the append")], expected_seq=3)
    blind.append(sid, [MessageAppended(role="assistant", content="never counted")], expected_seq=4)
    inline.append(sid, [MessageAppended(role="user", content="long, counted\n" + _LONG)], expected_seq=5)
    return sid


def _row(store: SessionStore, sid: str, seq: int) -> dict[str, Any]:
    """The events row as the database holds it."""
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        statement = text("SELECT * FROM events WHERE session_id = :sid AND seq = :seq")
        return dict(conn.execute(statement, {"sid": sid, "seq": seq}).mappings().one())


def _taken(store: SessionStore, column: str, value: object) -> bool:
    """True when some events row already holds ``value`` in a unique ``column``."""
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        found = conn.execute(text(f"SELECT 1 FROM events WHERE {column} = :v"), {"v": value}).first()
        return found is not None


def _what_reads_return(store: SessionStore, sid: str) -> list[tuple[Any, ...]]:
    """Every field of every event a read returns, the payload's text and the count included."""
    return [
        (
            e.seq,
            e.position,
            e.event_id,
            e.type,
            e.schema_version,
            e.payload,
            e.token_count,
            e.token_count_deferred,
            e.prev_hash,
            e.hash,
            e.created_at,
        )
        for e in store.read(sid)
    ]


def _packed(codec: str, payload: str) -> bytes:
    if codec == "zlib":
        return b"\x01" + zlib.compress(payload.encode())
    return b"\x02" + zstandard.ZstdCompressor().compress(payload.encode())


_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
_hex64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
# One candidate value for every column; each test case uses the one of its column.
_edits = st.fixed_dictionaries(
    {
        "position": st.integers(1, 2**62),
        "session_id": st.sampled_from(["an empty session", "a session without a row"]),
        "seq": st.integers(ROWS + 1, 2**62),
        "event_id": st.uuids().map(str),
        "type": st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=64),
        "schema_version": st.integers(1, 2**31 - 1),
        "payload": _text,
        "token_count": st.none() | st.integers(0, 2**31 - 1),
        "prev_hash": _hex64,
        "hash": _hex64,
        "created_at": st.integers(-(10**12), 10**12).filter(bool),  # microseconds later
        "payload_packed": st.one_of(
            st.none(),
            st.sampled_from(["its own text, zlib", "its own text, zstd"]),
            st.tuples(st.sampled_from(["zlib", "zstd"]), _text),
            st.binary(max_size=40),
        ),
        "token_count_deferred": st.sampled_from([None, True, False]),
    }
)
#: A value for every column that no row of the session holds (``@example`` overrides one).
_DEFAULTS: dict[str, Any] = {
    "position": 2**40,
    "session_id": "an empty session",
    "seq": 10**6,
    "event_id": "00000000-0000-4000-8000-000000000000",
    "type": "altered_type",
    "schema_version": 2,
    "payload": "{}",
    "token_count": 99_999,
    "prev_hash": "ab" * 32,
    "hash": "cd" * 32,
    "created_at": 1,
    "payload_packed": ("zlib", "other text"),
    "token_count_deferred": False,
}
_unique = itertools.count(1)


def _edit(**column: Any) -> dict[str, Any]:
    """``_edits`` with these values and defaults for the rest (for ``@example``); the event id and
    position are new each time, as those columns are unique across the table."""
    n = next(_unique)
    return _DEFAULTS | {"event_id": str(uuid.UUID(int=n)), "position": 2**40 + n} | column


#: Every column of the events table, which the test below edits one at a time.
COLUMNS = sorted(_DEFAULTS)


def test_every_column_of_the_events_table_is_edited_by_the_test() -> None:
    """A column added to the events table must be added here, and shown covered or harmless."""
    assert sorted(DEFAULT_TABLES.events.columns.keys()) == COLUMNS


def _flag(value: object) -> bool | None:
    """A ``token_count_deferred`` value as a reader takes it (SQLite's 1 is True)."""
    return None if value is None else bool(value)


@pytest.mark.parametrize("column", COLUMNS)
@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seq=st.integers(1, ROWS), edit=_edits)
# The deferred flag was outside the hash: cleared, a deferred count vanished from every read;
# set on a row without a count, readers counted it. Neither broke the chain.
@example(seq=2, edit=_edit(token_count_deferred=None))
@example(seq=3, edit=_edit(token_count_deferred=False))
@example(seq=5, edit=_edit(token_count_deferred=True))
# Harmless: the flag of a row with a count of its own (reads ignore it), the text column of a
# packed row (reads take the packed bytes), the same text packed by another codec.
@example(seq=4, edit=_edit(token_count_deferred=True))
@example(seq=3, edit=_edit(payload="{}"))
@example(seq=2, edit=_edit(payload_packed="its own text, zlib"))
@example(seq=6, edit=_edit(payload_packed=None))
# The last row moved to another session: only an anchor or its new session shows it.
@example(seq=ROWS, edit=_edit(session_id="a session without a row"))
def test_an_edit_of_any_column_of_an_event_row_is_found_at_its_seq(
    stores: tuple[SessionStore, SessionStore, SessionStore], column: str, seq: int, edit: dict[str, Any]
) -> None:
    """Whatever column of whichever row is set to whatever other value the column can hold,
    ``verify`` fails at that seq, or every read returns what it returned before."""
    store = stores[0]
    sid = _session(stores)
    assert store.verify(sid).ok
    before = _what_reads_return(store, sid)
    anchor = store.head(sid)
    moved_to = f"{sid}-{'empty' if edit['session_id'] == 'an empty session' else 'no-row'}"
    if column == "session_id" and edit["session_id"] == "an empty session":
        store.create_session(moved_to)
    value, harmless = _stored_value(store, _row(store, sid, seq), column, edit, before[seq - 1][5])
    if column == "session_id":
        value = moved_to

    _tamper(
        store,
        f"UPDATE events SET {column} = :value WHERE session_id = :sid AND seq = :seq",
        value=value,
        sid=sid,
        seq=seq,
    )

    report = store.verify(sid)
    if harmless:
        assert report.ok, report.reason
        assert _what_reads_return(store, sid) == before
    elif column == "position":
        _check_position(store, sid, seq, before, report)
    elif column == "seq":
        assert (report.ok, report.reason) == (False, f"seq gap: expected {seq}")
    elif column == "session_id":
        _check_moved(store, sid, seq, anchor, moved_to)
    else:
        assert (report.ok, report.first_bad_seq) == (False, seq), report.reason


def _stored_value(
    store: SessionStore, row: dict[str, Any], column: str, edit: dict[str, Any], text_read: str
) -> tuple[object, bool]:
    """(the value to write into ``row``'s ``column`` from what ``edit`` drew, True when writing it
    changes nothing any read returns); rejects a draw the row already holds.

    ``text_read``: the payload's text as reads return it.
    """
    value = edit[column]
    if column == "created_at":
        stored = row["created_at"]  # SQLite hands back the text it holds
        moment = as_utc(stored if isinstance(stored, datetime) else datetime.fromisoformat(stored))
        moment += timedelta(microseconds=value)
        sqlite = store.engine.dialect.name == "sqlite"  # type: ignore[attr-defined]
        return (sqlite_timestamp(moment) if sqlite else moment), False
    if column == "payload_packed":
        if isinstance(value, str):  # its own text packed another way: reads return the same
            return _packed(value.rsplit(" ", 1)[1], text_read), True
        if isinstance(value, tuple):
            codec, other = value
            assume(other != text_read)
            return _packed(codec, other), False
        assume(value != row[column] and not (value is None and row[column] is None))
        return value, False
    if column == "payload":
        assume(value != row[column])
        # Reads, verify, export and erasure take a packed row's text from payload_packed.
        return value, row["payload_packed"] is not None
    if column == "token_count_deferred":
        assume(_flag(value) != _flag(row[column]))
        # A reader takes a row as waiting for a count only when it holds no count of its own.
        return value, row["token_count"] is not None or bool(value) == bool(row[column])
    if column in ("event_id", "position"):
        assume(not _taken(store, column, value))
    elif column not in ("seq", "session_id"):
        assume(value != row[column])
    return value, False


def _check_position(
    store: SessionStore, sid: str, seq: int, before: list[tuple[Any, ...]], report: Any
) -> None:
    """Positions are not hashed (the database assigns them after the hash is made): one that
    still increases with seq is the documented limit, changing only where the event falls among
    other sessions' events; one out of order is found at that seq or the next."""
    positions = [e.position for e in store.read(sid)]
    if positions == sorted(positions):
        assert report.ok
        after = _what_reads_return(store, sid)
        assert [row[:1] + row[2:] for row in after] == [row[:1] + row[2:] for row in before]
        return
    assert not report.ok
    assert report.first_bad_seq == seq or (
        report.first_bad_seq == seq + 1 and f"seq {seq}'s position" in (report.reason or "")
    ), report.reason


def _check_moved(store: SessionStore, sid: str, seq: int, anchor: ChainHead, moved_to: str) -> None:
    """An event moved to another session leaves a gap at its seq (or, the last one, a shorter
    chain that only its anchored head shows), and breaks the session it lands in, whose id its
    hash does not hold."""
    report = store.verify(sid)
    if seq < ROWS:
        assert (report.ok, report.reason) == (False, f"seq gap: expected {seq}")
    else:
        assert report.ok
        anchored = store.verify(sid, head=anchor)
        assert anchored.reason == (
            f"the log ends at seq {ROWS - 1}, before the anchored head at seq {ROWS}: "
            "events were removed from the end"
        )
    landed = store.verify(moved_to)
    assert not landed.ok
    if moved_to.endswith("-no-row"):
        assert moved_to in store.orphaned_sessions()
        assert landed.reason == "1 events but no sessions row: the session's row was deleted"
    else:
        assert landed.first_bad_seq == seq


# --- known answers ----------------------------------------------------------------------------
# Computed once and written down: the chain is only as good as its hash function staying put.
# Every chain ever written must verify with these, so a change here is a change of format.

_MOMENT = datetime(2026, 12, 1, 3, 4, 5, 678901, tzinfo=UTC)
_PREV = "0f" * 32
_PAYLOAD = '{"role":"user","content":"h\\u00e9llo, ünïcode"}'  # hashed as its UTF-8, as stored
_PLAIN = SessionIdentity("session-1", None, None, _MOMENT, {"k": "v", "a": [1, 2], "ü": "é"})
_FORK = SessionIdentity("fork-1", "session-1", 3, _MOMENT, {})
_OWNED = SessionIdentity("owned-1", None, None, _MOMENT, {}, tenant="acme", user="ann", external_id="c-9")


class TestKnownAnswers:
    @pytest.mark.parametrize(
        ("token_count", "deferred", "expected"),
        [
            (None, False, "7e55f4202a35d127b2d2ca165cc1bfced11d187ffc9697b428ca73544697d737"),
            (42, False, "ba5c11081805cb749766ac71133eee516bdbae9be9c4278b793bfb677cde0955"),
            (None, True, "f2c340aff5036c0bb6eb11893f38ab2edb82e855a28abc8e6696fbdee2b8d389"),
        ],
        ids=["no count", "counted in the append", "count deferred"],
    )
    def test_event_hash(self, token_count: int | None, deferred: bool, expected: str) -> None:
        """One event's hash over fixed columns, for each way a row holds its count."""
        digest = event_hash(
            _PREV,
            "session-1",
            3,
            "8f14e45f-ceea-467f-a0e6-000000000003",
            "message_appended",
            1,
            token_count,
            _MOMENT,
            _PAYLOAD,
            deferred=deferred,
        )

        assert digest == expected

    @pytest.mark.parametrize(
        ("identity", "fork_point", "expected"),
        [
            (_PLAIN, "", "9a803c2fabc0d362c0a13e3a20c745c320ffd16a260bbe98f2e2130a8bafb972"),
            (_FORK, _PREV, "7428a39d08d681f2d253e9675991c76ea3aad0f52313bee7e6aca2a62e0f9715"),
            (_OWNED, "", "fb14030c9cd8ab497069f7c7ecda61a738320375168f5ac5dc13225f6b4d05f1"),
        ],
        ids=["plain", "fork", "tenant, user and external id"],
    )
    def test_session_genesis(self, identity: SessionIdentity, fork_point: str, expected: str) -> None:
        """The genesis a session's first event chains from, for each form it takes."""
        assert session_genesis(identity, fork_point) == expected

    def test_the_legacy_genesis_is_64_zeros(self) -> None:
        """Chains written before the genesis existed start from it: it marks them."""
        assert LEGACY_GENESIS_HASH == "0" * 64

"""Event reads on the driver cursor return exactly what the stored rows hold.

``read``, ``read_stored`` and ``read_all`` build their records straight from the driver's rows
(store/_driver.py). Each is compared here, field for field, with records built independently
from the same rows through SQLAlchemy Core, on every backend and through the async store too.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from datetime import UTC, datetime
from typing import Any

import pytest
import zstandard
from sqlalchemy import select

from sessionstore import MessageAppended, RecordedEvent, SessionStarted, SessionStore, UsageRecorded
from sessionstore.events._base import decode_event
from sessionstore.store import store_tables
from sessionstore.store._codec import pack_payload
from sessionstore.store._contract import stored_event
from sessionstore.store._crypto import LocalKeyProvider
from sessionstore.store._hashing import as_utc

pytestmark = pytest.mark.store_contract

MASTER = LocalKeyProvider(bytes(range(32)))


def _text_of(row: Any) -> str:
    """A row's payload text: ``payload``, or ``payload_packed`` (codec byte 2, then zstd) decoded."""
    if row.payload_packed is None:
        return str(row.payload)
    packed = bytes(row.payload_packed)
    assert row.payload == ""
    assert packed[0] == 2
    return str(zstandard.ZstdDecompressor().decompress(packed[1:]).decode())


def _deferred(row: Any) -> bool:
    """The row's count is made after COMMIT: NULL in the row, flagged."""
    return row.token_count is None and bool(row.token_count_deferred)


def _count_of(store: SessionStore, row: Any, *, resolved: bool) -> int | None:
    """The count a read reports: the row's own, or (``resolved``) the store's counter over the
    decoded event for a row whose count is deferred."""
    if not (resolved and _deferred(row)):
        return row.token_count  # type: ignore[no-any-return]
    event = decode_event(row.type, row.schema_version, _text_of(row), row.event_id)
    assert store.token_counter is not None
    return store.token_counter.count(event)


def _rows_through_core(store: SessionStore, *, resolved: bool = True) -> list[RecordedEvent]:
    """Every stored row as a ``RecordedEvent``, read through SQLAlchemy Core (the reference).

    ``resolved``: deferred counts as a read fills them in (``read``, ``read_all``); without it,
    as stored (``read_stored``).
    """
    events = store_tables().events
    engine = store.engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(select(events).order_by(events.c.position)).all()
    return [
        RecordedEvent(
            session_id=row.session_id,
            seq=row.seq,
            position=row.position,
            event_id=row.event_id,
            type=row.type,
            schema_version=row.schema_version,
            payload=_text_of(row),
            token_count=_count_of(store, row, resolved=resolved),
            prev_hash=row.prev_hash,
            hash=row.hash,
            created_at=as_utc(row.created_at),
            token_count_deferred=_deferred(row),
        )
        for row in rows
    ]


def _fill(store: SessionStore) -> tuple[str, str]:
    """Two sessions with interleaved events of several kinds, some text beyond ASCII, payloads
    stored as text and compressed."""
    first = store.create_session(events=[SessionStarted(model="claude-sonnet-4-5")]).id
    second = store.create_session().id
    for i in range(6):
        store.append(first, [MessageAppended(role="user", content=f"café → {i} ✓")], expected_seq="any")
        store.append(second, [MessageAppended(role="assistant", content="x" * (i * 700))], expected_seq="any")
    store.append(first, [UsageRecorded(input_tokens=10, output_tokens=2)], expected_seq="any")
    return first, second


def _same(found: list[RecordedEvent], expected: list[RecordedEvent]) -> None:
    assert [dataclasses.astuple(e) for e in found] == [dataclasses.astuple(e) for e in expected]
    for event in found:
        assert event.created_at.tzinfo is not None
        assert event.created_at.utcoffset() == UTC.utcoffset(None)


class TestReadsMatchTheStoredRows:
    def test_read_returns_every_row_of_the_session_as_stored(self, store: SessionStore) -> None:
        """A full read equals the session's rows read through SQLAlchemy Core, field for field."""
        first, second = _fill(store)
        rows = _rows_through_core(store)

        for session_id in (first, second):
            _same(store.read(session_id), [r for r in rows if r.session_id == session_id])

    def test_read_bounds_and_stored_reads_match_the_rows(self, store: SessionStore) -> None:
        """from_seq/to_seq select the same rows; read_stored gives the rows as stored (a deferred
        count not filled in)."""
        first, _ = _fill(store)
        mine = [r for r in _rows_through_core(store) if r.session_id == first]

        _same(store.read(first, from_seq=3, to_seq=5), [r for r in mine if 3 <= r.seq <= 5])
        _same(store.read(first, from_seq=4), [r for r in mine if r.seq >= 4])
        stored = [r for r in _rows_through_core(store, resolved=False) if r.session_id == first]
        _same(store.read_stored(first, from_seq=2, to_seq=2), [r for r in stored if r.seq == 2])
        assert store.read(first, from_seq=99) == []

    def test_read_all_pages_through_every_row_in_position_order(self, store: SessionStore) -> None:
        """read_all pages return all rows of all sessions, in global position order."""
        _fill(store)
        rows = _rows_through_core(store)
        paged: list[RecordedEvent] = []
        after = 0
        while page := store.read_all(after_position=after, limit=4):
            paged += page
            after = page[-1].position

        _same(paged, rows)

    def test_decoded_events_and_verification_are_unchanged(self, store: SessionStore) -> None:
        """Payloads decode on first use to the appended events, and the chain verifies."""
        first, _ = _fill(store)
        read = store.read(first, verify=True)

        assert isinstance(read[1].event, MessageAppended)
        assert str(read[1].event.event_id) == read[1].event_id
        assert read[1].event.content == "café → 0 ✓"
        assert store.verify(first).ok


def test_an_encrypted_session_reads_decrypted_with_its_sealed_text_kept(
    open_store: Any,
) -> None:
    """Through the driver read, sealed payloads open, and ``stored_payload`` is the stored row's text."""
    store = open_store(encryption=MASTER)
    first, _ = _fill(store)
    rows = {r.event_id: r for r in _rows_through_core(store, resolved=False)}

    read = store.read(first, verify=True)

    assert [r.stored_payload for r in read] == [rows[r.event_id].payload for r in read]
    assert read[1].event.content == "café → 0 ✓"


def test_stored_event_equals_the_dataclass_built_from_the_same_values() -> None:
    """The read path's fast constructor gives the very record ``RecordedEvent(...)`` gives."""
    created = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    values: tuple[Any, ...] = ("s", 2, 7, "e", "message_appended", 1, "{}", 3, "p" * 64, "h" * 64, created)

    fast, built = stored_event(*values), RecordedEvent(*values)

    assert fast == built
    assert dataclasses.astuple(fast) == dataclasses.astuple(built)
    assert vars(fast) == vars(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.seq = 3  # type: ignore[misc]


def test_a_compressed_row_reads_as_the_record_of_its_text() -> None:
    """A packed payload decompresses on first use into the record ``RecordedEvent(...)`` gives."""
    created = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    text = json.dumps({"role": "user", "content": "café → ✓ " * 200}, ensure_ascii=False)
    packed = pack_payload(text)
    assert packed is not None
    head: tuple[str, int, int, str, str, int] = ("s", 2, 7, "e", "message_appended", 1)
    tail: tuple[int, str, str, datetime] = (3, "p" * 64, "h" * 64, created)

    fast, built = stored_event(*head, "", *tail, packed), RecordedEvent(*head, text, *tail)

    assert len(packed) < len(text.encode()) / 10
    assert fast == built
    assert fast.payload_dict() == json.loads(text)
    assert vars(fast)["payload"] == text


def test_a_row_packed_with_zlib_reads_too() -> None:
    """Codec byte 1 (zlib) reads like zstd's 2: the codec is the row's, not the installation's."""
    created = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    text = json.dumps({"role": "user", "content": "zlib " * 300})
    head: tuple[str, int, int, str, str, int] = ("s", 2, 7, "e", "message_appended", 1)
    tail: tuple[int, str, str, datetime] = (3, "p" * 64, "h" * 64, created)

    fast = stored_event(*head, "", *tail, b"\x01" + zlib.compress(text.encode()))

    assert fast == RecordedEvent(*head, text, *tail)

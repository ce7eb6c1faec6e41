"""The import's snapshots are folded from the events as they are written, never read back, and
are the very rows the read-back fold (``take_snapshots``) stores; ``write_streamed``'s
``on_written`` gives the records a read returns after COMMIT, and nothing of a rolled-back call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import MessageAppended, SessionConfig, SessionStarted, SessionStore, import_claude_code
from sessionstore.claude_code import _import as _import_module
from sessionstore.errors import ValidationError
from sessionstore.events._base import decode_event
from sessionstore.projections._snapshots import WrittenSnapshots, take_snapshots
from sessionstore.store import RecordedEvent, SessionWrite

from ._claude_code_corpus import CORPUS, MORE_CORPUS, corpus_paths
from .conftest import Backend
from .test_deferred_counts import _Recording  # cl100k under its name, noting what it counted


def _rows(backend: Backend, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(sessionstore.store.resolve_url(backend.url))
    try:
        with engine.begin() as conn:
            return [tuple(row) for row in conn.execute(text(sql))]
    finally:
        engine.dispose()


def _execute(backend: Backend, sql: str) -> None:
    engine = create_engine(sessionstore.store.resolve_url(backend.url))
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def _snapshot_rows(backend: Backend) -> list[tuple[Any, ...]]:
    """Every snapshot row as stored: (session, projection, version, tokenizer, seq, state bytes)."""
    rows = _rows(
        backend,
        "SELECT session_id, projection, projection_version, tokenizer, seq, state FROM snapshots "
        "ORDER BY session_id, projection",
    )
    return [(*row[:5], bytes(row[5])) for row in rows]


def _count_rows(backend: Backend) -> list[tuple[Any, ...]]:
    return _rows(backend, "SELECT session_id, seq, token_count FROM token_counts ORDER BY session_id, seq")


_COUNTING = {
    "deferred": {},
    "inline": {"defer_token_counts": False},
    "off": {"token_counter": None},
}


@pytest.mark.parametrize("counting", list(_COUNTING))
def test_snapshots_folded_as_written_are_the_read_back_ones_byte_for_byte(
    shared_backend: Backend, monkeypatch: pytest.MonkeyPatch, counting: str
) -> None:
    """Every transcript of both corpus folders, each session snapshotted (threshold 1): the rows
    the import stores are those ``take_snapshots`` stores from the log read back, and every
    event object folded equals what a read decodes from its payload."""
    corpus_paths()  # skips, or fails in CI, without the corpus
    monkeypatch.setattr(_import_module, "SessionConfig", lambda: SessionConfig(snapshot_every=1))
    read_back: list[list[str]] = []

    def spy_take_snapshots(store: SessionStore, session_ids: Sequence[str]) -> None:
        read_back.append(list(session_ids))
        take_snapshots(store, session_ids)

    decoded: list[str] = []

    class CheckedFold(WrittenSnapshots):
        def __call__(self, records: Sequence[RecordedEvent]) -> None:
            for record in records:
                assert record.event == decode_event(
                    record.type, record.schema_version, record.payload, record.event_id
                )
                decoded.append(record.event_id)
            super().__call__(records)

    monkeypatch.setattr(_import_module, "take_snapshots", spy_take_snapshots)
    monkeypatch.setattr(_import_module, "WrittenSnapshots", CheckedFold)
    options: dict[str, Any] = dict(_COUNTING[counting])
    recording = _Recording()
    if counting != "off":
        options["token_counter"] = recording
    with shared_backend.open(**options) as store:
        report = import_claude_code(store, [CORPUS, MORE_CORPUS])
        folded = _snapshot_rows(shared_backend)
        counts = _count_rows(shared_backend)
    sessions = [imported.session_id for imported in report.sessions]
    events = sum(imported.events for imported in report.sessions)
    later = _Recording()
    if counting != "off":
        options["token_counter"] = later
    with shared_backend.open(**options) as store:
        for session_id in sessions:
            store.read(session_id)
    counted_later = list(later.counted)

    # The read-back path on the same log: its snapshots and counts made again from the payloads.
    _execute(shared_backend, "DELETE FROM snapshots")
    _execute(shared_backend, "DELETE FROM token_counts")
    with shared_backend.open(**options) as store:
        take_snapshots(store, sessions)
    expected = _snapshot_rows(shared_backend)
    waiting = _rows(shared_backend, "SELECT count(*) FROM events WHERE token_count_deferred IS NOT NULL")

    assert len(sessions) == 26 and read_back == [[]]  # 24 main transcripts and 2 sub-agents
    assert len(decoded) == events
    assert len(folded) == 2 * len(sessions)
    assert folded == expected
    assert counts == _count_rows(shared_backend)
    if counting == "deferred":  # each event counted once, at import, and stored; a read counts none
        assert [(len(counts),)] == waiting
        assert sorted(recording.counted) == sorted(set(recording.counted))
        assert len(recording.counted) == len(counts)
        assert counted_later == []
    if counting == "inline":  # counted by the append, in the rows
        assert counts == [] and counted_later == []


def _events(n: int, text: str) -> list[Any]:
    return [SessionStarted(model="claude-sonnet-4-5")] + [
        MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"{text} {i}") for i in range(n)
    ]


@pytest.mark.store_contract
def test_on_written_gives_what_a_read_gives_after_commit(backend: Backend) -> None:
    """Field for field, every record of every batch (a created session and an append to one)."""
    given: list[RecordedEvent] = []
    with backend.open() as store:
        store.create_session("grown", events=_events(3, "before"))
        store.write_streamed(
            [
                SessionWrite("new", iter(_events(9, "words of the new session")), create=True),
                SessionWrite("grown", iter(_events(5, "more words")[1:]), expected_seq=4),
            ],
            batch_size=4,
            on_written={"new": given.extend, "grown": given.extend},
        )
        read = store.read("new") + store.read("grown", 5)

    assert [r.seq for r in given] == [*range(1, 11), *range(5, 10)]
    for mine, theirs in zip(given, read, strict=True):
        assert mine == theirs
        assert mine.event == theirs.event
        assert mine.token_count == theirs.token_count
        assert mine.token_count_deferred == theirs.token_count_deferred


def test_on_written_gives_an_encrypted_session_decrypted(tmp_path: Path) -> None:
    """The payload as text (what a read opens), the sealed text as ``stored_payload``."""
    given: list[RecordedEvent] = []
    key = sessionstore.store.LocalKeyProvider(bytes(range(32)))
    with sessionstore.open_store(tmp_path / "sealed.db", migrate=True, encryption=key) as store:
        store.write_streamed(
            [SessionWrite("sealed", _events(3, "secret words"), create=True)],
            on_written={"sealed": given.extend},
        )
        read = store.read("sealed")

    assert given == read
    assert all(r.stored_payload is not None and r.stored_payload != r.payload for r in given)


def test_counts_of_a_rolled_back_write_never_reach_a_later_read(shared_backend: Backend) -> None:
    """The counts ``on_written`` made are held only after COMMIT: events written later at the
    same seqs are counted for themselves, and the callback's records are not stored."""
    given: list[RecordedEvent] = []

    def failing() -> Iterator[Any]:
        yield from _events(7, "a long message that counts many tokens " * 20)
        raise RuntimeError("the source failed")

    with shared_backend.open() as store:
        with pytest.raises(RuntimeError, match="the source failed"):
            store.write_streamed(
                [SessionWrite("s", failing(), create=True)], batch_size=2, on_written={"s": given.extend}
            )
        store.write_streamed([SessionWrite("s", _events(7, "short"), create=True)])
        read = store.read("s")
    with shared_backend.open(defer_token_counts=False) as inline:
        inline.create_session("t", events=_events(7, "short"))
        expected = [r.token_count for r in inline.read("t")]

    assert len(given) >= 6 and given[1].token_count != read[1].token_count
    assert [r.token_count for r in read] == expected


def test_a_callback_that_raises_rolls_the_write_back(store: SessionStore) -> None:
    def fail(records: Sequence[RecordedEvent]) -> None:
        raise RuntimeError("the fold failed")

    with pytest.raises(RuntimeError, match="the fold failed"):
        store.write_streamed([SessionWrite("s", _events(3, "x"), create=True)], on_written={"s": fail})

    assert store.list_sessions() == []


def test_on_written_for_a_session_not_written_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValidationError, match="on_written names sessions the call does not write: other"):
        store.write_streamed([SessionWrite("s", _events(1, "x"), create=True)], on_written={"other": print})

    assert store.list_sessions() == []

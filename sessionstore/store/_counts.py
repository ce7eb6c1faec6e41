"""Token counts made after COMMIT: what an append defers, what a read fills in, what is stored.

An append with ``defer_token_counts`` (the default) stores an event with text without its count:
``token_count`` is NULL in the row, ``token_count_deferred`` is set (and hashed in its place). The
first read that returns the event counts it (``fill_counts``) unless ``token_counts`` already
holds the count; counts this process made wait in a ``CountBacklog`` and are stored by the next
write transaction of the same session (an append, a snapshot) or when the store closes. A count
never stored (a crash, another process reading first) is made again by the next reader: counts
are a pure function of the event, so every reader agrees.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DataCorruptionError, SessionStoreError
from ..events import Event

if TYPE_CHECKING:
    from ._contract import RecordedEvent
    from ._driver import DriverSQL
    from ._tokens import TokenCounter

__all__ = [
    "RIDE_ALONG_COUNTS",
    "CountBacklog",
    "checked_counts",
    "counts_later",
    "fill_counts",
    "store_counts",
]

#: Counts held for storing at most; beyond it the oldest sessions' are dropped (and counted
#: again by whoever reads them next), so a process that only reads never grows without bound.
BACKLOG_LIMIT = 500_000
#: Counts an append stores along at most: the rest wait for a snapshot, ``store_token_counts``
#: or ``close`` rather than lengthen a transaction that holds the write lock.
RIDE_ALONG_COUNTS = 256


def counts_later(event: Event) -> bool:
    """True when ``event``'s type has text to count (its count is deferred, not None)."""
    return type(event).countable_text is not Event.countable_text


class CountBacklog:
    """Counts this process made and has not stored yet, by session; safe across threads.

    The lock guards dict operations only (no I/O under it): an async store's greenlets may
    take it too.
    """

    def __init__(self, limit: int = BACKLOG_LIMIT) -> None:
        self._lock = threading.Lock()
        self._by_session: dict[str, dict[int, int | None]] = {}
        self._size = 0
        self._limit = limit

    def __len__(self) -> int:
        return self._size

    def pick(self, session_id: str, seqs: Sequence[int]) -> dict[int, int | None]:
        """The counts held for those of ``seqs`` that have one (a read's lookup: no copy of the
        whole session's backlog)."""
        with self._lock:
            held = self._by_session.get(session_id, {})
            return {seq: held[seq] for seq in seqs if seq in held}

    def known(self, session_id: str, limit: int | None = None) -> Mapping[int, int | None]:
        """The session's counts waiting to be stored (a copy: seq -> count), at most ``limit``."""
        with self._lock:
            held = self._by_session.get(session_id, {})
            if limit is None or len(held) <= limit:
                return dict(held)
            return dict(itertools.islice(held.items(), limit))

    def add(self, session_id: str, counts: Mapping[int, int | None]) -> None:
        """Hold ``counts`` (seq -> count) of ``session_id`` for storing."""
        if not counts:
            return
        with self._lock:
            held = self._by_session.setdefault(session_id, {})
            before = len(held)
            held.update(counts)
            self._size += len(held) - before
            # Dicts keep insertion order: the first sessions are the ones held longest.
            while self._size > self._limit and len(self._by_session) > 1:
                oldest = next(iter(self._by_session))
                self._size -= len(self._by_session.pop(oldest))

    def stored(self, session_id: str, seqs: Sequence[int] | Mapping[int, Any]) -> None:
        """Forget the counts of ``seqs`` once a transaction that stored them committed."""
        with self._lock:
            held = self._by_session.get(session_id)
            if held is None:
                return
            for seq in seqs:
                if held.pop(seq, _MISSING) is not _MISSING:
                    self._size -= 1
            if not held:
                del self._by_session[session_id]

    def sessions(self) -> list[str]:
        """The sessions with counts waiting."""
        with self._lock:
            return list(self._by_session)

    def forget(self, session_id: str) -> None:
        """Drop the session's counts (it was erased)."""
        with self._lock:
            self._size -= len(self._by_session.pop(session_id, ()))


_MISSING = object()


def fill_counts(
    records: Sequence[RecordedEvent],
    stored: Mapping[int, int | None],
    backlog: CountBacklog,
    counter: TokenCounter | None,
) -> None:
    """Set ``token_count`` of ``records`` (one session's, freshly read, waiting for a count):
    from ``stored`` (the session's ``token_counts`` rows), the backlog, or counted now.

    A count made here goes to the backlog. An event that cannot be decoded (altered, or of a
    type this version does not know) keeps None: reading it raises when it is used, as before.
    """
    if not records:
        return
    session_id = records[0].session_id
    held = backlog.pick(session_id, [r.seq for r in records if r.seq not in stored])
    made: dict[int, int | None] = {}
    for record in records:
        if record.seq in stored:
            count = stored[record.seq]
        elif record.seq in held:
            count = held[record.seq]
        elif counter is None:
            continue
        else:
            try:
                count = counter.count(record.event)
            except SessionStoreError:
                continue
            made[record.seq] = count
        # A freshly built record (stored_event): filled in place before anyone else sees it.
        record.__dict__["token_count"] = count
    backlog.add(session_id, made)


def checked_counts(session_id: str, rows: Sequence[Sequence[Any]]) -> dict[int, int | None]:
    """The ``token_counts`` rows of a session (seq, count) as seq -> count.

    Raises:
        DataCorruptionError: a count that is not a non-negative integer (SQLite's column
            affinity lets text or a float through the CHECK): an altered row.
    """
    found: dict[int, int | None] = {}
    for seq, count in rows:
        if count is not None and (type(count) is not int or count < 0):
            msg = (
                f"session {session_id!r}, seq {seq}: the stored token count {count!r} is not a count "
                "(the token_counts row was altered); delete the row to have the event counted again"
            )
            raise DataCorruptionError(msg, session_id=session_id, seq=int(seq))
        found[int(seq)] = count
    return found


def store_counts(cursor: Any, sql: DriverSQL, session_id: str, counts: Mapping[int, int | None]) -> int:
    """Insert ``counts`` (seq -> count) of one session (``DriverSQL.insert_count``: a row only for
    an event that exists and waits for it, of a session not erased); how many rows were added."""
    if not counts:
        return 0
    cursor.executemany(
        sql.insert_count(),
        [(session_id, seq, count, session_id, seq, session_id) for seq, count in sorted(counts.items())],
    )
    return max(int(cursor.rowcount), 0)

"""Projections: pure, versioned folds over a session's events, with disposable snapshots.

A projection turns the log into a view (the transcript, the request for the model, token
accounting). ``apply`` may update the state in place for speed, but must be a pure function of
(state, event): no I/O, no clock, no randomness, no model call. That is what makes a view the
same whether it was rebuilt from scratch, updated incrementally, or restored from a snapshot and
the tail — and so keeps the prompt-cache prefix byte-stable across resume.

Snapshots are keyed by (session, projection name, projection version, tokenizer, seq). A
snapshot of another version, or one that fails to load, is ignored and the view is folded from
the first event instead; deleting every snapshot changes no result, only the time it takes.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar, Generic, TypeVar

from ..store import RecordedEvent, SessionStore, SnapshotRecord
from ..store._contract import check_int

__all__ = [
    "Projection",
    "fold",
    "projection_class",
    "read_pages",
    "rebuild",
    "register_projection",
    "save_snapshot",
]

S = TypeVar("S")
_log = logging.getLogger(__name__)


class Projection(abc.ABC, Generic[S]):
    """A named, versioned fold. Bump ``version`` whenever ``apply`` or the state's shape changes."""

    name: ClassVar[str]
    version: ClassVar[int]

    @abc.abstractmethod
    def initial(self) -> S:
        """The state before any event."""

    @abc.abstractmethod
    def apply(self, state: S, event: RecordedEvent) -> S:
        """The state after ``event`` (may update ``state`` in place and return it)."""

    @abc.abstractmethod
    def dump(self, state: S) -> bytes:
        """Serialize ``state`` for a snapshot (deterministic: equal states give equal bytes)."""

    @abc.abstractmethod
    def load(self, data: bytes) -> S:
        """Rebuild a state from ``dump``'s bytes; raise on anything malformed."""


_PROJECTIONS: dict[tuple[str, int], type[Projection[object]]] = {}

P = TypeVar("P", bound=type[Projection])  # type: ignore[type-arg]


def register_projection(cls: P) -> P:
    """Register a projection class by (name, version); usable as a class decorator."""
    key = (cls.name, cls.version)
    existing = _PROJECTIONS.get(key)
    if existing is not None and existing is not cls:
        msg = f"projection {cls.name!r} version {cls.version} is already registered by {existing.__name__}"
        raise ValueError(msg)
    _PROJECTIONS[key] = cls
    return cls


def projection_class(name: str, version: int) -> type[Projection[object]]:
    """The registered class for (name, version).

    Raises:
        KeyError: nothing is registered under that key.
    """
    return _PROJECTIONS[(name, version)]


def fold(projection: Projection[S], events: Iterable[RecordedEvent], state: S | None = None) -> S:
    """Apply ``events`` in order to ``state`` (or to the initial state)."""
    current = projection.initial() if state is None else state
    for recorded in events:
        current = projection.apply(current, recorded)
    return current


#: Events read (and their payloads held) at a time by a fold over a long stretch of the log.
PAGE = 500


def read_pages(
    read: Callable[[int, int | None], list[RecordedEvent]],
    from_seq: int,
    to_seq: int | None,
    page: int = PAGE,
) -> Iterator[RecordedEvent]:
    """The events ``from_seq``..``to_seq`` (None: to the end) in seq order, read ``page`` at a time.

    Raises:
        ValidationError: a seq that is not a 64-bit int (as ``SessionStore.read`` says; no page
            would pass it on).
    """
    start = check_int("from_seq", from_seq)
    if to_seq is not None:
        check_int("to_seq", to_seq)
    while to_seq is None or start <= to_seq:
        events = read(start, start + page - 1 if to_seq is None else min(to_seq, start + page - 1))
        if not events:
            return
        yield from events
        start = events[-1].seq + 1


def rebuild(
    store: SessionStore,
    session_id: str,
    projection: Projection[S],
    *,
    tokenizer: str,
    use_snapshots: bool = True,
    to_seq: int | None = None,
    read: Callable[[int, int | None], list[RecordedEvent]] | None = None,
) -> tuple[S, int]:
    """The projection's state for the session (up to ``to_seq``), and the last seq folded in.

    Starts from the latest snapshot (at or before ``to_seq``) of exactly this projection
    version and tokenizer when one exists and loads; otherwise folds from seq 1. Seqs are the
    visible numbering (a fork's count through its parent's prefix), as snapshots are taken in
    it; ``read`` (default: ``store.visible_log(session_id).read``) supplies the events.
    """
    read_events = read if read is not None else store.visible_log(session_id).read
    state, last = projection.initial(), 0
    if use_snapshots:
        resumed = load_snapshot(store, session_id, projection, tokenizer, to_seq, read_events)
        if resumed is not None:
            state, last = resumed
    for event in read_pages(read_events, last + 1, to_seq):  # a page of payloads held at a time
        state, last = projection.apply(state, event), event.seq
    return state, last


def load_snapshot(
    store: SessionStore,
    session_id: str,
    projection: Projection[S],
    tokenizer: str,
    to_seq: int | None,
    read: Callable[[int, int | None], list[RecordedEvent]],
) -> tuple[S, int] | None:
    """(the latest usable snapshot's state, its seq) at or before ``to_seq`` (None: any), or None
    to fold from seq 1. Every reader of a snapshot resumes through here.

    A snapshot that does not load is logged and ignored. So is one whose own seq is not in the
    log (read alone): it is past the log's head (a truncated tail, a forged row), and resuming
    from it would serve events that are not there and make every later append expect the
    wrong seq.
    """
    snapshot = store.latest_snapshot(session_id, projection.name, projection.version, tokenizer, to_seq)
    if snapshot is None:
        return None
    try:
        state = projection.load(snapshot.state)
    except Exception:
        _log.warning(
            "ignoring unreadable %s snapshot of session %s at seq %d",
            projection.name,
            session_id,
            snapshot.seq,
            exc_info=True,
        )
        return None
    if not any(event.seq == snapshot.seq for event in read(snapshot.seq, snapshot.seq)):
        _log.warning(
            "ignoring %s snapshot of session %s at seq %d: it is past the log's last event",
            projection.name,
            session_id,
            snapshot.seq,
        )
        return None
    return state, snapshot.seq


def save_snapshot(
    store: SessionStore,
    session_id: str,
    projection: Projection[S],
    state: S,
    seq: int,
    *,
    tokenizer: str,
) -> None:
    """Persist ``state`` (the fold of seqs 1..``seq``) as a snapshot."""
    store.put_snapshot(
        SnapshotRecord(
            session_id, projection.name, projection.version, tokenizer, seq, projection.dump(state)
        )
    )

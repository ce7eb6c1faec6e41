"""Snapshots of a whole session's views, folded a chunk of events at a time.

A ``Session`` snapshots as it goes (``SessionConfig.snapshot_every``); a session written in one
go (an import) has none, and its first reader would fold every event, holding them all. This
folds the log once, ``chunk`` events in memory at a time, and stores what readers resume from:
the API context, keyed as ``Session`` keys it, and the transcript digest the audit and the
replays read (projections/_digest.py). (The transcript, which holds every event, is folded on
first use, as for any session.) A writer that creates the session can fold the same two views
from the events as it writes them instead (``WrittenSnapshots``), and read nothing back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..store._contract import RecordedEvent, SessionStore
from ..store._lineage import SessionLog
from ._api_context import ApiContextProjection, ApiContextState
from ._base import Projection, load_snapshot, save_snapshot
from ._digest import TranscriptDigestProjection
from ._session import NO_TOKENIZER

__all__ = ["WrittenSnapshots", "take_snapshots"]

#: Events read and folded at a time.
_CHUNK = 256


def _projections() -> list[Projection[Any]]:
    """The views a snapshot of a whole session is taken of, in the order they are stored."""
    return [ApiContextProjection(), TranscriptDigestProjection()]


def _tokenizer(store: SessionStore) -> str:
    counter = store.token_counter
    return counter.name if counter is not None else NO_TOKENIZER


def take_snapshots(store: SessionStore, session_ids: Iterable[str], *, chunk: int = _CHUNK) -> None:
    """Store a snapshot of each session's API context and transcript digest at its last seq
    (each from its latest snapshot on), in one pass over the events neither has seen.

    Snapshots are caches: taking one never changes what a reader sees, only how fast it gets
    there, and a crash before it is stored leaves nothing to repair.
    """
    tokenizer = _tokenizer(store)
    projections = _projections()
    for session_id in session_ids:
        log = SessionLog(store, session_id)
        resumed = [_resumed(store, session_id, projection, tokenizer) for projection in projections]
        states = [state for state, _ in resumed]
        seq = min(done for _, done in resumed)
        while events := log.read(seq + 1, seq + chunk):
            for i, projection in enumerate(projections):
                done = resumed[i][1]
                for event in events:
                    if event.seq > done:
                        states[i] = projection.apply(states[i], event)
            seq = events[-1].seq
            del events
        for projection, state, (_, done) in zip(projections, states, resumed, strict=True):
            if seq > done:
                save_snapshot(store, session_id, projection, state, seq, tokenizer=tokenizer)


def _resumed(
    store: SessionStore, session_id: str, projection: Projection[Any], tokenizer: str
) -> tuple[Any, int]:
    """(the projection's latest snapshot's state, its seq), or the initial state at seq 0."""
    resumed = load_snapshot(
        store, session_id, projection, tokenizer, None, SessionLog(store, session_id).read
    )
    return resumed if resumed is not None else (projection.initial(), 0)


class WrittenSnapshots:
    """The snapshots ``take_snapshots`` stores of a NEW session, folded from its events as they
    are written instead of read back: a ``write_streamed`` ``on_written`` callback (one per
    session), then ``save`` after COMMIT.

    The records ``on_written`` gives are those a read returns (counted as a read counts them),
    from seq 1 in order, so the states and the stored rows are the very ones ``take_snapshots``
    would store after the same write. Only for a session the write creates (a session with
    events before has them folded from its snapshot by ``take_snapshots``), and not for a fork
    (its visible log starts in its parent's). Nothing is stored before ``save``: a write that
    rolls back leaves nothing, and the object is dropped with it.
    """

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.session_id = session_id
        self._tokenizer = _tokenizer(store)
        self._projections = _projections()
        self._states: list[Any] = [projection.initial() for projection in self._projections]
        #: The last seq folded (0: none yet).
        self.seq = 0

    def __call__(self, records: Sequence[RecordedEvent]) -> None:
        """Fold one batch of the session's events, as written (``WrittenCallback``)."""
        if records and records[0].seq != self.seq + 1:  # pragma: no cover - the store's order
            msg = f"session {self.session_id!r}: events folded out of order (seq {records[0].seq})"
            raise AssertionError(msg)
        for i, projection in enumerate(self._projections):
            state = self._states[i]
            for record in records:
                state = projection.apply(state, record)
            self._states[i] = state
        if records:
            self.seq = records[-1].seq

    def save(self, store: SessionStore) -> None:
        """Store both snapshots at the last seq folded (after COMMIT; nothing without events).
        The states are spent: each is let go once stored."""
        if not self.seq:
            return
        for i, projection in enumerate(self._projections):
            state, self._states[i] = self._states[i], None
            if isinstance(state, ApiContextState):
                # Its messages' dicts go as their JSON is made: the dump then holds the JSON and
                # its joined copy, not the dicts too (the import's peak memory, which here comes
                # on top of what the write left fragmented).
                state.messages.keep_json_only()
            save_snapshot(store, self.session_id, projection, state, self.seq, tokenizer=self._tokenizer)
            del state

"""Snapshots of a whole session's views, folded a chunk of events at a time.

A ``Session`` snapshots as it goes (``SessionConfig.snapshot_every``); a session written in one
go (an import) has none, and its first reader would fold every event, holding them all. This
folds the log once, ``chunk`` events in memory at a time, and stores what readers resume from:
the API context, keyed as ``Session`` keys it, and the transcript digest the audit and the
replays read (projections/_digest.py). (The transcript, which holds every event, is folded on
first use, as for any session.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..store import SessionLog, SessionStore
from ._api_context import ApiContextProjection
from ._base import Projection, load_snapshot, save_snapshot
from ._digest import TranscriptDigestProjection
from ._session import NO_TOKENIZER

__all__ = ["take_snapshots"]

#: Events read and folded at a time.
_CHUNK = 256


def take_snapshots(store: SessionStore, session_ids: Iterable[str], *, chunk: int = _CHUNK) -> None:
    """Store a snapshot of each session's API context and transcript digest at its last seq
    (each from its latest snapshot on), in one pass over the events neither has seen.

    Snapshots are caches: taking one never changes what a reader sees, only how fast it gets
    there, and a crash before it is stored leaves nothing to repair.
    """
    counter = store.token_counter
    tokenizer = counter.name if counter is not None else NO_TOKENIZER
    projections: list[Projection[Any]] = [ApiContextProjection(), TranscriptDigestProjection()]
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

"""Snapshots of a whole session's views, folded a chunk of events at a time.

A ``Session`` snapshots as it goes (``SessionConfig.snapshot_every``); a session written in one
go (an import) has none, and its first reader would fold every event, holding them all. This
folds the log once, ``chunk`` events in memory at a time, and stores what ``Session`` resumes
from when it opens: the API context, keyed as ``Session`` keys it. (The transcript, which holds
every event, is folded on first use, as for any session.)
"""

from __future__ import annotations

from collections.abc import Iterable

from ..store._contract import SessionStore
from ..store._lineage import SessionLog
from ._api_context import ApiContextProjection
from ._base import fold, save_snapshot
from ._session import NO_TOKENIZER

__all__ = ["take_snapshots"]

#: Events read and folded at a time.
_CHUNK = 256


def take_snapshots(store: SessionStore, session_ids: Iterable[str], *, chunk: int = _CHUNK) -> None:
    """Store a snapshot of each session's API context at its last seq (from its latest snapshot on).

    Snapshots are caches: taking one never changes what a reader sees, only how fast it gets
    there, and a crash before it is stored leaves nothing to repair.
    """
    counter = store.token_counter
    tokenizer = counter.name if counter is not None else NO_TOKENIZER
    projection = ApiContextProjection()
    for session_id in session_ids:
        log = SessionLog(store, session_id)
        state, seq = projection.initial(), 0
        latest = store.latest_snapshot(session_id, projection.name, projection.version, tokenizer)
        if latest is not None:
            try:
                state, seq = projection.load(latest.state), latest.seq
            except Exception:  # an unreadable snapshot is ignored, as readers ignore it
                state, seq = projection.initial(), 0
        start = seq
        while events := log.read(seq + 1, seq + chunk):
            state = fold(projection, events, state)
            seq = events[-1].seq
            del events
        if seq > start:
            save_snapshot(store, session_id, projection, state, seq, tokenizer=tokenizer)

"""``verify --counts``: deferred token counts recounted and compared with the ones readers use.

A count deferred past COMMIT (``open_store(defer_token_counts=True)``, the default) is stored in
``token_counts``, outside the hash chain: the chain proves the event, not its count. A count
altered there changes every token estimate of the session (when compaction fires, what the
blocking limit refuses), so this check counts each such event's text again with the store's
counter and compares. It is a tokenizer pass over the session's text, which is why ``verify``
runs it only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..projections._base import read_pages
from ..store import SessionStore

__all__ = ["Recount", "recount_token_counts"]


@dataclass(frozen=True)
class Recount:
    """What recounting a session's deferred counts found.

    Attributes:
        checked: deferred counts recounted (None: the store has no token counter).
        differing: ``(seq, count a read returns, count of the text)`` of each that differs.
    """

    checked: int | None
    differing: tuple[tuple[int, int | None, int | None], ...] = ()


def recount_token_counts(store: SessionStore, session_id: str) -> Recount:
    """Recount every deferred count of the session's own events (a fork's prefix is its
    parent's to check) and compare each with what a read returns.

    Every count a reader gets is checked: one no process stored yet is made by this read
    itself and agrees by construction, so what the check can catch is a stored count (in
    ``token_counts``) that differs. Counts are recounted with this store's counter: a count
    another tokenizer made differs too.

    Raises:
        SessionNotFoundError: no such session.
    """
    counter = store.token_counter
    if counter is None:
        return Recount(None)
    checked = 0
    differing: list[tuple[int, int | None, int | None]] = []
    for record in read_pages(lambda start, end: store.read(session_id, start, end), 1, None):
        if not record.token_count_deferred:
            continue  # its count, if any, is in the row, under the hash chain
        checked += 1
        counted = counter.count(record.event)
        if counted != record.token_count:
            differing.append((record.seq, record.token_count, counted))
    return Recount(checked, tuple(differing))

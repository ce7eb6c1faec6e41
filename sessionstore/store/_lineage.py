"""A session's visible history as one sequence of events, forks included, without copying anything.

A fork is a session created with ``parent_session_id`` and ``fork_seq``: its history is the
parent's history up to ``fork_seq`` — counted in the parent's visible numbering, so a fork
of a fork shares its grandparent's prefix too — followed by its own. ``SessionLog`` numbers
that history continuously (the fork's own event ``k`` is seq ``fork_seq + k``), so projections,
snapshots and the audit treat a fork like any session.

This visible numbering is the one users see: ``Session``, ``Conversation``, every view and
every CLI command count a fork's seqs through its parent's prefix, and so does ``expected_seq``
for an append. ``SessionStore.read``/``last_seq``/``append`` keep the storage numbering of the
session's own rows (a fork's own events from 1: the hash chain is over it); only the storage
layer and ``verify`` use it. ``store.visible_log(session_id)`` returns a ``SessionLog``.
Sub-agents are child sessions without a fork point: their logs are their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..errors import ConcurrencyError, DataCorruptionError
from ..events import Event
from ._contract import ANY, AppendResult, ExpectedSeq, RecordedEvent, SessionStore, check_int, check_store

__all__ = ["SessionLog"]


def _fork_loop(forks: tuple[str, ...], parent: str) -> DataCorruptionError:
    msg = f"session {forks[0]!r}: its fork ancestry comes back to session {parent!r} (altered sessions row)"
    return DataCorruptionError(msg, session_id=forks[0])


class SessionLog:
    """Reads and appends one session's visible history in its visible (fork-aware) numbering.

    Each ``RecordedEvent`` it returns keeps its ``session_id``, ``hash`` and ``position``: an
    event inherited from a parent names the parent it is stored in; only ``seq`` is renumbered.
    """

    def __init__(self, store: SessionStore, session_id: str, *, _forks: tuple[str, ...] = ()) -> None:
        check_store("store", store)
        self.store = store
        self.session_id = session_id
        info = store.get_session(session_id)
        self.parent: SessionLog | None = None
        #: Seqs up to this one come from the parent; the session's own events follow.
        self.base = 0
        if info.parent_session_id is not None and info.fork_seq is not None:
            forks = (*_forks, session_id)
            if info.parent_session_id in forks:  # else an altered row would recurse until RecursionError
                raise _fork_loop(forks, info.parent_session_id)
            self.parent = SessionLog(store, info.parent_session_id, _forks=forks)
            self.base = info.fork_seq

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> list[RecordedEvent]:
        """Events with ``from_seq <= seq <= to_seq`` in the continuous numbering."""
        events: list[RecordedEvent] = []
        if self.parent is not None and from_seq <= self.base:
            events += self.parent.read(from_seq, self.base if to_seq is None else min(to_seq, self.base))
        own_to = None if to_seq is None else to_seq - self.base
        if own_to is None or own_to >= 1:
            own = self.store.read(self.session_id, max(1, from_seq - self.base), own_to)
            events += [dataclasses.replace(e, seq=e.seq + self.base) for e in own] if self.base else own
        return events

    def last_seq(self) -> int:
        """The last seq in the continuous numbering."""
        return self.base + self.store.last_seq(self.session_id)

    def append(self, events: Sequence[Event | dict[str, Any]], expected_seq: ExpectedSeq) -> AppendResult:
        """Append to the session's own log; seqs in and out are in the visible numbering.

        Raises:
            ConcurrencyError: the visible last seq is not ``expected_seq`` (both numbers in
                the visible numbering, also for an ``expected_seq`` inside the parent's prefix).
            and what ``SessionStore.append`` raises.
        """
        if not self.base:
            return self.store.append(self.session_id, events, expected_seq)
        expected = expected_seq
        if expected_seq != ANY:
            visible = check_int("expected_seq", expected_seq, minimum=0)
            if visible < self.base:  # inside the parent's prefix: never the head of this fork
                raise ConcurrencyError(self.session_id, visible, self.last_seq())
            expected = visible - self.base
        try:
            result = self.store.append(self.session_id, events, expected)
        except ConcurrencyError as e:
            raise self._visible_conflict(e) from None
        return dataclasses.replace(
            result, seqs=tuple(s + self.base for s in result.seqs), last_seq=result.last_seq + self.base
        )

    def _visible_conflict(self, error: ConcurrencyError) -> ConcurrencyError:
        """The store's conflict restated in the visible numbering the caller used."""
        expected = None if error.expected is None else error.expected + self.base
        return ConcurrencyError(error.session_id, expected, error.actual + self.base)

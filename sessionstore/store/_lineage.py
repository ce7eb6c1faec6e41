"""A session's log as one sequence of events, forks included, without copying anything.

A fork is a session created with ``parent_session_id`` and ``fork_seq``: its history is the
parent's history up to ``fork_seq`` — counted in the parent's continuous numbering, so a fork
of a fork shares its grandparent's prefix too — followed by its own. ``SessionLog`` numbers
that history continuously (the fork's own event ``k`` is seq ``fork_seq + k``), so projections,
snapshots and the audit treat a fork like any session.
Sub-agents are child sessions without a fork point: their logs are their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..events._base import Event
from ._contract import ANY, AppendResult, ExpectedSeq, RecordedEvent, SessionStore

__all__ = ["SessionLog"]


class SessionLog:
    """Reads and appends one session's events in its continuous (fork-aware) numbering."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        info = store.get_session(session_id)
        self.parent: SessionLog | None = None
        #: Seqs up to this one come from the parent; the session's own events follow.
        self.base = 0
        if info.parent_session_id is not None and info.fork_seq is not None:
            self.parent = SessionLog(store, info.parent_session_id)
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
        """Append to the session's own log; seqs in and out are in the continuous numbering."""
        expected = expected_seq if expected_seq == ANY else int(expected_seq) - self.base
        result = self.store.append(self.session_id, events, expected)
        if not self.base:
            return result
        return dataclasses.replace(
            result, seqs=tuple(s + self.base for s in result.seqs), last_seq=result.last_seq + self.base
        )

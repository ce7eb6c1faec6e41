"""The transcript view: everything that happened in a session, in order. Nothing is ever removed.

Unlike the API context, the transcript keeps meta and sidechain entries, usage reports, and (as
later stages arrive) every compaction and its revert, so a UI or an auditor sees the whole story.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..store import RecordedEvent
from ._base import Projection, register_projection
from ._message_list import canonical_json

__all__ = ["TranscriptEntry", "TranscriptProjection", "TranscriptState"]


@dataclass(frozen=True)
class TranscriptEntry:
    """One event as the transcript shows it."""

    seq: int
    type: str
    payload: dict[str, Any]
    token_count: int | None
    event_id: str

    @property
    def child_session_id(self) -> str | None:
        """The sub-agent session this entry starts (a ``subagent_started`` entry), if any."""
        value = self.payload.get("child_session_id")
        return value if isinstance(value, str) else None


@dataclass
class TranscriptState:
    """Every entry of the session, in seq order."""

    entries: list[TranscriptEntry] = field(default_factory=list)


@register_projection
class TranscriptProjection(Projection[TranscriptState]):
    """Folds every event into the transcript."""

    name: ClassVar[str] = "transcript"
    version: ClassVar[int] = 1

    def initial(self) -> TranscriptState:
        """No entries."""
        return TranscriptState()

    def apply(self, state: TranscriptState, event: RecordedEvent) -> TranscriptState:
        """Append the event as an entry."""
        state.entries.append(
            TranscriptEntry(event.seq, event.type, event.payload_dict(), event.token_count, event.event_id)
        )
        return state

    def dump(self, state: TranscriptState) -> bytes:
        """The entries as a JSON array."""
        rows = [[e.seq, e.type, e.payload, e.token_count, e.event_id] for e in state.entries]
        return canonical_json(rows)

    def load(self, data: bytes) -> TranscriptState:
        """Entries from ``dump``'s JSON."""
        rows = json.loads(data)
        if not isinstance(rows, list):
            msg = "transcript snapshot is not a JSON array"
            raise TypeError(msg)
        return TranscriptState(
            [TranscriptEntry(int(s), str(t), dict(p), c, str(i)) for s, t, p, c, i in rows]
        )

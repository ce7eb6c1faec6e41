"""What every pipeline stage reports."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StageReport"]


@dataclass(frozen=True)
class StageReport:
    """What one stage did: the events it appended and the (raw) tokens it freed."""

    stage: str
    tokens_freed: int = 0
    event_ids: tuple[str, ...] = ()
    note: str = ""

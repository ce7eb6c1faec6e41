"""The seam every pipeline stage plugs into: the ``Stage`` protocol and what a stage reports.

A stage owns its config, decides from the live session's projection, and **appends the events
that record what it did itself** (each decision in one transaction, so the view changes only
through the log), then reports them. ``Pipeline.prepare`` runs its stages in order and collects
the reports; adding a stage is a file holding a ``Stage`` and a line in
``pipeline._pipeline.configured_stages`` (or a ``Pipeline(stages=...)`` of your own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..events import Event
from ..projections import Session
from ..projections._session import check_session

__all__ = ["Stage", "StageReport", "record_events"]


@dataclass(frozen=True)
class StageReport:
    """What one stage did: the events it appended and the (raw) tokens it freed."""

    stage: str
    tokens_freed: int = 0
    event_ids: tuple[str, ...] = ()
    note: str = ""


@runtime_checkable
class Stage(Protocol):
    """One step of the context-management pipeline, run before every model call.

    ``name`` labels the stage in its ``StageReport`` (and in ``STAGE_ORDER``).

    ``run(session, now)`` decides from the session's projection, appends the events recording
    what it did (``record_events`` does it for a stage whose decision is one batch of events),
    and returns the report. It returns None when the stage stands aside this time (switched
    off, or not its thread): the request's reports then do not list it. ``now`` is the
    pipeline's clock, read once per ``prepare``.
    """

    @property
    def name(self) -> str:
        """The stage's label in reports."""
        ...

    def run(self, session: Session, now: datetime) -> StageReport | None:
        """Run the stage on ``session``; return what it did, or None when it stood aside."""
        ...


def record_events(session: Session, stage: str, events: Sequence[Event]) -> StageReport:
    """Append a stage's events in one transaction and report them with the tokens they freed.

    Nothing is appended when the stage decided nothing: the report then frees 0 tokens.
    """
    check_session("session", session)
    if not events:
        return StageReport(stage)
    session.append(list(events))
    freed = sum(int(getattr(event, "tokens_freed", 0)) for event in events)
    return StageReport(stage, freed, tuple(str(event.event_id) for event in events))

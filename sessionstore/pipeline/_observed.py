"""What the pipeline reports: a span and a record per stage decision, compaction and revert.

Logged under ``sessionstore.pipeline``: a stage decision at DEBUG (one per stage per model
call), a compaction and a revert at INFO. Spans: ``sessionstore.prepare`` around
``Pipeline.prepare``, a ``sessionstore.stage.<name>`` child per stage, ``sessionstore.compaction``
around each compaction (the summarizer's model call is its child).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from .._telemetry import SpanHandle, log_record, logger, span
from ..projections import Session
from ._stage import StageReport

__all__ = ["PIPELINE_LOG", "end_stage", "log_compaction", "log_revert", "stage_span"]

PIPELINE_LOG = logger("pipeline")


@contextlib.contextmanager
def stage_span(session: Session, name: str) -> Iterator[SpanHandle]:
    """A span around one stage's run; ``end_stage`` fills in and logs its decision."""
    attributes = {"sessionstore.session_id": session.id, "sessionstore.stage": name}
    with span(f"sessionstore.stage.{name}", attributes) as handle:
        yield handle


def end_stage(
    handle: SpanHandle, session: Session, name: str, before: int, report: StageReport | None
) -> None:
    """Record a stage's decision: tokens used before and after it, freed, events appended."""
    after = session.used_tokens()
    ran = report is not None
    freed = report.tokens_freed if report is not None else 0
    events = len(report.event_ids) if report is not None else 0
    handle.set(
        {
            "sessionstore.stage.ran": ran,
            "sessionstore.tokens.before": before,
            "sessionstore.tokens.after": after,
            "sessionstore.tokens.freed": freed,
            "sessionstore.stage.events": events,
        }
    )
    log_record(
        PIPELINE_LOG,
        logging.DEBUG,
        "stage",
        "stage {stage} on session {session_id}: {decision}, {tokens_freed} tokens freed "
        "({tokens_before} -> {tokens_after} used)",
        stage=name,
        session_id=session.id,
        decision=("acted" if events else "nothing to do") if ran else "stood aside",
        ran=ran,
        tokens_before=before,
        tokens_after=after,
        tokens_freed=freed,
        event_count=events,
        note=report.note if report is not None else "",
    )


def log_compaction(
    session: Session,
    *,
    trigger: str,
    ok: bool,
    strategy: str,
    tokens_before: int,
    tokens_after: int,
    reason: str | None,
    event_id: str,
) -> None:
    """A compaction that recorded a boundary (INFO) or failed (WARNING: the context is as it was)."""
    fields = {
        "session_id": session.id,
        "trigger": trigger,
        "ok": ok,
        "strategy": strategy,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "tokens_freed": tokens_before - tokens_after,
        "reason": reason,
        "event_id": event_id,
    }
    if ok:
        message = (
            "compacted session {session_id} ({trigger}, {strategy}): {tokens_before} -> {tokens_after} tokens"
        )
        log_record(PIPELINE_LOG, logging.INFO, "compaction", message, **fields)
    else:
        message = "compaction of session {session_id} ({trigger}) failed, nothing changed: {reason}"
        log_record(PIPELINE_LOG, logging.WARNING, "compaction", message, **fields)


def log_revert(session: Session, target_event_id: str, target_type: str, report: StageReport) -> None:
    """A context edit undone (INFO)."""
    log_record(
        PIPELINE_LOG,
        logging.INFO,
        "revert",
        "reverted {target_type} {target_event_id} in session {session_id}: {tokens_restored} tokens back",
        session_id=session.id,
        target_event_id=target_event_id,
        target_type=target_type,
        tokens_restored=-report.tokens_freed,
        event_id=report.event_ids[0] if report.event_ids else None,
    )

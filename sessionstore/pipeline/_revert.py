"""Undoing a context edit: a persisted result, a snip, a micro-compaction, a collapse or a compaction."""

from __future__ import annotations

from ..errors import CompactionDisabledError, CompactionRevertTooLargeError, ValidationError
from ..events import ContextEditReverted
from ..events._context import REVERTIBLE_TYPES
from ..projections import CompactionRecord, Session
from ..projections._session import check_session
from ..store._contract import check_lookup
from ._compaction import CompactConfig, CompactReport, compact
from ._observed import log_revert
from ._stage import StageReport
from ._summarizers import Summarizer

__all__ = ["revert", "revert_and_recompact"]

#: Edits that reshape the request around a compaction: they go first when it is reverted.
_STRUCTURAL = frozenset({"snip_applied", "collapse_committed"})


def revert(session: Session, event_id: str, *, over_limit: bool = False) -> StageReport:
    """Undo a persisted result, a snip, a micro-compaction, a collapse or a compaction.

    The next request is as before the edit, with everything appended after it. A compaction
    is reverted newest first, after the snips and collapses recorded after it.

    Args:
        over_limit: revert a compaction even when the restored request would reach the
            window's blocking limit (the caller compacts again at once).

    Raises:
        ValidationError: the event is not in the session, is not revertible, was reverted, or
            (a compaction) later edits built on it or a later message depended on it.
        CompactionRevertTooLargeError: the restored request would not fit the window.
    """
    check_session("session", session)
    check_lookup("event_id", event_id)
    state = session.api_state
    if event_id in state.reverted:
        msg = f"event {event_id} was already reverted by event {state.reverted[event_id]}"
        raise ValidationError(msg, field="event_id")
    compaction = next((c for c in _compactions(session) if c.event_id == event_id), None)
    if compaction is not None:
        return _revert_compaction(session, compaction, over_limit)
    edit = state.edits.get(event_id)
    if edit is None:
        entry = next((e for e in session.transcript if e.event_id == event_id), None)
        if entry is None:
            msg = f"event {event_id} is not in session {session.id!r}"
        elif entry.type in REVERTIBLE_TYPES:
            msg = f"event {event_id} ({entry.type}) changed nothing in the view: nothing to revert"
        else:
            revertible = ", ".join(sorted(REVERTIBLE_TYPES))
            msg = f"event {event_id} is a {entry.type}, which cannot be reverted (only {revertible})"
        raise ValidationError(msg, field="event_id")
    event = ContextEditReverted(target_event_id=event_id, target_type=edit.type)
    session.append([event])
    report = StageReport("revert", -edit.tokens, (str(event.event_id),))
    log_revert(session, event_id, edit.type, report)
    return report


def revert_and_recompact(
    session: Session, event_id: str, summarizer: Summarizer, *, config: CompactConfig | None = None
) -> tuple[StageReport, CompactReport]:
    """Revert a compaction even past the window's limit, then compact again at once.

    What ``CompactionRevertTooLargeError`` offers: the new summary covers the restored history
    and everything appended after the old boundary. When the new compaction fails (recorded as
    ``CompactFailed``), the revert stays and the request is over the limit until one succeeds.

    Raises:
        ValidationError: the event is not an unreverted compaction of the session, or (as
            ``revert``) later edits built on it or a later message depended on it.
        CompactionDisabledError: the session's window config disables all compaction (checked
            before anything is recorded).
    """
    check_session("session", session)
    if event_id not in session.api_state.reverted and not any(
        c.event_id == event_id for c in _compactions(session)
    ):
        msg = f"recompact applies to a compaction only: event {event_id} is not a compaction in effect"
        raise ValidationError(msg, field="event_id")
    if session.config.window.disable_compaction:
        raise CompactionDisabledError(session.id)
    reverted = revert(session, event_id, over_limit=True)
    return reverted, compact(session, summarizer, config=config)


def _compactions(session: Session) -> list[CompactionRecord]:
    """The unreverted compactions, oldest first (the last one shapes the request)."""
    state = session.api_state
    return [*state.earlier_compactions, state.compact] if state.compact is not None else []


def _revert_compaction(session: Session, compaction: CompactionRecord, over_limit: bool) -> StageReport:
    state = session.api_state
    event_id = compaction.event_id
    latest = state.compact
    assert latest is not None
    if latest is not compaction:
        msg = (
            f"compaction {event_id} was followed by compaction {latest.event_id}, still in effect: "
            f"revert that one first (newest first)"
        )
        raise ValidationError(msg, field="event_id")
    later = _later_structural_edit(session, compaction.seq)
    if later is not None:
        msg = (
            f"{later[1]} {later[0]} was recorded after compaction {event_id} and is still in effect: "
            f"revert it first (newest first)"
        )
        raise ValidationError(msg, field="event_id")
    if compaction.diverged_seq:
        msg = (
            f"the message at seq {compaction.diverged_seq} was added against compaction {event_id} "
            f"(it merged with, answered or closed a call of what the compaction summarized), so the "
            f"request without the compaction cannot be rebuilt in place; fork the session at seq "
            f"{compaction.seq - 1} to get the request from before it"
        )
        raise ValidationError(msg, field="event_id")
    previous = state.compaction_before_latest
    added_tokens = state.view_tokens_under(previous) - state.view_tokens
    added_blocks = state.visible_blocks_under(previous) - state.visible_blocks
    needed = session.used_tokens() + session.estimate(added_tokens, added_blocks)
    limit = session.token_state().window.blocking_limit
    if needed >= limit and not over_limit:
        raise CompactionRevertTooLargeError(event_id, needed, limit)
    event = ContextEditReverted(target_event_id=event_id, target_type="compact_boundary")
    session.append([event])
    report = StageReport("revert", -added_tokens, (str(event.event_id),))
    log_revert(session, event_id, "compact_boundary", report)
    return report


def _later_structural_edit(session: Session, seq: int) -> tuple[str, str] | None:
    """(event id, type) of the newest snip or collapse after ``seq`` still in effect, if any."""
    edits = session.api_state.edits
    later = [
        (entry.event_id, entry.type)
        for entry in session.transcript
        if entry.seq > seq and entry.type in _STRUCTURAL and entry.event_id in edits
    ]
    return later[-1] if later else None

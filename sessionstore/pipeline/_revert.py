"""Undoing a context edit: a persisted result, a snip, a micro-compaction or a committed collapse."""

from __future__ import annotations

from ..errors import ValidationError
from ..events._context import REVERTIBLE_TYPES, ContextEditReverted
from ..projections._session import Session
from ._observed import log_revert
from ._stage import StageReport

__all__ = ["revert"]


def revert(session: Session, event_id: str) -> StageReport:
    """Undo a persisted result, a snip or a micro-compaction; the next request is as before it.

    Raises:
        ValidationError: the event is not in the session, is not revertible, or was reverted.
    """
    state = session.api_state
    if event_id in state.reverted:
        msg = f"event {event_id} was already reverted by event {state.reverted[event_id]}"
        raise ValidationError(msg, field="event_id")
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

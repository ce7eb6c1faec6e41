"""Auditing: the timeline of context operations, served-request replay, diffs, verify, and the
token timeline and context breakdown."""

from __future__ import annotations

from ._audit import (
    AuditEntry,
    AuditReport,
    ServedReplay,
    audit,
    check_turn,
    served_request,
    turn_diff,
    view_diff,
)
from ._tokens import (
    BREAKDOWN_CATEGORIES,
    BreakdownRow,
    ContextBreakdown,
    StageMarker,
    TokenTimeline,
    TurnTokens,
    context_breakdown,
    token_timeline,
)
from ._verify import (
    MAX_HEADS_FILE_BYTES,
    ProjectionCheck,
    SessionVerification,
    all_heads,
    format_head,
    missing_session,
    read_heads,
    verify_all,
    verify_session,
)

__all__ = [
    "AuditEntry",
    "AuditReport",
    "BREAKDOWN_CATEGORIES",
    "BreakdownRow",
    "ContextBreakdown",
    "MAX_HEADS_FILE_BYTES",
    "ProjectionCheck",
    "ServedReplay",
    "SessionVerification",
    "StageMarker",
    "TokenTimeline",
    "TurnTokens",
    "all_heads",
    "audit",
    "check_turn",
    "context_breakdown",
    "format_head",
    "missing_session",
    "read_heads",
    "served_request",
    "token_timeline",
    "turn_diff",
    "verify_all",
    "verify_session",
    "view_diff",
]

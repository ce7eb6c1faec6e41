"""Auditing: the timeline of context operations, served-request replay, diffs and verify."""

from __future__ import annotations

from ._audit import (
    AuditEntry,
    AuditReport,
    ServedReplay,
    audit,
    served_request,
    view_diff,
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
    "MAX_HEADS_FILE_BYTES",
    "ProjectionCheck",
    "ServedReplay",
    "SessionVerification",
    "all_heads",
    "audit",
    "format_head",
    "missing_session",
    "read_heads",
    "served_request",
    "verify_all",
    "verify_session",
    "view_diff",
]

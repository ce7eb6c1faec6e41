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

__all__ = [
    "AuditEntry",
    "AuditReport",
    "ServedReplay",
    "audit",
    "served_request",
    "view_diff",
]

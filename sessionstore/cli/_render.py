"""How the command line shows the audit layer's reports in a terminal (rich tables)."""

from __future__ import annotations

from typing import TextIO

from ..audit import AuditEntry, AuditReport

__all__ = ["render_audit"]


def render_audit(report: AuditReport, out: TextIO) -> None:
    """Print the timeline as a table, then the served-request count and the breaker's state;
    for an erased session, its receipt."""
    if report.erasure is not None:
        print(f"audit of {report.session_id}: {report.erasure.summary()}", file=out)
        return
    from rich.console import Console  # imported here: only the terminal views need rich
    from rich.table import Table

    table = Table(title=f"audit of {report.session_id}", show_lines=False)
    for column in ("seq", "turn", "operation", "what", "freed", "before", "after", "reverted by"):
        table.add_column(column, overflow="fold")
    for entry in report.entries:
        cells = [entry.tokens_freed, entry.tokens_before, entry.tokens_after]
        table.add_row(
            str(entry.seq),
            "" if entry.turn is None else str(entry.turn),
            entry.kind,
            _what_with_uuids(entry),
            *("" if v is None else str(v) for v in cells),
            (entry.reverted_by or "")[:8],
        )
    console = Console(file=out, width=160, no_color=True)
    console.print(table)
    breaker = "OPEN" if report.breaker_open else "closed"
    console.print(
        f"requests served: {report.requests_served}; auto-compact breaker: {breaker} "
        f"({report.consecutive_auto_compact_failures} consecutive failures)"
    )


def _what_with_uuids(entry: AuditEntry) -> str:
    """The 'what' cell: for a collapse or compaction, the uuids of what it replaced on lines below."""
    lines = [entry.what]
    for key, label in (("replaced", "replaced"), ("ptl_dropped", "dropped unsummarized")):
        listed = entry.details.get(key)
        if listed and listed["count"]:
            lines.append(f"{label}: " + " ".join(listed["uuids"]))
    return "\n".join(lines)

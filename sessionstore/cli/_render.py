"""How the command line shows the audit layer's reports in a terminal (rich tables)."""

from __future__ import annotations

from typing import TextIO

from ..audit import AuditEntry, AuditReport, ContextBreakdown
from ._output import console as _console

__all__ = ["render_audit", "render_breakdown"]


def render_audit(report: AuditReport, out: TextIO) -> None:
    """Print the timeline as a table, then the served-request count and the breaker's state;
    for an erased session, its receipt."""
    if report.erasure is not None:
        print(f"audit of {report.session_id}: {report.erasure.summary()}", file=out)
        return
    from rich.table import Table  # imported here: only the terminal views need rich

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
    console = _console(out)
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


def render_breakdown(breakdown: ContextBreakdown, out: TextIO) -> None:
    """The ``/context`` table: each category's tokens and share of the window, then free space."""
    from rich.table import Table

    window = breakdown.window
    table = Table(title=f"context of {breakdown.session_id}")
    for column, justify in (
        ("category", "left"),
        ("tokens", "right"),
        ("of window", "right"),
        ("blocks", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]

    def share(tokens: int) -> str:
        return f"{100 * tokens / window.window:.1f}%" if window.window else "-"

    for row in breakdown.rows:
        table.add_row(row.category, f"{row.tokens:,}", share(row.tokens), str(row.blocks))
    if breakdown.unattributed:
        table.add_row("not attributed", f"{breakdown.unattributed:,}", share(breakdown.unattributed), "")
    table.add_section()
    table.add_row("used", f"{breakdown.used:,}", share(breakdown.used), "", style="bold")
    table.add_row("free", f"{breakdown.free:,}", share(breakdown.free), "")
    if breakdown.autocompact_buffer:
        table.add_row(
            "auto-compact buffer",
            f"{breakdown.autocompact_buffer:,}",
            share(breakdown.autocompact_buffer),
            "",
        )
    table.add_row("reserved for the reply", f"{window.reserve:,}", share(window.reserve), "")
    console = _console(out)
    console.print(table)
    console.print(
        f"{breakdown.used:,} of {window.effective_window:,} tokens used "
        f"({breakdown.percent_left}% left before auto-compact); window {window.window:,}"
    )

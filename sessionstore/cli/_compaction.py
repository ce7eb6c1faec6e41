"""``revert`` and ``compact --dry-run``: undoing a compaction (or any edit) and previewing one.

A compaction whose restored history would not fit the window is refused with the numbers and
what fits instead, as commands to copy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import TextIO

from ..errors import EXIT_ERROR, EXIT_OK, CompactionRevertTooLargeError, ValidationError
from ..pipeline import (
    AnthropicSummarizer,
    CompactPreview,
    CompactReport,
    OfflineSummarizer,
    Summarizer,
    compact_preview,
    default_summarizer,
    revert,
    revert_and_recompact,
)
from ..projections import Session

__all__ = ["print_preview", "run_revert", "summarizer_for"]


def summarizer_for(choice: str, session: Session, model: str | None = None) -> Summarizer:
    """The summarizer ``--summarizer`` names: auto (the model when a key is set), offline, anthropic.

    Args:
        model: the model to ask (default: the session's).

    Raises:
        ValidationError: anthropic without a model (given or the session's) or without
            ``ANTHROPIC_API_KEY``.
    """
    model = model or session.api_state.model
    if choice == "offline":
        return OfflineSummarizer()
    if choice == "auto":
        return default_summarizer(model=model)
    if not model or not os.environ.get("ANTHROPIC_API_KEY"):
        msg = "--summarizer anthropic needs a session that names its model and ANTHROPIC_API_KEY set"
        raise ValidationError(msg, field="summarizer")
    import anthropic

    return AnthropicSummarizer(anthropic.Anthropic(), model)


def print_preview(args: argparse.Namespace, session: Session, summarizer: Summarizer, out: TextIO) -> int:
    """``compact --dry-run``: the summary, tokens before and after, and what stays; nothing recorded."""
    preview = compact_preview(
        session,
        summarizer,
        custom_instructions=args.instructions,
        up_to_uuid=args.up_to_uuid,
        from_uuid=args.from_uuid,
    )
    if args.json:
        print(json.dumps({"dry_run": True, **_asdict(preview)}, ensure_ascii=False), file=out)
        return EXIT_OK
    print(
        f"compact --dry-run ({preview.strategy}, {preview.summarizer}): {preview.tokens_before} -> "
        f"{preview.tokens_after} tokens; nothing recorded",
        file=out,
    )
    if preview.kept_before_seq:
        print(
            f"kept before the summary: {preview.kept_messages} messages "
            f"(before seq {preview.kept_before_seq})",
            file=out,
        )
    elif preview.kept_from_seq:
        print(
            f"kept after the summary: {preview.kept_messages} messages (from seq {preview.kept_from_seq})",
            file=out,
        )
    else:
        print("kept verbatim: nothing (the summary stands for every message)", file=out)
    for kind, name, tokens in preview.attachments:
        print(f"restored after it: {kind} {name} ({tokens} tokens)", file=out)
    for text in preview.hook_results:
        print(f"hook output after it: {text}", file=out)
    print("summary:", file=out)
    print(preview.summary, file=out)
    return EXIT_OK


def _asdict(report: CompactPreview | CompactReport) -> dict[str, object]:
    return dataclasses.asdict(report)


def run_revert(args: argparse.Namespace, session: Session, out: TextIO) -> int:
    """``revert``: undo the edit; ``--recompact`` (a compaction only) compacts again at once."""
    recompacted: CompactReport | None = None
    try:
        if args.recompact:
            summarizer = default_summarizer(model=session.api_state.model)
            report, recompacted = revert_and_recompact(session, args.event_id, summarizer)
        else:
            report = revert(session, args.event_id)
    except CompactionRevertTooLargeError as e:
        _print_too_large(args.session_id, e)
        return EXIT_ERROR
    event_id = report.event_ids[0]
    outcome: dict[str, object] = {
        "stage": report.stage,
        "tokens_freed": report.tokens_freed,
        "event_id": event_id,
        "note": report.note,
    }
    if recompacted is not None:
        outcome["recompacted"] = _asdict(recompacted)
    if args.json:
        print(json.dumps(outcome, ensure_ascii=False), file=out)
        return EXIT_OK
    print(
        f"reverted {args.event_id}: {-report.tokens_freed} tokens back in the context (event {event_id})",
        file=out,
    )
    if recompacted is not None and recompacted.ok:
        print(
            f"compacted again: {recompacted.tokens_before} -> {recompacted.tokens_after} tokens, "
            f"boundary {recompacted.event_id}",
            file=out,
        )
    elif recompacted is not None:
        print(
            f"compacting again failed ({recompacted.reason}): the request stays over the limit "
            "until a compaction succeeds",
            file=out,
        )
    return EXIT_OK


def _print_too_large(session_id: str, error: CompactionRevertTooLargeError) -> None:
    lines = [
        f"sessionstore: reverting compaction {error.event_id} would need {error.needed} tokens; "
        f"the limit is {error.limit}. Nothing was recorded. What fits instead:",
        f"  revert it and compact again at once:  "
        f"sessionstore revert {session_id} {error.event_id} --recompact",
        f"  keep it and collapse spans after it:  sessionstore collapse {session_id} --from UUID --to UUID",
    ]
    print("\n".join(lines), file=sys.stderr)

"""Pre-computed compaction: when a preparation is due, and when one has gone stale.

A ``CompactionPrepared`` holds the summary of the view messages that began at or before its
``through_seq``. Committed at the threshold, the compaction replaces those messages with it and
keeps everything after them verbatim. That is only right while the preparation still describes
the history, so it is *stale* (and discarded, recorded) when any of these holds, checked in this
order:

1. ``compacted``: the latest compaction is no longer the one it was prepared on (a compaction
   was recorded, or one reverted, since);
2. ``changed``: a message it covers changed (one grew, e.g. results merged into it: the raw
   tokens of the messages up to ``through_seq`` differ from the recorded ``covered_tokens``), or
   a snip took messages that came after it out of the request;
3. ``unclean_cut``: the first message after it opens with tool results (their calls would be
   summarized away);
4. ``grown``: the messages after it weigh more than ``precompute_max_growth_percent`` of the
   effective window (calibrated estimate, as the view holds them: less what persisted results,
   clears and collapses freed): the kept tail would be most of the new context;
5. ``above_threshold`` (checked by the compaction, which knows the restored attachments):
   committing it would leave "used" at or above the auto-compact threshold.

Nothing here calls a model or appends; ``_compaction`` prepares, commits and discards.
"""

from __future__ import annotations

import bisect
import math
from typing import Literal

from ..projections._api_context import freed_per_message, leading_results
from ..projections._api_records import PreparedCompaction
from ..projections._session import Session

__all__ = ["StaleReason", "prepared_keep_index", "preparation_mark", "stale_reason"]

StaleReason = Literal["compacted", "changed", "grown", "above_threshold", "unclean_cut"]


def preparation_mark(session: Session, percent: float) -> int:
    """The "used" tokens from which a preparation is due: ``percent`` of the auto-compact threshold."""
    return math.ceil(session.token_state().window.autocompact_threshold * percent / 100)


def prepared_keep_index(session: Session, prepared: PreparedCompaction) -> int:
    """Index of the first view message a commit of ``prepared`` keeps (``len(messages)``: none)."""
    return bisect.bisect_right(session.api_state.message_first_seq, prepared.through_seq)


def stale_reason(
    session: Session, prepared: PreparedCompaction, max_growth_percent: float
) -> tuple[StaleReason, str] | None:
    """Why ``prepared`` may no longer be committed (rules 1-4 of the module docstring), or None."""
    state = session.api_state
    base = state.compact.event_id if state.compact is not None else None
    if base != prepared.base_compaction_event_id:
        was = prepared.base_compaction_event_id or "none"
        return "compacted", f"prepared on compaction {was}, the latest is now {base or 'none'}"
    keep = prepared_keep_index(session, prepared)
    covered = sum(state.message_tokens[:keep])
    if covered != prepared.covered_tokens:
        return (
            "changed",
            f"the messages it covers hold {covered} tokens, {prepared.covered_tokens} when prepared",
        )
    if keep < state.first_visible:
        return "changed", "a snip took messages after it out of the request"
    messages = state.messages
    if keep < len(messages) and messages.role(keep) == "user" and leading_results(messages[keep]["content"]):
        return "unclean_cut", "the first message after it opens with tool results"
    freed_tokens, freed_blocks = freed_per_message(state)
    tail = range(keep, len(messages))
    tail_raw = sum(state.message_tokens[i] - freed_tokens.get(i, 0.0) for i in tail)
    tail_blocks = sum(len(messages[i]["content"]) - freed_blocks.get(i, 0) for i in tail)
    grown = session.estimate(max(0, round(tail_raw)), tail_blocks)
    limit = math.floor(session.token_state().window.effective_window * max_growth_percent / 100)
    if grown > limit:
        share = f"{max_growth_percent}% of the window"
        return "grown", f"{grown} tokens came after it, more than {limit} ({share})"
    return None

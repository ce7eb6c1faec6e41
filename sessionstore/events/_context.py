"""Events the context-management pipeline records.

Each stage that changes what the model sees appends one of these; the log itself is never
edited. Persisted results, snips, micro-compactions, collapses and compactions are undone by
``ContextEditReverted``, which names the event it reverts.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from ._base import Event, register_event, register_upcaster

__all__ = [
    "CollapseCommitted",
    "CompactBoundary",
    "CompactFailed",
    "CompactionPrepared",
    "CompactionPreparationDiscarded",
    "SessionMemoryUpdated",
    "SkillInvoked",
    "CollapseStaged",
    "ContextEditReverted",
    "ContextServed",
    "MicrocompactApplied",
    "PlanUpdated",
    "PreservedSegment",
    "REVERTIBLE_TYPES",
    "ServerEditsApplied",
    "SnipApplied",
    "ToolResultPersisted",
]


@register_event
class ContextServed(Event):
    """A request was handed to the model: what it contained, so the audit can reproduce it.

    Tool results listed in ``unreplaced_tool_results`` went out with their full content; from
    now on they are *frozen*: replacing them would break the cached prompt prefix.
    """

    type: Literal["context_served"] = "context_served"
    #: SHA-256 of the canonical request bytes.
    fingerprint: str
    #: The session's last seq folded into the request.
    through_seq: NonNegativeInt
    #: "Used" tokens when the request was served (usage + calibrated estimate).
    token_count: NonNegativeInt
    unreplaced_tool_results: list[str] = Field(default_factory=list)
    model: str | None = None
    #: Whether prompt-cache breakpoints were added (the replay needs it to rebuild the bytes).
    cache_control: bool = False
    #: Request keys beyond system, tools and messages (e.g. ``context_management``).
    extra: dict[str, object] = Field(default_factory=dict)


@register_event
class ToolResultPersisted(Event):
    """A large tool result moved to the blob store; the model sees ``preview`` in its place."""

    type: Literal["tool_result_persisted"] = "tool_result_persisted"
    tool_use_id: str
    tool_name: str | None = None
    blob_sha256: str
    #: Characters of the original result text.
    original_chars: NonNegativeInt
    #: The exact string sent instead of the content, reused on every rebuild.
    preview: str
    #: "size" (above the per-result threshold) or "aggregate" (the message's budget).
    reason: Literal["size", "aggregate"]
    #: Where the full output can be read (a file path when materialized).
    location: str
    #: Raw tokens the replacement removes from the view (original minus preview).
    tokens_freed: NonNegativeInt = 0


@register_event
class SnipApplied(Event):
    """The oldest API rounds leave the API view (the log and transcript keep them).

    Every view message that began before ``keep_from_seq`` is dropped.
    """

    type: Literal["snip_applied"] = "snip_applied"
    keep_from_seq: int = Field(ge=1)
    rounds_removed: NonNegativeInt
    messages_removed: NonNegativeInt
    tokens_freed: NonNegativeInt
    blocks_removed: NonNegativeInt = 0


@register_event
class MicrocompactApplied(Event):
    """Old compactable tool results' content replaced by the cleared placeholder."""

    type: Literal["microcompact_applied"] = "microcompact_applied"
    trigger: Literal["time", "manual"]
    cleared_tool_use_ids: list[str]
    keep_recent: int = Field(ge=1)
    gap_minutes: float | None = None
    tokens_freed: NonNegativeInt


@register_event
class ServerEditsApplied(Event):
    """Context edits the API applied server-side (``context_management.applied_edits``).

    The local content is untouched; the cleared tokens lower the next usage baseline.
    """

    type: Literal["server_edits_applied"] = "server_edits_applied"
    api_message_id: str | None = None
    edits: list[dict[str, object]]
    cleared_input_tokens: NonNegativeInt


@register_event
class ContextEditReverted(Event):
    """Undo a persisted result, snip, micro-compaction, collapse commit or compaction (by event id)."""

    type: Literal["context_edit_reverted"] = "context_edit_reverted"
    target_event_id: str
    target_type: str


@register_event
class CollapseStaged(Event):
    """A summary of one span of API rounds, prepared ahead of pressure; it changes nothing yet.

    The span is the view messages that began at seq ``first_seq`` up to (not including) the
    message that began at ``end_seq``.
    """

    type: Literal["collapse_staged"] = "collapse_staged"
    first_seq: int = Field(ge=1)
    end_seq: int = Field(ge=1)
    first_message_uuid: str | None = None
    last_message_uuid: str | None = None
    summary: str
    summary_tokens: NonNegativeInt
    tokens_covered: NonNegativeInt
    summarizer: str


@register_event
class CollapseCommitted(Event):
    """A staged collapse takes effect: its span leaves the request, its summary stands in."""

    type: Literal["collapse_committed"] = "collapse_committed"
    staged_event_id: str
    #: True when committed by a drain (overflow recovery, no model call).
    drained: bool = False
    tokens_freed: NonNegativeInt


class PreservedSegment(BaseModel):
    """The messages a compaction kept verbatim, by uuid (Claude Code's ``preservedSegment``).

    ``head_uuid`` and ``tail_uuid`` are the first and last kept message; ``anchor_uuid`` is the
    line the kept messages hang off in a transcript: the summary when they follow it, the
    boundary itself when they precede it (a partial "from" compaction).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    head_uuid: str
    anchor_uuid: str
    tail_uuid: str


@register_event
class CompactBoundary(Event):
    """A compaction: from here the request starts with ``summary`` instead of the history.

    Messages that began at or after ``keep_from_seq`` (0: none) and before this event are kept
    verbatim after the summary; ``attachments`` and ``hook_results`` follow them. Only the
    latest boundary shapes the request; earlier ones stay in the log for the audit.
    """

    #: 2: ``ptl_dropped_before_seq``.
    SCHEMA_VERSION: ClassVar[int] = 2

    type: Literal["compact_boundary"] = "compact_boundary"
    trigger: Literal["auto", "manual", "reactive"]
    strategy: Literal["llm", "session_memory"]
    template: Literal["base", "partial_from", "partial_up_to"] = "base"
    summarizer: str
    summary: str
    keep_from_seq: NonNegativeInt = 0
    #: For the "partial from" template: messages that began before this seq stay verbatim
    #: *before* the summary, which covers the rest up to the boundary (0: not partial-from).
    summarized_from_seq: NonNegativeInt = 0
    last_pre_compact_uuid: str | None = None
    pre_compact_tokens: NonNegativeInt
    #: Raw tokens of what the request holds right after the boundary (summary, kept, attachments).
    post_compact_raw_tokens: NonNegativeInt
    post_compact_blocks: NonNegativeInt = 0
    attachments: list[dict[str, object]] = Field(default_factory=list)
    hook_results: list[str] = Field(default_factory=list)
    custom_instructions: str | None = None
    ptl_retries: NonNegativeInt = 0
    #: After prompt-too-long retries: the messages that began before this seq were dropped from the
    #: summarizer's input (the summary does not cover them); 0 when nothing was dropped.
    ptl_dropped_before_seq: NonNegativeInt = 0
    discovered_tools: list[str] = Field(default_factory=list)
    #: The ``CompactionPrepared`` whose summary this boundary committed (None: summarized now).
    prepared_event_id: str | None = None
    #: The kept messages by uuid (None: nothing kept, or recorded before uuids were).
    preserved_segment: PreservedSegment | None = None


@register_upcaster("compact_boundary", 1)
def _nothing_dropped_on_record(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not record what prompt-too-long retries dropped."""
    return {**payload, "ptl_dropped_before_seq": 0}


@register_event
class CompactFailed(Event):
    """A compaction attempt that produced nothing; the context was left as it was.

    Consecutive automatic failures open the circuit breaker (a projection of these events).
    """

    type: Literal["compact_failed"] = "compact_failed"
    trigger: Literal["auto", "manual", "reactive"]
    reason: str
    ptl_retries: NonNegativeInt = 0


@register_event
class CompactionPrepared(Event):
    """The summary for the next compaction, prepared ahead of the threshold; it changes nothing yet.

    It covers the view messages that began at or before ``through_seq`` on top of the compaction
    ``base_compaction_event_id`` (None: none). When the threshold is reached the compaction
    commits it without a model call, keeping what came after ``through_seq`` verbatim, unless
    it went stale (docs/compaction.md "Pre-computed compaction"); a stale one is discarded
    with a ``CompactionPreparationDiscarded``.
    """

    type: Literal["compaction_prepared"] = "compaction_prepared"
    summary: str
    summarizer: str
    summary_tokens: NonNegativeInt
    through_seq: NonNegativeInt
    #: Raw tokens of the visible messages that began at or before ``through_seq``, less what
    #: committed collapses among them freed: a message that grew, or a snip or collapse committed
    #: or reverted since, changes it, and the preparation is stale.
    covered_tokens: NonNegativeInt
    base_compaction_event_id: str | None = None
    #: "Used" tokens when it was prepared.
    tokens_at_preparation: NonNegativeInt
    last_message_uuid: str | None = None
    #: What the pre-compact hooks gave when it was prepared: instructions for the summary, and
    #: messages shown after it once committed.
    custom_instructions: str | None = None
    hook_messages: list[str] = Field(default_factory=list)
    ptl_retries: NonNegativeInt = 0
    ptl_dropped_before_seq: NonNegativeInt = 0


@register_event
class CompactionPreparationDiscarded(Event):
    """A prepared compaction summary thrown away unused; the compaction, if due, summarizes anew.

    ``reason``: ``compacted`` (another compaction, or its revert, changed what it was prepared
    on), ``changed`` (a message it covers grew or is gone), ``grown`` (more than the allowed
    share of the window came after it), ``above_threshold`` (committing it would leave the
    context at or above the auto-compact threshold), ``unclean_cut`` (what would be kept starts
    with tool results whose calls it summarized).
    """

    type: Literal["compaction_preparation_discarded"] = "compaction_preparation_discarded"
    prepared_event_id: str
    reason: Literal["compacted", "changed", "grown", "above_threshold", "unclean_cut"]
    detail: str = ""


@register_event
class SessionMemoryUpdated(Event):
    """The session's running memory (notes kept for a compaction without a model call)."""

    type: Literal["session_memory_updated"] = "session_memory_updated"
    memory: str
    last_summarized_seq: NonNegativeInt
    tokens_at_extraction: NonNegativeInt
    tool_calls_at_extraction: NonNegativeInt = 0


@register_event
class SkillInvoked(Event):
    """A skill's instructions were loaded into the conversation (restored after a compaction)."""

    type: Literal["skill_invoked"] = "skill_invoked"
    name: str
    content: str


@register_event
class PlanUpdated(Event):
    """The agent's current plan (restored in full after a compaction)."""

    type: Literal["plan_updated"] = "plan_updated"
    plan: str


#: Event types a ``ContextEditReverted`` may target.
REVERTIBLE_TYPES = frozenset(
    {
        "tool_result_persisted",
        "snip_applied",
        "microcompact_applied",
        "collapse_committed",
        "compact_boundary",
    }
)

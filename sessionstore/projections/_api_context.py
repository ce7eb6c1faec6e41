"""The API context view: the ``{system, tools, messages}`` request for ``client.messages.create``.

Normalization, applied incrementally as events arrive (each rule is one named step below):

* ``_content_blocks``: string content becomes one text block; empty or whitespace-only text
  blocks are dropped (the API rejects them); every other block is kept verbatim, thinking
  blocks with their signatures.
* ``_skip``: meta entries and sidechain (sub-agent) entries are not sent.
* ``_add_assistant``: streamed chunks of one API round (same ``api_message_id``) form one
  assistant message, even when the round's tool results were written between its chunks;
  consecutive assistant messages are merged so roles alternate.
* ``_add_user``: consecutive user messages are merged; tool_result blocks go first in their
  message; a tool_result that answers no open tool_use of the preceding assistant message
  (an orphan, or a duplicate) is dropped.
* ``_close_interrupted_tools``: a tool_use still unanswered when the next API round starts gets
  a synthetic error result (``INTERRUPTED_TOOL_RESULT``) so the request stays valid.
* ``materialize``: the same repair for the tail, and a leading assistant message gets a
  synthetic user message (``LEADING_USER_MARKER``) before it, since requests start with a user.

Context edits, each one step (``_apply_edit``), each undone by ``ContextEditReverted``:

* ``ToolResultPersisted``: the result's content becomes the recorded preview string.
* ``MicrocompactApplied``: the listed results' content becomes ``CLEARED_PLACEHOLDER``.
* ``SnipApplied``: messages that began before ``keep_from_seq`` leave the request, and so do
  the tool results opening the first kept message (their calls were snipped).
* ``ContextServed``: results served un-replaced become frozen (the budget stage never touches
  them again).

* ``CollapseStaged``: a span's summary is kept ready; nothing changes yet.
* ``CollapseCommitted``: the span's messages leave the request and one user message with the
  summary stands in their place (results opening the span, answering a call before it, stay;
  results opening the message after it, answering a call inside it, go: ``collapse_span``).

* A server-side ``compaction`` block (the Messages API's own compaction) in an assistant
  message: the request starts at that message, the block standing in for what came before.
* ``CompactBoundary``: everything before the latest boundary leaves the request except the
  messages it keeps; the summary opens the request, attachments and hook results follow the
  kept messages (``_with_compaction``).
* ``CompactionPrepared``: the next compaction's summary is kept ready; nothing changes yet. A
  ``CompactionPreparationDiscarded`` or the boundary that commits it drops it.
* ``ListingDelta`` (shown, in the conversation): its text joins the conversation as user text,
  as a message would. ``ListingDelta`` and ``SubagentStatusRestored`` recorded with the latest
  compaction: their text follows its attachments, before its hook results (part of the
  compaction: a revert takes them out with it).
* ``ContextEditReverted`` of the latest ``CompactBoundary``: the request is built as it was
  before that boundary (the messages never left the view; the boundary's record goes, the
  compaction it superseded, if any, shapes the request again) and the fold's cursor the
  boundary reset is put back. A later message whose fold depended on the boundary marks it
  ``diverged_seq`` (``_note_divergence``): the pipeline refuses that revert.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ..events import (
    CollapseCommitted,
    CollapseStaged,
    CompactBoundary,
    CompactFailed,
    CompactionPreparationDiscarded,
    CompactionPrepared,
    ContextConfigured,
    ContextEditReverted,
    ContextServed,
    Event,
    ListingDelta,
    MessageAppended,
    MicrocompactApplied,
    PlanUpdated,
    SessionMemoryUpdated,
    SessionStarted,
    SkillInvoked,
    SnipApplied,
    SubagentStatusRestored,
    ToolResultPersisted,
    UsageRecorded,
)
from ..store import RecordedEvent
from ._api_records import (
    ActiveEdit,
    CollapseEdit,
    CompactionRecord,
    MemoryRecord,
    PendingReplacement,
    PreparedCompaction,
    ResultReplacement,
    ResultsEdit,
    SnipEdit,
    StagedCollapse,
    StateRecord,
    ViewAtChange,
    edit_from_json,
    record_from_json,
)
from ._base import Projection, register_projection
from ._message_list import MessageList, canonical_json

__all__ = [
    "CLEARED_PLACEHOLDER",
    "COLLAPSE_PREFIX",
    "COMPACT_SUMMARY_PREFIX",
    "INTERRUPTED_TOOL_RESULT",
    "LEADING_USER_MARKER",
    "ApiContextProjection",
    "ApiContextState",
    "IncrementalFingerprint",
    "collapse_span",
    "collapse_span_tokens",
    "committed_spans",
    "encode_request",
    "freed_per_message",
    "view_size",
    "leading_results",
    "materialize",
    "request_bytes",
]

#: Content of the synthetic tool_result that answers a tool call with no recorded result.
INTERRUPTED_TOOL_RESULT = "[Tool call interrupted: no result was recorded]"
#: Opens the summary message of a compaction.
COMPACT_SUMMARY_PREFIX = (
    "This session continues an earlier conversation that ran out of context. It is summarized below.\n\n"
)
#: Opens the user message that stands in for a committed collapse.
COLLAPSE_PREFIX = "[Collapsed: summary of earlier messages]\n"
#: Summarizers whose summary already is the whole message the model got: an imported Claude Code
#: compaction opens with Claude Code's own continuation notice, so no prefix is added to it.
_VERBATIM_SUMMARIZERS = frozenset({"claude-code"})
#: What a micro-compacted tool result's content becomes.
CLEARED_PLACEHOLDER = "[Old tool result content cleared]"
#: Text of the synthetic user message placed before a leading assistant message.
LEADING_USER_MARKER = "[Earlier conversation not shown]"

Block = dict[str, Any]
Message = dict[str, Any]
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})
_CACHE_CONTROL = {"type": "ephemeral"}


@dataclass
class ApiContextState:
    """What the model will see, kept normalized, plus the token accounting that goes with it.

    ``message_tokens[i]`` is the stored (raw) token count of everything merged into
    ``messages[i]``. ``usage_total`` is the latest API-reported context size (input + cache
    creation + cache read + output) and ``tokens_since_usage`` the raw count of what was added
    to the view after it. Content blocks are counted too (``view_blocks``,
    ``blocks_since_usage``): each costs a roughly fixed overhead a text count cannot see.
    """

    system: str | list[Block] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    context_tokens: int = 0
    messages: MessageList = field(default_factory=MessageList)
    message_tokens: list[int] = field(default_factory=list)
    message_tokens_total: int = 0
    open_tool_ids: list[str] = field(default_factory=list)
    last_assistant_index: int = -1
    last_assistant_api_id: str | None = None
    model: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    usage_total: int | None = None
    usage_api_id: str | None = None
    tokens_since_usage: int = 0
    view_blocks: int = 0
    blocks_since_usage: int = 0
    query_source: str = "main"
    #: Seq of the first event that contributed to each message (ascending).
    message_first_seq: list[int] = field(default_factory=list)
    #: Timestamp (ISO 8601) of the latest main-thread assistant message.
    last_assistant_time: str | None = None
    tool_names: dict[str, str] = field(default_factory=dict)
    #: tool_use_id -> index of the message holding its result; insertion order = arrival order.
    result_index: dict[str, int] = field(default_factory=dict)
    #: tool_use_id -> raw tokens of its result: the message event's stored count, shared among
    #: its results by characters (exact for a message holding one result). Stages use it
    #: instead of tokenizing the result again.
    result_tokens: dict[str, int] = field(default_factory=dict)
    #: Results never served un-replaced and never replaced: the budget stage may still act.
    fresh_results: dict[str, int] = field(default_factory=dict)
    #: Results served un-replaced (ContextServed): never touched again, to keep the cached prefix.
    frozen_results: dict[str, int] = field(default_factory=dict)
    #: tool_use_id -> the edit that replaced the result's content and the block before it.
    replaced: dict[str, ResultReplacement] = field(default_factory=dict)
    #: Replacements whose result is not in the view yet.
    pending: dict[str, PendingReplacement] = field(default_factory=dict)
    #: Active (unreverted) edits by event id, in the order they were applied.
    edits: dict[str, ActiveEdit] = field(default_factory=dict)
    #: Reverted edit's event id -> event id of the revert.
    reverted: dict[str, str] = field(default_factory=dict)
    #: Staged (not yet committed) collapses by event id.
    staged: dict[str, StagedCollapse] = field(default_factory=dict)
    #: Messages that began before this seq are snipped (0: nothing snipped).
    snip_keep_from: int = 0
    removed_tokens: int = 0
    removed_blocks: int = 0
    removed_tokens_at_usage: int = 0
    removed_blocks_at_usage: int = 0
    #: The latest compact boundary: its seq, what it keeps and adds, and the counts at that point.
    compact: CompactionRecord | None = None
    #: The unreverted boundaries ``compact`` superseded, oldest first: reverting the latest
    #: puts the one before it back.
    earlier_compactions: list[CompactionRecord] = field(default_factory=list)
    #: Messages below this index are behind a compact boundary: nothing new merges into them.
    merge_floor: int = 0
    #: Index of the assistant message holding the latest server-side compaction block (-1: none);
    #: the request starts there, the block standing in for everything before it.
    server_compaction_index: int = -1
    #: Consecutive failed automatic compactions (the circuit breaker counts these).
    compact_failures: int = 0
    #: The latest session memory: text, last summarized seq, tokens and tool calls at extraction.
    memory: MemoryRecord | None = None
    #: The compaction summary prepared ahead, waiting for the threshold (None: none pending).
    prepared: PreparedCompaction | None = None
    #: Main-thread tool calls so far (session-memory extraction paces itself by them).
    tool_calls: int = 0
    #: Skills invoked, oldest first (a re-invocation moves to the end), and the current plan:
    #: what a compaction puts back after the summary.
    skills: dict[str, str] = field(default_factory=dict)
    plan: str | None = None
    #: The view as each compact boundary and snip found it, in seq order, reverted or not:
    #: what the audit needs to list what each took out, without folding the log again.
    views_at_changes: list[ViewAtChange] = field(default_factory=list)

    @property
    def view_tokens(self) -> int:
        """Raw token count of everything in the view: system, tools and messages."""
        return self.view_tokens_under(self.compact)

    @property
    def visible_blocks(self) -> int:
        """Content blocks in the view (each costs a fixed overhead beyond its text)."""
        return self.visible_blocks_under(self.compact)

    @property
    def compaction_before_latest(self) -> CompactionRecord | None:
        """The boundary that shapes the request once the latest one is reverted (None: none)."""
        return self.earlier_compactions[-1] if self.earlier_compactions else None

    def view_tokens_under(self, compact: CompactionRecord | None) -> int:
        """``view_tokens`` as it would be were ``compact`` the latest boundary (None: no boundary)."""
        if compact is None:
            return self.context_tokens + self.message_tokens_total - self.removed_tokens
        added = self.message_tokens_total - compact.messages_total_at
        removed = self.removed_tokens - compact.removed_at
        return self.context_tokens + compact.base_tokens + added - removed

    def visible_blocks_under(self, compact: CompactionRecord | None) -> int:
        """``visible_blocks`` as it would be were ``compact`` the latest boundary."""
        if compact is None:
            return self.view_blocks - self.removed_blocks
        added = self.view_blocks - compact.blocks_at
        return compact.base_blocks + added - (self.removed_blocks - compact.removed_blocks_at)

    @property
    def first_visible(self) -> int:
        """Index of the first message neither snipped nor behind the latest compact boundary."""
        first = bisect.bisect_left(self.message_first_seq, self.snip_keep_from) if self.snip_keep_from else 0
        if self.compact is not None and not self.compact.from_seq:
            keep = self.compact.keep_from_seq or self.compact.seq + 1
            first = max(first, bisect.bisect_left(self.message_first_seq, keep))
        return max(first, self.server_compaction_index)


# --- normalization steps -----------------------------------------------------------------


def _content_blocks(content: str | list[Block]) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return [b for b in content if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]


def _skip(event: MessageAppended) -> bool:
    return event.is_meta or event.is_sidechain


def leading_results(content: list[Block]) -> int:
    """How many tool_result blocks open ``content``."""
    count = 0
    for block in content:
        if block.get("type") != "tool_result":
            break
        count += 1
    return count


def _interrupted(tool_use_id: str) -> Block:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": INTERRUPTED_TOOL_RESULT,
        "is_error": True,
    }


def _with_results_first(message: Message, results: list[Block]) -> Message:
    content = list(message["content"])
    at = leading_results(content)
    content[at:at] = results
    return {"role": message["role"], "content": content}


def _new_message(state: ApiContextState, role: str, blocks: list[Block], tokens: int, seq: int) -> None:
    state.messages.append({"role": role, "content": blocks})
    state.message_tokens.append(tokens)
    state.message_tokens_total += tokens
    state.message_first_seq.append(seq)


def _mergeable(state: ApiContextState, role: str) -> bool:
    """True when new content of ``role`` joins the last message (same role, not behind a boundary)."""
    return (
        bool(state.messages) and state.messages.role(-1) == role and len(state.messages) > state.merge_floor
    )


def _close_interrupted_tools(state: ApiContextState, seq: int) -> None:
    """Answer every still-open tool_use with a synthetic error result, before a new round."""
    if not state.open_tool_ids:
        return
    results = [_interrupted(tool_id) for tool_id in state.open_tool_ids]
    state.open_tool_ids.clear()
    if state.messages and state.messages[-1]["role"] == "user":
        state.messages[-1] = _with_results_first(state.messages[-1], results)
    else:
        _new_message(state, "user", results, 0, seq)


def _extend(state: ApiContextState, index: int, blocks: list[Block], tokens: int) -> None:
    # A new dict, never an in-place edit: requests handed out earlier share message dicts.
    message = state.messages[index]
    state.messages[index] = {"role": message["role"], "content": [*message["content"], *blocks]}
    state.message_tokens[index] += tokens
    state.message_tokens_total += tokens


def _only_tool_results_after(state: ApiContextState, index: int) -> bool:
    return all(
        message["role"] == "user" and leading_results(message["content"]) == len(message["content"])
        for message in state.messages[index + 1 :]
    )


def _add_assistant(
    state: ApiContextState, event: MessageAppended, blocks: list[Block], tokens: int, seq: int
) -> None:
    index = state.last_assistant_index
    same_round = (
        event.api_message_id is not None
        and event.api_message_id == state.last_assistant_api_id
        and index >= 0
        and _only_tool_results_after(state, index)
    )
    if same_round:
        _extend(state, index, blocks, tokens)
    else:
        _close_interrupted_tools(state, seq)
        if _mergeable(state, "assistant"):
            _extend(state, len(state.messages) - 1, blocks, tokens)
        else:
            _new_message(state, "assistant", blocks, tokens, seq)
        state.last_assistant_index = len(state.messages) - 1
        state.last_assistant_api_id = event.api_message_id
    if any(b.get("type") == "compaction" and b.get("content") is not None for b in blocks):
        # The API summarized everything before this block (a null content means it failed: a no-op).
        state.server_compaction_index = state.last_assistant_index
    for block in blocks:
        if block.get("type") == "tool_use":
            tool_id = str(block.get("id"))
            state.tool_calls += 1
            state.open_tool_ids.append(tool_id)
            state.tool_names[tool_id] = str(block.get("name", ""))


def _add_user(state: ApiContextState, blocks: list[Block], tokens: int, seq: int) -> None:
    results: list[Block] = []
    others: list[Block] = []
    # The message's stored count is shared among its results by characters (of the content as
    # stored, before a pending replacement). A result's share is taken with the block the view
    # keeps: a second result for the same call is dropped, and must not lend it its size.
    sizes = [len(_block_chars(block)) for block in blocks]
    kept_sizes: dict[str, int] = {}
    for block, size in zip(blocks, sizes, strict=True):
        if block.get("type") != "tool_result":
            others.append(block)
        elif block.get("tool_use_id") in state.open_tool_ids:
            tool_id = str(block["tool_use_id"])
            kept_sizes[tool_id] = size
            state.open_tool_ids.remove(tool_id)
            pending = state.pending.pop(tool_id, None)
            if pending is not None:
                state.replaced[tool_id] = ResultReplacement(by=pending.by, original=block)
                block = {**block, "content": pending.content}
            results.append(block)
    if not results and not others:
        return
    if _mergeable(state, "user"):
        merged = _with_results_first(state.messages[-1], results)
        merged["content"].extend(others)
        state.messages[-1] = merged
        state.message_tokens[-1] += tokens
        state.message_tokens_total += tokens
    else:
        _new_message(state, "user", results + others, tokens, seq)
    index = len(state.messages) - 1
    total = sum(sizes) or 1
    for block in results:
        tool_id = str(block["tool_use_id"])
        state.result_tokens[tool_id] = tokens * kept_sizes[tool_id] // total
        state.result_index[tool_id] = index
        if tool_id not in state.replaced:
            state.fresh_results[tool_id] = index


def _block_chars(block: Block) -> str:
    """A block's text for sharing out its message's token count (JSON for non-text content)."""
    content = block.get("content", block.get("text", ""))
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


# --- context edits: persisted results, micro-compaction, snip, revert ------------------------


def _set_result_content(state: ApiContextState, tool_use_id: str, content: object) -> Block | None:
    """Swap the content of a result in the view; returns the block it replaced."""
    index = state.result_index[tool_use_id]
    message = state.messages[index]
    content_blocks: list[Block] = list(message["content"])
    for i, block in enumerate(content_blocks):
        if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
            content_blocks[i] = {**block, "content": content}
            state.messages[index] = {"role": message["role"], "content": content_blocks}
            return block
    return None  # pragma: no cover - result_index always points at the message holding it


def _replace_results(state: ApiContextState, event_id: str, contents: dict[str, object]) -> tuple[str, ...]:
    """Replace results' content (or remember it for results not in the view yet)."""
    done: list[str] = []
    for tool_use_id, content in contents.items():
        if tool_use_id in state.replaced or tool_use_id in state.pending:
            continue  # the first replacement stands; a revert restores the original
        state.fresh_results.pop(tool_use_id, None)
        if tool_use_id in state.result_index:
            original = _set_result_content(state, tool_use_id, content)
            state.replaced[tool_use_id] = ResultReplacement(by=event_id, original=original)
        else:
            state.pending[tool_use_id] = PendingReplacement(by=event_id, content=content)
        done.append(tool_use_id)
    return tuple(done)


def _record_edit(state: ApiContextState, event_id: str, edit: ActiveEdit) -> None:
    state.edits[event_id] = edit
    state.removed_tokens += edit.tokens
    state.removed_blocks += edit.blocks


def _revert(state: ApiContextState, event_id: str, reverted_by: str) -> None:
    edit = state.edits.pop(event_id, None)
    if edit is None:
        return  # the pipeline refuses such reverts before writing them; a no-op keeps folds total
    state.removed_tokens -= edit.tokens
    state.removed_blocks -= edit.blocks
    state.reverted[event_id] = reverted_by
    if isinstance(edit, SnipEdit):
        seqs = [e.keep_from_seq for e in state.edits.values() if isinstance(e, SnipEdit)]
        state.snip_keep_from = max(seqs, default=0)
        return
    if isinstance(edit, CollapseEdit):
        return  # the request is built from the active edits: the span is simply back
    for tool_use_id in edit.ids:
        if state.pending.pop(tool_use_id, None) is not None:
            continue
        replaced = state.replaced.pop(tool_use_id, None)
        if replaced is not None and replaced.original is not None:
            _set_result_content(state, tool_use_id, replaced.original.get("content"))
            if tool_use_id not in state.frozen_results:
                state.fresh_results[tool_use_id] = state.result_index[tool_use_id]


# --- the fold: one handler per event type ------------------------------------------------------


def _fold_message(state: ApiContextState, event: RecordedEvent, message: MessageAppended) -> None:
    if _skip(message):
        return
    blocks = _content_blocks(message.content)
    if not blocks:
        return
    tokens = event.token_count or 0
    if state.compact is not None:
        _note_divergence(state, message, blocks, event.seq)
    if message.role == "assistant":
        _add_assistant(state, message, blocks, tokens, event.seq)
        moment = message.timestamp or event.created_at
        state.last_assistant_time = moment.isoformat()
    else:
        _add_user(state, blocks, tokens, event.seq)
    state.view_blocks += len(blocks)
    # An assistant message the latest usage already reports is not new context.
    if message.api_message_id is None or message.api_message_id != state.usage_api_id:
        state.tokens_since_usage += tokens
        state.blocks_since_usage += len(blocks)


def _depends_on(
    state: ApiContextState, record: CompactionRecord, message: MessageAppended, blocks: list[Block]
) -> bool:
    """True when folding ``message`` now differs from folding it without ``record``'s boundary.

    The boundary reset the merge floor, the open calls and the current API round: a message
    that would have merged across the floor, a result answering a call the boundary closed, a
    new round that would have closed those calls, or a chunk of the round the boundary ended.
    """
    if not record.cleared:
        return False
    count = len(state.messages)
    if (
        count
        and count == record.messages_at > record.merge_floor_at
        and state.messages.role(-1) == message.role
    ):
        return True
    if message.role == "assistant":
        same_round = (
            state.last_assistant_index < 0
            and message.api_message_id is not None
            and message.api_message_id == record.last_assistant_api_id_at
        )
        return bool(record.open_at) or same_round
    if not record.open_at:
        return False
    return any(b.get("type") == "tool_result" and b.get("tool_use_id") in record.open_at for b in blocks)


def _note_divergence(state: ApiContextState, message: MessageAppended, blocks: list[Block], seq: int) -> None:
    """Mark each unreverted boundary this message's fold depends on (its revert is then refused)."""
    earlier = state.earlier_compactions
    for at, record in enumerate(earlier):
        if not record.diverged_seq and _depends_on(state, record, message, blocks):
            earlier[at] = dataclasses.replace(record, diverged_seq=seq)
    latest = state.compact
    if latest is not None and not latest.diverged_seq and _depends_on(state, latest, message, blocks):
        state.compact = dataclasses.replace(latest, diverged_seq=seq)


def _fold_usage(state: ApiContextState, event: RecordedEvent, usage: UsageRecorded) -> None:
    state.usage_total = usage.total_tokens
    state.usage_api_id = usage.api_message_id
    state.tokens_since_usage = 0
    state.blocks_since_usage = 0
    state.removed_tokens_at_usage = state.removed_tokens
    state.removed_blocks_at_usage = state.removed_blocks


def _fold_context(state: ApiContextState, event: RecordedEvent, configured: ContextConfigured) -> None:
    tokens = event.token_count or 0
    state.tokens_since_usage += tokens - state.context_tokens
    state.system = configured.system
    state.tools = list(configured.tools)
    state.context_tokens = tokens


def _fold_start(state: ApiContextState, event: RecordedEvent, started: SessionStarted) -> None:
    state.model = started.model
    state.context_window = started.context_window
    state.max_output_tokens = started.max_output_tokens
    state.query_source = started.query_source


def _fold_persisted(state: ApiContextState, event: RecordedEvent, edit: ToolResultPersisted) -> None:
    ids = _replace_results(state, event.event_id, {edit.tool_use_id: edit.preview})
    freed = edit.tokens_freed if ids else 0
    _record_edit(state, event.event_id, ResultsEdit(type=edit.type, tokens=freed, blocks=0, ids=ids))


def _fold_microcompact(state: ApiContextState, event: RecordedEvent, edit: MicrocompactApplied) -> None:
    cleared: dict[str, object] = dict.fromkeys(edit.cleared_tool_use_ids, CLEARED_PLACEHOLDER)
    ids = _replace_results(state, event.event_id, cleared)
    freed = edit.tokens_freed if ids else 0
    _record_edit(state, event.event_id, ResultsEdit(type=edit.type, tokens=freed, blocks=0, ids=ids))


def _view_at(state: ApiContextState, seq: int) -> ViewAtChange:
    """The view as the change at ``seq`` finds it (see ``ViewAtChange``)."""
    first = state.first_visible
    collapses = [(key, e) for key, e in state.edits.items() if isinstance(e, CollapseEdit)]
    compact = state.compact
    return ViewAtChange(
        seq=seq,
        first_seq=state.message_first_seq[first] if first < len(state.messages) else None,
        collapse_event_ids=tuple(key for key, _ in collapses),
        collapse_first_seqs=tuple(e.first_seq for _, e in collapses),
        collapse_end_seqs=tuple(e.end_seq for _, e in collapses),
        compact_seq=compact.seq if compact is not None else 0,
        compact_from_seq=compact.from_seq if compact is not None else 0,
    )


def _fold_snip(state: ApiContextState, event: RecordedEvent, edit: SnipApplied) -> None:
    state.views_at_changes.append(_view_at(state, event.seq))
    stop = _index_of_seq(state, edit.keep_from_seq)
    span = state.messages[state.first_visible : stop]
    blocks = sum(len(m["content"]) for m in span) - _collapsed_blocks(state, state.first_visible, stop)
    snipped = SnipEdit(tokens=edit.tokens_freed, blocks=max(0, blocks), keep_from_seq=edit.keep_from_seq)
    _record_edit(state, event.event_id, snipped)
    state.snip_keep_from = max(state.snip_keep_from, edit.keep_from_seq)


def _fold_collapse_staged(state: ApiContextState, event: RecordedEvent, edit: CollapseStaged) -> None:
    state.staged[event.event_id] = StagedCollapse(
        first_seq=edit.first_seq,
        end_seq=edit.end_seq,
        summary=edit.summary,
        summary_tokens=edit.summary_tokens,
        tokens_covered=edit.tokens_covered,
    )


def _fold_collapse_committed(state: ApiContextState, event: RecordedEvent, edit: CollapseCommitted) -> None:
    staged = state.staged.pop(edit.staged_event_id, None)
    if staged is None:
        return
    span = collapse_span(state, _index_of_seq(state, staged.first_seq), _index_of_seq(state, staged.end_seq))
    collapsed = CollapseEdit(
        tokens=edit.tokens_freed,
        blocks=max(0, sum(len(m["content"]) for m in span) - 1),
        staged_event_id=edit.staged_event_id,
        first_seq=staged.first_seq,
        end_seq=staged.end_seq,
        summary=staged.summary,
    )
    _record_edit(state, event.event_id, collapsed)


def _fold_revert(state: ApiContextState, event: RecordedEvent, edit: ContextEditReverted) -> None:
    if state.compact is not None and edit.target_event_id == state.compact.event_id:
        _revert_compaction(state, event.event_id)
    else:
        _revert(state, edit.target_event_id, event.event_id)


def _revert_compaction(state: ApiContextState, reverted_by: str) -> None:
    """The latest boundary goes: the one it superseded shapes the request, the cursor it reset is back.

    The messages never left the view, so nothing is re-added. Without a divergence (refused
    before a revert is written) nothing appended since depended on the cursor beyond what is
    restored here: calls the boundary closed are open again (no result or round came since),
    the round it ended is current again if no assistant message came since.
    """
    record = state.compact
    assert record is not None
    previous = state.compaction_before_latest
    if state.usage_total is None:  # no usage measured the compacted request
        state.usage_total = record.usage_at
    else:  # the latest usage measured it: what comes back counts as added after that usage
        state.tokens_since_usage += state.view_tokens_under(previous) - state.view_tokens_under(record)
        state.blocks_since_usage += state.visible_blocks_under(previous) - state.visible_blocks_under(record)
    state.compact = state.earlier_compactions.pop() if state.earlier_compactions else None
    state.reverted[record.event_id] = reverted_by
    state.compact_failures += record.failures_at
    if not record.cleared:
        return
    state.merge_floor = record.merge_floor_at
    state.open_tool_ids = [*record.open_at, *state.open_tool_ids]
    if state.last_assistant_index < 0:
        state.last_assistant_index = record.last_assistant_index_at
        state.last_assistant_api_id = record.last_assistant_api_id_at


def _fold_boundary(state: ApiContextState, event: RecordedEvent, edit: CompactBoundary) -> None:
    before = _view_at(state, event.seq)
    if state.compact is not None:
        state.earlier_compactions.append(state.compact)
    cleared = not edit.keep_from_seq or bool(edit.summarized_from_seq)
    state.compact = CompactionRecord(
        seq=event.seq,
        event_id=event.event_id,
        keep_from_seq=edit.keep_from_seq,
        from_seq=edit.summarized_from_seq,
        summary=edit.summary,
        verbatim=edit.summarizer in _VERBATIM_SUMMARIZERS,
        attachments=tuple(str(a.get("text", "")) for a in edit.attachments),
        hook_results=tuple(edit.hook_results),
        base_tokens=edit.post_compact_raw_tokens,
        base_blocks=edit.post_compact_blocks,
        messages_total_at=state.message_tokens_total,
        removed_at=state.removed_tokens,
        removed_blocks_at=state.removed_blocks,
        blocks_at=state.view_blocks,
        cleared=cleared,
        messages_at=len(state.messages),
        merge_floor_at=state.merge_floor,
        open_at=tuple(state.open_tool_ids),
        last_assistant_index_at=state.last_assistant_index,
        last_assistant_api_id_at=state.last_assistant_api_id,
        usage_at=state.usage_total,
        failures_at=state.compact_failures,
    )
    if cleared:
        # Calls still open were summarized away with everything else: no result can follow them.
        state.open_tool_ids = []
        state.last_assistant_index = -1
        state.last_assistant_api_id = None
        state.merge_floor = len(state.messages)
    if state.prepared is not None and state.prepared.event_id == edit.prepared_event_id:
        state.prepared = None  # committed: spent (a revert of this boundary does not bring it back)
    # The last usage measured the context before the boundary: estimate afresh until the next.
    state.usage_total = None
    state.compact_failures = 0
    state.views_at_changes.append(
        dataclasses.replace(before, tokens_after=state.view_tokens, blocks_after=state.visible_blocks)
    )


def _fold_compaction_prepared(
    state: ApiContextState, event: RecordedEvent, prepared: CompactionPrepared
) -> None:
    state.prepared = PreparedCompaction(
        event_id=event.event_id,
        seq=event.seq,
        summary=prepared.summary,
        summarizer=prepared.summarizer,
        through_seq=prepared.through_seq,
        covered_tokens=prepared.covered_tokens,
        base_compaction_event_id=prepared.base_compaction_event_id,
        tokens_at_preparation=prepared.tokens_at_preparation,
        custom_instructions=prepared.custom_instructions,
        hook_messages=tuple(prepared.hook_messages),
        ptl_retries=prepared.ptl_retries,
        ptl_dropped_before_seq=prepared.ptl_dropped_before_seq,
    )


def _fold_preparation_discarded(
    state: ApiContextState, event: RecordedEvent, discarded: CompactionPreparationDiscarded
) -> None:
    if state.prepared is not None and state.prepared.event_id == discarded.prepared_event_id:
        state.prepared = None


def _fold_listing(state: ApiContextState, event: RecordedEvent, delta: ListingDelta) -> None:
    if not delta.shown:
        return
    if delta.compaction_event_id is None:
        _fold_message(
            state, event, MessageAppended(role="user", content=[{"type": "text", "text": delta.text}])
        )
    else:
        _announce_after_compaction(state, event, delta.compaction_event_id, delta.text)


def _fold_subagent_restored(
    state: ApiContextState, event: RecordedEvent, restored: SubagentStatusRestored
) -> None:
    _announce_after_compaction(state, event, restored.compaction_event_id, restored.text)


def _announce_after_compaction(
    state: ApiContextState, event: RecordedEvent, compaction: str, text: str
) -> None:
    """``text`` joins what the latest compaction puts back, when it names that compaction."""
    record = state.compact
    if record is None or record.event_id != compaction or not text.strip():
        return  # a compaction reverted or superseded since: nothing of it is shown
    tokens = event.token_count or 0
    state.compact = dataclasses.replace(
        record,
        announcements=(*record.announcements, text),
        base_tokens=record.base_tokens + tokens,
        base_blocks=record.base_blocks + 1,
    )
    if state.usage_total is not None:  # a usage measured the compacted request without it
        state.tokens_since_usage += tokens
        state.blocks_since_usage += 1


def _fold_compact_failed(state: ApiContextState, event: RecordedEvent, failed: CompactFailed) -> None:
    if failed.trigger == "auto":
        state.compact_failures += 1


def _fold_skill(state: ApiContextState, event: RecordedEvent, skill: SkillInvoked) -> None:
    state.skills.pop(skill.name, None)
    state.skills[skill.name] = skill.content


def _fold_plan(state: ApiContextState, event: RecordedEvent, plan: PlanUpdated) -> None:
    state.plan = plan.plan


def _fold_memory(state: ApiContextState, event: RecordedEvent, memory: SessionMemoryUpdated) -> None:
    state.memory = MemoryRecord(
        text=memory.memory,
        last_summarized_seq=memory.last_summarized_seq,
        tokens_at_extraction=memory.tokens_at_extraction,
        tool_calls_at_extraction=memory.tool_calls_at_extraction,
    )


def _fold_served(state: ApiContextState, event: RecordedEvent, served: ContextServed) -> None:
    for tool_use_id in served.unreplaced_tool_results:
        index = state.fresh_results.pop(tool_use_id, None)
        state.frozen_results[tool_use_id] = index if index is not None else -1


#: Each event type the view folds, and how. Types not listed do not change what the model sees.
#: Handlers take the decoded event of exactly their type (``apply`` looks the type up).
_FOLDS: dict[type[Event], Callable[[ApiContextState, RecordedEvent, Any], None]] = {
    MessageAppended: _fold_message,
    UsageRecorded: _fold_usage,
    ContextConfigured: _fold_context,
    SessionStarted: _fold_start,
    ToolResultPersisted: _fold_persisted,
    MicrocompactApplied: _fold_microcompact,
    SnipApplied: _fold_snip,
    CollapseStaged: _fold_collapse_staged,
    CollapseCommitted: _fold_collapse_committed,
    ContextEditReverted: _fold_revert,
    CompactBoundary: _fold_boundary,
    CompactFailed: _fold_compact_failed,
    CompactionPrepared: _fold_compaction_prepared,
    CompactionPreparationDiscarded: _fold_preparation_discarded,
    SkillInvoked: _fold_skill,
    PlanUpdated: _fold_plan,
    SessionMemoryUpdated: _fold_memory,
    ContextServed: _fold_served,
    ListingDelta: _fold_listing,
    SubagentStatusRestored: _fold_subagent_restored,
}


def _index_of_seq(state: ApiContextState, seq: int) -> int:
    return bisect.bisect_left(state.message_first_seq, seq)


def _collapsed_blocks(state: ApiContextState, start: int, stop: int) -> int:
    """Blocks that committed collapses within messages ``start``..``stop - 1`` already removed."""
    return sum(
        edit.blocks
        for edit in state.edits.values()
        if isinstance(edit, CollapseEdit)
        and start <= _index_of_seq(state, edit.first_seq)
        and _index_of_seq(state, edit.end_seq) <= stop
    )


# --- the projection ------------------------------------------------------------------------


@register_projection
class ApiContextProjection(Projection[ApiContextState]):
    """Folds a session's events into the normalized request state."""

    name: ClassVar[str] = "api_context"
    #: 2: snapshots keep each message's JSON (MessageList) instead of one JSON document.
    #: 3: edits, replacements, collapses, the compaction and the memory are typed records.
    #: 4: compaction records keep the cursor they reset, and the boundaries the latest superseded.
    #: 5: the compaction summary prepared ahead (``prepared``), the listings and sub-agents a
    #:    compaction tells again (``CompactionRecord.announcements``, listing and sub-agent state).
    #: 6: the view as each boundary and snip found it (``views_at_changes``), for the audit.
    #: 7: a result's token share is taken from the result the view keeps (a message answering
    #:    one call twice gave the kept result the dropped one's share).
    version: ClassVar[int] = 7

    def initial(self) -> ApiContextState:
        """An empty conversation."""
        return ApiContextState()

    def apply(self, state: ApiContextState, event: RecordedEvent) -> ApiContextState:
        """Add one event's effect on what the model sees."""
        fold = _FOLDS.get(type(event.event))
        if fold is not None:
            fold(state, event, event.event)
        return state

    def dump(self, state: ApiContextState) -> bytes:
        """The state: one line of JSON with every field but the messages, then the messages.

        The messages are their canonical JSON joined by commas (the body of the request's
        messages array), so a resume can send them without parsing them; the header holds
        where each one starts, the total size and a CRC-32 of both that ``load`` checks.
        """
        header = {f.name: _field_json(getattr(state, f.name)) for f in fields(state) if f.name != "messages"}
        pieces, starts = state.messages.joined_json()
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        size = sum(len(piece) for piece in pieces)
        header["messages"] = {"starts": starts, "bytes": size, "crc32": _layout_crc(crc, starts)}
        # JSON escapes every control character, so the header holds no newline of its own.
        return b"".join([canonical_json(header), b"\n", *pieces])

    def load(self, data: bytes) -> ApiContextState:
        """A state from ``dump``'s bytes (raises on a damaged snapshot or unknown or missing keys)."""
        newline = data.find(b"\n")
        if newline < 0:
            msg = "api_context snapshot has no header line"
            raise ValueError(msg)
        header = json.loads(data[:newline])
        if not isinstance(header, dict) or not isinstance(header.get("messages"), dict):
            msg = "api_context snapshot header is not a JSON object with messages"
            raise TypeError(msg)
        layout = header.pop("messages")
        joined = memoryview(data)[newline + 1 :]
        if (
            len(joined) != layout["bytes"]
            or _layout_crc(zlib.crc32(joined), layout["starts"]) != layout["crc32"]
        ):
            written = layout["bytes"]
            msg = f"api_context snapshot messages are damaged ({len(joined)} bytes, {written} written)"
            raise ValueError(msg)
        messages = MessageList.from_joined_json(joined, layout["starts"])
        state = ApiContextState(messages=messages, **_records_from_json(header))
        if not len(messages) == len(state.message_tokens) == len(state.message_first_seq):
            msg = f"api_context snapshot has {len(messages)} messages but {len(state.message_tokens)} counts"
            raise ValueError(msg)
        return state


def _field_json(value: Any) -> Any:
    """A state field as JSON: records (alone or as a dict's values) become their ``to_json`` dicts."""
    if isinstance(value, StateRecord):
        return value.to_json()
    if isinstance(value, dict) and value and isinstance(next(iter(value.values())), StateRecord):
        return {key: record.to_json() for key, record in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], StateRecord):
        return [record.to_json() for record in value]
    return value


#: State fields holding a dict of records of one type.
_RECORD_DICTS: dict[str, type[StateRecord]] = {
    "replaced": ResultReplacement,
    "pending": PendingReplacement,
    "staged": StagedCollapse,
}


def _records_from_json(header: dict[str, Any]) -> dict[str, Any]:
    """The snapshot header's fields with each record field read back into its record type."""
    fields_ = dict(header)
    for name, kind in _RECORD_DICTS.items():
        fields_[name] = {key: kind.from_json(data) for key, data in header[name].items()}
    fields_["edits"] = {key: edit_from_json(data) for key, data in header["edits"].items()}
    fields_["compact"] = record_from_json(CompactionRecord, header["compact"])
    fields_["earlier_compactions"] = [
        CompactionRecord.from_json(data) for data in header["earlier_compactions"]
    ]
    fields_["memory"] = record_from_json(MemoryRecord, header["memory"])
    fields_["prepared"] = record_from_json(PreparedCompaction, header["prepared"])
    fields_["views_at_changes"] = [ViewAtChange.from_json(data) for data in header["views_at_changes"]]
    return fields_


def _layout_crc(messages_crc: int, starts: list[int]) -> int:
    """The CRC-32 of the messages' bytes continued over their offsets: a wrong offset would cut a
    message inside a string that happens to hold ``},{`` and fail only when that message is read."""
    return zlib.crc32(canonical_json(starts), messages_crc)


# --- the request -----------------------------------------------------------------------------


def _cached_block(block: Block) -> Block:
    return {**block, "cache_control": dict(_CACHE_CONTROL)}


#: One message of a request being built: an index into ``state.messages`` (that message as it
#: is, so its kept JSON can be reused) or a message made for this request.
Part = int | Message


def _message(state: ApiContextState, part: Part) -> Message:
    return state.messages[part] if isinstance(part, int) else part


def _role(state: ApiContextState, part: Part) -> str:
    return state.messages.role(part) if isinstance(part, int) else str(part["role"])


def _cache_last_message(state: ApiContextState, parts: list[Part]) -> None:
    """Put a breakpoint on the last cacheable block of the last message (copying, never mutating)."""
    last = _message(state, parts[-1])
    content = list(last["content"])
    for i in range(len(content) - 1, -1, -1):
        if content[i].get("type") not in _NOT_CACHEABLE:
            content[i] = _cached_block(content[i])
            parts[-1] = {"role": last["role"], "content": content}
            return


def committed_spans(state: ApiContextState) -> list[tuple[int, int, str]]:
    """(first index, end index, summary) of every committed collapse, by position."""
    spans = [
        (_index_of_seq(state, e.first_seq), _index_of_seq(state, e.end_seq), e.summary)
        for e in state.edits.values()
        if isinstance(e, CollapseEdit)
    ]
    return sorted(spans)


def _results_opening(state: ApiContextState, index: int) -> list[Block]:
    """The tool_result blocks opening user message ``index``: answers to the calls just before it."""
    message = state.messages[index]
    if message["role"] != "user":
        return []
    return list(message["content"][: leading_results(message["content"])])


def _without_opening_results(state: ApiContextState, index: int) -> Part:
    """Message ``index`` without the results opening it (their calls were collapsed)."""
    if not _results_opening(state, index):
        return index
    content = state.messages[index]["content"]
    return {"role": "user", "content": content[leading_results(content) :]}


def collapse_span(state: ApiContextState, start: int, end: int) -> list[Message]:
    """The messages a collapse of ``start``..``end - 1`` takes out of the request, as the model saw them.

    A span starts at a prompt, which may share its API message with the results of the calls
    before it: those results stay (their calls precede the span). It ends before a prompt,
    which may open with the results of the span's last calls: those go with the span. So the
    span is whole: every call in it has its result, and it holds no result of a call outside it.
    """
    head = state.messages[start]
    messages = [{"role": head["role"], "content": head["content"][len(_results_opening(state, start)) :]}]
    messages.extend(state.messages[start + 1 : end])
    answers = _results_opening(state, end) if end < len(state.messages) else []
    if answers:
        messages.append({"role": "user", "content": answers})
    return messages


def collapse_span_tokens(state: ApiContextState, start: int, end: int) -> int:
    """Raw tokens of ``collapse_span(state, start, end)``, from the stored counts."""
    kept = _results_opening(state, start)
    taken = _results_opening(state, end) if end < len(state.messages) else []
    return (
        sum(state.message_tokens[start:end])
        - sum(state.result_tokens.get(str(b["tool_use_id"]), 0) for b in kept)
        + sum(state.result_tokens.get(str(b["tool_use_id"]), 0) for b in taken)
    )


def freed_per_message(state: ApiContextState) -> tuple[dict[int, float], dict[int, int]]:
    """Tokens and blocks the active edits freed, per message index (a later cut must not free them twice).

    A replacement frees tokens in the message holding its result. A committed collapse freed
    its span's tokens and all blocks but its summary; nothing cuts inside a committed span, so
    what it freed counts at the span's first message.
    """
    tokens: dict[int, float] = {}
    blocks: dict[int, int] = {}
    for edit in state.edits.values():
        if isinstance(edit, CollapseEdit):
            first = bisect.bisect_left(state.message_first_seq, edit.first_seq)
            tokens[first] = tokens.get(first, 0.0) + edit.tokens
            blocks[first] = blocks.get(first, 0) + edit.blocks
        elif isinstance(edit, ResultsEdit):
            for tool_use_id in edit.ids:
                index = state.result_index.get(tool_use_id)
                if index is not None:
                    tokens[index] = tokens.get(index, 0.0) + edit.tokens / len(edit.ids)
    return tokens, blocks


def view_size(state: ApiContextState, start: int, end: int) -> tuple[int, int]:
    """Raw tokens and content blocks of messages ``start``..``end - 1`` as the view holds them:
    less what persisted results, clears and committed collapses freed."""
    freed_tokens, freed_blocks = freed_per_message(state)
    span = range(start, end)
    tokens = sum(state.message_tokens[i] - freed_tokens.get(i, 0.0) for i in span)
    blocks = sum(len(state.messages[i]["content"]) - freed_blocks.get(i, 0) for i in span)
    return max(0, round(tokens)), blocks


def _with_collapses(state: ApiContextState, first: int) -> tuple[list[Part], list[int]]:
    """The visible messages with each committed collapse's span replaced by its summary, and
    for each part the index of the first message it holds (where compaction parts go).

    A summary is a user message holding the results that open the span (answers to calls before
    it), then the summary text; the prompt after the span, without the results that open it
    (answers to calls inside the span), merges into it, so roles still alternate.
    """
    count = len(state.messages)
    spans = [span for span in committed_spans(state) if span[0] >= first]
    if not spans:
        return list(range(first, count)), list(range(first, count))
    out: list[Part] = []
    starts: list[int] = []
    position = first
    after_span = False  # the results opening messages[position] answer calls in a collapsed span
    for start, end, summary in spans:
        if start < position or end >= count:
            continue  # overlapping or reaching the tail: refused when staged; never applied
        kept = [] if after_span and start == position else _results_opening(state, start)
        out.extend(_visible_stretch(state, position, start, after_span))
        starts.extend(range(position, start))
        out.append({"role": "user", "content": [*kept, {"type": "text", "text": COLLAPSE_PREFIX + summary}]})
        starts.append(start)
        position, after_span = end, True
    out.extend(_visible_stretch(state, position, count, after_span))
    starts.extend(range(position, count))
    return _merged(state, out, starts)


def _visible_stretch(state: ApiContextState, start: int, stop: int, after_span: bool) -> list[Part]:
    """Messages ``start``..``stop - 1``; the first without its opening results when a span precedes it."""
    parts: list[Part] = list(range(start, stop))
    if parts and after_span:
        parts[0] = _without_opening_results(state, start)
    return parts


def _merged(state: ApiContextState, parts: list[Part], starts: list[int]) -> tuple[list[Part], list[int]]:
    """Adjacent parts of one role merged into one; each keeps the start of its first part."""
    merged: list[Part] = []
    merged_starts: list[int] = []
    for part, start in zip(parts, starts, strict=True):
        if merged and _role(state, merged[-1]) == _role(state, part):
            previous, message = _message(state, merged[-1]), _message(state, part)
            merged[-1] = {"role": message["role"], "content": [*previous["content"], *message["content"]]}
        else:
            merged.append(part)
            merged_starts.append(start)
    return merged, merged_starts


def _merge_same_role(state: ApiContextState, parts: list[Part]) -> list[Part]:
    return _merged(state, parts, [0] * len(parts))[0]


def _with_compaction(state: ApiContextState, parts: list[Part], starts: list[int]) -> list[Part]:
    """Summary first, then the kept messages, then attachments and hook results, then what followed.

    ``starts`` holds the first message index of each part: a committed collapse makes one part
    of many messages, so message indexes are mapped to part positions through it.
    """
    compact = state.compact
    assert compact is not None
    summary_text = compact.summary if compact.verbatim else COMPACT_SUMMARY_PREFIX + compact.summary
    # A summary that was lost (a transcript cut between a boundary and its summary line) is no
    # block at all: the API refuses an empty text block.
    summary: list[Part] = (
        [{"role": "user", "content": [{"type": "text", "text": summary_text}]}]
        if summary_text.strip()
        else []
    )
    kept = bisect.bisect_left(starts, bisect.bisect_left(state.message_first_seq, compact.seq + 1))
    restored = [*compact.attachments, *compact.announcements, *compact.hook_results]
    extra = [{"type": "text", "text": text} for text in restored if text]
    middle: list[Part] = [{"role": "user", "content": extra}] if extra else []
    if compact.from_seq:
        # Partial "from": the earlier messages stay first, the summary covers the rest.
        pivot = bisect.bisect_left(starts, bisect.bisect_left(state.message_first_seq, compact.from_seq))
        return _merge_same_role(state, [*parts[:pivot], *summary, *middle, *parts[kept:]])
    return _merge_same_role(state, [*summary, *parts[:kept], *middle, *parts[kept:]])


def _request_parts(state: ApiContextState, cache_control: bool) -> tuple[dict[str, Any], list[Part]]:
    """The request's keys before ``messages`` (system, tools), and its messages as parts."""
    first = state.first_visible
    parts, starts = _with_collapses(state, first)
    if first and parts and _role(state, parts[0]) == "user":
        # A snip cut here: the results opening this message answer calls that were snipped.
        content = _message(state, parts[0])["content"]
        parts[0] = {"role": "user", "content": content[leading_results(content) :]}
    if state.compact is not None:
        parts = _with_compaction(state, parts, starts)
    if state.open_tool_ids:
        results = [_interrupted(tool_id) for tool_id in state.open_tool_ids]
        if parts and _role(state, parts[-1]) == "user":
            parts[-1] = _with_results_first(_message(state, parts[-1]), results)
        else:
            parts.append({"role": "user", "content": results})
    if parts and _role(state, parts[0]) == "assistant":
        parts.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_MARKER}]})
    head: dict[str, Any] = {}
    if state.system:
        system: str | list[Block] = state.system
        if cache_control:
            blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
            blocks[-1] = _cached_block(blocks[-1])
            system = blocks
        head["system"] = system
    if state.tools:
        tools = list(state.tools)
        if cache_control:
            tools[-1] = _cached_block(tools[-1])
        head["tools"] = tools
    if cache_control and parts:
        _cache_last_message(state, parts)
    return head, parts


def materialize(state: ApiContextState, *, cache_control: bool = False) -> dict[str, Any]:
    """The request (``system``, ``tools``, ``messages``) for the state, without model or max_tokens.

    The result shares unchanged blocks with the state: treat it as read-only.

    Args:
        cache_control: add prompt-cache breakpoints on the system prompt, the last tool and
            the last message's last cacheable block (three of the API's four).
    """
    head, parts = _request_parts(state, cache_control)
    messages: list[Message] = []
    for stretch in _stretches(parts):
        if isinstance(stretch, range):
            messages.extend(state.messages[stretch.start : stretch.stop])
        else:
            messages.append(stretch)
    return {**head, "messages": messages}


def _stretches(parts: list[Part]) -> Iterator[range | Message]:
    """The parts as runs: each stretch of consecutive state messages as one range, made ones alone.

    A turn's request is nearly all one stretch, so its messages are copied (or their JSON
    joined) a stretch at a time rather than looked up one by one.
    """
    made = [at for at, part in enumerate(parts) if type(part) is not int]
    position = 0
    for stop in [*made, len(parts)]:
        indices = [part for part in parts[position:stop] if isinstance(part, int)]
        if indices and indices == list(range(indices[0], indices[-1] + 1)):
            yield range(indices[0], indices[-1] + 1)
        else:  # not produced by _request_parts (the view keeps its order); correct all the same
            yield from (range(index, index + 1) for index in indices)
        if stop < len(parts):
            made_message = parts[stop]
            assert not isinstance(made_message, int)
            yield made_message
        position = stop + 1


def encode_request(state: ApiContextState, *, cache_control: bool = False) -> bytes:
    """``request_bytes(materialize(state))``, joined from each message's kept JSON.

    Only messages made for this request (summaries, repairs, breakpoints) are serialized; a
    message of the state is serialized once, when first sent, and never parsed to be sent.
    """
    head, parts = _request_parts(state, cache_control)
    pieces: list[bytes | memoryview] = []
    for stretch in _stretches(parts):
        if pieces:
            pieces.append(b",")
        if isinstance(stretch, range):
            pieces.extend(state.messages.json_pieces(stretch.start, stretch.stop))
        else:
            pieces.append(canonical_json(stretch))
    prefix, suffix = _around_messages(head, {})
    return b"".join([prefix, *pieces, suffix])


def _around_messages(before: dict[str, Any], after: dict[str, Any]) -> tuple[bytes, bytes]:
    """A request's canonical bytes up to its first message, and from the end of its last one.

    ``before`` and ``after`` are the request's keys before and after ``messages``.
    """
    prefix = (canonical_json(before)[:-1] + b"," if before else b"{") + b'"messages":['
    suffix = b"]" + (b"," + canonical_json(after)[1:] if after else b"}")
    return prefix, suffix


class IncrementalFingerprint:
    """SHA-256 of a request's canonical bytes, reusing the hash state of unchanged messages.

    The canonical bytes of ``{..., "messages": [m1, m2, ...], ...}`` are the keys before
    ``messages``, then each message's JSON joined by commas, then the keys after — exactly
    ``request_bytes``. The state after each message is kept while the message objects stay
    the same (the view never edits a message in place).
    """

    def __init__(self) -> None:
        self._prefix: bytes | None = None
        self._after: list[tuple[Message, Any]] = []

    def digest(self, request: dict[str, Any]) -> str:
        """The hex digest of ``request_bytes(request)``."""
        keys = list(request)
        at = keys.index("messages") if "messages" in keys else len(keys)
        before = {k: request[k] for k in keys[:at]}
        after = {k: request[k] for k in keys[at + 1 :]}
        prefix_bytes, suffix = _around_messages(before, after)
        if prefix_bytes != self._prefix:
            self._prefix, self._after = prefix_bytes, []
        messages = request.get("messages", [])
        same = 0
        while same < min(len(messages), len(self._after)) and self._after[same][0] is messages[same]:
            same += 1
        del self._after[same:]
        state = self._after[-1][1].copy() if self._after else hashlib.sha256(prefix_bytes)
        for index in range(same, len(messages)):
            state.update((b"," if index else b"") + canonical_json(messages[index]))
            self._after.append((messages[index], state.copy()))
        final = state.copy()
        final.update(suffix)
        return final.hexdigest()


def request_bytes(request: dict[str, Any]) -> bytes:
    """The canonical serialization of a request: the bytes compared for byte-stability."""
    return canonical_json(request)

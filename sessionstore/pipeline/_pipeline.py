"""The context-management pipeline, run before every model call, in SPEC section 5's fixed order.

    tool-result budget -> snip -> micro-compact -> (collapse) -> (auto-compact) -> blocking limit

Each stage reads the live session's projection, decides, and appends the events that record
what it did in one transaction (so the view changes only through the log, and every change can
be audited and reverted). Each stage is switchable and reports the tokens it freed. Collapse and
auto-compact slot in between micro-compact and the blocking limit when they exist; today the
pipeline runs the stages below and says so in ``STAGE_ORDER``.

``Pipeline.prepare(session)`` runs the stages, refuses a request still at the blocking limit
(``BlockingLimitError``), records ``ContextServed`` for the request it hands out, and returns it.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._paths import name_problem
from ..errors import SessionStoreError, ValidationError
from ..events._base import Event
from ..events._context import (
    REVERTIBLE_TYPES,
    ContextEditReverted,
    ContextServed,
    MicrocompactApplied,
    ServerEditsApplied,
    SnipApplied,
    ToolResultPersisted,
)
from ..projections._api_context import CLEARED_PLACEHOLDER, committed_spans, leading_results
from ..projections._session import Session
from ..projections._window import TokenState
from ._collapse import CollapseConfig, collapse_stage
from ._compaction import (
    CompactConfig,
    CompactReport,
    autocompact_stage,
    compact_session,
    maybe_extract_memory,
)
from ._summarizers import OfflineSummarizer, Summarizer

__all__ = [
    "COMPACTABLE_TOOLS",
    "COMPACTION_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "STAGE_ORDER",
    "BlockingLimitError",
    "BudgetConfig",
    "MicrocompactConfig",
    "Pipeline",
    "PipelineConfig",
    "PreparedRequest",
    "ServerCompactionConfig",
    "SnipConfig",
    "StageReport",
    "microcompact",
    "persisted_preview",
    "record_applied_edits",
    "revert",
    "snip",
]

#: The fixed order of SPEC section 5.
STAGE_ORDER = ("tool_result_budget", "snip", "microcompact", "collapse", "auto_compact", "blocking_limit")
#: Tools whose old results micro-compaction may clear (SPEC 5.3).
COMPACTABLE_TOOLS = frozenset(
    {"Read", "Bash", "PowerShell", "Grep", "Glob", "WebSearch", "WebFetch", "Edit", "Write"}
)
#: The beta that enables server-side context editing in the Messages API.
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
#: The beta that enables the Messages API's own compaction (``compact_20260112``).
COMPACTION_BETA = "compact-2026-01-12"


class BlockingLimitError(SessionStoreError):
    """The context is still at or above the blocking limit after every stage ran.

    Attributes:
        used: tokens in the context.
        limit: the blocking limit.
        tried: the stages that ran, with the tokens each freed.
    """

    def __init__(self, used: int, limit: int, tried: list[StageReport]) -> None:
        stages = ", ".join(f"{r.stage} freed {r.tokens_freed}" for r in tried) or "no stage ran"
        super().__init__(
            f"context is {used} tokens, at or above the blocking limit of {limit} ({stages}); "
            "compact the session or start a new one"
        )
        self.used = used
        self.limit = limit
        self.tried = tried


@dataclass(frozen=True)
class BudgetConfig:
    """Tool-result budget (SPEC 5.1).

    Args:
        per_result_chars: a result above ``min(tool maximum, this)`` characters is persisted.
        per_message_chars: results in one API-level user message may total at most this.
        preview_chars: length of the preview kept in the context (cut at a newline).
        tool_max_chars: per-tool maxima; Read's is infinite (re-reading a persisted file from
            a file is a pointless loop). Unlisted tools use ``per_result_chars``.
        materialize_root: also write ``<root>/<session>/tool-results/<tool_use_id>.txt``
            (exclusive create) for agents whose Read tool needs a path. A ``tool_use_id``
            that is not a plain file name (``../x``) gets no file: the blob alone holds it.
    """

    enabled: bool = True
    per_result_chars: int = 50_000
    per_message_chars: int = 200_000
    preview_chars: int = 2_000
    tool_max_chars: Mapping[str, float] = field(default_factory=lambda: {"Read": math.inf})
    materialize_root: Path | None = None

    def threshold(self, tool_name: str | None) -> float:
        """``min(tool maximum, per_result_chars)`` — infinite for tools never persisted."""
        tool_max = self.tool_max_chars.get(tool_name or "", self.per_result_chars)
        return math.inf if math.isinf(tool_max) else min(tool_max, self.per_result_chars)


@dataclass(frozen=True)
class SnipConfig:
    """Snip (SPEC 5.2): drop the oldest API rounds from the request.

    Off by default. When on, fires once "used" reaches ``trigger_percent`` of the effective
    window and removes the oldest rounds until it is at or below ``target_percent``, always
    keeping the newest ``keep_recent_rounds`` rounds.
    """

    enabled: bool = False
    trigger_percent: float = 85.0
    target_percent: float = 60.0
    keep_recent_rounds: int = 4


@dataclass(frozen=True)
class MicrocompactConfig:
    """Micro-compact (SPEC 5.3).

    Args:
        time_based: clear old results when the cache has surely expired.
        gap_minutes: minutes since the last main-thread assistant message that count as
            expired (the server's prompt-cache TTL). NaN or infinite never fires.
        keep_recent: results kept, newest first; at least 1 even if 0 is given.
        compactable_tools: tools whose results may be cleared.
        server_side: when the cache is warm, ask the API to clear old tool uses itself
            (``context_management`` with ``clear_tool_uses_20250919``).
        server_trigger_tokens / server_clear_at_least / server_exclude_tools: its parameters.
    """

    time_based: bool = True
    gap_minutes: float = 60.0
    keep_recent: int = 5
    compactable_tools: frozenset[str] = COMPACTABLE_TOOLS
    server_side: bool = False
    server_trigger_tokens: int = 100_000
    server_clear_at_least: int = 10_000
    server_exclude_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerCompactionConfig:
    """The Messages API's own compaction (``compact_20260112``), opt-in.

    When on, every request asks the server to compact once its input passes
    ``trigger_tokens``; the response then opens with a ``compaction`` block, recorded verbatim
    with the message, and the API view sends it in place of everything before it.
    """

    enabled: bool = False
    trigger_tokens: int = 150_000
    instructions: str | None = None
    pause_after_compaction: bool = False


@dataclass(frozen=True)
class PipelineConfig:
    """Switches and parameters of every stage."""

    budget: BudgetConfig = field(default_factory=BudgetConfig)
    snip: SnipConfig = field(default_factory=SnipConfig)
    microcompact: MicrocompactConfig = field(default_factory=MicrocompactConfig)
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    #: Auto-compact runs unless disabled here or by the window's switches (WindowConfig).
    auto_compact: bool = True
    compact: CompactConfig = field(default_factory=CompactConfig)
    server_compaction: ServerCompactionConfig = field(default_factory=ServerCompactionConfig)
    blocking_limit: bool = True


@dataclass(frozen=True)
class StageReport:
    """What one stage did: the events it appended and the (raw) tokens it freed."""

    stage: str
    tokens_freed: int = 0
    event_ids: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready for ``client.messages.create(model=..., max_tokens=..., **request)``.

    ``beta`` is True when the request carries ``context_management`` and must go through
    ``client.beta.messages.create(betas=[CONTEXT_MANAGEMENT_BETA], ...)``.
    """

    request: dict[str, Any]
    tokens: TokenState
    reports: tuple[StageReport, ...]
    served_event_id: str
    beta: bool = False
    #: The beta headers the request needs (``client.beta.messages.create(betas=...)``).
    betas: tuple[str, ...] = ()


# --- helpers shared by the stages ------------------------------------------------------------


def _result_text(block: Mapping[str, Any]) -> str | None:
    """The text of a tool_result's content, or None when it holds images or other media."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            return None
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)


def _chars(block: Mapping[str, Any]) -> int:
    content = block.get("content", "")
    if isinstance(content, str):
        return len(content)
    return len(json.dumps(content, ensure_ascii=False))


def _result_tokens(session: Session, tool_use_id: str, text: str) -> int:
    """Raw tokens of a result: the count stored at append when there is one, else counted now."""
    known = session.api_state.result_tokens.get(tool_use_id)
    return known if known else session.count_text(text)


def persisted_preview(text: str, location: str, preview_chars: int = 2_000) -> str:
    """The string that replaces a persisted result: a preview cut at a newline, and where the rest is.

    The preview holds at most ``preview_chars`` characters of ``text``, cut after the last
    newline in that prefix when there is one in its second half (so lines stay whole).
    """
    head = text[:preview_chars]
    if len(text) > preview_chars:
        cut = head.rfind("\n")
        if cut >= preview_chars // 2:
            head = head[: cut + 1]
    size = len(text.encode())
    shown = f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"
    more = "" if len(head) == len(text) else "...\n"
    return (
        f"<persisted-output>\nOutput too large ({shown}). Full output saved to: {location}\n\n"
        f"Preview (first {len(head)} characters):\n{head}{'' if head.endswith(chr(10)) else chr(10)}{more}"
        "</persisted-output>"
    )


def _materialize(root: Path, session_id: str, tool_use_id: str, data: bytes) -> Path:
    """Write the full output once (O_EXCL): a replay finds the file and leaves it as it is."""
    folder = root / session_id / "tool-results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{tool_use_id}.txt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _result_block(session: Session, tool_use_id: str) -> Mapping[str, Any]:
    state = session.api_state
    index = state.result_index.get(tool_use_id)
    if index is None:
        msg = f"tool_use_id {tool_use_id!r} has no result in session {session.id!r}"
        raise ValidationError(msg, field="tool_use_id")
    for block in state.messages[index]["content"]:
        if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
            return block  # type: ignore[no-any-return]
    raise AssertionError(tool_use_id)  # pragma: no cover - result_index points at its message


# --- stage 1: tool-result budget --------------------------------------------------------------


def _persist(
    session: Session, config: BudgetConfig, tool_use_id: str, text: str, reason: str
) -> ToolResultPersisted:
    data = text.encode()
    blob = session.store.put_blob(data)
    location = f"sessionstore blob {blob.sha256}"
    # The id is whatever the log holds: only a plain file name may become a path under the root.
    if config.materialize_root is not None and name_problem(f"{tool_use_id}.txt") is None:
        location = str(_materialize(config.materialize_root, session.id, tool_use_id, data))
    preview = persisted_preview(text, location, config.preview_chars)
    return ToolResultPersisted(
        tool_use_id=tool_use_id,
        tool_name=session.api_state.tool_names.get(tool_use_id),
        blob_sha256=blob.sha256,
        original_chars=len(text),
        preview=preview,
        reason=reason,  # type: ignore[arg-type]
        location=location,
        tokens_freed=max(0, _result_tokens(session, tool_use_id, text) - session.count_text(preview)),
    )


def budget_stage(session: Session, config: BudgetConfig) -> list[ToolResultPersisted]:
    """Decide which fresh results to persist (SPEC 5.1). Appends nothing itself."""
    state = session.api_state
    by_message: dict[int, list[str]] = {}
    for tool_use_id, index in state.fresh_results.items():
        if index >= state.first_visible:
            by_message.setdefault(index, []).append(tool_use_id)
    decided: list[ToolResultPersisted] = []
    for index, fresh_ids in sorted(by_message.items()):
        sizes = {
            b["tool_use_id"]: _chars(b)
            for b in state.messages[index]["content"]
            if b.get("type") == "tool_result"
        }
        candidates: dict[str, str] = {}
        for tool_use_id in fresh_ids:
            text = _result_text(_result_block(session, tool_use_id))
            if text is not None and not math.isinf(config.threshold(state.tool_names.get(tool_use_id))):
                candidates[tool_use_id] = text
        for tool_use_id, text in list(candidates.items()):
            if len(text) > config.threshold(state.tool_names.get(tool_use_id)):
                event = _persist(session, config, tool_use_id, text, "size")
                decided.append(event)
                sizes[tool_use_id] = len(event.preview)
                del candidates[tool_use_id]
        # Largest fresh results first until the message fits its aggregate budget.
        for tool_use_id, text in sorted(candidates.items(), key=lambda item: (-len(item[1]), item[0])):
            if sum(sizes.values()) <= config.per_message_chars:
                break
            event = _persist(session, config, tool_use_id, text, "aggregate")
            decided.append(event)
            sizes[tool_use_id] = len(event.preview)
    return decided


# --- stage 2: snip ---------------------------------------------------------------------------


def _round_boundaries(session: Session) -> list[tuple[int, int]]:
    """(message index, rounds before it) for every place a snip may cut.

    A cut lands on a user message that holds something besides tool results (a prompt); the
    results that open it answer calls in the snipped span, so the request drops them with the
    span and starts with the prompt. Never on the last message: results still arriving are
    merged into it. Never inside a committed collapse: the model sees its summary, not the
    prompts within it, and half a collapsed span cannot be shown again.
    """
    state = session.api_state
    collapsed = committed_spans(state)
    cuts = []
    rounds = 0
    start = state.first_visible
    for index in range(start, len(state.messages) - 1):
        message = state.messages[index]
        if message["role"] == "assistant":
            rounds += 1
        elif (
            index > start
            and rounds
            and leading_results(message["content"]) < len(message["content"])
            and not any(first < index < end for first, end, _ in collapsed)
        ):
            cuts.append((index, rounds))
    return cuts


def _already_freed(session: Session) -> tuple[dict[int, float], dict[int, int]]:
    """Tokens and blocks active edits already freed, per message index (a snip must not free them twice).

    A replacement frees tokens in the message holding its result. A committed collapse freed
    its span's tokens and all blocks but its summary; a snip never cuts inside a committed
    span, so what it freed counts at the span's first message.
    """
    state = session.api_state
    tokens: dict[int, float] = {}
    blocks: dict[int, int] = {}
    for edit in state.edits.values():
        if edit["type"] == "collapse_committed":
            first = bisect.bisect_left(state.message_first_seq, edit["first_seq"])
            tokens[first] = tokens.get(first, 0.0) + edit["tokens"]
            blocks[first] = blocks.get(first, 0) + edit["blocks"]
        elif edit["type"] != "snip_applied":
            for tool_use_id in edit["ids"]:
                index = state.result_index.get(tool_use_id)
                if index is not None:
                    tokens[index] = tokens.get(index, 0.0) + edit["tokens"] / len(edit["ids"])
    return tokens, blocks


def _cut_candidates(session: Session, cuts: list[tuple[int, int]]) -> Iterator[SnipApplied]:
    """A SnipApplied for each cut, oldest first, with running totals of what it frees."""
    state = session.api_state
    start = state.first_visible
    tokens_freed_before, blocks_freed_before = _already_freed(session)
    tokens = 0.0
    blocks = 0
    position = start
    for index, rounds in cuts:
        for message in range(position, index):
            tokens += state.message_tokens[message] - tokens_freed_before.get(message, 0.0)
            blocks += len(state.messages[message]["content"]) - blocks_freed_before.get(message, 0)
        position = index
        yield SnipApplied(
            keep_from_seq=state.message_first_seq[index],
            rounds_removed=rounds,
            messages_removed=index - start,
            tokens_freed=max(0, round(tokens)),
            blocks_removed=blocks,
        )


def snip(session: Session, rounds: int) -> StageReport:
    """Snip the ``rounds`` oldest API rounds now (or as many as can be cut cleanly).

    Raises:
        ValidationError: ``rounds`` < 1, or no clean cut exists.
    """
    if rounds < 1:
        msg = f"rounds must be >= 1, got {rounds}"
        raise ValidationError(msg, field="rounds")
    cuts = _round_boundaries(session)
    if not cuts:
        msg = f"session {session.id!r} has no earlier API round that can be snipped cleanly"
        raise ValidationError(msg, field="rounds")
    wanted = next((i + 1 for i, (_, r) in enumerate(cuts) if r >= rounds), len(cuts))
    event = list(_cut_candidates(session, cuts[:wanted]))[-1]
    session.append([event])
    return StageReport("snip", event.tokens_freed, (str(event.event_id),))


def snip_stage(session: Session, config: SnipConfig) -> SnipApplied | None:
    """Decide whether and where to snip (SPEC 5.2): the smallest cut that reaches the target."""
    state = session.token_state()
    effective = state.window.effective_window
    if state.used < effective * config.trigger_percent / 100:
        return None
    api = session.api_state
    total_rounds = sum(1 for m in api.messages[api.first_visible :] if m["role"] == "assistant")
    allowed = [(i, r) for i, r in _round_boundaries(session) if total_rounds - r >= config.keep_recent_rounds]
    target = effective * config.target_percent / 100
    chosen = None
    for chosen in _cut_candidates(session, allowed):
        if state.used - session.estimate(chosen.tokens_freed, chosen.blocks_removed) <= target:
            break
    return chosen


# --- stage 3: micro-compact ------------------------------------------------------------------


def _gap_minutes(session: Session, now: datetime) -> float | None:
    last = session.api_state.last_assistant_time
    if last is None:
        return None
    moment = datetime.fromisoformat(last)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (now - moment).total_seconds() / 60


def _clearable(session: Session, tools: frozenset[str]) -> list[str]:
    """Visible results of compactable tools not yet replaced, oldest first."""
    state = session.api_state
    start = state.first_visible
    return [
        tool_use_id
        for tool_use_id, index in state.result_index.items()
        if index >= start and tool_use_id not in state.replaced and state.tool_names.get(tool_use_id) in tools
    ]


def _clear_event(
    session: Session, ids: list[str], keep: int, trigger: str, gap: float | None
) -> MicrocompactApplied:
    placeholder = session.count_text(CLEARED_PLACEHOLDER)
    freed = 0
    for tool_use_id in ids:
        original = _result_text(_result_block(session, tool_use_id))
        if original is None:
            original = json.dumps(_result_block(session, tool_use_id).get("content"))
        freed += max(0, _result_tokens(session, tool_use_id, original) - placeholder)
    return MicrocompactApplied(
        trigger=trigger,  # type: ignore[arg-type]
        cleared_tool_use_ids=ids,
        keep_recent=keep,
        gap_minutes=gap,
        tokens_freed=freed,
    )


def microcompact_stage(
    session: Session, config: MicrocompactConfig, now: datetime
) -> MicrocompactApplied | None:
    """The time-based path of SPEC 5.3: clear all but the newest results once the cache expired."""
    if not config.time_based or session.api_state.query_source != "main":
        return None
    gap = _gap_minutes(session, now)
    threshold = config.gap_minutes
    if gap is None or not math.isfinite(gap) or not math.isfinite(threshold) or gap < threshold:
        return None
    keep = max(1, config.keep_recent)  # keep 0 would be [-0:], i.e. everything: never fewer than 1
    clearable = _clearable(session, config.compactable_tools)
    ids = clearable[:-keep] if len(clearable) > keep else []
    if not ids:
        return None
    return _clear_event(session, ids, keep, "time", gap)


def microcompact(
    session: Session,
    *,
    keep_recent: int = 5,
    tool_use_ids: Iterable[str] | None = None,
    compactable_tools: frozenset[str] = COMPACTABLE_TOOLS,
) -> StageReport:
    """Clear old tool results now, whatever the time gap (a manual micro-compact).

    Args:
        keep_recent: keep this many newest compactable results (at least 1).
        tool_use_ids: clear exactly these results instead.

    Raises:
        ValidationError: a tool_use_id with no result in the session.
    """
    keep = max(1, keep_recent)
    if tool_use_ids is not None:
        ids = list(dict.fromkeys(tool_use_ids))
        for tool_use_id in ids:
            _result_block(session, tool_use_id)
        ids = [i for i in ids if i not in session.api_state.replaced]
    else:
        clearable = _clearable(session, compactable_tools)
        ids = clearable[:-keep] if len(clearable) > keep else []
    if not ids:
        return StageReport("microcompact", note="nothing to clear")
    event = _clear_event(session, ids, keep, "manual", None)
    session.append([event])
    return StageReport("microcompact", event.tokens_freed, (str(event.event_id),))


def server_side_edits(config: MicrocompactConfig) -> dict[str, Any]:
    """The ``context_management`` parameter asking the API to clear old tool uses itself."""
    edit: dict[str, Any] = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": config.server_trigger_tokens},
        "keep": {"type": "tool_uses", "value": max(1, config.keep_recent)},
        "clear_at_least": {"type": "input_tokens", "value": config.server_clear_at_least},
    }
    if config.server_exclude_tools:
        edit["exclude_tools"] = list(config.server_exclude_tools)
    return {"edits": [edit]}


def record_applied_edits(session: Session, response: Any) -> ServerEditsApplied | None:
    """Record the edits a (beta) Messages API response reports in ``context_management``.

    Returns the appended event, or None when the response applied none.
    """
    management = getattr(response, "context_management", None)
    applied = getattr(management, "applied_edits", None) or []
    if not applied:
        return None
    edits = [edit.model_dump(mode="json") if hasattr(edit, "model_dump") else dict(edit) for edit in applied]
    event = ServerEditsApplied(
        api_message_id=getattr(response, "id", None),
        edits=edits,
        cleared_input_tokens=sum(int(e.get("cleared_input_tokens", 0)) for e in edits),
    )
    session.append([event])
    return event


# --- revert ------------------------------------------------------------------------------


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
    event = ContextEditReverted(target_event_id=event_id, target_type=edit["type"])
    session.append([event])
    return StageReport("revert", -int(edit["tokens"]), (str(event.event_id),))


# --- the pipeline ------------------------------------------------------------------------------


_VIEW_KEYS = frozenset({"system", "tools", "messages"})


def _served_event(session: Session, request: dict[str, Any], used: int) -> ContextServed:
    state = session.api_state
    start = state.first_visible
    unreplaced = [
        tool_use_id
        for tool_use_id, index in state.fresh_results.items()
        if index >= start and tool_use_id not in state.replaced
    ]
    return ContextServed(
        fingerprint=session.fingerprint(request),
        through_seq=session.last_seq,
        token_count=used,
        unreplaced_tool_results=unreplaced,
        model=state.model,
        cache_control=session.config.cache_control,
        extra={key: value for key, value in request.items() if key not in _VIEW_KEYS},
    )


class Pipeline:
    """Runs the no-model stages before a call and records the request it hands out."""

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.config = config or PipelineConfig()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()

    def reactive_compact(
        self, session: Session, summarizer: Summarizer | None = None
    ) -> CompactReport | None:
        """Compact after a prompt-too-long, exactly as auto-compact would (same config and hooks).

        Returns None, recording nothing, when the session disables all compaction (the caller
        then surfaces the error).

        Args:
            summarizer: the summarizer to use (default: the pipeline's).
        """
        if session.config.window.disable_compaction:
            return None
        return compact_session(
            session, summarizer or self.summarizer, self.config.compact, trigger="reactive"
        )

    def _run_stage(self, session: Session, name: str, events: list[Event]) -> StageReport:
        if not events:
            return StageReport(name)
        session.append(events)
        freed = sum(int(getattr(e, "tokens_freed", 0)) for e in events)
        return StageReport(name, freed, tuple(str(e.event_id) for e in events))

    def prepare(self, session: Session) -> PreparedRequest:
        """Run every enabled stage in order, then hand out (and record) the request.

        Raises:
            BlockingLimitError: the context is still at or above the blocking limit.
        """
        config = self.config
        reports: list[StageReport] = []
        if config.budget.enabled:
            reports.append(
                self._run_stage(session, "tool_result_budget", list(budget_stage(session, config.budget)))
            )
        if config.snip.enabled:
            snipped = snip_stage(session, config.snip)
            reports.append(self._run_stage(session, "snip", [snipped] if snipped else []))
        cleared = microcompact_stage(session, config.microcompact, self.clock())
        reports.append(self._run_stage(session, "microcompact", [cleared] if cleared else []))
        if config.collapse.enabled:
            before = session.used_tokens()
            collapsed = collapse_stage(session, config.collapse, self.summarizer)
            freed = max(0, before - session.used_tokens())
            reports.append(StageReport("collapse", freed, tuple(collapsed)))
        if config.auto_compact and session.api_state.query_source == "main":
            # Collapse never uses the memory, and with all compaction off nothing would.
            compaction_on = not session.config.window.disable_compaction
            if config.compact.session_memory and not config.collapse.enabled and compaction_on:
                maybe_extract_memory(session, self.summarizer, config.compact)
            # "used" already excludes what snip freed after the last usage, so nothing to subtract.
            compacted = autocompact_stage(
                session, self.summarizer, config.compact, collapse_enabled=config.collapse.enabled
            )
            if compacted is not None:
                freed = max(0, compacted.tokens_before - compacted.tokens_after)
                note = "" if compacted.ok else f"failed: {compacted.reason}"
                reports.append(StageReport("auto_compact", freed, (compacted.event_id,), note))
        tokens = session.token_state()
        if tokens.at_blocking_limit and config.collapse.enabled and config.auto_compact:
            # Collapse keeps auto-compact away, but a context its summaries filled would be stuck
            # for good: at the blocking limit, compact as the last resort.
            rescue = autocompact_stage(session, self.summarizer, config.compact, collapse_enabled=False)
            if rescue is not None:
                note = "collapse at the blocking limit" + ("" if rescue.ok else f"; failed: {rescue.reason}")
                freed = max(0, rescue.tokens_before - rescue.tokens_after)
                reports.append(StageReport("auto_compact", freed, (rescue.event_id,), note))
                tokens = session.token_state()
        if config.blocking_limit and tokens.at_blocking_limit:
            raise BlockingLimitError(tokens.used, tokens.window.blocking_limit, reports)
        request = session.request()
        edits: list[dict[str, Any]] = []
        betas: list[str] = []
        mc = config.microcompact
        if cleared is None and mc.server_side and session.api_state.query_source == "main":
            edits += server_side_edits(mc)["edits"]
            betas.append(CONTEXT_MANAGEMENT_BETA)
        sc = config.server_compaction
        if sc.enabled and session.api_state.query_source == "main":
            edit: dict[str, Any] = {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": sc.trigger_tokens},
                "pause_after_compaction": sc.pause_after_compaction,
            }
            if sc.instructions:
                edit["instructions"] = sc.instructions
            edits.append(edit)
            betas.append(COMPACTION_BETA)
        if edits:
            request["context_management"] = {"edits": edits}
        beta = bool(betas)
        served = _served_event(session, request, tokens.used)
        session.append([served])
        return PreparedRequest(request, tokens, tuple(reports), str(served.event_id), beta, tuple(betas))

"""Compaction (SPEC 5.5): session memory first, then a summary prepared ahead, then an LLM summary;
retries, hooks, breaker.

``compact(session, summarizer, ...)`` runs one compaction and records a ``CompactBoundary``
(or a ``CompactFailed`` — the context is then exactly as it was, never an error text used as a
summary). ``autocompact_stage`` decides the pipeline's ``AutoCompactStage``: it fires when
``used >= autocompact threshold``, auto-compact is enabled, collapse is not, the
session is the main thread, and the circuit breaker is closed (fewer than 3 consecutive
automatic failures, counted from events, so the breaker survives a restart).

Pre-computed compaction (``CompactConfig.precompute_percent``): from that share of the threshold
the stage prepares the next compaction's summary (``prepare_compaction``, a ``CompactionPrepared``);
at the threshold the compaction commits it without a model call unless it went stale (``_precompute``
says when), in which case it records a ``CompactionPreparationDiscarded`` and summarizes anew.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import json
import logging
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .._telemetry import log_record, span
from ..errors import CompactionDisabledError, SummaryFailedError, SummaryPromptTooLongError, ValidationError
from ..events import (
    CompactBoundary,
    CompactFailed,
    CompactionPreparationDiscarded,
    CompactionPrepared,
    SessionMemoryUpdated,
)
from ..projections import LEADING_USER_MARKER, PreparedCompaction, Session
from ..projections._api_context import COMPACT_SUMMARY_PREFIX, leading_results, view_size
from ..projections._session import check_session
from ..store import blocking_call
from ..store._contract import check_int, check_number
from ._compact_prompt import SUMMARY_SECTIONS
from ._listings import listing_texts
from ._observed import PIPELINE_LOG, log_compaction
from ._post_compact import post_compact_events, told_again, with_preserved_segment
from ._precompute import (
    BackgroundPreparer,
    StaleReason,
    covered_tokens,
    preparation_mark,
    prepared_keep_index,
    stale_reason,
)
from ._restore import Candidate, paths_in, select_attachments
from ._stage import StageReport
from ._summarizers import OfflineSummarizer, Summarizer, SummaryRequest

__all__ = [
    "MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES",
    "PTL_RETRY_MARKER",
    "AutoCompactStage",
    "CompactConfig",
    "CompactHooks",
    "CompactPreview",
    "CompactReport",
    "autocompact_stage",
    "breaker_open",
    "compact",
    "compact_preview",
    "compact_session",
    "drop_for_retry",
    "memory_is_empty",
    "maybe_extract_memory",
    "maybe_prepare_compaction",
    "prepare_compaction",
    "memory_extraction_due",
    "memory_growth_interval",
    "memory_keep_index",
    "round_groups",
    "shell_pre_compact_hook",
    "shell_text_hook",
    "summarizer_input",
]

MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES = 3
MAX_PTL_RETRIES = 3
PTL_FALLBACK_FRACTION = 0.2
#: The synthetic user message put first when a retry leaves an assistant message in front.
PTL_RETRY_MARKER = "[Earlier messages were dropped to fit the summarization request]"

Trigger = Literal["auto", "manual", "reactive"]
Message = dict[str, Any]


@dataclass(frozen=True)
class CompactHooks:
    """Callables run around a compaction (SPEC 5.5.2 and 5.5.4).

    * ``pre_compact(trigger) -> (custom instructions or None, user-facing message or None)``
    * ``session_start(source="compact") -> text to add after the summary, or None``
    * ``post_compact(summary) -> text to add after the summary, or None``
    """

    pre_compact: Sequence[Callable[[str], tuple[str | None, str | None]]] = ()
    session_start: Sequence[Callable[[str], str | None]] = ()
    post_compact: Sequence[Callable[[str], str | None]] = ()


def _run_shell(command: Sequence[str], payload: dict[str, Any], timeout: float) -> str:
    """Run ``command`` with ``payload`` as JSON on stdin; its stdout, stripped.

    Raises:
        SummaryFailedError: the command failed or timed out (the compaction then records a failure).
    """
    try:
        done = subprocess.run(
            list(command),
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        msg = f"hook {command[0]!r} could not run: {e}"
        raise SummaryFailedError(msg) from e
    if done.returncode != 0:
        msg = f"hook {command[0]!r} exited with {done.returncode}: {done.stderr.strip()[:200]}"
        raise SummaryFailedError(msg)
    return done.stdout.strip()


def shell_pre_compact_hook(
    command: Sequence[str], timeout: float = 30.0
) -> Callable[[str], tuple[str | None, str | None]]:
    """A pre-compact hook that runs a command: stdin ``{"hook": "pre_compact", "trigger": ...}``.

    Its stdout is either JSON ``{"instructions": ..., "message": ...}`` or plain text taken as
    extra instructions.
    """

    def hook(trigger: str) -> tuple[str | None, str | None]:
        out = _run_shell(command, {"hook": "pre_compact", "trigger": trigger}, timeout)
        try:
            data = json.loads(out)
        except json.JSONDecodeError:
            return (out or None), None
        if not isinstance(data, dict):
            return (out or None), None
        return data.get("instructions"), data.get("message")

    return hook


def shell_text_hook(
    command: Sequence[str], event: Literal["session_start", "post_compact"], timeout: float = 30.0
) -> Callable[[str], str | None]:
    """A session-start or post-compact hook that runs a command; its stdout is added after the summary.

    stdin is ``{"hook": event, "source": ...}`` for session-start hooks and
    ``{"hook": event, "summary": ...}`` for post-compact hooks.
    """
    key = "source" if event == "session_start" else "summary"

    def hook(value: str) -> str | None:
        return _run_shell(command, {"hook": event, key: value}, timeout) or None

    return hook


@dataclass(frozen=True)
class CompactConfig:
    """Auto-compact and session-memory settings (SPEC 5.5 and 11)."""

    session_memory: bool = True
    memory_min_tokens: int = 10_000
    memory_min_text_messages: int = 5
    memory_max_tokens: int = 40_000
    extract_init_tokens: int = 10_000
    extract_growth_tokens: int = 5_000
    #: Growth between extractions as a percentage of the effective window (at least
    #: ``extract_growth_tokens``, at most half of ``memory_max_tokens``): ``memory_growth_interval``.
    extract_growth_percent: float = 10.0
    extract_tool_calls: int = 3
    hooks: CompactHooks = field(default_factory=CompactHooks)
    #: Prepare the next compaction's summary ahead once "used" reaches this percent of the
    #: auto-compact threshold (None: off); the compaction at the threshold then commits it
    #: without a model call (docs/compaction.md "Pre-computed compaction").
    precompute_percent: float | None = None
    #: A preparation is stale once what came after it weighs more than this percent of the
    #: effective window.
    precompute_max_growth_percent: float = 20.0
    #: Run the preparation's summarizer call on this worker thread, off the turn's critical path
    #: (None: in the turn that crosses the mark, before its request).
    preparer: BackgroundPreparer | None = None

    def __post_init__(self) -> None:
        """Refuse marks that could never fire or would fire at once.

        Raises:
            ValidationError: ``precompute_percent`` not in (0, 100), a growth share not in (0, 100],
                or ``extract_growth_percent`` not in [0, 100].
        """
        if self.precompute_percent is not None:
            check_number("precompute_percent", self.precompute_percent)
        check_number("extract_growth_percent", self.extract_growth_percent)
        check_number("precompute_max_growth_percent", self.precompute_max_growth_percent)
        check_int("extract_init_tokens", self.extract_init_tokens)
        if self.precompute_percent is not None and not 0 < self.precompute_percent < 100:
            percent = self.precompute_percent
            msg = f"CompactConfig.precompute_percent must be above 0 and below 100, not {percent}"
            raise ValidationError(msg, field="precompute_percent")
        if not 0 <= self.extract_growth_percent <= 100:
            percent = self.extract_growth_percent
            msg = f"CompactConfig.extract_growth_percent must be from 0 to 100, not {percent}"
            raise ValidationError(msg, field="extract_growth_percent")
        if not 0 < self.precompute_max_growth_percent <= 100:
            msg = (
                "CompactConfig.precompute_max_growth_percent must be above 0 and at most 100, "
                f"not {self.precompute_max_growth_percent}"
            )
            raise ValidationError(msg, field="precompute_max_growth_percent")


@dataclass(frozen=True)
class CompactReport:
    """The outcome of one compaction."""

    event_id: str
    ok: bool
    strategy: str
    tokens_before: int
    tokens_after: int
    above_threshold: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class CompactPreview:
    """What a compaction would record, without recording it (``compact_preview``).

    ``kept_from_seq`` is the first seq kept verbatim after the summary (0: none);
    ``kept_before_seq`` the seq before which messages stay before it (a partial "from"; 0: not).
    """

    strategy: str
    summarizer: str
    summary: str
    tokens_before: int
    tokens_after: int
    kept_messages: int
    kept_from_seq: int
    kept_before_seq: int
    #: (kind, name, tokens) of each file, skill or plan put back after the summary, then of each
    #: listing (``listing``, its kind) and sub-agent still running (``subagent``, its session) told again.
    attachments: tuple[tuple[str, str, int], ...]
    hook_results: tuple[str, ...]


def breaker_open(session: Session) -> bool:
    """True after 3 consecutive automatic compaction failures (until a compaction succeeds)."""
    check_session("session", session)
    return session.api_state.compact_failures >= MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES


# --- prompt-too-long retry (SPEC 5.5.3) -------------------------------------------------------


def round_groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped by API round: each assistant message opens a group; results stay with it."""
    groups: list[list[Message]] = []
    for message in messages:
        if message["role"] == "assistant" or not groups:
            groups.append([message])
        else:
            groups[-1].append(message)
    return groups


def _is_marker(message: Message) -> bool:
    content = message["content"]
    return (
        message["role"] == "user"
        and isinstance(content, list)
        and len(content) == 1
        and content[0].get("text") == PTL_RETRY_MARKER
    )


def drop_for_retry(
    messages: Sequence[Message], gap: int | None, count: Callable[[Message], int]
) -> list[Message] | None:
    """The messages for the next try: the oldest round groups dropped; None if nothing is left.

    Drops enough groups to cover ``gap`` tokens when it is known, else 20% of the groups (at
    least one). A marker left by an earlier retry is stripped first, so markers never pile up;
    if the first remaining message is an assistant message, a marker user message goes first.
    """
    remaining = [m for m in messages if not _is_marker(m)]
    groups = round_groups(remaining)
    if len(groups) <= 1:
        return None
    drop = max(1, math.ceil(len(groups) * PTL_FALLBACK_FRACTION))
    if gap is not None:
        covered, drop = 0, 0
        while drop < len(groups) - 1 and covered < gap:
            covered += sum(count(m) for m in groups[drop])
            drop += 1
    kept = [m for group in groups[drop:] for m in group]
    if not kept:
        return None
    if kept[0]["role"] == "assistant":
        kept.insert(0, {"role": "user", "content": [{"type": "text", "text": PTL_RETRY_MARKER}]})
    elif leading_results(kept[0]["content"]):
        # Results whose calls were dropped cannot be sent alone.
        content = kept[0]["content"][leading_results(kept[0]["content"]) :]
        kept[0] = {"role": "user", "content": content or [{"type": "text", "text": PTL_RETRY_MARKER}]}
    return kept


# --- session memory (SPEC 5.5.1) --------------------------------------------------------------


def _opens_with_prompt(message: Message) -> bool:
    """A clean place to start keeping: a user message that opens with a prompt, not results."""
    return message["role"] == "user" and leading_results(message["content"]) == 0


def memory_keep_index(session: Session, config: CompactConfig) -> int | None:
    """Index (in the state's messages) of the first message a session-memory compact keeps.

    Every message after the memory's last summarized one is kept (the memory does not cover
    them), and the cut extends backwards, prompt by prompt, until at least
    ``memory_min_tokens`` and ``memory_min_text_messages`` are kept, never beyond
    ``memory_max_tokens``. Tokens are calibrated, as the thresholds are. The cut always lands
    on a user prompt, so it never separates a tool result from its call nor splits one API
    message; the minimum is checked at that cut. None when no cut keeps at most the maximum.
    """
    state = session.api_state
    memory = state.memory
    if memory is None:
        return None
    first = state.first_visible
    messages = state.messages
    start = max(first, _index_after_seq(session, memory.last_summarized_seq))
    raw = blocks = texts = 0
    chosen = None
    for index in range(len(messages) - 1, first, -1):
        message = messages[index]
        raw += state.message_tokens[index]
        blocks += len(message["content"])
        texts += 1 if any(b.get("type") == "text" for b in message["content"]) else 0
        if index > start or not _opens_with_prompt(message):
            continue
        if session.estimate(raw, blocks) > config.memory_max_tokens:
            break
        chosen = index
        if (
            session.estimate(raw, blocks) >= config.memory_min_tokens
            and texts >= config.memory_min_text_messages
        ):
            break
    return chosen


#: Lines a memory holds before anything was written in it: its headings and their descriptions.
_TEMPLATE_LINE = re.compile(
    r"^\s*(#+\s.*|_[^_].*_|\*[^*].*\*|(\d+\.\s*)?("
    + "|".join(re.escape(name) for name in SUMMARY_SECTIONS)
    + r"):?)\s*$",
    re.IGNORECASE,
)


def memory_is_empty(text: str) -> bool:
    """True when a session memory holds nothing beyond its template (headings, descriptions).

    Such a memory would become an empty summary, so the compaction uses the LLM instead.
    """
    return all(not line.strip() or _TEMPLATE_LINE.match(line) for line in text.splitlines())


def _index_after_seq(session: Session, seq: int) -> int:
    return bisect.bisect_right(session.api_state.message_first_seq, seq)


def memory_growth_interval(session: Session, config: CompactConfig) -> int:
    """Tokens the context grows between two session-memory extractions.

    ``extract_growth_percent`` of the effective window (18,000 of a 200,000 window), never
    less than ``extract_growth_tokens`` (5,000: the seeds' floor) and never more than half of
    ``memory_max_tokens``: what a memory does not cover must still fit in what a memory compact
    keeps verbatim when the threshold comes, a turn or so after the last extraction.
    """
    check_session("session", session)
    effective = session.token_state().window.effective_window
    relative = int(effective * config.extract_growth_percent / 100)
    return max(config.extract_growth_tokens, min(relative, config.memory_max_tokens // 2))


def memory_extraction_due(session: Session, config: CompactConfig) -> bool:
    """True when the session memory should be extracted (or updated) now.

    First when the context reaches ``extract_init_tokens``; then when it has grown by
    ``memory_growth_interval`` since the last extraction (or since the latest compaction, when
    that came after it: the context it measured is gone) and either ``extract_tool_calls``
    tool calls were made since the last extraction or the last turn made none.
    """
    check_session("session", session)
    state = session.api_state
    used = session.used_tokens()
    if used < config.extract_init_tokens or not state.messages:
        return False
    memory, compaction = state.memory, state.compact
    if compaction is not None and (memory is None or memory.last_summarized_seq < compaction.seq):
        since = _predicted_used(session, compaction.base_tokens, compaction.base_blocks)
    elif memory is not None:
        since = memory.tokens_at_extraction
    else:
        return True  # the first extraction
    if used - since < memory_growth_interval(session, config):
        return False
    calls = (
        memory is not None and state.tool_calls - memory.tool_calls_at_extraction >= config.extract_tool_calls
    )
    last = state.messages[-1]
    quiet_turn = last["role"] == "assistant" and not any(b.get("type") == "tool_use" for b in last["content"])
    return memory is None or calls or quiet_turn


def maybe_extract_memory(session: Session, summarizer: Summarizer, config: CompactConfig) -> bool:
    """Update the session memory when due (``memory_extraction_due``); returns True when it
    recorded a ``SessionMemoryUpdated``.

    The summarizer is given the main request as its prefix, so a model call reads the prompt
    cache the main requests wrote (and writes what the next main request reads).
    """
    check_session("session", session)
    if not memory_extraction_due(session, config):
        return False
    state = session.api_state
    used = session.used_tokens()
    request = session.request()
    try:
        summary = blocking_call(
            summarizer.summarize,
            SummaryRequest(
                messages=request["messages"],
                system=state.system,
                tools=state.tools,
                model=state.model,
                prefix=request,
            ),
        )
    except SummaryFailedError:
        return False  # background work: the next turn tries again
    session.append(
        [
            SessionMemoryUpdated(
                memory=summary.text,
                last_summarized_seq=session.last_seq,
                tokens_at_extraction=used,
                tool_calls_at_extraction=state.tool_calls,
            )
        ]
    )
    return True


# --- compaction ------------------------------------------------------------------------------


def _message_tokens(session: Session, message: Message) -> int:
    content = message["content"]
    texts = (
        [content]
        if isinstance(content, str)
        else [str(b.get("text") or b.get("content") or "") for b in content]
    )
    return sum(session.count_text(t) for t in texts)


def summarizer_input(session: Session, request: dict[str, Any] | None = None) -> list[Message]:
    """The request's messages as a summarizer should see them: what the last compaction put back
    (its summary, restored files, skills and plan, listings, hook results) and the listings
    announced in the conversation are stripped.

    The attachments and listings come back from the session's state after the new boundary
    anyway, and the previous summary goes to the summarizer separately
    (``SummaryRequest.previous_summary``), so neither is summarized again and summaries never nest.
    ``request``: the session's ``request()`` when the caller has it already.
    """
    messages = (request or session.request())["messages"]
    compact_state = session.api_state.compact
    reinjected = listing_texts(session.transcript_state.entries)
    if compact_state is None and not reinjected:
        return list(messages)
    if compact_state is not None:
        summary = compact_state.summary
        reinjected |= {
            summary,
            COMPACT_SUMMARY_PREFIX + summary,
            *compact_state.attachments,
            *compact_state.announcements,
            *compact_state.hook_results,
        }
    stripped: list[Message] = []
    for message in messages:
        content = message["content"]
        if message["role"] == "user" and isinstance(content, list):
            content = [b for b in content if not (b.get("type") == "text" and b.get("text") in reinjected)]
            if not content:
                continue
        stripped.append({"role": message["role"], "content": content})
    if stripped and stripped[0]["role"] == "assistant":
        stripped.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_MARKER}]})
    return stripped


def _previous_summary(session: Session) -> str | None:
    compact_state = session.api_state.compact
    return None if compact_state is None else compact_state.summary or None


def _summarize_with_retries(
    session: Session, summarizer: Summarizer, request: SummaryRequest
) -> tuple[str, str, int, list[Message]]:
    """(summary, summarizer name, retries, messages summarized), retrying prompt-too-long up to 3 times."""
    messages = list(request.messages)
    for retry in range(MAX_PTL_RETRIES + 1):
        try:
            # A retry drops rounds: its messages are no longer the main request's (no prefix).
            prefix = request.prefix if retry == 0 else None
            summary = blocking_call(
                summarizer.summarize, dataclasses.replace(request, messages=messages, prefix=prefix)
            )
            return summary.text, summary.summarizer, retry, messages
        except SummaryPromptTooLongError as e:
            if retry == MAX_PTL_RETRIES:
                msg = f"summarization prompt still too long after {MAX_PTL_RETRIES} retries"
                raise SummaryFailedError(msg) from e
            shorter = drop_for_retry(messages, e.gap, lambda m: _message_tokens(session, m))
            if shorter is None:
                raise SummaryFailedError("nothing left to summarize after dropping rounds") from e
            messages = shorter
    raise AssertionError  # pragma: no cover - the loop returns or raises


@dataclass(frozen=True)
class _Plan:
    """What a compaction will record, decided before any post-compact hook runs."""

    strategy: Literal["llm", "session_memory"]
    template: Literal["base", "partial_from", "partial_up_to"]
    summary: str
    summarizer: str
    #: The first message kept after the summary (``len(messages)``: none).
    keep_index: int
    #: For a partial "from" compact: the first summarized message (0 otherwise).
    from_index: int = 0
    retries: int = 0
    #: After prompt-too-long retries: messages that began before this seq were not summarized.
    dropped_before_seq: int = 0
    #: The ``CompactionPrepared`` this plan commits (None: summarized now or session memory).
    prepared_event_id: str | None = None


def _kept(session: Session, plan: _Plan) -> list[Message]:
    state = session.api_state
    if plan.from_index:
        return list(state.messages[state.first_visible : plan.from_index])
    return list(state.messages[plan.keep_index :])


def _kept_size(session: Session, plan: _Plan) -> tuple[int, int]:
    """Raw tokens and content blocks of the kept messages as the view holds them: results
    persisted or cleared and spans collapsed before the boundary stay so after it."""
    state = session.api_state
    if plan.from_index:
        start, end = state.first_visible, plan.from_index
    else:
        start, end = plan.keep_index, len(state.messages)
    return view_size(state, start, end)


def _predicted_used(session: Session, raw_tokens: int, blocks: int) -> int:
    """The tokens used right after a boundary of ``raw_tokens`` and ``blocks`` (as
    ``Session.used_tokens`` estimates them: no API usage follows the boundary yet)."""
    return max(0, session.estimate(session.api_state.context_tokens + raw_tokens, blocks))


def _memory_plan(session: Session, config: CompactConfig) -> _Plan | None:
    """A session-memory compact, or None when it cannot be used (seeds: then the LLM summary runs).

    Not used when the memory is empty or only its template, when no clean cut keeps enough
    within the maximum, or when the result would still be at or above the auto-compact
    threshold (nothing is recorded for it then: the LLM compaction starts from the original
    history, not from the session-memory view).
    """
    memory = session.api_state.memory
    if memory is None or memory_is_empty(memory.text):
        return None
    index = memory_keep_index(session, config)
    if index is None:
        return None
    plan = _Plan("session_memory", "base", memory.text, "session_memory", index)
    if _plan_used(session, plan) >= session.token_state().window.autocompact_threshold:
        return None
    return plan


def _plan_used(session: Session, plan: _Plan, extra_blocks: int = 0) -> int:
    """The "used" tokens right after a boundary committing ``plan``: its summary, the kept
    messages, the restored files, skills and plan, and ``extra_blocks`` hook messages."""
    attachments = _restored(session, _kept(session, plan))
    kept_tokens, kept_blocks = _kept_size(session, plan)
    raw = (
        session.count_text(COMPACT_SUMMARY_PREFIX + plan.summary)
        + sum(int(a["tokens"]) for a in attachments)
        + kept_tokens
    )
    return _predicted_used(session, raw, 1 + extra_blocks + len(attachments) + kept_blocks)


def _llm_plan(
    session: Session,
    summarizer: Summarizer,
    instructions: str | None,
    up_to_uuid: str | None,
    from_uuid: str | None,
) -> _Plan:
    """Summarize with the model (retrying prompt-too-long).

    Raises:
        ValidationError: a pivot that would split a tool call from its result.
        SummaryFailedError: no usable summary.
    """
    state = session.api_state
    keep_index = len(state.messages)  # nothing kept
    template: Literal["base", "partial_from", "partial_up_to"] = "base"
    from_index = 0
    prefix = None
    if up_to_uuid is not None:
        template = "partial_up_to"
        keep_index = session.message_index(up_to_uuid) + 1
        if not _clean_cut(session, keep_index):
            msg = f"compacting up to {up_to_uuid!r} would split a tool call from its result or keep nothing"
            raise ValidationError(msg, field="message_uuid")
        messages = list(state.messages[state.first_visible : keep_index])
    elif from_uuid is not None:
        template = "partial_from"
        from_index = session.message_index(from_uuid)
        if not _clean_cut(session, from_index):
            msg = f"compacting from {from_uuid!r} would split a tool call from its result or keep nothing"
            raise ValidationError(msg, field="message_uuid")
        messages = list(state.messages[from_index:])
    else:
        # The whole request is summarized: a model can be sent it as it is (the cached prefix).
        prefix = session.request()
        messages = summarizer_input(session, prefix)
    summary, name, retries, summarized = _summarize_with_retries(
        session,
        summarizer,
        SummaryRequest(
            messages,
            template,
            instructions,
            state.system,
            state.tools,
            state.model,
            previous_summary=None if template == "partial_from" else _previous_summary(session),
            prefix=prefix,
        ),
    )
    dropped_before_seq = _first_seq_summarized(session, summarized) if retries else 0
    return _Plan("llm", template, summary, name, keep_index, from_index, retries, dropped_before_seq)


def _first_seq_summarized(session: Session, summarized: Sequence[Message]) -> int:
    """The seq of the first view message the summarizer still got after prompt-too-long retries.

    Retries drop whole round groups from the front, so what was summarized resumes at an
    assistant message of the view, sent as it is: everything before it was dropped.
    """
    state = session.api_state
    resumed = next((m for m in summarized if m["role"] == "assistant"), None)
    visible = range(state.first_visible, len(state.messages))
    # The view's own message object, else (a copy, after an earlier compaction) an equal one.
    found = next((i for i in visible if state.messages[i] is resumed), None)
    if found is None:
        found = next((i for i in visible if state.messages[i] == resumed), None)
    return 0 if found is None else state.message_first_seq[found]


# --- pre-computed compaction -------------------------------------------------------------------


def prepare_compaction(
    session: Session, summarizer: Summarizer, config: CompactConfig | None = None
) -> CompactionPrepared | None:
    """Summarize the request now for the next compaction and record it (``CompactionPrepared``).

    The summary is the base template's, over what a compaction now would summarize (the
    pre-compact hooks run with trigger "auto"); nothing in the request changes. Returns None,
    recording nothing, when a hook or the summarizer failed: the preparation is background work,
    so it neither counts toward the circuit breaker nor stops the turn (the next one tries again).
    """
    check_session("session", session)
    job = _preparation_job(session, summarizer, config or CompactConfig(), detached=False)
    return None if job is None else _record_preparation(session, job.run())


@dataclass(frozen=True)
class _PreparationJob:
    """A preparation captured on the session's thread: what it covers, and the summary request.

    ``run`` makes the summarizer call and touches nothing of the session but its token counter,
    so it may run on a worker thread (``BackgroundPreparer``) while the session moves on.
    """

    session: Session
    summarizer: Summarizer
    request: SummaryRequest
    through_seq: int
    covered_tokens: int
    base_compaction_event_id: str | None
    used: int
    last_message_uuid: str | None
    hook_messages: list[str]

    def run(self) -> tuple[_PreparationJob, tuple[str, str, int, list[Message]] | None]:
        """The job and its summary (text, summarizer name, retries, messages summarized); None: failed."""
        try:
            return self, _summarize_with_retries(self.session, self.summarizer, self.request)
        except SummaryFailedError:
            return self, None
        except Exception as e:  # a preparation is an optimisation: it never stops a turn or a compaction
            log_record(
                PIPELINE_LOG,
                logging.WARNING,
                "compaction_preparation",
                "preparing a compaction of session {session_id} failed, nothing recorded: {error}",
                session_id=self.session.id,
                error=f"{type(e).__name__}: {e}",
            )
            return self, None


def _preparation_job(
    session: Session, summarizer: Summarizer, config: CompactConfig, *, detached: bool
) -> _PreparationJob | None:
    """Capture a preparation now (the pre-compact hooks run here); None when there is nothing to
    summarize or a hook failed. ``detached``: the request owns copies of its messages, so
    nothing the session's thread does later (folds, edits) can change what a worker thread sends."""
    state = session.api_state
    if not state.messages:
        return None
    try:
        instructions, shown = _pre_compact(config, "auto", None)
    except SummaryFailedError:
        return None
    # The whole request is summarized: sent as it is, it reads the cached prefix.
    request = session.request()
    messages = summarizer_input(session, request)
    if detached:
        request, messages = copy.deepcopy(request), copy.deepcopy(messages)
    keep = bisect.bisect_right(state.message_first_seq, session.last_seq)
    return _PreparationJob(
        session=session,
        summarizer=summarizer,
        request=SummaryRequest(
            messages,
            "base",
            instructions,
            state.system,
            state.tools,
            state.model,
            previous_summary=_previous_summary(session),
            prefix=request,
        ),
        through_seq=session.last_seq,
        covered_tokens=covered_tokens(state, keep),
        base_compaction_event_id=state.compact.event_id if state.compact is not None else None,
        used=session.used_tokens(),
        last_message_uuid=_last_message_uuid(session),
        hook_messages=shown,
    )


def _record_preparation(
    session: Session, done: tuple[_PreparationJob, tuple[str, str, int, list[Message]] | None]
) -> CompactionPrepared | None:
    """Append the ``CompactionPrepared`` of a finished job (on the session's thread); None if it failed."""
    job, result = done
    if result is None:
        return None
    summary, name, retries, summarized = result
    event = CompactionPrepared(
        summary=summary,
        summarizer=name,
        summary_tokens=session.count_text(summary),
        through_seq=job.through_seq,
        covered_tokens=job.covered_tokens,
        base_compaction_event_id=job.base_compaction_event_id,
        tokens_at_preparation=job.used,
        last_message_uuid=job.last_message_uuid,
        custom_instructions=job.request.custom_instructions,
        hook_messages=job.hook_messages,
        ptl_retries=retries,
        ptl_dropped_before_seq=_first_seq_summarized(session, summarized) if retries else 0,
    )
    session.append([event])
    return event


def _take_background(session: Session, config: CompactConfig, *, wait: bool) -> CompactionPrepared | None:
    """Record the background preparation of this session once it finished (``wait``: wait for it)."""
    if config.preparer is None:
        return None
    if wait:  # on an async store's loop, waiting must not stall the other tasks
        blocking_call(config.preparer.wait, session.id)
    done = config.preparer.take(session.id)
    return None if done is None else _record_preparation(session, done)


def maybe_prepare_compaction(
    session: Session, summarizer: Summarizer, config: CompactConfig, *, collapse_enabled: bool = False
) -> CompactionPrepared | None:
    """Prepare the next compaction when due; discard the pending one first when it went stale.

    Due when ``precompute_percent`` is set, "used" is at or above that share of the auto-compact
    threshold but below the threshold, no fresh preparation is pending, and auto-compact could
    fire (enabled, collapse off, the main thread, the breaker closed).

    With ``config.preparer`` the summarizer call runs on its worker thread: this records the
    preparation a worker finished since the last turn, and starts one when due; the turn does
    not wait for it.
    """
    if config.precompute_percent is None:
        return None
    finished = _take_background(session, config, wait=False)
    if finished is not None or (config.preparer is not None and config.preparer.running(session.id)):
        return finished
    window = session.token_state().window
    used = session.used_tokens()
    if (
        not window.auto_compact_enabled
        or session.config.window.disable_compaction
        or collapse_enabled
        or session.api_state.query_source != "main"
        or breaker_open(session)
        or used >= window.autocompact_threshold
        or used < preparation_mark(session, config.precompute_percent)
    ):
        return None
    if session.api_state.prepared is not None and _fresh_preparation(session, config) is not None:
        return None
    if config.preparer is None:
        return prepare_compaction(session, summarizer, config)
    job = _preparation_job(session, summarizer, config, detached=True)
    if job is not None:
        config.preparer.submit(session.id, job.run)
    return None


def _fresh_preparation(session: Session, config: CompactConfig) -> tuple[_Plan, PreparedCompaction] | None:
    """The pending preparation and the plan that commits it, when it is still fresh.

    A stale one is discarded (a ``CompactionPreparationDiscarded`` is appended) and None returned.
    """
    prepared = session.api_state.prepared
    if prepared is None:
        return None
    stale = stale_reason(session, prepared, config.precompute_max_growth_percent)
    plan = None
    if stale is None:
        keep = prepared_keep_index(session, prepared)
        plan = _Plan(
            "llm",
            "base" if keep == len(session.api_state.messages) else "partial_up_to",
            prepared.summary,
            prepared.summarizer,
            keep,
            retries=prepared.ptl_retries,
            dropped_before_seq=prepared.ptl_dropped_before_seq,
            prepared_event_id=prepared.event_id,
        )
        after = _plan_used(session, plan, len(prepared.hook_messages))
        threshold = session.token_state().window.autocompact_threshold
        if after >= threshold:
            stale = "above_threshold", f"it would leave {after} tokens used, the threshold is {threshold}"
    if stale is not None:
        session.append([_discarded(prepared, *stale)])
        return None
    assert plan is not None
    return plan, prepared


def _discarded(
    prepared: PreparedCompaction, reason: StaleReason, detail: str
) -> CompactionPreparationDiscarded:
    return CompactionPreparationDiscarded(prepared_event_id=prepared.event_id, reason=reason, detail=detail)


def compact(
    session: Session,
    summarizer: Summarizer,
    *,
    trigger: Trigger = "manual",
    custom_instructions: str | None = None,
    up_to_uuid: str | None = None,
    from_uuid: str | None = None,
    config: CompactConfig | None = None,
    use_memory: bool = False,
    use_prepared: bool = False,
) -> CompactReport:
    """Compact the session now; returns what it recorded (a boundary, or a failure).

    Args:
        up_to_uuid: summarize up to and including this message and keep what follows verbatim
            (the partial "up to" template); it must end an API round.
        from_uuid: summarize from this user prompt on and keep what precedes it verbatim,
            before the summary (the partial "from" template).
        config: hooks and session-memory settings (the pipeline's ``PipelineConfig.compact``).
        use_memory: try a session-memory compact (no model call) before the LLM summary; it
            is skipped, recording nothing, when it is not usable (see ``_memory_plan``).
        use_prepared: after the session memory, commit the summary prepared ahead
            (``CompactionPrepared``, no model call) when it is still fresh; a stale one is
            discarded (recorded) first. Without it, a pending preparation is discarded with the
            boundary this compaction records (it was prepared on the history this replaces).

    Raises:
        CompactionDisabledError: the session's window config disables all compaction.
        ValidationError: an unknown pivot, or one that would split a tool call from its result.
    """
    check_session("session", session)
    attributes = {"sessionstore.session_id": session.id, "sessionstore.compaction.trigger": trigger}
    with span("sessionstore.compaction", attributes) as current:
        report = _compact(
            session,
            summarizer,
            trigger=trigger,
            custom_instructions=custom_instructions,
            up_to_uuid=up_to_uuid,
            from_uuid=from_uuid,
            config=config,
            use_memory=use_memory,
            use_prepared=use_prepared,
        )
        current.set(
            {
                "sessionstore.compaction.ok": report.ok,
                "sessionstore.compaction.strategy": report.strategy,
                "sessionstore.tokens.before": report.tokens_before,
                "sessionstore.tokens.after": report.tokens_after,
                "sessionstore.tokens.freed": report.tokens_before - report.tokens_after,
            }
        )
    log_compaction(
        session,
        trigger=trigger,
        ok=report.ok,
        strategy=report.strategy,
        tokens_before=report.tokens_before,
        tokens_after=report.tokens_after,
        reason=report.reason,
        event_id=report.event_id,
    )
    return report


def _compact(
    session: Session,
    summarizer: Summarizer,
    *,
    trigger: Trigger,
    custom_instructions: str | None,
    up_to_uuid: str | None,
    from_uuid: str | None,
    config: CompactConfig | None,
    use_memory: bool,
    use_prepared: bool,
) -> CompactReport:
    """``compact``'s work (see there), without its reporting."""
    config = config or CompactConfig()
    before = session.used_tokens()
    pivot = up_to_uuid is not None or from_uuid is not None
    if use_prepared:  # a preparation still running is nearer its end than a new summary would be
        _take_background(session, config, wait=True)
    prepared = (
        _fresh_preparation(session, config)
        if use_prepared
        and not pivot
        and custom_instructions is None
        and not session.config.window.disable_compaction
        else None
    )
    try:
        boundary, strategy = _planned_boundary(
            session,
            summarizer,
            trigger=trigger,
            custom_instructions=custom_instructions,
            up_to_uuid=up_to_uuid,
            from_uuid=from_uuid,
            config=config,
            use_memory=use_memory,
            prepared=prepared,
        )
    except SummaryFailedError as e:
        return _failed(session, trigger, e.reason, before)
    boundary = with_preserved_segment(session, boundary)
    # Listings told again and sub-agents still running go in with the boundary, naming it.
    told = post_compact_events(session, boundary)
    pending = session.api_state.prepared
    if pending is not None and boundary.prepared_event_id != pending.event_id:
        # Prepared on the history this boundary replaces: it could never be committed after it.
        superseded = f"superseded by a {strategy} compaction ({trigger})"
        session.append([_discarded(pending, "compacted", superseded), boundary, *told])
    else:
        session.append([boundary, *told])
    after = session.used_tokens()
    return CompactReport(
        str(boundary.event_id),
        True,
        strategy,
        before,
        after,
        above_threshold=after >= session.token_state().window.autocompact_threshold,
    )


def _planned_boundary(
    session: Session,
    summarizer: Summarizer,
    *,
    trigger: Trigger,
    custom_instructions: str | None,
    up_to_uuid: str | None,
    from_uuid: str | None,
    config: CompactConfig,
    use_memory: bool,
    prepared: tuple[_Plan, PreparedCompaction] | None = None,
) -> tuple[CompactBoundary, str]:
    """The boundary a compaction would record now (hooks and summary run), and its strategy.

    With ``prepared`` (a fresh preparation and its plan), the pre-compact hooks are not run
    again: they ran when it was prepared, and what they gave is in it.

    Raises:
        CompactionDisabledError: the session's window config disables all compaction.
        SummaryFailedError: a hook failed or no usable summary came back.
    """
    if session.config.window.disable_compaction:
        raise CompactionDisabledError(session.id)
    before = session.used_tokens()
    if prepared is None:
        instructions, shown = _pre_compact(config, trigger, custom_instructions)
    else:
        instructions, shown = prepared[1].custom_instructions, list(prepared[1].hook_messages)
    pivot = up_to_uuid is not None or from_uuid is not None
    plan = _memory_plan(session, config) if use_memory and config.session_memory and not pivot else None
    if plan is None and prepared is not None:
        plan = prepared[0]
    if plan is None:
        plan = _llm_plan(session, summarizer, instructions, up_to_uuid, from_uuid)
    hook_results = [*shown]
    hook_results += [t for h in config.hooks.session_start if (t := h("compact"))]
    hook_results += [t for h in config.hooks.post_compact if (t := h(plan.summary))]
    return _boundary(session, plan, trigger, instructions, hook_results, before), plan.strategy


def _pre_compact(
    config: CompactConfig, trigger: Trigger, custom_instructions: str | None
) -> tuple[str | None, list[str]]:
    """Run the pre-compact hooks: the instructions for the summary and the messages to show.

    Raises:
        SummaryFailedError: a hook failed.
    """
    instructions = custom_instructions
    shown: list[str] = []
    for hook in config.hooks.pre_compact:
        extra, message = hook(trigger)
        if extra:
            instructions = f"{instructions}\n{extra}" if instructions else extra
        if message:
            shown.append(message)
    return instructions, shown


def compact_preview(
    session: Session,
    summarizer: Summarizer,
    *,
    custom_instructions: str | None = None,
    up_to_uuid: str | None = None,
    from_uuid: str | None = None,
    config: CompactConfig | None = None,
    use_memory: bool = False,
) -> CompactPreview:
    """What ``compact`` with these arguments would record now, recording nothing (a dry run).

    The summarizer and the hooks run as for a compaction (a model call, with its cost).

    Raises:
        CompactionDisabledError: the session's window config disables all compaction.
        SummaryFailedError: a hook failed or no usable summary came back (nothing is recorded).
        ValidationError: an unknown pivot, or one that would split a tool call from its result.
    """
    check_session("session", session)
    boundary, strategy = _planned_boundary(
        session,
        summarizer,
        trigger="manual",
        custom_instructions=custom_instructions,
        up_to_uuid=up_to_uuid,
        from_uuid=from_uuid,
        config=config or CompactConfig(),
        use_memory=use_memory,
    )
    state = session.api_state
    if boundary.summarized_from_seq:
        kept = bisect.bisect_left(state.message_first_seq, boundary.summarized_from_seq) - state.first_visible
    elif boundary.keep_from_seq:
        kept = len(state.messages) - bisect.bisect_left(state.message_first_seq, boundary.keep_from_seq)
    else:
        kept = 0
    told = told_again(session, boundary)
    raw = boundary.post_compact_raw_tokens + sum(tokens for _, _, tokens in told)
    return CompactPreview(
        strategy=strategy,
        summarizer=boundary.summarizer,
        summary=boundary.summary,
        tokens_before=boundary.pre_compact_tokens,
        tokens_after=_predicted_used(session, raw, boundary.post_compact_blocks + len(told)),
        kept_messages=kept,
        kept_from_seq=boundary.keep_from_seq,
        kept_before_seq=boundary.summarized_from_seq,
        attachments=(*(_attachment_line(a) for a in boundary.attachments), *told),
        hook_results=tuple(boundary.hook_results),
    )


def _attachment_line(attachment: dict[str, object]) -> tuple[str, str, int]:
    """(kind, name, tokens) of a restored attachment (``select_attachments``'s dict)."""
    tokens = attachment.get("tokens")
    return str(attachment.get("kind")), str(attachment.get("name")), tokens if isinstance(tokens, int) else 0


def _boundary(
    session: Session,
    plan: _Plan,
    trigger: Trigger,
    instructions: str | None,
    hook_results: list[str],
    before: int,
) -> CompactBoundary:
    state = session.api_state
    kept = _kept(session, plan)
    attachments = _restored(session, kept)
    kept_tokens, kept_blocks = _kept_size(session, plan)
    return CompactBoundary(
        trigger=trigger,
        strategy=plan.strategy,
        template=plan.template,
        summarizer=plan.summarizer,
        summary=plan.summary,
        keep_from_seq=state.message_first_seq[plan.keep_index] if kept and not plan.from_index else 0,
        summarized_from_seq=state.message_first_seq[plan.from_index] if plan.from_index else 0,
        last_pre_compact_uuid=_last_message_uuid(session),
        pre_compact_tokens=before,
        post_compact_raw_tokens=session.count_text(COMPACT_SUMMARY_PREFIX + plan.summary)
        + sum(session.count_text(h) for h in hook_results)
        + sum(int(a["tokens"]) for a in attachments)
        + kept_tokens,
        post_compact_blocks=1 + len(hook_results) + len(attachments) + kept_blocks,
        attachments=attachments,
        hook_results=hook_results,
        custom_instructions=instructions,
        ptl_retries=plan.retries,
        ptl_dropped_before_seq=plan.dropped_before_seq,
        discovered_tools=[str(t.get("name")) for t in state.tools],
        prepared_event_id=plan.prepared_event_id,
    )


def _restored(session: Session, kept: Sequence[Message]) -> list[dict[str, Any]]:
    """Recently read files, invoked skills and the plan, within the post-compact budgets."""
    session.refresh()  # the reads others recorded count too
    # The session keeps its file-history view current with each turn: never refolded from the log.
    history = session.file_history_state
    candidates = []
    for read in history.recent_reads(None):
        if read.blob_sha256 is None:
            continue
        try:
            data = session.store.get_blob(read.blob_sha256, session_id=session.id)
            text = data.decode("utf-8", errors="replace")
        except KeyError:
            continue
        candidates.append(Candidate("file", read.path, text))
    state = session.api_state
    skills = [Candidate("skill", name, text) for name, text in reversed(state.skills.items())]
    plan = Candidate("plan", "plan", state.plan) if state.plan else None
    return select_attachments(
        candidates,
        skills,
        plan,
        visible_paths=paths_in(kept, history.recorded_root),
        count=session.count_text,
    )


def _failed(session: Session, trigger: Trigger, reason: str, before: int) -> CompactReport:
    """Record a failed compaction; the context stays exactly as it was."""
    failed = CompactFailed(trigger=trigger, reason=reason)
    session.append([failed])
    return CompactReport(str(failed.event_id), False, "llm", before, before, reason=reason)


def _clean_cut(session: Session, index: int) -> bool:
    """True when the messages from ``index`` on can be kept alone: they open with a user prompt."""
    messages = session.api_state.messages
    return (
        session.api_state.first_visible < index < len(messages)
        and messages[index]["role"] == "user"
        and leading_results(messages[index]["content"]) == 0
    )


def _last_message_uuid(session: Session) -> str | None:
    """The newest message's uuid, read from the log's tail (not the whole transcript)."""
    end = session.last_seq
    width = 64
    while end >= 1:
        start = max(1, end - width + 1)
        for recorded in reversed(session.log.read(start, end)):
            if recorded.type == "message_appended":
                value = recorded.payload_dict().get("message_uuid")
                if isinstance(value, str):
                    return value
        end, width = start - 1, width * 4
    return None


def compact_session(
    session: Session, summarizer: Summarizer, config: CompactConfig, *, trigger: Trigger
) -> CompactReport:
    """The one compaction path of automatic and reactive compaction (and the pipeline's).

    Session memory first when enabled and usable, then the summary prepared ahead when one is
    pending and fresh, else the LLM summary, with the configured hooks either way.

    Raises:
        CompactionDisabledError: the session's window config disables all compaction.
    """
    return compact(
        session,
        summarizer,
        trigger=trigger,
        config=config,
        use_memory=config.session_memory,
        use_prepared=True,
    )


def autocompact_stage(
    session: Session,
    summarizer: Summarizer,
    config: CompactConfig,
    *,
    collapse_enabled: bool = False,
) -> CompactReport | None:
    """Compact when the context reached the auto-compact threshold and every condition holds.

    "used" already excludes what a snip freed after the last usage: nothing to subtract.
    """
    state = session.token_state()
    window = state.window
    if (
        not window.auto_compact_enabled
        or collapse_enabled
        or session.api_state.query_source != "main"
        or breaker_open(session)
        or state.used < window.autocompact_threshold
    ):
        return None
    return compact_session(session, summarizer, config, trigger="auto")


@dataclass(frozen=True)
class AutoCompactStage:
    """Auto-compact as a pipeline ``Stage``: ``compact`` appends its own events (a model call).

    Args:
        enabled: ``PipelineConfig.auto_compact``; the window's switches can still disable it.
        collapse_enabled: collapse runs before this stage. Collapse then keeps auto-compact
            away, but a context its summaries filled would be stuck for good: at the blocking
            limit the stage compacts as the last resort.
    """

    config: CompactConfig = field(default_factory=CompactConfig)
    summarizer: Summarizer = field(default_factory=OfflineSummarizer)
    enabled: bool = True
    collapse_enabled: bool = False
    name: str = field(default="auto_compact", init=False)

    def run(self, session: Session, now: datetime) -> StageReport | None:
        """Compact when due (or as collapse's last resort); None when nothing was tried."""
        if not self.enabled:
            return None
        if session.api_state.query_source == "main":
            # Collapse never uses the memory, and with all compaction off nothing would.
            compaction_on = not session.config.window.disable_compaction
            if self.config.session_memory and not self.collapse_enabled and compaction_on:
                maybe_extract_memory(session, self.summarizer, self.config)
            compacted = autocompact_stage(
                session, self.summarizer, self.config, collapse_enabled=self.collapse_enabled
            )
            if compacted is not None:
                return self._report(compacted, "")
            prepared = maybe_prepare_compaction(
                session, self.summarizer, self.config, collapse_enabled=self.collapse_enabled
            )
            if prepared is not None:
                return StageReport(self.name, 0, (str(prepared.event_id),), "compaction prepared")
        if self.collapse_enabled and session.token_state().at_blocking_limit:
            rescue = autocompact_stage(session, self.summarizer, self.config, collapse_enabled=False)
            if rescue is not None:
                return self._report(rescue, "collapse at the blocking limit")
        return None

    def _report(self, compacted: CompactReport, why: str) -> StageReport:
        failed = "" if compacted.ok else f"failed: {compacted.reason}"
        note = "; ".join(part for part in (why, failed) if part)
        freed = max(0, compacted.tokens_before - compacted.tokens_after)
        return StageReport(self.name, freed, (compacted.event_id,), note)

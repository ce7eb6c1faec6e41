"""Context collapse (SPEC 5.4): summaries of spans of API rounds, staged ahead, committed under pressure.

The collapsed view is a read-time projection over the full history: summaries live in
``CollapseStaged`` events, and ``CollapseCommitted`` makes one take effect. Nothing in the log
changes, so a committed collapse is undone by reverting its commit, and commits survive resume.

* **Stage** (a model call, ahead of pressure): from ``stage_percent`` of the effective window, the
  oldest span of ``span_rounds`` API rounds not yet covered is summarized and staged.
* **Commit** (no model call): from ``commit_percent`` (90%), staged collapses are committed,
  oldest first, until the context is below that mark.
* **Drain** (overflow recovery, no model call): every staged collapse is committed at once.
* From ``spawn_block_percent`` (95%) sub-agents are refused (``SubagentSpawnRefusedError``).
* When collapse is enabled auto-compact never fires: it would race collapse near 93% and throw
  away the granular context collapse keeps.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import SubagentSpawnRefusedError, ValidationError
from ..events import CollapseCommitted, CollapseStaged
from ..projections import Session, StagedCollapse, TranscriptEntry
from ..projections._api_context import collapse_span, collapse_span_tokens, committed_spans, leading_results
from ..projections._session import check_session
from ..store import blocking_call
from ._stage import StageReport
from ._summarizers import OfflineSummarizer, Summarizer, SummaryRequest

__all__ = [
    "CollapseConfig",
    "CollapseReport",
    "CollapseStage",
    "check_spawn",
    "collapse",
    "collapse_stage",
    "collapsed_messages",
    "commit_collapse",
    "drain_collapses",
    "shown_messages",
    "stage_collapse",
]


@dataclass(frozen=True)
class CollapseConfig:
    """Context collapse switches (off by default; SPEC 5.4's marks)."""

    enabled: bool = False
    stage_percent: float = 80.0
    commit_percent: float = 90.0
    spawn_block_percent: float = 95.0
    span_rounds: int = 8
    keep_recent_rounds: int = 4


@dataclass(frozen=True)
class CollapseReport:
    """What a collapse operation recorded and the tokens around it."""

    event_ids: tuple[str, ...]
    tokens_before: int
    tokens_after: int


def check_spawn(session: Session, config: CollapseConfig | None = None) -> None:
    """Raise ``SubagentSpawnRefusedError`` when collapse is on and the context is at the block mark."""
    check_session("session", session)
    config = config or CollapseConfig(enabled=True)
    if not config.enabled:
        return
    state = session.token_state()
    limit = int(state.window.effective_window * config.spawn_block_percent / 100)
    if state.used >= limit:
        raise SubagentSpawnRefusedError(state.used, limit)


# --- spans -----------------------------------------------------------------------------------


def _covered(session: Session) -> list[tuple[int, int]]:
    """Index spans already staged or committed (so a new one never overlaps them)."""
    state = session.api_state
    spans = [(start, end) for start, end, _ in committed_spans(state)]
    for staged in state.staged.values():
        spans.append(
            (
                bisect.bisect_left(state.message_first_seq, staged.first_seq),
                bisect.bisect_left(state.message_first_seq, staged.end_seq),
            )
        )
    return sorted(spans)


def _is_prompt(message: dict[str, Any]) -> bool:
    """A user message holding something besides tool results: a turn starts here.

    A prompt typed right after a tool call finished (or after an interrupted turn) shares its
    API message with that call's results: ``[tool_result, text]`` starts a turn too.
    """
    content = message["content"]
    return message["role"] == "user" and leading_results(content) < len(content)


def _check_span(session: Session, start: int, end: int) -> None:
    state = session.api_state
    messages = state.messages
    problem = None
    if not state.first_visible <= start < end:
        problem = "the span is empty or lies in a snipped part"
    elif end >= len(messages):
        problem = "the span must end before the last message (results still arriving merge into it)"
    elif not (_is_prompt(messages[start]) and _is_prompt(messages[end])):
        problem = (
            "a span must start at a user prompt and end just before another one "
            "(a tool call and its result are never split)"
        )
    elif any(start < other_end and other_start < end for other_start, other_end in _covered(session)):
        problem = "the span overlaps a staged or committed collapse"
    if problem:
        msg = f"cannot collapse messages {start}..{end - 1} of session {session.id!r}: {problem}"
        raise ValidationError(msg, field="span")


def shown_messages(entries: Iterable[TranscriptEntry]) -> list[TranscriptEntry]:
    """The main-thread message events the model is sent (not meta, not a sub-agent's)."""
    return [e for e in entries if _shown(e)]


def _shown(entry: TranscriptEntry) -> bool:
    payload = entry.payload
    return entry.type == "message_appended" and not payload.get("is_meta") and not payload.get("is_sidechain")


def _result_ids(entry: TranscriptEntry) -> list[str] | None:
    """The tool_use ids a user message event answers, when it holds nothing but tool results."""
    content = entry.payload.get("content")
    if entry.payload.get("role") != "user" or not isinstance(content, list) or not content:
        return None
    if any(not isinstance(b, dict) or b.get("type") != "tool_result" for b in content):
        return None
    return [str(b.get("tool_use_id")) for b in content]


def collapsed_messages(
    entries: Sequence[TranscriptEntry], first_seq: int, end_seq: int
) -> list[TranscriptEntry]:
    """The message events a collapse of view messages ``first_seq``..``end_seq`` takes out of the request.

    The events of those view messages, except results answering calls before the span (they
    stay), plus the results after it answering calls inside it (they go with it): see
    ``collapse_span``. ``entries`` are in seq order; only the span and what follows it up to
    the next assistant message are read.
    """
    start = bisect.bisect_left(entries, first_seq, key=lambda e: e.seq)
    calls: set[str] = set()
    out = []
    for e in (entries[i] for i in range(start, len(entries))):
        if not _shown(e):
            continue
        if e.seq >= end_seq and e.payload.get("role") == "assistant":
            break  # the next round: no result of a call in the span can follow it
        answers = _result_ids(e)
        if e.seq < end_seq:
            if answers is None or any(a in calls for a in answers):
                out.append(e)
            calls.update(_call_ids(e))
        elif answers and all(a in calls for a in answers):
            out.append(e)
    return out


def _call_ids(entry: TranscriptEntry) -> list[str]:
    """The ids of the tool calls an assistant message event makes."""
    if entry.payload.get("role") != "assistant":
        return []
    return [
        str(block.get("id"))
        for block in entry.payload.get("content") or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]


def _span_end(session: Session, to_uuid: str) -> int:
    """Index of the view message after a span whose last message is ``to_uuid``.

    Usually the message after the one holding ``to_uuid``. But when ``to_uuid`` is a tool
    result and the next prompt joined its API message (``[tool_result, text]``), the span ends
    at that message: its results go with the span, the prompt stays.
    """
    index = session.message_index(to_uuid)
    state = session.api_state
    if state.messages.role(index) != "user":
        return index + 1
    entries = session.transcript_state.entries
    to_seq = next(e.seq for e in entries if e.payload.get("message_uuid") == to_uuid)
    next_seq = state.message_first_seq[index + 1] if index + 1 < len(state.messages) else session.last_seq + 1
    # The events after to_uuid that joined its message: does one of them bring a prompt?
    joined = (e.payload for e in entries if e.type == "message_appended" and to_seq < e.seq < next_seq)
    return index if any(_adds_prompt(payload) for payload in joined) else index + 1


def _adds_prompt(payload: dict[str, Any]) -> bool:
    """True for a message event the view shows as user content besides tool results."""
    if payload.get("role") != "user" or payload.get("is_meta") or payload.get("is_sidechain"):
        return False
    content = payload.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return any(
        isinstance(block, dict)
        and block.get("type") != "tool_result"
        and not (block.get("type") == "text" and not str(block.get("text", "")).strip())
        for block in content or []
    )


# --- operations ------------------------------------------------------------------------------


def stage_collapse(session: Session, summarizer: Summarizer, start: int, end: int) -> CollapseStaged:
    """Summarize view messages ``start``..``end - 1`` and stage the result (one summarizer call).

    Raises:
        ValidationError: the span splits a tool pair, overlaps another collapse, or reaches the tail.
        SummaryFailedError: the summarizer produced nothing usable (nothing is recorded).
    """
    check_session("session", session)
    _check_span(session, start, end)
    state = session.api_state
    summary = blocking_call(
        summarizer.summarize,
        SummaryRequest(
            messages=collapse_span(state, start, end),
            template="partial_up_to",
            system=state.system,
            tools=state.tools,
            model=state.model,
        ),
    )
    first_seq = state.message_first_seq[start]
    end_seq = state.message_first_seq[end]
    replaced = collapsed_messages(session.transcript_state.entries, first_seq, end_seq)
    event = CollapseStaged(
        first_seq=first_seq,
        end_seq=end_seq,
        first_message_uuid=replaced[0].payload.get("message_uuid") if replaced else None,
        last_message_uuid=replaced[-1].payload.get("message_uuid") if replaced else None,
        summary=summary.text,
        summary_tokens=session.count_text(summary.text),
        tokens_covered=collapse_span_tokens(state, start, end),
        summarizer=summary.summarizer,
    )
    session.append([event])
    return event


def _still_shown(session: Session, staged: StagedCollapse) -> bool:
    """True while a staged span is wholly in the request (no snip or compaction took part of it).

    A span behind a snip or a compact boundary summarizes messages the model no longer sees:
    committing it would change nothing in the request yet count its tokens as freed.
    """
    state = session.api_state
    if bisect.bisect_left(state.message_first_seq, staged.first_seq) < state.first_visible:
        return False
    compact = state.compact
    # A partial "from" compaction summarized the messages from its pivot to its boundary.
    if compact is None or not compact.from_seq:
        return True
    return bool(staged.end_seq <= compact.from_seq or staged.first_seq > compact.seq)


def _committable(session: Session) -> list[tuple[str, StagedCollapse]]:
    """Staged collapses whose span is still in the request, oldest first."""
    staged = [(event_id, s) for event_id, s in session.api_state.staged.items() if _still_shown(session, s)]
    return sorted(staged, key=lambda item: item[1].first_seq)


def commit_collapse(session: Session, staged_event_id: str, *, drained: bool = False) -> CollapseCommitted:
    """Make a staged collapse take effect (no model call).

    Raises:
        ValidationError: no such staged collapse, or its span left the request since it was
            staged (a snip or a compaction took it).
    """
    check_session("session", session)
    staged = session.api_state.staged.get(staged_event_id)
    if staged is None:
        msg = f"no staged collapse {staged_event_id} in session {session.id!r}"
        raise ValidationError(msg, field="event_id")
    if not _still_shown(session, staged):
        msg = (
            f"staged collapse {staged_event_id} of session {session.id!r} covers messages a snip or a "
            "compaction has since taken out of the request: there is nothing left to collapse"
        )
        raise ValidationError(msg, field="event_id")
    event = CollapseCommitted(
        staged_event_id=staged_event_id,
        drained=drained,
        tokens_freed=max(0, staged.tokens_covered - staged.summary_tokens),
    )
    session.append([event])
    return event


def drain_collapses(session: Session) -> CollapseReport:
    """Commit every staged collapse still in the request at once, oldest first, without a model call."""
    check_session("session", session)
    before = session.used_tokens()
    staged = _committable(session)
    events = [
        CollapseCommitted(
            staged_event_id=event_id,
            drained=True,
            tokens_freed=max(0, s.tokens_covered - s.summary_tokens),
        )
        for event_id, s in staged
    ]
    if events:
        session.append(events)
    return CollapseReport(tuple(str(e.event_id) for e in events), before, session.used_tokens())


def collapse(session: Session, summarizer: Summarizer, from_uuid: str, to_uuid: str) -> CollapseReport:
    """Collapse the messages from ``from_uuid`` to ``to_uuid`` now: stage, then commit.

    Raises:
        ValidationError: unknown message, or a span that splits a tool pair or overlaps.
        SummaryFailedError: the summarizer failed (nothing is recorded).
    """
    check_session("session", session)
    before = session.used_tokens()
    start = session.message_index(from_uuid)
    end = _span_end(session, to_uuid)
    staged = stage_collapse(session, summarizer, start, end)
    committed = commit_collapse(session, str(staged.event_id))
    return CollapseReport((str(staged.event_id), str(committed.event_id)), before, session.used_tokens())


def _next_span(session: Session, config: CollapseConfig) -> tuple[int, int] | None:
    """The oldest uncovered span of ``span_rounds`` rounds that leaves ``keep_recent_rounds``."""
    state = session.api_state
    messages = state.messages
    # Spans behind a compact boundary or a snip no longer count: start at the first visible message.
    covered_end = max([state.first_visible, *(end for _, end in _covered(session))])
    start = next((i for i in range(covered_end, len(messages)) if _is_prompt(messages[i])), None)
    if start is None:
        return None
    total = sum(1 for m in messages[start:] if m["role"] == "assistant")
    rounds = 0
    for index in range(start, len(messages) - 1):
        if messages[index]["role"] == "assistant":
            rounds += 1
        elif rounds >= config.span_rounds and index > start and _is_prompt(messages[index]):
            return (start, index) if total - rounds >= config.keep_recent_rounds else None
    return None


#: Spans staged per pipeline run at most while the context stays above the commit mark.
MAX_SPANS_PER_RUN = 8


def collapse_stage(session: Session, config: CollapseConfig, summarizer: Summarizer) -> list[str]:
    """The pipeline stage: stage spans ahead of pressure, commit them from the commit mark.

    One span is staged per run below the commit mark; above it, spans are staged and committed
    (up to ``MAX_SPANS_PER_RUN``) until the context is below the mark. Returns the event ids.
    """
    if not config.enabled or session.api_state.query_source != "main":
        return []
    appended: list[str] = []
    effective = session.token_state().window.effective_window
    stage_mark = effective * config.stage_percent / 100
    commit_mark = effective * config.commit_percent / 100
    for _ in range(MAX_SPANS_PER_RUN):
        staged_one = False
        if session.used_tokens() >= stage_mark:
            span = _next_span(session, config)
            if span is not None:
                appended.append(str(stage_collapse(session, summarizer, *span).event_id))
                staged_one = True
        for event_id, _ in _committable(session):
            if session.used_tokens() < commit_mark:
                break
            appended.append(str(commit_collapse(session, event_id).event_id))
        if not staged_one or session.used_tokens() < commit_mark:
            break
    return appended


@dataclass(frozen=True)
class CollapseStage:
    """Collapse as a pipeline ``Stage``: ``collapse_stage`` appends each staging and commit itself.

    Each span is summarized by a model call between transactions, so the stage cannot batch its
    events; it reports the ids it appended and the drop in "used" tokens.
    """

    config: CollapseConfig = field(default_factory=CollapseConfig)
    summarizer: Summarizer = field(default_factory=OfflineSummarizer)
    name: str = field(default="collapse", init=False)

    def run(self, session: Session, now: datetime) -> StageReport | None:
        """Stage and commit spans by the marks; None when switched off (the default config)."""
        if not self.config.enabled:
            return None
        before = session.used_tokens()
        appended = collapse_stage(session, self.config, self.summarizer)
        return StageReport(self.name, max(0, before - session.used_tokens()), tuple(appended))

"""How full the context was at each turn, and what fills it now.

``token_timeline`` is the token gauge over a session's turns, with each context stage marked at
the turn it first shaped; ``context_breakdown`` is the ``/context`` view: the next request's tokens
by category. Both return data; the command line (``sessionstore plot``, ``context --breakdown``)
and the web viewer draw them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..projections import Session, TokenWindow, token_state, token_window
from ..projections._api_context import COLLAPSE_PREFIX, COMPACT_SUMMARY_PREFIX
from ..projections._digest import CONTEXT_OPERATIONS
from ..projections._session import check_source
from ..store import SessionStore
from ._audit import AuditEntry, audit

__all__ = [
    "BREAKDOWN_CATEGORIES",
    "BreakdownRow",
    "ContextBreakdown",
    "StageMarker",
    "TokenTimeline",
    "TurnTokens",
    "context_breakdown",
    "token_timeline",
]

#: Audited operations that change what the model sees (file rewinds and forks are not stages).
STAGE_KINDS = frozenset(CONTEXT_OPERATIONS)

#: The categories of ``context_breakdown``, in the order the rows come.
BREAKDOWN_CATEGORIES = ("system", "tools", "messages", "tool results", "summaries")


@dataclass(frozen=True)
class StageMarker:
    """A context operation on the timeline.

    ``turn`` is the first turn whose request it shaped (None: no turn after it yet);
    ``tokens_freed`` for a compaction is the view's size before it minus after it;
    ``reverted_by`` the event id of the revert that undid it, if any.
    """

    seq: int
    event_id: str
    kind: str
    what: str
    tokens_freed: int | None
    turn: int | None
    reverted_by: str | None = None


@dataclass(frozen=True)
class TurnTokens:
    """The context's size when turn ``turn`` (1-based) went to the model.

    ``source`` says where the number comes from: ``"served"``, the used tokens a served request
    recorded (``ContextServed``; turn N is ``served --turn N``), or ``"usage"``, the API's usage
    of the N-th response (a session with no served requests, e.g. one imported from Claude Code).
    """

    turn: int
    seq: int
    used: int
    percent_left: int
    source: str
    stages: tuple[StageMarker, ...] = ()


@dataclass(frozen=True)
class TokenTimeline:
    """Every turn's token count against the session's window, and the stages at each turn.

    ``pending`` holds the stages recorded after the last turn (they shape the next request).
    """

    session_id: str
    window: TokenWindow
    turns: list[TurnTokens]
    pending: list[StageMarker]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "window": dataclasses.asdict(self.window),
            "turns": [dataclasses.asdict(turn) for turn in self.turns],
            "pending": [dataclasses.asdict(marker) for marker in self.pending],
        }


def _session(source: Session | SessionStore, session_id: str | None) -> Session:
    if isinstance(source, Session):
        return source
    if session_id is None:
        raise TypeError("pass a Session, or a store and a session id")
    return Session(source, session_id)


def _window(session: Session) -> TokenWindow:
    return token_window(session.limits(), session.config.window)


def token_timeline(source: Session | SessionStore, session_id: str | None = None) -> TokenTimeline:
    """The token gauge of every turn, oldest first, with the context stages marked.

    A turn is a served request (``ContextServed``: its recorded used tokens); a session that
    served none (an import) has one turn per API response with usage (``UsageRecorded``: input,
    cache and output tokens). Each stage is marked at the first turn after it.

    Args:
        source: a live ``Session``, or a store (then ``session_id`` names the session).

    Raises:
        SessionNotFoundError: no such session (``SessionErasedError`` for an erased one).
    """
    check_source("source", source)
    session = _session(source, session_id)
    window = _window(session)
    transcript = session.transcript_digest
    served = [e for e in transcript if e.type == "context_served"]
    # (seq, used, the last seq the turn's request covers, source)
    points: list[tuple[int, int, int, str]]
    if served:
        points = [
            (e.seq, int(e.payload["token_count"]), int(e.payload["through_seq"]), "served") for e in served
        ]
    else:
        points = [
            (e.seq, _usage_total(e.payload), e.seq - 1, "usage")
            for e in transcript
            if e.type == "usage_recorded"
        ]
    covers = [point[2] for point in points]
    markers: dict[int | None, list[StageMarker]] = {}
    for entry in audit(session).entries:
        if entry.kind not in STAGE_KINDS:
            continue
        index = bisect.bisect_left(covers, entry.seq)
        turn = index + 1 if index < len(points) else None
        marker = StageMarker(
            entry.seq, entry.event_id, entry.kind, entry.what, _freed(entry), turn, entry.reverted_by
        )
        markers.setdefault(turn, []).append(marker)
    turns = [
        TurnTokens(
            number,
            seq,
            used,
            token_state(used, window).percent_left,
            kind,
            tuple(markers.get(number, ())),
        )
        for number, (seq, used, _, kind) in enumerate(points, start=1)
    ]
    return TokenTimeline(session.id, window, turns, markers.get(None, []))


def _freed(entry: AuditEntry) -> int | None:
    """What an operation freed; a compaction records the view's size before and after instead."""
    if entry.tokens_freed is None and entry.tokens_before is not None and entry.tokens_after is not None:
        return entry.tokens_before - entry.tokens_after
    return entry.tokens_freed


def _usage_total(payload: dict[str, Any]) -> int:
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    return sum(int(payload.get(key) or 0) for key in keys)


@dataclass(frozen=True)
class BreakdownRow:
    """One category of the next request: its estimated tokens and how many content blocks."""

    category: str
    tokens: int
    blocks: int


@dataclass(frozen=True)
class ContextBreakdown:
    """The next request by category, like Claude Code's ``/context``.

    ``rows`` count the request itself (the store's token counter, calibrated) and sum to
    ``estimated``; ``used`` is the session's used tokens (the latest API usage plus the estimate
    after it), which ``free`` (what is left of the effective window) and ``percent_left``
    measure; ``unattributed`` is ``used - estimated``, what the API counted that the rows do not
    (negative when the estimate is above the usage). The
    ``autocompact_buffer`` is the part of the effective window above the auto-compact threshold
    (0 when auto-compact is off).
    """

    session_id: str
    rows: list[BreakdownRow]
    estimated: int
    used: int
    unattributed: int
    window: TokenWindow
    free: int
    autocompact_buffer: int
    percent_left: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "rows": [dataclasses.asdict(row) for row in self.rows],
            "estimated": self.estimated,
            "used": self.used,
            "unattributed": self.unattributed,
            "free": self.free,
            "autocompact_buffer": self.autocompact_buffer,
            "percent_left": self.percent_left,
            "window": dataclasses.asdict(self.window),
        }


def context_breakdown(source: Session | SessionStore, session_id: str | None = None) -> ContextBreakdown:
    """What the next request holds, by category: system, tools, messages, tool results, summaries.

    A summary is the message a compaction or a committed collapse put in place of what it
    summarized; tool results are the ``tool_result`` blocks (persisted and cleared ones at
    their current size); every other block of a message is a message.

    Args:
        source: a live ``Session``, or a store (then ``session_id`` names the session).

    Raises:
        SessionNotFoundError: no such session (``SessionErasedError`` for an erased one).
    """
    check_source("source", source)
    session = _session(source, session_id)
    request = session.request(cache_control=False)
    raw = dict.fromkeys(BREAKDOWN_CATEGORIES, 0)
    blocks = dict.fromkeys(BREAKDOWN_CATEGORIES, 0)

    def add(category: str, text: str) -> None:
        raw[category] += session.count_text(text)
        blocks[category] += 1

    system = request.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add("system", block if isinstance(block, str) else str(block.get("text", "")))
    for tool in request.get("tools") or []:
        add("tools", json.dumps(tool, ensure_ascii=False, separators=(",", ":")))  # as the store counts it
    compact = session.api_state.compact
    verbatim = compact.summary if compact is not None and compact.verbatim else None
    for message in request["messages"]:
        content = message["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            add(_category(block, verbatim), _block_text(block))
    rows = [
        BreakdownRow(
            category,
            session.estimate(raw[category], blocks[category]) if blocks[category] else 0,
            blocks[category],
        )
        for category in BREAKDOWN_CATEGORIES
    ]
    state = session.token_state()
    window = state.window
    buffer = window.effective_window - window.autocompact_threshold if window.auto_compact_enabled else 0
    estimated = sum(row.tokens for row in rows)
    return ContextBreakdown(
        session.id,
        rows,
        estimated,
        state.used,
        state.used - estimated,
        window,
        max(0, window.effective_window - state.used),
        max(0, buffer),
        state.percent_left,
    )


def _category(block: dict[str, Any], verbatim_summary: str | None) -> str:
    kind = block.get("type")
    if kind == "tool_result":
        return "tool results"
    if kind == "text":
        text = str(block.get("text", ""))
        if text.startswith((COMPACT_SUMMARY_PREFIX, COLLAPSE_PREFIX)) or (
            verbatim_summary is not None and text == verbatim_summary
        ):
            return "summaries"
    return "messages"


def _block_text(block: dict[str, Any]) -> str:
    """What a block's tokens are counted on: its text, or its JSON for anything else."""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
        return str(block["content"])
    return json.dumps(block, ensure_ascii=False)

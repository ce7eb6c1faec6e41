"""Stage 3, micro-compact (SPEC 5.3): clear old tool results, locally or by the server."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..events import MicrocompactApplied, ServerEditsApplied
from ..projections import CLEARED_PLACEHOLDER, Session
from ..projections._session import check_session
from ..store._contract import check_int, check_number
from ._stage import StageReport, record_events
from ._tool_results import result_block, result_text, result_tokens

__all__ = [
    "COMPACTABLE_TOOLS",
    "CONTEXT_MANAGEMENT_BETA",
    "MicrocompactConfig",
    "MicrocompactStage",
    "microcompact",
    "microcompact_stage",
    "record_applied_edits",
    "server_side_edits",
]

COMPACTABLE_TOOLS = frozenset(
    {"Read", "Bash", "PowerShell", "Grep", "Glob", "WebSearch", "WebFetch", "Edit", "Write"}
)
#: The beta that enables server-side context editing in the Messages API.
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
#: The beta that enables the Messages API's own compaction (``compact_20260112``).


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

    def __post_init__(self) -> None:
        """Raises:
        ValidationError: ``gap_minutes`` is not a number (NaN and infinities are: they never
            fire), or a count is not an int.
        """
        check_number("gap_minutes", self.gap_minutes, finite=False)
        for name in ("keep_recent", "server_trigger_tokens", "server_clear_at_least"):
            check_int(name, getattr(self, name))


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
        original = result_text(result_block(session, tool_use_id))
        if original is None:
            original = json.dumps(result_block(session, tool_use_id).get("content"))
        freed += max(0, result_tokens(session, tool_use_id, original) - placeholder)
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
    check_session("session", session)
    keep = max(1, keep_recent)
    if tool_use_ids is not None:
        ids = list(dict.fromkeys(tool_use_ids))
        for tool_use_id in ids:
            result_block(session, tool_use_id)
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
    check_session("session", session)
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


@dataclass(frozen=True)
class MicrocompactStage:
    """Time-based micro-compact as a pipeline ``Stage``; it always reports, cleared or not.

    Its server-side path is no event but a request parameter: ``Pipeline.prepare`` adds it when
    this stage cleared nothing (its report lists no event).
    """

    config: MicrocompactConfig = field(default_factory=MicrocompactConfig)
    name: str = field(default="microcompact", init=False)

    def run(self, session: Session, now: datetime) -> StageReport:
        """Clear all but the newest results once the cache expired (by ``now``)."""
        cleared = microcompact_stage(session, self.config, now)
        return record_events(session, self.name, [cleared] if cleared else [])

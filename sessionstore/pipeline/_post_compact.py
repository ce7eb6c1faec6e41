"""What a compaction records beside its boundary: the preserved segment, listings told again,
and the sub-agents still running.

* ``with_preserved_segment``: the kept messages' first and last uuid, and the line they hang off
  (Claude Code's ``compactMetadata.preservedSegment``).
* ``post_compact_events``: a ``ListingDelta`` per listing with entries the request no longer
  shows after the boundary (announced before the kept messages, or never shown), and a
  ``SubagentStatusRestored`` per sub-agent still running. They are appended with the boundary,
  name it, and go with it when it is reverted.

A sub-agent runs from its ``SubagentStarted`` until a ``SubagentFinished`` names it, or, when not
``background``, until the parent's tool call that spawned it gets its result (the sub-agent's
answer). A ``SubagentStarted`` recorded after that result (an import links sub-agents there)
starts nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SessionNotFoundError
from ..events import CompactBoundary, Event, ListingDelta, PreservedSegment, SubagentStatusRestored, line_uuid
from ..projections import CollapseEdit, Session, TranscriptEntry
from ..store import RecordedEvent
from ._listings import LISTING_KINDS, listings, render_listing

__all__ = [
    "RunningSubagent",
    "kept_message_uuids",
    "post_compact_events",
    "running_subagents",
    "told_again",
    "with_preserved_segment",
]

#: How much of a running sub-agent's task is told again.
_TASK_CHARS = 2_000
#: How many of a child's first events are read to find its task.
_TASK_EVENTS = 16


@dataclass(frozen=True)
class RunningSubagent:
    """A sub-agent of the session that has not finished, as the log shows it."""

    child_session_id: str
    parent_tool_use_id: str | None
    agent_type: str | None
    background: bool
    started_seq: int


def kept_message_uuids(events: Iterable[RecordedEvent]) -> list[str]:
    """The uuids of the messages among ``events`` the request shows (no meta, no sidechain), in order."""
    uuids: list[str] = []
    seen: set[str] = set()
    for recorded in events:
        if recorded.type != "message_appended":
            continue
        payload = recorded.payload_dict()
        key = payload.get("message_uuid")
        if (
            isinstance(key, str)
            and not payload.get("is_meta")
            and not payload.get("is_sidechain")
            and key not in seen
        ):
            seen.add(key)
            uuids.append(key)
    return uuids


def _kept_seqs(session: Session, boundary: CompactBoundary) -> tuple[int, int]:
    """The seqs ``[first, stop)`` of the messages the boundary keeps verbatim (empty: none)."""
    state = session.api_state
    if boundary.summarized_from_seq:
        first = state.first_visible
        start = (
            state.message_first_seq[first] if first < len(state.messages) else boundary.summarized_from_seq
        )
        return start, boundary.summarized_from_seq
    if boundary.keep_from_seq:
        return boundary.keep_from_seq, session.last_seq + 1
    return 0, 0


def with_preserved_segment(session: Session, boundary: CompactBoundary) -> CompactBoundary:
    """``boundary`` (not yet appended) with the uuids of the messages it keeps; as it is if none."""
    first, stop = _kept_seqs(session, boundary)
    uuids = kept_message_uuids(session.log.read(first, stop - 1)) if first < stop else []
    if not uuids:
        return boundary
    anchor = line_uuid(str(boundary.event_id), "boundary" if boundary.summarized_from_seq else "summary")
    segment = PreservedSegment(head_uuid=uuids[0], anchor_uuid=anchor, tail_uuid=uuids[-1])
    return boundary.model_copy(update={"preserved_segment": segment})


def running_subagents(entries: Sequence[TranscriptEntry]) -> list[RunningSubagent]:
    """The sub-agents still running at the end of ``entries`` (a session's transcript), oldest first."""
    running: dict[str, RunningSubagent] = {}
    answered: set[str] = set()
    for entry in entries:
        payload = entry.payload
        if entry.type == "message_appended" and payload.get("role") == "user":
            for tool_use_id in _result_ids(payload.get("content")):
                answered.add(tool_use_id)
                for child, agent in list(running.items()):
                    if not agent.background and agent.parent_tool_use_id == tool_use_id:
                        del running[child]
        elif entry.type == "subagent_started":
            call = payload.get("parent_tool_use_id")
            background = payload.get("background") is True
            if not background and call in answered:
                continue  # linked after its answer: it had finished
            child = str(payload["child_session_id"])
            running[child] = RunningSubagent(child, call, payload.get("agent_type"), background, entry.seq)
        elif entry.type == "subagent_finished":
            running.pop(str(payload["child_session_id"]), None)
    return list(running.values())


def _result_ids(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [
        str(block["tool_use_id"])
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "tool_result"
        and isinstance(block.get("tool_use_id"), str)
    ]


def _task(session: Session, child_session_id: str) -> str | None:
    """The first prompt of a sub-agent's own log (its task), cut to ``_TASK_CHARS``."""
    try:
        events = session.store.read(child_session_id, 1, _TASK_EVENTS)
    except SessionNotFoundError:
        return None
    for recorded in events:
        if recorded.type != "message_appended":
            continue
        payload = recorded.payload_dict()
        if payload.get("role") != "user":
            continue
        content = payload.get("content")
        blocks = content if isinstance(content, list) else []
        texts = (
            [content]
            if isinstance(content, str)
            else [str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        )
        text = "\n".join(t for t in texts if t.strip())
        if text:
            return text if len(text) <= _TASK_CHARS else text[:_TASK_CHARS] + " [...]"
    return None


def _running_text(agent: RunningSubagent, task: str | None) -> str:
    kind = agent.agent_type or "sub-agent"
    call = f", for tool call {agent.parent_tool_use_id}" if agent.parent_tool_use_id else ""
    lines = [
        "<system-reminder>",
        f"A {kind} started before this summary is still running (session {agent.child_session_id}{call}).",
    ]
    if task:
        lines.append(f"Its task:\n{task}")
    lines.append("Its result will arrive when it finishes: do not start it again.")
    lines.append("</system-reminder>")
    return "\n".join(lines)


def _visible_after(session: Session, boundary: CompactBoundary, seq: int) -> bool:
    """True when a message recorded at ``seq`` is still in the request after ``boundary``."""
    first, stop = _kept_seqs(session, boundary)
    if not first <= seq < stop:
        return False
    # A committed collapse inside the kept messages shows its summary, not what it covers.
    state = session.api_state
    spans = [(e.first_seq, e.end_seq) for e in state.edits.values() if isinstance(e, CollapseEdit)]
    at = bisect.bisect_right(state.message_first_seq, seq) - 1
    began = state.message_first_seq[at] if at >= 0 else seq
    return not any(start <= began < end for start, end in spans)


def post_compact_events(session: Session, boundary: CompactBoundary) -> list[Event]:
    """The events to append right after ``boundary`` (not yet appended): listings told again and
    sub-agents still running, each naming the boundary."""
    entries = session.transcript_state.entries
    compaction = str(boundary.event_id)
    events: list[Event] = []
    known = listings(entries)
    for kind in LISTING_KINDS:
        again = {
            name: entry.line
            for name, entry in known[kind].items()
            if not (entry.shown and _visible_after(session, boundary, entry.seq))
        }
        if again:
            text = render_listing(kind, again, ())
            events.append(ListingDelta(kind=kind, added=again, text=text, compaction_event_id=compaction))
    for agent in running_subagents(entries):
        events.append(
            SubagentStatusRestored(
                compaction_event_id=compaction,
                child_session_id=agent.child_session_id,
                agent_type=agent.agent_type,
                parent_tool_use_id=agent.parent_tool_use_id,
                text=_running_text(agent, _task(session, agent.child_session_id)),
            )
        )
    return events


def told_again(session: Session, boundary: CompactBoundary) -> tuple[tuple[str, str, int], ...]:
    """(kind, name, raw tokens) of what ``post_compact_events`` would record with ``boundary``:
    ``("listing", listing kind, ...)`` and ``("subagent", child session, ...)`` (a dry run's lines)."""
    lines: list[tuple[str, str, int]] = []
    for told in post_compact_events(session, boundary):
        if isinstance(told, ListingDelta):
            lines.append(("listing", told.kind, session.count_text(told.text)))
        elif isinstance(told, SubagentStatusRestored):
            lines.append(("subagent", told.child_session_id, session.count_text(told.text)))
    return tuple(lines)

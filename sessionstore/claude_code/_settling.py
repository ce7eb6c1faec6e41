"""What the follower's settling rules read of a transcript, gathered as its lines are read.

A poll decides which lines are settled from facts about the whole file (every tool result, every
uuid, every API response's last chunk ...). Those facts are folds over the lines in file order,
so a file that grew only adds its new lines to them (``Folds.add``) instead of walking every line
at every poll; each line also keeps the little its own settling needs (``LineFacts``), so the
walk up to the first line held back touches no JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._import import _AGENT_TAIL, _SYNTHETIC_MODEL, _kept_record, _text_of
from ._lines import Line

__all__ = ["Folds", "LineFacts", "message_of"]

#: Text that every ``<task-notification>`` naming a sub-agent holds.
_TASK_ID = "<task-id>"


def message_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A ``user`` or ``assistant`` line's message (None for any other line)."""
    message = entry.get("message")
    return message if entry.get("type") in ("user", "assistant") and isinstance(message, dict) else None


def blocks(entry: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The content blocks of type ``kind`` of a message line."""
    message = message_of(entry)
    content = message.get("content") if message else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def agent_named_by(entry: dict[str, Any], block: dict[str, Any]) -> str | None:
    """The sub-agent a tool result names, as the importer links them."""
    result = entry.get("toolUseResult")
    agent = result.get("agentId") if isinstance(result, dict) else None
    if not isinstance(agent, str):
        tail = _AGENT_TAIL.search(_text_of(block.get("content")))
        agent = tail.group(1) if tail else None
    return agent or None


@dataclass(frozen=True)
class LineFacts:
    """What may hold one line back: the API response it is a chunk of, the tool calls it makes,
    and, for a ``compact_boundary``, the lines it needs."""

    api_id: str | None  # an assistant line's message id
    calls: tuple[tuple[str, object], ...]  # (tool_use id, tool name) of each call with a string id
    boundary: tuple[object, str | None, tuple[str, ...]] | None  # (uuid, anchor, kept uuids)

    @staticmethod
    def of(entry: dict[str, Any]) -> LineFacts | None:
        """The facts of ``entry``, or None when nothing in it can hold it back."""
        message = message_of(entry)
        api_id = None
        if message is not None and entry.get("type") == "assistant" and isinstance(message.get("id"), str):
            api_id = message["id"]
        calls = tuple(
            (b["id"], b.get("name")) for b in blocks(entry, "tool_use") if isinstance(b.get("id"), str)
        )
        boundary = None
        if entry.get("type") == "system" and entry.get("subtype") == "compact_boundary":
            anchor, kept = _kept_record(entry)  # read as the importer reads it
            boundary = (entry.get("uuid"), anchor, tuple(kept))
        if api_id is None and not calls and boundary is None:
            return None
        return LineFacts(api_id, calls, boundary)


@dataclass
class Folds:
    """Facts about every line of a file read so far, in file order (``add`` the lines read next)."""

    #: An assistant line names a real model (the session's model comes from one).
    has_model: bool = False
    #: tool_use id -> the sub-agent its (last) result names, "" for an error, None for neither.
    results: dict[str, str | None] = field(default_factory=dict)
    #: (line, sub-agent) of every tool result naming a sub-agent, in file order.
    named: list[tuple[int, str]] = field(default_factory=list)
    #: Every tool call's id.
    calls: set[str] = field(default_factory=set)
    uuids: set[str] = field(default_factory=set)
    #: The uuid and the parent of every ``isCompactSummary`` line.
    summaries: set[str] = field(default_factory=set)
    #: API message id -> the place of its last chunk; those with a stop_reason on a chunk.
    last_chunk: dict[str, int] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    #: The place of the last line that is neither tool results only nor written mid-response.
    last_other: int = -1
    #: (agentId, status) of every line's ``toolUseResult`` that is an object.
    agent_results: list[tuple[object, object]] = field(default_factory=list)
    #: The text of every message that holds a ``<task-id>`` (task notifications).
    task_texts: list[str] = field(default_factory=list)
    #: Each line's facts (None: nothing in it can hold it back), by place.
    facts: list[LineFacts | None] = field(default_factory=list)
    #: The first line whose assistant message names a real model (0: none yet).
    model_line: int = 0

    def copy(self) -> Folds:
        """A copy to add lines to, leaving this one as it was (a poll that fails keeps it)."""
        return Folds(
            self.has_model,
            dict(self.results),
            list(self.named),
            set(self.calls),
            set(self.uuids),
            set(self.summaries),
            dict(self.last_chunk),
            set(self.stopped),
            self.last_other,
            list(self.agent_results),
            list(self.task_texts),
            list(self.facts),
            self.model_line,
        )

    def add(self, lines: list[Line]) -> None:
        """Fold in ``lines``, the objects that follow those folded so far (kept whole)."""
        for line in lines:
            place = len(self.facts)
            entry = line.entry
            message = message_of(entry)
            self.facts.append(LineFacts.of(entry))
            kind = entry.get("type")
            if message is not None and kind == "assistant":
                model = message.get("model")
                if isinstance(model, str) and model != _SYNTHETIC_MODEL and not self.has_model:
                    self.has_model, self.model_line = True, line.number
                if isinstance(message.get("id"), str):
                    self.last_chunk[message["id"]] = place
                    if message.get("stop_reason") is not None:
                        self.stopped.add(message["id"])
            content = message.get("content") if message is not None else None
            only_results = (
                kind == "user"
                and isinstance(content, list)
                and bool(content)
                and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
            )
            if not only_results and not self._written_mid_response(entry):
                self.last_other = place
            for block in blocks(entry, "tool_result"):
                agent = agent_named_by(entry, block)
                self.results[str(block.get("tool_use_id"))] = "" if block.get("is_error") is True else agent
                if agent:
                    self.named.append((line.number, agent))
            for block in blocks(entry, "tool_use"):
                if isinstance(block.get("id"), str):
                    self.calls.add(block["id"])
            if isinstance(entry.get("uuid"), str):
                self.uuids.add(entry["uuid"])
            if entry.get("isCompactSummary") is True:
                self.summaries.update(
                    k for k in (entry.get("parentUuid"), entry.get("uuid")) if isinstance(k, str)
                )
            result = entry.get("toolUseResult")
            if isinstance(result, dict):
                self.agent_results.append((result.get("agentId"), result.get("status")))
            if message is not None:
                text = _text_of(message.get("content"))
                if _TASK_ID in text:
                    self.task_texts.append(text)

    def _written_mid_response(self, entry: dict[str, Any]) -> bool:
        """Whether Claude Code writes such a line while a response's chunks still come (its
        tool calls run as they stream): a tool's progress, a file-history snapshot before an
        edit. Like a tool result, it does not say the response is complete; a Stop hook's
        progress (no tool's) does."""
        kind = entry.get("type")
        if kind == "file-history-snapshot":
            return True
        return kind == "progress" and entry.get("parentToolUseID") in self.calls

    def complete(self, api_id: str) -> bool:
        """True when every chunk of the API response is written: one carries a stop_reason, or
        a line other than its own chunks and tool results follows its last."""
        return api_id in self.stopped or self.last_chunk.get(api_id, -1) < self.last_other

"""Events that tell the model what a compaction's summary cannot carry.

* ``ListingDelta``: what changed in a listing the model is told about beside the tool
  definitions (deferred tools, agent types, MCP server instructions). Recorded in the
  conversation when a listing changes, and again after a compaction for what the summary
  replaced (``compaction_event_id`` set): the model learns its listings anew.
* ``SubagentFinished``: a sub-agent's result was delivered to its parent. A sub-agent runs from
  its ``SubagentStarted`` until then (or, not in the background, until the spawning tool call's
  result arrives).
* ``SubagentStatusRestored``: after a compaction, one sub-agent still running, told again.

Each carries the exact ``text`` the model reads, so a rebuild sends the same bytes whatever later
versions would word differently.
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import Field

from ._base import Event, register_event

__all__ = [
    "ListingDelta",
    "ListingKind",
    "SubagentFinished",
    "SubagentStatusRestored",
    "line_uuid",
]

#: The listings a ``ListingDelta`` changes: Claude Code's ``deferred_tools_delta``,
#: ``agent_listing_delta`` and ``mcp_instructions_delta`` attachments.
ListingKind = Literal["deferred_tools", "agents", "mcp_instructions"]

#: Namespace of the uuids the transcript lines of native events get (export, preserved segments).
_LINE_NAMESPACE = uuid.UUID("9d6f1a52-3c7e-5b8a-8f40-1e2d3c4b5a69")


def line_uuid(event_id: str, part: str) -> str:
    """The uuid of the transcript line ``part`` of event ``event_id`` becomes (deterministic).

    A compaction's boundary line is ``"boundary"``, its summary line ``"summary"``: a preserved
    segment names them as its anchor before the line exists.
    """
    return str(uuid.uuid5(_LINE_NAMESPACE, f"{event_id}\n{part}"))


@register_event
class ListingDelta(Event):
    """A listing the model is told about changed, or is told again after a compaction.

    ``added`` maps each name to its line (a tool's or agent type's description, a server's
    instructions); ``removed`` names what left. ``shown``: False for a delta an import kept as
    state only (Claude Code's rendering of it is not in the transcript, so the request leaves it
    out; a later compaction still re-announces the entries).
    """

    type: Literal["listing_delta"] = "listing_delta"
    kind: ListingKind
    added: dict[str, str] = Field(default_factory=dict)
    removed: list[str] = Field(default_factory=list)
    #: What the model reads (empty when not shown).
    text: str = ""
    shown: bool = True
    #: Set: re-announced after this compaction (part of it: it goes when the compaction is reverted).
    compaction_event_id: str | None = None

    def countable_text(self) -> list[str] | None:
        """The text the model reads, when shown."""
        return [self.text] if self.shown and self.text else None


@register_event
class SubagentFinished(Event):
    """A sub-agent's result was delivered to the parent: it no longer runs."""

    type: Literal["subagent_finished"] = "subagent_finished"
    child_session_id: str
    status: Literal["completed", "failed", "stopped"] = "completed"


@register_event
class SubagentStatusRestored(Event):
    """After a compaction: a sub-agent still running, told to the model again (part of the compaction)."""

    type: Literal["subagent_status_restored"] = "subagent_status_restored"
    compaction_event_id: str
    child_session_id: str
    agent_type: str | None = None
    parent_tool_use_id: str | None = None
    text: str

    def countable_text(self) -> list[str]:
        """The text the model reads."""
        return [self.text]

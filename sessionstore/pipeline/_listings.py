"""Listings the model is told about beside the tool definitions, as deltas in the conversation.

An agent service may offer more than the ``tools`` it sends: tools deferred behind a search,
agent types for its sub-agent tool, MCP servers' instructions. The model learns them from
messages, so each change is recorded as a ``ListingDelta`` whose text joins the conversation
(``announce_listings``), and a compaction, whose summary cannot carry them, tells them again
(``sessionstore.pipeline._post_compact``). The listings are a fold of those deltas over the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

from ..events import ListingDelta, ListingKind
from ..projections import Session, TranscriptEntry
from ..projections._session import check_session

__all__ = ["LISTING_KINDS", "ListedEntry", "announce_listings", "listing_texts", "listings", "render_listing"]

LISTING_KINDS: tuple[ListingKind, ...] = get_args(ListingKind)

_ADDED_HEADINGS: dict[ListingKind, str] = {
    "deferred_tools": "These deferred tools are available (search for one to get its definition):",
    "agents": "These agent types are available to sub-agents:",
    "mcp_instructions": "Instructions from these MCP servers:",
}
_REMOVED_HEADINGS: dict[ListingKind, str] = {
    "deferred_tools": "These deferred tools are no longer available:",
    "agents": "These agent types are no longer available:",
    "mcp_instructions": "These MCP servers disconnected; their instructions no longer apply:",
}


@dataclass(frozen=True)
class ListedEntry:
    """One entry of a listing: its line, and the delta that last announced it."""

    line: str
    #: Seq of that delta (its text is in the conversation from there, when ``shown``).
    seq: int
    shown: bool


def render_listing(kind: ListingKind, added: Mapping[str, str], removed: Sequence[str]) -> str:
    """The text the model reads for a delta of ``kind`` (a system reminder)."""
    parts: list[str] = []
    if added:
        if kind == "mcp_instructions":
            body = "\n\n".join(f"## {name}\n{text}" for name, text in added.items())
        else:
            body = "\n".join(
                f"- {name}: {line}" if line and line != name else f"- {name}" for name, line in added.items()
            )
        parts.append(f"{_ADDED_HEADINGS[kind]}\n{body}")
    if removed:
        parts.append(_REMOVED_HEADINGS[kind] + "\n" + "\n".join(f"- {name}" for name in removed))
    return "<system-reminder>\n" + "\n\n".join(parts) + "\n</system-reminder>"


def listings(entries: Sequence[TranscriptEntry]) -> dict[ListingKind, dict[str, ListedEntry]]:
    """Every listing as the deltas in the conversation left it (re-announcements change nothing)."""
    out: dict[ListingKind, dict[str, ListedEntry]] = {kind: {} for kind in LISTING_KINDS}
    for entry in entries:
        payload = entry.payload
        if entry.type != "listing_delta" or payload.get("compaction_event_id") is not None:
            continue
        current = out[payload["kind"]]
        for name in payload.get("removed", ()):
            current.pop(name, None)
        shown = payload.get("shown", True) is True
        for name, line in payload.get("added", {}).items():
            current[name] = ListedEntry(str(line), entry.seq, shown)
    return out


def listing_texts(entries: Sequence[TranscriptEntry]) -> set[str]:
    """The texts of the deltas announced in the conversation (a summary need not repeat them)."""
    return {
        str(entry.payload["text"])
        for entry in entries
        if entry.type == "listing_delta"
        and entry.payload.get("compaction_event_id") is None
        and entry.payload.get("shown", True) is True
    }


def announce_listings(
    session: Session,
    *,
    deferred_tools: Mapping[str, str] | None = None,
    agents: Mapping[str, str] | None = None,
    mcp_instructions: Mapping[str, str] | None = None,
) -> list[ListingDelta]:
    """Record what changed in each listing given (None: unchanged); returns the deltas appended.

    Each argument is the whole listing now: name -> line (a deferred tool's or agent type's
    description, an MCP server's instructions). Entries new or with another line are announced,
    entries gone are announced removed, in one ``ListingDelta`` per listing that changed; their
    text joins the conversation where they are appended. Nothing changed: nothing is appended.
    """
    check_session("session", session)
    given: dict[ListingKind, Mapping[str, str] | None] = {
        "deferred_tools": deferred_tools,
        "agents": agents,
        "mcp_instructions": mcp_instructions,
    }
    known = listings(session.transcript_state.entries)
    deltas: list[ListingDelta] = []
    for kind, wanted in given.items():
        if wanted is None:
            continue
        current = known[kind]
        added = {
            name: line for name, line in wanted.items() if name not in current or current[name].line != line
        }
        removed = [name for name in current if name not in wanted]
        if added or removed:
            text = render_listing(kind, added, removed)
            deltas.append(ListingDelta(kind=kind, added=added, removed=removed, text=text))
    if deltas:
        session.append(deltas)
    return deltas

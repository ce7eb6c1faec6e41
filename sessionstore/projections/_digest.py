"""The transcript digest: the few fields of the few events the audit and the replays read.

The transcript view holds every event's payload, so it is as large as the log: on a long
imported session (tens of thousands of events) building it costs seconds and hundreds of
megabytes. ``audit``, ``served``, ``served --as-sent`` and the token gauge read only a sliver
of it: the audited operations, served requests and usage reports whole, the main-thread
messages' roles, uuids and tool-call ids, an imported compaction's metadata and the
``api-request`` lines' hashes. The digest keeps just that, as ``TranscriptEntry`` values whose
payloads are cut down to those fields, so the code that reads transcript entries reads digest
entries the same way.

It is snapshotted where the API context is at the end of an import (``take_snapshots``); a
reader folds the events after its snapshot (all of them when there is none) a page at a time,
holding one page of payloads at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ..store import RecordedEvent, SessionStore
from ._base import rebuild, register_projection
from ._transcript import TranscriptEntry, TranscriptProjection, TranscriptState

__all__ = [
    "AUDITED",
    "CONTEXT_OPERATIONS",
    "DIGEST_WHOLE",
    "SENT_KINDS",
    "TranscriptDigestProjection",
    "digest_entries",
]

#: Event types of the context stages: what changes (or tries to change) what the model sees.
CONTEXT_OPERATIONS = (
    "tool_result_persisted",
    "snip_applied",
    "microcompact_applied",
    "server_edits_applied",
    "collapse_staged",
    "collapse_committed",
    "context_edit_reverted",
    "session_memory_updated",
    "compact_boundary",
    "compact_failed",
)
#: Everything the audit lists: the context operations, compaction summaries prepared ahead (and
#: discarded), file rewinds, forks and bridged frameworks' own operations.
AUDITED = (
    *CONTEXT_OPERATIONS,
    "compaction_prepared",
    "compaction_preparation_discarded",
    "files_rewind_started",
    "files_rewound",
    "files_rewind_failed",
    "conversation_rewound",
    "langgraph_checkpoint",
    # An OpenAI Agents SDK session's removals, and their undoing (sessionstore.bridges.openai_agents).
    "openai_agents_item_popped",
    "openai_agents_session_cleared",
    "openai_agents_removal_reverted",
)
#: Events the digest keeps whole: the audited operations, the served requests and the API's
#: usage reports (the token gauge's turns when no request was served). A LangGraph checkpoint
#: is cut down instead (``_checkpoint_digest``): its values would make the digest the log.
DIGEST_WHOLE = frozenset({*AUDITED, "context_served", "usage_recorded"} - {"langgraph_checkpoint"})
_CHECKPOINT_KEYS = ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "step", "source")
#: Entry types of the lines recording the requests Claude Code sent (claude_code/_sent.py).
SENT_KINDS = frozenset({"api-request", "api-request-blob", "api-request-shape"})
#: An imported compaction's line, whose ``compactMetadata`` the audit shows.
IMPORTED_BOUNDARY = "system/compact_boundary"


def _checkpoint_digest(payload: dict[str, Any]) -> dict[str, Any]:
    """A LangGraph checkpoint cut down to what the audit shows: its ids, step and source, and each
    changed channel's base version and item count (None: not a grown list), without values."""
    channels = payload.get("channels")
    kept = {key: payload.get(key) for key in _CHECKPOINT_KEYS}
    kept["channels"] = {
        name: {
            "base_version": channel.get("base_version"),
            "item_count": len(channel["items"]) if isinstance(channel.get("items"), list) else None,
        }
        for name, channel in (channels.items() if isinstance(channels, dict) else ())
        if isinstance(channel, dict)
    }
    return kept


def _message_digest(payload: dict[str, Any]) -> dict[str, Any]:
    """A main-thread message cut down to its role, uuid and each block's type and tool-call id."""
    content = payload.get("content")
    if isinstance(content, list):
        blocks: Any = [_block_digest(block) for block in content]
    else:
        blocks = ""  # a string: no block to look at
    return {"role": payload.get("role"), "message_uuid": payload.get("message_uuid"), "content": blocks}


def _block_digest(block: object) -> object:
    if not isinstance(block, dict):
        return block
    kept = {"type": block.get("type")}
    for key in ("id", "tool_use_id"):
        if key in block:
            kept[key] = block[key]
    return kept


def _imported_digest(payload: dict[str, Any]) -> dict[str, Any] | None:
    """An ``api-request*`` or compact-boundary line cut down to what is read of it; None for others."""
    kind, entry = payload.get("entry_type"), payload.get("entry")
    if kind == IMPORTED_BOUNDARY and isinstance(entry, dict):
        cut = {"compactMetadata": entry["compactMetadata"]} if "compactMetadata" in entry else {}
        return {"entry_type": kind, "entry": cut, "events": payload.get("events", [])}
    if kind not in SENT_KINDS or not isinstance(entry, dict):
        return None
    line = payload.get("line")
    if kind == "api-request":
        return {"entry_type": kind, "line": line, "entry": entry}
    if kind == "api-request-blob":
        valid = isinstance(entry.get("hash"), str) and isinstance(entry.get("message"), dict)
        return {"entry_type": kind, "line": line, "entry": {"hash": entry.get("hash"), "valid": valid}}
    return {"entry_type": kind, "line": line, "entry": {"shapeHash": entry.get("shapeHash")}}


@register_projection
class TranscriptDigestProjection(TranscriptProjection):
    """Folds the events the audit and the replays read, cut down (see the module docstring); its
    state and snapshots are the transcript's, with fewer and smaller entries."""

    name: ClassVar[str] = "transcript_digest"
    #: 2: usage reports too. 3: a LangGraph checkpoint without its values.
    version: ClassVar[int] = 3

    def apply(self, state: TranscriptState, event: RecordedEvent) -> TranscriptState:
        """Keep the event, cut down, if a report reads it."""
        kind = event.type
        payload: dict[str, Any] | None = None
        if kind in DIGEST_WHOLE:
            payload = event.payload_dict()
        elif kind == "langgraph_checkpoint":
            payload = _checkpoint_digest(event.payload_dict())
        elif kind == "message_appended":
            whole = event.payload_dict()
            if not whole.get("is_meta") and not whole.get("is_sidechain"):
                payload = _message_digest(whole)
        elif kind in ("imported_entry", "opaque_entry") and _may_be_read(event.payload):
            payload = _imported_digest(event.payload_dict())
        if payload is not None:
            state.entries.append(TranscriptEntry(event.seq, kind, payload, event.token_count, event.event_id))
        return state


def _may_be_read(text: str) -> bool:
    """Whether an imported line's payload text can name an entry type the digest keeps.

    The stored text is canonical JSON, which escapes no letter: an entry type of ``api-request*``
    or ``system/compact_boundary`` appears in it verbatim, so most lines are passed over unparsed.
    """
    return '"api-request' in text or IMPORTED_BOUNDARY in text


def digest_entries(
    store: SessionStore,
    session_id: str,
    read: Callable[[int, int | None], list[RecordedEvent]],
    last_seq: int,
    *,
    tokenizer: str,
    use_snapshots: bool = True,
) -> list[TranscriptEntry]:
    """The digest of seqs 1..``last_seq``: its latest snapshot (if any, not beyond) and the
    events after it, folded a page at a time (``rebuild``)."""
    state, _ = rebuild(
        store,
        session_id,
        TranscriptDigestProjection(),
        tokenizer=tokenizer,
        use_snapshots=use_snapshots,
        to_seq=last_seq,
        read=read,
    )
    return state.entries

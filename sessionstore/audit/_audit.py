"""The audit surface: every context operation of a session as one timeline, and replays of
what the model was served.

Everything here is read from the log: ``audit`` walks the transcript's digest (the events it
reports, and the messages' uuids and tool-call ids: projections/_digest.py) and reads what each
compaction and snip found in the view from the API context (``views_at_changes``), so it never
holds every payload nor folds the log again; ``served_request`` folds the API view up to the
seq a ``ContextServed`` covers (from the latest snapshot before it) and checks the rebuilt bytes
against the fingerprint recorded when the request went out; ``view_diff`` compares the request
at two seqs.
It returns data; the command line (``sessionstore/cli/_render.py``) draws the tables.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import DataCorruptionError, ValidationError
from ..pipeline._collapse import collapsed_messages, shown_messages
from ..pipeline._compaction import MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
from ..projections import Session, TranscriptEntry, materialize, request_bytes
from ..projections._api_records import ViewAtChange
from ..projections._digest import AUDITED
from ..projections._session import check_session, check_source
from ..store import ErasureReceipt, SessionStore
from ..store._contract import check_int, check_store

__all__ = [
    "AuditEntry",
    "AuditReport",
    "ServedReplay",
    "audit",
    "served_request",
    "turn_diff",
    "view_diff",
]

#: The events that undo an earlier one (``target_event_id``), marking it ``reverted_by``.
_REVERTS = ("context_edit_reverted", "openai_agents_removal_reverted")


@dataclass(frozen=True)
class AuditEntry:
    """One operation: when, what, how many tokens it moved, and whether it was undone.

    ``turn`` is the first served request (1-based, as ``served --turn``) the operation shaped;
    None when no request was served after it. For a collapse commit, a compaction and a snip,
    ``details["replaced"]`` lists the message events the model stopped seeing (uuids and seq
    range), and what it saw instead (``details["summary"]``; a snip has none); for a compaction whose
    summarization prompt was too long, ``details["ptl_dropped"]`` lists the messages the
    retries dropped before summarizing (they are in ``replaced`` too, but not in the summary).
    """

    seq: int
    event_id: str
    kind: str
    what: str
    tokens_freed: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    reverted_by: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    turn: int | None = None


@dataclass(frozen=True)
class AuditReport:
    """The timeline, the breaker's state and how many requests were served.

    For an erased session the log is gone (purged) or unreadable (shredded): ``erasure`` holds
    its receipt, the one record of what was there, and the timeline is empty.
    """

    session_id: str
    entries: list[AuditEntry]
    requests_served: int
    consecutive_auto_compact_failures: int
    breaker_open: bool
    erasure: ErasureReceipt | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "requests_served": self.requests_served,
            "breaker": {
                "consecutive_auto_compact_failures": self.consecutive_auto_compact_failures,
                "open": self.breaker_open,
            },
            "entries": [dataclasses.asdict(entry) for entry in self.entries],
            "erasure": None if self.erasure is None else self.erasure.to_dict(),
        }


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(entry: TranscriptEntry) -> AuditEntry:
    """One transcript entry of an audited type as a timeline entry."""
    p = entry.payload
    kind = entry.type
    freed: int | None = None
    before: int | None = None
    details: dict[str, Any] = {}
    if kind == "tool_result_persisted":
        what = (
            f"{p.get('tool_name') or 'tool'} result {p['tool_use_id']} "
            f"({p['original_chars']} chars, {p['reason']}) -> {p['location']}"
        )
        freed, details = p.get("tokens_freed"), {"blob": p["blob_sha256"]}
    elif kind == "langgraph_checkpoint":
        what, details = _describe_langgraph_checkpoint(p)
    elif kind == "snip_applied":
        what = f"{p['rounds_removed']} oldest rounds ({p['messages_removed']} messages) out of the request"
        freed, details = p["tokens_freed"], {"keep_from_seq": p["keep_from_seq"]}
    elif kind == "microcompact_applied":
        ids = p["cleared_tool_use_ids"]
        what = f"{p['trigger']}: {len(ids)} old tool results cleared, newest {p['keep_recent']} kept"
        freed, details = p["tokens_freed"], {"cleared": ids, "gap_minutes": p.get("gap_minutes")}
    elif kind == "server_edits_applied":
        what = f"server cleared {p['cleared_input_tokens']} input tokens"
        freed, details = p["cleared_input_tokens"], {"edits": p["edits"]}
    elif kind == "collapse_staged":
        span = f"{p.get('first_message_uuid')} .. {p.get('last_message_uuid')}"
        what = f"collapse staged for {span}: {_clip(p['summary'], 80)}"
        details = {k: p[k] for k in ("summary", "tokens_covered", "summary_tokens")}
    elif kind == "collapse_committed":
        drained = " (drained)" if p.get("drained") else ""
        what = f"collapse committed{drained} from staged {p['staged_event_id']}"
        freed, details = p["tokens_freed"], {"staged_event_id": p["staged_event_id"]}
    elif kind == "context_edit_reverted":
        what = f"reverted {p['target_type']} {p['target_event_id']}"
        details = {"target_event_id": p["target_event_id"]}
    elif kind == "openai_agents_item_popped":
        what = f"pop_item removed item {p['index']} of items added by {p['added_event_id']}"
        details = {"added_event_id": p["added_event_id"], "index": p["index"]}
    elif kind == "openai_agents_session_cleared":
        what = "clear_session removed every item added before it"
    elif kind == "openai_agents_removal_reverted":
        what = f"reverted {p['target_type']} {p['target_event_id']}: its items are back"
        details = {"target_event_id": p["target_event_id"]}
    elif kind == "session_memory_updated":
        what = f"session memory updated through seq {p['last_summarized_seq']}"
        details = {"memory": p["memory"]}
    elif kind == "compact_boundary":
        how = f"{p['trigger']}, {p['strategy']}, {p['template']}, {p['summarizer']}"
        what = f"compaction ({how}): {_clip(p['summary'], 80)}"
        before = p["pre_compact_tokens"]
        details = {
            "summary": p["summary"],
            "keep_from_seq": p["keep_from_seq"],
            "last_pre_compact_uuid": p.get("last_pre_compact_uuid"),
            "attachments": [a.get("name") for a in p.get("attachments", [])],
            "hook_results": p.get("hook_results", []),
            "ptl_retries": p.get("ptl_retries", 0),
            "prepared_event_id": p.get("prepared_event_id"),
        }
    elif kind == "compaction_prepared":
        what = f"compaction summary prepared through seq {p['through_seq']}: {_clip(p['summary'], 80)}"
        before = p["tokens_at_preparation"]
        details = {
            k: p.get(k) for k in ("summary", "through_seq", "summary_tokens", "base_compaction_event_id")
        }
    elif kind == "compaction_preparation_discarded":
        prepared = p["prepared_event_id"]
        what = f"prepared compaction {prepared} discarded ({p['reason']}): {_clip(p['detail'], 80)}"
        details = {k: p[k] for k in ("prepared_event_id", "reason", "detail")}
    elif kind == "compact_failed":
        what = f"compaction failed ({p['trigger']}): {_clip(p['reason'])}"
        details = {"reason": p["reason"]}
    elif kind == "files_rewind_started":
        counts = f"{len(p.get('restore', []))} to restore, {len(p.get('delete', []))} to delete"
        what = f"files rewind to {p['message_uuid']} started: {counts}"
        details = {k: p.get(k) for k in ("restore", "delete")}
    elif kind == "files_rewind_failed":
        done, planned = len(p["applied"]), len(p["applied"]) + len(p["not_applied"])
        what = f"files rewind to {p['message_uuid']} FAILED after {done} of {planned} changes"
        what += f": {_clip(p['error'], 80)}; files are mixed until a rewind finishes"
        details = {k: p.get(k) for k in ("applied", "not_applied", "error", "started_event_id")}
    elif kind == "files_rewound":
        counts = f"{len(p.get('restored', []))} restored, {len(p.get('deleted', []))} deleted"
        what = f"files rewound to {p['message_uuid']}: {counts}"
        details = {k: p.get(k) for k in ("restored", "deleted", "started_event_id")}
    else:
        what = f"conversation forked at {p['message_uuid']} as {p['fork_session_id']}"
        details = {"fork_session_id": p["fork_session_id"]}
    return AuditEntry(entry.seq, entry.event_id, kind, what, freed, before, None, None, details)


def audit(session: Session | SessionStore, session_id: str | None = None) -> AuditReport:
    """Every context operation of the session, oldest first, with the breaker's state.

    Pass a live ``Session``, or a store and a session id: then an erased session answers with
    its erasure receipt and no timeline, rather than SessionErasedError, since the receipt is
    what an auditor of an erased session has to see.
    """
    check_source("session", session)
    if not isinstance(session, Session):
        if session_id is None:
            raise TypeError("audit(store, session_id): the session id is missing")
        receipt = session.erasure(session_id)
        if receipt is not None:
            return AuditReport(session_id, [], 0, 0, False, erasure=receipt)
        session = Session(session, session_id)
    transcript = session.transcript_digest
    entries = [e for e in transcript if e.type in AUDITED]
    reverted = {str(e.payload["target_event_id"]): e for e in entries if e.type in _REVERTS}
    served = [int(e.payload["through_seq"]) for e in transcript if e.type == "context_served"]
    compactions = _compactions(session, transcript)
    staged = {e.event_id: e.payload for e in entries if e.type == "collapse_staged"}
    timeline = []
    for entry in entries:
        described = _describe(entry)
        revert = reverted.get(entry.event_id)
        if revert is not None:
            described = dataclasses.replace(described, reverted_by=revert.event_id)
        described = dataclasses.replace(described, turn=_first_turn(served, entry.seq, revert))
        if entry.type == "collapse_committed" and entry.payload["staged_event_id"] in staged:
            described = _with_collapsed(described, transcript, staged[entry.payload["staged_event_id"]])
        elif entry.type == "compact_boundary":
            described = _with_compacted(described, _compaction_at(session, compactions, entry))
        elif entry.type == "snip_applied":
            described = _with_snipped(described, _compaction_at(session, compactions, entry))
        timeline.append(described)
    timeline = _with_unfinished_rewinds(timeline)
    timeline = _with_langgraph_forks(timeline)
    timeline = _with_source_metadata(transcript, timeline)
    failures = session.api_state.compact_failures
    return AuditReport(
        session.id, timeline, len(served), failures, failures >= MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
    )


def _describe_langgraph_checkpoint(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A LangGraph checkpoint (sessionstore.bridges.langgraph), as the transcript digest keeps it:
    its step, the channels it changed (a grown list by how many items), and the checkpoint it
    follows."""
    changed = []
    for name, channel in p.get("channels", {}).items():
        count = channel.get("item_count")
        grown = count is not None and channel.get("base_version") is not None
        changed.append(f"{name} +{count}" if grown else name)
    where = f" in {p['checkpoint_ns']}" if p.get("checkpoint_ns") else ""
    step = f"step {p.get('step')}, {p.get('source') or 'unknown source'}"
    what = f"LangGraph checkpoint{where} ({step}): {', '.join(changed) or 'no channel changed'}"
    keys = ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id")
    return what, {key: p.get(key) for key in keys}


def _with_langgraph_forks(timeline: list[AuditEntry]) -> list[AuditEntry]:
    """Mark each LangGraph checkpoint whose parent is not the newest one before it in its
    namespace: there the thread went back in time and forked."""
    newest: dict[str, str] = {}
    marked = []
    for entry in timeline:
        if entry.kind == "langgraph_checkpoint":
            ns, parent = entry.details["checkpoint_ns"], entry.details["parent_checkpoint_id"]
            if parent is not None and ns in newest and parent != newest[ns]:
                entry = dataclasses.replace(entry, what=f"{entry.what}; FORK from checkpoint {parent}")
            newest[ns] = entry.details["checkpoint_id"]
        marked.append(entry)
    return marked


def _with_unfinished_rewinds(timeline: list[AuditEntry]) -> list[AuditEntry]:
    """Mark each files rewind that started and recorded no outcome: it was killed half way."""
    closed = {
        entry.details.get("started_event_id")
        for entry in timeline
        if entry.kind in ("files_rewound", "files_rewind_failed")
    }
    return [
        dataclasses.replace(
            entry, what=entry.what + "; INTERRUPTED (no outcome recorded): files may be mixed"
        )
        if entry.kind == "files_rewind_started" and entry.event_id not in closed
        else entry
        for entry in timeline
    ]


def _first_turn(served: list[int], seq: int, revert: TranscriptEntry | None) -> int | None:
    """The first served request (1-based) that covers ``seq``; None if none, or if the operation
    was reverted before it (no request ever carried it)."""
    turn = bisect.bisect_left(served, seq) + 1
    if turn > len(served) or (revert is not None and revert.seq <= served[turn - 1]):
        return None
    return turn


def _messages(entries: list[TranscriptEntry]) -> dict[str, Any]:
    """Message events as the audit lists them: how many, their seq range and their uuids."""
    return {
        "count": len(entries),
        "first_seq": entries[0].seq if entries else None,
        "last_seq": entries[-1].seq if entries else None,
        "uuids": [str(e.payload.get("message_uuid")) for e in entries],
    }


def _span_text(listed: dict[str, Any]) -> str:
    if not listed["count"]:
        return "no messages"
    plural = "s" if listed["count"] != 1 else ""
    return f"{listed['count']} message{plural} (seq {listed['first_seq']}-{listed['last_seq']})"


def _with_collapsed(
    entry: AuditEntry, transcript: list[TranscriptEntry], staged: dict[str, Any]
) -> AuditEntry:
    """A collapse commit with the messages its span took out of the request and its summary."""
    replaced = _messages(collapsed_messages(transcript, int(staged["first_seq"]), int(staged["end_seq"])))
    return dataclasses.replace(
        entry,
        what=f"{entry.what}: replaced {_span_text(replaced)} with a summary",
        details={**entry.details, "replaced": replaced, "summary": staged["summary"]},
    )


@dataclass(frozen=True)
class _Compacted:
    """What one compaction took out of the request, and the view's size right after it."""

    replaced: list[TranscriptEntry]
    ptl_dropped: list[TranscriptEntry]
    tokens_after: int | None
    #: A snip: the committed collapses whose summaries it took out with the span.
    collapses: list[str] = field(default_factory=list)


def _with_compacted(entry: AuditEntry, compacted: _Compacted) -> AuditEntry:
    replaced = _messages(compacted.replaced)
    details = {**entry.details, "replaced": replaced}
    what = f"{entry.what}; replaced {_span_text(replaced)}"
    if compacted.ptl_dropped:
        details["ptl_dropped"] = _messages(compacted.ptl_dropped)
        what += f", of which {_span_text(details['ptl_dropped'])} were dropped unsummarized (prompt too long)"
    return dataclasses.replace(entry, what=what, details=details, tokens_after=compacted.tokens_after)


def _with_snipped(entry: AuditEntry, snipped: _Compacted) -> AuditEntry:
    removed = _messages(snipped.replaced)
    what = f"{entry.what}: removed {_span_text(removed)}"
    details = {**entry.details, "replaced": removed}
    if snipped.collapses:
        what += f" and the summaries of {len(snipped.collapses)} collapse(s)"
        details["collapses_removed"] = snipped.collapses
    return dataclasses.replace(entry, what=what, details=details)


def _collapses_before(before: ViewAtChange, keep_from_seq: int) -> list[str]:
    """The committed collapses (their commit event ids) whose spans end before ``keep_from_seq``."""
    first = before.first_seq if before.first_seq is not None else 0
    spans = zip(before.collapse_event_ids, before.collapse_first_seqs, before.collapse_end_seqs, strict=True)
    return [event_id for event_id, start, end in spans if first <= start and end <= keep_from_seq]


def _compactions(session: Session, transcript: list[TranscriptEntry]) -> dict[int, _Compacted]:
    """Each compaction and snip (by seq): the messages it took out, derived from the view before it.

    The API context keeps the view as each boundary and snip found it (``views_at_changes``):
    at each, the raw messages still visible (after earlier boundaries and snips, outside
    committed collapses, whose summaries stood in for them) that it does not keep.
    """
    changes = {e.seq: e for e in transcript if e.type in ("compact_boundary", "snip_applied")}
    if not changes:
        return {}
    shown = shown_messages(transcript)
    out: dict[int, _Compacted] = {}
    for before in session.api_state.views_at_changes:
        change = changes.get(before.seq)
        if change is None:
            continue
        if change.type == "snip_applied":
            removed = _snipped_messages(before, transcript, change.payload)
            summaries = _collapses_before(before, int(change.payload["keep_from_seq"]))
            out[before.seq] = _Compacted(removed, [], None, summaries)
            continue
        replaced = _compacted_messages(before, transcript, shown, before.seq, change.payload)
        dropped_before = int(change.payload.get("ptl_dropped_before_seq") or 0)
        ptl_dropped = [e for e in replaced if e.seq < dropped_before]
        if before.tokens_after is None or before.blocks_after is None:
            raise _no_view(session, change, "with no token count after it")
        after = session.estimate(before.tokens_after, before.blocks_after)
        out[before.seq] = _Compacted(replaced, ptl_dropped, after)
    return out


def _compaction_at(
    session: Session, compactions: dict[int, _Compacted], entry: TranscriptEntry
) -> _Compacted:
    """What the boundary or snip ``entry`` took out; the API context keeps a view at each one."""
    found = compactions.get(entry.seq)
    if found is None:
        raise _no_view(session, entry, "")
    return found


def _no_view(session: Session, change: TranscriptEntry, what: str) -> DataCorruptionError:
    """The API context (folded from its latest snapshot) lacks a usable view at ``change``: the
    snapshot is not what a fold wrote (a fold keeps one at every boundary and snip)."""
    msg = (
        f"session {session.id}: the api_context snapshot keeps no view at the {change.type} at "
        f"seq {change.seq}{' ' + what if what else ''}; delete the session's api_context "
        "snapshots (or open it with use_snapshots=False) to fold the log instead"
    )
    return DataCorruptionError(msg, session_id=session.id, seq=change.seq)


def _hidden_seqs(before: ViewAtChange, transcript: list[TranscriptEntry]) -> set[int]:
    """Seqs of message events a summary already stood in for in ``before``: committed collapses,
    and the part an earlier partial "from" compaction summarized."""
    hidden = {
        e.seq
        for start, end in zip(before.collapse_first_seqs, before.collapse_end_seqs, strict=True)
        for e in collapsed_messages(transcript, start, end)
    }
    if before.compact_from_seq:
        hidden.update(range(before.compact_from_seq, before.compact_seq))
    return hidden


def _snipped_messages(
    before: ViewAtChange, transcript: list[TranscriptEntry], snip: dict[str, Any]
) -> list[TranscriptEntry]:
    """The message events visible raw in ``before`` that a snip takes out: the span up to its cut,
    and the results opening the first kept message (their calls are in the span)."""
    keep = int(snip["keep_from_seq"])
    start = before.first_seq if before.first_seq is not None else keep
    hidden = _hidden_seqs(before, transcript)
    return [e for e in collapsed_messages(transcript, start, keep) if e.seq not in hidden]


def _compacted_messages(
    before: ViewAtChange,
    transcript: list[TranscriptEntry],
    shown: list[TranscriptEntry],
    seq: int,
    boundary: dict[str, Any],
) -> list[TranscriptEntry]:
    """The message events visible raw in ``before`` that the boundary at ``seq`` summarizes."""
    start = before.first_seq if before.first_seq is not None else seq
    stop = seq
    if boundary.get("summarized_from_seq"):
        start = max(start, int(boundary["summarized_from_seq"]))
    elif boundary.get("keep_from_seq"):
        stop = int(boundary["keep_from_seq"])
    hidden = _hidden_seqs(before, transcript)
    return [e for e in shown if start <= e.seq < stop and e.seq not in hidden]


def _source_metadata(transcript: list[TranscriptEntry]) -> dict[str, dict[str, Any]]:
    """Imported compactions: the boundary's event id -> the ``compactMetadata`` Claude Code wrote."""
    found: dict[str, dict[str, Any]] = {}
    for entry in transcript:
        if entry.type == "imported_entry" and entry.payload.get("entry_type") == "system/compact_boundary":
            metadata = entry.payload["entry"].get("compactMetadata")
            for event_id in entry.payload.get("events", []):
                if isinstance(metadata, dict):
                    found[str(event_id)] = metadata
    return found


def _count(value: object) -> int | None:
    """A count Claude Code recorded (None: absent, or not a non-negative int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _source_notes(source: dict[str, Any], keep_from_seq: object) -> list[str]:
    """What an imported boundary's ``compactMetadata`` adds to its line: the messages kept, the
    tokens after it, how long it took, what compactions dropped so far (each only when recorded
    as a count)."""
    kept = source.get("preservedMessages")
    uuids = kept.get("uuids") if isinstance(kept, dict) else None
    notes = []
    if isinstance(uuids, list) and uuids:
        notes.append(f"{len(uuids)} messages kept verbatim from seq {keep_from_seq}")
    after, took, dropped = (
        _count(source.get(k)) for k in ("postTokens", "durationMs", "cumulativeDroppedTokens")
    )
    if after is not None:
        notes.append(f"{after} tokens after")
    if took is not None:
        notes.append(f"took {took} ms")
    if dropped:
        notes.append(f"{dropped} dropped so far")
    return notes


def _with_source_metadata(transcript: list[TranscriptEntry], timeline: list[AuditEntry]) -> list[AuditEntry]:
    """An imported compaction also shows what its source recorded: kept messages, token counts."""
    metadata = _source_metadata(transcript)
    result = []
    for entry in timeline:
        source = metadata.get(entry.event_id) if entry.kind == "compact_boundary" else None
        if source is not None:
            notes = _source_notes(source, entry.details["keep_from_seq"])
            what = entry.what + (f" [Claude Code: {'; '.join(notes)}]" if notes else "")
            entry = dataclasses.replace(
                entry, what=what, details={**entry.details, "source_metadata": source}
            )
        result.append(entry)
    return result


@dataclass(frozen=True)
class ServedReplay:
    """A request rebuilt from the log, and whether it matches what was served."""

    turn: int
    served_event_id: str
    through_seq: int
    request: dict[str, Any]
    fingerprint: str
    matches: bool


def check_turn(store: SessionStore, session_id: str, turn: int) -> None:
    """Refuse a turn the session cannot have, before any of its log is read: each turn is one
    event, so a turn past the last seq (or below 1, or past 64 bits) is no turn.

    Raises:
        ValidationError: no such turn (``field`` "turn").
        SessionNotFoundError: no such session.
    """
    check_store("store", store)
    check_int("turn", turn)
    last = store.visible_log(session_id).last_seq()
    if not 1 <= turn <= last:
        msg = f"session {session_id!r} has {last} events, so fewer turns; there is no turn {turn}"
        raise ValidationError(msg, field="turn")


def served_request(session: Session, turn: int) -> ServedReplay:
    """The request served at ``turn`` (1 = the first ``ContextServed``), rebuilt from the log.

    Raises:
        ValidationError: no such turn.
    """
    check_session("session", session)
    check_int("turn", turn)
    # Each turn is one event: a turn past the log's last seq is refused before the log is read.
    if not 1 <= turn <= session.last_seq:
        msg = f"session {session.id!r} has {session.last_seq} events, so fewer turns; there is no turn {turn}"
        raise ValidationError(msg, field="turn")
    served = [e for e in session.transcript_digest if e.type == "context_served"]
    if not 1 <= turn <= len(served):
        msg = f"session {session.id!r} served {len(served)} requests; there is no turn {turn}"
        raise ValidationError(msg, field="turn")
    entry = served[turn - 1]
    payload = entry.payload
    state = session.api_state_at(int(payload["through_seq"]))
    request = materialize(state, cache_control=bool(payload.get("cache_control", False)))
    request.update(payload.get("extra") or {})
    fingerprint = hashlib.sha256(request_bytes(request)).hexdigest()
    return ServedReplay(
        turn,
        entry.event_id,
        int(payload["through_seq"]),
        request,
        fingerprint,
        fingerprint == payload["fingerprint"],
    )


def _unified(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> str:
    """A unified diff of two requests as indented JSON."""

    def lines(request: dict[str, Any]) -> list[str]:
        return json.dumps(request, indent=1, ensure_ascii=False).splitlines()

    return "\n".join(difflib.unified_diff(lines(a), lines(b), name_a, name_b, lineterm=""))


def view_diff(session: Session, seq_a: int, seq_b: int) -> str:
    """A unified diff of the request as it was at ``seq_a`` and at ``seq_b`` (indented JSON)."""
    check_session("session", session)
    before = materialize(session.api_state_at(seq_a))
    after = materialize(session.api_state_at(seq_b))
    return _unified(before, after, f"seq {seq_a}", f"seq {seq_b}")


def turn_diff(session: Session, turn_a: int, turn_b: int) -> str:
    """A unified diff of the requests served at ``turn_a`` and ``turn_b``, as they were served
    (prompt-cache breakpoints and extra keys included), in ``view_diff``'s format.

    Raises:
        ValidationError: no such turn.
    """
    check_session("session", session)
    before, after = served_request(session, turn_a), served_request(session, turn_b)
    return _unified(before.request, after.request, f"turn {turn_a}", f"turn {turn_b}")

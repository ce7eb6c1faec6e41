"""Export a session as Claude Code JSONL that Claude Code can resume.

An imported session is written back line for line: each ``ImportedEntry`` (with its message
content put back) and ``OpaqueEntry`` goes to its original line number, as compact JSON in its
original key order, which is byte for byte what Claude Code wrote. Events appended after the
import (or a session that was never imported) become new lines after those, in log order,
chained by ``parentUuid`` so Claude Code's resume follows them: messages, compact boundaries
with their summary (unless reverted: the messages after one then chain to those before it), and
micro-compactions. Events Claude Code has no line for (snips, reverts, served contexts, ...) are
not exported; the store keeps them. An imported compaction's lines are written back as they
were, reverted or not.

``write_claude_code`` lays out a project folder as Claude Code does: ``<sessionId>.jsonl``,
sub-agents under ``<sessionId>/subagents/agent-<id>.jsonl`` (with their ``.meta.json`` when one
was imported) and spilled tool outputs under ``<sessionId>/tool-results/``.

Nothing holds a session whole: ``_index`` reads the log once, a page at a time, keeping numbers
and ids; ``_source_lines`` reads the lines again and gives each as soon as its turn comes (see
there for the order and the memory bound); ``_synthesized`` reads only the events appended
since. Files are streamed to a temporary beside their target and renamed over it when complete.
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .._paths import check_path, fsync_directories, inside, name_problem, write_beside
from ..errors import DataCorruptionError, PathRefusedError, SessionStoreError, ValidationError
from ..events import line_uuid
from ..pipeline._post_compact import kept_message_uuids
from ..projections._api_context import COMPACT_SUMMARY_PREFIX
from ..projections._base import read_pages
from ..store import RecordedEvent, SessionLog, SessionStore
from ..store._contract import check_store

__all__ = [
    "ExportedFile",
    "export_claude_code",
    "iter_claude_code",
    "write_claude_code",
    "write_claude_code_file",
]

#: Event types that are the source lines themselves.
_LINE_TYPES = frozenset({"imported_entry", "opaque_entry"})
#: Envelope keys carried over from the last imported line to lines written after it.
_ENVELOPE_KEYS = ("userType", "cwd", "version", "gitBranch")


#: Where Python's text for a float may differ from JavaScript's: an exponent (1e-05, 1e+16), an
#: integral float (2.0, -0.0) or a non-finite one. Elsewhere both write the same shortest digits,
#: positionally, so text with none of these (even inside a string) needs no second look.
_FLOAT_MAY_DIFFER = re.compile(r"\d[eE][+-]?\d|\d\.0(?:[,\]}]|$)|Infinity|NaN")


def _dump(entry: object, *, allow_nan: bool = True) -> str:
    # What Claude Code writes (JSON.stringify): compact, non-ASCII kept, key order kept.
    text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)
    if _FLOAT_MAY_DIFFER.search(text) is None or not _has_float(entry):
        return text
    return _dump_as_javascript(entry)


def _dump_as_javascript(entry: object) -> str:
    # Python's encoder writes floats its own way (6e-05 where JavaScript writes 0.00006): the
    # pure-Python encoder takes the float formatter, so floats come out as JSON.stringify's.
    encode = json.encoder._make_iterencode(  # type: ignore[attr-defined]
        {}, None, json.encoder.py_encode_basestring, None, _js_number, ":", ",", False, False, True
    )
    return "".join(encode(entry, 0))


def _has_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def _js_number(value: float) -> str:
    """``value`` as JavaScript's ``Number.prototype.toString`` (so JSON.stringify) writes it.

    The digits are the shortest that round-trip, as Python's ``repr``; only the notation
    differs: positional from 1e-6 up to 1e21, else ``1.5e-7`` / ``1e+21``.
    """
    if value != value or value in (math.inf, -math.inf):
        return "null"
    if value == 0:
        return "0"
    text = repr(value)
    if 1e-6 <= abs(value) < 1e21:
        positional = format(decimal.Decimal(text), "f")
        return positional.rstrip("0").rstrip(".") if "." in positional else positional
    mantissa, _, exponent = text.partition("e")
    power = int(exponent)
    return f"{mantissa.removesuffix('.0')}e{'+' if power > 0 else '-'}{abs(power)}"


@dataclass
class _Context:
    session_id: str  # Claude Code's sessionId (a sub-agent carries its parent's)
    sidechain: bool
    model: str | None
    envelope: dict[str, Any]
    previous_uuid: str | None


@dataclass
class _Index:
    """What the first read of a session's visible log finds: numbers and ids, no contents.

    Its size grows with the number of events (a few ids and ints each), never with what they
    hold: the lines themselves are read again, a page at a time, when they are written.
    """

    log: SessionLog
    started: dict[str, Any]
    claude_session: str
    fork: bool
    #: Seq of each line object written back -> (line number, object index on the line).
    slots: dict[int, tuple[int, int]]
    #: Line number -> how many objects Claude Code wrote on it.
    objects_on: dict[int, int]
    #: Seq of an entry whose content moved -> seq of the ``message_appended`` that holds it.
    content_from: dict[int, int]
    ctx: _Context
    usage: dict[Any, dict[str, Any]]
    agents_listed: bool
    #: Seqs of the events that become new lines (appended after the import, or native), in order.
    native: list[int]
    children: list[str]
    #: Spilled tool outputs: (file name, blob sha256).
    tool_results: list[tuple[str, str]]


#: Event types a line is made for when no source line covers them.
_NATIVE_TYPES = frozenset({"message_appended", "compact_boundary", "listing_delta", "microcompact_applied"})


#: What reading a stored payload's fields raises when the payload is not what its event type
#: holds: only an altered row makes one (appends validate every event).
_PAYLOAD_ERRORS = (KeyError, TypeError, AttributeError, IndexError, ValueError)


def _altered_log(log: SessionLog) -> DataCorruptionError | None:
    """Why reading the fields of ``log``'s payloads failed, when the log was altered: the first
    event that no longer decodes as its type, or the first session of the lineage whose chain
    does not verify. None: the log is intact (the failure is the exporter's own)."""
    for recorded in read_pages(log.read, 1, None):
        try:
            _ = recorded.event
        except DataCorruptionError as e:
            return e
        except SessionStoreError:  # an unknown type, an erased session: not this failure
            continue
    lineage: SessionLog | None = log
    while lineage is not None:
        report = log.store.verify(lineage.session_id)
        if not report.ok:
            msg = f"session {lineage.session_id!r}: {report.reason}"
            return DataCorruptionError(msg, session_id=lineage.session_id, seq=report.first_bad_seq)
        lineage = lineage.parent
    return None


@contextlib.contextmanager
def _reading_payloads(store: SessionStore, session_id: str) -> Iterator[None]:
    """Fields read from the payloads of the session's events: a payload without what its type
    holds (an altered row) is DataCorruptionError naming the event; the exporter's own error
    over an intact log is raised as it is."""
    try:
        yield
    except SessionStoreError:
        raise
    except _PAYLOAD_ERRORS as e:
        altered = _altered_log(SessionLog(store, session_id))
        if altered is None:
            raise
        raise altered from e


def _index(store: SessionStore, session_id: str) -> _Index:
    """Read the session's visible history once, a page at a time, keeping only its index.

    A fork's history is its parent's prefix, then its own events. Raises
    ``SessionNotFoundError`` for no such session, ``DataCorruptionError`` for a payload that is
    not what its event type holds.
    """
    log = SessionLog(store, session_id)
    with _reading_payloads(store, session_id):
        return _read_index(store, session_id, log)


def _read_index(store: SessionStore, session_id: str, log: SessionLog) -> _Index:
    first = log.read(1, 1)
    started = first[0].payload_dict() if first and first[0].type == "session_started" else {}
    fork = store.get_session(session_id).fork_seq is not None
    claude_session = _claude_session_id(session_id, started, fork=fork)
    covered: set[str] = set()
    slot_of: dict[tuple[int, int], int] = {}  # (line, object index) -> seq: the last one wins
    moved: dict[int, list[str]] = {}  # seq of an entry whose content moved -> its events' ids
    message_seq: dict[str, int] = {}
    candidates: list[tuple[int, str]] = []
    usage_seen: list[tuple[str, dict[str, Any]]] = []
    agents_listings: list[str] = []
    reverted: set[str] = set()
    children: list[str] = []
    tool_results: list[tuple[str, str]] = []
    last: dict[str, Any] | None = None
    for recorded in read_pages(log.read, 1, None):
        kind = recorded.type
        if kind in _LINE_TYPES:
            covered.add(recorded.event_id)
            payload = recorded.payload_dict()
            if kind == "imported_entry":
                covered.update(payload["events"])
                if payload.get("content_moved"):
                    moved[recorded.seq] = payload["events"]
            slot_of[(_line_number(payload, recorded), int(payload.get("object_index", 0)))] = recorded.seq
            if isinstance(payload["entry"].get("uuid"), str):
                last = payload["entry"]
            continue
        if kind in _NATIVE_TYPES and recorded.event_id not in covered:
            # An importer writes a line's entry before its events: most are covered already.
            candidates.append((recorded.seq, recorded.event_id))
        if kind == "message_appended":
            message_seq[recorded.event_id] = recorded.seq
        elif kind == "usage_recorded" and recorded.event_id not in covered:
            usage_seen.append((recorded.event_id, recorded.payload_dict()))
        elif kind == "listing_delta":
            if recorded.payload_dict()["kind"] == "agents":
                agents_listings.append(recorded.event_id)
        elif kind == "context_edit_reverted":
            edit = recorded.payload_dict()
            if edit["target_type"] == "compact_boundary":
                reverted.add(edit["target_event_id"])
        elif kind == "subagent_started":
            child = str(recorded.payload_dict()["child_session_id"])
            if child not in children:
                children.append(child)
        elif kind == "tool_result_persisted":
            persisted = recorded.payload_dict()
            if persisted.get("blob_sha256"):
                # The recorded location is a path on the machine that wrote it: keep its name only.
                name = PurePosixPath(str(persisted.get("location") or "").replace("\\", "/")).name
                tool_results.append(
                    (name or f"{persisted['tool_use_id']}.txt", str(persisted["blob_sha256"]))
                )
    slots = {seq: slot for slot, seq in slot_of.items()}
    objects_on: dict[int, int] = {}
    for line, _ in slot_of:
        objects_on[line] = objects_on.get(line, 0) + 1
    content_from = {}
    for seq, ids in moved.items():
        held = next((message_seq[i] for i in ids if i in message_seq), None)
        if seq in slots and held is not None:
            content_from[seq] = held
    if last is not None:
        ctx = _Context(
            claude_session if fork and "sessionId" in last else str(last.get("sessionId", "")),
            last.get("isSidechain") is True,
            started.get("model"),
            {k: last[k] for k in _ENVELOPE_KEYS if k in last},
            str(last["uuid"]),
        )
    else:
        ctx = _Context(
            claude_session,
            started.get("query_source") in ("subagent", "compact"),
            started.get("model"),
            {"userType": "external"},
            None,
        )
    return _Index(
        log=log,
        started=started,
        claude_session=claude_session,
        fork=fork,
        slots=slots,
        objects_on=objects_on,
        content_from=content_from,
        ctx=ctx,
        usage={p.get("api_message_id"): p for i, p in usage_seen if i not in covered},
        agents_listed=any(i in covered for i in agents_listings),
        native=[seq for seq, i in candidates if i not in covered and i not in reverted],
        children=children,
        tool_results=tool_results,
    )


#: Characters of JSON held for lines read ahead of their turn; beyond it a line read early keeps
#: only its seq and is read again, by itself, when its turn comes.
HOLD_CHARS = 32_000_000


def _line_text(index: _Index, entry: dict[str, Any]) -> str:
    if index.fork and "sessionId" in entry:
        # A fork's inherited lines take its sessionId, as Claude Code's own forks copy them.
        entry["sessionId"] = index.claude_session
    return _dump(entry)


def _content_at(index: _Index, seq: int) -> Any:
    """The message content stored in the ``message_appended`` at ``seq``."""
    return index.log.read(seq, seq)[0].payload_dict()["content"]


def _read_again(index: _Index, seq: int) -> str:
    """The line object stored at ``seq``, read by itself (with its moved content)."""
    entry = index.log.read(seq, seq)[0].payload_dict()["entry"]
    source = index.content_from.get(seq)
    if source is not None:
        entry["message"]["content"] = _content_at(index, source)
    return _line_text(index, entry)


def _source_lines(index: _Index) -> Iterator[str]:
    """The imported lines by number (``""`` for a number with no line), read a page at a time.

    The log holds a transcript's lines in the importer's order (parents before children), which
    is file order for a linear transcript; a line read before its turn waits in memory until
    the lines before it are written, as does an entry until the later event that holds its
    content. For an ordinary transcript few wait. Memory stays bounded in every case: once
    ``HOLD_CHARS`` of JSON wait, a line read early keeps only its seq and is read again by
    itself when its turn comes (the worst case, a file whose lines stand children first, costs
    one read a line instead of memory). Objects Claude Code wrote on one line (no newline
    between them) go back on one line.
    """
    if not index.slots:
        return
    last_line = max(index.objects_on)
    sources = set(index.content_from.values())
    # message seq -> (seq, entry, its size) of the entries waiting for its content
    waiting: dict[int, list[tuple[int, dict[str, Any], int]]] = {}
    parts: dict[int, dict[int, str | int]] = {}  # line -> object index -> JSON, or seq to read again
    held = 0
    next_line = 1

    def place(seq: int, entry: dict[str, Any]) -> None:
        nonlocal held
        line, object_index = index.slots[seq]
        if line != next_line and held >= HOLD_CHARS:
            parts.setdefault(line, {})[object_index] = seq
            return
        text = _line_text(index, entry)
        held += len(text)
        parts.setdefault(line, {})[object_index] = text

    first = min(index.slots)
    last = max(max(index.slots), max(sources, default=1))
    for recorded in read_pages(index.log.read, first, last):
        seq = recorded.seq
        if seq in index.slots:
            entry = recorded.payload_dict()["entry"]
            source = index.content_from.get(seq)
            if source is None:
                place(seq, entry)
            elif source < seq:  # not an importer's order: its content was passed, read it again
                entry["message"]["content"] = _content_at(index, source)
                place(seq, entry)
            elif held >= HOLD_CHARS and index.slots[seq][0] != next_line:
                line, object_index = index.slots[seq]
                parts.setdefault(line, {})[object_index] = seq
            else:  # held (its size counted) until the event with its content is read
                size = len(recorded.payload)
                held += size
                waiting.setdefault(source, []).append((seq, entry, size))
        elif seq in sources and seq in waiting:
            content = recorded.payload_dict()["content"]
            for entry_seq, entry, size in waiting.pop(seq):
                held -= size
                entry["message"]["content"] = content
                place(entry_seq, entry)
        while next_line <= last_line:
            expected = index.objects_on.get(next_line)
            if expected is not None:
                done = parts.get(next_line)
                if done is None or len(done) < expected:
                    break
                del parts[next_line]
                texts = []
                for object_index in sorted(done):
                    part = done[object_index]
                    if isinstance(part, int):
                        part = _read_again(index, part)
                    else:
                        held -= len(part)
                    texts.append(part)
                yield "".join(texts)
            else:
                yield ""
            next_line += 1


#: The line a native event becomes has a uuid derived from it (a preserved segment names its anchor).
_line_uuid = line_uuid


def _envelope(ctx: _Context, parent: str | None, timestamp: str, key: str) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": ctx.sidechain,
        **ctx.envelope,
        "sessionId": ctx.session_id,
        "timestamp": timestamp,
        "uuid": key,
    }


def _synthesized(index: _Index) -> Iterator[str]:
    """Lines for events that came from no source line (appended after an import, or native).

    Only the seqs the index names are read (a page at a time); a reverted compaction is left
    out: Claude Code's resume then chains on through the history.
    """
    if not index.native:
        return
    ctx, usage, agents_listed = index.ctx, index.usage, index.agents_listed
    native = set(index.native)
    kept: list[str] | None = None

    def kept_uuids() -> list[str]:
        # Only a boundary that kept messages needs them: one more read, of message uuids only.
        nonlocal kept
        if kept is None:
            kept = kept_message_uuids(read_pages(index.log.read, 1, None))
        return kept

    for recorded in read_pages(index.log.read, index.native[0], index.native[-1]):
        if recorded.seq not in native:
            continue
        payload = recorded.payload_dict()
        moment = recorded.created_at.isoformat()
        if recorded.type == "message_appended":
            key = str(payload["message_uuid"])
            line = _envelope(
                ctx, payload.get("parent_uuid") or ctx.previous_uuid, payload.get("timestamp") or moment, key
            )
            line["type"] = payload["role"]
            if payload.get("is_meta"):
                line["isMeta"] = True
            content = payload["content"]
            if payload["role"] == "user":
                line["message"] = {"role": "user", "content": content}
            else:
                api_id = payload.get("api_message_id") or f"msg_{key}"
                reported = usage.get(api_id, {})
                line["message"] = {
                    "model": reported.get("model") or ctx.model or "unknown",
                    "id": api_id,
                    "type": "message",
                    "role": "assistant",
                    "content": content if isinstance(content, list) else [{"type": "text", "text": content}],
                    "stop_reason": payload.get("stop_reason"),
                    "stop_sequence": None,
                    "usage": {
                        k: int(reported.get(k) or 0)
                        for k in (
                            "input_tokens",
                            "cache_creation_input_tokens",
                            "cache_read_input_tokens",
                            "output_tokens",
                        )
                    },
                }
            ctx.previous_uuid = key
            yield _dump(line)
        elif recorded.type == "compact_boundary":
            boundary = _line_uuid(recorded.event_id, "boundary")
            line = _envelope(ctx, None, moment, boundary)
            line = {
                "parentUuid": None,
                "logicalParentUuid": payload.get("last_pre_compact_uuid") or ctx.previous_uuid,
                **{k: v for k, v in line.items() if k != "parentUuid"},
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "isMeta": False,
                "level": "info",
                "compactMetadata": {
                    "trigger": payload["trigger"] if payload["trigger"] in ("auto", "manual") else "auto",
                    "preTokens": payload.get("pre_compact_tokens", 0),
                    **_preserved_metadata(kept_uuids, payload.get("preserved_segment")),
                },
            }
            yield _dump(line)
            summary_key = _line_uuid(recorded.event_id, "summary")
            summary = _envelope(ctx, boundary, moment, summary_key)
            summary["type"] = "user"
            # Claude Code sends this line's text as the first message; ours opens with the prefix.
            summary["message"] = {"role": "user", "content": COMPACT_SUMMARY_PREFIX + payload["summary"]}
            summary["isCompactSummary"] = True
            summary["isVisibleInTranscriptOnly"] = True
            ctx.previous_uuid = summary_key
            yield _dump(summary)
        elif recorded.type == "listing_delta":
            key = _line_uuid(recorded.event_id, "listing")
            line = _envelope(ctx, ctx.previous_uuid, moment, key)
            line = {
                "parentUuid": line.pop("parentUuid"),
                "isSidechain": line.pop("isSidechain"),
                "attachment": _listing_attachment(payload, first_agents=not agents_listed),
                "type": "attachment",
                **line,
            }
            agents_listed = agents_listed or payload["kind"] == "agents"
            ctx.previous_uuid = key
            yield _dump(line)
        elif recorded.type == "microcompact_applied":
            key = _line_uuid(recorded.event_id, "microcompact")
            line = _envelope(ctx, ctx.previous_uuid, moment, key)
            line.update(
                {
                    "type": "system",
                    "subtype": "microcompact_boundary",
                    "content": "Context microcompacted",
                    "isMeta": False,
                    "level": "info",
                    "microcompactMetadata": {
                        "trigger": "manual" if payload["trigger"] == "manual" else "auto",
                        "tokensSaved": payload.get("tokens_freed", 0),
                        "compactedToolIds": payload["cleared_tool_use_ids"],
                        "clearedAttachmentUUIDs": [],
                    },
                }
            )
            ctx.previous_uuid = key
            yield _dump(line)


def _preserved_metadata(kept_uuids: Callable[[], list[str]], segment: object) -> dict[str, Any]:
    """``preservedSegment`` and ``preservedMessages`` of a boundary that kept messages ({}: none).

    The kept messages run from the segment's head to its tail, as the log holds them
    (``kept_uuids``: the uuids of the log's sent messages, in order).
    """
    if not isinstance(segment, dict):
        return {}
    head, anchor, tail = segment["head_uuid"], segment["anchor_uuid"], segment["tail_uuid"]
    uuids = kept_uuids()
    if head in uuids and tail in uuids:
        uuids = uuids[uuids.index(head) : uuids.index(tail) + 1]
    else:  # pragma: no cover - a segment names messages of the log it was recorded in
        uuids = [head, tail] if head != tail else [head]
    return {
        "preservedSegment": {"headUuid": head, "anchorUuid": anchor, "tailUuid": tail},
        "preservedMessages": {"anchorUuid": anchor, "uuids": uuids},
    }


def _listing_attachment(payload: dict[str, Any], *, first_agents: bool) -> dict[str, Any]:
    """A ``ListingDelta`` as the attachment Claude Code writes for it (FORMAT.md 4.8)."""
    added: dict[str, str] = payload.get("added") or {}
    removed: list[str] = payload.get("removed") or []
    kind = payload["kind"]
    if kind == "deferred_tools":
        return {
            "type": "deferred_tools_delta",
            "addedNames": list(added),
            "addedLines": [line or name for name, line in added.items()],
            "removedNames": removed,
            "readdedNames": [],
            "pendingMcpServers": [],
        }
    if kind == "agents":
        return {
            "type": "agent_listing_delta",
            "addedTypes": list(added),
            "addedLines": [f"- {name}: {line}" if line else f"- {name}" for name, line in added.items()],
            "removedTypes": removed,
            "isInitial": first_agents or payload.get("compaction_event_id") is not None,
            "showConcurrencyNote": False,
        }
    return {
        "type": "mcp_instructions_delta",
        "addedNames": list(added),
        "addedBlocks": list(added.values()),
        "removedNames": removed,
    }


def _claude_session_id(session_id: str, started: dict[str, Any], *, fork: bool) -> str:
    """The ``sessionId`` (and file name) the export uses.

    A fork is a session of its own: it takes its own id, so its file never collides with the
    parent's. Otherwise the imported ``sessionId`` comes back.
    """
    if fork:
        return session_id
    metadata = started.get("metadata") or {}
    return str(metadata.get("session_id") or session_id)


def _lines(index: _Index) -> Iterator[str]:
    with _reading_payloads(index.log.store, index.log.session_id):
        yield from _source_lines(index)
        yield from _synthesized(index)


def iter_claude_code(store: SessionStore, session_id: str) -> Iterator[str]:
    """The session as Claude Code JSONL lines, without newlines, one at a time.

    The lines of ``export_claude_code``, read from the log a page at a time: memory holds a
    small index of the session (ids and numbers) and the lines read ahead of their turn, not the
    session. The index is read before this returns (so a missing session raises here); the
    lines are read as they are drawn.

    Raises:
        SessionNotFoundError: no such session.
    """
    check_store("store", store)
    return _lines(_index(store, session_id))


def imported_lines(store: SessionStore, session_id: str) -> list[str]:
    """The lines an import wrote to the session, by number (``""`` for a number with no line):
    ``export_claude_code`` without the lines made for events appended since.

    Raises:
        SessionNotFoundError: no such session.
    """
    index = _index(store, session_id)
    with _reading_payloads(store, session_id):
        return list(_source_lines(index))


def transcript_line(entry: dict[str, Any]) -> str:
    """``entry`` as Claude Code writes a transcript line (JSON.stringify: compact, non-ASCII
    kept, key order kept, JavaScript's numbers), without the newline.

    Raises:
        ValueError: a NaN or an infinity (JSON has none: JSON.stringify would write null).
        TypeError: a value JSON cannot hold.
    """
    return _dump(entry, allow_nan=False)


def export_claude_code(store: SessionStore, session_id: str) -> list[str]:
    """The session as Claude Code JSONL lines, without newlines.

    An imported session's lines come back at their original line numbers; a number with no
    line (a blank line, or one skipped as bad) is an empty string, so a re-import keeps every
    line's number. Lines for events appended since follow. A fork exports its whole visible
    history under its own id, as Claude Code writes a forked session: the parent's lines up to
    the fork point (with the fork's ``sessionId``), then the fork's own. ``iter_claude_code``
    gives the same lines without holding them all.

    Raises:
        SessionNotFoundError: no such session.
    """
    check_store("store", store)
    return list(iter_claude_code(store, session_id))


@dataclass(frozen=True)
class ExportedFile:
    """A file ``write_claude_code`` wrote, and the session it holds (None: a sidecar)."""

    path: Path
    session_id: str | None
    lines: int


@dataclass(frozen=True)
class _Planned:
    """One file to write: its path below the target folder as names, and the session it holds
    (its index: its lines are read when it is written) or a sidecar's bytes (got then too)."""

    names: tuple[str, ...]
    session_id: str | None
    index: _Index | None = None
    data: Callable[[], bytes] | None = None


def _encoded(lines: Iterable[str], counted: list[int]) -> Iterator[bytes]:
    """Each line with its newline, as UTF-8; ``counted[0]`` counts them."""
    for line in lines:
        counted[0] += 1
        yield (line + "\n").encode()


def _plan(store: SessionStore, session_id: str) -> list[_Planned]:
    """The files of the session and its sub-agents; reads each session's index, no contents."""
    root = _index(store, session_id)
    cc_session = root.claude_session
    files: list[_Planned] = []
    queue: list[tuple[str, tuple[str, ...], _Index | None]] = [(session_id, (f"{cc_session}.jsonl",), root)]
    done: set[str] = set()
    while queue:
        current, names, index = queue.pop(0)
        if current in done:
            continue
        done.add(current)
        index = index or _index(store, current)
        files.append(_Planned(names, current, index=index))
        with _reading_payloads(store, current):
            meta = (index.started.get("metadata") or {}).get("meta")
        if current != session_id and isinstance(meta, dict):
            meta_names = (*names[:-1], names[-1][: -len(".jsonl")] + ".meta.json")
            files.append(_Planned(meta_names, None, data=_dump(meta).encode))
        for name, sha in index.tool_results:
            blob = functools.partial(store.get_blob, sha, session_id=current)
            files.append(_Planned((cc_session, "tool-results", name), None, data=blob))
        for child in index.children:
            # Claude Code keeps nested sub-agents flat, beside the others.
            agent_file = f"agent-{_agent_id(store, child)}.jsonl"
            queue.append((child, (cc_session, "subagents", agent_file), None))
    return files


def _agent_id(store: SessionStore, child: str) -> str:
    """The ``agentId`` a sub-agent's file is named after: its first event's, else its id."""
    first = store.read(child, 1, 1)
    with _reading_payloads(store, child):
        started = first[0].payload_dict() if first and first[0].type == "session_started" else {}
        return str((started.get("metadata") or {}).get("agent_id") or child)


def _refused_targets(directory: Path, files: list[_Planned]) -> dict[str, str]:
    """Planned files that would land outside ``directory`` or on something that is no file.

    Every name comes from the log (a transcript's ``sessionId``, ``agentId``, a sidecar's name),
    so each must be a plain name, and the resolved path must stay inside the folder (an
    existing symlink in it may not lead out).
    """
    real_directory = os.path.realpath(directory)
    refused: dict[str, str] = {}
    for planned in files:
        names = planned.names
        shown = "/".join(names)
        problem = next((p for name in names if (p := name_problem(name)) is not None), None)
        if problem is not None:
            refused[shown] = problem
            continue
        path = directory.joinpath(*names)
        if not inside(os.path.realpath(path), real_directory):
            refused[shown] = "resolves outside the target folder (symlink)"
        elif os.path.exists(path) and not os.path.isfile(path):
            refused[shown] = "exists and is not a regular file"
    return refused


def _not_a_folder(folder: Path) -> Path | None:
    """The first existing path of ``folder`` and its parents, if it is not a directory."""
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


#: The highest line number an imported line may carry: a file's blank and
#: skipped lines come back as empty lines, so an altered number (10**12) would write that many.
_MAX_LINE_NUMBER = 100_000_000


def _line_number(payload: dict[str, Any], recorded: RecordedEvent) -> int:
    """An imported line's number, checked: an altered one is DataCorruptionError, not a file of
    empty lines filling the disk."""
    number = payload.get("line")
    if type(number) is not int or not 1 <= number <= _MAX_LINE_NUMBER:
        msg = f"session {recorded.session_id!r}, seq {recorded.seq}: line number {number!r} is not a line"
        raise DataCorruptionError(msg, session_id=recorded.session_id, seq=recorded.seq)
    return number


def _make_folder(folder: Path, made: list[Path]) -> None:
    """Create ``folder`` and its missing parents; each one created is added to ``made``."""
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    made.extend(reversed(missing))  # before: a mkdir failing halfway leaves none behind (_undo)
    folder.mkdir(parents=True, exist_ok=True)


def _undo(temps: list[str], made: list[Path]) -> None:
    """Remove the temps written and the folders created (the deepest first)."""
    for temp in temps:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


def write_claude_code(
    store: SessionStore, session_id: str, directory: str | Path, *, overwrite: bool = False
) -> list[ExportedFile]:
    """Write the session (and its sub-agents and spilled tool outputs) into a project folder.

    Give Claude Code's project folder (``~/.claude/projects/<encoded cwd>``) to make the
    session resumable there with ``claude --resume <sessionId>``.

    Every file name comes from the log, so every one is checked before the first write: a
    name that is not a plain file name (a separator, ``..``), or a path that resolves outside
    ``directory``, refuses the whole export, even with ``overwrite``. Each file is streamed
    from the log to a temporary file beside it (fsynced); once every one is complete they are
    renamed over their targets. An error before that removes the temporaries (and the folders
    it made) and leaves every target as it was.

    Raises:
        PathRefusedError: a file would land outside ``directory`` or on a non-file; names every
            one (nothing is written).
        ValidationError: a file to write exists and ``overwrite`` is False, or ``directory`` (or
            a parent of it) is a file (nothing is written).
        SessionNotFoundError: no such session.
    """
    check_store("store", store)
    folder = check_path("directory", directory)
    blocked = _not_a_folder(folder)
    if blocked is not None:
        msg = f"cannot export into {folder}: {blocked} is not a folder (nothing written)"
        raise ValidationError(msg, field="directory")
    planned = _plan(store, session_id)
    refused = _refused_targets(folder, planned)
    if refused:
        raise PathRefusedError(refused)
    files = [(folder.joinpath(*p.names), p) for p in planned]
    if not overwrite:
        existing = [str(path) for path, _ in files if os.path.lexists(path)]
        if existing:
            msg = f"would overwrite {', '.join(existing)}: pass overwrite=True (--force)"
            raise ValidationError(msg, field="directory")
    written: list[ExportedFile] = []
    temps: list[str] = []
    made: list[Path] = []
    try:
        for path, plan in files:
            _make_folder(path.parent, made)
            counted = [0]
            if plan.index is not None:
                chunks: Iterable[bytes] = _encoded(_lines(plan.index), counted)
            else:
                assert plan.data is not None  # a sidecar always has its bytes
                chunks = [plan.data()]
            temps.append(write_beside(str(path), chunks, "export-tmp"))
            written.append(ExportedFile(path, plan.session_id, counted[0]))
        for temp, exported in zip(temps, written, strict=True):
            os.replace(temp, exported.path)
    except BaseException:
        _undo(temps, made)
        raise
    # The files' folders, and each folder created in its parent: all of it survives a crash.
    fsync_directories([str(f.path) for f in written] + [str(folder) for folder in made])
    return written


def write_claude_code_file(
    store: SessionStore, session_id: str, path: str | Path, *, overwrite: bool = False
) -> ExportedFile:
    """Write the session's JSONL (``export_claude_code``'s lines) to the file ``path``, whole or
    not at all: streamed from the log to a temporary file beside it (fsynced), then renamed over
    it. The folder must exist. Sub-agents and sidecars are not written (``write_claude_code``
    lays out a whole project folder).

    Raises:
        PathRefusedError: ``path`` is a symlink or exists and is no regular file (a FIFO, a
            device): a rename would replace it (nothing is written).
        ValidationError: ``path`` exists and ``overwrite`` is False (nothing is written).
        SessionNotFoundError: no such session.
    """
    check_store("store", store)
    target = check_path("path", path)
    if os.path.islink(target) or (os.path.lexists(target) and not os.path.isfile(target)):
        # A rename would replace it (a FIFO, /dev/stdout's symlink) rather than write through it.
        raise PathRefusedError({str(target): "exists and is not a regular file (not replaced)"})
    if not overwrite and os.path.lexists(target):
        msg = f"would overwrite {target}: pass overwrite=True (--force)"
        raise ValidationError(msg, field="path")
    counted = [0]
    temp = write_beside(str(target), _encoded(iter_claude_code(store, session_id), counted), "export-tmp")
    try:
        os.replace(temp, target)
    except BaseException:
        _undo([temp], [])
        raise
    fsync_directories([str(target)])
    return ExportedFile(target, session_id, counted[0])

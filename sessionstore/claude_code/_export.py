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
"""

from __future__ import annotations

import decimal
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .._paths import inside, name_problem
from ..errors import PathRefusedError, ValidationError
from ..events._post_compact import line_uuid
from ..pipeline._post_compact import kept_message_uuids
from ..projections._api_context import COMPACT_SUMMARY_PREFIX
from ..store._contract import RecordedEvent, SessionStore
from ..store._lineage import SessionLog

__all__ = ["ExportedFile", "export_claude_code", "write_claude_code"]

#: Event types that are the source lines themselves.
_LINE_TYPES = frozenset({"imported_entry", "opaque_entry"})
#: Envelope keys carried over from the last imported line to lines written after it.
_ENVELOPE_KEYS = ("userType", "cwd", "version", "gitBranch")


def _dump(entry: object) -> str:
    # What Claude Code writes (JSON.stringify): compact, non-ASCII kept, key order kept.
    if not _has_float(entry):
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
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


def _started(events: list[RecordedEvent]) -> dict[str, Any]:
    first = events[0] if events else None
    return first.payload_dict() if first is not None and first.type == "session_started" else {}


def _source_lines(
    events: list[RecordedEvent], fork_session: str | None = None
) -> tuple[dict[int, str], set[str], _Context | None]:
    """Imported lines by number, the events they cover, and the envelope of the last one.

    ``fork_session``: the lines are a fork's inherited history and take its ``sessionId``, as
    Claude Code's own forks (``--fork-session``) copy them.
    """
    covered: set[str] = set()
    contents: dict[str, Any] = {}
    for recorded in events:
        if recorded.type in _LINE_TYPES:
            covered.add(recorded.event_id)
            if recorded.type == "imported_entry":
                covered.update(recorded.payload_dict()["events"])
        elif recorded.type == "message_appended":
            contents[recorded.event_id] = recorded.payload
    objects: dict[int, dict[int, str]] = {}  # line -> object index -> JSON
    last: dict[str, Any] | None = None
    for recorded in events:
        if recorded.type not in _LINE_TYPES:
            continue
        payload = recorded.payload_dict()
        entry = payload["entry"]
        if payload.get("content_moved"):
            held = next((contents[i] for i in payload["events"] if i in contents), None)
            if held is not None:
                entry["message"]["content"] = json.loads(held)["content"]
        if fork_session is not None and "sessionId" in entry:
            entry["sessionId"] = fork_session
        objects.setdefault(int(payload["line"]), {})[int(payload.get("object_index", 0))] = _dump(entry)
        if isinstance(entry.get("uuid"), str):
            last = entry
    # Objects Claude Code wrote on one line (no newline between them) go back on one line.
    numbered = {number: "".join(parts[i] for i in sorted(parts)) for number, parts in objects.items()}
    context = None
    if last is not None:
        context = _Context(
            str(last.get("sessionId", "")),
            last.get("isSidechain") is True,
            None,
            {k: last[k] for k in _ENVELOPE_KEYS if k in last},
            str(last["uuid"]),
        )
    return numbered, covered, context


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


def _synthesized(events: list[RecordedEvent], covered: set[str], ctx: _Context) -> Iterator[str]:
    """Lines for events that came from no source line (appended after an import, or native)."""
    usage = {
        p.get("api_message_id"): p
        for r in events
        if r.type == "usage_recorded" and r.event_id not in covered
        for p in [r.payload_dict()]
    }
    # A reverted compaction is left out: Claude Code's resume then chains on through the history.
    reverted = {
        r.payload_dict()["target_event_id"]
        for r in events
        if r.type == "context_edit_reverted" and r.payload_dict()["target_type"] == "compact_boundary"
    }
    agents_listed = any(
        r.type == "listing_delta" and r.payload_dict()["kind"] == "agents"
        for r in events
        if r.event_id in covered
    )
    for recorded in events:
        if recorded.event_id in covered or recorded.event_id in reverted:
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
                    **_preserved_metadata(events, payload.get("preserved_segment")),
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


def _preserved_metadata(events: list[RecordedEvent], segment: object) -> dict[str, Any]:
    """``preservedSegment`` and ``preservedMessages`` of a boundary that kept messages ({}: none).

    The kept messages run from the segment's head to its tail, as the log holds them.
    """
    if not isinstance(segment, dict):
        return {}
    head, anchor, tail = segment["head_uuid"], segment["anchor_uuid"], segment["tail_uuid"]
    uuids = kept_message_uuids(events)
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


def _visible_events(store: SessionStore, session_id: str) -> list[RecordedEvent]:
    """The session's history as its views see it: a fork's shared prefix, then its own events."""
    return SessionLog(store, session_id).read()


def _is_fork(store: SessionStore, session_id: str) -> bool:
    return store.get_session(session_id).fork_seq is not None


def _claude_session_id(store: SessionStore, session_id: str, events: list[RecordedEvent]) -> str:
    """The ``sessionId`` (and file name) the export uses.

    A fork is a session of its own: it takes its own id, so its file never collides with the
    parent's. Otherwise the imported ``sessionId`` comes back.
    """
    if _is_fork(store, session_id):
        return session_id
    metadata = _started(events).get("metadata") or {}
    return str(metadata.get("session_id") or session_id)


def export_claude_code(store: SessionStore, session_id: str) -> list[str]:
    """The session as Claude Code JSONL lines, without newlines.

    An imported session's lines come back at their original line numbers; a number with no
    line (a blank line, or one skipped as bad) is an empty string, so a re-import keeps every
    line's number. Lines for events appended since follow. A fork exports its whole visible
    history under its own id, as Claude Code writes a forked session: the parent's lines up to
    the fork point (with the fork's ``sessionId``), then the fork's own.

    Raises:
        SessionNotFoundError: no such session.
    """
    events = _visible_events(store, session_id)
    started = _started(events)
    claude_session = _claude_session_id(store, session_id, events)
    fork = _is_fork(store, session_id)
    numbered, covered, ctx = _source_lines(events, claude_session if fork else None)
    covered.update(r.event_id for r in events[:1] if r.type == "session_started")
    if ctx is None:
        ctx = _Context(
            claude_session,
            started.get("query_source") in ("subagent", "compact"),
            None,
            {"userType": "external"},
            None,
        )
    ctx.model = started.get("model")
    lines = [numbered.get(n, "") for n in range(1, max(numbered, default=0) + 1)]
    lines.extend(_synthesized(events, covered, ctx))
    return lines


@dataclass(frozen=True)
class ExportedFile:
    """A file ``write_claude_code`` wrote, and the session it holds (None: a sidecar)."""

    path: Path
    session_id: str | None
    lines: int


def _children(store: SessionStore, session_id: str) -> list[str]:
    seen: list[str] = []
    for recorded in _visible_events(store, session_id):
        if recorded.type == "subagent_started":
            child = str(recorded.payload_dict()["child_session_id"])
            if child not in seen:
                seen.append(child)
    return seen


#: One file to write: its path below the target folder as names, the session it holds, its bytes.
_Planned = tuple[tuple[str, ...], str | None, bytes]


def _plan(store: SessionStore, session_id: str) -> list[_Planned]:
    cc_session = _claude_session_id(store, session_id, _visible_events(store, session_id))
    files: list[_Planned] = []
    queue: list[tuple[str, tuple[str, ...]]] = [(session_id, (f"{cc_session}.jsonl",))]
    done: set[str] = set()
    while queue:
        current, names = queue.pop(0)
        if current in done:
            continue
        done.add(current)
        lines = export_claude_code(store, current)
        files.append((names, current, ("\n".join(lines) + "\n").encode() if lines else b""))
        current_events = _visible_events(store, current)
        child_meta = _started(current_events).get("metadata") or {}
        if current != session_id and isinstance(child_meta.get("meta"), dict):
            meta_names = (*names[:-1], names[-1][: -len(".jsonl")] + ".meta.json")
            files.append((meta_names, None, _dump(child_meta["meta"]).encode()))
        for recorded in current_events:
            if recorded.type == "tool_result_persisted":
                persisted = recorded.payload_dict()
                if persisted.get("blob_sha256"):
                    # The recorded location is a path on the machine that wrote it: keep its name only.
                    name = PurePosixPath(str(persisted.get("location") or "").replace("\\", "/")).name
                    name = name or f"{persisted['tool_use_id']}.txt"
                    blob = store.get_blob(str(persisted["blob_sha256"]), session_id=current)
                    files.append(((cc_session, "tool-results", name), None, blob))
        for child in _children(store, current):
            child_metadata = _started(store.read(child, 1, 1)).get("metadata") or {}
            agent_id = str(child_metadata.get("agent_id") or child)
            # Claude Code keeps nested sub-agents flat, beside the others.
            queue.append((child, (cc_session, "subagents", f"agent-{agent_id}.jsonl")))
    return files


def _refused_targets(directory: Path, files: list[_Planned]) -> dict[str, str]:
    """Planned files that would land outside ``directory`` or on something that is no file.

    Every name comes from the log (a transcript's ``sessionId``, ``agentId``, a sidecar's name),
    so each must be a plain name, and the resolved path must stay inside the folder (an
    existing symlink in it may not lead out).
    """
    real_directory = os.path.realpath(directory)
    refused: dict[str, str] = {}
    for names, _, _ in files:
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


def write_claude_code(
    store: SessionStore, session_id: str, directory: str | Path, *, overwrite: bool = False
) -> list[ExportedFile]:
    """Write the session (and its sub-agents and spilled tool outputs) into a project folder.

    Give Claude Code's project folder (``~/.claude/projects/<encoded cwd>``) to make the
    session resumable there with ``claude --resume <sessionId>``.

    Every file name comes from the log, so every one is checked before the first write: a
    name that is not a plain file name (a separator, ``..``), or a path that resolves outside
    ``directory``, refuses the whole export, even with ``overwrite``.

    Raises:
        PathRefusedError: a file would land outside ``directory`` or on a non-file; names every
            one (nothing is written).
        ValidationError: a file to write exists and ``overwrite`` is False, or ``directory`` (or
            a parent of it) is a file (nothing is written).
        SessionNotFoundError: no such session.
    """
    folder = Path(directory)
    blocked = _not_a_folder(folder)
    if blocked is not None:
        msg = f"cannot export into {folder}: {blocked} is not a folder (nothing written)"
        raise ValidationError(msg, field="directory")
    planned = _plan(store, session_id)
    refused = _refused_targets(folder, planned)
    if refused:
        raise PathRefusedError(refused)
    files = [(folder.joinpath(*names), held, data) for names, held, data in planned]
    if not overwrite:
        existing = [str(path) for path, _, _ in files if os.path.lexists(path)]
        if existing:
            msg = f"would overwrite {', '.join(existing)}: pass overwrite=True (--force)"
            raise ValidationError(msg, field="directory")
    written: list[ExportedFile] = []
    for path, held, data in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(ExportedFile(path, held, data.count(b"\n") if held else 0))
    return written

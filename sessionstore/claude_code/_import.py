"""Import Claude Code session transcripts (JSONL) as sessions, keeping every line.

The format is described, descriptively, in ``shared/corpus/claude-code/FORMAT.md``; the
mapping and its reasons are in ``docs/import-export.md``. In short:

* One main transcript becomes one session whose id is Claude Code's ``sessionId`` (when it
  fits ``check_session_id``); each sub-agent file (flat ``agent-*.jsonl`` beside it, or under
  ``<sessionId>/subagents/``) becomes a child session linked to the tool call that spawned it.
* ``user``/``assistant`` lines become ``MessageAppended`` with their uuids; each API response's
  usage becomes one ``UsageRecorded``; ``compact_boundary`` + its ``isCompactSummary`` line
  become a ``CompactBoundary``; ``microcompact_boundary`` a ``MicrocompactApplied``;
  ``<persisted-output>`` stubs a ``ToolResultPersisted``; file-history lines a
  ``FileHistoryRecorded``. The rest of each such line is kept in an ``ImportedEntry``; every
  other line is kept whole in an ``OpaqueEntry``. Nothing is dropped.
* Events follow the ``parentUuid`` graph, not file order. Event ids are derived from (session,
  line, part), so importing the same file again writes nothing, and a file that grew (Claude
  Code appends on resume) adds only its new lines.
* Every file is read and checked before anything is written (``_lines``: only each line's head
  is kept): a malformed line fails the whole import, naming the file and line, unless
  ``skip_bad_lines`` is set (each skip is reported). Then every session of the import is written
  in ONE transaction (``write_streamed``), its lines read again and converted as their events are
  written, a batch at a time: a line that cannot be modelled, or a sub-agent that cannot be
  written, leaves nothing, so no main session links to a missing child. A concurrent import of
  the same files is no error: whichever commits second finds the sessions stored. Each session
  written with at least ``snapshot_every`` events gets a snapshot of its API context after the
  commit (a snapshot that fails is logged, not an import error: the sessions are committed).
* A path is a transcript file, a project folder, or a projects root (``~/.claude/projects``: a
  folder holding no transcript, whose folders are project folders, each read as if named alone).
* Only regular files are read, never through a FIFO or a device. In a folder, a special file or
  a symlink leading out of the folder is skipped and reported (in a root, so is a project folder
  linking out of it); a sidecar or manifest is read only under the transcript's folder, never
  through a symlink (see ``docs/import-export.md``).
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import itertools
import json
import logging
import os
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pydantic

from .._paths import check_paths, inside, name_problem, read_regular_file
from .._telemetry import log_record, logger
from ..errors import (
    ConcurrencyError,
    PathRefusedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    ValidationError,
)
from ..events import (
    CompactBoundary,
    Event,
    FileHistoryRecorded,
    ImportedEntry,
    ListingDelta,
    ListingKind,
    MessageAppended,
    MicrocompactApplied,
    OpaqueEntry,
    PreservedSegment,
    QuerySource,
    SessionStarted,
    SubagentStarted,
    ToolResultPersisted,
    UsageRecorded,
)
from ..events._base import MAX_JSON_DEPTH, json_problem
from ..projections import SessionConfig
from ..projections._snapshots import take_snapshots
from ..store import SessionStore, SessionWrite
from ..store._contract import check_owner_key, check_session_id, check_store
from ._lines import BadLineError as _BadLineError
from ._lines import Line as _Line
from ._lines import LineReader, file_size, line_objects, scan_lines

__all__ = [
    "SOURCE",
    "SUMMARIZER",
    "ImportReport",
    "ImportedSession",
    "ProgressCallback",
    "SkippedLine",
    "derived_event_id",
    "import_claude_code",
]

#: ``source`` of the events this importer writes, and of the sessions' metadata.
SOURCE = "claude-code"
#: ``CompactBoundary.summarizer`` of a compaction Claude Code made.
SUMMARIZER = "claude-code"
#: Namespace of the uuid5 event ids: (session, line, part) always gives the same id.
_LOG = logger("import")
_NAMESPACE = uuid.UUID("4b1f0c9e-6d0a-5c3e-9a57-2f1c7c0de1a5")
#: ``progress(done, total)``: units are transcript lines, read once and written once.
ProgressCallback = Callable[[int, int], None]
#: ``on_file_read(path, size, lines)``: one transcript file was read (its size in bytes, its lines).
FileReadCallback = Callable[[str, int, int], None]

_AGENT_NAME = re.compile(r"(?:^|[_-])agent-(.+)\.jsonl$")
_AGENT_TAIL = re.compile(r"agentId:\s*([A-Za-z0-9_-]+)")
_PERSISTED_PATH = re.compile(r"saved to:?\s*<?([^\s<>]+)")
_MESSAGE_TYPES = frozenset({"user", "assistant"})
_SYNTHETIC_MODEL = "<synthetic>"
#: The most kept uuids a boundary is read with: Claude Code 2.1.332 keeps the last 1,536 of a
#: longer ``preservedMessages.uuids`` (and moves ``preservedSegment.headUuid`` to the first of them).
_MAX_KEPT_UUIDS = 1_536
#: A sub-agent manifest is a few hundred bytes; anything near this is not one.
_MAX_MANIFEST_BYTES = 1 << 20


def derived_event_id(session_id: str, line: int, part: str) -> uuid.UUID:
    """The event id the importer gives ``part`` of ``line`` in ``session_id`` (line 0: the session)."""
    return uuid.uuid5(_NAMESPACE, f"{SOURCE}\n{session_id}\n{line}\n{part}")


# --- report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkippedLine:
    """A line that was skipped (``skip_bad_lines``) or kept opaque because it could not be modelled,
    or a file that was not read (a special file, a symlink leading out): then ``line`` is the
    line that named it, or 0.
    """

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class ImportedSession:
    """What one transcript file became.

    Attributes:
        lines: non-blank lines read. Every one of them is in the log (``entries``) unless it
            was skipped as bad.
        entries: JSON objects stored (``ImportedEntry`` + ``OpaqueEntry`` events): one per
            line, more where a line holds several objects written back to back.
        messages: ``MessageAppended`` events (one per ``user``/``assistant`` line).
        opaque: lines kept as ``OpaqueEntry``.
        events: events the file converts to (the session's whole import).
        written: events written by this import (0 when it was imported before).
    """

    session_id: str
    path: str
    parent_session_id: str | None
    parent_tool_use_id: str | None
    lines: int
    entries: int
    messages: int
    opaque: int
    events: int
    written: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class ImportReport:
    """The outcome of one import: every session touched, and every line skipped."""

    sessions: tuple[ImportedSession, ...]
    skipped: tuple[SkippedLine, ...] = ()

    @property
    def written(self) -> int:
        """Events written in total (0 for a repeated import)."""
        return sum(s.written for s in self.sessions)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "sessions": [s.to_dict() for s in self.sessions],
            "skipped": [b.__dict__ for b in self.skipped],
            "written": self.written,
        }


# --- reading -------------------------------------------------------------------------------


@dataclass
class _FileIndex:
    """Built while a file is read (each object is then whole), for what links and orders it."""

    #: tool_use id -> (its line, the ``subagent_type`` of its input, if any)
    tool_uses: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    #: agent id -> (the tool_use id of the result naming it, that result's line)
    agent_results: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: the objects with a ``<persisted-output>`` tool result, in file order
    persisted: list[_Line] = field(default_factory=list)

    def visit(self, line: _Line, entry: dict[str, Any]) -> None:
        """Index one object of the file, seen whole."""
        message = entry.get("message")
        if entry.get("type") not in _MESSAGE_TYPES or not isinstance(message, dict):
            return
        content = message.get("content")
        if not isinstance(content, list):
            return
        stubbed = False
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                spawn = block.get("input")
                kind = spawn.get("subagent_type") if isinstance(spawn, dict) else None
                self.tool_uses.setdefault(block["id"], (line.number, kind if isinstance(kind, str) else None))
            elif block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                result = entry.get("toolUseResult")
                agent = result.get("agentId") if isinstance(result, dict) else None
                if not isinstance(agent, str):
                    tail = _AGENT_TAIL.search(_text_of(block.get("content")))
                    agent = tail.group(1) if tail else None
                if agent:
                    self.agent_results.setdefault(agent, (block["tool_use_id"], line.number))
                stubbed = stubbed or _is_stub(block.get("content"))
        if stubbed:
            self.persisted.append(line)


@dataclass(frozen=True)
class Identity:
    """Which transcript some lines are, when the caller knows it and they are no file on disk
    (the Claude Agent SDK's mirrored entries): its lines are then not asked who they are, and
    nothing beside it is read (no manifest, no sidecar)."""

    #: Claude Code's sessionId (of the main transcript, for a sub-agent too).
    session_id: str
    #: The store session its events go to.
    store_id: str
    #: A sub-agent's id (None: the main transcript) and its manifest.
    agent_id: str | None = None
    meta: dict[str, Any] | None = None


@dataclass
class _File:
    path: Path
    lines: list[_Line]
    session_id: str | None  # Claude Code's sessionId
    agent_id: str | None
    is_agent: bool
    meta: dict[str, Any] | None
    optional: bool  # a flat sibling found beside a main file: kept only if it belongs to it
    index: _FileIndex = field(default_factory=_FileIndex)
    #: The store session it goes to, when the caller chose it (``Identity``); None: derived.
    store_id: str | None = None
    #: Lines given by the caller, not read from ``path``: nothing is read beside it.
    virtual: bool = False


def _is_stub(content: object) -> bool:
    """A tool result's content that is a ``<persisted-output>`` stub."""
    return isinstance(content, str) and content.lstrip().startswith("<persisted-output>")


def _bad_line(path: Path, number: int, reason: str) -> ValidationError:
    """The error a malformed line fails the import with (nothing is written)."""
    msg = f"{path}:{number}: malformed line: {reason} (nothing imported; --skip-bad-lines skips it)"
    return ValidationError(msg, field="line", index=number)


def _read_lines(
    path: Path,
    skip: bool,
    skipped: list[SkippedLine],
    index: _FileIndex,
    data: bytes | None = None,
    *,
    first: int = 1,
) -> list[_Line]:
    """The lines of ``path`` (or of ``data``, its bytes as already read, e.g. a settled prefix,
    whose first line is line ``first``)."""

    def bad_line(number: int, reason: str) -> None:
        if not skip:
            raise _bad_line(path, number, reason)
        skipped.append(SkippedLine(str(path), number, reason))

    try:
        return scan_lines(path, bad_line, index.visit, data, first=first)
    except OSError as e:
        msg = f"{path}: cannot read: {e.strerror or e}"
        raise ValidationError(msg, field="path") from e


def _read_file(
    path: Path, skip: bool, skipped: list[SkippedLine], *, optional: bool = False, data: bytes | None = None
) -> _File:
    index = _FileIndex()
    lines = _read_lines(path, skip, skipped, index, data)
    return _file_of(path, lines, index, skipped, optional)


@dataclass
class _Heads:
    """Which session and sub-agent a file's lines say it is, gathered line by line (``add``),
    for the file or any first part of it (``upto``)."""

    #: (line, value) of the first line with a sessionId, and with an agentId.
    session_id: tuple[int, str] | None = None
    agent_id: tuple[int, str] | None = None
    #: The first line with a uuid, and the first such line that is not a sidechain.
    threaded: int | None = None
    not_sidechain: int | None = None

    def add(self, lines: Iterable[_Line]) -> None:
        """Gather ``lines``, which follow those gathered so far."""
        for line in lines:
            head = line.head
            if self.session_id is None and head.get("sessionId"):
                self.session_id = (line.number, head["sessionId"])
            if self.agent_id is None and head.get("agentId"):
                self.agent_id = (line.number, head["agentId"])
            if isinstance(head.get("uuid"), str):
                if self.threaded is None:
                    self.threaded = line.number
                if self.not_sidechain is None and head.get("isSidechain") is not True:
                    self.not_sidechain = line.number

    def copy(self) -> _Heads:
        return _Heads(self.session_id, self.agent_id, self.threaded, self.not_sidechain)

    def upto(self, last: int) -> tuple[str | None, str | None, bool, bool]:
        """(sessionId, agentId, some line has a uuid, every such line is a sidechain) of lines
        1..``last``."""

        def within(found: int | None) -> bool:
            return found is not None and found <= last

        session_id = self.session_id[1] if self.session_id and within(self.session_id[0]) else None
        agent_id = self.agent_id[1] if self.agent_id and within(self.agent_id[0]) else None
        threaded = within(self.threaded)
        return session_id, agent_id, threaded, threaded and not within(self.not_sidechain)


def _file_of(
    path: Path,
    lines: list[_Line],
    index: _FileIndex,
    skipped: list[SkippedLine],
    optional: bool,
    heads: tuple[str | None, str | None, bool, bool] | None = None,
    identity: Identity | None = None,
) -> _File:
    """The transcript made of ``lines`` (read, and indexed into ``index``): which session, which
    sub-agent (``heads``: what ``_Heads.upto`` says of them, gathered as they were read), with
    its manifest read; or the one ``identity`` says it is."""
    if identity is not None:
        agent_id = identity.agent_id
        is_agent = agent_id is not None
        return _File(
            path,
            lines,
            identity.session_id,
            agent_id,
            is_agent,
            identity.meta,
            optional,
            index,
            store_id=identity.store_id,
            virtual=True,
        )
    if heads is None:
        gathered = _Heads()
        gathered.add(lines)
        heads = gathered.upto(lines[-1].number if lines else 0)
    session_id, agent_id, threaded, sidechain = heads
    # A sub-agent transcript: every threaded line is a sidechain (the name is a hint only,
    # since copies are often renamed).
    named = _AGENT_NAME.search(path.name)
    is_agent = sidechain or (not threaded and named is not None)
    if is_agent and agent_id is None and named is not None:
        agent_id = named.group(1)
    meta = (
        _read_manifest(path.with_name(path.name[: -len(".jsonl")] + ".meta.json"), skipped)
        if is_agent
        else None
    )
    return _File(path, lines, session_id, agent_id, is_agent, meta, optional, index)


def _read_manifest(path: Path, skipped: list[SkippedLine]) -> dict[str, Any] | None:
    """A sub-agent's ``.meta.json``: a small regular file, never read through a symlink."""
    try:
        loaded = json.loads(read_regular_file(path, follow_symlinks=False, max_bytes=_MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        return None
    except PathRefusedError as e:
        skipped.append(SkippedLine(str(path), 0, f"manifest not read: {e.refused[str(path)]}"))
        return None
    except (OSError, ValueError, RecursionError) as e:  # ValueError: JSON, UTF-8, int digits
        msg = f"{path}: unreadable sub-agent manifest: {e}"
        raise ValidationError(msg, field="path") from e
    # Kept in the session's metadata, written without the store's own walk (json_checked).
    problem = json_problem(loaded, max_depth=MAX_JSON_DEPTH - 10)
    if problem is not None:
        msg = f"{path}: unreadable sub-agent manifest: {problem}"
        raise ValidationError(msg, field="path")
    return loaded if isinstance(loaded, dict) else None


def _unreadable(file: Path, folder: Path) -> str | None:
    """Why a transcript found in ``folder`` (not named by the user) is skipped, or None.

    Only regular files inside the folder are read: a FIFO would block the import, a device
    never ends, and a symlink leading out reads a file the user did not name.
    """
    if not inside(os.path.realpath(file), os.path.realpath(folder)):
        return "a symlink leading out of the folder: skipped"
    if not file.is_file():
        return "not a regular file: skipped"
    return None


def _found_in(folder: Path, files: Iterable[Path], skipped: list[SkippedLine]) -> list[Path]:
    """``files`` found in ``folder`` that may be read; the others are reported as skipped."""
    kept = []
    for file in files:
        reason = _unreadable(file, folder)
        if reason is None:
            kept.append(file)
        else:
            skipped.append(SkippedLine(str(file), 0, reason))
    return kept


def _project_transcripts(folder: Path) -> list[Path]:
    """What a project folder holds: ``<sessionId>.jsonl`` (and flat ``agent-*.jsonl``) files, and
    ``<sessionId>/subagents/**/agent-*.jsonl``."""
    return sorted(folder.glob("*.jsonl")) + sorted(folder.glob("*/subagents/**/agent-*.jsonl"))


def _project_folders(root: Path, skipped: list[SkippedLine]) -> list[Path]:
    """The folders of a projects root (``~/.claude/projects``: one per working directory); a
    symlink leading out of the root is reported as skipped, and not looked into."""
    real_root = os.path.realpath(root)
    try:
        listed = sorted(root.iterdir())
    except OSError as e:  # unlike glob, which sees nothing in a folder it cannot list
        msg = f"{root}: cannot list the folder: {e.strerror or e}"
        raise ValidationError(msg, field="path") from e
    folders = []
    for folder in listed:
        if not folder.is_dir():
            continue  # a stray file beside the project folders: no project
        if inside(os.path.realpath(folder), real_root):
            folders.append(folder)
        else:
            skipped.append(SkippedLine(str(folder), 0, "a symlink leading out of the folder: skipped"))
    return folders


def _in_folder(folder: Path, skipped: list[SkippedLine]) -> list[Path]:
    """The transcripts of ``folder`` that may be read (the others reported in ``skipped``).

    A folder holding a transcript it may read is a project folder. One that does not is taken for
    a projects root (``~/.claude/projects``), and each folder in it for a project folder: the
    transcripts are those each project folder, imported alone, would give.
    """
    own = _found_in(folder, _project_transcripts(folder), skipped)
    if own:
        return own
    return [
        file
        for project in _project_folders(folder, skipped)
        for file in _found_in(project, _project_transcripts(project), skipped)
    ]


def _named(path: Path, skipped: list[SkippedLine]) -> list[tuple[Path, bool]]:
    """(file, optional) for every transcript ``path`` names now: none for a folder that holds none
    (yet) or a path that does not exist (yet).

    A file the user named is read even if it is not a regular file (``_read_lines`` refuses
    it); a file found in a folder is skipped, and reported, unless it is a regular file there.
    """
    if path.is_dir():
        return [(file, False) for file in _in_folder(path, skipped)]
    if not path.exists():
        return []
    named = [(path, False)]
    if not _AGENT_NAME.search(path.name):
        # Its sub-agents: the companion folder (2.1+) and, in the legacy flat layout, the
        # agent-*.jsonl siblings that carry the same sessionId (checked after reading).
        companion = sorted((path.parent / path.stem / "subagents").glob("**/agent-*.jsonl"))
        named += [(file, False) for file in _found_in(path.parent, companion, skipped)]
        flat = sorted(path.parent.glob("agent-*.jsonl"))
        named += [(file, True) for file in _found_in(path.parent, flat, skipped)]
    return named


def _unique(found: Iterable[tuple[Path, bool]]) -> list[tuple[Path, bool]]:
    """``found`` with each file once (by its resolved path), in order: optional only if every
    path that named it found it as a flat sibling."""
    unique: dict[Path, tuple[Path, bool]] = {}
    for file, optional in found:
        key = file.resolve()
        if key in unique:
            first, was_optional = unique[key]
            unique[key] = (first, optional and was_optional)
        else:
            unique[key] = (file, optional)
    return list(unique.values())


def _discover(paths: Iterable[str | Path], skipped: list[SkippedLine]) -> list[tuple[Path, bool]]:
    """(file, optional) for every transcript named by ``paths``: files, project folders, or
    projects roots.

    Raises:
        ValidationError: a path that does not exist, or a folder with no transcript at all
            (none found, none skipped): importing it would be a silent no-op.
    """
    found: list[tuple[Path, bool]] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            msg = f"{path}: no such file or folder"
            raise ValidationError(msg, field="path")
        reported = len(skipped)
        named = _named(path, skipped)
        if not named and len(skipped) == reported:
            msg = (
                f"{path}: no Claude Code transcripts in this folder: no *.jsonl in it (a project folder) "
                "nor in any folder in it (a projects root, such as ~/.claude/projects)"
            )
            raise ValidationError(msg, field="path")
        found += named
    return _unique(found)


# --- ordering ------------------------------------------------------------------------------


def _dag_order(lines: list[_Line]) -> list[_Line]:
    """Lines in ``parentUuid`` order: every parent before its children, file order otherwise.

    Kahn's algorithm with the file position as priority: where the file already lists parents
    first (the usual case) the order is exactly the file's. A ``compact_boundary`` (parent null)
    hangs off its ``logicalParentUuid``. Lines without a uuid, roots and lines whose parent is
    not in the file are ready at once; a cycle (only a corrupt file has one) is broken at its
    earliest line.
    """
    return _DagWalk(lines).order


def _logical_parent(head: dict[str, Any]) -> object:
    """The line a line without a parent hangs off: its ``logicalParentUuid`` (a compact boundary's
    last message before it), unless the boundary kept that message. A session forked from a
    compacted one writes the kept messages again after the boundary, under its summary: hanging
    the boundary off one of them would make a cycle."""
    logical = head.get("logicalParentUuid")
    if head.get("subtype") == "compact_boundary" and logical in _kept_record(head)[1]:
        return None
    return logical


class _DagWalk:
    """``_dag_order`` of some lines, with what tells whether lines added after them simply follow.

    Lines added to a file whose order broke no cycle come after all of its lines, in their own
    order, unless one of them carries a uuid the file has (the first one places the children)
    or the parent one of its lines was waiting for (that line would then wait for it): see
    ``extend``.
    """

    def __init__(self, lines: list[_Line]) -> None:
        position: dict[str, int] = {}
        for i, line in enumerate(lines):
            key = line.head.get("uuid")
            if isinstance(key, str):
                position.setdefault(key, i)
        children: dict[int, list[int]] = {}
        ready: list[int] = []
        waiting: set[int] = set()
        #: Parents named by these lines but not among them.
        self.unresolved: set[str] = set()
        for i, line in enumerate(lines):
            parent = line.head.get("parentUuid") or _logical_parent(line.head)
            at = position.get(parent) if isinstance(parent, str) else None
            if at is None or at == i:
                ready.append(i)
                if isinstance(parent, str) and at is None:
                    self.unresolved.add(parent)
            else:
                children.setdefault(at, []).append(i)
                waiting.add(i)
        heapq.heapify(ready)
        self.order: list[_Line] = []
        self.broke_cycle = False
        emitted: set[int] = set()
        while ready or waiting:
            if not ready:
                self.broke_cycle = True
                cycle_start = min(waiting)
                heapq.heappush(ready, cycle_start)
            i = heapq.heappop(ready)
            if i in emitted:
                continue
            emitted.add(i)
            waiting.discard(i)
            self.order.append(lines[i])
            for child in children.get(i, ()):
                if child not in emitted:
                    heapq.heappush(ready, child)
        self.uuids = set(position)

    def extend(self, lines: list[_Line]) -> list[_Line] | None:
        """The order of ``lines``, added after the walked ones, when they simply follow them
        (None: the whole must be ordered again)."""
        added = _DagWalk(lines)
        if (
            self.broke_cycle
            or not added.uuids.isdisjoint(self.uuids)
            or not added.uuids.isdisjoint(self.unresolved)
        ):
            return None
        self.unresolved |= added.unresolved - self.uuids
        self.uuids |= added.uuids
        self.broke_cycle = added.broke_cycle
        return added.order


# --- conversion ----------------------------------------------------------------------------


def _count_text(store: SessionStore) -> Callable[[str], int]:
    counter = store.token_counter
    if counter is not None:
        return counter.count_text
    # No tokenizer configured: the usual 4-characters-per-token rule of thumb.
    return lambda text: (len(text) + 3) // 4


def _text_of(content: object) -> str:
    """The text of a message or tool_result content (text blocks joined by newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None  # the line keeps the original text; the event just has no time


def _nonneg(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage_event(event_id: uuid.UUID, api_id: str, model: str | None, usage: dict[str, Any]) -> UsageRecorded:
    return UsageRecorded(
        event_id=event_id,
        input_tokens=_nonneg(usage.get("input_tokens")),
        output_tokens=_nonneg(usage.get("output_tokens")),
        cache_creation_input_tokens=_nonneg(usage.get("cache_creation_input_tokens")),
        cache_read_input_tokens=_nonneg(usage.get("cache_read_input_tokens")),
        api_message_id=api_id,
        model=model,
    )


@dataclass
class _Link:
    """A sub-agent's place in its parent: which session, which tool call, after which line."""

    parent: _Plan
    tool_use_id: str | None
    agent_type: str | None
    after_line: int | None


@dataclass(frozen=True)
class _Owner:
    """The tenant and user an import's main sessions are created with (checked up front)."""

    tenant: str | None = None
    user: str | None = None

    def __post_init__(self) -> None:
        if self.tenant is not None:
            check_owner_key("tenant", self.tenant)
        if self.user is not None:
            check_owner_key("user", self.user)
            if self.tenant is None:
                msg = "a user needs a tenant (users are counted per tenant)"
                raise ValidationError(msg, field="tenant")


@dataclass
class _Plan:
    """One session to write: its id, lineage and every event of the file, in order."""

    file: _File
    session_id: str
    parent_session_id: str | None = None
    parent_tool_use_id: str | None = None
    query_source: QuerySource = "main"
    #: A session already in the store that only gains SubagentStarted events (its file is not here).
    stored: bool = False
    #: Where the session hangs off its parent (a sub-agent).
    link: _Link | None = None
    #: Each sidecar found: (line, tool_use_id) -> (its blob's SHA-256, its length in characters).
    sidecars: dict[tuple[int, int, str], tuple[str, int]] = field(default_factory=dict)
    #: Blobs of a new session of an encrypted store: stored once the session exists.
    deferred_blobs: dict[str, bytes] = field(default_factory=dict)
    #: SubagentStarted events to place after a line (None: at the end).
    subagents: dict[int | None, list[SubagentStarted]] = field(default_factory=dict)
    entries: int = 0
    messages: int = 0
    opaque: int = 0
    #: A compaction that kept messages verbatim: boundary event id -> event id of the first kept
    #: message. Its seq (``keep_from_seq``) is only known when the session is written.
    kept_from: dict[str, str] = field(default_factory=dict)
    #: Listing deltas derived from attachment lines: their event id -> the line's entry event id.
    listing_lines: dict[str, str] = field(default_factory=dict)
    #: Where an earlier import of the same file (shorter) left off, to go on from (None: whole).
    resume: _Resume | None = None
    #: Whether a follower goes on from this import (``_import_files(resume=...)``): only then are
    #: the written event ids noted, for the next poll (a plain import lets them go).
    keeps_resume: bool = False
    #: True when this round converts only the lines after ``resume`` (the rest are stored).
    resumed: bool = False
    #: Events of the lines converted by that earlier import (not drawn again, still counted).
    earlier_events: int = 0
    #: This round's converter, and the session's stored events (id -> seq) it was written after.
    converter: _Converter | None = None
    known: dict[str, int] = field(default_factory=dict)
    last_seq: int = 0
    #: The ids of the events this round writes, in order (they follow ``last_seq``).
    written: list[str] = field(default_factory=list)
    #: The session's last seq as the caller last saw it (0: not created), checked before
    #: anything is written: a session another writer moved on raises ``ConcurrencyError``.
    #: None: not checked (an import is no error when another wrote the same lines first).
    expected_last: int | None = None


@dataclass
class _Resume:
    """A session's conversion as an import left it, for an import of its file grown since.

    The follower keeps one per transcript between polls: a poll then converts only the lines the
    file gained, and reads only the events stored after ``last_seq``, instead of converting every
    line again and reading the whole session to drop what is stored.
    """

    converter: _Converter
    #: The objects of the file converted (its first ``lines``), the last of them the very object
    #: (a file read again is converted whole).
    lines: int
    last: _Line | None
    entries: int
    messages: int
    opaque: int
    #: The session's stored events (id -> seq) up to ``last_seq``.
    known: dict[str, int]
    last_seq: int

    def fits(self, plan: _Plan) -> bool:
        """True when ``plan``'s file is the one converted, grown by lines after those."""
        lines = plan.file.lines
        return (
            not plan.stored
            and self.converter.sid == plan.session_id
            and len(lines) >= self.lines
            and (lines[self.lines - 1] if self.lines else None) is self.last
        )


class _Converter:
    """Turns one file's lines into events (``events``), in ``parentUuid`` order, a line at a time.

    Only the lines' heads are held; each line is read again (``reader``) when it is converted,
    and its events are drawn before the next one is read.
    """

    def __init__(
        self,
        plan: _Plan,
        reader: LineReader,
        count_text: Callable[[str], int],
        skip: bool,
        skipped: list[SkippedLine],
    ):
        self.plan = plan
        self.entry = reader.entry
        self.sid = plan.session_id
        self.count_text = count_text
        self.skip = skip
        self.skipped = skipped
        self.walk = _DagWalk(plan.file.lines)
        self.order = self.walk.order
        self.tool_names: dict[str, str] = {}
        #: Each tool result's line: a microcompaction reads the results it cleared again.
        self.result_lines: dict[str, _Line] = {}
        self.usage: dict[str, tuple[int, str | None, dict[str, Any]]] = {}
        self.summaries: dict[str, _Line] = {}
        self.summary_uuids: set[str] = set()
        #: Each uuid's line and its place in log order (the first line that carries it).
        self.by_uuid: dict[str, _Line] = {}
        self.rank: dict[str, int] = {}
        #: The first isCompactSummary line under each parent (the older shape: the boundary's child).
        self.summary_children: dict[str, _Line] = {}
        self.boundaries: list[_Line] = []
        self.best: dict[str, int] = {}
        #: Where ``events`` starts: lines before it were converted by an earlier import.
        self.start = 0
        #: What the lines converted so far gave, without the sub-agent links placed after them.
        self.line_events = 0
        #: Message lines converted so far: line -> (its place in log order, objects).
        self.message_lines: dict[int, tuple[int, int]] = {}
        self._prepare(0)

    def resume(
        self,
        plan: _Plan,
        added: list[_Line],
        reader: LineReader,
        count_text: Callable[[str], int],
        skipped: list[SkippedLine],
    ) -> bool:
        """Go on with ``plan``, whose file is the one converted so far followed by ``added``:
        ``events`` then converts only those. False (nothing changed) when they do not simply
        follow in log order: the file must be converted whole."""
        order = self.walk.extend(added)
        if order is None:
            return False
        self.plan, self.entry, self.count_text, self.skipped = plan, reader.entry, count_text, skipped
        self.start = len(self.order)
        self.order.extend(order)
        self._prepare(self.start)
        return True

    def earlier_links(self) -> Iterator[SubagentStarted]:
        """The sub-agent links placed after lines converted by an earlier import, as ``events``
        would give them with those lines."""
        placed = [
            (self.message_lines[number], group)
            for number, group in self.plan.subagents.items()
            if number is not None and number in self.message_lines
        ]
        for (_, objects), group in sorted(placed, key=lambda item: item[0][0]):
            for _ in range(objects):
                yield from group

    def _prepare(self, start: int) -> None:
        for index in range(start, len(self.order)):
            line = self.order[index]
            key = line.head.get("uuid")
            if isinstance(key, str) and key not in self.by_uuid:
                self.by_uuid[key], self.rank[key] = line, index
            parent = line.head.get("parentUuid")
            if line.head.get("isCompactSummary") is True and isinstance(parent, str):
                self.summary_children.setdefault(parent, line)
            if line.head.get("subtype") == "compact_boundary" and isinstance(key, str):
                self.boundaries.append(line)
        # A boundary's summary may be a later line: every boundary is looked at again.
        self.summaries, self.summary_uuids = {}, set()
        for line in self.boundaries:
            summary = self._summary_line(line.head)
            if summary is not None:
                self.summaries[line.head["uuid"]] = summary
                if isinstance(summary.head.get("uuid"), str):
                    self.summary_uuids.add(summary.head["uuid"])
        best = self.best
        for line in self.order[start:]:
            entry = line.head
            message = entry.get("message")
            if entry.get("type") != "assistant" or not isinstance(message, dict):
                continue
            api_id, usage, model = message.get("id"), message.get("usage"), message.get("model")
            if not isinstance(api_id, str) or not isinstance(usage, dict) or model == _SYNTHETIC_MODEL:
                continue
            # One usage per API response: the line with the most output tokens holds the final
            # count (earlier chunks carry the streaming placeholder). It is anchored after the
            # response's first chunk, so results written between its chunks count as new context.
            output = _nonneg(usage.get("output_tokens"))
            if api_id not in self.usage:
                self.usage[api_id] = (line.number, model if isinstance(model, str) else None, usage)
                best[api_id] = output
            elif output > best[api_id]:
                first, _, _ = self.usage[api_id]
                self.usage[api_id] = (first, model if isinstance(model, str) else None, usage)
                best[api_id] = output

    def _summary_line(self, boundary: dict[str, Any]) -> _Line | None:
        """The ``isCompactSummary`` line of a compact boundary.

        Usually it is the boundary's child. An automatic compaction that keeps messages (Claude
        Code 2.1.3xx) writes attachment lines between them and names its summary instead: the
        anchor of its kept messages (``_kept_record``).
        """
        anchor, _ = _kept_record(boundary)
        line = self.by_uuid.get(anchor) if anchor is not None else None
        if line is not None and line.head.get("isCompactSummary") is True:
            return line
        return self.summary_children.get(boundary["uuid"])

    def _kept_lines(self, boundary: dict[str, Any]) -> list[_Line]:
        """The message lines a compaction kept verbatim after its summary, in log order."""
        _, uuids = _kept_record(boundary)
        lines = [self.by_uuid[u] for u in uuids if u in self.by_uuid]
        kept = [
            ln
            for ln in lines
            if ln.head.get("type") in _MESSAGE_TYPES and isinstance(ln.head.get("message"), dict)
        ]
        return sorted(kept, key=lambda ln: self.rank[ln.head["uuid"]])

    def eid(self, line: _Line, part: str) -> uuid.UUID:
        # A second object on a line gets ids of its own (its line number is the first's).
        return derived_event_id(
            self.sid, line.number, part if not line.object_index else f"{part}@{line.object_index}"
        )

    def events(self, converted: Callable[[int], None]) -> Iterator[Event]:
        """The file's events, converted as they are drawn (``converted(1)`` after each line)."""
        for place in range(self.start, len(self.order)):
            line = self.order[place]
            try:
                events = self._line(line)
            except (_BadLineError, pydantic.ValidationError) as e:
                reason = f"cannot be modelled: {_model_error(e)}"
                if not self.skip:
                    msg = (
                        f"{self.plan.file.path}:{line.number}: malformed {_entry_type(line.head)!r} "
                        f"line: {reason} (nothing was imported; --skip-bad-lines keeps it opaque)"
                    )
                    raise ValidationError(msg, field="line", index=line.number) from None
                self.skipped.append(
                    SkippedLine(str(self.plan.file.path), line.number, reason + "; kept opaque")
                )
                events = [self._opaque(line, self.entry(line))]
            links = 0
            if isinstance(events[0], ImportedEntry) and events[0].content_moved:  # a message
                links = len(self.plan.subagents.get(line.number, ()))
                first, objects = self.message_lines.get(line.number, (place, 0))
                self.message_lines[line.number] = (first, objects + 1)
            self.line_events += len(events) - links
            yield from events
            converted(1)
        yield from self.plan.subagents.get(None, ())

    def _opaque(self, line: _Line, entry: dict[str, Any]) -> OpaqueEntry:
        self.plan.entries += 1
        self.plan.opaque += 1
        return OpaqueEntry(
            event_id=self.eid(line, "entry"),
            source=SOURCE,
            entry_type=_entry_type(line.head),
            line=line.number,
            entry=entry,
            object_index=line.object_index,
        )

    def _imported(
        self, line: _Line, entry: dict[str, Any], derived: list[Event], moved: bool
    ) -> ImportedEntry:
        self.plan.entries += 1
        return ImportedEntry(
            event_id=self.eid(line, "entry"),
            source=SOURCE,
            entry_type=_entry_type(line.head),
            line=line.number,
            entry=entry,
            object_index=line.object_index,
            events=[str(e.event_id) for e in derived],
            content_moved=moved,
        )

    def _line(self, line: _Line) -> list[Event]:
        entry = self.entry(line)
        kind, subtype = entry["type"], entry.get("subtype")
        message = entry.get("message")
        derived: list[Event]
        if kind in _MESSAGE_TYPES and isinstance(message, dict) and "content" in message:
            derived = self._message(line, entry, message)
            moved = {**entry, "message": {**message, "content": None}}
            return [self._imported(line, moved, derived, True), *derived]
        if kind == "system" and subtype == "compact_boundary":
            derived = [self._compact(line, entry)]
        elif kind == "system" and subtype == "microcompact_boundary":
            derived = [self._microcompact(line, entry)]
        elif kind in ("file-history-snapshot", "file-history-delta"):
            derived = [self._file_history(line, entry)]
        elif kind == "attachment" and _attachment_type(entry) in _LISTING_ATTACHMENTS:
            derived = [self._listing(line, entry)]
            self.plan.listing_lines[str(derived[0].event_id)] = str(self.eid(line, "entry"))
        else:
            return [self._opaque(line, entry)]
        return [self._imported(line, entry, derived, False), *derived]

    def _message(self, line: _Line, entry: dict[str, Any], message: dict[str, Any]) -> list[Event]:
        content = message["content"]
        if not isinstance(content, str | list):
            raise _BadLineError(f"message.content must be a string or a list, not {type(content).__name__}")
        role: Literal["user", "assistant"] = "assistant" if entry["type"] == "assistant" else "user"
        api_id = message.get("id") if role == "assistant" and isinstance(message.get("id"), str) else None
        key = entry.get("uuid")
        # sessionstore's is_meta means "not sent". Claude Code's isMeta lines (skill bodies,
        # command caveats) *are* sent, so they stay False. Two kinds are not sent as messages:
        # the compaction summary (its CompactBoundary carries the text into the request) and
        # a failed call's synthetic error reply.
        hidden = key in self.summary_uuids or (role == "assistant" and entry.get("isApiErrorMessage") is True)
        stop = message.get("stop_reason")
        appended = MessageAppended(
            event_id=self.eid(line, "message"),
            message_uuid=key if isinstance(key, str) else str(self.eid(line, "uuid")),
            parent_uuid=entry.get("parentUuid"),
            role=role,
            content=content,
            api_message_id=api_id,
            is_meta=hidden,
            # A sub-agent's lines are sidechains of the parent; in their own session they are
            # its main thread (the original flag stays in the ImportedEntry).
            is_sidechain=False,
            stop_reason=stop if isinstance(stop, str) else None,
            timestamp=_timestamp(entry.get("timestamp")),
        )
        self.plan.messages += 1
        derived: list[Event] = [appended]
        if api_id is not None and api_id in self.usage and self.usage[api_id][0] == line.number:
            _, model, usage = self.usage[api_id]
            derived.append(_usage_event(self.eid(line, "usage"), api_id, model, usage))
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    self.tool_names[block["id"]] = str(block.get("name", ""))
                elif block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                    self.result_lines[block["tool_use_id"]] = line
                    persisted = self._persisted(line, entry, block)
                    if persisted is not None:
                        derived.append(persisted)
        derived.extend(self.plan.subagents.get(line.number, ()))
        return derived

    def _persisted(
        self, line: _Line, entry: dict[str, Any], block: dict[str, Any]
    ) -> ToolResultPersisted | None:
        """A ``<persisted-output>`` stub: Claude Code spilled the result to ``tool-results/``.

        The message keeps the stub (what the model saw); the event records where the full
        output went and, when the sidecar file is beside the transcript, its blob (stored
        before the session is written: ``_store_sidecars``).
        """
        content = block.get("content")
        if not isinstance(content, str) or not _is_stub(content):
            return None
        tool_use_id = str(block["tool_use_id"])
        result = entry.get("toolUseResult")
        _, location = _stub_paths(entry, content)
        sha256, original = self.plan.sidecars.get(
            (line.number, line.object_index, tool_use_id), ("", len(content))
        )
        if not sha256 and isinstance(result, dict) and _nonneg(result.get("persistedOutputSize")):
            original = _nonneg(result.get("persistedOutputSize"))
        return ToolResultPersisted(
            event_id=self.eid(line, f"persisted:{tool_use_id}"),
            tool_use_id=tool_use_id,
            tool_name=self.tool_names.get(tool_use_id),
            blob_sha256=sha256,
            original_chars=original,
            preview=content,
            reason="size",
            location=location,
            # The stub is already what the message holds: replacing it by itself frees nothing.
            tokens_freed=0,
        )

    def _compact(self, line: _Line, entry: dict[str, Any]) -> CompactBoundary:
        metadata = entry.get("compactMetadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        summary_line = self.summaries.get(str(entry.get("uuid")))
        summary = ""
        if summary_line is not None:
            summary = _text_of((self.entry(summary_line).get("message") or {}).get("content"))
        trigger = metadata.get("trigger")
        logical = entry.get("logicalParentUuid")
        event_id = self.eid(line, "compact")
        kept = self._kept_lines(entry)
        if kept:
            # keep_from_seq is filled in when the session is written (_resolve_kept_from).
            self.plan.kept_from[str(event_id)] = str(self.eid(kept[0], "message"))
        kept_texts = [_text_of(self.entry(ln)["message"].get("content")) for ln in kept]
        return CompactBoundary(
            event_id=event_id,
            trigger=trigger if trigger in ("auto", "manual") else "auto",
            strategy="llm",
            summarizer=SUMMARIZER,
            summary=summary,
            last_pre_compact_uuid=logical if isinstance(logical, str) else None,
            pre_compact_tokens=_nonneg(metadata.get("preTokens")),
            post_compact_raw_tokens=sum(self.count_text(text) for text in [summary, *kept_texts] if text),
            post_compact_blocks=(1 if summary.strip() else 0) + len(kept),
            preserved_segment=_segment(entry),
        )

    def _listing(self, line: _Line, entry: dict[str, Any]) -> ListingDelta:
        """A listing delta Claude Code announced, kept as state: its rendering is not in the file."""
        attachment = entry["attachment"]
        kind = _LISTING_ATTACHMENTS[attachment["type"]]
        names_key, lines_key, removed_key = _LISTING_KEYS[kind]
        names, lines, removed = (attachment.get(k, []) for k in (names_key, lines_key, removed_key))
        if not all(
            isinstance(v, list) and all(isinstance(i, str) for i in v) for v in (names, lines, removed)
        ):
            msg = f"'{names_key}', '{lines_key}' and '{removed_key}' must be lists of strings"
            raise _BadLineError(msg)
        added = {
            name: _listing_line(kind, name, lines[i] if i < len(lines) else "")
            for i, name in enumerate(names)
        }
        return ListingDelta(
            event_id=self.eid(line, "listing"), kind=kind, added=added, removed=list(removed), shown=False
        )

    def _microcompact(self, line: _Line, entry: dict[str, Any]) -> MicrocompactApplied:
        metadata = entry.get("microcompactMetadata")
        if not isinstance(metadata, dict):
            raise _BadLineError("microcompact_boundary without a 'microcompactMetadata' object")
        ids = metadata.get("compactedToolIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise _BadLineError("'microcompactMetadata.compactedToolIds' must be a list of strings")
        from ..projections import CLEARED_PLACEHOLDER

        placeholder = self.count_text(CLEARED_PLACEHOLDER)
        freed = sum(
            max(0, self.count_text(self._result_text(i)) - placeholder) for i in ids if i in self.result_lines
        )
        return MicrocompactApplied(
            event_id=self.eid(line, "microcompact"),
            # Claude Code records "auto" for its threshold-driven clearing; ours knows "time"
            # (automatic) and "manual". The original trigger stays in the ImportedEntry.
            trigger="manual" if metadata.get("trigger") == "manual" else "time",
            cleared_tool_use_ids=list(ids),
            # Not recorded by Claude Code; 1 is the smallest the event allows.
            keep_recent=1,
            tokens_freed=freed,
        )

    def _result_text(self, tool_use_id: str) -> str:
        """The text of a tool result converted before, read again from its line."""
        entry = self.entry(self.result_lines[tool_use_id])
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_result"
                and block.get("tool_use_id") == tool_use_id
            ):
                return _text_of(block.get("content"))
        return ""  # pragma: no cover - the line held this result when it was converted

    def _file_history(self, line: _Line, entry: dict[str, Any]) -> FileHistoryRecorded:
        trigger = entry.get("messageId")
        trigger = trigger if isinstance(trigger, str) else None
        if entry["type"] == "file-history-snapshot":
            snapshot = entry.get("snapshot")
            if not isinstance(snapshot, dict):
                raise _BadLineError("file-history-snapshot without a 'snapshot' object")
            tracked = snapshot.get("trackedFileBackups")
            prompt = snapshot.get("messageId")
            return FileHistoryRecorded(
                event_id=self.eid(line, "file-history"),
                kind="snapshot",
                message_uuid=prompt if isinstance(prompt, str) else trigger,
                trigger_uuid=trigger,
                is_update=entry.get("isSnapshotUpdate") is True,
                tracked_files=tracked if isinstance(tracked, dict) else {},
                timestamp=_timestamp(snapshot.get("timestamp")),
            )
        path = entry.get("trackingPath")
        prompt = entry.get("snapshotMessageId")
        return FileHistoryRecorded(
            event_id=self.eid(line, "file-history"),
            kind="delta",
            message_uuid=prompt if isinstance(prompt, str) else None,
            trigger_uuid=trigger,
            is_update=True,
            tracked_files={path: entry.get("backup")} if isinstance(path, str) else {},
            timestamp=_timestamp(entry.get("timestamp")),
        )


# --- sidecars ------------------------------------------------------------------------------


def _stub_paths(entry: dict[str, Any], content: str) -> tuple[str | None, str]:
    """(the path the line records for a spilled result, where the stub says it went)."""
    result = entry.get("toolUseResult")
    recorded = result.get("persistedOutputPath") if isinstance(result, dict) else None
    recorded = recorded if isinstance(recorded, str) else None
    found = _PERSISTED_PATH.search(content)
    return recorded, recorded if recorded is not None else (found.group(1) if found else "")


def _store_sidecars(store: SessionStore, plan: _Plan, skipped: list[SkippedLine]) -> None:
    """Store the blob of each ``<persisted-output>`` stub whose sidecar file is found.

    Before the sessions are written, one sidecar in memory at a time: content-addressed, so an
    import that fails later leaves at most unreferenced blobs, never an event naming a missing
    one. An encrypted store seals a blob with its session's key: a new session's blobs wait in
    ``deferred_blobs`` until it exists.
    """
    # Those of lines an earlier import converted are stored (their events are, so are the blobs).
    after = plan.resume.last.number if plan.resume is not None and plan.resume.last is not None else 0
    with LineReader(plan.file.path) as reader:
        for line in plan.file.index.persisted:
            if line.number <= after:
                continue
            entry = reader.entry(line)
            content = entry["message"]["content"]  # indexed: a message with a list of blocks
            for block in content:
                if not isinstance(block, dict):  # as _FileIndex.visit: only a dict is a block
                    continue
                stub, tool_use_id = block.get("content"), block.get("tool_use_id")
                if (
                    block.get("type") != "tool_result"
                    or not isinstance(tool_use_id, str)
                    or not isinstance(stub, str)
                    or not _is_stub(stub)
                ):
                    continue
                data = _sidecar(plan, line, tool_use_id, [p for p in _stub_paths(entry, stub) if p], skipped)
                if data is None:
                    continue
                sha256 = hashlib.sha256(data).hexdigest()
                original = len(data.decode("utf-8", errors="replace"))
                plan.sidecars[(line.number, line.object_index, tool_use_id)] = (sha256, original)
                if not _put_blob(store, plan, sha256, data):
                    plan.deferred_blobs[sha256] = data


def _put_blob(store: SessionStore, plan: _Plan, sha256: str, data: bytes) -> bool:
    """Store one blob of ``plan``; False when its session must exist first (an encrypted store)."""
    try:
        ref = store.put_blob(data, session_id=plan.session_id)
    except SessionNotFoundError:
        if store.encryption is None:
            raise
        return False
    if ref.sha256 != sha256:  # pragma: no cover - both are SHA-256 of the same bytes
        msg = f"blob hash mismatch for {plan.file.path}: {ref.sha256} != {sha256}"
        raise ValidationError(msg, field="blob_sha256")
    return True


def _sidecar(
    plan: _Plan, line: _Line, tool_use_id: str, paths: list[str], skipped: list[SkippedLine]
) -> bytes | None:
    """The spilled output: ``<sessionId>/tool-results/<name>`` beside the main transcript.

    Every name in that path comes from the transcript, so each must be a plain file name;
    the file must be a regular file under the transcript's folder, not a symlink.
    """
    file = plan.file
    if file.virtual:
        return None  # no folder beside it: its stub stays a stub

    def not_read(sidecar: Path, reason: str) -> None:
        skipped.append(SkippedLine(str(file.path), line.number, f"sidecar {sidecar} not read: {reason}"))

    if not file.session_id or name_problem(file.session_id) is not None:
        return None
    base = file.path.parent
    if file.is_agent and base.name == "subagents":
        base = base.parent.parent  # <sessionId>/subagents/agent-x.jsonl
    folder = base / file.session_id / "tool-results"
    if not inside(os.path.realpath(folder), os.path.realpath(base)):
        not_read(folder, "its folder leads out of the transcript's folder")
        return None
    names = [Path(p.replace("\\", "/")).name for p in paths] + [f"{tool_use_id}.txt", f"{tool_use_id}.json"]
    for name in names:
        if name_problem(name) is not None:
            continue
        try:
            return read_regular_file(folder / name, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except PathRefusedError as e:
            not_read(folder / name, e.refused[str(folder / name)])
    return None


def _preserved(boundary: dict[str, Any]) -> dict[str, Any]:
    """``compactMetadata.preservedSegment`` of a boundary line ({} when it has none)."""
    metadata = boundary.get("compactMetadata")
    segment = metadata.get("preservedSegment") if isinstance(metadata, dict) else None
    return segment if isinstance(segment, dict) else {}


def _kept_record(boundary: dict[str, Any]) -> tuple[str | None, list[str]]:
    """Where a compaction's kept messages hang (their anchor: the summary line) and their uuids,
    as a ``compact_boundary`` line records them (``(None, [])``: nothing kept, or not recorded).

    Claude Code 2.1.3xx writes ``compactMetadata.preservedMessages`` {anchorUuid, uuids[,
    allUuids]} and, only when ``uuids`` is not empty, ``preservedSegment`` {headUuid, anchorUuid,
    tailUuid}. A ``preservedMessages`` that is not an object whose ``uuids`` is a list of strings
    is ignored, as a malformed ``preservedSegment`` is: the segment is read instead, its head the
    one kept uuid. The importer and the follower's settling both read a boundary through this.
    """
    metadata = boundary.get("compactMetadata")
    messages = metadata.get("preservedMessages") if isinstance(metadata, dict) else None
    segment = _preserved(boundary)
    anchor = segment.get("anchorUuid")
    uuids = messages.get("uuids") if isinstance(messages, dict) else None
    if isinstance(uuids, list) and all(isinstance(u, str) for u in uuids):
        recorded = messages.get("anchorUuid") if isinstance(messages, dict) else None
        anchor = recorded if isinstance(recorded, str) else anchor
        # Claude Code cuts a longer list to its last _MAX_KEPT_UUIDS when it reads one back.
        kept = list(dict.fromkeys(uuids))[-_MAX_KEPT_UUIDS:]
    else:
        head = segment.get("headUuid")
        kept = [head] if isinstance(head, str) else []
    return (anchor if isinstance(anchor, str) else None), kept


def _segment(boundary: dict[str, Any]) -> PreservedSegment | None:
    """A boundary line's ``preservedSegment`` as recorded (None: none, or not three uuids)."""
    segment = _preserved(boundary)
    keys = ("headUuid", "anchorUuid", "tailUuid")
    if not all(isinstance(segment.get(k), str) for k in keys):
        return None
    return PreservedSegment(
        head_uuid=segment["headUuid"], anchor_uuid=segment["anchorUuid"], tail_uuid=segment["tailUuid"]
    )


#: Claude Code's listing attachments (FORMAT.md 4.8) and the listing each changes.
_LISTING_ATTACHMENTS: dict[str, ListingKind] = {
    "deferred_tools_delta": "deferred_tools",
    "agent_listing_delta": "agents",
    "mcp_instructions_delta": "mcp_instructions",
}
#: Each listing attachment's keys: names added, their lines, names removed.
_LISTING_KEYS: dict[ListingKind, tuple[str, str, str]] = {
    "deferred_tools": ("addedNames", "addedLines", "removedNames"),
    "agents": ("addedTypes", "addedLines", "removedTypes"),
    "mcp_instructions": ("addedNames", "addedBlocks", "removedNames"),
}


def _attachment_type(entry: dict[str, Any]) -> object:
    attachment = entry.get("attachment")
    return attachment.get("type") if isinstance(attachment, dict) else None


def _listing_line(kind: ListingKind, name: str, line: str) -> str:
    """An added entry's line without what Claude Code wraps it in (the name, a list dash)."""
    if kind == "deferred_tools" and line == name:
        return ""
    if kind == "agents":
        for prefix in (f"- {name}: ", f"- {name}"):
            if line.startswith(prefix):
                return line[len(prefix) :]
    return line


def _entry_type(entry: dict[str, Any]) -> str:
    subtype = entry.get("subtype")
    return f"{entry['type']}/{subtype}" if isinstance(subtype, str) else str(entry["type"])


def _model_error(error: Exception) -> str:
    if isinstance(error, pydantic.ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "entry"
        return f"{where}: {first['msg']}"
    return str(error)


# --- sessions ------------------------------------------------------------------------------


def _main_session_id(file: _File) -> str:
    for candidate in (file.session_id, file.path.stem):
        if candidate:
            try:
                return check_session_id(candidate)
            except ValidationError:
                continue
    # Only a sessionId outside our id rule (or none at all) gets a derived id.
    return f"cc-{uuid.uuid5(_NAMESPACE, file.session_id or file.path.name)}"


def _child_session_id(parent_id: str, agent_id: str) -> str:
    candidate = f"{parent_id}.agent-{agent_id}"
    try:
        return check_session_id(candidate)
    except ValidationError:
        return f"cc-{uuid.uuid5(_NAMESPACE, candidate)}"


def _model_of(file: _File) -> str | None:
    """The latest real model of the file: what the session continues with."""
    model = None
    for line in file.lines:
        message = line.head.get("message")
        if line.head.get("type") == "assistant" and isinstance(message, dict):
            value = message.get("model")
            if isinstance(value, str) and value != _SYNTHETIC_MODEL:
                model = value
    return model


def _started(plan: _Plan, link: _Link | None) -> SessionStarted:
    file = plan.file
    metadata: dict[str, Any] = {"source": SOURCE, "session_id": file.session_id}
    if file.is_agent:
        metadata["agent_id"] = file.agent_id
        if file.meta is not None:
            metadata["meta"] = file.meta
    return SessionStarted(
        event_id=derived_event_id(plan.session_id, 0, "session"),
        model=_model_of(file),
        query_source=plan.query_source,
        parent_session_id=plan.parent_session_id,
        parent_tool_use_id=link.tool_use_id if link else None,
        metadata=metadata,
    )


def _link(agent: _Plan, main: _Plan, agents: dict[str, _Plan]) -> _Link:
    """Find the tool call that spawned ``agent``: its manifest, else the tool result naming it."""
    agent_id = agent.file.agent_id or ""
    meta = agent.file.meta or {}
    parent = main
    parent_agent = meta.get("parentAgentId")
    if isinstance(parent_agent, str) and parent_agent in agents:
        parent = agents[parent_agent]  # nested sub-agents (2.1.172+) name their parent here
    tool_use_id = meta.get("toolUseId") if isinstance(meta.get("toolUseId"), str) else None
    after: int | None = None
    if tool_use_id is None:
        for candidate in (parent, main, *agents.values()):
            if agent_id in candidate.file.index.agent_results:
                parent = candidate
                tool_use_id, after = candidate.file.index.agent_results[agent_id]
                break
    agent_type = meta.get("agentType") if isinstance(meta.get("agentType"), str) else None
    if tool_use_id is not None and tool_use_id in parent.file.index.tool_uses:
        # The link event goes right after the call that spawned the agent.
        after, spawned_type = parent.file.index.tool_uses[tool_use_id]
        if spawned_type is not None:
            agent_type = spawned_type
    return _Link(parent, tool_use_id, agent_type, after)


def _plans(files: list[_File], store: SessionStore) -> list[_Plan]:
    """Every session to write, parents before children, linked (their events come later:
    ``_plan_events``)."""
    mains: dict[str, _Plan] = {}
    for file in files:
        if file.is_agent:
            continue
        plan = _Plan(file, file.store_id or _main_session_id(file))
        key = file.session_id or plan.session_id
        if key in mains:
            # Two copies of one session (a transcript copied into another project folder to
            # resume it there): their lines share event ids, so which one to keep is the user's call.
            msg = (
                f"{mains[key].file.path} and {file.path} are both main transcripts of session {key}: "
                "nothing imported; import one of them, or each in an import of its own"
            )
            raise ValidationError(msg, field="path")
        mains[key] = plan
    groups: dict[str, tuple[_Plan, dict[str, _Plan]]] = {}
    for file in files:
        if not file.is_agent:
            continue
        main = mains.get(file.session_id or "")
        if main is None:
            if file.optional:
                continue  # a flat sibling that belongs to another session of the folder
            main = _existing_parent(store, file, groups)
        agents = groups.setdefault(main.session_id, (main, {}))[1]
        agent_id = file.agent_id or file.path.stem
        if agent_id in agents:
            msg = f"{file.path}: sub-agent {agent_id} of session {main.session_id} appears twice"
            raise ValidationError(msg, field="path")
        plan = _Plan(file, file.store_id or _child_session_id(main.session_id, agent_id), main.session_id)
        # The compaction agent re-emits the parent to summarize it (FORMAT.md 6.5): kept, as
        # what it is, so it never counts as a sub-agent's work.
        plan.query_source = "compact" if agent_id.startswith("acompact") else "subagent"
        agents[agent_id] = plan
    ordered = list(mains.values())
    links: dict[str, _Link] = {}
    for main, agents in groups.values():
        if main.stored:
            ordered.append(main)
        for plan in agents.values():
            link = _link(plan, main, agents)
            links[plan.session_id] = link
            plan.parent_session_id = link.parent.session_id
            plan.parent_tool_use_id = link.tool_use_id
            started = SubagentStarted(
                event_id=derived_event_id(
                    link.parent.session_id, link.after_line or 0, f"subagent:{plan.session_id}"
                ),
                child_session_id=plan.session_id,
                parent_tool_use_id=link.tool_use_id,
                agent_type=link.agent_type,
            )
            link.parent.subagents.setdefault(link.after_line, []).append(started)
        ordered.extend(_children_in_order(agents))
    for plan in ordered:
        plan.link = links.get(plan.session_id)
    return ordered


def _plan_events(
    plan: _Plan,
    count_text: Callable[[str], int],
    skip: bool,
    skipped: list[SkippedLine],
    converted: Callable[[int], None],
) -> Iterator[Event]:
    """Every event of ``plan``'s session, converted as it is drawn (its counts start again);
    after ``plan.resume``, only the links and lines that import did not convert."""
    plan.entries = plan.messages = plan.opaque = 0
    plan.resumed, plan.earlier_events, plan.converter = False, 0, None
    if plan.stored:
        return (started for group in plan.subagents.values() for started in group)
    resume, plan.resume = plan.resume, None  # once: a round written again converts it whole
    if resume is not None:
        reader = LineReader(plan.file.path)
        converter = resume.converter
        earlier = converter.line_events
        if converter.resume(plan, plan.file.lines[resume.lines :], reader, count_text, skipped):
            plan.resumed, plan.converter, plan.earlier_events = True, converter, earlier
            plan.entries, plan.messages, plan.opaque = resume.entries, resume.messages, resume.opaque
            plan.known, plan.last_seq = resume.known, resume.last_seq
            return _converted(plan, reader, converter.earlier_links(), converter, converted)
        reader.close()
    reader = LineReader(plan.file.path)
    plan.converter = _Converter(plan, reader, count_text, skip, skipped)
    return _converted(plan, reader, iter(()), plan.converter, converted)


def _converted(
    plan: _Plan,
    reader: LineReader,
    links: Iterator[Event],
    converter: _Converter,
    converted: Callable[[int], None],
) -> Iterator[Event]:
    with reader:
        if plan.resumed and str(derived_event_id(plan.session_id, 0, "session")) in plan.known:
            plan.earlier_events += 1  # stored: not made again (its model is a walk of every line)
        else:
            yield _started(plan, plan.link)
        yield from links
        yield from converter.events(converted)


def _children_in_order(agents: dict[str, _Plan]) -> list[_Plan]:
    """Sub-agents with nested ones after the agents they hang off."""
    out: list[_Plan] = []
    placed: set[str] = set()
    remaining = dict(agents)
    while remaining:
        progressed = False
        for agent_id, plan in list(remaining.items()):
            parent_agent = (plan.file.meta or {}).get("parentAgentId")
            if not isinstance(parent_agent, str) or parent_agent not in agents or parent_agent in placed:
                out.append(plan)
                placed.add(agent_id)
                del remaining[agent_id]
                progressed = True
        if not progressed:  # a parentAgentId cycle (a corrupt manifest): take them as they come
            out.extend(remaining.values())
            break
    return out


def _existing_parent(
    store: SessionStore, file: _File, groups: dict[str, tuple[_Plan, dict[str, _Plan]]]
) -> _Plan:
    """A sub-agent file imported without its main transcript: the main must be stored already."""
    probe = _File(file.path, [], file.session_id, None, False, None, False)
    session_id = _main_session_id(probe)
    if session_id in groups:
        return groups[session_id][0]
    try:
        store.get_session(session_id)
    except SessionNotFoundError:
        msg = (
            f"{file.path}: sub-agent transcript of session {file.session_id}, which is neither in this "
            "import nor in the store: import its main transcript with it"
        )
        raise ValidationError(msg, field="path") from None
    # Its tool calls and results, for the link: the stored lines, as the exporter gives them back.
    from ._export import export_claude_code

    index = _FileIndex()
    lines: list[_Line] = []
    for number, text in enumerate(export_claude_code(store, session_id), start=1):
        for at, entry in enumerate(line_objects(text) if text else ()):
            if isinstance(entry, dict):
                line = _Line(number, entry, at, entry=entry)
                index.visit(line, entry)
                lines.append(line)
    return _Plan(
        _File(file.path, lines, file.session_id, None, False, None, False, index), session_id, stored=True
    )


# --- writing -------------------------------------------------------------------------------


def _check_imported(store: SessionStore, plan: _Plan, first: Event | None) -> None:
    """Refuse to add Claude Code events to a session that was not imported from Claude Code."""
    metadata = first.metadata if isinstance(first, SessionStarted) else None
    if metadata is None or metadata.get("source") != SOURCE:
        msg = (
            f"session {plan.session_id} already exists and was not imported from Claude Code: "
            f"{plan.file.path} was not imported"
        )
        raise ValidationError(msg, field="session_id")


#: How often the write phase is planned again when a concurrent import of the same files
#: wrote first (each round re-reads what is stored, so the next one finds it there).
_WRITE_ROUNDS = 5
#: Events prepared and inserted at a time: a few MB of a typical transcript in memory at once.
_WRITE_BATCH = 256


@dataclass
class _Tally:
    """What one session's write drew: every event of its import, and those written."""

    events: int = 0
    written: int = 0

    def count(
        self, events: Iterable[Event], known: Mapping[str, int], listings: Mapping[str, str] | None = None
    ) -> Iterator[Event]:
        """``events`` without those already stored (``known``), counting both. A listing delta
        (``listings``: its id -> its line's entry id) whose line is stored is left out too."""
        for event in events:
            self.events += 1
            event_id = str(event.event_id)
            if event_id in known or (listings and listings.get(event_id) in known):
                continue
            self.written += 1
            yield event


def _session_write(
    store: SessionStore, plan: _Plan, owner: _Owner, events: Iterator[Event]
) -> tuple[SessionWrite, _Tally, bool]:
    """What writing ``plan`` takes now: (the write, its tally as it is drawn, creates it)."""
    tally = _Tally()
    try:
        info = store.get_session(plan.session_id)
    except SessionNotFoundError:
        if plan.stored:  # pragma: no cover - checked when planning
            raise
        _check_expected(plan, 0)
        plan.known, plan.last_seq = {}, 0
        metadata = {"source": SOURCE, "file": str(plan.file.path)}
        write = SessionWrite(
            plan.session_id,
            _written(plan, _resolve_kept_from(plan, tally.count(events, {}), {})),
            create=True,
            metadata=metadata,
            parent_session_id=plan.parent_session_id,
            # A sub-agent inherits its main session's tenant and user.
            tenant=owner.tenant if plan.parent_session_id is None else None,
            user=owner.user if plan.parent_session_id is None else None,
        )
        return write, tally, True
    for name, wanted, stored_as in (("tenant", owner.tenant, info.tenant), ("user", owner.user, info.user)):
        if wanted is not None and wanted != stored_as:
            msg = (
                f"{plan.file.path}: session {plan.session_id} is already stored with {name} "
                f"{stored_as!r}, not {wanted!r}; nothing was imported"
            )
            raise ValidationError(msg, field=name)
    if plan.resumed:  # what it knew is stored: only what was written since is read
        stored = store.read(plan.session_id, plan.last_seq + 1)
        known = plan.known
    else:
        stored = store.read(plan.session_id)
        _check_imported(store, plan, stored[0].event if stored else None)
        known = {}
    known.update((recorded.event_id, recorded.seq) for recorded in stored)
    last = stored[-1].seq if stored else plan.last_seq if plan.resumed else 0
    _check_expected(plan, last)
    plan.known, plan.last_seq = known, last
    del stored
    # A transcript that grew since (Claude Code appends on resume) adds its new lines only. A
    # listing line stored before listings were read stays what it became (no delta at the end).
    new = _resolve_kept_from(plan, tally.count(events, known, plan.listing_lines), known)
    return SessionWrite(plan.session_id, _written(plan, new), expected_seq=last), tally, False


def _check_expected(plan: _Plan, last: int) -> None:
    if plan.expected_last is not None and last != plan.expected_last:
        raise ConcurrencyError(plan.session_id, plan.expected_last, last)


def _written(plan: _Plan, events: Iterable[Event]) -> Iterator[Event]:
    """``events``, their ids noted in ``plan.written`` as they are written: they take the seqs
    after ``plan.last_seq`` in this order (a session's seqs have no gaps), so the next import that
    goes on from this one knows them without reading them back."""
    plan.written = []
    if not plan.keeps_resume:
        yield from events
        return
    for event in events:
        plan.written.append(str(event.event_id))
        yield event


def _write(
    store: SessionStore,
    plans: list[_Plan],
    owner: _Owner,
    convert: Callable[[_Plan, list[SkippedLine]], Iterator[Event]],
    skipped: list[SkippedLine],
    also: Sequence[SessionWrite] = (),
) -> list[tuple[int, int, bool]]:
    """Write every session of the import in ONE transaction; per plan (its events, events
    written, created).

    The events are converted while they are written, ``_WRITE_BATCH`` at a time
    (``SessionStore.write_streamed``): all or nothing, so a line that fails to convert, or a
    sub-agent that cannot be written, leaves no main session behind linking to it. Another
    import of the same files that commits first is no error: the next round finds its sessions
    stored (and converts the files again). ``also``: writes of the caller's own that go in the
    same transaction.
    """
    for plan in plans:
        if not plan.stored:
            _store_sidecars(store, plan, skipped)
    for round_ in range(1, _WRITE_ROUNDS + 1):
        converted: list[SkippedLine] = []  # lines kept opaque: reported once, by the round that wrote
        planned = [_session_write(store, plan, owner, convert(plan, converted)) for plan in plans]
        try:
            # Every line was checked by the first pass (strict decoder, depth, surrogates): the
            # store need not walk the events' values again.
            store.write_streamed(
                [write for write, _, _ in planned] + list(also), batch_size=_WRITE_BATCH, json_checked=True
            )
        except (SessionExistsError, ConcurrencyError):
            if round_ == _WRITE_ROUNDS:
                raise
            continue
        skipped.extend(converted)
        for plan in plans:
            for sha256, data in plan.deferred_blobs.items():
                _put_blob(store, plan, sha256, data)
        return [
            (tally.events + plan.earlier_events, tally.written, created)
            for plan, (_, tally, created) in zip(plans, planned, strict=True)
        ]
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _resolve_kept_from(plan: _Plan, events: Iterable[Event], stored: Mapping[str, int]) -> Iterator[Event]:
    """``events`` (to be written after ``stored``) with each compaction's ``keep_from_seq`` set.

    A compaction that kept messages verbatim keeps them from its first kept message on: that
    message's seq, already stored or about to be written in this write. Its boundary is held
    back (with what follows it) until that message has its seq, when it comes later.
    """
    seqs: dict[str, int] = {}
    seq = max(stored.values(), default=0)
    held: deque[Event] = deque()
    for event in events:
        seq += 1
        if isinstance(event, MessageAppended):
            seqs[str(event.event_id)] = seq
        held.append(event)
        while held:
            head = _kept_head(plan, held[0])
            if head is not None and head not in seqs and head not in stored:
                break  # its first kept message comes later (if at all)
            yield _with_kept_from(held.popleft(), head, seqs, stored)
    while held:  # a first kept message never written: the boundary keeps no seq, as before
        event = held.popleft()
        yield _with_kept_from(event, _kept_head(plan, event), seqs, stored)


def _kept_head(plan: _Plan, event: Event) -> str | None:
    """The event id of the first message a compaction kept (None: not such a compaction)."""
    return plan.kept_from.get(str(event.event_id)) if isinstance(event, CompactBoundary) else None


def _with_kept_from(
    event: Event, head: str | None, seqs: Mapping[str, int], stored: Mapping[str, int]
) -> Event:
    seq = None if head is None else seqs.get(head, stored.get(head))
    return event if seq is None else event.model_copy(update={"keep_from_seq": seq})


def import_claude_code(
    store: SessionStore,
    paths: Sequence[str | Path],
    *,
    skip_bad_lines: bool = False,
    progress: ProgressCallback | None = None,
    tenant: str | None = None,
    user: str | None = None,
    on_file_read: FileReadCallback | None = None,
) -> ImportReport:
    """Import Claude Code transcripts: files, project folders (``~/.claude/projects/<dir>``), or
    projects roots (``~/.claude/projects``: every project folder in it, as if each were named).

    A main transcript brings its sub-agents along (flat ``agent-*.jsonl`` siblings with the same
    ``sessionId``, and ``<sessionId>/subagents/**/agent-*.jsonl``). Every file is read and
    checked before anything is written; then all sessions are written in one transaction,
    parents first, each line converted as it is written (memory does not grow with the files;
    docs/import-export.md "Bounded memory"). Importing the same files again (or concurrently)
    writes nothing more. Each session written with at least ``snapshot_every`` events gets a
    snapshot of its API context at the end (one that fails is logged as a warning).

    Args:
        store: where the sessions go.
        paths: transcript files, project folders and/or projects roots.
        skip_bad_lines: skip lines that are not JSON objects (and keep lines that cannot be
            modelled as opaque entries) instead of failing; each is reported in ``skipped``.
        progress: called with (lines done, lines in total) as the import advances.
        on_file_read: called as each file has been read, with its path, size in bytes and
            line count (the reading phase, before ``progress`` knows the total).
        tenant, user: who the imported sessions belong to (their sub-agents inherit them).

    Returns:
        What each file became, and every line skipped.

    Raises:
        ValidationError: a path does not exist, a folder holds no transcript (nor does any
            folder in it), two main transcripts have the same sessionId, a line is malformed
            (naming file and line; nothing is written), a sub-agent's main session is missing,
            a session with the same id exists that was not imported from Claude Code or belongs
            to another tenant or user, or a bad tenant or user.
    """
    # Reading builds millions of small objects that all stay alive until written: the cyclic
    # collector would rescan them over and over (about a quarter of a large import's time).
    check_store("store", store)
    checked = check_paths("paths", paths)
    collecting = gc.isenabled()
    gc.disable()
    try:
        owner = _Owner(tenant, user)
        return _import(
            store,
            checked,
            skip_bad_lines=skip_bad_lines,
            progress=progress,
            owner=owner,
            on_file_read=on_file_read,
        )
    finally:
        if collecting:
            gc.enable()


def _import(
    store: SessionStore,
    paths: Sequence[str | Path],
    *,
    skip_bad_lines: bool,
    progress: ProgressCallback | None,
    owner: _Owner,
    on_file_read: FileReadCallback | None = None,
) -> ImportReport:
    skipped: list[SkippedLine] = []
    files = []
    for path, optional in _discover(paths, skipped):
        files.append(_read_file(path, skip_bad_lines, skipped, optional=optional))
        if on_file_read is not None:
            on_file_read(str(path), file_size(path), len({line.number for line in files[-1].lines}))
    return _import_files(store, files, skipped, skip_bad_lines=skip_bad_lines, progress=progress, owner=owner)


class _Progress:
    """``progress(done, total)`` in lines (each read once and written once), every few hundred."""

    EVERY = 500

    def __init__(self, callback: ProgressCallback | None, done: int, total: int) -> None:
        self.callback, self.done, self.total, self._reported = callback, done, total, done
        if callback is not None:
            callback(done, total)

    def add(self, lines: int) -> None:
        self.done += lines
        if self.callback is not None and self.done - self._reported >= self.EVERY:
            self._reported = self.done
            self.callback(min(self.done, self.total), self.total)

    def finish(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


def _resume_of(plan: _Plan) -> _Resume:
    """Where the import of ``plan``, written, left off."""
    assert plan.converter is not None
    # What this import wrote took the seqs after those it knew, in order.
    plan.known.update(zip(plan.written, itertools.count(plan.last_seq + 1)))
    lines = plan.file.lines
    return _Resume(
        plan.converter,
        len(lines),
        lines[-1] if lines else None,
        plan.entries,
        plan.messages,
        plan.opaque,
        plan.known,
        plan.last_seq + len(plan.written),
    )


def _import_files(
    store: SessionStore,
    files: list[_File],
    skipped: list[SkippedLine],
    *,
    skip_bad_lines: bool,
    progress: ProgressCallback | None,
    owner: _Owner,
    snapshot: bool = True,
    resume: dict[Path, _Resume] | None = None,
    expected: Mapping[str, int] | None = None,
    also: Sequence[SessionWrite] = (),
) -> ImportReport:
    """Convert and write files already read (the follower passes the settled prefix of each,
    and no ``snapshot``: it writes a little at a time, and readers snapshot as they go).

    ``resume``: where an earlier import of each file left off (taken), and where this one does
    (put back once written): a file grown since converts only the lines it gained.
    ``expected``: store session -> its last seq as the caller saw it (see
    ``_Plan.expected_last``). ``also``: the caller's writes, in the same transaction.
    """
    read = sum(len(f.lines) for f in files)
    shown = _Progress(progress, read, 2 * read)
    plans = _plans(files, store)
    for plan in plans:
        plan.expected_last = None if expected is None else expected.get(plan.session_id)
    if resume is not None:
        for plan in plans:
            kept = resume.pop(plan.file.path, None)
            plan.resume = kept if kept is not None and kept.fits(plan) else None
            plan.keeps_resume = True
    count_text = _count_text(store)

    def convert(plan: _Plan, converted: list[SkippedLine]) -> Iterator[Event]:
        return _plan_events(plan, count_text, skip_bad_lines, converted, shown.add)

    written = _write(store, plans, owner, convert, skipped, also)
    if resume is not None:
        resume.update((plan.file.path, _resume_of(plan)) for plan in plans if plan.converter is not None)
    imported = [
        ImportedSession(
            session_id=plan.session_id,
            path=str(plan.file.path),
            parent_session_id=plan.parent_session_id,
            parent_tool_use_id=plan.parent_tool_use_id,
            lines=0 if plan.stored else len({line.number for line in plan.file.lines}),
            entries=plan.entries,
            messages=plan.messages,
            opaque=plan.opaque,
            events=events,
            written=new,
            created=created,
        )
        for plan, (events, new, created) in zip(plans, written, strict=True)
    ]
    # The lines' heads are not needed once written: let them go before the snapshots' folds
    # (a long file's heads are tens of MB, and the folds are the import's peak).
    written_long = [
        plan.session_id
        for plan, (events, new, _) in zip(plans, written, strict=True)
        if new and events >= SessionConfig().snapshot_every
    ]
    for file in files:
        file.lines, file.index = [], _FileIndex()
    for plan in plans:  # a converter and its plan refer to each other: a cycle holds every line
        plan.converter, plan.known, plan.written = None, {}, []
    del plans
    # A view of a long session resumes from a snapshot instead of folding every event: one is
    # taken of each session written, after the commit (a crash before it leaves no snapshot,
    # which a reader does without; a snapshot never runs ahead of the log it folds).
    # Only where a live Session would have taken one (every ``snapshot_every`` events): a short
    # session folds faster than a snapshot loads, and its huge lines would be held again by the fold.
    if snapshot:
        try:
            take_snapshots(store, written_long)
        except SessionStoreError as e:  # a cache: the sessions are committed, a reader folds instead
            log_record(
                _LOG,
                logging.WARNING,
                "snapshot",
                "imported sessions committed, but their snapshots were not taken: {error}",
                session_ids=written_long,
                error=str(e),
            )
    shown.finish()
    return ImportReport(tuple(imported), tuple(skipped))

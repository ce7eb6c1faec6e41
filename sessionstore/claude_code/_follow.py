"""Follow Claude Code transcripts live: import each line once, as soon as it is settled.

The follower polls the transcripts (files, project folders or projects roots, whose new project
folders it follows too) and imports, through the importer itself, the *settled prefix* of each
file. Event ids are derived from (session, line, part), so what the store already holds is
never written again: the follower keeps nothing on disk, and a restarted follower (or one
started late) resumes from the store. In memory it keeps, between polls, each file's parsed
lines, what settling reads of them (``_settling``) and where the import's conversion left off
(``_Resume``): a poll of a file that only grew reads, settles and converts its new lines only.

A line is settled when importing it now gives the same events a later import of the whole file
would give. The follower holds a line back while:

* it is not complete: no newline yet (Claude Code is still writing it);
* the file has no settled assistant line with a real model yet (the session's model comes
  from it);
* it belongs to an API response that may still grow (no ``stop_reason`` on any of its chunks,
  and nothing but its own chunks and its tools' results and progress after it), or one with a
  chunk held back: the usage comes from its last chunk;
* it calls a tool whose result is not in the file yet, unless a sub-agent transcript that this
  call spawned is ready: the sub-agent's link event goes right after the call;
* it is a ``compact_boundary`` whose summary line (or a message it keeps) is not written yet.

A sub-agent transcript is imported once the call that spawned it (its manifest's ``toolUseId``,
or the tool result naming it) is settled in its parent, in the same write. Lines held back when
the follower stops are imported by the next follower, or by a plain import.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._paths import check_paths, open_regular_file
from ..errors import ValidationError
from ..store import SessionStore
from ..store._contract import check_number, check_store, check_waiting
from ._import import (
    Identity,
    ImportReport,
    SkippedLine,
    _bad_line,
    _File,
    _file_of,
    _FileIndex,
    _Heads,
    _import_files,
    _named,
    _Owner,
    _read_lines,
    _Resume,
    _unique,
)
from ._settling import Folds, LineFacts

__all__ = ["ClaudeCodeFollower", "FollowReport", "follow_claude_code"]

#: How much of a file is read at a time to check that it only grew.
_PART = 1 << 20
#: Tools whose call starts a sub-agent with a transcript of its own.
_SPAWNING_TOOLS = frozenset({"Agent", "Task"})


@dataclass(frozen=True)
class FollowReport:
    """What a follower did until it stopped.

    Attributes:
        polls: times the transcripts were looked at.
        imports: polls that wrote events.
        written: events written in total.
        sessions: sessions that gained events, in the order they first did.
        held: complete lines not imported when it stopped (held back as not settled yet).
    """

    polls: int
    imports: int
    written: int
    sessions: tuple[str, ...]
    held: int

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {**self.__dict__, "sessions": list(self.sessions)}


@dataclass
class _Scan:
    """One transcript as last read: its complete lines, parsed."""

    path: Path
    optional: bool
    #: As read: the complete lines, then maybe the start of one being written (a file that grew
    #: adds to the buffer of its last scan).
    raw: bytearray
    file: _File
    #: Byte offset just past line N + 1, for every complete line (the last: where the lines end).
    ends: list[int]
    #: Its malformed complete lines (the import fails on the first one it takes, or skips them).
    bad: list[SkippedLine]
    #: What settling reads of its lines.
    folds: Folds
    #: Which session and sub-agent its lines say it is.
    heads: _Heads
    settled: int = 0  # lines 1..settled may be imported
    tool_uses: dict[str, int] = field(default_factory=dict)  # settled tool calls -> line
    agents_named: set[str] = field(default_factory=set)  # agent ids named by settled results
    #: Who it is, when the caller says so (lines mirrored, not a file): see ``Identity``.
    identity: Identity | None = None


class ClaudeCodeFollower:
    """Imports what Claude Code has written so far, each time ``poll`` is called.

    Args:
        store: where the sessions go.
        paths: transcript files, project folders and/or projects roots (``~/.claude/projects``,
            whose project folders may appear later); a file or folder that does not exist yet, or
            a folder with no transcript yet, is waited for (``waiting``), as long as its parent
            folder exists.
        skip_bad_lines, tenant, user: as for ``import_claude_code``.
    """

    def __init__(
        self,
        store: SessionStore,
        paths: Sequence[str | Path],
        *,
        skip_bad_lines: bool = False,
        tenant: str | None = None,
        user: str | None = None,
    ):
        check_store("store", store)
        self.store = store
        self.owner = _Owner(tenant, user)
        self.paths = check_paths("paths", paths)
        for path in self.paths:
            if not path.exists() and not path.parent.is_dir():
                msg = f"{path}: neither it nor its folder exists: nothing to follow"
                raise ValidationError(msg, field="path")
        self.skip_bad_lines = skip_bad_lines
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._imported: dict[Path, int] = {}  # bytes of each file imported so far
        self._lines_imported: dict[Path, int] = {}  # and its lines: a malformed one is reported once
        self._scans: dict[Path, _Scan] = {}
        #: Where the last import of each file left off: the next converts only what it gained.
        self._resume: dict[Path, _Resume] = {}
        #: Whether the last poll found any transcript changed (a partial line growing counts).
        self.changed = False
        #: The paths that named no transcript at the last poll: a folder with none in it yet (nor
        #: in a project folder in it), a file not written yet.
        self.waiting: tuple[Path, ...] = ()
        self.polls = 0
        self.imports = 0
        self.written = 0
        self.sessions: dict[str, None] = {}

    def poll(self) -> ImportReport | None:
        """Import every newly settled line; the import's report, or None when nothing was new.

        With ``skip_bad_lines``, the report's ``skipped`` names each skipped line once, except
        when a poll converts the file whole again (a rewrite, the parentUuid fallback, a retried
        write).

        Raises:
            ValidationError: a complete line is malformed (unless ``skip_bad_lines``): nothing
                of that poll is written, as with ``import_claude_code``.
        """
        self.polls += 1
        found = self._found()
        # A sub-agent's manifest is written when it finishes: a change to it counts too.
        stamps = {p: _stamp(p) for path, _ in found for p in (path, _manifest(path))}
        self.changed = stamps != self._stamps
        if not self.changed:
            return None  # no file changed since the last poll
        # Only files that changed are read again, and only their sessions settled again.
        scans: dict[Path, _Scan] = {}
        touched: set[str | None] = set()
        for path, optional in found:
            manifest = _manifest(path)
            kept = self._scans.get(path)
            if (
                kept is not None
                and stamps[path] == self._stamps.get(path)
                and stamps[manifest] == self._stamps.get(manifest)
            ):
                scans[path] = kept
                continue
            scan = self._scan(path, optional)
            if scan is not None:
                scans[path] = scan
                touched.add(scan.file.session_id)
        settle([scan for scan in scans.values() if scan.file.session_id in touched])
        batch = self._batch(scans)
        report = self._import(batch) if batch else None
        # Only now: a poll that failed is tried again by the next one.
        self._stamps, self._scans = stamps, scans
        # A transcript gone (deleted, renamed) no longer keeps its conversion in memory.
        for gone in self._resume.keys() - scans.keys():
            del self._resume[gone]
        return report

    def _import(self, batch: list[_Scan]) -> ImportReport:
        skipped: list[SkippedLine] = []
        files = [self._settled_file(scan, skipped) for scan in batch]
        report = _import_files(
            self.store,
            files,
            skipped,
            skip_bad_lines=self.skip_bad_lines,
            progress=None,
            owner=self.owner,
            snapshot=False,
            resume=self._resume,
        )
        for scan in batch:
            self._imported[scan.path] = _end(scan, scan.settled)
            self._lines_imported[scan.path] = scan.settled
        if report.written:
            self.imports += 1
            self.written += report.written
            for item in report.sessions:
                if item.written:
                    self.sessions.setdefault(item.session_id, None)
        return report

    def _settled_file(self, scan: _Scan, skipped: list[SkippedLine]) -> _File:
        """The settled prefix of ``scan`` as the importer reads it, from the lines already parsed."""
        settled = scan.settled
        bad = [line for line in scan.bad if line.line <= settled]
        if bad and not self.skip_bad_lines:
            raise _bad_line(scan.path, bad[0].line, bad[0].reason)
        # Reported by the poll that first imports past it, not again by every later one.
        done = self._lines_imported.get(scan.path, 0)
        skipped.extend(line for line in bad if line.line > done)
        return settled_file(scan, skipped)

    @property
    def held(self) -> int:
        """Complete lines read but not imported (not settled yet)."""
        return sum(len(scan.ends) - scan.settled for scan in self._scans.values())

    def report(self) -> FollowReport:
        """What the follower did so far."""
        return FollowReport(self.polls, self.imports, self.written, tuple(self.sessions), self.held)

    def _found(self) -> list[tuple[Path, bool]]:
        """Every transcript the paths name now: a folder may gain files, and a projects root
        project folders, at any time."""
        named = {path: _named(path, []) for path in self.paths}
        self.waiting = tuple(path for path, files in named.items() if not files)
        return _unique(file for files in named.values() for file in files)

    def _scan(self, path: Path, optional: bool) -> _Scan | None:
        kept = self._scans.get(path)
        try:
            raw, grown = _read_grown(path, kept)
        except FileNotFoundError:
            return None  # removed since it was listed
        except OSError as e:
            msg = f"{path}: cannot read: {e.strerror or e}"
            raise ValidationError(msg, field="path") from e
        return scan_bytes(path, optional, raw, kept if grown else None)

    def _batch(self, scans: dict[Path, _Scan]) -> list[_Scan]:
        """The files whose settled prefix grew, with the main transcript of each sub-agent among them."""
        grown = [s for s in scans.values() if _end(s, s.settled) > self._imported.get(s.path, 0)]
        sessions = {s.file.session_id for s in grown if s.file.is_agent}
        mains = [
            s
            for s in scans.values()
            if not s.file.is_agent
            and s.file.session_id in sessions
            and s.settled
            and id(s) not in map(id, grown)
        ]
        return mains + grown


def scan_bytes(
    path: Path, optional: bool, raw: bytearray, kept: _Scan | None, identity: Identity | None = None
) -> _Scan | None:
    """The transcript whose bytes are ``raw`` (the complete lines, then maybe the start of one
    being written), read: whole, or only past the lines of ``kept`` (a scan of its start, whose
    buffer ``raw`` grew). None: a sub-agent manifest being written (read it again later).
    ``identity``: who it is, when the caller says so (its lines are not asked)."""
    complete = raw.rfind(b"\n") + 1  # never half a line: the rest is still being written
    if kept is not None:  # the file grew (Claude Code only appends): only the new lines are read
        lines, index, ends = list(kept.file.lines), _copy_index(kept.file.index), list(kept.ends)
        bad, folds, heads = list(kept.bad), kept.folds.copy(), kept.heads.copy()
    else:  # new, or rewritten: read whole
        lines, index, ends, bad, folds, heads = [], _FileIndex(), [], [], Folds(), _Heads()
    at = ends[-1] if ends else 0
    data = bytes(raw[at:complete])
    # Read leniently here: a malformed complete line is the import's to report (or skip).
    added = _read_lines(path, True, bad, index, data, first=len(ends) + 1)
    folds.add(added)
    heads.add(added)
    lines += added
    for line in data.split(b"\n")[:-1]:
        at += len(line) + 1
        ends.append(at)
    try:
        file = _file_of(path, lines, index, [], optional, heads.upto(len(ends)), identity)
    except ValidationError:
        return None  # a sub-agent manifest being written: the next poll reads it whole
    return _Scan(path, optional, raw, file, ends, bad, folds, heads, identity=identity)


def settled_file(scan: _Scan, skipped: list[SkippedLine]) -> _File:
    """The settled prefix of ``scan`` as the importer reads it, from the lines already parsed."""
    settled = scan.settled
    lines = scan.file.lines
    lines = lines[: bisect.bisect_right(lines, settled, key=lambda line: line.number)]
    whole = scan.file.index
    index = _FileIndex(
        {key: value for key, value in whole.tool_uses.items() if value[0] <= settled},
        {key: value for key, value in whole.agent_results.items() if value[1] <= settled},
        [line for line in whole.persisted if line.number <= settled],
    )
    return _file_of(scan.path, lines, index, skipped, scan.optional, scan.heads.upto(settled), scan.identity)


def _read_grown(path: Path, kept: _Scan | None) -> tuple[bytearray, bool]:
    """The bytes of ``path`` now, and whether its complete lines read by ``kept`` are still
    their start (then ``kept``'s buffer is reused: only the rest is read into it)."""
    with open_regular_file(path) as handle:
        if kept is not None:
            raw, end, at = kept.raw, _end(kept, len(kept.ends)), 0
            while at < end:  # compared a part at a time: the file is not held twice
                part = handle.read(min(_PART, end - at))
                if not part or not raw.startswith(part, at):
                    break
                at += len(part)
            else:
                del raw[end:]  # the start of a line being written, then: read again
                raw += handle.read()
                return raw, True
            handle.seek(0)
        return bytearray(handle.read()), False


def _end(scan: _Scan, lines: int) -> int:
    """Where the first ``lines`` lines of ``scan`` end (0: none)."""
    return scan.ends[lines - 1] if lines else 0


def _copy_index(index: _FileIndex) -> _FileIndex:
    return _FileIndex(dict(index.tool_uses), dict(index.agent_results), list(index.persisted))


def _manifest(transcript: Path) -> Path:
    return transcript.with_name(transcript.name[: -len(".jsonl")] + ".meta.json")


def _stamp(path: Path) -> tuple[int, int]:
    try:
        info = path.stat()
    except FileNotFoundError:
        return (-1, -1)
    return (info.st_size, info.st_mtime_ns)


# --- settling ------------------------------------------------------------------------------


def settle(scans: list[_Scan]) -> None:
    """Set each scan's settled line count (see the module docstring for the rules)."""
    agents = [s for s in scans if s.file.is_agent]
    ready: set[str] = set()  # tool calls and agent ids of sub-agents with settled lines
    while True:
        for scan in scans:
            _settle_file(scan, ready)
        for agent in agents:
            if agent.settled and not _finished(agent, scans):
                agent.settled, agent.tool_uses, agent.agents_named = 0, {}, set()
        now_ready = {key for agent in agents if agent.settled for key in _keys(agent)}
        if now_ready <= ready:
            break
        ready |= now_ready
    # A sub-agent waits until the call (or result) that links it is settled in its parent; a
    # nested one also waits for its parent sub-agent.
    changed = True
    while changed:
        changed = False
        for agent in agents:
            if agent.settled and not _anchored(agent, scans):
                agent.settled, agent.tool_uses, agent.agents_named = 0, {}, set()
                changed = True


def _finished(agent: _Scan, scans: list[_Scan]) -> bool:
    """True unless ``agent`` may still get (or rewrite) its manifest.

    Claude Code 2.1.3xx writes ``<sessionId>/subagents/agent-<id>.meta.json`` when the sub-agent
    is done (``"finished": true``), and the session's first event keeps the manifest: such a
    sub-agent waits for its manifest. A manifest without ``finished`` (another version) is
    final once the parent has the sub-agent's result (not an async launch) or the
    ``<task-notification>`` naming it. The legacy flat layout has no manifests.
    """
    if agent.path.parent.name != "subagents":
        return True
    meta = agent.file.meta
    if meta is None:
        return False
    if meta.get("finished") is True:
        return True
    agent_id = agent.file.agent_id or ""
    notice = f"<task-id>{agent_id}</task-id>"
    for scan in scans:
        if scan is agent or scan.file.session_id != agent.file.session_id:
            continue
        folds = scan.folds
        if any(named == agent_id and status != "async_launched" for named, status in folds.agent_results):
            return True
        if any(notice in text for text in folds.task_texts):
            return True
    return False


def _keys(agent: _Scan) -> set[str]:
    """What names ``agent`` in its parent: the call that spawned it, its agent id."""
    keys = {agent.file.agent_id} if agent.file.agent_id else set()
    tool = _spawned_by(agent)
    return keys | {tool} if tool is not None else keys


def _spawned_by(agent: _Scan) -> str | None:
    tool = (agent.file.meta or {}).get("toolUseId")
    return tool if isinstance(tool, str) else None


def _anchored(agent: _Scan, scans: list[_Scan]) -> bool:
    """True when the call (or result) that links ``agent`` to its parent is settled there.

    A sub-agent that names no call and that no result names cannot be placed by a later
    import either (its link goes at the end of its parent): it is imported as it comes.
    """
    family = [s for s in scans if s is not agent and s.file.session_id == agent.file.session_id]
    tool = _spawned_by(agent)
    agent_id = agent.file.agent_id or ""
    if tool is not None:
        if any(tool in s.tool_uses for s in family):
            return True
        return not any(tool in s.folds.calls for s in family) and any(s.settled for s in family)
    if any(agent_id in s.agents_named for s in family):
        return True
    return not any(agent_id == named for s in family for _, named in s.folds.named) and any(
        s.settled for s in family if not s.file.is_agent
    )


def _settle_file(scan: _Scan, ready: set[str]) -> None:
    folds = scan.folds
    scan.tool_uses = {}
    if not folds.has_model:
        scan.settled = 0
        scan.agents_named = set()
        return
    settled = len(scan.ends)
    first_chunk: dict[str, int] = {}  # API response -> the line of its first chunk
    for line, facts in zip(scan.file.lines, folds.facts, strict=True):
        if facts is None:
            continue  # nothing in it can hold it back
        if facts.api_id is not None:
            first_chunk.setdefault(facts.api_id, line.number)
        if _held(facts, folds, ready):
            # A response's chunks settle together: its usage is its last chunk's.
            settled = (first_chunk[facts.api_id] if facts.api_id is not None else line.number) - 1
            break
        for tool, _ in facts.calls:
            scan.tool_uses[tool] = line.number
    scan.tool_uses = {tool: number for tool, number in scan.tool_uses.items() if number <= settled}
    if settled < folds.model_line:  # the session's first event names the model of that line
        settled, scan.tool_uses = 0, {}
    scan.settled = settled
    scan.agents_named = {agent for number, agent in folds.named if number <= settled}


def _held(facts: LineFacts, folds: Folds, ready: set[str]) -> bool:
    """True when the line of ``facts`` is not settled yet."""
    if facts.api_id is not None and not folds.complete(facts.api_id):
        return True
    for tool, name in facts.calls:
        if tool in ready:
            continue
        if tool not in folds.results:
            return True
        # A sub-agent's link goes right after the call that spawned it: wait for its transcript
        # (an async launch answers at once, before the sub-agent has written anything).
        agent = folds.results[tool]
        if name in _SPAWNING_TOOLS and agent and agent not in ready:
            return True
    if facts.boundary is not None:
        uuid, anchor, kept = facts.boundary
        if uuid not in folds.summaries and anchor not in folds.summaries:
            return True
        if not all(u in folds.uuids for u in kept):
            return True
    return False


# --- the loop ------------------------------------------------------------------------------


def follow_claude_code(
    store: SessionStore,
    paths: Sequence[str | Path],
    *,
    until_idle: float | None = None,
    stop: threading.Event | None = None,
    poll_interval: float = 0.25,
    skip_bad_lines: bool = False,
    tenant: str | None = None,
    user: str | None = None,
    on_import: Callable[[ImportReport], None] | None = None,
    on_waiting: Callable[[Path], None] | None = None,
) -> FollowReport:
    """Import Claude Code transcripts as they are written, until stopped.

    Polls ``paths`` (files, project folders and/or projects roots, as for ``import_claude_code``;
    a root's project folders created later are followed too) every ``poll_interval`` seconds
    and imports each settled line exactly once (see ``docs/import-export.md``, "Following
    live"). Stops after a last poll when ``stop`` is set,
    or when no transcript changed for ``until_idle`` seconds; without either it runs until
    interrupted (KeyboardInterrupt: every poll writes in one transaction, so nothing is half
    written).

    Args:
        skip_bad_lines, tenant, user: as for ``import_claude_code``.
        on_import: called with the report of every poll that wrote events; its ``skipped``
            names each skipped line once, except when a poll converts the file whole again (a
            rewrite, the parentUuid fallback, a retried write).
        on_waiting: called, after the first poll, with each path that names no transcript yet
            (a folder with none, a file not written yet): following it waits for them, which
            the caller should say, since nothing else would.

    Raises:
        ValidationError: as ``import_claude_code`` (a malformed complete line), or a path whose
            folder does not exist; a ``poll_interval`` or ``until_idle`` that is no number of
            seconds (NaN), a ``stop`` that is no Event.
    """
    check_store("store", store)
    check_waiting(stop, poll_interval)
    if poll_interval <= 0:
        raise ValidationError("poll_interval must be positive", field="poll_interval")
    if until_idle is not None and not check_number("until_idle", until_idle, finite=False) >= 0:
        # NaN was never reached: it followed forever.
        msg = f"until_idle must be a number of seconds >= 0, not {until_idle!r}"
        raise ValidationError(msg, field="until_idle")
    follower = ClaudeCodeFollower(store, paths, skip_bad_lines=skip_bad_lines, tenant=tenant, user=user)
    last_change = time.monotonic()
    while True:
        report = follower.poll()
        if follower.polls == 1 and on_waiting is not None:
            for path in follower.waiting:
                on_waiting(path)
        if follower.changed:
            last_change = time.monotonic()
        if report is not None and report.written and on_import is not None:
            on_import(report)
        if stop is not None and stop.is_set():
            break
        if until_idle is not None and time.monotonic() - last_change >= until_idle:
            break
        if stop is not None:
            stop.wait(poll_interval)
        else:
            time.sleep(poll_interval)
    return follower.report()

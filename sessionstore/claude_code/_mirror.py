"""Claude Code transcripts handed over line by line, written as ``import --follow`` writes them.

A client that sees every transcript line as the CLI writes it (the Claude Agent SDK's
``SessionStore`` mirror) hands the lines to a ``TranscriptMirror`` instead of leaving files to
follow. Each transcript has:

* its *transcript session*: the events the importer writes for its lines, written as soon as
  each line is settled (``_follow``'s rule: importing it now gives the events a later import of
  the whole file would give), so it is an imported session like any other (``context``,
  ``audit``, ``revert``, ``export``);
* its *mirror log*: one ``TranscriptLinesMirrored`` per hand-over, in the same transaction as
  the events of the lines it settled. It numbers the lines and keeps, verbatim, those not
  settled yet: a line is durable once ``append`` returns, converted or not.

A family is a main transcript and its sub-agents' (settled together, as the follower settles a
session's files); the sub-agents' sessions and logs are children of the main's, and every
session of a family belongs to the family's tenant. Lines carrying a ``uuid`` already handed
over (a retried batch) are not added again; a uuid that comes back with other content is refused.

Every write checks that no other writer moved the family's sessions on since this mirror last
read them (``ConcurrencyError`` otherwise): the family is read again from the store and the
hand-over tried again, so two processes mirroring to one store never number a line twice.
Families are kept in memory between hand-overs (the last ``cache_size``); one not kept is read
back from the store (its transcript exported, its held lines taken from its log).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import (
    ConcurrencyError,
    DataCorruptionError,
    SessionExistsError,
    SessionNotFoundError,
    ValidationError,
)
from ..events import TranscriptLinesMirrored
from ..store import ErasureReceipt, SessionStore, SessionWrite
from ..store._contract import check_owner_key, check_session_id
from ._export import imported_lines, transcript_line
from ._follow import _Scan, scan_bytes, settle, settled_file
from ._import import Identity, ImportReport, _child_session_id, _import_files, _Owner, _Resume
from ._lines import BadLineError, scan_lines

__all__ = ["MIRROR_KEY", "MirrorFamily", "MirroredTranscript", "TranscriptMirror", "subagent_store_id"]

#: The session metadata key that marks a mirror log: {"session_id", "subpath"} of its transcript.
MIRROR_KEY = "transcript_mirror"
#: The folder named in a transcript session's ``file`` metadata: never read (see ``Identity``).
VIRTUAL_ROOT = Path("/transcript-mirror")
#: How often a hand-over is tried again after another writer moved the family on.
_ROUNDS = 8
#: Sessions listed a page at a time.
_PAGE = 500
_AGENT_FILE_STEM = "agent-"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def agent_id_of(subpath: str) -> str:
    """The sub-agent id a subpath names (``subagents/agent-<id>``, or a deeper folder): Claude
    Code's agent id, as its lines and its parent's tool results name it."""
    last = subpath.rsplit("/", 1)[-1]
    if last.startswith(_AGENT_FILE_STEM) and len(last) > len(_AGENT_FILE_STEM):
        return last[len(_AGENT_FILE_STEM) :]
    return last


def subagent_store_id(main_id: str, subpath: str) -> str:
    """The store session of a sub-agent's transcript: the importer's child id for
    ``subagents/agent-<id>``, a digest of the subpath for any other (two subpaths naming one
    agent id in different folders stay two sessions)."""
    agent = agent_id_of(subpath)
    if subpath == f"subagents/{_AGENT_FILE_STEM}{agent}":
        return _child_session_id(main_id, agent)
    return _child_session_id(main_id, "sub-" + _digest("subpath", subpath)[:16])


def log_id(store_id: str) -> str:
    """The mirror log of the transcript whose store session is ``store_id``."""
    try:
        return check_session_id(f"{store_id}.mirror")
    except ValidationError:  # too long
        return "mirror-" + _digest("mirror", store_id)[:40]


@dataclass(frozen=True)
class MirrorFamily:
    """A main transcript (and its sub-agents') as the client names it.

    Attributes:
        tenant: the tenant of every session of the family.
        session_id: Claude Code's session id (its lines' ``sessionId``).
        main_id: the store session of the main transcript (the client's choice of id).
        metadata: more metadata for the family's mirror logs (the client's key, say).
    """

    tenant: str
    session_id: str
    main_id: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MirroredTranscript:
    """One transcript of a family as its mirror log says: for listings."""

    subpath: str | None
    log_id: str
    lines: int
    #: When its last hand-over was stored (None: none yet) and the client state kept with it.
    updated_at: datetime | None
    client_state: dict[str, Any] | None


#: ``client_state(previous, entries)``: the state to keep with a hand-over of ``entries``.
ClientState = Callable[[dict[str, Any] | None, list[dict[str, Any]]], dict[str, Any] | None]


@dataclass
class _Member:
    """One transcript of a family as this mirror knows it."""

    subpath: str | None
    store_id: str
    log_id: str
    path: Path
    #: Every line so far, each followed by a newline.
    raw: bytearray = field(default_factory=bytearray)
    ends: list[int] = field(default_factory=list)
    scan: _Scan | None = None
    uuids: dict[str, int] = field(default_factory=dict)
    converted: int = 0  # lines 1..converted are events of the transcript session
    log_seq: int = 0  # the mirror log's last seq (0: none)
    log_created: bool = False  # the mirror log exists (a main one may have no record yet)
    store_seq: int = 0  # the transcript session's last seq (0: not created)
    meta: dict[str, Any] | None = None  # the sub-agent's manifest (its last agent_metadata line)
    client_state: dict[str, Any] | None = None
    indexed: int = 0  # lines of ``scan`` whose uuids are in ``uuids``

    @property
    def lines(self) -> int:
        return len(self.ends)

    def line(self, number: int) -> bytes:
        start = self.ends[number - 2] if number > 1 else 0
        return bytes(self.raw[start : self.ends[number - 1] - 1])

    def add(self, texts: Sequence[str]) -> None:
        for text in texts:
            self.raw += text.encode()
            self.raw += b"\n"
            self.ends.append(len(self.raw))


@dataclass
class _Family:
    key: MirrorFamily
    main: _Member
    subs: dict[str, _Member] = field(default_factory=dict)
    #: Where the last import of each transcript left off (the follower's ``_Resume``).
    resume: dict[Path, _Resume] = field(default_factory=dict)

    def members(self) -> list[_Member]:
        return [self.main, *self.subs.values()]

    def member(self, subpath: str | None) -> _Member:
        if subpath is None:
            return self.main
        found = self.subs.get(subpath)
        if found is None:
            store_id = subagent_store_id(self.key.main_id, subpath)
            found = _Member(subpath, store_id, log_id(store_id), _path(self.key.main_id, store_id, subpath))
            self.subs[subpath] = found
        return found

    def identity(self, member: _Member) -> Identity:
        agent = None if member.subpath is None else agent_id_of(member.subpath)
        return Identity(self.key.session_id, member.store_id, agent, member.meta)


def _path(main_id: str, store_id: str, subpath: str | None) -> Path:
    if subpath is None:
        return VIRTUAL_ROOT / f"{main_id}.jsonl"
    return VIRTUAL_ROOT / main_id / "subagents" / f"{store_id}.jsonl"


def _main_member(key: MirrorFamily) -> _Member:
    return _Member(None, key.main_id, log_id(key.main_id), _path(key.main_id, key.main_id, None))


# --- what a hand-over holds ----------------------------------------------------------------


def entry_lines(entries: object) -> list[str]:
    """Each entry as its transcript line, checked as the importer checks a line.

    Raises:
        ValidationError: ``entries`` is no list of JSON objects with a ``type``, or one cannot
            be a transcript line (NaN, a lone surrogate, nested too deep): names the entry.
    """
    if not isinstance(entries, list):
        msg = f"entries must be a list of transcript entries (dicts), not {type(entries).__name__}"
        raise ValidationError(msg, field="entries")
    texts: list[str] = []
    for index, entry in enumerate(entries):
        problem = None
        if not isinstance(entry, dict):
            problem = f"is a {type(entry).__name__}, not a dict"
        elif not isinstance(entry.get("type"), str):
            problem = "has no 'type' string"
        else:
            try:
                texts.append(transcript_line(entry))
            except (TypeError, ValueError, RecursionError) as e:
                problem = f"cannot be stored as JSON: {e}"
        if problem is None:
            problem = _line_problem(texts[-1])
        if problem is not None:
            msg = f"entry {index} {problem}; nothing of the batch was stored"
            raise ValidationError(msg, field=f"entries[{index}]", index=index)
    return texts


def _line_problem(text: str) -> str | None:
    """Why the importer would refuse ``text`` as a line, or None."""
    found: list[str] = []

    def bad_line(_number: int, reason: str) -> None:
        found.append(reason)

    try:
        data = text.encode()
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate ({e.reason})"
    try:
        scan_lines(VIRTUAL_ROOT, bad_line, lambda _line, _entry: None, data + b"\n")
    except BadLineError as e:  # pragma: no cover - scan_lines reports through bad_line
        return str(e)
    return found[0] if found else None


# --- the mirror ------------------------------------------------------------------------------


class TranscriptMirror:
    """Claude Code transcripts handed over line by line, written as sessions of ``store`` calls.

    Sync: every method takes the (sync) store to use for that call, so an async store's
    ``run_sync`` can drive it. Safe to share between threads: one hand-over of a family at a
    time.
    """

    def __init__(self, *, cache_size: int = 64) -> None:
        self._cache: OrderedDict[str, _Family] = OrderedDict()
        self._cache_size = cache_size
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # -- writing --

    def append(
        self,
        store: SessionStore,
        key: MirrorFamily,
        subpath: str | None,
        entries: list[dict[str, Any]],
        *,
        client_state: ClientState | None = None,
    ) -> int:
        """Hand over ``entries``, the next lines of the transcript (``subpath`` None: the main
        one); the lines added (an entry whose uuid was handed over before is not added again).

        Raises:
            ValidationError: an entry that cannot be a line, or whose uuid was handed over
                with other content: nothing of the batch is stored.
            SessionErasedError: the transcript (or its family) was erased.
            ConcurrencyError: other writers kept moving the family on (after ``_ROUNDS`` tries).
        """
        check_owner_key("tenant", key.tenant)
        texts = entry_lines(entries)
        if not texts:
            return 0
        with self._lock(key.main_id):
            for round_ in range(1, _ROUNDS + 1):
                family = self._family(store, key)
                try:
                    return self._append(store, family, subpath, entries, texts, client_state)
                except (ConcurrencyError, SessionExistsError):
                    self._forget(key.main_id)
                    if round_ == _ROUNDS:
                        raise
                except BaseException:
                    self._forget(key.main_id)  # what it knew may be half updated
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _append(
        self,
        store: SessionStore,
        family: _Family,
        subpath: str | None,
        entries: list[dict[str, Any]],
        texts: list[str],
        client_state: ClientState | None,
    ) -> int:
        member = family.member(subpath)
        new_entries, new_texts = _new_lines(member, entries, texts)
        if not new_texts:
            return 0  # a batch handed over before (its retry): nothing to write
        first = member.lines + 1
        member.add(new_texts)
        for entry in new_entries:
            if entry.get("type") == "agent_metadata":  # the manifest, mirrored as a line
                member.meta = {k: v for k, v in entry.items() if k != "type"}
        member.scan = scan_bytes(member.path, False, member.raw, member.scan, family.identity(member))
        assert member.scan is not None  # a named transcript reads no manifest
        scans = [m.scan for m in family.members() if m.scan is not None]
        settle(scans)
        batch = _batch(family)
        converted = {id(m): max(m.converted, m.scan.settled if m.scan else 0) for m in batch}
        after = converted.get(id(member), member.converted)
        state = member.client_state
        if client_state is not None:
            state = client_state(member.client_state, new_entries)
        record = TranscriptLinesMirrored(
            first_line=first,
            count=len(new_texts),
            held=new_texts[max(0, after - first + 1) :],
            client_state=state,
        )
        writes = _log_writes(family, member, record)
        files = [settled_file(m.scan, []) for m in batch if m.scan is not None]
        expected = {m.store_id: m.store_seq for m in batch}
        report = _import_files(
            store,
            files,
            [],
            skip_bad_lines=False,
            progress=None,
            owner=_Owner(family.key.tenant),
            snapshot=False,
            resume=family.resume,
            expected=expected,
            also=writes,
        )
        _written(family, member, batch, converted, report, writes, state)
        return len(new_texts)

    # -- reading --

    def entries(
        self, store: SessionStore, key: MirrorFamily, subpath: str | None
    ) -> list[dict[str, Any]] | None:
        """The transcript's lines as handed over, in order; None when none were.

        Read from the store (another process may have handed lines over since).
        """
        member = family_member(key, subpath)
        texts, _ = _stored_lines(store, member)
        if not texts:
            return None
        return [json.loads(text) for text in texts]

    def transcript(
        self, store: SessionStore, key: MirrorFamily, subpath: str | None
    ) -> MirroredTranscript | None:
        """One transcript of the family as its log says; None when it has no lines (or was erased)."""
        member = family_member(key, subpath)
        try:
            found = _transcript(store, member.log_id, subpath)
        except SessionNotFoundError:
            return None
        return found if found.lines else None

    def transcripts(self, store: SessionStore, key: MirrorFamily) -> list[MirroredTranscript]:
        """The family's transcripts with lines (the main one first), as their logs say."""
        main = family_member(key, None)
        try:
            children = store.descendants(main.log_id)
            store.get_session(main.log_id)
        except SessionNotFoundError:  # never written, or erased
            return []
        found = []
        for sid in [main.log_id, *children]:
            try:
                info = store.get_session(sid)
            except SessionNotFoundError:  # erased
                continue
            marked = info.metadata.get(MIRROR_KEY)
            if not isinstance(marked, dict):
                continue
            found.append(_transcript(store, sid, marked.get("subpath")))
        return [t for t in found if t.lines]

    def store_id(self, key: MirrorFamily, subpath: str | None) -> str:
        """The store session that holds the transcript's events (once a line of it settled)."""
        return family_member(key, subpath).store_id

    def families(self, store: SessionStore, tenant: str, metadata: dict[str, Any]) -> list[str]:
        """The session ids (Claude Code's) of the tenant's main transcripts mirrored with
        ``metadata`` in their logs' metadata, erased ones left out."""
        found: list[str] = []
        after: str | None = None
        while True:
            page = store.list_sessions(limit=_PAGE, after=after, tenant=tenant)
            for info in page:
                marked = info.metadata.get(MIRROR_KEY)
                if (
                    isinstance(marked, dict)
                    and marked.get("subpath") is None
                    and isinstance(marked.get("session_id"), str)
                    and all(info.metadata.get(k) == v for k, v in metadata.items())
                ):
                    found.append(marked["session_id"])
            if len(page) < _PAGE:
                return found
            after = page[-1].id

    def erase(
        self, store: SessionStore, key: MirrorFamily, subpath: str | None, *, reason: str
    ) -> list[ErasureReceipt]:
        """Erase the transcript (the main one: with its sub-agents') with receipts: its session
        and its mirror log. Nothing happens for a transcript never handed over."""
        member = family_member(key, subpath)
        with self._lock(key.main_id):
            self._forget(key.main_id)
            receipts: list[ErasureReceipt] = []
            for sid in (member.store_id, member.log_id):
                try:
                    receipts += store.erase(sid, reason=reason, with_forks=True)
                except SessionNotFoundError:
                    continue
            return receipts

    # -- the cache --

    def _lock(self, main_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(main_id, threading.Lock())

    def _forget(self, main_id: str) -> None:
        with self._guard:
            self._cache.pop(main_id, None)

    def _family(self, store: SessionStore, key: MirrorFamily) -> _Family:
        with self._guard:
            family = self._cache.get(key.main_id)
            if family is not None and family.key == key:
                self._cache.move_to_end(key.main_id)
                return family
        family = _read_family(store, key)
        with self._guard:
            self._cache[key.main_id] = family
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return family


def family_member(key: MirrorFamily, subpath: str | None) -> _Member:
    """The ids of a transcript of ``key`` (nothing read)."""
    if subpath is None:
        return _main_member(key)
    store_id = subagent_store_id(key.main_id, subpath)
    return _Member(subpath, store_id, log_id(store_id), _path(key.main_id, store_id, subpath))


def _new_lines(
    member: _Member, entries: list[dict[str, Any]], texts: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries not handed over before: a uuid seen again with the same line is a retry (left
    out); with another line, the batch is refused."""
    kept_entries: list[dict[str, Any]] = []
    kept: list[str] = []
    seen: dict[str, str] = {}
    for index, (entry, text) in enumerate(zip(entries, texts, strict=True)):
        key = entry.get("uuid")
        if not isinstance(key, str):
            kept_entries.append(entry)
            kept.append(text)
            continue
        if key in seen or key in member.uuids:
            earlier = seen[key] if key in seen else member.line(member.uuids[key]).decode()
            if earlier == text:
                continue
            where = "earlier in this batch" if key in seen else f"line {member.uuids[key]} of this transcript"
            msg = (
                f"entry {index} has uuid {key}, already {where} with other content; "
                "nothing of the batch was stored"
            )
            raise ValidationError(msg, field=f"entries[{index}].uuid", index=index)
        seen[key] = text
        kept_entries.append(entry)
        kept.append(text)
    return kept_entries, kept


def _batch(family: _Family) -> list[_Member]:
    """The transcripts to import now (the follower's ``_batch``): those whose settled lines grew,
    with the main transcript when a sub-agent is among them (its link goes there)."""
    grown = [m for m in family.members() if m.scan is not None and m.scan.settled > m.converted]
    if any(m.subpath is not None for m in grown) and family.main not in grown:
        main = family.main
        if main.scan is not None and main.scan.settled:
            grown.insert(0, main)
        else:  # pragma: no cover - settling holds a sub-agent until its parent's call is settled
            grown = [m for m in grown if m.subpath is None]
    return grown


def _log_writes(family: _Family, member: _Member, record: TranscriptLinesMirrored) -> list[SessionWrite]:
    """The mirror log writes of a hand-over: the record (creating the log with its first), and
    the main transcript's log (empty) when a sub-agent's comes first."""
    key = family.key
    writes: list[SessionWrite] = []
    main = family.main
    if member is not main and not main.log_created:
        writes.append(_log_create(key, main, []))
    if not member.log_created:
        writes.append(_log_create(key, member, [record]))
    else:
        writes.append(SessionWrite(member.log_id, [record], expected_seq=member.log_seq))
    return writes


def _log_create(key: MirrorFamily, member: _Member, events: list[TranscriptLinesMirrored]) -> SessionWrite:
    metadata = {**key.metadata, MIRROR_KEY: {"session_id": key.session_id, "subpath": member.subpath}}
    is_main = member.subpath is None
    return SessionWrite(
        member.log_id,
        events,
        create=True,
        metadata=metadata,
        parent_session_id=None if is_main else log_id(key.main_id),
        tenant=key.tenant if is_main else None,
    )


def _written(
    family: _Family,
    member: _Member,
    batch: list[_Member],
    converted: dict[int, int],
    report: ImportReport,
    writes: list[SessionWrite],
    state: dict[str, Any] | None,
) -> None:
    """Note what a committed hand-over wrote, for the next."""
    by_id = {item.session_id: item for item in report.sessions}
    for written in batch:
        written.converted = converted[id(written)]
        item = by_id.get(written.store_id)
        if item is not None:
            written.store_seq += item.written
    for write in writes:
        target = member if write.session_id == member.log_id else family.main
        target.log_seq += len(list(write.events))
        target.log_created = True
    member.client_state = state
    _index_uuids(member)


def _index_uuids(member: _Member) -> None:
    """Note the uuids of the lines read since the last call (the first line with one keeps it)."""
    if member.scan is None:
        return
    lines = member.scan.file.lines
    for line in lines[member.indexed :]:
        key = line.head.get("uuid")
        if isinstance(key, str):
            member.uuids.setdefault(key, line.number)
    member.indexed = len(lines)


# --- reading a family back -------------------------------------------------------------------


def _records(store: SessionStore, member: _Member) -> tuple[list[tuple[int, TranscriptLinesMirrored]], int]:
    """The log's hand-over records, and its last seq in the same read: the seq the next record
    must follow (read apart, a writer committing between the two would number lines twice)."""
    stored = store.read(member.log_id)
    records = [(r.seq, r.event) for r in stored if isinstance(r.event, TranscriptLinesMirrored)]
    return records, stored[-1].seq if stored else 0


def _stored_lines(
    store: SessionStore, member: _Member, records: list[tuple[int, TranscriptLinesMirrored]] | None = None
) -> tuple[list[str], int]:
    """The transcript's lines as the store holds them, and how many of them are imported
    (the first ones; the rest are held in its mirror log). ``records``: its log, if read."""
    if records is None:
        try:
            records, _ = _records(store, member)
        except SessionNotFoundError:
            return [], 0
    total = sum(record.count for _, record in records)
    try:
        lines = imported_lines(store, member.store_id)
    except SessionNotFoundError:
        lines = []
    imported = len(lines)
    held: dict[int, str] = {}
    for _, record in records:
        start = record.first_line + record.count - len(record.held)
        held.update(zip(range(start, start + len(record.held)), record.held, strict=True))
    for number in range(len(lines) + 1, total + 1):
        if number not in held:
            msg = (
                f"mirror log {member.log_id}: line {number} of {total} is neither imported into "
                f"{member.store_id} nor held"
            )
            raise DataCorruptionError(msg)
        lines.append(held[number])
    if len(lines) > total:
        msg = f"session {member.store_id} holds {len(lines)} lines; its mirror log numbers {total}"
        raise DataCorruptionError(msg)
    return lines, imported


def _transcript(store: SessionStore, sid: str, subpath: object) -> MirroredTranscript:
    records = store.read(sid)
    lines = 0
    state = None
    updated = None
    for recorded in records:
        event = recorded.event
        if isinstance(event, TranscriptLinesMirrored):
            lines += event.count
            state = event.client_state
            updated = recorded.created_at
    return MirroredTranscript(subpath if isinstance(subpath, str) else None, sid, lines, updated, state)


def _read_member(store: SessionStore, family: _Family, member: _Member) -> None:
    try:
        records, member.log_seq = _records(store, member)
    except SessionNotFoundError:
        return
    member.log_created = True
    if records:
        member.client_state = records[-1][1].client_state
    texts, member.converted = _stored_lines(store, member, records)
    try:
        member.store_seq = store.last_seq(member.store_id)
    except SessionNotFoundError:
        member.store_seq = 0
    member.add(texts)
    for text in texts:
        entry = json.loads(text)
        if isinstance(entry, dict) and entry.get("type") == "agent_metadata":
            member.meta = {k: v for k, v in entry.items() if k != "type"}
    if texts:
        member.scan = scan_bytes(member.path, False, member.raw, None, family.identity(member))
        _index_uuids(member)


def _read_family(store: SessionStore, key: MirrorFamily) -> _Family:
    family = _Family(key, _main_member(key))
    _read_member(store, family, family.main)
    if not family.main.log_created:
        return family
    for sid in store.descendants(family.main.log_id):
        try:
            info = store.get_session(sid)
        except SessionNotFoundError:
            continue
        marked = info.metadata.get(MIRROR_KEY)
        subpath = marked.get("subpath") if isinstance(marked, dict) else None
        if isinstance(subpath, str):
            _read_member(store, family, family.member(subpath))
    return family

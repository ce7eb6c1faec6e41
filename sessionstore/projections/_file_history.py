"""File history: a content-addressed checkpoint of the tracked files per user turn, and rewind.

The flow (Claude Code's ``/rewind``, SPEC section 9):

1. When a user message opens a turn, ``FileHistory.snapshot_turn`` records a
   ``FileHistorySnapshot``: every tracked path -> the blob of its current content (or None).
2. Before the agent first edits a file in a turn, ``track_before_edit`` records the file's
   content as a ``FileBackedUp`` that extends the turn's checkpoint; from then on the file is
   tracked and every later checkpoint captures it.
3. ``rewind_files`` restores every tracked file to its content at a checkpoint — a file tracked
   only later is restored to its first backup, which is what it held before the agent first
   touched it — atomically per file (temp file, fsync, ``os.replace``) and only after every
   path passed the safety checks of ``sessionstore._paths``. ``rewind_conversation`` forks the
   session at the checkpoint's message. Each records an event in the session.

The ``file_history`` projection is the pure part: the visible checkpoints (at most
``MAX_SNAPSHOTS``; older ones stay in the log and leave the view), per-file versions, the first
backup of every tracked path and the read-file state. ``FileHistory`` is the part that does I/O.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .._paths import PathRefusedError, file_kind, read_regular_file, resolve_in_root, to_relative
from ..errors import (
    IntegrityCheckError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    ValidationError,
)
from ..events._files import (
    ConversationRewound,
    FileBackedUp,
    FileHistorySnapshot,
    FileRead,
    FilesRewindFailed,
    FilesRewindStarted,
    FilesRewound,
)
from ..store._contract import ANY, RecordedEvent, check_session_id
from ._base import Projection, fold, rebuild, register_projection, save_snapshot
from ._message_list import canonical_json
from ._session import Session

__all__ = [
    # Re-exported so the package facade imports the whole feature from one module.
    "ConversationRewound",
    "FileBackedUp",
    "FileChange",
    "FileCheckpoint",
    "FileHistory",
    "FileHistoryProjection",
    "FileHistorySnapshot",
    "FileHistoryState",
    "FileRead",
    "FileVersion",
    "FilesRewindError",
    "FilesRewindFailed",
    "FilesRewindStarted",
    "FilesRewound",
    "MAX_SNAPSHOTS",
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "PathRefusedError",
    "ReadRecord",
    "RewindPlan",
    "RewindResult",
    "UnfinishedRewind",
]

#: Checkpoints visible per session (SPEC section 11); older ones stay in the log.
MAX_SNAPSHOTS = 100
#: How many recently read files a post-compact restore re-attaches (SPEC section 11).
POST_COMPACT_MAX_FILES_TO_RESTORE = 5

_FILE_EVENT_TYPES = frozenset(
    {
        "file_history_snapshot",
        "file_backed_up",
        "file_read",
        "files_rewind_started",
        "files_rewound",
        "files_rewind_failed",
    }
)


@dataclass(frozen=True)
class FileVersion:
    """One captured content of a path: its blob (None: did not exist) and its version number.

    The version starts at 1 and grows by one each time a capture of the path differs from the
    one before (Claude Code's ``<hash>@v<N>`` backups).
    """

    blob_sha256: str | None
    version: int


@dataclass
class FileCheckpoint:
    """A visible checkpoint: the tracked files as the turn of ``message_uuid`` began.

    Attributes:
        number: 1 for the session's first checkpoint, counting those that left the view.
        files: the paths tracked when the turn began, plus those first backed up during it.
        changed: paths whose content differs at the next checkpoint (what the turn changed);
            None for the latest checkpoint, whose turn the log cannot close yet.
    """

    number: int
    seq: int
    event_id: str
    message_uuid: str
    created_at: str
    files: dict[str, FileVersion]
    root: str | None = None
    changed: list[str] | None = None


@dataclass(frozen=True)
class ReadRecord:
    """The latest read of one path: what was read and when (``seq``, ``read_at``)."""

    path: str
    blob_sha256: str | None
    size: int | None
    mtime_ns: int | None
    tool_use_id: str | None
    seq: int
    read_at: str


@dataclass(frozen=True)
class UnfinishedRewind:
    """A files rewind that started changing files and did not finish.

    Attributes:
        seq: the seq of its ``FilesRewindStarted``.
        failed: True when it stopped on an error (``FilesRewindFailed``: ``applied`` and
            ``error`` say how far it got); False when no outcome was recorded (the process
            was killed): any of ``restore`` and ``delete`` may or may not have changed.
    """

    message_uuid: str
    seq: int
    started_event_id: str
    restore: list[str]
    delete: list[str]
    failed: bool = False
    applied: list[str] | None = None
    error: str | None = None

    def describe(self) -> str:
        """One line for a person: which rewind, how far it got, what to do."""
        planned = len(self.restore) + len(self.delete)
        if self.failed:
            how = f"failed after {len(self.applied or [])} of {planned} changes: {self.error}"
        else:
            how = f"was interrupted (no outcome recorded) with {planned} changes planned"
        return (
            f"files rewind to {self.message_uuid} (seq {self.seq}) {how}; "
            "files may be mixed: rewind again to finish"
        )


@dataclass
class FileHistoryState:
    """The ``file_history`` view (read-only by convention).

    Attributes:
        checkpoints: the visible checkpoints, oldest first, at most ``MAX_SNAPSHOTS``.
        total_checkpoints: every checkpoint ever recorded in the session.
        first_backup: each tracked path -> its content before the agent first touched it.
        latest: each tracked path -> its newest captured version.
        reads: each path read -> its latest read, least recently read first.
        unfinished_rewind: the latest files rewind, when it did not finish (killed, or failed
            half way): its files may be a mix of old and restored content until a rewind
            finishes.
    """

    checkpoints: list[FileCheckpoint] = field(default_factory=list)
    total_checkpoints: int = 0
    first_backup: dict[str, str | None] = field(default_factory=dict)
    latest: dict[str, FileVersion] = field(default_factory=dict)
    reads: dict[str, ReadRecord] = field(default_factory=dict)
    unfinished_rewind: UnfinishedRewind | None = None

    def tracked(self) -> list[str]:
        """Every tracked path, sorted."""
        return sorted(self.first_backup)

    def checkpoint(self, message_uuid: str) -> FileCheckpoint | None:
        """The newest visible checkpoint of ``message_uuid``, or None."""
        for checkpoint in reversed(self.checkpoints):
            if checkpoint.message_uuid == message_uuid:
                return checkpoint
        return None

    def contents_at(self, checkpoint: FileCheckpoint) -> dict[str, str | None]:
        """Every tracked path -> its blob at ``checkpoint`` (None: it did not exist then).

        A path tracked only after the checkpoint was untouched by the agent until its first
        backup, so that backup is its content at the checkpoint.
        """
        return {
            path: checkpoint.files[path].blob_sha256 if path in checkpoint.files else first
            for path, first in self.first_backup.items()
        }

    def recent_reads(self, limit: int | None = POST_COMPACT_MAX_FILES_TO_RESTORE) -> list[ReadRecord]:
        """The most recently read files, newest first (``limit=None``: all): what a post-compact
        restore re-attaches, re-reading each file and skipping those the kept messages show.
        """
        newest_first = list(reversed(self.reads.values()))
        return newest_first if limit is None else newest_first[:limit]


def _capture(state: FileHistoryState, path: str, blob: str | None) -> FileVersion:
    """Record a capture of ``path`` and return its version (a new one only if the blob changed)."""
    previous = state.latest.get(path)
    if previous is None:
        version = FileVersion(blob, 1)
    elif previous.blob_sha256 == blob:
        version = previous
    else:
        version = FileVersion(blob, previous.version + 1)
    state.latest[path] = version
    state.first_backup.setdefault(path, blob)
    return version


def _rewind_outcome(
    current: UnfinishedRewind | None,
    event: RecordedEvent,
    decoded: FilesRewindStarted | FilesRewound | FilesRewindFailed,
) -> UnfinishedRewind | None:
    """The unfinished rewind after one rewind event: a start opens one, its outcome closes it."""
    if isinstance(decoded, FilesRewindStarted):
        return UnfinishedRewind(
            decoded.message_uuid, event.seq, event.event_id, list(decoded.restore), list(decoded.delete)
        )
    if isinstance(decoded, FilesRewound):
        # A finished rewind leaves every tracked file at its checkpoint: nothing is mixed any more.
        return None
    started = (
        current if current is not None and current.started_event_id == decoded.started_event_id else None
    )
    return UnfinishedRewind(
        decoded.message_uuid,
        started.seq if started is not None else event.seq,
        decoded.started_event_id,
        started.restore if started is not None else [],
        started.delete if started is not None else [],
        failed=True,
        applied=list(decoded.applied),
        error=decoded.error,
    )


@register_projection
class FileHistoryProjection(Projection[FileHistoryState]):
    """Folds file reads, backups and checkpoints into ``FileHistoryState``."""

    name: ClassVar[str] = "file_history"
    version: ClassVar[int] = 2

    def initial(self) -> FileHistoryState:
        """Nothing tracked, read or checkpointed."""
        return FileHistoryState()

    def apply(self, state: FileHistoryState, event: RecordedEvent) -> FileHistoryState:
        """Add a checkpoint, a backup or a read; every other event leaves the state as it is."""
        if event.type not in _FILE_EVENT_TYPES:
            return state
        decoded = event.event
        if isinstance(decoded, FileHistorySnapshot):
            self._add_checkpoint(state, event, decoded)
        elif isinstance(decoded, FileBackedUp):
            version = _capture(state, decoded.path, decoded.blob_sha256)
            if decoded.message_uuid is not None:
                checkpoint = state.checkpoint(decoded.message_uuid)
                # The checkpoint already holds the path's content as the turn began: keep it.
                if checkpoint is not None and decoded.path not in checkpoint.files:
                    checkpoint.files[decoded.path] = version
        elif isinstance(decoded, FilesRewindStarted | FilesRewound | FilesRewindFailed):
            state.unfinished_rewind = _rewind_outcome(state.unfinished_rewind, event, decoded)
        elif isinstance(decoded, FileRead):
            state.reads.pop(decoded.path, None)  # re-insert: the dict stays in read order
            state.reads[decoded.path] = ReadRecord(
                decoded.path,
                decoded.blob_sha256,
                decoded.size,
                decoded.mtime_ns,
                decoded.tool_use_id,
                event.seq,
                event.created_at.isoformat(),
            )
        return state

    @staticmethod
    def _add_checkpoint(state: FileHistoryState, event: RecordedEvent, snapshot: FileHistorySnapshot) -> None:
        previous = state.checkpoints[-1] if state.checkpoints else None
        before = state.contents_at(previous) if previous is not None else {}
        files = {path: _capture(state, path, blob) for path, blob in sorted(snapshot.files.items())}
        state.total_checkpoints += 1
        checkpoint = FileCheckpoint(
            state.total_checkpoints,
            event.seq,
            event.event_id,
            snapshot.message_uuid,
            event.created_at.isoformat(),
            files,
            snapshot.root,
        )
        if previous is not None:
            after = state.contents_at(checkpoint)
            previous.changed = sorted(path for path in after if after[path] != before.get(path, after[path]))
        state.checkpoints.append(checkpoint)
        if len(state.checkpoints) > MAX_SNAPSHOTS:
            del state.checkpoints[0]

    def dump(self, state: FileHistoryState) -> bytes:
        """The state as deterministic JSON."""

        def version(v: FileVersion) -> list[Any]:
            return [v.blob_sha256, v.version]

        data = {
            "checkpoints": [
                [
                    c.number,
                    c.seq,
                    c.event_id,
                    c.message_uuid,
                    c.created_at,
                    {p: version(v) for p, v in c.files.items()},
                    c.root,
                    c.changed,
                ]
                for c in state.checkpoints
            ],
            "total": state.total_checkpoints,
            "first_backup": state.first_backup,
            "latest": {p: version(v) for p, v in state.latest.items()},
            "reads": [
                [r.path, r.blob_sha256, r.size, r.mtime_ns, r.tool_use_id, r.seq, r.read_at]
                for r in state.reads.values()
            ],
            "unfinished_rewind": (
                None if state.unfinished_rewind is None else dataclasses.asdict(state.unfinished_rewind)
            ),
        }
        return canonical_json(data)

    def load(self, data: bytes) -> FileHistoryState:
        """A state from ``dump``'s JSON."""
        saved = json.loads(data)

        def versions(raw: dict[str, list[Any]]) -> dict[str, FileVersion]:
            return {p: FileVersion(blob, int(v)) for p, (blob, v) in raw.items()}

        return FileHistoryState(
            checkpoints=[
                FileCheckpoint(int(n), int(s), str(e), str(m), str(t), versions(f), r, c)
                for n, s, e, m, t, f, r, c in saved["checkpoints"]
            ],
            total_checkpoints=int(saved["total"]),
            first_backup=dict(saved["first_backup"]),
            latest=versions(saved["latest"]),
            reads={row[0]: ReadRecord(*row) for row in saved["reads"]},
            unfinished_rewind=(
                None if saved["unfinished_rewind"] is None else UnfinishedRewind(**saved["unfinished_rewind"])
            ),
        )


# -- rewind plans --


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(frozen=True)
class FileChange:
    """What a rewind does to one tracked path.

    Attributes:
        path: the stored (root-relative) path.
        action: ``create`` (absent now), ``write`` (content differs), ``delete`` (did not exist
            at the checkpoint) or ``unchanged``.
        target: the absolute file acted on (a symlink inside the root is followed).
        before: the content now (None: absent).
        after: the content at the checkpoint (None: absent).
    """

    path: str
    action: Literal["create", "write", "delete", "unchanged"]
    target: str
    before: bytes | None = field(default=None, repr=False)
    after: bytes | None = field(default=None, repr=False)

    def diff(self) -> str:
        """A unified diff from the content now to the checkpoint's (``""`` when unchanged);
        a one-line note when either side is not UTF-8 text.
        """
        if self.action == "unchanged":
            return ""
        old, new = self.before or b"", self.after or b""
        from_name = f"a/{self.path}" if self.before is not None else "/dev/null"
        to_name = f"b/{self.path}" if self.after is not None else "/dev/null"
        if not (_is_text(old) and _is_text(new)):
            return f"Binary files {from_name} and {to_name} differ ({len(old)} -> {len(new)} bytes)\n"
        lines = difflib.unified_diff(
            old.decode().splitlines(keepends=True),
            new.decode().splitlines(keepends=True),
            from_name,
            to_name,
        )
        return "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
        )


@dataclass(frozen=True)
class RewindPlan:
    """Every tracked path's change for a files rewind to one checkpoint (applied or not)."""

    message_uuid: str
    snapshot_seq: int
    changes: tuple[FileChange, ...]

    def _paths(self, *actions: str) -> list[str]:
        return [c.path for c in self.changes if c.action in actions]

    @property
    def restored(self) -> list[str]:
        """Paths (re)written with their checkpoint content."""
        return self._paths("create", "write")

    @property
    def deleted(self) -> list[str]:
        """Paths removed because they did not exist at the checkpoint."""
        return self._paths("delete")

    @property
    def unchanged(self) -> list[str]:
        """Paths already as they were at the checkpoint."""
        return self._paths("unchanged")

    def diff(self) -> str:
        """The unified diff of every change, path by path."""
        return "".join(change.diff() for change in self.changes)


@dataclass(frozen=True)
class RewindResult:
    """What ``FileHistory.rewind`` did (or, with ``dry_run``, would do).

    Attributes:
        files: the files plan, when files were rewound.
        fork_seq: the seq the conversation fork shares the log up to, when the conversation
            was rewound.
        fork_session_id: the fork's id (None on a dry run).
        events_dropped: events after ``fork_seq`` that the fork does not see.
    """

    message_uuid: str
    dry_run: bool
    files: RewindPlan | None = None
    fork_seq: int | None = None
    fork_session_id: str | None = None
    events_dropped: int | None = None


# -- I/O --


def _read_file(target: str) -> bytes | None:
    """The file's bytes, or None if nothing is there (a dangling link counts as nothing).

    Raises:
        PathRefusedError: something other than a regular file is there (a FIFO would block
            the read forever, a device never ends); ``_resolve`` refuses these first.
    """
    try:
        return read_regular_file(target)
    except FileNotFoundError:
        return None


def _not_a_file(target: str) -> str | None:
    """Why what is at ``target`` cannot be read or replaced as a file, or None (a file, or nothing)."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return None
    return None if stat.S_ISREG(mode) else f"is {file_kind(mode)}, not a regular file"


def _obstacle(target: str) -> str | None:
    """Why no file can be created at ``target`` (an ancestor is not a directory), or None."""
    ancestor = os.path.dirname(target)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        return f"{ancestor} is not a directory"
    return None


def _write_temp(target: str, data: bytes) -> str:
    """Write ``data`` to a new temp file beside ``target``, fsynced, with ``target``'s mode."""
    directory, name = os.path.split(target)
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.rewind-tmp")
    # 0o666 through the umask, like any new file; an existing file's mode is copied below.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
    except BaseException:
        os.unlink(temp)
        raise
    return temp


def _fsync_directories(paths: Iterable[str]) -> None:
    """Make renames and unlinks in these directories durable (POSIX needs the directory fsynced)."""
    for directory in sorted({os.path.dirname(p) for p in paths}):
        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError:  # pragma: no cover - a platform that cannot open directories
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_temps(plan: RewindPlan) -> list[tuple[str, str]]:
    """Phase 1: every new content in a temp file beside its target, fsynced; (temp, target) pairs.

    A failure removes the temps written so far and leaves every file as it was.
    """
    temps: list[tuple[str, str]] = []
    try:
        for change in plan.changes:
            if change.action in ("create", "write"):
                assert change.after is not None  # "create" and "write" always carry content
                temps.append((_write_temp(change.target, change.after), change.target))
    except BaseException:
        _remove_temps(temps)
        raise
    return temps


def _remove_temps(temps: list[tuple[str, str]]) -> None:
    for temp, _ in temps:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def _swap_in(plan: RewindPlan, temps: list[tuple[str, str]], applied: list[str]) -> None:
    """Phase 2: rename each temp over its target (atomic), unlink deleted files, fsync the folders.

    Appends each path to ``applied`` as soon as its file holds the checkpoint's content, so a
    failure half way can say exactly how far it got.
    """
    by_target = {c.target: c.path for c in plan.changes}
    for temp, target in temps:
        os.replace(temp, target)
        applied.append(by_target[target])
    deletes = [c for c in plan.changes if c.action == "delete"]
    for change in deletes:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(change.target)
        applied.append(change.path)
    _fsync_directories([target for _, target in temps] + [c.target for c in deletes])


def _contradictions(wanted: dict[str, str | None]) -> dict[str, str]:
    """Paths a checkpoint holds as files below another path it also holds as a file.

    No real tree has both ``a`` and ``a/b`` as files, so only a crafted or corrupt log asks for
    it; restoring it would fail half way, so it is refused before anything is written.
    """
    files = {path for path, blob in wanted.items() if blob is not None}
    refused: dict[str, str] = {}
    for path in files:
        parts = path.split("/")
        for end in range(1, len(parts)):
            ancestor = "/".join(parts[:end])
            if ancestor in files:
                refused[path] = f"the checkpoint also holds {ancestor!r} as a file"
                break
    return refused


class FilesRewindError(SessionStoreError):
    """A files rewind failed after it began changing files; ``FilesRewindFailed`` records it.

    Attributes:
        applied: paths that hold their checkpoint content now.
        not_applied: paths that still hold what they held before.
    """

    def __init__(
        self, message_uuid: str, applied: list[str], not_applied: list[str], error: BaseException
    ) -> None:
        super().__init__(
            f"files rewind to {message_uuid} stopped after {len(applied)} of "
            f"{len(applied) + len(not_applied)} changes: {error}; not applied: {', '.join(not_applied)} "
            "(recorded in the log; rewind again to finish)"
        )
        self.applied = applied
        self.not_applied = not_applied


class FileHistory:
    """Checkpoints and rewind for one live session's files under a project root.

    Keeps the ``file_history`` view current with what anyone appends to the session, and
    appends its events through ``session.append``: a decision made on a stale view fails with
    ``ConcurrencyError`` instead of interleaving. Not thread-safe (like ``Session``).

    Args:
        session: the live session.
        root: the project root every path is relative to. None: only the view is available
            (file operations raise ``ValidationError``); the root a checkpoint recorded is
            never used in its place, since any appender controls it.
        use_snapshots: start from a stored projection snapshot when there is one.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self, session: Session, root: str | os.PathLike[str] | None = None, *, use_snapshots: bool = True
    ) -> None:
        self.session = session
        self.store = session.store
        self._projection = FileHistoryProjection()
        # The session's own numbering: a fork sees its parent's checkpoints up to the fork point.
        self._state, self._seq = rebuild(
            self.store,
            session.id,
            self._projection,
            tokenizer=session.tokenizer,
            use_snapshots=use_snapshots,
            read=session.log.read,
        )
        self._root = None if root is None else os.path.abspath(root)

    # -- the view --

    def refresh(self) -> FileHistoryState:
        """Fold what was appended since the last refresh (by anyone) and return the state."""
        self.session.refresh()
        if self.session.last_seq > self._seq:
            tail = self.session.log.read(self._seq + 1, self.session.last_seq)
            self._state = fold(self._projection, tail, self._state)
            self._seq = self.session.last_seq
        return self._state

    @property
    def state(self) -> FileHistoryState:
        """The current ``file_history`` view."""
        return self.refresh()

    @property
    def recorded_root(self) -> str | None:
        """The project root recorded by the latest checkpoint, if any: informational only.

        Anyone who can append to the session can write any string there, so it is never used
        as the root: files are read and restored only under the root the caller gives.
        """
        checkpoints = self.state.checkpoints
        return checkpoints[-1].root if checkpoints else None

    @property
    def root(self) -> str:
        """The project root in use: the one given to the constructor.

        Raises:
            ValidationError: none was given, or it is not a directory.
        """
        root = self._root
        if root is None:
            msg = "no project root: pass root= (the root a checkpoint recorded is never used by itself)"
            raise ValidationError(msg, field="root")
        if not os.path.isdir(root):
            msg = f"project root {root} is not a directory"
            raise ValidationError(msg, field="root")
        return root

    def checkpoints(self) -> list[FileCheckpoint]:
        """The visible checkpoints, oldest first (at most ``MAX_SNAPSHOTS``)."""
        return list(self.state.checkpoints)

    def pending_changes(self) -> list[str]:
        """Tracked paths whose files now differ from the latest checkpoint: what the current
        turn changed so far (every tracked path when there is no checkpoint).

        Raises:
            PathRefusedError: a tracked path is unsafe to read now.
        """
        state = self.state
        expected = state.contents_at(state.checkpoints[-1]) if state.checkpoints else {}
        current = self._capture_paths(state.tracked(), store=False)
        return [path for path, blob in current.items() if path not in expected or expected[path] != blob]

    def save_snapshot(self) -> None:
        """Persist the view at the last folded seq, so the next ``FileHistory`` starts there."""
        if self._seq >= 1:
            save_snapshot(
                self.store,
                self.session.id,
                self._projection,
                self._state,
                self._seq,
                tokenizer=self.session.tokenizer,
            )

    # -- recording --

    def _resolve(self, paths: Iterable[str]) -> dict[str, str]:
        """Each stored path -> the absolute file to act on; refuses them all at once."""
        real_root = os.path.realpath(self.root)
        targets: dict[str, str] = {}
        refused: dict[str, str] = {}
        for path in paths:
            target, problem = resolve_in_root(real_root, path)
            if target is None:
                refused[path] = problem or "refused"
            elif (why := _not_a_file(target)) is not None:
                refused[path] = why
            else:
                targets[path] = target
        if refused:
            raise PathRefusedError(refused)
        return targets

    def _capture_paths(self, paths: Iterable[str], *, store: bool = True) -> dict[str, str | None]:
        """Each path -> the blob of its content now (put into the blob store when ``store``)."""
        captured: dict[str, str | None] = {}
        for path, target in self._resolve(paths).items():
            data = _read_file(target)
            if data is None:
                captured[path] = None
                continue
            captured[path] = self._put(path, data) if store else hashlib.sha256(data).hexdigest()
        return captured

    def _put(self, path: str, data: bytes) -> str:
        """Store ``data`` (read from ``path``) unless the path's last capture or read already did."""
        digest = hashlib.sha256(data).hexdigest()
        captured = self._state.latest.get(path)
        read = self._state.reads.get(path)
        # A blob an event names is stored: blobs go in before the events that name them.
        if (captured is not None and captured.blob_sha256 == digest) or (
            read is not None and read.blob_sha256 == digest
        ):
            return digest
        return self.store.put_blob(data).sha256

    def _relative(self, path: str | os.PathLike[str]) -> str:
        return to_relative(self.root, path)

    def record_read(self, path: str | os.PathLike[str], *, tool_use_id: str | None = None) -> FileRead:
        """Record that the agent read ``path`` (its content goes to the blob store).

        Raises:
            PathRefusedError: the path is outside the root, climbs, or is a directory.
        """
        self.refresh()
        relative = self._relative(path)
        target = self._resolve([relative])[relative]
        data = _read_file(target)
        blob = None if data is None else self._put(relative, data)
        mtime = os.stat(target).st_mtime_ns if data is not None else None
        event = FileRead(
            path=relative,
            blob_sha256=blob,
            size=None if data is None else len(data),
            mtime_ns=mtime,
            tool_use_id=tool_use_id,
        )
        self.session.append([event])
        self.refresh()
        return event

    def track_before_edit(
        self, path: str | os.PathLike[str], *, tool_use_id: str | None = None
    ) -> FileBackedUp | None:
        """Back up ``path`` before the agent edits it; call before every edit or write.

        The first edit of a path in a turn records a ``FileBackedUp`` extending the turn's
        checkpoint; later ones return None (the checkpoint already holds the content the turn
        began with). A file that does not exist yet is backed up as "did not exist".

        Raises:
            PathRefusedError: the path is outside the root, climbs, or is a directory.
        """
        state = self.refresh()
        relative = self._relative(path)
        latest = state.checkpoints[-1] if state.checkpoints else None
        if (latest is not None and relative in latest.files) or (
            latest is None and relative in state.first_backup
        ):
            return None
        blob = self._capture_paths([relative])[relative]
        event = FileBackedUp(
            message_uuid=latest.message_uuid if latest is not None else None,
            path=relative,
            blob_sha256=blob,
            tool_use_id=tool_use_id,
        )
        self.session.append([event])
        self.refresh()
        return event

    def snapshot_turn(self, message_uuid: str) -> FileHistorySnapshot:
        """Record the checkpoint of the turn the user message ``message_uuid`` opens.

        Call it when the user message is submitted, before the agent acts on it. Captures every
        tracked file; unchanged contents are not stored again.

        Raises:
            PathRefusedError: a tracked path is unsafe to read now (e.g. became an escaping
                symlink); nothing is recorded.
        """
        state = self.refresh()
        files = self._capture_paths(state.tracked())
        event = FileHistorySnapshot(message_uuid=message_uuid, files=files, root=self.root)
        self.session.append([event])
        self.refresh()
        return event

    # -- rewinding --

    def plan_files(self, message_uuid: str) -> RewindPlan:
        """What rewinding the files to ``message_uuid``'s checkpoint would do (writes nothing).

        Raises:
            ValidationError: no visible checkpoint for the message.
            PathRefusedError: some tracked paths may not be restored; names every one.
            IntegrityCheckError: a checkpoint's blob is missing from the store.
        """
        state = self.refresh()
        checkpoint = state.checkpoint(message_uuid)
        if checkpoint is None:
            msg = (
                f"no checkpoint for message {message_uuid!r} among the {len(state.checkpoints)} visible "
                f"(at most {MAX_SNAPSHOTS} stay visible)"
            )
            raise ValidationError(msg, field="message_uuid")
        wanted = state.contents_at(checkpoint)
        contradictions = _contradictions(wanted)
        if contradictions:
            raise PathRefusedError(contradictions)
        targets = self._resolve(sorted(wanted))
        refused = {path: why for path, target in targets.items() if (why := _obstacle(target)) is not None}
        if refused:
            raise PathRefusedError(refused)
        changes: list[FileChange] = []
        for path, target in targets.items():
            blob = wanted[path]
            before = _read_file(target)
            after = None if blob is None else self._blob(blob, path)
            action: Literal["create", "write", "delete", "unchanged"]
            if before == after:
                action = "unchanged"
            elif after is None:
                action = "delete"
            else:
                action = "create" if before is None else "write"
            changes.append(FileChange(path, action, target, before, after))
        return RewindPlan(message_uuid, checkpoint.seq, tuple(changes))

    def _blob(self, sha256: str, path: str) -> bytes:
        try:
            return self.store.get_blob(sha256)
        except KeyError:
            msg = f"blob {sha256} of {path!r} is missing from the store"
            raise IntegrityCheckError(msg) from None

    def _message_seq(self, message_uuid: str) -> int:
        for entry in reversed(self.session.transcript_state.entries):
            if entry.type == "message_appended" and entry.payload.get("message_uuid") == message_uuid:
                return entry.seq
        msg = f"message {message_uuid!r} is not in session {self.session.id!r}"
        raise ValidationError(msg, field="message_uuid")

    def _check_fork_id(self, fork_session_id: str) -> None:
        """Refuse a bad or taken fork id before anything changes (not after the files did)."""
        check_session_id(fork_session_id)
        try:
            self.store.get_session(fork_session_id)
        except SessionNotFoundError:
            return
        raise SessionExistsError(fork_session_id)

    def rewind(
        self,
        message_uuid: str,
        *,
        files: bool = True,
        conversation: bool = True,
        dry_run: bool = False,
        fork_session_id: str | None = None,
    ) -> RewindResult:
        """Rewind the files, the conversation, or both, to the moment ``message_uuid`` was sent.

        Everything is checked before anything changes: the checkpoint, every path, every blob,
        the message. Files are then restored (each atomically: old or new, never partial), the
        conversation forks at the message's seq (``store.create_session(parent_session_id=...,
        fork_seq=...)``: the fork shares this log, nothing is copied), and ``FilesRewound`` /
        ``ConversationRewound`` are appended to this session in one transaction.

        Args:
            files: restore the tracked files to the message's checkpoint.
            conversation: fork the session at the message.
            dry_run: plan and return what would happen; write nothing.
            fork_session_id: the fork's id (default: a new uuid).

        Raises:
            ValidationError: nothing to rewind, no checkpoint, unknown message, bad fork id.
            PathRefusedError: paths that may not be restored (every one is named); nothing was
                written.
            SessionExistsError: ``fork_session_id`` is taken; nothing was written.
            OSError: the disk refused a temp file; no file changed.
            FilesRewindError: a file could not be replaced or removed after others were: the
                log records what was applied (``FilesRewindFailed``); rewind again to finish.
        """
        if not (files or conversation):
            msg = "rewind needs files=True, conversation=True, or both"
            raise ValidationError(msg)
        if conversation and fork_session_id is not None:
            self._check_fork_id(fork_session_id)
        plan = self.plan_files(message_uuid) if files else None
        fork_seq = self._message_seq(message_uuid) if conversation else None
        dropped = None if fork_seq is None else self.session.last_seq - fork_seq
        if dry_run:
            return RewindResult(message_uuid, True, plan, fork_seq, None, dropped)
        events: list[FilesRewound | ConversationRewound] = []
        if plan is not None:
            started = self._restore(plan)
            events.append(
                FilesRewound(
                    message_uuid=message_uuid,
                    snapshot_seq=plan.snapshot_seq,
                    restored=plan.restored,
                    deleted=plan.deleted,
                    unchanged=plan.unchanged,
                    started_event_id=started,
                )
            )
        fork_id = None
        if fork_seq is not None:
            info = self.store.create_session(
                fork_session_id,
                parent_session_id=self.session.id,
                fork_seq=fork_seq,
                metadata={"rewound_to": message_uuid},
            )
            fork_id = info.id
            events.append(
                ConversationRewound(message_uuid=message_uuid, fork_session_id=fork_id, fork_seq=fork_seq)
            )
        # ANY: the files already changed, so the record must land even if someone appended meanwhile.
        self.session.append(events, expected_seq=ANY)
        self.refresh()
        return RewindResult(message_uuid, False, plan, fork_seq, fork_id, dropped)

    def _restore(self, plan: RewindPlan) -> str:
        """Bring every file of ``plan`` to its checkpoint content; the ``FilesRewindStarted`` id.

        Phase 1 writes every new content to a temp file beside its target (fsynced); a failure
        there removes the temps and leaves every file and the log as they were. Then
        ``FilesRewindStarted`` is appended (a concurrent append refuses it: nothing changed
        yet), and phase 2 renames the temps over the targets (``os.replace`` is atomic) and
        unlinks deleted files, so a kill in the middle leaves each file whole, old or new, and
        the log says a rewind began. A failure in phase 2 is recorded as ``FilesRewindFailed``
        with what was applied, and raised as ``FilesRewindError``.
        """
        temps = _write_temps(plan)
        started = FilesRewindStarted(
            message_uuid=plan.message_uuid,
            snapshot_seq=plan.snapshot_seq,
            restore=plan.restored,
            delete=plan.deleted,
        )
        try:
            self.session.append([started])
        except BaseException:
            _remove_temps(temps)
            raise
        applied: list[str] = []
        try:
            _swap_in(plan, temps, applied)
        except Exception as e:
            _remove_temps(temps)  # those not renamed yet: their targets keep the old content
            not_applied = [p for p in plan.restored + plan.deleted if p not in applied]
            failed = FilesRewindFailed(
                message_uuid=plan.message_uuid,
                snapshot_seq=plan.snapshot_seq,
                started_event_id=str(started.event_id),
                applied=applied,
                not_applied=not_applied,
                error=f"{type(e).__name__}: {e}",
            )
            # ANY: some files already changed, so the record must land even if someone appended.
            self.session.append([failed], expected_seq=ANY)
            self.refresh()
            raise FilesRewindError(plan.message_uuid, applied, not_applied, e) from e
        return str(started.event_id)

    def rewind_files(self, message_uuid: str, *, dry_run: bool = False) -> RewindPlan:
        """Restore the tracked files to ``message_uuid``'s checkpoint; see ``rewind``."""
        plan = self.rewind(message_uuid, conversation=False, dry_run=dry_run).files
        assert plan is not None  # files=True always plans
        return plan

    def rewind_conversation(self, message_uuid: str, *, fork_session_id: str | None = None) -> str:
        """Fork the conversation at ``message_uuid`` and return the fork's id; see ``rewind``."""
        result = self.rewind(message_uuid, files=False, fork_session_id=fork_session_id)
        assert result.fork_session_id is not None  # conversation=True always forks
        return result.fork_session_id

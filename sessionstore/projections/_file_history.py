"""The ``file_history`` projection: checkpoints, backups, reads and rewinds folded into a view.

The pure part of file history (SPEC section 9): the visible checkpoints (at most
``MAX_SNAPSHOTS``; older ones stay in the log and leave the view), per-file versions, the first
backup of every tracked path, the read-file state and an unfinished files rewind. It reads no
file: capturing files and rewinding them is ``sessionstore.checkpoints``, which records the
events folded here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..events import (
    FileBackedUp,
    FileHistorySnapshot,
    FileRead,
    FilesRewindFailed,
    FilesRewindStarted,
    FilesRewound,
)
from ..store import RecordedEvent
from ._base import Projection, register_projection
from ._message_list import canonical_json

__all__ = [
    "FileCheckpoint",
    "FileHistoryProjection",
    "FileHistoryState",
    "FileVersion",
    "MAX_SNAPSHOTS",
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "ReadRecord",
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

    @property
    def recorded_root(self) -> str | None:
        """The project root recorded by the latest checkpoint, if any: informational only.

        Anyone who can append to the session can write any string there, so it is never used
        as the root files are read or restored under.
        """
        return self.checkpoints[-1].root if self.checkpoints else None

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

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

The ``file_history`` projection (``sessionstore.projections``) is the pure view these events
fold into; ``FileHistory`` is the part that does I/O.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Literal

from .._paths import resolve_in_root, to_relative
from ..errors import (
    DataCorruptionError,
    FilesRewindError,
    PathRefusedError,
    SessionExistsError,
    SessionNotFoundError,
    ValidationError,
)
from ..events import (
    ConversationRewound,
    FileBackedUp,
    FileHistorySnapshot,
    FileRead,
    FilesRewindFailed,
    FilesRewindStarted,
    FilesRewound,
)
from ..projections import (
    MAX_SNAPSHOTS,
    FileCheckpoint,
    FileHistoryProjection,
    FileHistoryState,
    Session,
    fold,
)
from ..projections._base import rebuild, save_snapshot
from ..projections._session import check_session
from ..store import ANY
from ..store._contract import check_session_id
from ._capture import _not_a_file, _read_file
from ._rewind import (
    FileChange,
    RewindPlan,
    RewindResult,
    _contradictions,
    _obstacle,
    _remove_temps,
    _swap_in,
    _write_temps,
)

__all__ = ["FileHistory"]


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
        check_session("session", session)
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
        return self.state.recorded_root

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
        return self.store.put_blob(data, session_id=self.session.id).sha256

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
            DataCorruptionError: a checkpoint's blob is missing from the store.
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
            return self.store.get_blob(sha256, session_id=self.session.id)
        except KeyError:
            msg = f"blob {sha256} of {path!r} is missing from the store"
            raise DataCorruptionError(msg) from None

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

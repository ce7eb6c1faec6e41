"""Files rewind: the plan of what a rewind changes, and its atomic two-phase restore.

Phase 1 writes every new content to a fsynced temp file beside its target; phase 2 renames the
temps over their targets (``os.replace`` is atomic) and unlinks deleted files. ``FileHistory``
records ``FilesRewindStarted`` between the phases and ``FilesRewindFailed`` if phase 2 stops.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from dataclasses import dataclass, field
from typing import Literal

from .._paths import fsync_directories, write_beside

__all__ = ["FileChange", "RewindPlan", "RewindResult"]


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
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return write_beside(target, [data], "rewind-tmp")


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
    fsync_directories([target for _, target in temps] + [c.target for c in deletes])


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

"""Events of the file history: what the agent read, what was backed up before an edit, one
checkpoint per user turn, and the rewinds.

File contents never travel in an event: they live once in the content-addressed blob store
(``put_blob``: SHA-256 keyed, deduplicated, compressed) and events name them by hash. A hash of
``None`` means "the file did not exist". Paths are relative to the project root in POSIX form
when ``FileHistory`` writes them; the events themselves accept any string (an importer may carry
Claude Code's absolute paths), because the restore is where paths are checked.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt

from ._base import Event, register_event

__all__ = [
    "ConversationRewound",
    "FileBackedUp",
    "FileHistorySnapshot",
    "FileRead",
    "FilesRewindFailed",
    "FilesRewindStarted",
    "FilesRewound",
]


@register_event
class FileRead(Event):
    """The agent read a file: the read-file state that post-compact restore draws on."""

    type: Literal["file_read"] = "file_read"
    path: str
    #: SHA-256 of the content read, or None when the file did not exist.
    blob_sha256: str | None
    size: NonNegativeInt | None = None
    #: The file's modification time (ns) when it was read.
    mtime_ns: int | None = None
    #: The tool call that read it, when known.
    tool_use_id: str | None = None


@register_event
class FileBackedUp(Event):
    """A file's content just before the agent first edited it in a turn (Claude Code's
    ``file-history-delta``): it extends the checkpoint of ``message_uuid``.
    """

    type: Literal["file_backed_up"] = "file_backed_up"
    #: The user message whose checkpoint this backup extends (None: before any checkpoint).
    message_uuid: str | None
    path: str
    blob_sha256: str | None
    tool_use_id: str | None = None


@register_event
class FileHistorySnapshot(Event):
    """The checkpoint of one user turn: every tracked file's content as the turn began."""

    type: Literal["file_history_snapshot"] = "file_history_snapshot"
    #: The user message that opened the turn.
    message_uuid: str
    #: Every tracked path -> blob hash, or None when the file did not exist.
    files: dict[str, str | None] = Field(default_factory=dict)
    #: The project root the paths were relative to (informational only: any appender controls
    #: it, so a restore never uses it as its root).
    root: str | None = None


@register_event
class FilesRewindStarted(Event):
    """A files rewind is about to change files: recorded before the first file changes.

    ``FilesRewound`` (it finished) or ``FilesRewindFailed`` (it stopped half way) names it in
    ``started_event_id``; with neither, the rewind was killed and the files listed here may be
    a mix of old and restored.
    """

    type: Literal["files_rewind_started"] = "files_rewind_started"
    message_uuid: str
    #: Seq of the FileHistorySnapshot being restored.
    snapshot_seq: int = Field(ge=1)
    #: Paths to be (re)written with their checkpoint content.
    restore: list[str] = Field(default_factory=list)
    #: Paths to be removed (they did not exist at the checkpoint).
    delete: list[str] = Field(default_factory=list)


@register_event
class FilesRewound(Event):
    """Tracked files were restored to the checkpoint of ``message_uuid``."""

    type: Literal["files_rewound"] = "files_rewound"
    message_uuid: str
    #: Seq of the FileHistorySnapshot restored.
    snapshot_seq: int = Field(ge=1)
    restored: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    #: The ``FilesRewindStarted`` this completes (None in logs written before it existed).
    started_event_id: str | None = None


@register_event
class FilesRewindFailed(Event):
    """A files rewind stopped half way: which paths got their checkpoint content, which did not.

    The paths in ``applied`` hold the checkpoint's content; those in ``not_applied`` still hold
    what they held before. Rewinding again to the same message finishes the job.
    """

    type: Literal["files_rewind_failed"] = "files_rewind_failed"
    message_uuid: str
    snapshot_seq: int = Field(ge=1)
    #: The ``FilesRewindStarted`` this closes.
    started_event_id: str
    applied: list[str] = Field(default_factory=list)
    not_applied: list[str] = Field(default_factory=list)
    #: What stopped it, as the operating system said.
    error: str


@register_event
class ConversationRewound(Event):
    """The conversation was rewound to ``message_uuid``: it continues in a fork of this session
    that shares this log up to ``fork_seq`` (the message's own seq).
    """

    type: Literal["conversation_rewound"] = "conversation_rewound"
    message_uuid: str
    fork_session_id: str
    fork_seq: NonNegativeInt

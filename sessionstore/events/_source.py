"""Events that keep an imported transcript's own lines, so nothing of the source is lost.

An importer turns each line of a foreign transcript (today: Claude Code's JSONL) into events.
Lines it understands become the usual events (``MessageAppended``, ``UsageRecorded``,
``CompactBoundary`` ...) plus an ``ImportedEntry`` holding the rest of the line; lines it does
not model become an ``OpaqueEntry`` holding the whole line. Between them, every line of the
source is in the log exactly once, with its line number, so an exporter can write the file
back byte for byte and an auditor can see what the importer did not interpret.

None of these events changes what the model sees: the API view ignores them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from ._base import Event, register_event, register_upcaster

__all__ = ["FileHistoryRecorded", "ImportedEntry", "OpaqueEntry"]


@register_event
class OpaqueEntry(Event):
    """A source line the importer does not model, kept verbatim (it is never dropped).

    Examples from Claude Code: ``progress``, ``attachment``, ``queue-operation``, ``summary``,
    ``last-prompt``, ``system/stop_hook_summary``, and any type that appears in a later release.
    """

    #: 2: ``object_index`` (several JSON objects on one line).
    SCHEMA_VERSION: ClassVar[int] = 2

    type: Literal["opaque_entry"] = "opaque_entry"
    #: The transcript format, e.g. ``"claude-code"``.
    source: str
    #: The entry's own type, with its subtype when it has one (``"system/turn_duration"``).
    entry_type: str
    #: 1-based line number in the source file.
    line: PositiveInt
    #: The line's JSON object, unchanged (key order included).
    entry: dict[str, Any]
    #: Which JSON object of the line this is: 0 for the first (usually the only one); 1, 2 ...
    #: for objects appended to the same line without a newline.
    object_index: NonNegativeInt = 0


@register_event
class ImportedEntry(Event):
    """The source line behind events the importer modelled: everything the events do not hold.

    ``entry`` is the line's JSON object with its key order; when ``content_moved`` is set the
    value of ``message.content`` is ``null`` here and lives in the ``message_appended`` event
    listed in ``events`` (content is the bulk of a transcript; it is stored once).
    """

    #: 2: ``object_index`` (several JSON objects on one line).
    SCHEMA_VERSION: ClassVar[int] = 2

    type: Literal["imported_entry"] = "imported_entry"
    source: str
    entry_type: str
    line: PositiveInt
    entry: dict[str, Any]
    #: As in ``OpaqueEntry``: the object's place on its line.
    object_index: NonNegativeInt = 0
    #: Ids of the events modelled from this line, in log order.
    events: list[str] = Field(default_factory=list)
    content_moved: bool = False


@register_upcaster("opaque_entry", 1)
@register_upcaster("imported_entry", 1)
def _first_object_of_its_line(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had one object per line."""
    return {**payload, "object_index": 0}


@register_event
class FileHistoryRecorded(Event):
    """A file-history checkpoint as Claude Code recorded it (``file-history-snapshot``/``-delta``).

    Claude Code's transcript names its pre-edit backups (``backupFileName`` under
    ``~/.claude/file-history/<session>/``) but does not hold their contents, so this keeps the
    record as written: which files were tracked for which prompt, at which backup version.
    """

    type: Literal["file_history_recorded"] = "file_history_recorded"
    kind: Literal["snapshot", "delta"]
    #: The prompt (user message uuid) whose checkpoint this is.
    message_uuid: str | None
    #: The line that caused the record: the prompt itself, or the assistant line that edited.
    trigger_uuid: str | None = None
    #: True when an existing checkpoint was extended rather than a new one opened.
    is_update: bool = False
    #: path -> Claude Code's backup record (``backupFileName`` or null, ``version``, ``backupTime``).
    tracked_files: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime | None = None

"""Events the LangGraph bridge records (``sessionstore.bridges.langgraph``): checkpoints and
pending writes of a LangGraph thread, one session per thread.

They live here, not in the bridge, so every log decodes without LangGraph installed: ``verify``,
``audit`` and the command line read a bridged session like any other. A serialized value of up
to 4 KiB is kept inline (base64); a larger one is a content-addressed blob (``put_blob``)
the event names by SHA-256, so erasing the session removes the blobs only it references.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import Event, register_event

__all__ = [
    "LangGraphChannelValue",
    "LangGraphCheckpointSaved",
    "LangGraphValue",
    "LangGraphWrite",
    "LangGraphWritesSaved",
]

_SHA256 = r"^[0-9a-f]{64}$"


class LangGraphValue(BaseModel):
    """A value LangGraph's serializer turned into ``(kind, bytes)``: the kind, and the bytes
    either inline (``data``, base64) or in the blob ``blob`` names (neither: no bytes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    data: str | None = None
    blob: str | None = Field(default=None, pattern=_SHA256)


class LangGraphChannelValue(BaseModel):
    """One channel's value at one version.

    A plain value is ``value``. A list (LangGraph's growing ``messages``) is stored as items:
    ``items`` are the blobs of the items appended to the list the channel held at
    ``base_version`` (None: ``items`` is the whole list). So a list that grows by one message a
    step stores one message a step, not the whole list again.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    value: LangGraphValue | None = None
    base_version: str | None = None
    items: tuple[LangGraphValue, ...] | None = None


@register_event
class LangGraphCheckpointSaved(Event):
    """A LangGraph checkpoint: its id, parent, metadata, and the channels whose version changed.

    ``checkpoint`` is the serialized checkpoint without its channel values (versions, versions
    seen, timestamp); ``channels`` holds the values of the versions new in it. Saving the same
    (namespace, id) again supersedes the earlier event, as LangGraph's own savers overwrite.
    """

    type: Literal["langgraph_checkpoint"] = "langgraph_checkpoint"
    checkpoint_ns: str = ""
    checkpoint_id: str
    parent_checkpoint_id: str | None = None
    #: Readable copies of the metadata's ``source`` and ``step`` (``metadata`` holds all of it).
    source: str | None = None
    step: int | None = None
    checkpoint: LangGraphValue
    metadata: LangGraphValue
    channels: dict[str, LangGraphChannelValue] = Field(default_factory=dict)


class LangGraphWrite(BaseModel):
    """One pending write of a task: its index, channel and value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idx: int
    channel: str
    value: LangGraphValue


@register_event
class LangGraphWritesSaved(Event):
    """A task's pending writes against a checkpoint (``put_writes``).

    Regular writes (``idx`` >= 0) are kept once per (task, idx): a repeat is ignored when read.
    Special ones (errors, interrupts, resumes: negative ``idx``) replace the earlier one.
    """

    type: Literal["langgraph_writes"] = "langgraph_writes"
    checkpoint_ns: str = ""
    checkpoint_id: str
    task_id: str
    task_path: str = ""
    writes: tuple[LangGraphWrite, ...]

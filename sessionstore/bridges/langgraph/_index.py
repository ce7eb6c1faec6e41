"""A thread's checkpoints, channel versions and pending writes, folded from its session's log.

The fold keeps references (inline bytes or blob hashes), never decoded values: it is what
``get_tuple`` and ``list`` look up, and it only ever grows by the events appended after the
last one it read (the log is append-only), so a saver catches up by reading the new events.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ...errors import DataCorruptionError
from ...events import (
    Event,
    LangGraphChannelValue,
    LangGraphCheckpointSaved,
    LangGraphValue,
    LangGraphWrite,
    LangGraphWritesSaved,
)

__all__ = ["StoredWrite", "ThreadIndex"]

#: How many resolved item lists a thread keeps (the versions a run reads and extends).
_ITEM_LISTS_KEPT = 32


@dataclass(frozen=True)
class StoredWrite:
    """A pending write as stored: the task that wrote it, its path, and the write."""

    task_id: str
    task_path: str
    write: LangGraphWrite


@dataclass
class ThreadIndex:
    """The fold of one session (one LangGraph thread): see the module docstring."""

    session_id: str
    thread_id: str
    last_seq: int = 0
    #: namespace -> checkpoint id -> the event that saved it (the last one for that id).
    checkpoints: dict[str, dict[str, LangGraphCheckpointSaved]] = field(default_factory=dict)
    #: (namespace, channel, version) -> the channel's value at that version.
    channels: dict[tuple[str, str, str], LangGraphChannelValue] = field(default_factory=dict)
    #: (namespace, checkpoint id) -> (task id, idx) -> the write kept for it.
    writes: dict[tuple[str, str], dict[tuple[str, int], StoredWrite]] = field(default_factory=dict)
    _item_lists: OrderedDict[tuple[str, str, str], tuple[LangGraphValue, ...]] = field(
        default_factory=OrderedDict
    )
    # Held only while folding (no I/O inside): threads of one saver may catch up together.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, seq: int, event: Event) -> None:
        """Fold the event stored at ``seq``; an event at or before ``last_seq`` is already in."""
        with self._lock:
            if seq <= self.last_seq:
                return
            if isinstance(event, LangGraphCheckpointSaved):
                self._apply_checkpoint(event)
            elif isinstance(event, LangGraphWritesSaved):
                self._apply_writes(event)
            self.last_seq = seq

    def apply_appended(self, seq: int, event: Event) -> None:
        """Fold an event this saver just appended at ``seq``, unless another writer's events came
        between (then the next catch-up reads them all, in order)."""
        with self._lock:
            if seq != self.last_seq + 1:
                return
        self.apply(seq, event)

    def _apply_checkpoint(self, event: LangGraphCheckpointSaved) -> None:
        ns = event.checkpoint_ns
        self.checkpoints.setdefault(ns, {})[event.checkpoint_id] = event
        for channel, value in event.channels.items():
            key = (ns, channel, value.version)
            self.channels[key] = value
            self._item_lists.pop(key, None)

    def _apply_writes(self, event: LangGraphWritesSaved) -> None:
        kept = self.writes.setdefault((event.checkpoint_ns, event.checkpoint_id), {})
        for write in event.writes:
            key = (event.task_id, write.idx)
            # LangGraph's rule: a regular write is stored once, a special one (idx < 0) replaces.
            if write.idx >= 0 and key in kept:
                continue
            kept[key] = StoredWrite(event.task_id, event.task_path, write)

    def latest(self, ns: str) -> LangGraphCheckpointSaved | None:
        """The namespace's newest checkpoint (LangGraph's ids sort by time), or None."""
        saved = self.checkpoints.get(ns)
        return saved[max(saved)] if saved else None

    def items(self, ns: str, channel: str, version: str) -> tuple[LangGraphValue, ...] | None:
        """The items of a list channel at ``version`` (None: not stored as a list there).

        Raises:
            DataCorruptionError: a base version the items extend is missing, or the bases loop.
        """
        key = (ns, channel, version)
        found = self._item_lists.get(key)
        if found is not None:
            self._item_lists.move_to_end(key)
            return found
        stored = self.channels.get(key)
        if stored is None or stored.items is None:
            return None
        parts: list[tuple[LangGraphValue, ...]] = []
        prefix: tuple[LangGraphValue, ...] = ()
        seen: set[str] = set()
        current: LangGraphChannelValue | None = stored
        while current is not None and current.items is not None:
            if current.version in seen:
                msg = f"list channel {channel!r} of {self.session_id}: its base versions loop"
                raise DataCorruptionError(msg)
            seen.add(current.version)
            parts.append(current.items)
            base = current.base_version
            if base is None:
                break
            cached = self._item_lists.get((ns, channel, base))
            if cached is not None:
                prefix = cached
                break
            current = self.channels.get((ns, channel, base))
            if current is None or current.items is None:
                msg = f"list channel {channel!r} of {self.session_id}: base version {base} is missing"
                raise DataCorruptionError(msg)
        result = prefix + tuple(item for part in reversed(parts) for item in part)
        self._item_lists[key] = result
        while len(self._item_lists) > _ITEM_LISTS_KEPT:
            self._item_lists.popitem(last=False)
        return result

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[StoredWrite]:
        """The checkpoint's pending writes in LangGraph's replay order (task path, task, idx)."""
        kept = self.writes.get((ns, checkpoint_id), {})
        return [kept[k] for k in sorted(kept, key=lambda k: (kept[k].task_path, k[0], k[1]))]

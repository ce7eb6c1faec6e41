"""The item list of a bridged OpenAI Agents SDK session, folded out of its log.

Pure: nothing here imports the SDK or touches a database. The list is a function of the log
alone: every item ever added, in the order added, minus the items a pop or a clear removed,
unless that removal was reverted. A pop removes the newest item present; a clear removes every
item added before it (so reverting an earlier pop does not bring an item back into a session
cleared since: revert the clear for that). So undoing a pop or a clear is appending an event, and the
history of every removal stays readable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final, Literal

from ...store import RecordedEvent

__all__ = ["ADDED", "CLEARED", "POPPED", "REVERTED", "ItemFold", "ItemRemoval", "fold_items"]

ADDED: Final = "openai_agents_items_added"
POPPED: Final = "openai_agents_item_popped"
CLEARED: Final = "openai_agents_session_cleared"
REVERTED: Final = "openai_agents_removal_reverted"

#: An item: the id of the event that added it, and its index in that event's items.
ItemKey = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class ItemRemoval:
    """A ``pop_item`` or ``clear_session`` as the log holds it.

    Attributes:
        event_id: the removal's event id (what ``revert`` takes).
        kind: ``"pop"`` or ``"clear"``.
        seq: its place in the session's log.
        recorded_at: when it was appended (ISO 8601).
        items: the items it removed (those present when it ran), oldest first.
        reverted_by: the event id of the revert that undid it, or None.
    """

    event_id: str
    kind: Literal["pop", "clear"]
    seq: int
    recorded_at: str
    items: list[dict[str, Any]]
    reverted_by: str | None


class ItemFold:
    """The fold, one event at a time: feed it a session's events in seq order (``apply``); an
    event it has seen (by seq) is skipped, so re-reading an overlapping range is harmless."""

    def __init__(self) -> None:
        self.last_seq = 0
        self._items: dict[ItemKey, dict[str, Any]] = {}  # every item ever added, in log order
        self._covered: dict[ItemKey, int] = {}  # how many unreverted removals removed the item
        # Each removal: its event, the items it covers, and those of them present when it ran.
        self._removals: dict[str, tuple[RecordedEvent, list[ItemKey], list[ItemKey]]] = {}
        self._reverted: dict[str, str] = {}  # removal event id -> the revert's event id

    def apply(self, event: RecordedEvent) -> None:
        """Fold ``event`` in (events of other types are skipped)."""
        if event.seq <= self.last_seq:
            return
        self.last_seq = event.seq
        payload = event.payload_dict()
        if event.type == ADDED:
            for index, item in enumerate(payload["items"]):
                self._items[(str(event.event_id), index)] = item
        elif event.type == POPPED:
            key = (payload["added_event_id"], payload["index"])
            self._remove(event, [key] if key in self._items and self._live(key) else [])
        elif event.type == CLEARED:
            # Every item added before it, present or not: reverting an earlier pop later does
            # not bring an item back into a session cleared since.
            self._remove(event, list(self._items))
        elif event.type == REVERTED:
            target = payload["target_event_id"]
            if target in self._removals and target not in self._reverted:
                self._reverted[target] = str(event.event_id)
                for key in self._removals[target][1]:
                    self._covered[key] -= 1

    def _remove(self, event: RecordedEvent, keys: list[ItemKey]) -> None:
        self._removals[str(event.event_id)] = (event, keys, [key for key in keys if self._live(key)])
        for key in keys:
            self._covered[key] = self._covered.get(key, 0) + 1

    def _live(self, key: ItemKey) -> bool:
        return not self._covered.get(key)

    def items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The items present, oldest first; with ``limit``, the newest ``limit`` of them."""
        if limit is None:
            return [item for key, item in self._items.items() if self._live(key)]
        newest: list[dict[str, Any]] = []
        for key in reversed(self._items):
            if len(newest) >= limit:
                break
            if self._live(key):
                newest.append(self._items[key])
        newest.reverse()
        return newest

    def newest(self) -> tuple[ItemKey, dict[str, Any]] | None:
        """The most recent item present (what ``pop_item`` removes), or None when there is none."""
        for key in reversed(self._items):
            if self._live(key):
                return key, self._items[key]
        return None

    def removal(self, event_id: str) -> ItemRemoval | None:
        """The pop or clear with this event id, or None when the log has none."""
        found = self._removals.get(event_id)
        if found is None:
            return None
        event, _, removed = found
        return ItemRemoval(
            event_id=event_id,
            kind="pop" if event.type == POPPED else "clear",
            seq=event.seq,
            recorded_at=event.created_at.isoformat(),
            items=[self._items[key] for key in removed],
            reverted_by=self._reverted.get(event_id),
        )

    def removals(self) -> list[ItemRemoval]:
        """Every pop and clear in the log, oldest first."""
        return [r for r in map(self.removal, self._removals) if r is not None]


def fold_items(events: Iterable[RecordedEvent]) -> list[dict[str, Any]]:
    """The items a session's events leave present, oldest first."""
    fold = ItemFold()
    for event in events:
        fold.apply(event)
    return fold.items()

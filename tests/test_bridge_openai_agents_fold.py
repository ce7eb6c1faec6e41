"""The fold behind ``SessionStoreSession``: a pure function of the log (no database here).

Properties: without reverts, the items are what a plain list would hold after the same adds, pops
and clears (``SQLiteSession``'s behaviour); folding the log in any chunks, re-reading overlaps,
gives the same; a revert right after a pop or a clear gives back the list from before it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.bridges.openai_agents import fold_items
from sessionstore.bridges.openai_agents._fold import ItemFold
from sessionstore.events import (
    Event,
    OpenAIAgentsItemPopped,
    OpenAIAgentsItemsAdded,
    OpenAIAgentsRemovalReverted,
    OpenAIAgentsSessionCleared,
)
from sessionstore.store import RecordedEvent

from .strategies import examples

_OPS = st.lists(
    st.one_of(st.integers(1, 4).map(lambda n: ("add", n)), st.just(("pop", 0)), st.just(("clear", 0))),
    max_size=30,
)


def _recorded(event: Event, seq: int) -> RecordedEvent:
    return RecordedEvent(
        session_id="s",
        seq=seq,
        position=seq,
        event_id=str(event.event_id),
        type=event.type,
        schema_version=1,
        payload=event.model_dump_json(exclude={"event_id", "type"}),
        token_count=None,
        prev_hash="",
        hash="",
        created_at=datetime.now(UTC),
    )


class _Writer:
    """Appends what ``SessionStoreSession`` would, and keeps the list a plain list would hold."""

    def __init__(self) -> None:
        self.log: list[RecordedEvent] = []
        self.model: list[dict[str, Any]] = []
        self.fold = ItemFold()
        self.counter = 0

    def append(self, event: Event) -> None:
        self.log.append(_recorded(event, len(self.log) + 1))
        self.fold.apply(self.log[-1])

    def do(self, op: str, count: int) -> str | None:
        """Apply one operation; the removal's event id, if it wrote one."""
        if op == "add":
            items = [{"role": "user", "content": str(self.counter + i)} for i in range(count)]
            self.counter += count
            self.model += items
            self.append(OpenAIAgentsItemsAdded(items=items))
            return None
        newest = self.fold.newest()
        if newest is None:
            return None  # the session writes nothing when there is nothing to remove
        if op == "pop":
            (added, index), _ = newest
            event: Event = OpenAIAgentsItemPopped(added_event_id=added, index=index)
            self.model.pop()
        else:
            event = OpenAIAgentsSessionCleared()
            self.model.clear()
        self.append(event)
        return str(event.event_id)


@settings(max_examples=examples(200))
@given(_OPS, st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_the_fold_is_a_list_s_adds_pops_and_clears_in_any_chunks(
    ops: list[tuple[str, int]], chunks: list[int]
) -> None:
    writer = _Writer()
    for op, count in ops:
        writer.do(op, count)
    chunked = ItemFold()
    start = 0
    for size in chunks * (len(writer.log) + 1):
        if start >= len(writer.log):
            break
        for event in writer.log[max(0, start - 1) : start + size]:  # overlapping: seen seqs are skipped
            chunked.apply(event)
        start += size

    assert fold_items(writer.log) == writer.model
    assert chunked.items() == writer.model
    assert [chunked.items(limit) for limit in (0, 1, 3)] == [[], writer.model[-1:], writer.model[-3:]]


@settings(max_examples=examples(200))
@given(_OPS, st.sampled_from(["pop", "clear"]))
def test_reverting_the_last_removal_restores_the_list_before_it(
    ops: list[tuple[str, int]], last: str
) -> None:
    writer = _Writer()
    for op, count in [*ops, ("add", 2)]:
        writer.do(op, count)
    before = list(writer.model)
    removal = writer.do(last, 0)
    assert removal is not None
    kind: Literal["openai_agents_item_popped", "openai_agents_session_cleared"] = (
        "openai_agents_item_popped" if last == "pop" else "openai_agents_session_cleared"
    )
    writer.append(OpenAIAgentsRemovalReverted(target_event_id=removal, target_type=kind))

    assert fold_items(writer.log) == before

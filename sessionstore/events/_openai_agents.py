"""Events of OpenAI Agents SDK sessions (written by ``sessionstore.bridges.openai_agents``).

A bridged session's log is its history of changes, not a table of rows: ``add_items`` appends
the items, ``pop_item`` and ``clear_session`` append what they removed, and a removal can be
undone by appending a revert. The SDK items are kept as the JSON the SDK gives them (its
``TResponseInputItem`` dicts), so a log of these events decodes without the SDK installed.

An item is named by the event that added it and its index in that event's ``items``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, NonNegativeInt

from ._base import Event, register_event

__all__ = [
    "OpenAIAgentsItemPopped",
    "OpenAIAgentsItemsAdded",
    "OpenAIAgentsRemovalReverted",
    "OpenAIAgentsSessionCleared",
]


def _item_text(item: dict[str, Any]) -> list[str]:
    """What a model reads of an item: message text, a call's name and arguments, an output."""
    texts: list[str] = []
    content = item.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts += [str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    for key in ("name", "arguments"):
        if isinstance(item.get(key), str):
            texts.append(item[key])
    output = item.get("output")
    if isinstance(output, str):
        texts.append(output)
    elif output is not None:
        texts.append(json.dumps(output, ensure_ascii=False, separators=(",", ":")))
    return texts


@register_event
class OpenAIAgentsItemsAdded(Event):
    """One ``add_items`` call: the SDK items, in order, as JSON objects."""

    type: Literal["openai_agents_items_added"] = "openai_agents_items_added"
    items: list[dict[str, Any]] = Field(min_length=1)

    def countable_text(self) -> list[str]:
        """The text of every item (message content, tool call names and arguments, outputs)."""
        return [text for item in self.items for text in _item_text(item)]


@register_event
class OpenAIAgentsItemPopped(Event):
    """One ``pop_item``: it removed item ``index`` of the ``openai_agents_items_added`` event
    ``added_event_id`` (the newest item present when it was appended)."""

    type: Literal["openai_agents_item_popped"] = "openai_agents_item_popped"
    added_event_id: str
    index: NonNegativeInt


@register_event
class OpenAIAgentsSessionCleared(Event):
    """One ``clear_session``: it removed every item added before it in the log."""

    type: Literal["openai_agents_session_cleared"] = "openai_agents_session_cleared"


@register_event
class OpenAIAgentsRemovalReverted(Event):
    """Undoes a pop or a clear: the items it removed are back, each at its place in the history
    (unless another pop or clear that is not reverted removed it too)."""

    type: Literal["openai_agents_removal_reverted"] = "openai_agents_removal_reverted"
    target_event_id: str
    target_type: Literal["openai_agents_item_popped", "openai_agents_session_cleared"]

"""The API view's messages: a list of message dicts that also keeps each message's canonical JSON.

A request is mostly history that does not change from one turn to the next. Keeping each
message's canonical JSON (``canonical_json``) beside it lets the request bytes be joined
instead of serialized again every turn, and lets a snapshot store that JSON as it is: a resume
slices the messages out of the snapshot without parsing them, and a message is parsed only when
something reads it (the next turn's fold reads the last few; a stage scanning history parses
what it scans).

Messages are values: replacing one (``messages[i] = new``) drops its JSON; nothing edits a
message dict in place (requests handed out earlier share the dicts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

__all__ = ["MessageList", "canonical_json"]

Message = dict[str, Any]
Json = bytes | memoryview
_ROLE_PREFIXES = ((b'{"role":"user"', "user"), (b'{"role":"assistant"', "assistant"))


def canonical_json(value: object) -> bytes:
    """``value`` as the request serializes it: compact, non-ASCII kept, UTF-8."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class MessageList(Sequence[Message]):
    """Message dicts, each parsed from its JSON on first read when it came from a snapshot.

    Reads (indexing, slicing, iteration) always give dicts; slices are plain lists. ``json(i)``
    gives the canonical JSON of message ``i`` without parsing it, serializing (once) a message
    that was appended or replaced since.
    """

    __slots__ = ("_items", "_json", "_unparsed")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._items: list[Message | None] = list(messages)
        self._json: list[Json | None] = [None] * len(self._items)
        self._unparsed = 0  # how many _items are still None (only JSON known)

    @classmethod
    def from_joined_json(cls, joined: Json, starts: Sequence[int]) -> MessageList:
        """The messages whose JSON, joined by commas, is ``joined``; ``starts[i]`` is where message i begins.

        Raises:
            ValueError: the offsets do not cut ``joined`` into objects.
        """
        view = memoryview(joined)
        size = len(view)
        count = len(starts)
        if (count == 0) != (size == 0) or (count and starts[0] != 0):
            msg = f"message offsets {list(starts[:3])}... do not start {size} bytes of messages"
            raise ValueError(msg)
        ends = [*(start - 1 for start in starts[1:]), size]
        pieces: list[Json | None] = []
        for start, end in zip(starts, ends, strict=True):
            if not (0 <= start < end <= size) or view[start] != 0x7B or view[end - 1] != 0x7D:  # { }
                msg = f"message bytes {start}..{end} of {size} are not one JSON object"
                raise ValueError(msg)
            pieces.append(view[start:end])
        messages = cls()
        messages._items = [None] * count
        messages._json = pieces
        messages._unparsed = count
        return messages

    # -- reading --

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            if not self._unparsed:
                return self._items[index]  # type: ignore[return-value]
            return [self._message(i) for i in range(*index.indices(len(self._items)))]
        item = self._items[index]
        return item if item is not None else self._message(index)

    def __iter__(self) -> Iterator[Message]:
        if not self._unparsed:
            return iter(self._items)  # type: ignore[arg-type]
        return (self._message(i) for i in range(len(self._items)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like list

    def __repr__(self) -> str:
        return f"MessageList({len(self._items)} messages, {self._unparsed} not parsed yet)"

    def _message(self, index: int) -> Message:
        item = self._items[index]
        if item is None:
            data = self._json[index]
            assert data is not None  # an item is None only while its JSON is known
            parsed = json.loads(bytes(data))
            if not isinstance(parsed, dict):
                msg = f"message {index} is JSON {type(parsed).__name__}, not an object"
                raise ValueError(msg)
            self._items[index] = item = parsed
            self._unparsed -= 1
        return item

    @property
    def unparsed(self) -> int:
        """How many messages are still only JSON (none, unless loaded from a snapshot)."""
        return self._unparsed

    def role(self, index: int) -> str:
        """The role of message ``index``, read from its JSON prefix when it is not parsed yet."""
        item = self._items[index]
        if item is None:
            data = self._json[index]
            assert data is not None
            head = bytes(data[:20])
            for prefix, role in _ROLE_PREFIXES:
                if head.startswith(prefix):
                    return role
            item = self._message(index)
        return str(item["role"])

    def json(self, index: int) -> Json:
        """The canonical JSON of message ``index`` (serialized now if not known yet, then kept)."""
        data = self._json[index]
        if data is None:
            data = self._json[index] = canonical_json(self._items[index])
        return data

    def joined_json(self) -> tuple[list[Json], list[int]]:
        """The JSON of every message, commas between, and where each message starts in the join.

        ``b"".join`` of the first is the messages array's body (what sits between ``[`` and ``]``).
        """
        pieces: list[Json] = []
        starts: list[int] = []
        offset = 0
        for index in range(len(self._items)):
            if index:
                pieces.append(b",")
                offset += 1
            data = self.json(index)
            starts.append(offset)
            pieces.append(data)
            offset += len(data)
        return pieces, starts

    # -- writing --

    def append(self, message: Message) -> None:
        """Add ``message`` at the end."""
        self._items.append(message)
        self._json.append(None)

    def __setitem__(self, index: int, message: Message) -> None:
        if self._items[index] is None:
            self._unparsed -= 1
        self._items[index] = message
        self._json[index] = None

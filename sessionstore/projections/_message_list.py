"""The API view's messages: a list of message dicts that also keeps each message's canonical JSON.

A request is mostly history that does not change from one turn to the next. Keeping each
message's canonical JSON (``canonical_json``) beside it lets the request bytes be joined
instead of serialized again every turn, and lets a snapshot store that JSON as it is: a resume
keeps the snapshot's bytes, sends stretches of them untouched, and parses a message only when
something reads it (the next turn's fold reads the last few; a stage scanning history parses
what it scans).

Messages are values: replacing one (``messages[i] = new``) drops its JSON; nothing edits a
message dict in place (requests handed out earlier share the dicts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, overload

__all__ = ["MessageList", "canonical_json"]

Message = dict[str, Any]
Json = bytes | memoryview
_ROLE_PREFIXES = ((b'{"role":"user"', "user"), (b'{"role":"assistant"', "assistant"))
_OPEN, _CLOSE, _COMMA = 0x7B, 0x7D, 0x2C  # { } ,


class _InSnapshot:
    """Marks a message whose JSON is still the loaded snapshot's bytes, not sliced out yet."""

    def __repr__(self) -> str:
        return "IN_SNAPSHOT"


_IN_SNAPSHOT: Final = _InSnapshot()


def canonical_json(value: object) -> bytes:
    """``value`` as the request serializes it: compact, non-ASCII kept, UTF-8."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class MessageList(Sequence[Message]):
    """Message dicts, each parsed from its JSON on first read when it came from a snapshot.

    Reads (indexing, slicing, iteration) always give dicts; slices are plain lists. ``json(i)``
    and ``json_pieces`` give canonical JSON without parsing, serializing (once) a message that
    was appended or replaced since.
    """

    __slots__ = ("_items", "_joined", "_json", "_starts", "_unparsed")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._items: list[Message | None] = list(messages)
        self._json: list[Json | _InSnapshot | None] = [None] * len(self._items)
        #: A loaded snapshot's messages, joined by commas, and where each message starts in it.
        self._joined = memoryview(b"")
        self._starts: Sequence[int] = ()
        self._unparsed = 0  # how many _items are still None (only their JSON is known)

    @classmethod
    def from_joined_json(cls, joined: Json, starts: Sequence[int]) -> MessageList:
        """The messages whose JSON, joined by commas, is ``joined``; ``starts[i]`` is where message i begins.

        Raises:
            ValueError: the offsets do not cut ``joined`` into objects.
        """
        view = memoryview(joined)
        size = len(view)
        count = len(starts)
        if (count == 0) != (size == 0) or (count and (starts[0] != 0 or view[size - 1] != _CLOSE)):
            msg = f"message offsets {list(starts[:3])}... do not cut {size} bytes of messages"
            raise ValueError(msg)
        previous = -1
        for start in starts:  # each message opens right after the comma that follows the one before
            if (
                not (previous < start < size)
                or view[start] != _OPEN
                or (start and (start < 2 or view[start - 1] != _COMMA or view[start - 2] != _CLOSE))
            ):
                msg = f"message offset {start} (after {previous}) is not an object's start in {size} bytes"
                raise ValueError(msg)
            previous = start
        messages = cls()
        messages._items = [None] * count
        messages._json = [_IN_SNAPSHOT] * count
        messages._joined = view
        messages._starts = starts
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

    def __reduce__(self) -> tuple[type[MessageList], tuple[list[Message]]]:
        # copy, deepcopy and pickle see the dicts (the snapshot's buffer is not picklable).
        return (MessageList, (list(self),))

    def __repr__(self) -> str:
        return f"MessageList({len(self._items)} messages, {self._unparsed} not parsed yet)"

    @property
    def unparsed(self) -> int:
        """How many messages are still only JSON (none, unless loaded from a snapshot)."""
        return self._unparsed

    def _message(self, index: int) -> Message:
        item = self._items[index]
        if item is None:
            parsed = json.loads(bytes(self.json(index)))
            if not isinstance(parsed, dict):
                msg = f"message {index} is JSON {type(parsed).__name__}, not an object"
                raise ValueError(msg)
            self._items[index] = item = parsed
            self._unparsed -= 1
        return item

    def _end(self, index: int) -> int:
        """Where message ``index`` of the snapshot ends in ``_joined`` (before the next comma)."""
        index %= len(self._items)
        return self._starts[index + 1] - 1 if index + 1 < len(self._starts) else len(self._joined)

    def role(self, index: int) -> str:
        """The role of message ``index``, read from its JSON prefix when it is not parsed yet."""
        item = self._items[index]
        if item is None:
            head = bytes(self.json(index)[:20])
            for prefix, role in _ROLE_PREFIXES:
                if head.startswith(prefix):
                    return role
            item = self._message(index)
        return str(item["role"])

    def json(self, index: int) -> Json:
        """The canonical JSON of message ``index`` (serialized now if not known yet, then kept)."""
        data = self._json[index]
        if data is _IN_SNAPSHOT:
            return self._joined[self._starts[index % len(self._items)] : self._end(index)]
        if data is None:
            data = self._json[index] = canonical_json(self._items[index])
        assert not isinstance(data, _InSnapshot)
        return data

    def _stretches(self, start: int, stop: int) -> Iterator[tuple[int, int, Json, bool]]:
        """(first, end, JSON, from the snapshot) for messages ``start`` to ``stop - 1``, in order.

        Consecutive messages still as the snapshot had them come as one slice of its bytes (their
        separating commas included); any other message comes alone.
        """
        marks = self._json
        index = start
        while index < stop:
            end = index + 1
            if marks[index] is _IN_SNAPSHOT:
                while end < stop and marks[end] is _IN_SNAPSHOT:
                    end += 1
                yield index, end, self._joined[self._starts[index] : self._end(end - 1)], True
            else:
                yield index, end, self.json(index), False
            index = end

    def json_pieces(self, start: int, stop: int) -> list[Json]:
        """The JSON of messages ``start`` to ``stop - 1`` joined by commas, as pieces to ``b"".join``.

        Raises:
            IndexError: not ``0 <= start <= stop <= len(self)``.
        """
        if not 0 <= start <= stop <= len(self._items):
            msg = f"messages {start}..{stop} are not a range of {len(self._items)} messages"
            raise IndexError(msg)
        pieces: list[Json] = []
        for _, _, data, _ in self._stretches(start, stop):
            if pieces:
                pieces.append(b",")
            pieces.append(data)
        return pieces

    def joined_json(self) -> tuple[list[Json], list[int]]:
        """Every message's JSON joined by commas (as pieces), and where each message starts in it.

        ``b"".join`` of the pieces is the messages array's body (what sits between ``[`` and ``]``).
        """
        pieces: list[Json] = []
        starts: list[int] = []
        offset = 0
        for first, end, data, from_snapshot in self._stretches(0, len(self._items)):
            if pieces:
                pieces.append(b",")
                offset += 1
            if from_snapshot:  # the stretch's starts, moved from the snapshot's offset to this one
                shift = offset - self._starts[first]
                starts.extend(start + shift for start in self._starts[first:end])
            else:
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
        if not isinstance(index, int):  # a slice would leave the kept JSON behind its messages
            msg = f"MessageList replaces one message at a time, not {type(index).__name__}"
            raise TypeError(msg)
        if self._items[index] is None:
            self._unparsed -= 1
        self._items[index] = message
        self._json[index] = None

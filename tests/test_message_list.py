"""The view's message list: a plain list of dicts to its readers, whatever JSON it keeps or loaded."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.projections._message_list import MessageList, canonical_json

from .strategies import examples

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_MESSAGES = st.builds(
    lambda role, texts: {"role": role, "content": [{"type": "text", "text": t} for t in texts]},
    st.sampled_from(["user", "assistant"]),
    st.lists(_TEXT, min_size=1, max_size=3),
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _MESSAGES),
        st.tuples(st.just("replace"), st.integers(0, 50), _MESSAGES),
        st.tuples(st.just("read"), st.integers(0, 50)),
        st.tuples(st.just("snapshot")),
    ),
    max_size=25,
)


def _reload(messages: MessageList) -> MessageList:
    """Through a snapshot: the joined JSON and offsets, as a store would keep them."""
    pieces, starts = messages.joined_json()
    return MessageList.from_joined_json(b"".join(pieces), starts)


def _body(model: list[dict[str, Any]], start: int, stop: int) -> bytes:
    return b",".join(canonical_json(m) for m in model[start:stop])


@settings(max_examples=examples(300), deadline=None)
@given(initial=st.lists(_MESSAGES, max_size=8), ops=_OPS, data=st.data())
def test_reads_and_json_match_a_plain_list_through_snapshots(
    initial: list[dict[str, Any]], ops: list[Any], data: st.DataObject
) -> None:
    """Any mix of appends, replacements, reads and snapshot round trips: same dicts, same bytes."""
    model = list(initial)
    messages = _reload(MessageList(initial))
    for op in ops:
        if op[0] == "append":
            model.append(op[1])
            messages.append(op[1])
        elif op[0] == "replace" and model:
            model[op[1] % len(model)] = op[2]
            messages[op[1] % len(model)] = op[2]
        elif op[0] == "read" and model:
            index = op[1] % len(model)
            assert messages[index] == model[index]
            assert messages.role(index) == model[index]["role"]
        elif op[0] == "snapshot":
            messages = _reload(messages)
        start = data.draw(st.integers(0, len(model)), label="start")
        stop = data.draw(st.integers(start, len(model)), label="stop")
        assert b"".join(messages.json_pieces(start, stop)) == _body(model, start, stop)
    pieces, starts = messages.joined_json()
    joined = b"".join(pieces)
    assert joined == _body(model, 0, len(model))
    assert [joined[s : s + len(canonical_json(m))] for s, m in zip(starts, model, strict=True)] == [
        canonical_json(m) for m in model
    ]
    assert messages[1:-1] == model[1:-1]
    assert list(messages) == model
    assert messages == model
    assert messages.unparsed == sum(1 for i in range(len(model)) if messages._items[i] is None)


def test_a_loaded_list_parses_only_what_is_read() -> None:
    """Slices and single reads parse those messages; roles and JSON need no parsing."""
    model = [
        {"role": ("user", "assistant")[i % 2], "content": [{"type": "text", "text": f"m{i}"}]}
        for i in range(6)
    ]
    messages = _reload(MessageList(model))

    assert [messages.role(i) for i in range(6)] == [m["role"] for m in model]
    assert b"".join(messages.json_pieces(0, 6)) == _body(model, 0, 6)
    assert messages.unparsed == 6
    assert messages[2:4] == model[2:4]
    assert messages.unparsed == 4
    messages[0] = {"role": "user", "content": [{"type": "text", "text": "new"}]}
    assert messages.unparsed == 3
    assert bytes(messages.json(0)) == b'{"role":"user","content":[{"type":"text","text":"new"}]}'


@pytest.mark.parametrize(
    ("joined", "starts"),
    [
        (b'{"a":1},{"b":2}', [0, 7]),  # a start on the comma
        (b'{"a":1},{"b":2}', [0, 9]),  # a start inside an object
        (b'{"a":1},{"b":2}', [1, 8]),  # not from the first byte
        (b'{"a":1},{"b":2}', [0, 8, 3]),  # not increasing
        (b'{"a":1},{"b":2', [0, 8]),  # truncated
        (b"", [0]),
    ],
)
def test_offsets_that_do_not_cut_objects_are_refused(joined: bytes, starts: list[int]) -> None:
    """A damaged layout is refused when loaded, not discovered when a message is read."""
    with pytest.raises(ValueError, match="message"):
        MessageList.from_joined_json(joined, starts)


def test_misuse_is_refused_before_anything_changes() -> None:
    """A slice assignment or an out-of-range stretch raises; the list is unchanged."""
    model = [{"role": "user", "content": [{"type": "text", "text": "a"}]}]
    messages = _reload(MessageList(model))

    with pytest.raises(TypeError, match="one message at a time"):
        messages[0:1] = model  # type: ignore[index, assignment]  # the misuse under test
    with pytest.raises(IndexError, match="not a range of 1 messages"):
        messages.json_pieces(-1, 1)
    with pytest.raises(IndexError):
        messages.json_pieces(0, 2)
    assert messages == model
    assert b"".join(messages.json_pieces(0, 1)) == _body(model, 0, 1)


def test_copies_and_pickles_hold_the_dicts() -> None:
    """copy, deepcopy and pickle work on a list loaded from a snapshot (its buffer is not copied)."""
    model = [{"role": "user", "content": [{"type": "text", "text": "é"}]}]
    messages = _reload(MessageList(model))

    for clone in (copy.copy(messages), copy.deepcopy(messages), pickle.loads(pickle.dumps(messages))):
        assert clone == model
        assert b"".join(clone.json_pieces(0, 1)) == _body(model, 0, 1)

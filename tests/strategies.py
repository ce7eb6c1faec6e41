"""Hypothesis strategies for events."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from sessionstore import MessageAppended


def examples(count: int) -> int:
    """``count`` examples, scaled by the loaded profile (ci: as given; explore: ten times as many).

    Evaluated when a test module is imported, after pytest's ``--hypothesis-profile`` is loaded.
    """
    return max(count, count * settings.default.max_examples // 100)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)

_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(
        lambda i, n, v: {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": {"arg": v}},
        st.integers(0, 10**6),
        st.sampled_from(["Read", "Bash", "Grep"]),
        st.one_of(_text, st.integers(), st.booleans(), st.none()),
    ),
    st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": c},
        st.integers(0, 10**6),
        _text,
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, _text),
)


def message_events() -> st.SearchStrategy[MessageAppended]:
    """Arbitrary user/assistant messages with string or block content."""
    content: st.SearchStrategy[Any] = st.one_of(_text, st.lists(_blocks, max_size=4))
    return st.builds(
        MessageAppended,
        role=st.sampled_from(["user", "assistant"]),
        content=content,
        api_message_id=st.one_of(st.none(), st.from_regex(r"msg_[a-z0-9]{4}", fullmatch=True)),
        is_meta=st.booleans(),
    )

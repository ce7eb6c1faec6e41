"""Hypothesis strategies for events."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from sessionstore import MessageAppended, SessionStarted


def examples(count: int) -> int:
    """``count`` examples, scaled by the loaded profile (ci: as given; explore: ten times as many).

    Evaluated when a test module is imported, after pytest's ``--hypothesis-profile`` is loaded.
    """
    profile = settings.default
    assert profile is not None  # hypothesis loads its default profile on import
    return max(count, count * profile.max_examples // 100)


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)

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


def turns(prompts: list[str], tool_rounds: list[int], answered: list[bool]) -> list[Any]:
    """A session of turns: prompt, ``tool_rounds[n]`` rounds of one Read call and its result, then
    a text answer when ``answered[n]`` (otherwise the next prompt follows the last tool result, so
    the two share one API message, as in real Claude Code transcripts)."""
    events: list[Any] = [SessionStarted(model="claude-sonnet-4-5")]
    for n, prompt in enumerate(prompts):
        events.append(MessageAppended(role="user", content=prompt))
        for r in range(tool_rounds[n]):
            call = {"type": "tool_use", "id": f"toolu_{n}_{r}", "name": "Read", "input": {"path": f"f{r}.py"}}
            events.append(MessageAppended(role="assistant", content=[call], api_message_id=f"msg_{n}_{r}"))
            result = {"type": "tool_result", "tool_use_id": f"toolu_{n}_{r}", "content": f"line {r}\n" * 20}
            events.append(MessageAppended(role="user", content=[result]))
        if answered[n] or not tool_rounds[n]:
            events.append(MessageAppended(role="assistant", content=f"answer {n}", api_message_id=f"msg_{n}"))
    return events


@st.composite
def turn_logs(draw: st.DrawFn) -> list[Any]:
    """Well-formed sessions of 1-8 turns (where collapse and snip find spans and cuts)."""
    count = draw(st.integers(1, 8))
    return turns(
        [draw(st.sampled_from(["fix a.py", "run the tests", "continue"])) for _ in range(count)],
        draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)),
        draw(st.lists(st.booleans(), min_size=count, max_size=count)),
    )

"""The local Messages API's prompt-cache accounting, through the real anthropic SDK.

Other tests measure cache reuse with it (the summarizer's shared prefix), so it must bill as
the API documents: entries keyed by the exact prefix up to each breakpoint, tools then system
then messages, a 20-block look-back, tool_choice invalidating only the messages' cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import CacheControlEphemeralParam, MessageParam, TextBlockParam

from .messages_api import CACHE_LOOKBACK_BLOCKS, MessagesAPIServer, PromptCache

MODEL = "claude-opus-5-5"
MARK: CacheControlEphemeralParam = {"type": "ephemeral"}
#: Well over the 1,024-token minimum on its own.
SYSTEM_TEXT = " ".join(f"rule {i}: keep the build green and the diff small." for i in range(300))
TOOLS = [
    {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}},
    {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}},
]


@pytest.fixture
def server() -> Iterator[MessagesAPIServer]:
    with MessagesAPIServer(prompt_cache=True) as running:
        yield running


@pytest.fixture
def client(server: MessagesAPIServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0) as sdk:
        yield sdk


def _system(marked: bool = True) -> list[TextBlockParam]:
    block: TextBlockParam = {"type": "text", "text": SYSTEM_TEXT}
    return [{**block, "cache_control": MARK}] if marked else [block]


def _tools(marked: bool = True) -> list[dict[str, Any]]:
    return [*TOOLS[:-1], {**TOOLS[-1], "cache_control": MARK}] if marked else list(TOOLS)


def _turns(count: int, *, mark_last: bool = True) -> list[MessageParam]:
    """``count`` user/assistant messages of ~150 tokens each; the last block marked."""
    messages: list[MessageParam] = []
    for i in range(count):
        text = f"message {i}: " + "details of the change and its tests " * 20
        block: TextBlockParam = {"type": "text", "text": text}
        if mark_last and i == count - 1:
            block["cache_control"] = MARK
        if i % 2 == 0:
            messages.append({"role": "user", "content": [block]})
        else:
            messages.append({"role": "assistant", "content": [block]})
    if messages and messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "go on"})
    return messages


def _usage(client: anthropic.Anthropic, **params: Any) -> dict[str, int]:
    usage = client.messages.create(model=MODEL, max_tokens=100, **params).usage
    return {
        "input": usage.input_tokens,
        "write": usage.cache_creation_input_tokens or 0,
        "read": usage.cache_read_input_tokens or 0,
    }


def _total(usage: dict[str, int]) -> int:
    return usage["input"] + usage["write"] + usage["read"]


class TestPromptCacheAccounting:
    def test_a_repeated_prefix_is_written_once_then_read(self, client: anthropic.Anthropic) -> None:
        """The first request writes tools + system; the same request again reads all of it."""
        first = _usage(client, tools=_tools(), system=_system(), messages=[{"role": "user", "content": "hi"}])
        second = _usage(
            client, tools=_tools(), system=_system(), messages=[{"role": "user", "content": "hi"}]
        )

        assert first["read"] == 0
        assert first["write"] > 1_024
        assert second == {"input": first["input"], "write": 0, "read": first["write"]}

    def test_a_grown_conversation_reads_the_earlier_prefix_and_writes_only_the_new_part(
        self, client: anthropic.Anthropic
    ) -> None:
        """The breakpoint moved to the new last message: the old entry is found by look-back."""
        first = _usage(client, tools=_tools(), system=_system(), messages=_turns(5))
        grown = _usage(client, tools=_tools(), system=_system(), messages=_turns(9))

        assert grown["read"] == first["read"] + first["write"]
        assert grown["write"] > 0
        assert _total(grown) > _total(first)

    def test_markers_do_not_change_the_key(self, client: anthropic.Anthropic) -> None:
        """The same blocks with their marker elsewhere still hit (cache_control is not content)."""
        _usage(client, tools=_tools(), system=_system(), messages=_turns(5))
        moved = _turns(5, mark_last=False)
        moved.append({"role": "user", "content": [{"type": "text", "text": "next", "cache_control": MARK}]})

        usage = _usage(client, tools=_tools(marked=False), system=_system(marked=False), messages=moved)

        assert usage["read"] > 0
        assert usage["write"] > 0  # the new block written

    def test_tool_choice_invalidates_the_messages_cache_but_not_tools_and_system(
        self, client: anthropic.Anthropic
    ) -> None:
        """Only the tools and system part is read back once tool_choice differs."""
        params: dict[str, Any] = {"tools": _tools(), "system": _system(), "messages": _turns(5)}
        first = _usage(client, **params)
        head = _usage(client, tools=_tools(), system=_system(), messages=[{"role": "user", "content": "x"}])

        changed = _usage(client, **params, tool_choice={"type": "none"})

        assert 0 < changed["read"] == head["read"] < first["read"] + first["write"]
        assert changed["write"] == first["read"] + first["write"] - head["read"]

    def test_a_changed_tool_definition_misses_everything(self, client: anthropic.Anthropic) -> None:
        """Tools render first: changing one changes every prefix after it."""
        _usage(client, tools=_tools(), system=_system(), messages=_turns(3))
        tools = _tools()
        tools[0] = {**tools[0], "description": "Read a file from disk."}

        usage = _usage(client, tools=tools, system=_system(), messages=_turns(3))

        assert usage["read"] == 0

    def test_a_different_model_misses(self, client: anthropic.Anthropic) -> None:
        """The cache belongs to a model."""
        _usage(client, system=_system(), messages=_turns(3))

        usage = client.messages.create(
            model="claude-sonnet-5-5", max_tokens=10, system=_system(), messages=_turns(3)
        ).usage

        assert usage.cache_read_input_tokens == 0

    def test_a_prefix_below_the_minimum_is_not_cached(self, client: anthropic.Anthropic) -> None:
        """A short marked prompt is billed as plain input, every time."""
        short = [{"role": "user", "content": [{"type": "text", "text": "short", "cache_control": MARK}]}]

        first = _usage(client, messages=short)
        second = _usage(client, messages=short)

        assert first == second == {"input": first["input"], "write": 0, "read": 0}

    def test_an_entry_more_than_20_blocks_back_is_not_found(self, client: anthropic.Anthropic) -> None:
        """Past the look-back only the system breakpoint still reads."""
        _usage(client, system=_system(), messages=_turns(3))
        far = _usage(client, system=_system(), messages=_turns(3 + CACHE_LOOKBACK_BLOCKS + 5))
        near = _usage(client, system=_system(), messages=_turns(3 + CACHE_LOOKBACK_BLOCKS - 1))
        system_only = _usage(client, system=_system(), messages=[{"role": "user", "content": "x"}])

        assert near["read"] > system_only["read"]
        assert far["read"] == system_only["read"]

    def test_a_top_level_cache_control_marks_the_last_block(self, client: anthropic.Anthropic) -> None:
        """Automatic caching: the request is written up to its last block, then read back."""
        messages = _turns(9, mark_last=False)
        first, again = (
            client.messages.create(
                model=MODEL,
                max_tokens=10,
                system=SYSTEM_TEXT,
                messages=messages,
                extra_body={"cache_control": MARK},
            ).usage
            for _ in range(2)
        )

        assert again.cache_read_input_tokens is not None
        assert first.cache_creation_input_tokens == again.cache_read_input_tokens > 0

    def test_more_than_four_breakpoints_is_refused(self, client: anthropic.Anthropic) -> None:
        """As the API does: HTTP 400 naming the limit."""
        messages: list[MessageParam] = [
            {
                "role": "user",
                "content": [{"type": "text", "text": f"p{i}", "cache_control": MARK} for i in range(5)],
            }
        ]

        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
            client.messages.create(model=MODEL, max_tokens=10, messages=messages)

    def test_the_split_always_adds_up_to_the_same_total(self) -> None:
        """Whatever is read or written, input + written + read is the request's size."""
        cache = PromptCache(minimum=1)
        request: dict[str, Any] = {
            "model": MODEL,
            "system": _system(),
            "tools": _tools(),
            "messages": _turns(7),
        }
        plain: dict[str, Any] = {
            "model": MODEL,
            "system": _system(marked=False),
            "tools": _tools(marked=False),
            "messages": _turns(7, mark_last=False),
        }

        totals = {sum(cache.account(body).values()) for body in (plain, request, request, plain)}

        assert len(totals) == 1

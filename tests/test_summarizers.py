"""Summarizers and the compact prompt: the real anthropic SDK against a local Messages API."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from sessionstore.errors import SummaryFailedError, SummaryPromptTooLongError
from sessionstore.pipeline._compact_prompt import SUMMARY_SECTIONS, compact_prompt, format_summary
from sessionstore.pipeline._summarizers import (
    AnthropicSummarizer,
    OfflineSummarizer,
    SummaryRequest,
    parse_prompt_too_long,
    strip_media,
)

from .messages_api import MessagesAPIServer, prompt_too_long, text_message, tool_use_message

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Fix the failing test in tests/test_a.py"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading the test."},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "tests/test_a.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": "AssertionError: 2 != 3",
                "is_error": True,
            },
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t2", "name": "Edit", "input": {"file_path": "src/a.py"}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Fixed the off-by-one in src/a.py."}]},
]


class TestPrompt:
    def test_prompt_brackets_the_request_with_no_tools_reminders_and_lists_nine_sections(self) -> None:
        """Preamble first, trailer last, every section named, custom instructions included."""
        prompt = compact_prompt("partial_up_to", "Keep every API endpoint.")

        assert prompt.startswith("IMPORTANT: answer with plain text only. Do not call any tool")
        assert prompt.rstrip().endswith("Do not call any tool.")
        assert all(section in prompt for section in SUMMARY_SECTIONS)
        assert "Keep every API endpoint." in prompt
        assert "up to the marked message" in prompt

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (
                "<analysis>thinking</analysis>\n<summary>\n1. Goal\n\n\n\n2. Files\n</summary>",
                "1. Goal\n\n2. Files",
            ),
            ("no tags at all\n\n\n\nsecond", "no tags at all\n\nsecond"),
            ("<analysis>only thoughts</analysis>", ""),
        ],
    )
    def test_format_summary_drops_analysis_keeps_summary_and_squeezes_blank_lines(
        self, raw: str, expected: str
    ) -> None:
        """Post-processing of the model's answer."""
        assert format_summary(raw) == expected


def test_prompt_too_long_gap_is_parsed() -> None:
    """The gap is the difference the API states; other texts give None."""
    assert parse_prompt_too_long("prompt is too long: 208656 tokens > 200000 maximum") == 8656
    assert parse_prompt_too_long("overloaded") is None


def test_media_become_markers() -> None:
    """Images and documents are replaced by text markers, also inside tool results."""
    nested = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "x", "content": CONVERSATION[2]["content"][1:]}
            ],
        }
    ]

    assert strip_media(CONVERSATION)[2]["content"][1] == {"type": "text", "text": "[image]"}
    assert strip_media(nested)[0]["content"][0]["content"] == [{"type": "text", "text": "[image]"}]


class TestOffline:
    def test_extracts_the_nine_sections_deterministically(self) -> None:
        """User messages verbatim, files read and edited, errors, the latest work."""
        request = SummaryRequest(messages=CONVERSATION)

        first = OfflineSummarizer().summarize(request)
        second = OfflineSummarizer().summarize(request)

        assert first == second
        text = first.text
        assert all(f"{i}. {name}:" in text for i, name in enumerate(SUMMARY_SECTIONS, start=1))
        assert "- edited src/a.py" in text
        assert "- read tests/test_a.py" in text
        assert "AssertionError: 2 != 3" in text
        assert "- Fix the failing test in tests/test_a.py" in text
        assert "Fixed the off-by-one in src/a.py." in text

    def test_nothing_to_summarize_fails(self) -> None:
        """An empty span is a failure, not an empty summary."""
        with pytest.raises(SummaryFailedError):
            OfflineSummarizer().summarize(SummaryRequest(messages=[]))


class TestAnthropic:
    def _summarizer(self, messages_api: Any) -> AnthropicSummarizer:
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        return AnthropicSummarizer(client, "claude-opus-5-5")

    def test_one_turn_no_tools_shared_prefix_and_summary_extracted(self, messages_api: Any) -> None:
        """The request resends system and tools with tool_choice none; the answer is post-processed."""
        messages_api.queue.append(text_message("<analysis>a</analysis><summary>1. Goal: fix</summary>"))
        tools = [{"name": "Read", "input_schema": {"type": "object"}}]

        summary = self._summarizer(messages_api).summarize(
            SummaryRequest(messages=CONVERSATION, system="be terse", tools=tools)
        )

        body = messages_api.requests[-1]["body"]
        assert summary.text == "1. Goal: fix"
        assert summary.usage["output_tokens"] == 200
        assert body["system"] == "be terse"
        assert body["tools"] == tools
        assert body["tool_choice"] == {"type": "none"}
        assert body["max_tokens"] == 20_000
        assert body["messages"][2]["content"][1] == {"type": "text", "text": "[image]"}
        assert body["messages"][-1]["role"] == "user"
        assert body["messages"][-1]["content"][-1]["text"].startswith(
            "IMPORTANT: answer with plain text only"
        )

    def test_prompt_too_long_carries_the_gap(self, messages_api: Any) -> None:
        """The API's 400 becomes SummaryPromptTooLongError with the parsed token gap."""
        messages_api.queue.append(prompt_too_long(230_000))

        with pytest.raises(SummaryPromptTooLongError) as caught:
            self._summarizer(messages_api).summarize(SummaryRequest(messages=CONVERSATION))

        assert caught.value.gap == 30_000

    @pytest.mark.parametrize(
        "answer",
        [
            (200, {**text_message("")[1]}),
            (
                200,
                {
                    **text_message("x")[1],
                    "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}],
                },
            ),
            (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ],
    )
    def test_empty_tool_calling_or_failed_answers_are_failures(self, messages_api: Any, answer: Any) -> None:
        """Never an error text or a tool call used as a summary."""
        messages_api.queue.append(answer)

        with pytest.raises(SummaryFailedError):
            self._summarizer(messages_api).summarize(SummaryRequest(messages=CONVERSATION))


def test_offline_summary_is_bounded_however_long_the_history() -> None:
    """Lists keep the newest entries within a budget and say how many were left out."""
    long_history = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [{"type": "text", "text": f"message {i} " * 30}],
        }
        for i in range(4_000)
    ]

    text = OfflineSummarizer().summarize(SummaryRequest(messages=long_history)).text

    assert len(text) < 40_000
    assert "earlier messages omitted)" in text
    assert "message 3998" in text


#: A system prompt well over the API's 1,024-token minimum for a cache entry.
LONG_SYSTEM = "\n".join(f"Rule {i}: run the tests after each change; keep diffs small." for i in range(200))


def _prefix() -> dict[str, Any]:
    """A main request with its three breakpoints, as ``Session.request(cache_control=True)`` makes it."""
    mark = {"type": "ephemeral"}
    messages = [dict(m) for m in CONVERSATION[:-1]]
    last = messages[-1]["content"][-1]
    messages[-1] = {"role": "user", "content": [{**last, "cache_control": mark}]}
    return {
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": mark}],
        "tools": [
            {"name": "Read", "input_schema": {"type": "object"}},
            {"name": "Edit", "input_schema": {"type": "object"}, "cache_control": mark},
        ],
        "messages": messages,
    }


class TestSharedPrefix:
    """Given the main request, the summary request is that request plus the compact prompt."""

    @pytest.fixture
    def cached_api(self) -> Any:
        with MessagesAPIServer(prompt_cache=True) as server:
            yield server

    def _summarizer(self, server: Any) -> AnthropicSummarizer:
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        return AnthropicSummarizer(client, "claude-opus-5-5")

    def test_the_main_request_goes_out_unchanged_with_the_prompt_appended(self, messages_api: Any) -> None:
        """System, tools, messages and breakpoints as the main request has them; no tool_choice."""
        messages_api.queue.append(text_message("<summary>1. Goal: fix</summary>"))
        prefix = _prefix()

        self._summarizer(messages_api).summarize(SummaryRequest(messages=CONVERSATION, prefix=prefix))

        body = messages_api.requests[-1]["body"]
        assert (body["system"], body["tools"]) == (prefix["system"], prefix["tools"])
        assert "tool_choice" not in body
        assert body["messages"][:-1] == prefix["messages"][:-1]
        assert body["messages"][-1]["content"][:-1] == prefix["messages"][-1]["content"]
        assert body["messages"][-1]["content"][-1]["text"].startswith(
            "IMPORTANT: answer with plain text only"
        )
        assert body["messages"][2]["content"][1]["type"] == "image"  # kept: it is part of the prefix

    def test_the_summary_reads_the_cache_the_main_request_wrote(self, cached_api: Any) -> None:
        """Everything up to the main request's last breakpoint is a cache read, nothing is written."""
        prefix = _prefix()
        main = anthropic.Anthropic(api_key="k", base_url=cached_api.url, max_retries=0)
        main.messages.create(model="claude-opus-5-5", max_tokens=100, **prefix)
        written = cached_api.requests[-1]["usage"]
        cached_api.queue.append(text_message("<summary>1. Goal: fix</summary>"))

        summary = self._summarizer(cached_api).summarize(SummaryRequest(messages=CONVERSATION, prefix=prefix))

        assert written["cache_creation_input_tokens"] > 1_024
        assert summary.usage["cache_read_input_tokens"] == written["cache_creation_input_tokens"]
        assert summary.usage["cache_creation_input_tokens"] == 0
        assert summary.usage["input_tokens"] > 0  # the compact prompt

    def test_a_tool_call_next_to_a_complete_summary_is_ignored(self, messages_api: Any) -> None:
        """The summary in the text counts; the call is never run and nothing is asked again."""
        answer = tool_use_message("t9", "Read", {"file_path": "a.py"}, "msg_s")
        answer[1]["content"][0]["text"] = "<analysis>a</analysis><summary>1. Goal: fix</summary>"
        messages_api.queue.append(answer)

        summary = self._summarizer(messages_api).summarize(
            SummaryRequest(messages=CONVERSATION, prefix=_prefix())
        )

        assert summary.text == "1. Goal: fix"
        assert len(messages_api.requests) == 1

    def test_a_tool_call_instead_of_a_summary_is_asked_again_with_tool_choice_none(
        self, messages_api: Any
    ) -> None:
        """One more call, the same request with tool_choice none; both calls' usage is summed."""
        messages_api.queue.append(tool_use_message("t9", "Read", {"file_path": "a.py"}, "msg_t"))
        messages_api.queue.append(text_message("<summary>1. Goal: fix</summary>", "msg_s"))

        summary = self._summarizer(messages_api).summarize(
            SummaryRequest(messages=CONVERSATION, prefix=_prefix())
        )

        first, second = (r["body"] for r in messages_api.requests)
        assert summary.text == "1. Goal: fix"
        assert summary.api_message_id == "msg_s"
        assert second == {**first, "tool_choice": {"type": "none"}}
        assert summary.usage["output_tokens"] == 40 + 200

    def test_a_second_tool_call_is_a_failure(self, messages_api: Any) -> None:
        """A model that still calls a tool gives no summary: SummaryFailedError, never its text."""
        messages_api.queue.append(tool_use_message("t9", "Read", {}, "msg_t1"))
        messages_api.queue.append(tool_use_message("t10", "Read", {}, "msg_t2"))

        with pytest.raises(SummaryFailedError, match="tool call"):
            self._summarizer(messages_api).summarize(SummaryRequest(messages=CONVERSATION, prefix=_prefix()))

        assert len(messages_api.requests) == 2

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

from .messages_api import prompt_too_long, text_message

CONVERSATION = [
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

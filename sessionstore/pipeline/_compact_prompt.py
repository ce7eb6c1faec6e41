"""The compaction prompt (in our own words) and the post-processing of the model's answer.

Structure: a no-tools preamble first, then the template body (whole history, from a pivot, or
up to a pivot), optional custom instructions, then a no-tools trailer last — the two reminders
bracket the request because the model sees the tool definitions of the shared, cached prefix.
The model answers ``<analysis>`` (a scratchpad, dropped) then ``<summary>`` with nine sections.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["SUMMARY_SECTIONS", "Template", "compact_prompt", "format_summary", "has_summary"]

Template = Literal["base", "partial_from", "partial_up_to"]

#: The nine sections every summary has, in order.
SUMMARY_SECTIONS = (
    "Primary request and intent",
    "Key technical concepts",
    "Files and code sections",
    "Errors and fixes",
    "Problem solving",
    "All user messages",
    "Pending tasks",
    "Current work",
    "Optional next step",
)

_PREAMBLE = (
    "IMPORTANT: answer with plain text only. Do not call any tool: tool calls will be rejected and "
    "the summary will be lost. Everything you need is in the conversation above."
)

_SCOPE = {
    "base": "Summarize the whole conversation so far, so that work can continue from the summary alone.",
    "partial_from": (
        "Summarize only the recent part of the conversation, from the marked message onwards; the "
        "earlier part is already summarized and stays in context."
    ),
    "partial_up_to": (
        "Summarize the conversation up to the marked message; the messages after it stay in context "
        "verbatim, so do not repeat them."
    ),
}

_INSTRUCTIONS = """First think in <analysis> tags: walk through the conversation in order and note each
request, decision, file, error and fix, so nothing is missed. Then write the summary in <summary>
tags with these sections, numbered, each under its own heading:

{sections}

Under "All user messages", list every message the user wrote (not tool results), verbatim or nearly.
Under "Optional next step", name the next step only if it follows directly from the latest request,
and quote the most recent relevant messages word for word so nothing drifts.

If the conversation opens with the summary of an earlier part, carry its content forward into
these sections instead of quoting it. Files, skills and the plan restored after that summary are
restored after this one too: name them, do not copy their text."""

_TRAILER = "Reminder: reply with <analysis> then <summary> in plain text. Do not call any tool."


def compact_prompt(template: Template = "base", custom_instructions: str | None = None) -> str:
    """The text of the final user message that asks for the summary."""
    sections = "\n".join(f"{i}. {name}" for i, name in enumerate(SUMMARY_SECTIONS, start=1))
    parts = [_PREAMBLE, _SCOPE[template], _INSTRUCTIONS.format(sections=sections)]
    if custom_instructions and custom_instructions.strip():
        parts.append(f"Additional instructions:\n{custom_instructions.strip()}")
    parts.append(_TRAILER)
    return "\n\n".join(parts)


_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL)
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)
_BLANK_RUNS = re.compile(r"\n\s*\n(\s*\n)+")


def has_summary(raw: str) -> bool:
    """True when ``raw`` holds a complete ``<summary>...</summary>`` with text in it."""
    match = _SUMMARY.search(_ANALYSIS.sub("", raw))
    return match is not None and bool(match.group(1).strip())


def format_summary(raw: str) -> str:
    """Drop ``<analysis>``, keep the inside of ``<summary>`` (the whole text without the tag).

    Runs of blank lines are squeezed to one; the result is stripped.
    """
    text = _ANALYSIS.sub("", raw)
    match = _SUMMARY.search(text)
    if match:
        text = match.group(1)
    return _BLANK_RUNS.sub("\n\n", text).strip()

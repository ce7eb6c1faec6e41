"""Summarizers: what turns a span of conversation into a summary, behind one small interface.

* ``AnthropicSummarizer``: one ``client.messages.create`` turn with the compact prompt, bounded
  output. Given the main request (``SummaryRequest.prefix``) it sends that request unchanged
  (system, tools, messages and their cache breakpoints, no ``tool_choice``) with the compact
  prompt appended to the last user message, so the prompt cache the main requests wrote is
  read, not written again; an answer that calls a tool instead is asked once more with
  ``tool_choice: none``.
* ``OfflineSummarizer``: deterministic and extractive, no network — fills the nine sections from
  the messages themselves (user messages verbatim, files read and edited, errors, pending work,
  the latest task). The default when no API key is configured, and what the tests and the demo use.

A summarizer raises ``SummaryFailedError`` (or ``SummaryPromptTooLongError``, carrying the token
gap when the API states it) rather than ever returning an error text as a summary.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._telemetry import model_call_span
from ..errors import SummaryFailedError, SummaryPromptTooLongError
from ._compact_prompt import SUMMARY_SECTIONS, Template, compact_prompt, format_summary, has_summary

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "AnthropicSummarizer",
    "OfflineSummarizer",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "default_summarizer",
    "parse_prompt_too_long",
    "strip_media",
    "with_previous_summary",
]

Message = dict[str, Any]


_PTL = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)", re.IGNORECASE)


def parse_prompt_too_long(message: str) -> int | None:
    """The token gap in an API prompt-too-long message (``208656 tokens > 200000 maximum``)."""
    match = _PTL.search(message)
    return int(match.group(1)) - int(match.group(2)) if match else None


@dataclass(frozen=True)
class SummaryRequest:
    """What to summarize.

    Args:
        messages: the API messages to summarize (normalized, as the request would carry them).
        template: whole history, from a pivot, or up to a pivot.
        custom_instructions: extra instructions (e.g. from a pre-compact hook or the user).
        system / tools: the main request's prefix, resent so the prompt cache is reused.
        model: the model to ask (summarizers that call one).
        previous_summary: the summary of an earlier compaction that ``messages`` continue
            (stripped from them): the new summary carries its content forward instead of
            quoting it, so summaries never nest.
        prefix: the main request (``system``, ``tools``, ``messages``, with its cache
            breakpoints) when the summary covers all of it: a summarizer that calls the API
            sends it as it is, plus the compact prompt, so the cached prefix is reused (its
            messages already hold any earlier summary as the model saw it). ``messages`` is
            what the same request says for a summarizer that does not.
    """

    messages: Sequence[Message]
    template: Template = "base"
    custom_instructions: str | None = None
    system: str | list[dict[str, Any]] | None = None
    tools: Sequence[dict[str, Any]] = ()
    model: str | None = None
    previous_summary: str | None = None
    prefix: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Summary:
    """A summary and where it came from."""

    text: str
    summarizer: str
    usage: dict[str, int] = field(default_factory=dict)
    api_message_id: str | None = None


class Summarizer(Protocol):
    """Turns messages into a summary, or raises ``SummaryFailedError``."""

    @property
    def name(self) -> str:
        """Recorded with every compaction (``llm``-style strategies name their summarizer)."""
        ...

    def summarize(self, request: SummaryRequest) -> Summary:
        """Summarize ``request.messages``."""
        ...


def strip_media(messages: Sequence[Message]) -> list[Message]:
    """Copies of ``messages`` with images and documents replaced by ``[image]`` / ``[document]``.

    A summary needs no pixels, and media make the summarization request large.
    """

    def block(b: dict[str, Any]) -> dict[str, Any]:
        kind = b.get("type")
        if kind in ("image", "document"):
            return {"type": "text", "text": f"[{kind}]"}
        if kind == "tool_result" and isinstance(b.get("content"), list):
            return {**b, "content": [block(inner) for inner in b["content"]]}
        return b

    result = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [block(b) for b in content]
        result.append({"role": message["role"], "content": content})
    return result


#: Opens the text that hands a model the summary of an earlier compaction.
PREVIOUS_SUMMARY_PREFIX = "[Summary of the conversation before the messages below]\n"


def with_previous_summary(messages: list[Message], previous: str | None) -> list[Message]:
    """``messages`` with the earlier compaction's summary as the first user text, when there is one."""
    if not previous:
        return messages
    block = {"type": "text", "text": PREVIOUS_SUMMARY_PREFIX + previous}
    if messages and messages[0]["role"] == "user":
        first = messages[0]["content"]
        content = first if isinstance(first, list) else [{"type": "text", "text": first}]
        return [{"role": "user", "content": [block, *content]}, *messages[1:]]
    return [{"role": "user", "content": [block]}, *messages]


# --- Anthropic --------------------------------------------------------------------------------


class AnthropicSummarizer:
    """Summarize with one Messages API call through the anthropic SDK.

    Args:
        client: an ``anthropic.Anthropic`` client (any base URL).
        model: the model to use when the request names none.
        max_tokens: output bound (MAX_OUTPUT_TOKENS_FOR_SUMMARY by default).
    """

    name = "anthropic"

    def __init__(self, client: anthropic.Anthropic, model: str, *, max_tokens: int = 20_000) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens

    def summarize(self, request: SummaryRequest) -> Summary:
        """One turn; any bad outcome raises ``SummaryFailedError`` (or its subclass
        ``SummaryPromptTooLongError``).

        With ``request.prefix`` the main request's system, tools and messages go out unchanged
        plus the compact prompt, with no ``tool_choice`` and no ``thinking`` (a main loop that
        sends either shares only the cached tools and system: the API keys the messages' part
        by them). An answer that calls a tool is never run: its ``<summary>``,
        when its text has one, is the summary; otherwise the same request is sent once more
        with ``tool_choice: none`` (the messages' cache is not read then) and its answer counts.
        Without a prefix the messages are sent with media replaced, and ``tool_choice: none``
        when there are tools.
        """
        params = self._params(request)
        response = self._call(params)
        usage = _usage(response)
        unforced = "tools" in params and "tool_choice" not in params
        if unforced and _calls_tool(response) and not has_summary(_text(response)):
            response = self._call({**params, "tool_choice": {"type": "none"}})
            usage = {key: usage[key] + value for key, value in _usage(response).items()}
        if _calls_tool(response) and not has_summary(_text(response)):
            raise SummaryFailedError("summarizer answered with a tool call instead of a summary")
        text = format_summary(_text(response))
        if not text:
            raise SummaryFailedError("summarizer returned an empty summary")
        return Summary(text, self.name, usage, response.id)

    def _params(self, request: SummaryRequest) -> dict[str, Any]:
        """The Messages API parameters of the summary request."""
        ask = {"type": "text", "text": compact_prompt(request.template, request.custom_instructions)}
        params: dict[str, Any] = {"model": request.model or self.model, "max_tokens": self.max_tokens}
        if request.prefix is not None:
            head = {key: request.prefix[key] for key in ("system", "tools") if request.prefix.get(key)}
            messages = list(request.prefix["messages"])
        else:
            head = {"system": request.system} if request.system else {}
            if request.tools:
                head |= {"tools": list(request.tools), "tool_choice": {"type": "none"}}
            messages = with_previous_summary(strip_media(request.messages), request.previous_summary)
        if messages and messages[-1]["role"] == "user":
            # Appended after the last block: every block before it, and its breakpoint, stay.
            last = messages[-1]
            content = (
                last["content"]
                if isinstance(last["content"], list)
                else [{"type": "text", "text": last["content"]}]
            )
            messages[-1] = {"role": "user", "content": [*content, ask]}
        else:
            messages.append({"role": "user", "content": [ask]})
        return {**params, **head, "messages": messages}

    def _call(self, params: dict[str, Any]) -> anthropic.types.Message:
        """One ``messages.create``; API errors raise ``SummaryFailedError`` (too long: its subclass)."""
        import anthropic

        try:
            with model_call_span(model=params["model"], purpose="summary", max_tokens=self.max_tokens) as t:
                response: anthropic.types.Message = self.client.messages.create(**params)
                t.record_response(response)
        except anthropic.BadRequestError as e:
            text = str(e)
            gap = parse_prompt_too_long(text)
            if gap is not None or "prompt is too long" in text.lower():
                raise SummaryPromptTooLongError(f"summarization prompt too long: {text}", gap) from e
            raise SummaryFailedError(f"summarizer request rejected: {text}") from e
        except anthropic.APIError as e:  # timeouts, overload, connection errors
            raise SummaryFailedError(f"summarizer call failed: {type(e).__name__}: {e}") from e
        return response


def _calls_tool(response: anthropic.types.Message) -> bool:
    return any(getattr(b, "type", None) == "tool_use" for b in response.content)


def _text(response: anthropic.types.Message) -> str:
    return "".join(getattr(b, "text", "") for b in response.content if getattr(b, "type", None) == "text")


def _usage(response: anthropic.types.Message) -> dict[str, int]:
    usage = response.usage
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
    }


# --- offline ----------------------------------------------------------------------------------

_PATH_KEYS = ("file_path", "path", "notebook_path")
_EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
_QUOTE = 300


def _texts(content: str | list[dict[str, Any]]) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content if b.get("type") == "text"]


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content", "")
    return inner if isinstance(inner, str) else " ".join(_texts(inner))


def _clip(text: str, limit: int = _QUOTE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Characters each list section of an offline summary may hold: a summary is bounded (like a
#: model's output) so it never grows with the history it covers.
_SECTION_CHARS = 12_000


def _bounded(lines: list[str], what: str, *, newest: bool = False) -> str:
    """``lines`` joined, keeping the first (or newest) that fit the section budget."""
    ordered = list(reversed(lines)) if newest else list(lines)
    kept: list[str] = []
    used = 0
    for line in ordered:
        if used + len(line) + 1 > _SECTION_CHARS:
            break
        kept.append(line)
        used += len(line) + 1
    if newest:
        kept.reverse()
    omitted = len(lines) - len(kept)
    if omitted:
        note = f"- ({omitted} {'earlier' if newest else 'more'} {what} omitted)"
        kept = [note, *kept] if newest else [*kept, note]
    return "\n".join(kept)


_SECTION_HEAD = re.compile(r"^(\d)\. (.+):$")


def _sections(summary: str) -> dict[str, str]:
    """An offline summary's section bodies by name; empty for any other text."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in summary.splitlines():
        head = _SECTION_HEAD.match(line)
        if head and head.group(2) in SUMMARY_SECTIONS:
            current = found.setdefault(head.group(2), [])
        elif current is not None:
            current.append(line)
    if set(found) != set(SUMMARY_SECTIONS):
        return {}
    return {name: "\n".join(lines).strip() for name, lines in found.items()}


def _carried(earlier: dict[str, str], section: int, lines: list[str]) -> list[str]:
    """The list items of an earlier summary's section (not its omission notes), then ``lines``."""
    body = earlier.get(SUMMARY_SECTIONS[section], "")
    kept = [line for line in body.splitlines() if line.startswith("- ") and not line.startswith("- (")]
    return [*kept, *(line for line in lines if line not in kept)] if section == 2 else [*kept, *lines]


class OfflineSummarizer:
    """A deterministic, extractive summary of the nine sections; no model, no network."""

    name = "offline"

    def summarize(self, request: SummaryRequest) -> Summary:
        """Extract the sections from the messages (raises ``SummaryFailedError`` when there are none)."""
        messages = strip_media(request.messages)
        if not messages:
            raise SummaryFailedError("nothing to summarize")
        user_texts: list[str] = []
        assistant_texts: list[str] = []
        tools_used: dict[str, int] = {}
        files_read: list[str] = []
        files_edited: list[str] = []
        errors: list[str] = []
        todos: list[str] = []
        for message in messages:
            content = message["content"]
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for b in blocks:
                kind = b.get("type")
                if kind == "text" and b.get("text", "").strip():
                    (user_texts if message["role"] == "user" else assistant_texts).append(b["text"])
                elif kind == "tool_use":
                    name = str(b.get("name", "?"))
                    tools_used[name] = tools_used.get(name, 0) + 1
                    raw_input = b.get("input")
                    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
                    path = next(
                        (tool_input[k] for k in _PATH_KEYS if isinstance(tool_input.get(k), str)), None
                    )
                    if path:
                        bucket = files_edited if name in _EDIT_TOOLS else files_read
                        if path not in bucket:
                            bucket.append(path)
                    for todo in (
                        tool_input.get("todos", []) if isinstance(tool_input.get("todos"), list) else []
                    ):
                        if isinstance(todo, dict) and todo.get("status") != "completed":
                            todos.append(str(todo.get("content", todo)))
                elif kind == "tool_result" and b.get("is_error"):
                    errors.append(_clip(_result_text(b), 200))
        earlier = _sections(request.previous_summary or "")
        solving = [f"- {_clip(t, 200)}" for t in assistant_texts[-5:]]
        if request.previous_summary and not earlier:
            # Not an offline summary (a model's, or a session memory): carried as one note.
            solving.insert(0, f"- Earlier (summarized): {_clip(request.previous_summary, 2_000)}")
        sections = {
            SUMMARY_SECTIONS[0]: earlier.get(SUMMARY_SECTIONS[0])
            or (_clip(user_texts[0]) if user_texts else "No user request recorded."),
            SUMMARY_SECTIONS[1]: ", ".join(f"{n} ({c}x)" for n, c in sorted(tools_used.items()))
            or earlier.get(SUMMARY_SECTIONS[1])
            or "No tools used.",
            SUMMARY_SECTIONS[2]: _bounded(
                _carried(
                    earlier,
                    2,
                    [*(f"- edited {p}" for p in files_edited), *(f"- read {p}" for p in files_read)],
                ),
                "files",
            )
            or "No files touched.",
            SUMMARY_SECTIONS[3]: _bounded(
                _carried(earlier, 3, [f"- {e}" for e in errors]), "errors", newest=True
            )
            or "No errors recorded.",
            SUMMARY_SECTIONS[4]: "\n".join(solving) or "Nothing recorded.",
            SUMMARY_SECTIONS[5]: _bounded(
                _carried(earlier, 5, [f"- {_clip(t, 1_000)}" for t in user_texts]), "messages", newest=True
            )
            or "None.",
            SUMMARY_SECTIONS[6]: _bounded([f"- {t}" for t in todos], "tasks", newest=True)
            or earlier.get(SUMMARY_SECTIONS[6])
            or "None recorded.",
            SUMMARY_SECTIONS[7]: _clip(assistant_texts[-1]) if assistant_texts else "Nothing recorded.",
            SUMMARY_SECTIONS[8]: f'Continue from the latest request: "{_clip(user_texts[-1])}"'
            if user_texts
            else "None.",
        }
        if request.custom_instructions:
            sections[SUMMARY_SECTIONS[4]] += f"\n- (instructions: {_clip(request.custom_instructions, 200)})"
        text = "\n\n".join(
            f"{i}. {name}:\n{body}" for i, (name, body) in enumerate(sections.items(), start=1)
        )
        return Summary(text, self.name)


def default_summarizer(client: anthropic.Anthropic | None = None, model: str | None = None) -> Summarizer:
    """Anthropic when a client (or ``ANTHROPIC_API_KEY``) and a model are available, else offline."""
    if model and (client is not None or os.environ.get("ANTHROPIC_API_KEY")):
        if client is None:
            import anthropic

            client = anthropic.Anthropic()
        return AnthropicSummarizer(client, model)
    return OfflineSummarizer()

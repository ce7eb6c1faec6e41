"""Offline checks of a Messages API request before it is sent.

:func:`validate_request` checks that a payload for ``client.messages.create(**request)``
satisfies the invariants the API-context projection promises, and that the API itself
enforces: alternating roles, every ``tool_use`` answered by a ``tool_result`` in the next
message, no orphan results, non-blank text, well-formed ``cache_control`` and at most four
cache breakpoints. It catches a malformed history locally, with the exact place named,
instead of as a 400 from the API after a network round trip.

:func:`request_problems` returns every problem found instead of raising on the first.

Each problem has a ``path`` (``messages[3].content[0].tool_use_id``; ``""`` for the request
itself) and a ``rule``, a stable identifier callers may match on:

==============================  ==========================================================
rule                            meaning
==============================  ==========================================================
request_not_object              the request is not a mapping
invalid_max_tokens              ``max_tokens`` is present but not a positive int
invalid_tools                   ``tools`` is not a list
invalid_tool                    a tool is not an object, or lacks a string ``name``, or a
                                custom tool lacks an ``input_schema`` object
duplicate_tool_name             two tools share a ``name``
invalid_system                  ``system`` is neither a string nor a list of text blocks
invalid_cache_control           ``cache_control`` is not ``{"type": "ephemeral"}`` with an
                                optional ``ttl`` of ``"5m"`` or ``"1h"``
too_many_cache_breakpoints      more than 4 ``cache_control`` markers in the request
invalid_messages                ``messages`` is missing or not a list
empty_messages                  ``messages`` is an empty list
message_not_object              a message is not an object
invalid_role                    a message's ``role`` is not ``"user"`` or ``"assistant"``
first_message_not_user          the first message is not a user message
consecutive_same_role           two consecutive messages have the same role
invalid_content                 ``content`` is missing or neither a string nor a list
empty_content                   ``content`` is ``""`` or ``[]``
block_not_object                a content block is not an object
invalid_block_type              a content block has no string ``type``
invalid_text                    a text block's ``text`` is not a string
empty_text                      a text block's ``text`` is ``""``
blank_text                      text (a block's or string content) is whitespace only
invalid_tool_use                a ``tool_use`` lacks a string ``id`` / ``name`` or an
                                object ``input``
duplicate_tool_use_id           a ``tool_use`` id occurs twice in the request
tool_use_without_result         a ``tool_use`` is not answered in the next (user) message
invalid_tool_result             a ``tool_result`` lacks a string ``tool_use_id`` or has
                                malformed ``content``
tool_result_without_tool_use    a ``tool_result`` answers no ``tool_use`` of the
                                immediately preceding assistant message
tool_blocks_without_tools       a ``tool_use`` or ``tool_result`` block in a request
                                whose ``tools`` is missing or empty (the API refuses it)
duplicate_tool_result           a ``tool_use`` id is answered twice in one message
tool_result_not_first           in a user message, a ``tool_result`` follows another block
block_not_allowed_for_role      ``tool_use`` / ``thinking`` / ``redacted_thinking`` in a
                                user message, or ``tool_result`` in an assistant message
thinking_without_signature      a ``thinking`` block lacks a string ``signature``
==============================  ==========================================================

Other keys (``model``, ``temperature``, ``metadata`` ...) are not checked, and unknown block
types (``compaction``, ``server_tool_use``, ``web_search_tool_result``, future ones) are
accepted as they are: only their ``cache_control`` is checked and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

import pydantic

from ..errors import InvalidRequestError

__all__ = ["RequestProblem", "request_problems", "validate_request"]

#: Every rule this module reports, in the order of the table in the module docstring.
_RULES: Final = (
    "request_not_object",
    "invalid_max_tokens",
    "invalid_tools",
    "invalid_tool",
    "duplicate_tool_name",
    "invalid_system",
    "invalid_cache_control",
    "too_many_cache_breakpoints",
    "invalid_messages",
    "empty_messages",
    "message_not_object",
    "invalid_role",
    "first_message_not_user",
    "consecutive_same_role",
    "invalid_content",
    "empty_content",
    "block_not_object",
    "invalid_block_type",
    "invalid_text",
    "empty_text",
    "blank_text",
    "invalid_tool_use",
    "duplicate_tool_use_id",
    "tool_use_without_result",
    "invalid_tool_result",
    "tool_result_without_tool_use",
    "tool_blocks_without_tools",
    "duplicate_tool_result",
    "tool_result_not_first",
    "block_not_allowed_for_role",
    "thinking_without_signature",
)

#: The API's limit on ``cache_control`` markers per request.
_MAX_CACHE_BREAKPOINTS: Final = 4

_ROLES: Final = ("user", "assistant")
_CACHE_TTLS: Final = ("5m", "1h")
#: Block types the API accepts only in one role's messages.
_ASSISTANT_ONLY: Final = frozenset({"tool_use", "thinking", "redacted_thinking"})
_USER_ONLY: Final = frozenset({"tool_result"})


@dataclass(frozen=True, slots=True)
class RequestProblem:
    """One way a request breaks an invariant.

    Attributes:
        path: where, JSON-path-like (``messages[3].content[0]``); ``""`` for the request.
        rule: stable identifier of the broken invariant (see the module docstring).
        message: human-readable; starts with the path and says what is wrong.
    """

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return self.message


def validate_request(request: Mapping[str, Any]) -> None:
    """Check a ``client.messages.create(**request)`` payload; return None if it is valid.

    The request is only read, never modified. Pydantic models in it (such as the SDK's
    ``response.content`` blocks) are checked as the SDK would send them.

    Args:
        request: the keyword arguments for ``messages.create``.

    Raises:
        InvalidRequestError: for the first problem :func:`request_problems` finds; its
            message says how many more there are.
    """
    problems = request_problems(request)
    if not problems:
        return
    first = problems[0]
    message = first.message
    if len(problems) > 1:
        more = len(problems) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''}; see request_problems())"
    raise InvalidRequestError(message, path=first.path, rule=first.rule)


def request_problems(request: Mapping[str, Any]) -> list[RequestProblem]:
    """Every invariant the request breaks; an empty list when it is valid.

    Problems come in a fixed order: ``max_tokens``, ``tools``, ``system`` (the order the API
    caches the prefix in), then each message's own structure in message order, then the
    pairing of tool uses and results across messages, then the breakpoint count. Checks that
    depend on a malformed part are skipped rather than reported as follow-on noise.

    Args:
        request: the keyword arguments for ``messages.create``.

    Returns:
        The problems found, each with a path, a rule and a message; never raises for bad
        input.
    """
    return _Checker().run(request)


@dataclass(slots=True)
class _Block:
    path: str
    type: str
    body: Mapping[str, Any]


@dataclass(slots=True)
class _Message:
    """A message well-formed enough to pair tool uses with results."""

    role: str
    blocks: list[_Block]


@dataclass(slots=True)
class _Checker:
    problems: list[RequestProblem] = field(default_factory=list)
    breakpoints: list[str] = field(default_factory=list)
    #: tool_use id -> path of the first block that used it, across the whole request.
    tool_use_paths: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, rule: str, what: str) -> None:
        self.problems.append(RequestProblem(path, rule, f"{path or 'request'}: {what}"))

    def run(self, request: object) -> list[RequestProblem]:
        if not isinstance(request, Mapping):
            self.add(
                "", "request_not_object", f"must be a mapping of create() arguments, got {_kind(request)}"
            )
            return self.problems
        if "max_tokens" in request:
            self.check_max_tokens(request["max_tokens"])
        if "tools" in request:
            self.check_tools(request["tools"])
        if "system" in request:
            self.check_system(request["system"])
        self.check_messages(request)
        if len(self.breakpoints) > _MAX_CACHE_BREAKPOINTS:
            self.add(
                self.breakpoints[_MAX_CACHE_BREAKPOINTS],
                "too_many_cache_breakpoints",
                f"is cache_control breakpoint {_MAX_CACHE_BREAKPOINTS + 1} of {len(self.breakpoints)}; "
                f"the API allows at most {_MAX_CACHE_BREAKPOINTS} per request "
                f"(they are at {', '.join(self.breakpoints)})",
            )
        return self.problems

    def check_max_tokens(self, value: object) -> None:
        # bool is an int subclass, but True is not a token budget.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.add("max_tokens", "invalid_max_tokens", f"must be a positive int, got {value!r}")

    def check_tools(self, tools: object) -> None:
        if not _is_list(tools):
            self.add("tools", "invalid_tools", f"must be a list of tool definitions, got {_kind(tools)}")
            return
        names: dict[str, str] = {}
        for k, item in enumerate(tools):
            path = f"tools[{k}]"
            tool = _as_object(item)
            if tool is None:
                self.add(path, "invalid_tool", f"must be an object, got {_kind(item)}")
                continue
            self.check_cache_control(tool, path)
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                self.add(f"{path}.name", "invalid_tool", f"must be a non-empty string, {_got(tool, 'name')}")
            elif name in names:
                self.add(
                    f"{path}.name",
                    "duplicate_tool_name",
                    f"tool name {name!r} is already used by {names[name]}; tool names must be unique",
                )
            else:
                names[name] = path
            kind = tool.get("type")
            if kind is not None and not isinstance(kind, str):
                self.add(f"{path}.type", "invalid_tool", f"must be a string, got {_kind(kind)}")
            # Server tools (web_search_20250305, bash_20250124 ...) carry a type and no schema;
            # only custom tools declare their input.
            elif kind in (None, "custom") and not isinstance(tool.get("input_schema"), Mapping):
                self.add(
                    f"{path}.input_schema",
                    "invalid_tool",
                    f"a custom tool needs a JSON Schema object, {_got(tool, 'input_schema')}",
                )

    def check_system(self, system: object) -> None:
        if isinstance(system, str):
            return
        if not _is_list(system):
            self.add(
                "system", "invalid_system", f"must be a string or a list of text blocks, got {_kind(system)}"
            )
            return
        for k, item in enumerate(system):
            path = f"system[{k}]"
            block = _as_object(item)
            if block is None:
                self.add(path, "invalid_system", f"must be a text block object, got {_kind(item)}")
                continue
            self.check_cache_control(block, path)
            if block.get("type") != "text":
                self.add(
                    f"{path}.type",
                    "invalid_system",
                    f"system blocks must have type 'text', got {block.get('type')!r}",
                )
                continue
            self.check_text(block, path)

    def check_cache_control(self, owner: Mapping[str, Any], owner_path: str) -> None:
        control = owner.get("cache_control")
        if control is None:  # absent, or null, which the API treats as absent
            return
        path = f"{owner_path}.cache_control"
        self.breakpoints.append(path)
        body = _as_object(control)
        if body is None:
            self.add(
                path,
                "invalid_cache_control",
                f"must be an object like {{'type': 'ephemeral'}}, got {_kind(control)}",
            )
            return
        if body.get("type") != "ephemeral":
            self.add(
                f"{path}.type", "invalid_cache_control", f"must be 'ephemeral', got {body.get('type')!r}"
            )
        if "ttl" in body and body["ttl"] not in _CACHE_TTLS:
            self.add(f"{path}.ttl", "invalid_cache_control", f"must be '5m' or '1h', got {body['ttl']!r}")

    def check_text(self, block: Mapping[str, Any], path: str) -> None:
        text = block.get("text")
        if not isinstance(text, str):
            self.add(f"{path}.text", "invalid_text", f"must be a string, {_got(block, 'text')}")
        elif not text:
            self.add(f"{path}.text", "empty_text", "text content blocks must be non-empty")
        elif text.isspace():
            self.add(f"{path}.text", "blank_text", "text content blocks must contain non-whitespace text")

    def check_messages(self, request: Mapping[str, Any]) -> None:
        if "messages" not in request:
            self.add("messages", "invalid_messages", "is required: a list of user/assistant messages")
            return
        messages = request["messages"]
        if not _is_list(messages):
            self.add("messages", "invalid_messages", f"must be a list of messages, got {_kind(messages)}")
            return
        if not messages:
            self.add("messages", "empty_messages", "must contain at least one message")
            return
        parsed = [self.check_message(i, message) for i, message in enumerate(messages)]
        self.check_roles(parsed)
        self.check_pairing(parsed)
        self.check_tools_defined(request, parsed)

    def check_tools_defined(self, request: Mapping[str, Any], messages: list[_Message | None]) -> None:
        """Tool blocks need tool definitions: the API refuses a request with one and no ``tools``."""
        tools = request.get("tools")
        if tools is not None and not _is_list(tools):
            return  # already reported as invalid_tools
        if tools:
            return
        first = next(
            (
                block
                for message in messages
                if message is not None
                for block in message.blocks
                if block.type in ("tool_use", "tool_result")
            ),
            None,
        )
        if first is not None:
            self.add(
                first.path,
                "tool_blocks_without_tools",
                f"a {first.type} block needs tool definitions, but the request's tools are "
                f"{'missing' if tools is None else 'empty'} (the API refuses it: requests which include "
                "tool_use or tool_result blocks must define tools)",
            )

    def check_message(self, i: int, message: object) -> _Message | None:
        """Check one message on its own; return it if it can take part in pairing checks."""
        path = f"messages[{i}]"
        body = _as_object(message)
        if body is None:
            self.add(
                path, "message_not_object", f"must be an object with role and content, got {_kind(message)}"
            )
            return None
        role = body.get("role")
        if role not in _ROLES:
            hint = " (a system prompt goes in the top-level `system` argument)" if role == "system" else ""
            self.add(
                f"{path}.role", "invalid_role", f"must be 'user' or 'assistant', {_got(body, 'role')}{hint}"
            )
        blocks = self.check_content(body, path, role if role in _ROLES else None)
        if role not in _ROLES or blocks is None:
            return None
        return _Message(role, blocks)

    def check_content(self, message: Mapping[str, Any], path: str, role: str | None) -> list[_Block] | None:
        """Check a message's content; return its well-formed blocks, None if it is malformed."""
        path = f"{path}.content"
        if "content" not in message:
            self.add(path, "invalid_content", "is required: a string or a list of content blocks")
            return None
        content = message["content"]
        if isinstance(content, str):
            if not content:
                self.add(path, "empty_content", "must be a non-empty string or a non-empty list of blocks")
            elif content.isspace():
                # String content is shorthand for one text block, so the block's rule applies.
                self.add(path, "blank_text", "text content must contain non-whitespace text")
            return []
        if not _is_list(content):
            self.add(
                path, "invalid_content", f"must be a string or a list of content blocks, got {_kind(content)}"
            )
            return None
        if not content:
            self.add(path, "empty_content", "must be a non-empty string or a non-empty list of blocks")
            return None
        blocks: list[_Block] = []
        for j, item in enumerate(content):
            block = self.check_block(item, f"{path}[{j}]", role)
            if block is not None:
                blocks.append(block)
        return blocks

    def check_block(self, item: object, path: str, role: str | None) -> _Block | None:
        body = _as_object(item)
        if body is None:
            self.add(path, "block_not_object", f"must be a content block object, got {_kind(item)}")
            return None
        kind = body.get("type")
        if not isinstance(kind, str):
            what = "is missing" if "type" not in body else f"must be a string, got {_kind(kind)}"
            self.add(f"{path}.type", "invalid_block_type", f"{what}: every content block needs a string type")
            return None
        self.check_cache_control(body, path)
        if (role == "user" and kind in _ASSISTANT_ONLY) or (role == "assistant" and kind in _USER_ONLY):
            allowed = "assistant" if kind in _ASSISTANT_ONLY else "user"
            self.add(
                path,
                "block_not_allowed_for_role",
                f"a {kind} block is only allowed in {allowed} messages, but this is a {role} message",
            )
        if kind == "text":
            self.check_text(body, path)
        elif kind == "tool_use":
            self.check_tool_use(body, path)
        elif kind == "tool_result":
            self.check_tool_result(body, path)
        elif kind == "thinking" and not isinstance(body.get("signature"), str):
            self.add(
                f"{path}.signature",
                "thinking_without_signature",
                "a thinking block must carry the string signature the API returned with it, "
                + _got(body, "signature"),
            )
        return _Block(path, kind, body)

    def check_tool_use(self, block: Mapping[str, Any], path: str) -> None:
        tool_id = block.get("id")
        if not isinstance(tool_id, str) or not tool_id:
            self.add(f"{path}.id", "invalid_tool_use", f"must be a non-empty string, {_got(block, 'id')}")
        elif tool_id in self.tool_use_paths:
            self.add(
                f"{path}.id",
                "duplicate_tool_use_id",
                f"tool_use id {tool_id!r} is already used at {self.tool_use_paths[tool_id]}; "
                "ids must be unique in a request",
            )
        else:
            self.tool_use_paths[tool_id] = path
        name = block.get("name")
        if not isinstance(name, str) or not name:
            self.add(f"{path}.name", "invalid_tool_use", f"must be a non-empty string, {_got(block, 'name')}")
        if not isinstance(block.get("input"), Mapping):
            self.add(f"{path}.input", "invalid_tool_use", f"must be an object, {_got(block, 'input')}")

    def check_tool_result(self, block: Mapping[str, Any], path: str) -> None:
        tool_use_id = block.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            self.add(
                f"{path}.tool_use_id",
                "invalid_tool_result",
                f"must be a non-empty string, {_got(block, 'tool_use_id')}",
            )
        if "content" not in block or isinstance(block["content"], str):
            return
        content = block["content"]
        if not _is_list(content):
            self.add(
                f"{path}.content",
                "invalid_tool_result",
                f"must be a string or a list of content blocks, got {_kind(content)}",
            )
            return
        for k, item in enumerate(content):
            # Nested blocks (text, image, document ...) follow the same block rules, and
            # their cache_control markers count toward the limit; no role applies inside.
            self.check_block(item, f"{path}.content[{k}]", None)

    def check_roles(self, messages: list[_Message | None]) -> None:
        first = messages[0]
        if first is not None and first.role != "user":
            self.add(
                "messages[0].role",
                "first_message_not_user",
                f"the first message must be a user message, got {first.role!r}",
            )
        for i in range(1, len(messages)):
            before, current = messages[i - 1], messages[i]
            if before is not None and current is not None and before.role == current.role:
                self.add(
                    f"messages[{i}].role",
                    "consecutive_same_role",
                    f"a second {current.role} message in a row after messages[{i - 1}]; "
                    "roles must alternate (merge the two messages' content)",
                )

    def check_pairing(self, messages: list[_Message | None]) -> None:
        for i, message in enumerate(messages):
            if message is None:
                continue
            if message.role == "assistant":
                self.check_answered(i, message, messages)
            else:
                self.check_results(i, message, messages[i - 1] if i > 0 else None)

    def check_answered(self, i: int, message: _Message, messages: list[_Message | None]) -> None:
        """Every tool_use of assistant message ``i`` is answered in message ``i + 1``."""
        uses = _tool_uses(message)
        if not uses:
            return
        if i + 1 == len(messages):
            why = "it is in the last message; send its result in a following user message"
        elif (after := messages[i + 1]) is None:
            return  # the next message is malformed and already reported
        elif after.role != "user":
            why = f"messages[{i + 1}] is an assistant message, but results must come in a user message"
        else:
            answered = {b.body["tool_use_id"] for b in after.blocks if _is_result(b)}
            uses = {tool_id: path for tool_id, path in uses.items() if tool_id not in answered}
            why = f"messages[{i + 1}] has no tool_result with this tool_use_id"
        for tool_id, path in uses.items():
            self.add(path, "tool_use_without_result", f"tool_use {tool_id!r} is never answered: {why}")

    def check_results(self, i: int, message: _Message, before: _Message | None) -> None:
        """User message ``i``: results first, each answering message ``i - 1``'s tool_use once."""
        other: _Block | None = None
        for block in message.blocks:
            if block.type != "tool_result":
                if other is None:
                    other = block
            elif other is not None:
                self.add(
                    block.path,
                    "tool_result_not_first",
                    f"a tool_result comes after {other.path} (a {other.type} block); in a user message "
                    "every tool_result must come before any other block",
                )
                break
        if i > 0 and before is None:
            return  # the previous message is malformed and already reported
        uses = _tool_uses(before) if before is not None and before.role == "assistant" else {}
        answered: dict[str, str] = {}
        for block in message.blocks:
            if not _is_result(block):
                continue
            tool_id: str = block.body["tool_use_id"]
            if tool_id in answered:
                self.add(
                    block.path,
                    "duplicate_tool_result",
                    f"tool_use {tool_id!r} is already answered by {answered[tool_id]}; "
                    "answer each tool_use once",
                )
            elif tool_id in uses:
                answered[tool_id] = block.path
            else:
                self.add(
                    block.path,
                    "tool_result_without_tool_use",
                    _orphan_reason(i, tool_id, before, self.tool_use_paths),
                )


def _orphan_reason(i: int, tool_id: str, before: _Message | None, tool_use_paths: Mapping[str, str]) -> str:
    prefix = f"tool_result for {tool_id!r} has no matching tool_use"
    if before is None:
        return f"{prefix}: it is in the first message, with no assistant message before it"
    if before.role != "assistant":
        where = f"messages[{i - 1}] before it is a {before.role} message, not an assistant message"
    else:
        where = f"the assistant message before it, messages[{i - 1}], has no tool_use with this id"
    elsewhere = tool_use_paths.get(tool_id)
    if elsewhere is not None:
        where += f"; the tool_use is at {elsewhere}, but its result must be in the very next message"
    return f"{prefix}: {where}"


def _tool_uses(message: _Message) -> dict[str, str]:
    """tool_use id -> block path, for the well-formed tool_use blocks of an assistant message."""
    return {
        b.body["id"]: b.path
        for b in message.blocks
        if b.type == "tool_use" and isinstance(b.body.get("id"), str) and b.body["id"]
    }


def _is_result(block: _Block) -> bool:
    tool_use_id = block.body.get("tool_use_id")
    return block.type == "tool_result" and isinstance(tool_use_id, str) and bool(tool_use_id)


def _as_object(value: object) -> Mapping[str, Any] | None:
    """A mapping as the SDK would send it, or None when the value is not an object."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, pydantic.BaseModel):
        # Users pass response.content back as assistant content; the SDK sends such models
        # dumped this way (anthropic._utils._json.openapi_model_dump).
        return value.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude=getattr(value, "__api_exclude__", None)
        )
    return None


def _is_list(value: object) -> TypeGuard[Sequence[Any]]:
    # The SDK sends any non-text sequence as a JSON array; a str is never a list of blocks.
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _got(body: Mapping[str, Any], key: str) -> str:
    """``but it is missing`` or ``got <value>``, for a field's error message."""
    return "but it is missing" if key not in body else f"got {_kind(body[key])}"


def _kind(value: object) -> str:
    """Short description of an unexpected value for error messages."""
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"str {value!r}" if len(value) <= 40 else "a str"
    return type(value).__name__

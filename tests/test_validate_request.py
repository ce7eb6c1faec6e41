"""validate_request / request_problems: Messages API payload invariants, checked offline."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from anthropic.types import TextBlock, ThinkingBlock, ToolUseBlock
from hypothesis import given
from hypothesis import strategies as st

from sessionstore.errors import InvalidRequestError, SessionStoreError
from sessionstore.projections._validate import (
    _RULES,
    RequestProblem,
    request_problems,
    validate_request,
)

# -- payload builders ---------------------------------------------------------------------


def _req(*messages: Any, **extra: Any) -> dict[str, Any]:
    """A request with the given messages; it defines one tool unless ``tools`` is given."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "tools": [_tool("read_file")],
        "messages": list(messages),
        **extra,
    }


def _user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def _text(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **extra}


def _use(tool_id: str, name: str = "read_file", tool_input: Any = None) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": tool_id,
        "name": name,
        "input": {} if tool_input is None else tool_input,
    }


def _result(tool_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "input_schema": {"type": "object", "properties": {}}}


_CACHED = {"type": "ephemeral"}
_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def _valid_request() -> dict[str, Any]:
    """A realistic multi-turn, tool-using request that satisfies every invariant."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "system": [_text("You help with files.", cache_control={"type": "ephemeral", "ttl": "1h"})],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
            {**_tool("list_dir"), "cache_control": _CACHED},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},  # server tool
        ],
        "messages": [
            _user("What is in notes.txt and diagram.png?"),
            _assistant(
                [
                    {"type": "thinking", "thinking": "I need both files.", "signature": "EqQBCkYIBxgCKkB"},
                    _text("Reading both."),
                    # parallel tool calls, answered below in the other order
                    _use("toolu_01", tool_input={"path": "notes.txt"}),
                    _use("toolu_02", tool_input={"path": "diagram.png"}),
                ]
            ),
            _user(
                [
                    _result("toolu_02", [_IMAGE, _text("diagram.png, 1 KB")]),
                    _result("toolu_01", "buy milk", is_error=False),
                    _text("Also look up milk prices."),
                ]
            ),
            _assistant(
                [
                    {"type": "compaction", "content": "Summary of earlier work."},
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_01",
                        "name": "web_search",
                        "input": {"query": "milk prices"},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
                    _text("Milk is about $4. Listing the folder."),
                    _use("toolu_03", name="list_dir"),
                ]
            ),
            _user([_result("toolu_03", "notes.txt\ndiagram.png", cache_control=_CACHED)]),
        ],
    }


# -- valid requests -----------------------------------------------------------------------


def test_valid_multi_turn_tool_request_passes() -> None:
    """Thinking, parallel tools, images in results, server blocks and 3 breakpoints: no problems."""
    request = _valid_request()
    before = copy.deepcopy(request)

    assert request_problems(request) == []
    validate_request(request)  # does not raise
    assert request == before  # only read


def test_sdk_response_blocks_are_accepted_as_assistant_content() -> None:
    """``response.content`` passed back as-is (pydantic models) is checked as the SDK sends it."""
    content = [
        ThinkingBlock(type="thinking", thinking="plan", signature="sig"),
        TextBlock(type="text", text="Reading.", citations=None),
        ToolUseBlock(type="tool_use", id="toolu_01", name="read_file", input={"path": "a"}),
    ]
    request = _req(_user("read a"), _assistant(content), _user([_result("toolu_01")]))

    assert request_problems(request) == []


def test_sdk_response_blocks_are_still_checked() -> None:
    """A model block is not a free pass: a thinking block without signature is caught."""
    thinking = ThinkingBlock.model_construct(type="thinking", thinking="plan")
    request = _req(_user("hi"), _assistant([thinking, _text("ok")]))

    assert [p.rule for p in request_problems(request)] == ["thinking_without_signature"]


def test_null_cache_control_is_absent() -> None:
    """The API treats ``cache_control: null`` as no breakpoint; it is neither invalid nor counted."""
    request = _req(_user([_text(f"part {i}", cache_control=None) for i in range(6)]))

    assert request_problems(request) == []


# -- one case per rule --------------------------------------------------------------------

_THINKING = {"type": "thinking", "thinking": "hmm", "signature": "sig"}

_CASES: list[Any] = [
    pytest.param("request_not_object", "", ["not", "a", "mapping"], id="request_not_object"),
    pytest.param(
        "invalid_max_tokens", "max_tokens", _req(_user("hi"), max_tokens=0), id="invalid_max_tokens"
    ),
    pytest.param("invalid_tools", "tools", _req(_user("hi"), tools={"name": "read"}), id="invalid_tools"),
    pytest.param(
        "invalid_tool",
        "tools[0].input_schema",
        _req(_user("hi"), tools=[{"name": "read"}]),
        id="invalid_tool",
    ),
    pytest.param(
        "duplicate_tool_name",
        "tools[1].name",
        _req(_user("hi"), tools=[_tool("read"), _tool("read")]),
        id="duplicate_tool_name",
    ),
    pytest.param("invalid_system", "system[0].type", _req(_user("hi"), system=[_IMAGE]), id="invalid_system"),
    pytest.param(
        "invalid_cache_control",
        "system[0].cache_control.type",
        _req(_user("hi"), system=[_text("Be brief.", cache_control={"type": "persistent"})]),
        id="invalid_cache_control",
    ),
    pytest.param(
        "too_many_cache_breakpoints",
        "messages[0].content[4].cache_control",
        _req(_user([_text(f"part {i}", cache_control=_CACHED) for i in range(5)])),
        id="too_many_cache_breakpoints",
    ),
    pytest.param(
        "invalid_messages", "messages", {"model": "claude-sonnet-4-5", "max_tokens": 1}, id="invalid_messages"
    ),
    pytest.param("empty_messages", "messages", _req(), id="empty_messages"),
    pytest.param("message_not_object", "messages[0]", _req("hi"), id="message_not_object"),
    pytest.param(
        "invalid_role", "messages[0].role", _req({"role": "system", "content": "hi"}), id="invalid_role"
    ),
    pytest.param(
        "first_message_not_user", "messages[0].role", _req(_assistant("hi")), id="first_message_not_user"
    ),
    pytest.param(
        "consecutive_same_role", "messages[1].role", _req(_user("a"), _user("b")), id="consecutive_same_role"
    ),
    pytest.param("invalid_content", "messages[0].content", _req({"role": "user"}), id="invalid_content"),
    pytest.param("empty_content", "messages[0].content", _req(_user("")), id="empty_content"),
    pytest.param("block_not_object", "messages[0].content[0]", _req(_user(["hi"])), id="block_not_object"),
    pytest.param(
        "invalid_block_type",
        "messages[0].content[0].type",
        _req(_user([{"text": "hi"}])),
        id="invalid_block_type",
    ),
    pytest.param(
        "invalid_text",
        "messages[0].content[0].text",
        _req(_user([{"type": "text", "text": None}])),
        id="invalid_text",
    ),
    pytest.param("empty_text", "messages[0].content[0].text", _req(_user([_text("")])), id="empty_text"),
    pytest.param("blank_text", "messages[0].content[0].text", _req(_user([_text(" \n\t")])), id="blank_text"),
    pytest.param(
        "invalid_tool_use",
        "messages[1].content[0].input",
        _req(_user("q"), _assistant([_use("toolu_1", tool_input="path=a")]), _user([_result("toolu_1")])),
        id="invalid_tool_use",
    ),
    pytest.param(
        "duplicate_tool_use_id",
        "messages[1].content[1].id",
        _req(_user("q"), _assistant([_use("toolu_1"), _use("toolu_1")]), _user([_result("toolu_1")])),
        id="duplicate_tool_use_id",
    ),
    pytest.param(
        "tool_use_without_result",
        "messages[1].content[0]",
        _req(_user("q"), _assistant([_use("toolu_1")]), _user("never mind")),
        id="tool_use_without_result",
    ),
    pytest.param(
        "invalid_tool_result",
        "messages[0].content[0].tool_use_id",
        _req(_user([{"type": "tool_result", "content": "ok"}])),
        id="invalid_tool_result",
    ),
    pytest.param(
        "tool_result_without_tool_use",
        "messages[2].content[0]",
        _req(_user("q"), _assistant("sure"), _user([_result("toolu_1")])),
        id="tool_result_without_tool_use",
    ),
    pytest.param(
        "tool_blocks_without_tools",
        "messages[1].content[1]",
        _req(
            _user("q"),
            _assistant([_text("Reading."), _use("toolu_1")]),
            _user([_result("toolu_1")]),
            tools=[],
        ),
        id="tool_blocks_without_tools",
    ),
    pytest.param(
        "duplicate_tool_result",
        "messages[2].content[1]",
        _req(_user("q"), _assistant([_use("toolu_1")]), _user([_result("toolu_1"), _result("toolu_1")])),
        id="duplicate_tool_result",
    ),
    pytest.param(
        "tool_result_not_first",
        "messages[2].content[1]",
        _req(_user("q"), _assistant([_use("toolu_1")]), _user([_text("here"), _result("toolu_1")])),
        id="tool_result_not_first",
    ),
    pytest.param(
        "block_not_allowed_for_role",
        "messages[0].content[0]",
        _req(_user([_THINKING])),
        id="block_not_allowed_for_role",
    ),
    pytest.param(
        "thinking_without_signature",
        "messages[1].content[0].signature",
        _req(_user("q"), _assistant([{"type": "thinking", "thinking": "hmm"}, _text("ok")])),
        id="thinking_without_signature",
    ),
]


def test_every_rule_has_a_case() -> None:
    """The parametrized cases below cover each rule exactly once."""
    assert sorted(case.values[0] for case in _CASES) == sorted(_RULES)
    assert len(_RULES) == len(set(_RULES))


@pytest.mark.parametrize(("rule", "path", "request_"), _CASES)
def test_each_rule(rule: str, path: str, request_: Any) -> None:
    """A minimal payload breaking one rule yields exactly that problem, at that path."""
    problems = request_problems(request_)

    assert [(p.rule, p.path) for p in problems] == [(rule, path)]
    assert problems[0].message.startswith(f"{path or 'request'}: ")
    with pytest.raises(InvalidRequestError) as caught:
        validate_request(request_)
    assert (caught.value.rule, caught.value.path) == (rule, path)
    assert str(caught.value) == problems[0].message


@pytest.mark.parametrize(
    ("role", "block"),
    [
        ("user", _use("toolu_1")),
        ("user", {"type": "redacted_thinking", "data": "x"}),
        ("assistant", _result("toolu_1")),
    ],
    ids=["tool_use_in_user", "redacted_thinking_in_user", "tool_result_in_assistant"],
)
def test_role_only_blocks(role: str, block: dict[str, Any]) -> None:
    """tool_use / redacted_thinking belong to assistant messages, tool_result to user messages."""
    messages = [_user([block])] if role == "user" else [_user("q"), _assistant([block])]
    problems = request_problems(_req(*messages))

    assert [p.rule for p in problems] == ["block_not_allowed_for_role"]
    assert f"only allowed in {'assistant' if role == 'user' else 'user'} messages" in problems[0].message


def test_string_content_must_not_be_blank() -> None:
    """String content is shorthand for one text block, so whitespace-only is rejected too."""
    problems = request_problems(_req(_user("   ")))

    assert [(p.rule, p.path) for p in problems] == [("blank_text", "messages[0].content")]


@pytest.mark.parametrize("tools", ["missing", "empty"])
def test_tool_blocks_need_tool_definitions(tools: str) -> None:
    """The API refuses tool_use / tool_result blocks in a request that defines no tools, as a
    sub-agent's second request without ``tools`` was; named at the first tool block."""
    request = _req(_user("q"), _assistant([_use("toolu_1")]), _user([_result("toolu_1")]))
    if tools == "missing":
        del request["tools"]
    else:
        request["tools"] = []

    problems = request_problems(request)

    assert [(p.rule, p.path) for p in problems] == [("tool_blocks_without_tools", "messages[1].content[0]")]
    assert f"tools are {tools}" in problems[0].message
    assert request_problems({**request, "tools": [_tool("read_file")]}) == []


def test_tool_result_alone_needs_tool_definitions_too() -> None:
    """A history whose calls were snipped away can still hold a result: tools are needed too."""
    request = {"model": "m", "max_tokens": 1, "messages": [_user([_result("toolu_1")])]}

    rules = [p.rule for p in request_problems(request)]

    assert rules == ["tool_result_without_tool_use", "tool_blocks_without_tools"]


def test_tool_use_in_last_message_is_unanswered() -> None:
    """An assistant tool_use at the end of the history has no result to go with it."""
    problems = request_problems(_req(_user("q"), _assistant([_use("toolu_1")])))

    assert [(p.rule, p.path) for p in problems] == [("tool_use_without_result", "messages[1].content[0]")]
    assert "last message" in problems[0].message


def test_result_one_turn_late_names_where_its_tool_use_is() -> None:
    """A result that skips a turn is an orphan, and the message points at the tool_use."""
    request = _req(
        _user("q"),
        _assistant([_use("toolu_1")]),
        _user("oops, no result"),
        _assistant("waiting"),
        _user([_result("toolu_1")]),
    )
    problems = request_problems(request)

    assert [(p.rule, p.path) for p in problems] == [
        ("tool_use_without_result", "messages[1].content[0]"),
        ("tool_result_without_tool_use", "messages[4].content[0]"),
    ]
    assert "the tool_use is at messages[1].content[0]" in problems[1].message


def test_messages_say_missing_rather_than_none() -> None:
    """An absent field reads as missing; a present but wrong one shows its value."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_file"}
    problems = request_problems(_req(_user("q"), _assistant([use]), _user([_result("toolu_1")])))
    assert [p.message for p in problems] == [
        "messages[1].content[0].input: must be an object, but it is missing"
    ]

    problems = request_problems(_req({"role": "system", "content": "Be brief."}))
    assert problems[0].message == (
        "messages[0].role: must be 'user' or 'assistant', got str 'system' "
        "(a system prompt goes in the top-level `system` argument)"
    )


def test_cache_control_ttl_and_nested_breakpoints() -> None:
    """ttl must be 5m or 1h; markers inside tool_result content count toward the limit of 4."""
    bad_ttl = _req(_user([_text("hi", cache_control={"type": "ephemeral", "ttl": "24h"})]))
    assert [(p.rule, p.path) for p in request_problems(bad_ttl)] == [
        ("invalid_cache_control", "messages[0].content[0].cache_control.ttl")
    ]

    nested = [_text(f"line {i}", cache_control=_CACHED) for i in range(3)]
    request = _valid_request()
    request["messages"][2]["content"][0]["content"] = (
        nested  # 3 existing + 3 nested = 6; the 5th in walk order is nested[2]
    )
    problems = request_problems(request)
    assert [(p.rule, p.path) for p in problems] == [
        ("too_many_cache_breakpoints", "messages[2].content[0].content[2].cache_control")
    ]
    assert "breakpoint 5 of 6" in problems[0].message


def test_request_problems_reports_every_problem() -> None:
    """Several broken rules give several problems, in a stable order; the error names the count."""
    request = _req(
        _assistant([_use("toolu_1", name="")]),
        _user([_text("results:"), _result("toolu_1"), _result("toolu_9")]),
        _user("  "),
        max_tokens=True,
    )
    problems = request_problems(request)

    assert [(p.rule, p.path) for p in problems] == [
        ("invalid_max_tokens", "max_tokens"),
        ("invalid_tool_use", "messages[0].content[0].name"),
        ("blank_text", "messages[2].content"),
        ("first_message_not_user", "messages[0].role"),
        ("consecutive_same_role", "messages[2].role"),
        ("tool_result_not_first", "messages[1].content[1]"),
        ("tool_result_without_tool_use", "messages[1].content[2]"),
    ]
    assert all(isinstance(p, RequestProblem) for p in problems)
    with pytest.raises(
        InvalidRequestError, match=r"^max_tokens: .*\(and 6 more problems; see request_problems\(\)\)$"
    ):
        validate_request(request)


def test_error_is_a_session_store_error_and_a_value_error() -> None:
    """Callers can catch it as either; it carries the path and the rule."""
    with pytest.raises(SessionStoreError) as caught:
        validate_request(_req(_user("q"), _assistant("a"), _user([_result("toolu_x")])))

    error = caught.value
    assert isinstance(error, InvalidRequestError)
    assert isinstance(error, ValueError)
    assert error.path == "messages[2].content[0]"
    assert error.rule == "tool_result_without_tool_use"
    assert "messages[2].content[0]" in str(error)
    assert "'toolu_x'" in str(error)


def test_problem_is_frozen() -> None:
    """RequestProblem is an immutable value."""
    problem = request_problems(_req())[0]

    with pytest.raises(AttributeError):
        problem.rule = "other"  # type: ignore[misc]


# -- property: well-formed conversations always pass --------------------------------------

_words = st.text(st.characters(codec="utf-8"), max_size=30).map(lambda s: "w" + s)
_text_blocks = st.lists(st.builds(_text, _words), min_size=1, max_size=2)
_result_content = st.one_of(_words, st.just([_IMAGE]), _text_blocks, st.just([]))


@st.composite
def _conversations(draw: st.DrawFn) -> dict[str, Any]:
    """Alternating roles, user first; each assistant tool_use answered (in any order) next turn."""
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    next_id = 0
    for _ in range(draw(st.integers(1, 5))):
        answers = [_result(tool_id, draw(_result_content)) for tool_id in draw(st.permutations(pending))]
        as_blocks: bool = bool(answers) or draw(st.booleans())
        if as_blocks:
            add_text: bool = not answers or draw(st.booleans())
            tail: list[dict[str, Any]] = draw(_text_blocks) if add_text else []
            messages.append(_user(answers + tail))
        else:
            messages.append(_user(draw(_words)))

        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(_words), "signature": "sig"})
        blocks += draw(st.lists(st.builds(_text, _words), max_size=2))
        pending = []
        for _ in range(draw(st.integers(0 if blocks else 1, 3))):
            pending.append(f"toolu_{next_id}")
            blocks.append(_use(pending[-1], tool_input={"n": next_id}))
            next_id += 1
        messages.append(_assistant(blocks))
    # End on a user turn when tool uses wait for results; otherwise either role may end it.
    if pending:
        messages.append(_user([_result(tool_id) for tool_id in pending]))
    elif draw(st.booleans()):
        messages.append(_user(draw(_words)))
    return _req(*messages)


@given(_conversations())
def test_well_formed_conversations_always_pass(request_: dict[str, Any]) -> None:
    """Any conversation built by the projection's rules validates cleanly."""
    assert request_problems(request_) == []
    validate_request(request_)

"""The SDK's ``Runner`` on ``SessionStoreSession``: multi-turn runs with a tool call.

The model is the SDK's own ``agents.testing.ScriptedModel`` (no network): it answers from a
script and records every call's input, so the tests see exactly what the Runner read back from
the store. Each run opens the store anew, as a new process would.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SessionSettings, function_tool, set_tracing_disabled
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

import sessionstore
from sessionstore.audit import audit, verify_session
from sessionstore.bridges.openai_agents import SessionStoreSession, agents_session_id
from sessionstore.cli import main
from sessionstore.projections import Session as StoreSession

from ._openai_agents import AnyStore, Stores
from .conftest import SHARED_BACKENDS, _make_backend

# The SDK's tracing would try to export spans to OpenAI's platform after each run.
set_tracing_disabled(True)


@pytest.fixture(params=SHARED_BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _make_backend(request.param, tmp_path)


@pytest.fixture(params=["async", "sync"])
def stores(request: pytest.FixtureRequest, database: Any) -> Stores:
    return Stores(database, request.param)


@function_tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"sunny in {city}, 21 degrees"


def _role_or_type(item: dict[str, Any]) -> str:
    return str(item.get("role") or item.get("type"))


def test_a_conversation_with_a_tool_call_is_read_back_from_the_store(stores: Stores) -> None:
    """Turn two's model input is turn one's items as stored (user message, tool call, tool
    output, answer) plus the new message; the log verifies and the CLI lists its events."""
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call-1")],
            [assistant_message("It is sunny in Paris.")],
            [assistant_message("Tomorrow looks the same.")],
        ]
    )
    agent = Agent(name="weather", model=model, tools=[get_weather])

    async def turn(text: str) -> tuple[str, list[Any]]:
        store = await stores.open(migrate=False)
        try:
            session = SessionStoreSession("chat-1", store)
            result = await Runner.run(agent, text, session=session)
            return str(result.final_output), await session.get_items()
        finally:
            await stores.close(store)

    async def conversation() -> Any:
        first, after_first = await turn("Weather in Paris?")
        second, after_second = await turn("And tomorrow?")
        return first, after_first, second, after_second

    async def check(store: AnyStore) -> Any:
        session = SessionStoreSession("chat-1", store)
        sid = session.store_session_id
        if isinstance(store, sessionstore.SessionStore):
            return (
                verify_session(store, sid),
                audit(store, sid),
                [e.type for e in StoreSession(store, sid).transcript],
            )
        return await store.run_sync(
            lambda s: (
                verify_session(s, sid),
                audit(s, sid),
                [e.type for e in StoreSession(s, sid).transcript],
            )
        )

    stores.run(lambda store: asyncio.sleep(0))  # migrate
    first, after_first, second, after_second = asyncio.run(conversation())
    verified, report, types = stores.run(check)
    out = io.StringIO()
    status = main(["events", "--db", stores.backend.url, agents_session_id("chat-1")], out=out)

    assert (first, second) == ("It is sunny in Paris.", "Tomorrow looks the same.")
    assert [_role_or_type(i) for i in after_first] == [
        "user",
        "function_call",
        "function_call_output",
        "assistant",
    ]
    assert after_first[2]["output"] == "sunny in Paris, 21 degrees"
    assert model.calls[2].input == [*after_first, {"content": "And tomorrow?", "role": "user"}]
    assert after_second[: len(after_first)] == after_first
    assert len(after_second) == 6

    assert verified.ok
    assert report.entries == []  # nothing was popped or cleared
    assert set(types) == {"openai_agents_items_added"}  # the Runner's add_items calls, nothing else
    assert status == 0
    assert out.getvalue().count("openai_agents_items_added") == len(types)


# The behaviours the SDK's own suite checks of SQLiteSession through the Runner
# (openai-agents-python tests/memory/test_session.py), on this session. Runner.run_sync runs on
# an event loop of its own, so it gets the sync store (an async store belongs to its loop).
RUNS = [
    ("async", "run"),
    ("async", "run_streamed"),
    ("sync", "run"),
    ("sync", "run_sync"),
    ("sync", "run_streamed"),
]


@pytest.fixture(params=RUNS, ids=["-".join(r) for r in RUNS])
def runs(request: pytest.FixtureRequest, database: Any) -> tuple[Stores, str]:
    api, method = request.param
    return Stores(database, api), method


def _run_sync(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


async def _run(method: str, agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    if method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def test_the_second_turn_sees_the_first(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel([[assistant_message("San Francisco")], [assistant_message("California")]])
    agent = Agent(name="test", model=model)

    async def body(store: AnyStore) -> list[Any]:
        session = SessionStoreSession("golden-gate", store)
        first = await _run(method, agent, "What city is the Golden Gate Bridge in?", session=session)
        second = await _run(method, agent, "What state is it in?", session=session)
        return [first.final_output, second.final_output]

    outputs = stores.run(body)

    assert outputs == ["San Francisco", "California"]
    assert [_role_or_type(i) for i in model.calls[1].input] == ["user", "assistant", "user"]
    assert model.calls[1].input[0]["content"] == "What city is the Golden Gate Bridge in?"


def test_without_a_session_nothing_is_remembered(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel([[assistant_message("Hello")], [assistant_message("I don't remember")]])
    agent = Agent(name="test", model=model)

    async def body(store: AnyStore) -> None:
        await _run(method, agent, "Hi there")
        await _run(method, agent, "Do you remember what I said?")

    stores.run(body)

    assert len(model.calls[1].input) == 1


def test_sessions_keep_separate_histories(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel(
        [[assistant_message("cats noted")], [assistant_message("dogs noted")], [assistant_message("cats")]]
    )
    agent = Agent(name="test", model=model)

    async def body(store: AnyStore) -> None:
        cats, dogs = SessionStoreSession("session_1", store), SessionStoreSession("session_2", store)
        await _run(method, agent, "I like cats", session=cats)
        await _run(method, agent, "I like dogs", session=dogs)
        await _run(method, agent, "What did I say I like?", session=cats)

    stores.run(body)

    contents = [str(i.get("content")) for i in model.calls[2].input]
    assert "I like cats" in contents
    assert "I like dogs" not in contents


def test_a_list_input_is_appended_to_the_history(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel([[assistant_message("This should run")]])
    agent = Agent(name="test", model=model)
    history: list[Any] = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    list_input: list[Any] = [{"role": "user", "content": "Test message"}]

    async def body(store: AnyStore) -> list[Any]:
        session = SessionStoreSession("list-input", store)
        await session.add_items(history)
        await _run(method, agent, list_input, session=session)
        return await session.get_items()

    stored = stores.run(body)

    assert model.calls[-1].input == history + list_input
    assert stored[:3] == history + list_input


def test_the_session_input_callback_prepares_the_model_input(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel([[assistant_message("I'm a model")]])
    agent = Agent(name="test", model=model)
    history: list[Any] = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    new_input: list[Any] = [{"role": "user", "content": "What your name?"}]

    def only_user_messages(old: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in old if item["role"] == "user"] + new

    async def body(store: AnyStore) -> None:
        session = SessionStoreSession("callback", store)
        await session.add_items(history)
        await _run(
            method,
            agent,
            new_input,
            session=session,
            run_config=RunConfig(session_input_callback=only_user_messages),
        )

    stores.run(body)

    assert model.calls[-1].input == [history[0], new_input[0]]


def test_a_callback_repeating_history_does_not_grow_the_session(runs: tuple[Stores, str]) -> None:
    stores, method = runs
    model = ScriptedModel([[assistant_message(f"assistant {turn}")] for turn in range(3)])
    agent = Agent(name="test", model=model)

    def repeat_first(old: list[Any], new: list[Any]) -> list[Any]:
        return [*old, old[0], *new] if old else new

    async def body(store: AnyStore) -> list[Any]:
        session = SessionStoreSession("repeat", store)
        for turn in range(3):
            await _run(
                method,
                agent,
                f"user {turn}",
                session=session,
                run_config=RunConfig(session_input_callback=repeat_first),
            )
        return await session.get_items()

    stored = stores.run(body)

    assert [i.get("content") for i in stored if i.get("role") == "user"] == ["user 0", "user 1", "user 2"]
    assert len(stored) == 6


def test_the_run_config_overrides_the_session_limit(stores: Stores) -> None:
    model = ScriptedModel([[assistant_message("Got it")]])
    agent = Agent(name="test", model=model)

    async def body(store: AnyStore) -> None:
        session = SessionStoreSession("override", store, session_settings=SessionSettings(limit=100))
        await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
        await Runner.run(
            agent,
            "New question",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )

    stores.run(body)

    assert [i.get("content") for i in model.calls[-1].input] == ["Turn 8", "Turn 9", "New question"]


def test_it_is_an_sdk_session(stores: Stores) -> None:
    async def body(store: AnyStore) -> bool:
        return isinstance(SessionStoreSession("s", store), Session)

    assert stores.run(body)

"""A process killed mid-turn: the next process resumes with nothing duplicated and nothing lost."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anthropic
import pytest

import sessionstore
from sessionstore import AsyncConversation, Session
from sessionstore.agent._conversation import Conversation
from sessionstore.projections import INTERRUPTED_TOOL_RESULT

from .messages_api import text_message, tool_use_message

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import anthropic
    import sessionstore
    from sessionstore import Session
    from sessionstore.agent._conversation import Conversation

    db, url = sys.argv[1], sys.argv[2]
    store = sessionstore.open_store(db, migrate=True)
    session = Session.create(store, "crash-1", model="claude-opus-5-5")
    loop = Conversation(session, anthropic.Anthropic(api_key="k", base_url=url), model="claude-opus-5-5")
    loop.user("hello")
    loop.prepare()  # the request is recorded as served ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the call returns
    """
)


def test_resume_after_a_kill_mid_turn(messages_api: Any, tmp_path: Path) -> None:
    """The killed turn's user message is kept once; the resumed call is recorded once."""
    db = tmp_path / "crash.db"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), messages_api.url], capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()
    messages_api.queue.append(text_message("hi again", "msg_resume"))

    store = sessionstore.open_store(db)
    loop = Conversation(
        Session(store, "crash-1"),
        anthropic.Anthropic(api_key="k", base_url=messages_api.url),
        model="claude-opus-5-5",
    )
    loop.step()

    events = store.read("crash-1")
    kinds = [e.type for e in events]
    assert kinds.count("message_appended") == 2
    assert kinds.count("context_served") == 2  # the interrupted attempt stays in the audit trail
    assert len({e.event_id for e in events}) == len(events)
    assert store.verify("crash-1").ok
    assert [m["role"] for m in Session(store, "crash-1").request()["messages"]] == ["user", "assistant"]


_KILLED_IN_A_TOOL = textwrap.dedent(
    """
    import os, signal, sys
    import anthropic
    import sessionstore
    from sessionstore import Conversation, Session

    db, url = sys.argv[1], sys.argv[2]
    store = sessionstore.open_store(db, migrate=True)
    tools = [{"name": "Bash", "description": "Run.", "input_schema": {"type": "object"}}]
    session = Session.create(store, "crash-2", model="claude-opus-5-5", tools=tools)
    loop = Conversation(session, anthropic.Anthropic(api_key="k", base_url=url), model="claude-opus-5-5")
    loop.user("run the tests")

    def run_tool(use):
        os.kill(os.getpid(), signal.SIGKILL)  # the tool call was recorded; its result never is

    loop.run(run_tool)
    """
)


def _killed_mid_tool(messages_api: Any, db: Path) -> None:
    """A process that records the model's tool call and dies while running the tool."""
    messages_api.queue.append(tool_use_message("toolu_k", "Bash", {"command": "pytest"}, "msg_k"))
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_A_TOOL, str(db), messages_api.url], capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()


def _results_sent(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in request["body"]["messages"] for b in m["content"] if b.get("type") == "tool_result"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resumed_process_runs_the_tool_call_the_killed_one_left_pending(
    messages_api: Any, tmp_path: Path, mode: str
) -> None:
    """The pending call is listed, run on request, and its real result is what the model gets."""
    db = tmp_path / "crash.db"
    _killed_mid_tool(messages_api, db)
    messages_api.queue.append(text_message("2 tests fail.", "msg_after"))
    store = sessionstore.open_store(db)
    ran: list[str] = []

    def run_tool(use: dict[str, Any]) -> str:
        ran.append(use["id"])
        return "10 passed, 2 failed"

    if mode == "sync":
        loop = Conversation(
            Session(store, "crash-2"),
            anthropic.Anthropic(api_key="k", base_url=messages_api.url),
            model="claude-opus-5-5",
        )
        pending = loop.pending_tool_calls()
        loop.run_pending_tools(run_tool)
        after = loop.pending_tool_calls()
        loop.run(run_tool)
    else:
        aloop = AsyncConversation(
            Session(store, "crash-2"),
            anthropic.AsyncAnthropic(api_key="k", base_url=messages_api.url),
            model="claude-opus-5-5",
        )

        async def run_tool_async(use: dict[str, Any]) -> str:
            return run_tool(use)

        async def resume() -> list[dict[str, Any]]:
            await aloop.run_pending_tools(run_tool_async)
            remaining = aloop.pending_tool_calls()
            await aloop.run(run_tool_async)
            return remaining

        pending = aloop.pending_tool_calls()
        after = asyncio.run(resume())

    assert pending == [{"type": "tool_use", "id": "toolu_k", "name": "Bash", "input": {"command": "pytest"}}]
    assert after == []
    assert ran == ["toolu_k"]
    resumed_request = messages_api.requests[-1]
    assert _results_sent(resumed_request) == [
        {"type": "tool_result", "tool_use_id": "toolu_k", "content": "10 passed, 2 failed"}
    ]
    sessionstore.validate_request(resumed_request["body"])
    assert store.verify("crash-2").ok


def test_pending_calls_not_run_are_answered_as_interrupted(messages_api: Any, tmp_path: Path) -> None:
    """A caller who does not run them: the model is told each call was interrupted."""
    db = tmp_path / "crash.db"
    _killed_mid_tool(messages_api, db)
    messages_api.queue.append(text_message("I will not retry it.", "msg_after"))
    store = sessionstore.open_store(db)
    loop = Conversation(
        Session(store, "crash-2"),
        anthropic.Anthropic(api_key="k", base_url=messages_api.url),
        model="claude-opus-5-5",
    )

    loop.run()

    assert _results_sent(messages_api.requests[-1]) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_k",
            "content": INTERRUPTED_TOOL_RESULT,
            "is_error": True,
        }
    ]
    assert loop.pending_tool_calls() == []


def test_running_a_call_that_is_not_pending_is_refused(messages_api: Any, tmp_path: Path) -> None:
    """Only pending calls run: another id is a ValidationError and nothing is appended."""
    db = tmp_path / "crash.db"
    _killed_mid_tool(messages_api, db)
    store = sessionstore.open_store(db)
    loop = Conversation(
        Session(store, "crash-2"),
        anthropic.Anthropic(api_key="k", base_url=messages_api.url),
        model="claude-opus-5-5",
    )
    last_seq = loop.session.last_seq

    with pytest.raises(sessionstore.ValidationError, match="toolu_other"):
        loop.run_pending_tools(lambda use: "ok", ids=["toolu_other"])

    assert Session(store, "crash-2").last_seq == last_seq

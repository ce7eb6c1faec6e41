"""The agent loop on the real anthropic SDK against a local Messages API (no mock of the SDK)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anthropic
import pytest

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig, UsageRecorded
from sessionstore.agent._conversation import (
    AsyncConversation,
    Conversation,
    TokenBudget,
    budget_decision,
    spawn_subagent,
)
from sessionstore.errors import PromptTooLongError, SubagentSpawnRefusedError
from sessionstore.pipeline._collapse import CollapseConfig, stage_collapse
from sessionstore.pipeline._pipeline import ServerCompactionConfig
from sessionstore.pipeline._summarizers import OfflineSummarizer
from sessionstore.projections import WindowConfig
from sessionstore.store import AsyncSessionStore, run_in_store

from .messages_api import BASH_TOOL, READ_TOOL, prompt_too_long, text_message, tool_use_message


def _client(api: Any, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="k", base_url=api.url, max_retries=kwargs.pop("max_retries", 0), **kwargs
    )


def _script(api: Any) -> None:
    """Two tool rounds, then a final answer."""
    api.queue += [
        tool_use_message("toolu_1", "Read", {"file_path": "a.py"}, "msg_1"),
        tool_use_message("toolu_2", "Bash", {"command": "pytest"}, "msg_2"),
        text_message("All tests pass.", "msg_3"),
    ]


#: The tools _script's answers call.
_TOOLS = [READ_TOOL, BASH_TOOL]


def _costing(reply: tuple[int, dict[str, Any]], output_tokens: int) -> tuple[int, dict[str, Any]]:
    """The reply with its usage set to ``output_tokens`` output tokens."""
    status, message = reply
    return status, {**message, "usage": {"input_tokens": 10, "output_tokens": output_tokens}}


def _runner(use: dict[str, Any]) -> str:
    return f"output of {use['name']} {use['input']}"


def _kinds(session: Session) -> list[str]:
    return [e.type for e in session.transcript]


class TestSyncLoop:
    @pytest.mark.parametrize("stream", [False, True])
    def test_tool_loop_records_every_step_and_sends_valid_requests(
        self, messages_api: Any, stream: bool
    ) -> None:
        """Each response and tool result becomes events; every request the SDK sent is valid."""
        _script(messages_api)
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5", system="You are terse.", tools=_TOOLS)
        loop = Conversation(
            session, _client(messages_api), model="claude-opus-5-5", max_tokens=1000, stream=stream
        )

        loop.user("Fix the tests.")
        final = loop.run(_runner)

        assert final.content[0].text == "All tests pass."
        bodies = [r["body"] for r in messages_api.requests]
        assert len(bodies) == 3
        for body in bodies:
            sessionstore.validate_request(body)
        assert bodies[-1]["messages"][-1]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "output of Bash {'command': 'pytest'}",
        }
        assert _kinds(session).count("usage_recorded") == 3
        assert _kinds(session).count("context_served") == 3
        assert session.api_state.usage_total == 1200  # the last response: 1,000 in + 200 out

    def test_raw_sdk_users_need_only_prepare_and_record(self, messages_api: Any) -> None:
        """prepare() gives the request, record() takes the response: the caller owns the call."""
        messages_api.queue.append(text_message("hello", "msg_r"))
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        loop = Conversation(session, _client(messages_api), model="claude-opus-5-5")
        loop.user("hi")

        prepared = loop.prepare()
        response = _client(messages_api).messages.create(**loop.params(prepared))
        loop.record(response)

        assert session.request()["messages"][-1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
        }

    def test_overloaded_and_rate_limited_retries_leave_no_duplicates(self, messages_api: Any) -> None:
        """The SDK retries 529 and 429 itself; one answer is recorded once."""
        messages_api.queue += [
            (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            text_message("done", "msg_ok"),
        ]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        loop = Conversation(session, _client(messages_api, max_retries=2), model="claude-opus-5-5")
        loop.user("go")

        loop.step()

        assert _kinds(session).count("message_appended") == 2
        assert _kinds(session).count("context_served") == 1


_FIRST_HALF = """
import asyncio, sys
import anthropic
import sessionstore
from sessionstore import MessageAppended, Session
from sessionstore.agent._conversation import AsyncConversation, Conversation

db, url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
store = sessionstore.open_store(db, migrate=True)
session = Session.create(store, "s-1", model="claude-opus-5-5")

def results(response):
    uses = [b for b in response.content if b.type == "tool_use"]
    return [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in uses]

if mode == "sync":
    client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
    loop = Conversation(session, client, model="claude-opus-5-5")
    loop.user("Fix the tests.")
    for _ in range(2):
        loop.session.append([MessageAppended(role="user", content=results(loop.step()))])
else:
    async def main():
        client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
        loop = AsyncConversation(session, client, model="claude-opus-5-5")
        await loop.user("Fix the tests.")
        for _ in range(2):
            response = await loop.step()
            loop.session.append([MessageAppended(role="user", content=results(response))])
    asyncio.run(main())
"""


class TestResume:
    @pytest.mark.parametrize("mode", ["sync", "async"])
    def test_request_after_resume_in_a_new_process_equals_the_uninterrupted_one(
        self, messages_api: Any, tmp_path: Path, mode: str
    ) -> None:
        """A first process runs two steps and exits; a second resumes: its request is the same bytes."""
        import subprocess
        import sys

        _script(messages_api)
        straight = sessionstore.open_store(tmp_path / "straight.db", migrate=True)
        loop = Conversation(
            Session.create(straight, "s-1", model="claude-opus-5-5"),
            _client(messages_api),
            model="claude-opus-5-5",
        )
        loop.user("Fix the tests.")
        for _ in range(2):
            response = loop.step()
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                for b in response.content
                if b.type == "tool_use"
            ]
            loop.session.append([MessageAppended(role="user", content=results)])
        loop.step()

        _script(messages_api)
        db = tmp_path / "resumed.db"
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_HALF, str(db), messages_api.url, mode],
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()
        resumed = sessionstore.open_store(db)
        Conversation(Session(resumed, "s-1"), _client(messages_api), model="claude-opus-5-5").step()

        assert messages_api.requests[5]["body"] == messages_api.requests[2]["body"]


class TestRecovery:
    def test_prompt_too_long_is_recovered_without_the_caller_seeing_it(self, messages_api: Any) -> None:
        """A mid-session prompt-too-long triggers a reactive compaction and a retry."""
        messages_api.queue += [prompt_too_long(210_000), text_message("recovered", "msg_after")]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        for n in range(4):
            session.append(
                [
                    MessageAppended(role="user", content=f"q{n}"),
                    MessageAppended(role="assistant", content=f"a{n} " * 200),
                ]
            )
        loop = Conversation(session, _client(messages_api), model="claude-opus-5-5")
        loop.user("and now?")

        response = loop.step()

        assert response.content[0].text == "recovered"
        recovery = [e for e in session.transcript if e.type == "reactive_recovery"]
        assert [e.payload["step"] for e in recovery] == ["reactive_compact"]
        boundary = next(e for e in session.transcript if e.type == "compact_boundary")
        assert boundary.payload["trigger"] == "reactive"
        assert messages_api.requests[-1]["body"]["messages"][0]["content"][0]["text"].startswith(
            "This session continues"
        )

    def test_drain_comes_first_when_collapses_are_staged(self, messages_api: Any) -> None:
        """Staged collapses are committed (no model call) before any compaction is tried."""
        messages_api.queue += [prompt_too_long(205_000), text_message("ok", "msg_d")]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        for n in range(6):
            session.append(
                [
                    MessageAppended(role="user", content=f"q{n}"),
                    MessageAppended(role="assistant", content=f"a{n}"),
                ]
            )
        stage_collapse(session, OfflineSummarizer(), 0, 4)
        loop = Conversation(session, _client(messages_api), model="claude-opus-5-5")
        loop.user("next")

        loop.step()

        steps = [e.payload["step"] for e in session.transcript if e.type == "reactive_recovery"]
        assert steps == ["drain"]
        assert "compact_boundary" not in _kinds(session)

    def test_unrecoverable_error_is_raised_once_and_stop_hooks_do_not_run(self, messages_api: Any) -> None:
        """Too long even after compaction: one PromptTooLongError, no stop hook, the steps recorded."""
        messages_api.queue += [prompt_too_long(300_000), prompt_too_long(250_000)]
        stopped: list[str] = []
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        loop = Conversation(
            session,
            _client(messages_api),
            model="claude-opus-5-5",
            stop_hooks=[lambda s: stopped.append(s.id)],
        )
        loop.user("huge")

        with pytest.raises(PromptTooLongError) as caught:
            loop.run(_runner)

        assert caught.value.gap == 50_000
        assert stopped == []
        steps = [e.payload["step"] for e in session.transcript if e.type == "reactive_recovery"]
        assert steps == ["reactive_compact", "surfaced"]
        assert len(messages_api.requests) == 2


def test_reactive_compaction_runs_once_per_turn_not_once_per_step(messages_api: Any) -> None:
    """A second prompt-too-long later in the same turn (after a tool call) surfaces; the next
    turn may compact again."""
    messages_api.queue += [
        prompt_too_long(210_000),
        tool_use_message("toolu_1", "Read", {"file_path": "a.py"}, "msg_1"),
        prompt_too_long(205_000),
        prompt_too_long(204_000),
        text_message("fits now", "msg_2"),
    ]
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5", tools=_TOOLS)
    for n in range(4):
        session.append(
            [
                MessageAppended(role="user", content=f"q{n}"),
                MessageAppended(role="assistant", content=f"a{n} " * 200),
            ]
        )
    loop = Conversation(session, _client(messages_api), model="claude-opus-5-5")
    loop.user("read a.py")

    with pytest.raises(PromptTooLongError, match="still too long after a reactive compaction"):
        loop.run(_runner)
    loop.user("try again")
    loop.run(_runner)

    steps = [e.payload["step"] for e in session.transcript if e.type == "reactive_recovery"]
    assert steps == ["reactive_compact", "surfaced", "reactive_compact"]


class TestBudget:
    @pytest.mark.parametrize(
        ("budget", "turn", "continuations", "deltas", "subagent", "expected"),
        [
            (None, 100, 0, [100], False, ("stop", "no budget")),
            (10_000, 100, 0, [100], True, ("stop", "sub-agents do not continue")),
            (10_000, 8_999, 0, [8_999], False, ("continue", "below 90% of the budget")),
            (10_000, 9_000, 0, [9_000], False, ("stop", "budget reached")),
            (10_000, 2_000, 3, [1_000, 400, 300], False, ("stop", "diminishing returns")),
            (10_000, 2_000, 3, [1_000, 400, 600], False, ("continue", "below 90% of the budget")),
            (10_000, 2_000, 2, [1_000, 400, 300], False, ("continue", "below 90% of the budget")),
        ],
    )
    def test_decisions(
        self,
        budget: int | None,
        turn: int,
        continuations: int,
        deltas: list[int],
        subagent: bool,
        expected: Any,
    ) -> None:
        """SPEC 7's rules, one row each."""
        assert budget_decision(budget, turn, continuations, deltas, subagent=subagent) == expected

    def test_loop_nudges_until_the_budget_is_reached(self, messages_api: Any) -> None:
        """Below 90% the loop sends a nudge and continues; each decision is an event."""
        answer = text_message("part", "msg_b")[1]
        messages_api.queue += [(200, {**answer, "usage": {"input_tokens": 10, "output_tokens": 600}})] * 2
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        loop = Conversation(
            session, _client(messages_api), model="claude-opus-5-5", budget=TokenBudget(1_300)
        )
        loop.user("write a lot")

        loop.run()

        decisions = [
            (e.payload["action"], e.payload["reason"])
            for e in session.transcript
            if e.type == "budget_decision"
        ]
        assert decisions == [("continue", "below 90% of the budget"), ("stop", "budget reached")]
        assert (
            "Keep going: 600 of 1,300"
            in messages_api.requests[1]["body"]["messages"][-1]["content"][-1]["text"]
        )

    def test_tool_calling_responses_count_toward_the_turn(self, messages_api: Any) -> None:
        """4,000 + 4,000 (tool calls) + 1,500 (the answer) against 10,000: 9,500 used, no nudge."""
        messages_api.queue += [
            _costing(tool_use_message("toolu_1", "Read", {"file_path": "a.py"}, "msg_1"), 4_000),
            _costing(tool_use_message("toolu_2", "Read", {"file_path": "b.py"}, "msg_2"), 4_000),
            _costing(text_message("Done.", "msg_3"), 1_500),
        ]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5", tools=[READ_TOOL])
        loop = Conversation(
            session, _client(messages_api), model="claude-opus-5-5", budget=TokenBudget(10_000)
        )
        loop.user("read both files")

        loop.run(_runner)

        decisions = [
            (e.payload["action"], e.payload["reason"], e.payload["turn_tokens"])
            for e in session.transcript
            if e.type == "budget_decision"
        ]
        assert decisions == [("stop", "budget reached", 9_500)]
        assert len(messages_api.requests) == 3

    def test_async_loop_counts_tool_calling_responses_too(self, messages_api: Any) -> None:
        """AsyncConversation.run counts the same way: 4,000 + 4,000 + 1,500 reaches the budget."""
        messages_api.queue += [
            _costing(tool_use_message("toolu_1", "Read", {"file_path": "a.py"}, "msg_1"), 4_000),
            _costing(tool_use_message("toolu_2", "Read", {"file_path": "b.py"}, "msg_2"), 4_000),
            _costing(text_message("Done.", "msg_3"), 1_500),
        ]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5", tools=[READ_TOOL])
        client = anthropic.AsyncAnthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        loop = AsyncConversation(session, client, model="claude-opus-5-5", budget=TokenBudget(10_000))

        async def runner(use: dict[str, Any]) -> str:
            return _runner(use)

        async def main() -> None:
            await loop.user("read both files")
            await loop.run(runner)

        asyncio.run(main())

        decisions = [e.payload["turn_tokens"] for e in session.transcript if e.type == "budget_decision"]
        assert decisions == [9_500]

    def test_diminishing_returns_measures_what_each_continuation_added(self, messages_api: Any) -> None:
        """A continuation's delta is everything produced since the last decision, tool calls too."""
        messages_api.queue += [
            _costing(text_message("start", "msg_0"), 1_000),
            _costing(text_message("a bit more", "msg_1"), 100),
            _costing(text_message("a bit more", "msg_2"), 100),
            # After the third nudge, two responses: 300 + 300 = 600 new tokens, not diminishing.
            _costing(tool_use_message("toolu_9", "Read", {"file_path": "c.py"}, "msg_3"), 300),
            _costing(text_message("more", "msg_4"), 300),
            _costing(text_message("little", "msg_5"), 100),
            _costing(text_message("little", "msg_6"), 100),
        ]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5", tools=[READ_TOOL])
        loop = Conversation(
            session, _client(messages_api), model="claude-opus-5-5", budget=TokenBudget(100_000)
        )
        loop.user("write")

        loop.run(_runner)

        decisions = [
            (e.payload["action"], e.payload["reason"], e.payload["turn_tokens"])
            for e in session.transcript
            if e.type == "budget_decision"
        ]
        assert decisions == [
            ("continue", "below 90% of the budget", 1_000),
            ("continue", "below 90% of the budget", 1_100),
            ("continue", "below 90% of the budget", 1_200),
            ("continue", "below 90% of the budget", 1_800),  # +600 since the last decision
            ("continue", "below 90% of the budget", 1_900),  # +100, after +600
            ("stop", "diminishing returns", 2_000),  # +100 twice in a row
        ]
        assert len(messages_api.requests) == 7


class TestSubagents:
    def test_spawn_links_both_ways_and_is_refused_at_ninety_five_percent(self) -> None:
        """A child session carries the parent tool call; near the limit no child is spawned."""
        store = sessionstore.open_store(":memory:")
        parent = Session.create(
            store, model="claude-opus-5-5", context_window=100_000, max_output_tokens=10_000
        )

        child = spawn_subagent(parent, "toolu_task", agent_type="researcher")
        parent.append([UsageRecorded(input_tokens=86_000, output_tokens=0)])

        assert child.api_state.query_source == "subagent"
        assert store.get_session(child.id).parent_session_id == parent.id
        assert [
            e.payload.get("child_session_id") for e in parent.transcript if e.type == "subagent_started"
        ] == [child.id]
        with pytest.raises(SubagentSpawnRefusedError):
            spawn_subagent(parent, "toolu_other")

    def test_the_child_inherits_the_parents_system_prompt_and_tools(self, messages_api: Any) -> None:
        """A child that calls a tool sends valid requests: its second one defines the tools."""
        messages_api.queue += [
            tool_use_message("toolu_c1", "Read", {"file_path": "a.py"}, "msg_c1"),
            text_message("a.py is empty.", "msg_c2"),
        ]
        store = sessionstore.open_store(":memory:")
        parent = Session.create(store, model="claude-opus-5-5", system="You fix tests.", tools=[READ_TOOL])
        child = spawn_subagent(parent, "toolu_task", collapse=CollapseConfig(enabled=False))
        helper = Conversation(child, _client(messages_api), model="claude-opus-5-5")
        helper.user("Read a.py.")

        helper.run(_runner)

        for request in messages_api.requests:
            sessionstore.validate_request(request["body"])
            assert request["body"]["tools"] == [READ_TOOL]
            assert request["body"]["system"] == "You fix tests."

    def test_the_child_can_be_given_its_own_system_prompt_and_tools(self) -> None:
        """system= and tools= replace what the child would inherit; tools=() gives it none."""
        store = sessionstore.open_store(":memory:")
        parent = Session.create(store, model="claude-opus-5-5", system="You lead.", tools=[READ_TOOL])
        bash = {"name": "Bash", "description": "Run.", "input_schema": {"type": "object"}}

        researcher = spawn_subagent(parent, "toolu_1", system="You research.", tools=[bash])
        talker = spawn_subagent(parent, "toolu_2", tools=())

        assert (researcher.request()["system"], researcher.request()["tools"]) == ("You research.", [bash])
        assert talker.request()["system"] == "You lead."
        assert "tools" not in talker.request()

    def test_subagents_never_compact(self) -> None:
        """Even far above the threshold, a sub-agent's pipeline does not compact."""
        store = sessionstore.open_store(":memory:")
        parent = Session.create(store, model="claude-opus-5-5")
        child = spawn_subagent(parent, "toolu_task", collapse=CollapseConfig(enabled=False))
        child.append(
            [MessageAppended(role="user", content="x"), UsageRecorded(input_tokens=978_000, output_tokens=0)]
        )

        with pytest.raises(sessionstore.errors.BlockingLimitError):
            Pipeline(PipelineConfig()).prepare(child)
        assert "compact_boundary" not in _kinds(child)


def test_second_writer_conflicts_or_reloads(messages_api: Any) -> None:
    """Two helpers on one session: with 'raise' the stale one fails; with 'reload' it retries."""
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, "shared", model="claude-opus-5-5")
    first = Conversation(session, _client(messages_api), model="claude-opus-5-5")
    stale = Conversation(Session(store, "shared"), _client(messages_api), model="claude-opus-5-5")
    reloading = Conversation(
        Session(store, "shared"), _client(messages_api), model="claude-opus-5-5", on_conflict="reload"
    )

    first.user("from the first process")
    with pytest.raises(sessionstore.ConcurrencyError):
        stale.user("from a stale process")
    reloading.user("from a process that reloads")

    texts = [
        e.payload["content"] for e in Session(store, "shared").transcript if e.type == "message_appended"
    ]
    assert texts == ["from the first process", "from a process that reloads"]


@pytest.mark.parametrize("store_kind", ["sync store", "async store"])
def test_async_loop_matches_the_sync_one(
    messages_api: Any, store_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AsyncConversation runs the same steps over AsyncAnthropic and sends the same requests.

    On an AsyncSessionStore its database work is awaited on the loop: nothing of sessionstore's
    is handed to a worker thread.
    """
    _script(messages_api)
    in_threads: list[str] = []
    real_to_thread = asyncio.to_thread

    async def to_thread(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        in_threads.append(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}")
        return await real_to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    client = anthropic.AsyncAnthropic(api_key="k", base_url=messages_api.url, max_retries=0)

    async def runner(use: dict[str, Any]) -> str:
        return _runner(use)

    async def main() -> tuple[Any, list[str]]:
        async_store: AsyncSessionStore | None = None
        if store_kind == "async store":
            async_store = await sessionstore.open_async_store(":memory:")
            session = await Session.acreate(async_store, model="claude-opus-5-5", system="You are terse.")
        else:
            store = sessionstore.open_store(":memory:")
            session = Session.create(store, model="claude-opus-5-5", system="You are terse.")
        loop = AsyncConversation(session, client, model="claude-opus-5-5", max_tokens=1000, stream=True)
        await loop.user("Fix the tests.")
        final = await loop.run(runner)
        kinds = await run_in_store(session.store, lambda: [e.type for e in session.transcript])
        if async_store is not None:
            await async_store.close()
        return final, kinds

    final, kinds = asyncio.run(main())
    ours = [name for name in in_threads if name.startswith("sessionstore.")]

    assert final.content[0].text == "All tests pass."
    assert len(messages_api.requests) == 3
    assert kinds.count("usage_recorded") == 3
    if store_kind == "async store":
        assert ours == []
    else:
        assert "sessionstore.agent._conversation._Shared.prepare" in ours  # the old way: a thread


def _compaction_answer(content: str | None, message_id: str) -> tuple[int, dict[str, Any]]:
    status, message = text_message("continuing", message_id)
    block = {"type": "compaction", "content": content, "signature": "sig-1"}
    return status, {**message, "content": [block, *message["content"]]}


@pytest.mark.parametrize(("summary", "dropped"), [("what happened so far", True), (None, False)])
def test_server_side_compaction_block_replaces_what_it_summarizes(
    messages_api: Any, summary: str | None, dropped: bool
) -> None:
    """Opt-in: the request asks for compact_20260112; a returned block stands in for the history."""
    messages_api.queue += [_compaction_answer(summary, "msg_c"), text_message("next", "msg_n")]
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5")
    for n in range(3):
        session.append(
            [
                MessageAppended(role="user", content=f"q{n}"),
                MessageAppended(role="assistant", content=f"a{n}"),
            ]
        )
    config = PipelineConfig(server_compaction=ServerCompactionConfig(enabled=True, trigger_tokens=50_000))
    loop = Conversation(session, _client(messages_api), model="claude-opus-5-5", pipeline=Pipeline(config))
    loop.user("go on")

    loop.step()
    loop.user("and then?")
    loop.step()

    first, second = (r["body"] for r in messages_api.requests)
    assert first["context_management"]["edits"][0] == {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 50_000},
        "pause_after_compaction": False,
    }
    assert "compact-2026-01-12" in messages_api.requests[0]["headers"].get("anthropic-beta", "")
    texts = [b.get("text") for m in second["messages"] for b in m["content"]]
    assert ("q0" not in texts) is dropped
    if dropped:
        assert second["messages"][1]["content"][0] == {
            "type": "compaction",
            "content": summary,
            "signature": "sig-1",
        }
    sessionstore.validate_request(second)


def _long_child(store: sessionstore.SessionStore) -> tuple[Session, Session]:
    """A parent and a sub-agent with a few long turns of its own."""
    parent = Session.create(store, "lead", model="claude-opus-5-5")
    child = spawn_subagent(parent, "toolu_task", collapse=CollapseConfig(enabled=False))
    for n in range(4):
        child.append(
            [
                MessageAppended(role="user", content=f"q{n}"),
                MessageAppended(role="assistant", content=f"a{n} " * 200),
            ]
        )
    return parent, child


def test_a_subagent_compacts_its_own_context_to_recover(messages_api: Any) -> None:
    """A sub-agent's prompt-too-long: one reactive compaction of the child's log, then the retry;
    the parent's log and state are untouched."""
    messages_api.queue += [prompt_too_long(201_000), text_message("found it", "msg_child")]
    store = sessionstore.open_store(":memory:")
    parent, child = _long_child(store)
    parent_events = [e.event_id for e in store.read("lead")]
    parent_request = parent.request_bytes()
    loop = Conversation(child, _client(messages_api), model="claude-opus-5-5")
    loop.user("long research")

    assert loop.step().content[0].text == "found it"

    assert [e.payload["step"] for e in child.transcript if e.type == "reactive_recovery"] == [
        "reactive_compact"
    ]
    boundary = next(e for e in child.transcript if e.type == "compact_boundary")
    assert boundary.payload["trigger"] == "reactive"
    assert [e.event_id for e in store.read("lead")] == parent_events
    assert Session(store, "lead").request_bytes() == parent_request
    retried = messages_api.requests[-1]["body"]["messages"][0]["content"][0]["text"]
    assert retried.startswith("This session continues")


def test_a_subagent_still_too_long_after_its_compaction_says_so(messages_api: Any) -> None:
    """Too long again after the child's compaction: surfaced once, the message says what was tried."""
    messages_api.queue += [prompt_too_long(260_000), prompt_too_long(250_000)]
    store = sessionstore.open_store(":memory:")
    _, child = _long_child(store)
    loop = Conversation(child, _client(messages_api), model="claude-opus-5-5")
    loop.user("long research")

    with pytest.raises(PromptTooLongError, match="still too long after a reactive compaction") as caught:
        loop.step()

    assert caught.value.gap == 50_000
    steps = [e.payload["step"] for e in child.transcript if e.type == "reactive_recovery"]
    assert steps == ["reactive_compact", "surfaced"]


def test_with_compaction_disabled_the_error_does_not_claim_a_recovery(messages_api: Any) -> None:
    """Nothing was tried: the message says compaction is disabled, not "after recovery"."""
    messages_api.queue.append(prompt_too_long(210_000))
    store = sessionstore.open_store(":memory:")
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(window=WindowConfig(disable_compaction=True))
    )
    loop = Conversation(session, _client(messages_api), model="claude-opus-5-5")
    loop.user("huge")

    with pytest.raises(PromptTooLongError) as caught:
        loop.step()

    assert "compaction is disabled" in str(caught.value)
    assert "after" not in str(caught.value)
    assert "210000 tokens > 200000 maximum" in str(caught.value)


def test_prepare_reloads_after_another_writer_when_configured(messages_api: Any) -> None:
    """A stale helper configured to reload picks up the other writer's events and prepares."""
    store = sessionstore.open_store(":memory:")
    Session.create(store, "two", model="claude-opus-5-5")
    stale = Conversation(
        Session(store, "two"), _client(messages_api), model="claude-opus-5-5", on_conflict="reload"
    )
    Session(store, "two").append([MessageAppended(role="user", content="written elsewhere")])

    prepared = stale.prepare()

    assert prepared.request["messages"][0]["content"][0]["text"] == "written elsewhere"


_OPTIONS: dict[str, Any] = {
    "thinking": {"type": "enabled", "budget_tokens": 2_048},
    "temperature": 0.25,
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "metadata": {"user_id": "user-7"},
    "stop_sequences": ["\nEND"],
    "service_tier": "standard_only",
}


class TestRequestParameters:
    @pytest.mark.parametrize("mode", ["sync", "sync-stream", "async", "async-stream"])
    def test_every_call_carries_the_callers_parameters_and_headers(
        self, messages_api: Any, mode: str
    ) -> None:
        """thinking, temperature, tool_choice, metadata, stop_sequences, service_tier and headers
        reach the API on each call of run(), through the real SDK, sync or async, streaming or not."""
        _script(messages_api)
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5", tools=[READ_TOOL])
        settings: dict[str, Any] = {
            "model": "claude-opus-5-5",
            "max_tokens": 8_192,
            "stream": mode.endswith("stream"),
            "extra_headers": {"x-tenant": "acme"},
            **_OPTIONS,
        }
        if mode.startswith("sync"):
            sync_loop = Conversation(session, _client(messages_api), **settings)
            sync_loop.user("Fix the tests.")
            sync_loop.run(_runner)
        else:
            client = anthropic.AsyncAnthropic(api_key="k", base_url=messages_api.url, max_retries=0)
            loop = AsyncConversation(session, client, **settings)

            async def runner(use: dict[str, Any]) -> str:
                return _runner(use)

            async def main() -> None:
                await loop.user("Fix the tests.")
                await loop.run(runner)

            asyncio.run(main())

        assert len(messages_api.requests) == 3
        for request in messages_api.requests:
            body = request["body"]
            assert {key: body.get(key) for key in _OPTIONS} == _OPTIONS
            assert body["max_tokens"] == 8_192
            assert {k.lower(): v for k, v in request["headers"].items()}["x-tenant"] == "acme"

    def test_parameters_survive_reactive_recovery(self, messages_api: Any) -> None:
        """The retry after a prompt-too-long carries the same parameters as the refused call."""
        messages_api.queue += [prompt_too_long(210_000), text_message("recovered", "msg_after")]
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        for n in range(4):
            session.append(
                [
                    MessageAppended(role="user", content=f"q{n}"),
                    MessageAppended(role="assistant", content=f"a{n} " * 200),
                ]
            )
        loop = Conversation(
            session, _client(messages_api), model="claude-opus-5-5", max_tokens=8_192, **_OPTIONS
        )
        loop.user("and now?")

        loop.step()

        refused, retried = (r["body"] for r in messages_api.requests)
        for body in (refused, retried):
            assert {key: body.get(key) for key in _OPTIONS} == _OPTIONS

    def test_beta_requests_keep_the_pipelines_beta_and_the_callers(self, messages_api: Any) -> None:
        """With server-side compaction on, the call goes to the beta endpoint with both betas."""
        messages_api.queue.append(text_message("ok", "msg_b"))
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")
        config = PipelineConfig(server_compaction=ServerCompactionConfig(enabled=True, trigger_tokens=50_000))
        loop = Conversation(
            session,
            _client(messages_api),
            model="claude-opus-5-5",
            pipeline=Pipeline(config),
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
            **_OPTIONS,
        )
        loop.user("go")

        loop.step()

        (request,) = messages_api.requests
        betas = {k.lower(): v for k, v in request["headers"].items()}["anthropic-beta"].split(",")
        assert {"compact-2026-01-12", "interleaved-thinking-2025-05-14"} <= set(betas)
        assert "context_management" in request["body"]
        assert request["body"]["thinking"] == _OPTIONS["thinking"]

    def test_params_for_your_own_call_include_them(self, messages_api: Any) -> None:
        """params(prepared) hands a raw SDK caller the same parameters step() sends."""
        messages_api.queue.append(text_message("hello", "msg_r"))
        store = sessionstore.open_store(":memory:")
        loop = Conversation(
            Session.create(store, model="claude-opus-5-5"),
            _client(messages_api),
            model="claude-opus-5-5",
            **_OPTIONS,
        )
        loop.user("hi")

        loop.record(_client(messages_api).messages.create(**loop.params(loop.prepare())))

        assert {key: messages_api.requests[0]["body"].get(key) for key in _OPTIONS} == _OPTIONS

    @pytest.mark.parametrize(
        ("settings", "field"),
        [
            ({"max_tokens": 2_048, "thinking": {"type": "enabled", "budget_tokens": 2_048}}, "thinking"),
            ({"temperature": 1.5}, "temperature"),
            ({"extra_body": {"messages": []}}, "extra_body"),
            ({"extra_body": {"temperature": 0.5}, "temperature": 0.5}, "extra_body"),
        ],
    )
    def test_settings_the_api_would_refuse_are_refused_up_front(
        self, messages_api: Any, settings: dict[str, Any], field: str
    ) -> None:
        """A thinking budget not below max_tokens, a temperature outside 0..1, or an extra body
        key the pipeline or a named parameter owns: a ValidationError naming it, no call made."""
        store = sessionstore.open_store(":memory:")
        session = Session.create(store, model="claude-opus-5-5")

        with pytest.raises(sessionstore.ValidationError) as caught:
            Conversation(session, _client(messages_api), model="claude-opus-5-5", **settings)

        assert caught.value.field == field
        assert messages_api.requests == []

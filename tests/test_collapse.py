"""Context collapse: staged ahead, committed under pressure, drained without a model call, reverted."""

from __future__ import annotations

import io
import json
from typing import Any

import anthropic
import pytest

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig, UsageRecorded
from sessionstore.cli import main
from sessionstore.errors import SubagentSpawnRefusedError, SummaryFailedError
from sessionstore.pipeline import snip
from sessionstore.pipeline._collapse import (
    CollapseConfig,
    check_spawn,
    collapse,
    commit_collapse,
    drain_collapses,
    stage_collapse,
)
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import AnthropicSummarizer, OfflineSummarizer
from sessionstore.projections._api_context import COLLAPSE_PREFIX

from ._claude_code_corpus import corpus_file
from .messages_api import READ_TOOL, text_message, with_tool_definitions
from .strategies import turns


def _session(
    turns: int = 6, store: sessionstore.SessionStore | None = None, **started: Any
) -> tuple[Session, list[str]]:
    """Turns of prompt -> tool call -> result -> answer; returns the prompts' message uuids."""
    store = store or sessionstore.open_store(":memory:")
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0), tools=[READ_TOOL], **started
    )
    prompts = []
    for n in range(turns):
        prompt = MessageAppended(role="user", content=f"task {n}: look at file_{n}.py")
        prompts.append(prompt.message_uuid)
        call = {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"file_path": f"file_{n}.py"}}
        session.append(
            [
                prompt,
                MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}a"),
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x\n" * 400}],
                ),
                MessageAppended(role="assistant", content=f"done with {n}", api_message_id=f"m{n}b"),
            ]
        )
    return session, prompts


def _last_uuid_before(session: Session, prompt_uuid: str) -> str:
    """The uuid of the message just before a prompt (the end of the previous turn)."""
    entries = [e for e in session.transcript if e.type == "message_appended"]
    index = next(i for i, e in enumerate(entries) if e.payload["message_uuid"] == prompt_uuid)
    return str(entries[index - 1].payload["message_uuid"])


class TestManualCollapse:
    def test_collapse_replaces_the_span_and_revert_restores_the_bytes(self) -> None:
        """Turns 1-2 become one summary message; the request stays valid; revert gives it back."""
        session, prompts = _session()
        before = session.request_bytes()
        used_before = session.used_tokens()

        report = collapse(session, OfflineSummarizer(), prompts[1], _last_uuid_before(session, prompts[3]))
        request = session.request()

        summaries = [
            m
            for m in request["messages"]
            if any(b.get("text", "").startswith(COLLAPSE_PREFIX) for b in m["content"])
        ]
        assert len(summaries) == 1
        assert "task 1: look at file_1.py" in summaries[0]["content"][0]["text"]
        assert (
            len(request["messages"]) == 24 - 8 + 1 - 1
        )  # 8 messages out, summary merged into the next prompt
        sessionstore.validate_request(request)
        assert report.tokens_after < report.tokens_before == used_before
        sessionstore.revert(session, report.event_ids[1])
        assert session.request_bytes() == before
        assert session.used_tokens() == used_before

    @pytest.mark.parametrize(
        ("bad", "reason"),
        [
            ("split", "a tool call and its result are never split"),
            ("tail", "must end before the last message"),
            ("overlap", "overlaps a staged or committed collapse"),
            ("empty", "the span is empty"),
        ],
    )
    def test_bad_spans_are_refused_and_write_nothing(self, bad: str, reason: str) -> None:
        """A span that splits a tool pair, reaches the tail, overlaps another or is empty is refused."""
        session, prompts = _session()
        if bad == "overlap":
            collapse(session, OfflineSummarizer(), prompts[1], _last_uuid_before(session, prompts[3]))
        last = session.last_seq
        entries = [e for e in session.transcript if e.type == "message_appended"]
        tool_call = next(e for e in entries if e.payload["role"] == "assistant")
        spans = {
            "split": (prompts[0], str(tool_call.payload["message_uuid"])),
            "tail": (prompts[0], str(entries[-1].payload["message_uuid"])),
            # Turns 2-3: a well-formed span whose first turn is inside the committed one (turns 1-2).
            "overlap": (prompts[2], _last_uuid_before(session, prompts[4])),
            "empty": (prompts[2], _last_uuid_before(session, prompts[2])),
        }

        with pytest.raises(sessionstore.ValidationError, match=reason):
            collapse(session, OfflineSummarizer(), *spans[bad])
        assert session.last_seq == last

    def test_failed_summary_records_nothing(self) -> None:
        """A summarizer failure leaves the log and the request as they were."""

        class Broken:
            name = "broken"

            def summarize(self, request: Any) -> Any:
                raise SummaryFailedError("model unavailable")

        session, prompts = _session()
        before = (session.last_seq, session.request_bytes())

        with pytest.raises(SummaryFailedError):
            collapse(session, Broken(), prompts[1], _last_uuid_before(session, prompts[2]))
        assert (session.last_seq, session.request_bytes()) == before


class TestDrainAndPipeline:
    def test_drain_commits_everything_staged_without_a_request(self, messages_api: Any) -> None:
        """Staging calls the model once per span; draining calls it zero times."""
        session, prompts = _session()
        summarizer = AnthropicSummarizer(
            anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0), "claude-opus-5-5"
        )
        messages_api.queue += [
            text_message("<summary>first two turns</summary>"),
            text_message("<summary>next</summary>"),
        ]
        state = session.api_state
        starts = [
            state.messages.index(m)
            for m in state.messages
            if m["content"][0].get("text", "").startswith("task")
        ]
        stage_collapse(session, summarizer, starts[0], starts[2])
        stage_collapse(session, summarizer, starts[2], starts[4])
        requests_before = len(messages_api.requests)

        report = drain_collapses(session)

        assert len(messages_api.requests) == requests_before == 2
        assert len(report.event_ids) == 2
        assert report.tokens_after < report.tokens_before
        assert session.api_state.staged == {}
        sessionstore.validate_request(session.request())
        staged = [e for e in session.transcript if e.type == "collapse_staged"]
        assert staged[0].payload["first_message_uuid"] == prompts[0]

    def test_pipeline_stages_ahead_and_commits_at_ninety_percent(self) -> None:
        """Above the stage mark a span is staged; above the commit mark it is committed."""
        session, _ = _session(turns=12, context_window=100_000, max_output_tokens=10_000)
        session.append([UsageRecorded(input_tokens=82_000, output_tokens=10)])  # 91% of 90,000
        config = PipelineConfig(collapse=CollapseConfig(enabled=True, span_rounds=4, keep_recent_rounds=4))

        prepared = Pipeline(config).prepare(session)

        kinds = [e.type for e in session.transcript]
        assert "collapse_staged" in kinds
        assert "collapse_committed" in kinds
        assert any(r.stage == "collapse" and r.tokens_freed > 0 for r in prepared.reports)
        sessionstore.validate_request(prepared.request)


def test_spawn_refused_at_ninety_five_percent() -> None:
    """Sub-agents are refused from 95% of the effective window."""
    session, _ = _session(turns=1, context_window=100_000, max_output_tokens=10_000)
    check_spawn(session)
    session.append([UsageRecorded(input_tokens=85_600, output_tokens=0)])  # 95.1% of 90,000

    with pytest.raises(SubagentSpawnRefusedError):
        check_spawn(session)
    check_spawn(session, CollapseConfig(enabled=False))


def test_adjacent_collapses_both_apply() -> None:
    """A span starting where the previous one ended is applied too (both summaries are sent)."""
    session, prompts = _session(turns=6)

    first = collapse(session, OfflineSummarizer(), prompts[0], _last_uuid_before(session, prompts[2]))
    second = collapse(session, OfflineSummarizer(), prompts[2], _last_uuid_before(session, prompts[4]))
    request = session.request()

    texts = [b.get("text", "") for b in request["messages"][0]["content"]]
    assert sum(t.startswith(COLLAPSE_PREFIX) for t in texts) == 2
    assert texts[-1] == "task 4: look at file_4.py"
    assert len(request["messages"]) == 1 + 7  # both summaries and prompt 4 merged, then turns 4-5
    assert second.tokens_after < first.tokens_after
    sessionstore.validate_request(request)


class TestSnipAfterCollapse:
    def test_a_snip_reaching_into_a_collapse_removes_the_whole_span(self, store: Any) -> None:
        """A snip never cuts inside a committed collapse; the context it leaves is the one a snip
        alone leaves, counted the same, and reverting the snip brings the summary back."""
        session, prompts = _session(store=store)
        twin, _ = _session(store=store)
        collapse(session, OfflineSummarizer(), prompts[1], _last_uuid_before(session, prompts[3]))
        collapsed = session.request_bytes()

        report = snip(session, rounds=3)  # turns 0-1 hold 4 rounds: the cut after turn 1 is inside the span
        snip(twin, rounds=5)  # turns 0-2 without a collapse

        request = session.request()
        assert request["messages"][0]["content"][0]["text"] == "task 3: look at file_3.py"
        sessionstore.validate_request(request)
        assert session.request_bytes() == twin.request_bytes()
        assert session.used_tokens() == twin.used_tokens()
        sessionstore.revert(session, report.event_ids[0])
        assert session.request_bytes() == collapsed

    def test_a_snip_before_a_collapse_keeps_its_summary(self, store: Any) -> None:
        """Snipping the turn before a committed collapse leaves the summary opening the request."""
        session, prompts = _session(store=store)
        collapse(session, OfflineSummarizer(), prompts[1], _last_uuid_before(session, prompts[3]))
        used = session.used_tokens()

        report = snip(session, rounds=1)

        request = session.request()
        assert request["messages"][0]["content"][0]["text"].startswith(COLLAPSE_PREFIX)
        sessionstore.validate_request(request)
        assert report.tokens_freed > 0 and session.used_tokens() < used
        rebuilt = Session(store, session.id, SessionConfig(snapshot_every=0), use_snapshots=False)
        assert rebuilt.used_tokens() == session.used_tokens()

    def test_collapse_then_snip_from_the_cli(self, tmp_path: Any) -> None:
        """`collapse` then `snip` on the command line: both succeed and the request stays valid."""
        db = str(tmp_path / "cs.db")
        out = io.StringIO()
        main(["db", "upgrade", "--db", db], out=out)
        session, prompts = _session(store=sessionstore.open_store(f"sqlite:///{db}"))
        args = ["--db", db, session.id]

        collapsed = main(
            ["collapse", *args, "--from", prompts[1], "--to", _last_uuid_before(session, prompts[3])], out=out
        )
        snipped = main(["snip", *args, "--rounds", "3", "--json"], out=out)
        main(["context", *args, "--json"], out=(context := io.StringIO()))

        assert (collapsed, snipped) == (0, 0)
        request = json.loads(context.getvalue())["request"]
        assert request["messages"][0]["content"][0]["text"] == "task 3: look at file_3.py"
        sessionstore.validate_request(request)


def _prompts_after_results(store: sessionstore.SessionStore) -> tuple[Session, dict[str, str]]:
    """Turns where the next prompt was typed right after a tool result (no answer in between), so
    the two share one API message: [tool_result, prompt]. Returns the uuids by name."""
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0), tools=[READ_TOOL]
    )
    uuids: dict[str, str] = {}
    for n in range(5):
        prompt = MessageAppended(role="user", content=f"task {n}")
        call = {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"file_path": f"file_{n}.py"}}
        result = MessageAppended(
            role="user", content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x\n" * 300}]
        )
        uuids |= {f"prompt {n}": prompt.message_uuid, f"result {n}": result.message_uuid}
        events = [prompt, MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}"), result]
        if n in (2, 4):  # turns 2 and 4 end with an answer: prompts 3 and 5 stand alone
            events.append(MessageAppended(role="assistant", content=f"done {n}", api_message_id=f"m{n}b"))
        session.append(events)
    session.append([MessageAppended(role="user", content="task 5")])
    return session, uuids


def _tool_ids(request: dict[str, Any], kind: str) -> list[str]:
    key = "id" if kind == "tool_use" else "tool_use_id"
    return [b[key] for m in request["messages"] for b in m["content"] if b.get("type") == kind]


class TestSpanStartingAfterToolResults:
    def test_collapse_from_a_prompt_that_shares_a_message_with_results(self, store: Any) -> None:
        """From prompt 1 (sharing a message with result 0) to result 1 (sharing one with prompt 2):
        result 0 stays after its call, result 1 goes with its call, prompt 2 stays; revert restores."""
        session, uuids = _prompts_after_results(store)
        before, used = session.request_bytes(), session.used_tokens()
        assert session.request()["messages"][2]["content"][1] == {"type": "text", "text": "task 1"}

        report = collapse(session, OfflineSummarizer(), uuids["prompt 1"], uuids["result 1"])

        staged = next(e.payload for e in session.transcript if e.type == "collapse_staged")
        assert (staged["first_message_uuid"], staged["last_message_uuid"]) == (
            uuids["prompt 1"],
            uuids["result 1"],
        )
        request = session.request()
        sessionstore.validate_request(request)
        summary = request["messages"][2]["content"]
        assert [b["type"] for b in summary] == ["tool_result", "text", "text"]
        assert summary[0]["tool_use_id"] == "t0"
        assert summary[1]["text"].startswith(COLLAPSE_PREFIX) and "task 1" in summary[1]["text"]
        assert summary[2]["text"] == "task 2"
        assert _tool_ids(request, "tool_use") == _tool_ids(request, "tool_result") == ["t0", "t2", "t3", "t4"]
        assert report.tokens_after < report.tokens_before == used
        sessionstore.revert(session, report.event_ids[1])
        assert session.request_bytes() == before
        assert session.used_tokens() == used

    def test_the_summarizer_gets_the_span_as_a_valid_request(self, store: Any, messages_api: Any) -> None:
        """The span sent to the model holds every call's result and no result of a call outside it."""
        session, uuids = _prompts_after_results(store)
        summarizer = AnthropicSummarizer(
            anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0), "claude-opus-5-5"
        )
        messages_api.queue.append(text_message("<summary>turn 1 read file_1.py</summary>"))

        collapse(session, summarizer, uuids["prompt 1"], uuids["result 1"])

        sent = messages_api.requests[-1]["body"]
        sessionstore.validate_request(sent)
        assert _tool_ids(sent, "tool_use") == _tool_ids(sent, "tool_result") == ["t1"]
        assert sent["messages"][0]["content"][0] == {"type": "text", "text": "task 1"}

    def test_collapse_and_revert_from_the_cli(self, tmp_path: Any) -> None:
        """`collapse --from <prompt> --to <the message before the next prompt>`, then `revert`."""
        db = str(tmp_path / "merged.db")
        main(["db", "upgrade", "--db", db], out=io.StringIO())
        session, uuids = _prompts_after_results(sessionstore.open_store(f"sqlite:///{db}"))
        args = ["--db", db, session.id]

        def context() -> dict[str, Any]:
            main(["context", *args, "--json"], out=(out := io.StringIO()))
            return dict(json.loads(out.getvalue())["request"])

        before = context()
        main(
            ["collapse", *args, "--from", uuids["prompt 3"], "--to", uuids["result 3"], "--json"],
            out=(out := io.StringIO()),
        )
        outcome = json.loads(out.getvalue())
        collapsed = context()
        main(["revert", *args, outcome["event_id"]], out=io.StringIO())

        sessionstore.validate_request(collapsed)
        assert "t3" not in _tool_ids(collapsed, "tool_use") + _tool_ids(collapsed, "tool_result")
        assert context() == before

    def test_the_pipeline_collapses_turns_whose_prompts_follow_results(self) -> None:
        """Auto-collapse finds spans when every prompt shares a message with the results before it."""
        store = sessionstore.open_store(":memory:")
        events = turns([f"task {n}" for n in range(12)], [1] * 12, [False] * 12)
        session = Session(store, store.create_session(events=events).id, SessionConfig(snapshot_every=0))
        state = session.api_state
        prompts = [m for m in state.messages if m["role"] == "user" and m["content"][-1]["type"] == "text"]
        assert len(prompts) == 12 and sum(m["content"][0]["type"] == "tool_result" for m in prompts) == 11
        session.append([UsageRecorded(input_tokens=175_000, output_tokens=10)])  # over 90% of the window
        config = PipelineConfig(collapse=CollapseConfig(enabled=True, span_rounds=2, keep_recent_rounds=2))

        prepared = Pipeline(config).prepare(session)

        assert any(r.stage == "collapse" and r.tokens_freed > 0 for r in prepared.reports)
        sessionstore.validate_request(with_tool_definitions(prepared.request))
        summaries = [
            b
            for m in prepared.request["messages"]
            for b in m["content"]
            if b.get("text", "").startswith(COLLAPSE_PREFIX)
        ]
        assert summaries


#: Real prompts typed right after a tool result: (file, the prompt, the next prompt).
_CORPUS_SPANS = [
    # The next prompt also follows a tool result: the span ends inside its API message.
    (
        "entireio__cli__c7-f7b48fb868-0-full.jsonl",
        "and check that the back half",
        "what was wrong with initGitRepo",
    ),
    # A slash command run right after a tool call; the next prompt follows an answer.
    (
        "rcgray__claude-code-bug-phantom-reads-17407__b6240830-5041-465e-aad0-910c13cd9b6c.jsonl",
        "<command-message>wsd:onboard",
        "<command-message>refine-plan",
    ),
]


@pytest.mark.parametrize(("name", "first", "following"), _CORPUS_SPANS)
def test_collapse_real_prompts_typed_after_tool_results(name: str, first: str, following: str) -> None:
    """In real Claude Code transcripts: collapse a turn whose prompt shares a message with tool results."""
    store = sessionstore.open_store(":memory:")
    imported = sessionstore.import_claude_code(store, [corpus_file(name)])
    session = Session(store, imported.sessions[0].session_id, SessionConfig(snapshot_every=0))
    lines = [e for e in session.transcript if e.type == "message_appended" and not e.payload["is_sidechain"]]
    start = next(i for i, e in enumerate(lines) if _user_text(e.payload).startswith(first))
    stop = next(i for i, e in enumerate(lines) if _user_text(e.payload).startswith(following))
    head = session.api_state.messages[session.message_index(lines[start].payload["message_uuid"])]
    assert head["content"][0]["type"] == "tool_result"  # the prompt shares its API message with results
    before = session.request_bytes()

    report = collapse(
        session,
        OfflineSummarizer(),
        lines[start].payload["message_uuid"],
        lines[stop - 1].payload["message_uuid"],
    )

    request = session.request()
    sessionstore.validate_request(with_tool_definitions(request))
    texts = [b.get("text", "") for m in request["messages"] for b in m["content"]]
    assert not any(t.startswith(first) for t in texts)
    assert any(t.startswith(following) for t in texts)
    assert report.tokens_after < report.tokens_before
    sessionstore.revert(session, report.event_ids[1])
    assert session.request_bytes() == before


def _user_text(payload: dict[str, Any]) -> str:
    content = payload["content"]
    if payload["role"] != "user":
        return ""
    return (
        content
        if isinstance(content, str)
        else "".join(b.get("text", "") for b in content if b["type"] == "text")
    )


@pytest.mark.parametrize("taken_by", ["snip", "compaction", "partial compaction"])
def test_a_staged_span_taken_out_of_the_request_is_never_committed(store: Any, taken_by: str) -> None:
    """A staged span that a snip or a compaction took out of the request summarizes messages the
    model no longer sees: draining skips it, committing it is refused, the token count stays true."""
    session, prompts = _session(store=store)
    staged = stage_collapse(
        session, OfflineSummarizer(), session.message_index(prompts[1]), session.message_index(prompts[3])
    )
    if taken_by == "snip":
        snip(session, rounds=5)  # up to turn 3: the cut lands inside the staged span
    elif taken_by == "compaction":
        compact(session, OfflineSummarizer())
    else:
        compact(session, OfflineSummarizer(), from_uuid=prompts[2])
    used, sent = session.used_tokens(), session.request_bytes()

    report = drain_collapses(session)

    assert report.event_ids == ()
    with pytest.raises(sessionstore.ValidationError, match="nothing left to collapse"):
        commit_collapse(session, str(staged.event_id))
    assert (session.used_tokens(), session.request_bytes()) == (used, sent)

"""Compaction: summaries, prompt-too-long retries, the breaker, session memory — real SDK, local API."""

from __future__ import annotations

import contextlib
from typing import Any

import anthropic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import MessageAppended, Pipeline, PipelineConfig, Session, SessionConfig, UsageRecorded
from sessionstore._api_context import COMPACT_SUMMARY_PREFIX
from sessionstore._collapse import CollapseConfig
from sessionstore._compaction import (
    PTL_RETRY_MARKER,
    CompactConfig,
    CompactHooks,
    breaker_open,
    compact,
    drop_for_retry,
    memory_keep_index,
)
from sessionstore._context_events import SessionMemoryUpdated
from sessionstore._summarizers import AnthropicSummarizer, OfflineSummarizer, SummaryFailed

from .messages_api import prompt_too_long, text_message
from .strategies import examples


def _session(turns: int = 6, **started: Any) -> Session:
    store = sessionstore.open_store(":memory:")
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0), **started
    )
    for n in range(turns):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"make step{n}"}}
        session.append(
            [
                MessageAppended(role="user", content=f"step {n} please", message_uuid=f"p{n}"),
                MessageAppended(
                    role="assistant", content=[call], api_message_id=f"m{n}a", message_uuid=f"c{n}"
                ),
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok\n" * 300}],
                    message_uuid=f"r{n}",
                ),
                MessageAppended(
                    role="assistant", content=f"step {n} done", api_message_id=f"m{n}b", message_uuid=f"a{n}"
                ),
            ]
        )
    return session


def _anthropic(messages_api: Any) -> AnthropicSummarizer:
    client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
    return AnthropicSummarizer(client, "claude-opus-5-5")


def _markers(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] for b in m["content"] if b.get("text") == PTL_RETRY_MARKER)


class TestManualCompact:
    def test_summary_opens_the_request_and_tokens_drop(self) -> None:
        """After a base compaction the request is the summary plus what comes next; it is valid."""
        session = _session()

        report = compact(session, OfflineSummarizer(), custom_instructions="keep build commands")
        request = session.request()

        assert report.ok
        assert report.tokens_after < report.tokens_before
        assert request["messages"][0]["content"][0]["text"].startswith(COMPACT_SUMMARY_PREFIX)
        assert len(request["messages"]) == 1
        boundary = next(e for e in session.transcript if e.type == "compact_boundary").payload
        assert boundary["trigger"] == "manual"
        assert boundary["last_pre_compact_uuid"] == "a5"
        assert boundary["pre_compact_tokens"] == report.tokens_before
        session.append([MessageAppended(role="user", content="next task")])
        sessionstore.validate_request(session.request())
        assert (
            Session(session.store, session.id, use_snapshots=False).request_bytes() == session.request_bytes()
        )

    def test_partial_up_to_keeps_the_tail_verbatim(self) -> None:
        """Summarize up to a round's end: the later turns stay word for word after the summary."""
        session = _session()
        before = session.request()["messages"]

        compact(session, OfflineSummarizer(), up_to_uuid="a3")
        after = session.request()["messages"]

        assert after[0]["content"][0]["text"].startswith(COMPACT_SUMMARY_PREFIX)
        assert after[0]["content"][1:] == before[16]["content"]  # the kept prompt merges after the summary
        assert after[1:] == before[17:]
        sessionstore.validate_request(session.request())

    def test_pivot_that_splits_a_tool_pair_is_refused(self) -> None:
        """Keeping from a tool result would orphan it: refused, nothing written."""
        session = _session()
        last = session.last_seq

        with pytest.raises(sessionstore.ValidationError, match="split a tool call"):
            compact(session, OfflineSummarizer(), up_to_uuid="c2")
        assert session.last_seq == last

    def test_hooks_add_instructions_and_results_in_order(self) -> None:
        """Pre-compact hooks add instructions; session-start and post-compact results follow the summary."""
        seen: list[str] = []

        class Recording(OfflineSummarizer):
            def summarize(self, request: Any) -> Any:
                seen.append(request.custom_instructions or "")
                return super().summarize(request)

        hooks = CompactHooks(
            pre_compact=[lambda trigger: (f"hook saw {trigger}", "Compacting the conversation…")],
            session_start=[lambda source: f"session start ({source})"],
            post_compact=[lambda summary: "post hook ran"],
        )
        session = _session(turns=2)

        compact(session, Recording(), config=CompactConfig(hooks=hooks))
        texts = [b["text"] for b in session.request()["messages"][0]["content"]]

        assert seen == ["hook saw manual"]
        assert texts[1:] == ["Compacting the conversation…", "session start (compact)", "post hook ran"]


class TestPromptTooLongRetry:
    def test_gap_parsed_and_oldest_rounds_dropped(self, messages_api: Any) -> None:
        """The gap from the error text decides how many rounds go; the retry succeeds."""
        session = _session()
        messages_api.queue += [prompt_too_long(201_500), text_message("<summary>retried</summary>")]

        report = compact(session, _anthropic(messages_api))

        first, second = (r["body"] for r in messages_api.requests[-2:])
        assert report.ok
        assert len(second["messages"]) < len(first["messages"])
        assert next(e for e in session.transcript if e.type == "compact_boundary").payload["ptl_retries"] == 1

    def test_unparsed_error_drops_twenty_percent_and_markers_never_pile_up(self, messages_api: Any) -> None:
        """Without numbers 20% of the groups go; each retry strips the previous marker first."""
        session = _session(turns=10)
        error = (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}},
        )
        messages_api.queue += [error, error, error, text_message("<summary>fits now</summary>")]

        report = compact(session, _anthropic(messages_api))

        bodies = [r["body"] for r in messages_api.requests[-4:]]
        sizes = [len(b["messages"]) for b in bodies]
        assert report.ok
        assert sizes == sorted(sizes, reverse=True)
        assert all(_markers(b) <= 1 for b in bodies)

    def test_gives_up_after_three_retries_and_leaves_the_context(self, messages_api: Any) -> None:
        """Four prompt-too-long answers: CompactFailed, the request unchanged, no summary text used."""
        session = _session()
        before = session.request_bytes()
        messages_api.queue += [prompt_too_long(200_100)] * 4  # a small gap: one round per retry

        report = compact(session, _anthropic(messages_api))

        assert not report.ok
        assert "after 3 retries" in (report.reason or "")
        assert session.request_bytes() == before
        assert [e.type for e in session.transcript][-1] == "compact_failed"


def test_drop_for_retry_prepends_a_marker_when_an_assistant_would_lead() -> None:
    """Groups start at assistant messages, so a drop leaves one in front: a marker goes first."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a1"}]},
        {"role": "user", "content": [{"type": "text", "text": "q2"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a2"}]},
    ]

    kept = drop_for_retry(messages, None, lambda m: 10)
    again = drop_for_retry(kept or [], None, lambda m: 10)

    assert kept is not None
    assert kept[0]["content"][0]["text"] == PTL_RETRY_MARKER
    assert kept[1]["content"][0]["text"] == "a1"
    assert again is not None
    assert sum(1 for m in again if m["content"][0].get("text") == PTL_RETRY_MARKER) == 1


class FailingSummarizer:
    """Fails on demand, else summarizes offline."""

    name = "flaky"

    def __init__(self) -> None:
        self.fail = False

    def summarize(self, request: Any) -> Any:
        if self.fail:
            raise SummaryFailed("model overloaded")
        return OfflineSummarizer().summarize(request)


class TestBreaker:
    def _over_threshold(self, session: Session) -> None:
        session.append(
            [
                MessageAppended(role="user", content="more"),
                MessageAppended(role="assistant", content="sure"),
                UsageRecorded(input_tokens=86_000, output_tokens=10),
            ]
        )

    def test_success_then_three_failures_open_it_and_it_survives_a_restart(self) -> None:
        """Seed 001's exercise: success, fail, fail, fail, then the next turn is skipped."""
        session = _session(turns=2, context_window=100_000, max_output_tokens=10_000)  # threshold 77,000
        summarizer = FailingSummarizer()
        pipeline = Pipeline(
            PipelineConfig(compact=CompactConfig(session_memory=False)), summarizer=summarizer
        )
        for fail in (False, True, True, True, True):
            summarizer.fail = fail
            self._over_threshold(session)
            with contextlib.suppress(sessionstore.BlockingLimitError):
                pipeline.prepare(session)

        kinds = [e.type for e in session.transcript if e.type.startswith("compact")]
        assert kinds == ["compact_boundary", "compact_failed", "compact_failed", "compact_failed"]
        assert breaker_open(session)
        assert breaker_open(Session(session.store, session.id))
        compact(session, OfflineSummarizer())  # a manual compact is never blocked, and closes it
        assert not breaker_open(session)


class TestSessionMemory:
    def test_memory_compact_keeps_recent_turns_and_calls_no_model(self) -> None:
        """With a memory, compaction keeps the newest turns and uses the memory as the summary."""
        session = _session(turns=12)
        session.append(
            [
                SessionMemoryUpdated(
                    memory="notes so far", last_summarized_seq=session.last_seq - 8, tokens_at_extraction=1
                )
            ]
        )

        report = compact(
            session, FailingSummarizer(), use_memory=True, config=CompactConfig(memory_min_tokens=500)
        )
        request = session.request()

        assert report.ok
        assert report.strategy == "session_memory"
        assert request["messages"][0]["content"][0]["text"].endswith("notes so far")
        sessionstore.validate_request(request)

    @settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        turns=st.integers(2, 14),
        back=st.integers(0, 40),
        min_tokens=st.integers(0, 3000),
        max_tokens=st.integers(100, 6000),
    )
    def test_keep_index_bounds_and_clean_cut(
        self, turns: int, back: int, min_tokens: int, max_tokens: int
    ) -> None:
        """The keep index lands on a user prompt, and never keeps more than the maximum unless it must."""
        session = _session(turns=turns)
        last = max(1, session.last_seq - back)
        session.append([SessionMemoryUpdated(memory="m", last_summarized_seq=last, tokens_at_extraction=0)])
        config = CompactConfig(memory_min_tokens=min_tokens, memory_max_tokens=max(max_tokens, 1))

        index = memory_keep_index(session, config)

        state = session.api_state
        if index is not None:
            assert state.messages[index]["role"] == "user"
            assert state.messages[index]["content"][0]["type"] == "text"
            session_copy = compact(session, FailingSummarizer(), use_memory=True, config=config)
            assert session_copy.ok
            sessionstore.validate_request(session.request())


def test_collapse_suppresses_auto_compact() -> None:
    """With collapse enabled, auto-compact never fires even above its threshold."""
    session = _session(turns=2, context_window=100_000, max_output_tokens=10_000)
    session.append([UsageRecorded(input_tokens=80_000, output_tokens=0)])
    config = PipelineConfig(
        collapse=CollapseConfig(enabled=True), compact=CompactConfig(session_memory=False)
    )

    Pipeline(config).prepare(session)

    assert not [e for e in session.transcript if e.type.startswith("compact")]


def test_message_after_a_boundary_is_not_merged_into_a_hidden_one() -> None:
    """A user line right after a boundary that followed a user line stays in the request."""
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5")
    session.append([MessageAppended(role="user", content="old question")])
    compact(session, OfflineSummarizer())

    session.append([MessageAppended(role="user", content="new question")])

    texts = [b["text"] for m in session.request()["messages"] for b in m["content"]]
    assert texts[-1] == "new question"
    assert Session(store, session.id, use_snapshots=False).request_bytes() == session.request_bytes()


def test_shell_hooks_receive_json_and_feed_the_compaction(tmp_path: Any) -> None:
    """Shell commands as hooks: JSON on stdin, their stdout becomes instructions and added text."""
    import sys

    from sessionstore._compaction import shell_pre_compact_hook, shell_text_hook

    script = tmp_path / "hook.py"
    script.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "if data['hook'] == 'pre_compact':\n"
        "    print(json.dumps({'instructions': 'mention ' + data['trigger'], 'message': 'compacting'}))\n"
        "else:\n"
        "    print('post hook saw ' + str(len(data['summary'])) + ' chars')\n"
    )
    seen: list[str] = []

    class Recording(OfflineSummarizer):
        def summarize(self, request: Any) -> Any:
            seen.append(request.custom_instructions or "")
            return super().summarize(request)

    hooks = CompactHooks(
        pre_compact=[shell_pre_compact_hook([sys.executable, str(script)])],
        post_compact=[shell_text_hook([sys.executable, str(script)], "post_compact")],
    )
    session = _session(turns=2)

    compact(session, Recording(), config=CompactConfig(hooks=hooks))
    texts = [b["text"] for b in session.request()["messages"][0]["content"]]

    assert seen == ["mention manual"]
    assert texts[1] == "compacting"
    assert texts[2].startswith("post hook saw ")


def test_a_failing_shell_hook_records_a_failure_and_changes_nothing(tmp_path: Any) -> None:
    """A hook that exits non-zero is a recorded failure; the request is unchanged."""
    import sys

    from sessionstore._compaction import shell_pre_compact_hook

    session = _session(turns=2)
    before = session.request_bytes()
    hooks = CompactHooks(
        pre_compact=[shell_pre_compact_hook([sys.executable, "-c", "import sys; sys.exit(3)"])]
    )

    report = compact(session, OfflineSummarizer(), config=CompactConfig(hooks=hooks))

    assert not report.ok
    assert "exited with 3" in (report.reason or "")
    assert session.request_bytes() == before
    assert [e.type for e in session.transcript][-1] == "compact_failed"


def test_partial_from_keeps_the_earlier_turns_before_the_summary() -> None:
    """Summarize from a prompt on: the turns before it stay verbatim and first; appends continue."""
    session = _session()
    before = session.request()["messages"]

    report = compact(session, OfflineSummarizer(), from_uuid="p4")
    after = session.request()["messages"]
    session.append([MessageAppended(role="user", content="what next?")])

    assert report.ok
    assert after[:16] == before[:16]  # turns 0-3 untouched
    assert after[16]["content"][0]["text"].startswith(COMPACT_SUMMARY_PREFIX)
    assert len(after) == 17
    assert session.request()["messages"][-1]["content"][-1]["text"] == "what next?"
    assert report.tokens_after < report.tokens_before
    sessionstore.validate_request(session.request())
    assert Session(session.store, session.id, use_snapshots=False).request_bytes() == session.request_bytes()
    with pytest.raises(sessionstore.ValidationError, match="split a tool call"):
        compact(session, OfflineSummarizer(), from_uuid="r1")


def test_a_stale_memory_is_not_used_to_keep_more_than_the_maximum() -> None:
    """A memory older than what the maximum allows keeping falls back to the LLM summary."""
    session = _session(turns=12)
    session.append([SessionMemoryUpdated(memory="old notes", last_summarized_seq=2, tokens_at_extraction=1)])

    report = compact(
        session, OfflineSummarizer(), use_memory=True, config=CompactConfig(memory_max_tokens=500)
    )

    assert report.ok
    assert report.strategy == "llm"


def test_collapse_only_sessions_compact_at_the_blocking_limit_instead_of_sticking() -> None:
    """With collapse on and nothing left to collapse, the blocking limit triggers a last-resort compaction."""
    session = _session(turns=3, context_window=100_000, max_output_tokens=10_000)
    session.append([UsageRecorded(input_tokens=88_000, output_tokens=0)])
    config = PipelineConfig(
        collapse=CollapseConfig(enabled=True), compact=CompactConfig(session_memory=False)
    )

    prepared = Pipeline(config).prepare(session)

    assert any(r.stage == "auto_compact" and "blocking limit" in r.note for r in prepared.reports)
    assert "compact_boundary" in [e.type for e in session.transcript]
    sessionstore.validate_request(prepared.request)


def test_collapse_resumes_after_a_last_resort_compaction() -> None:
    """Spans committed before a boundary do not stop collapse from staging after it."""
    session = _session(turns=14, context_window=100_000, max_output_tokens=10_000)
    config = PipelineConfig(
        collapse=CollapseConfig(enabled=True, span_rounds=4, keep_recent_rounds=2),
        compact=CompactConfig(session_memory=False),
    )
    session.append([UsageRecorded(input_tokens=84_000, output_tokens=0)])
    Pipeline(config).prepare(session)
    compact(session, OfflineSummarizer())
    for n in range(14, 24):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {}}
        session.append(
            [
                MessageAppended(role="user", content=f"step {n} please"),
                MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}a"),
                MessageAppended(
                    role="user", content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}]
                ),
                MessageAppended(role="assistant", content=f"step {n} done", api_message_id=f"m{n}b"),
            ]
        )
    session.append([UsageRecorded(input_tokens=84_000, output_tokens=0)])

    prepared = Pipeline(config).prepare(session)

    assert any(r.stage == "collapse" for r in prepared.reports)
    sessionstore.validate_request(prepared.request)

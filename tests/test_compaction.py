"""Compaction: summaries, prompt-too-long retries, the breaker, session memory — real SDK, local API."""

from __future__ import annotations

import bisect
import contextlib
from typing import Any, TypedDict

import anthropic
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import (
    Conversation,
    MessageAppended,
    Pipeline,
    PipelineConfig,
    PromptTooLongError,
    Session,
    SessionConfig,
    UsageRecorded,
)
from sessionstore.errors import CompactionDisabledError, SummaryFailedError
from sessionstore.events._context import SessionMemoryUpdated
from sessionstore.pipeline._collapse import CollapseConfig
from sessionstore.pipeline._compaction import (
    PTL_RETRY_MARKER,
    CompactConfig,
    CompactHooks,
    breaker_open,
    compact,
    drop_for_retry,
    maybe_extract_memory,
    memory_extraction_due,
    memory_growth_interval,
    memory_keep_index,
    prepare_compaction,
)
from sessionstore.pipeline._microcompact import microcompact
from sessionstore.pipeline._summarizers import (
    AnthropicSummarizer,
    OfflineSummarizer,
)
from sessionstore.projections import WindowConfig
from sessionstore.projections._api_context import CLEARED_PLACEHOLDER, COMPACT_SUMMARY_PREFIX

from .messages_api import BASH_TOOL, MessagesAPIServer, prompt_too_long, text_message
from .strategies import examples


def _session(
    turns: int = 6,
    config: SessionConfig | None = None,
    store: Any = None,
    result: Any = None,
    **started: Any,
) -> Session:
    """``turns`` rounds of a prompt, a Bash call, its result and an answer; ``result(n)`` gives
    turn ``n``'s result text (default: 300 lines of "ok")."""
    store = store or sessionstore.open_store(":memory:")
    session = Session.create(
        store,
        model="claude-opus-5-5",
        config=config or SessionConfig(snapshot_every=0),
        tools=[BASH_TOOL],
        **started,
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
                    content=[
                        {
                            "type": "tool_result",
                            "tool_use_id": f"t{n}",
                            "content": result(n) if result else "ok\n" * 300,
                        }
                    ],
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
            raise SummaryFailedError("model overloaded")
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
            with contextlib.suppress(sessionstore.errors.BlockingLimitError):
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
    # The minimum is met at the prompt the cut lands on, not before moving to it (raw tokens
    # reached it mid-turn; the snap forward then kept less).
    @example(turns=6, back=0, min_tokens=1_500, max_tokens=6_000)
    # The memory's end falls mid-turn: the cut never moves past it (that would drop messages
    # the memory does not cover).
    @example(turns=6, back=6, min_tokens=0, max_tokens=6_000)
    def test_keep_index_bounds_and_clean_cut(
        self, turns: int, back: int, min_tokens: int, max_tokens: int
    ) -> None:
        """Every example: the cut is the latest prompt at or before the memory's end that meets
        both minimums within the maximum (or the earliest within it), or None when no prompt
        there keeps at most the maximum; a compact from it gives a valid request."""
        session = _session(turns=turns)
        last = max(1, session.last_seq - back)
        session.append([SessionMemoryUpdated(memory="m", last_summarized_seq=last, tokens_at_extraction=0)])
        config = CompactConfig(memory_min_tokens=min_tokens, memory_max_tokens=max(max_tokens, 1))

        index = memory_keep_index(session, config)

        state = session.api_state
        messages = state.messages
        start = max(state.first_visible, bisect.bisect_right(state.message_first_seq, last))
        cuts = [i for i in range(1, min(start, len(messages) - 1) + 1) if _opens_with_prompt(messages[i])]
        within = [i for i in cuts if _kept_calibrated(session, i) <= config.memory_max_tokens]

        def enough(i: int) -> bool:
            texts = sum(1 for m in messages[i:] if any(b["type"] == "text" for b in m["content"]))
            return (
                _kept_calibrated(session, i) >= config.memory_min_tokens
                and texts >= config.memory_min_text_messages
            )

        if index is None:
            assert within == []
        else:
            assert index in within
            assert enough(index) or index == within[0]
            assert not any(enough(i) for i in within if i > index)
            report = compact(session, FailingSummarizer(), use_memory=True, config=config)
            assert (report.ok, report.strategy) == (True, "session_memory")
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

    from sessionstore.pipeline._compaction import shell_pre_compact_hook, shell_text_hook

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

    from sessionstore.pipeline._compaction import shell_pre_compact_hook

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


class _Pivot(TypedDict, total=False):
    """Where ``compact`` cuts: one of its two message-uuid arguments."""

    up_to_uuid: str
    from_uuid: str


@pytest.mark.parametrize("pivot", [{"up_to_uuid": "a3"}, {"from_uuid": "p5"}])
def test_kept_messages_count_as_the_view_holds_them_after_a_compaction(pivot: _Pivot) -> None:
    """Results cleared before a compaction stay cleared in the messages it keeps, and the
    tokens counted after it are those of the cleared results, not the originals: the same
    conversation appended with the placeholders already in place counts exactly the same."""
    cleared = _session()
    microcompact(cleared, keep_recent=1)  # clears the results of turns 0-4
    appended_cleared = _session(result=lambda n: CLEARED_PLACEHOLDER if n < 5 else "ok\n" * 300)
    assert cleared.request_bytes() == appended_cleared.request_bytes()

    for session in (cleared, appended_cleared):
        compact(session, OfflineSummarizer(), **pivot)

    assert cleared.request_bytes() == appended_cleared.request_bytes()
    assert cleared.api_state.view_tokens == appended_cleared.api_state.view_tokens
    assert cleared.used_tokens() == appended_cleared.used_tokens()
    resumed = Session(cleared.store, cleared.id, use_snapshots=False)
    assert resumed.used_tokens() == cleared.used_tokens()


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


class TestCompactionDisabled:
    """``WindowConfig(disable_compaction=True)`` turns every compaction off, manual ones too."""

    def test_manual_compact_raises_and_records_nothing(self, store: Any) -> None:
        config = SessionConfig(window=WindowConfig(disable_compaction=True))
        session = _session(turns=2, config=config, store=store)
        last = store.last_seq(session.id)

        with pytest.raises(CompactionDisabledError, match="compaction is disabled"):
            compact(session, OfflineSummarizer())
        with pytest.raises(CompactionDisabledError):
            compact(session, OfflineSummarizer(), up_to_uuid="a0")

        assert store.last_seq(session.id) == last

    def test_disable_auto_compact_still_allows_a_manual_compact(self) -> None:
        session = _session(turns=2, config=SessionConfig(window=WindowConfig(disable_auto_compact=True)))

        assert compact(session, OfflineSummarizer()).ok

    def test_reactive_recovery_surfaces_the_error_without_compacting(self, messages_api: Any) -> None:
        """A prompt-too-long is surfaced at once: no boundary, one request, the step recorded."""
        messages_api.queue += [prompt_too_long(210_000), text_message("never sent", "msg_x")]
        session = _session(turns=2, config=SessionConfig(window=WindowConfig(disable_compaction=True)))
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        loop = Conversation(session, client, model="claude-opus-5-5")
        loop.user("and now?")

        with pytest.raises(PromptTooLongError):
            loop.step()

        kinds = [e.type for e in session.transcript]
        assert "compact_boundary" not in kinds
        assert "compact_failed" not in kinds
        steps = [e.payload["step"] for e in session.transcript if e.type == "reactive_recovery"]
        assert steps == ["surfaced"]
        assert len(messages_api.requests) == 1


class TestReactiveUsesThePipelineConfig:
    def test_hooks_and_their_instructions_run_for_a_reactive_compaction(self, messages_api: Any) -> None:
        """The pipeline's pre-compact, session-start and post-compact hooks run; their
        instructions reach the summarizer; the retried request carries their results."""
        seen: list[str | None] = []

        class Recording(OfflineSummarizer):
            def summarize(self, request: Any) -> Any:
                seen.append(request.custom_instructions)
                return super().summarize(request)

        hooks = CompactHooks(
            pre_compact=[lambda trigger: (f"keep the build commands ({trigger})", None)],
            session_start=[lambda source: f"session start ({source})"],
            post_compact=[lambda summary: "post hook ran"],
        )
        pipeline = Pipeline(PipelineConfig(compact=CompactConfig(hooks=hooks, session_memory=False)))
        messages_api.queue += [prompt_too_long(210_000), text_message("recovered", "msg_after")]
        session = _session(turns=3)
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        loop = Conversation(
            session, client, model="claude-opus-5-5", pipeline=pipeline, summarizer=Recording()
        )
        loop.user("and now?")

        loop.step()

        boundary = next(e for e in session.transcript if e.type == "compact_boundary").payload
        assert seen == ["keep the build commands (reactive)"]
        assert boundary["trigger"] == "reactive"
        assert boundary["custom_instructions"] == "keep the build commands (reactive)"
        assert boundary["hook_results"] == ["session start (compact)", "post hook ran"]
        retried = [b.get("text") for b in messages_api.requests[-1]["body"]["messages"][0]["content"]]
        assert "session start (compact)" in retried
        assert "post hook ran" in retried

    def test_a_reactive_compaction_uses_the_session_memory_like_auto_compact(self, messages_api: Any) -> None:
        """With a usable memory the reactive path compacts from it too (no summarizer call)."""
        messages_api.queue += [prompt_too_long(210_000), text_message("recovered", "msg_after")]
        session = _session(turns=12)
        session.append(
            [
                SessionMemoryUpdated(
                    memory="notes so far", last_summarized_seq=session.last_seq - 8, tokens_at_extraction=1
                )
            ]
        )
        pipeline = Pipeline(PipelineConfig(compact=CompactConfig(memory_min_tokens=500)))
        failing = FailingSummarizer()
        failing.fail = True  # a model summary would fail: only the memory can compact
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        loop = Conversation(session, client, model="claude-opus-5-5", pipeline=pipeline, summarizer=failing)

        loop.step()

        boundary = next(e for e in session.transcript if e.type == "compact_boundary").payload
        assert boundary["trigger"] == "reactive"
        assert boundary["strategy"] == "session_memory"


def _texts(message: dict[str, Any]) -> list[str]:
    return [str(b.get("text", "")) for b in message["content"] if b.get("type") == "text"]


def test_restored_parts_follow_the_kept_messages_when_a_collapse_sits_in_them(store: Any) -> None:
    """A collapse committed in a compaction's kept tail leaves the restored files and hook
    results after the kept messages, before every later turn (not at the request's end)."""
    hooks = CompactHooks(post_compact=[lambda summary: "post hook ran"])
    session = _session(turns=8, store=store)
    blob = session.store.put_blob(b"print('hi')\n")
    session.append([sessionstore.events.FileRead(path="src/hi.py", blob_sha256=blob.sha256)])
    compact(session, OfflineSummarizer(), up_to_uuid="a1", config=CompactConfig(hooks=hooks))
    for n in (8, 9):
        session.append(
            [
                MessageAppended(role="user", content=f"later {n}", message_uuid=f"p{n}"),
                MessageAppended(role="assistant", content=f"later {n} done", api_message_id=f"m{n}"),
            ]
        )
    # turns 2-4, inside the kept tail
    sessionstore.pipeline.collapse(session, OfflineSummarizer(), "p2", "a4")

    texts = [t for m in session.request()["messages"] for t in _texts(m)]
    restored = texts.index("post hook ran") - 1

    assert texts[restored].startswith("[Restored after compaction: src/hi.py]")
    assert texts[restored + 2 :] == ["later 8", "later 8 done", "later 9", "later 9 done"]
    assert "step 7 done" in texts[:restored]
    sessionstore.validate_request(session.request())
    assert Session(store, session.id, use_snapshots=False).request_bytes() == session.request_bytes()


def _big_session(turns: int, words: int, store: Any = None, **started: Any) -> Session:
    """Turns of a prompt, a tool call, a result of about ``words`` tokens and an answer."""
    store = store or sessionstore.open_store(":memory:")
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0), **started
    )
    for n in range(turns):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"make step{n}"}}
        session.append(
            [
                MessageAppended(role="user", content=f"step {n} please", message_uuid=f"p{n}"),
                MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}a"),
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": " word" * words}],
                ),
                MessageAppended(role="assistant", content=f"step {n} done", api_message_id=f"m{n}b"),
            ]
        )
    return session


def _kept_calibrated(session: Session, index: int) -> int:
    """Calibrated tokens of the messages from ``index`` on (the unit of the thresholds)."""
    state = session.api_state
    blocks = sum(len(m["content"]) for m in state.messages[index:])
    return session.estimate(sum(state.message_tokens[index:]), blocks)


def _opens_with_prompt(message: dict[str, Any]) -> bool:
    return bool(message["role"] == "user" and message["content"][0]["type"] == "text")


#: A memory file as created, before anything was written in it.
MEMORY_TEMPLATE = """# Session Title
_A short and distinctive 5-10 word descriptive title for the session_

# Current State
_What is actively being worked on right now? Pending tasks not yet completed._

# Errors & Corrections
_Errors encountered and how they were fixed._
"""


class TestSessionMemoryFallbacks:
    @pytest.mark.parametrize("memory", ["", "  \n\n", MEMORY_TEMPLATE], ids=["empty", "blank", "template"])
    def test_an_empty_or_template_only_memory_falls_back_to_the_llm_summary(self, memory: str) -> None:
        session = _session(turns=12)
        session.append(
            [
                SessionMemoryUpdated(
                    memory=memory, last_summarized_seq=session.last_seq - 8, tokens_at_extraction=1
                )
            ]
        )

        report = compact(
            session, OfflineSummarizer(), use_memory=True, config=CompactConfig(memory_min_tokens=500)
        )

        boundary = next(e for e in session.transcript if e.type == "compact_boundary").payload
        assert report.strategy == "llm"
        assert boundary["summary"].startswith("1. Primary request and intent:\nstep 0 please")

    def test_a_memory_with_content_under_the_template_headings_is_used(self) -> None:
        session = _session(turns=12)
        memory = MEMORY_TEMPLATE.replace("# Current State\n", "# Current State\nFixing the build.\n")
        session.append(
            [
                SessionMemoryUpdated(
                    memory=memory, last_summarized_seq=session.last_seq - 8, tokens_at_extraction=1
                )
            ]
        )

        report = compact(
            session, FailingSummarizer(), use_memory=True, config=CompactConfig(memory_min_tokens=500)
        )

        assert report.strategy == "session_memory"

    def test_a_memory_compact_still_above_the_threshold_is_abandoned_for_the_llm_summary(
        self, store: Any
    ) -> None:
        """Nothing is recorded for it: one boundary, and the model summarizes the original history."""
        seen: list[str] = []

        class Recording(OfflineSummarizer):
            def summarize(self, request: Any) -> Any:
                seen.append(request.messages[0]["content"][0]["text"])
                return super().summarize(request)

        # Window 40,000 with 10,000 reserved: the auto-compact threshold is 17,000 tokens.
        session = _big_session(
            turns=8, words=4_000, store=store, context_window=40_000, max_output_tokens=10_000
        )
        memory_seq = next(e.seq for e in session.transcript if e.payload.get("message_uuid") == "p4") - 1
        session.append(
            [SessionMemoryUpdated(memory="notes", last_summarized_seq=memory_seq, tokens_at_extraction=10**9)]
        )
        assert _kept_calibrated(session, 16) >= session.token_state().window.autocompact_threshold

        prepared = Pipeline(summarizer=Recording()).prepare(session)

        reopened = Session(store, session.id, use_snapshots=False)
        boundaries = [e.payload for e in reopened.transcript if e.type == "compact_boundary"]
        assert [(b["strategy"], b["trigger"]) for b in boundaries] == [("llm", "auto")]
        assert seen == ["step 0 please"]
        assert not prepared.tokens.above_autocompact

    def test_the_kept_tail_meets_the_minimum_after_the_cut_moves_to_a_prompt(self) -> None:
        """Default settings: at least 10,000 calibrated tokens kept, the cut on a prompt."""
        session = _big_session(turns=6, words=4_000)
        session.append(
            [
                SessionMemoryUpdated(
                    memory="notes", last_summarized_seq=session.last_seq, tokens_at_extraction=1
                )
            ]
        )

        index = memory_keep_index(session, CompactConfig())

        assert index is not None
        assert _opens_with_prompt(session.api_state.messages[index])
        assert 10_000 <= _kept_calibrated(session, index) <= 40_000


class TestSecondCompaction:
    """What a compaction put back is not summarized again by the next one."""

    def _compacted_twice(self, summarizer: Any, requests_before: list[Any] | None = None) -> Session:
        from sessionstore.events._context import PlanUpdated, SkillInvoked

        session = _session(turns=3)
        blob = session.store.put_blob(b"def handler():\n    return 42\n")
        session.append(
            [
                sessionstore.events.FileRead(path="src/handler.py", blob_sha256=blob.sha256),
                SkillInvoked(name="release", content="1. bump the version\n2. tag"),
                PlanUpdated(plan="- bump\n- tag"),
            ]
        )
        hooks = CompactHooks(post_compact=[lambda summary: "post hook ran"])
        compact(session, OfflineSummarizer(), config=CompactConfig(hooks=hooks))
        session.append(
            [
                MessageAppended(role="user", content="now write the changelog"),
                MessageAppended(role="assistant", content="changelog written", api_message_id="m9"),
            ]
        )
        if requests_before is not None:
            requests_before.append(session.request())
        compact(session, summarizer)
        return session

    def test_the_summarizer_sees_neither_attachments_nor_the_previous_summary_in_the_messages(self) -> None:
        seen: list[Any] = []

        class Recording(OfflineSummarizer):
            def summarize(self, request: Any) -> Any:
                seen.append(request)
                return super().summarize(request)

        session = self._compacted_twice(Recording())

        first = next(e.payload for e in session.transcript if e.type == "compact_boundary")
        texts = [b["text"] for m in seen[0].messages for b in m["content"]]
        assert texts == ["now write the changelog", "changelog written"]
        assert seen[0].previous_summary == first["summary"]

    def test_offline_summaries_carry_the_earlier_one_forward_without_nesting(self) -> None:
        session = self._compacted_twice(OfflineSummarizer())

        second = [e.payload for e in session.transcript if e.type == "compact_boundary"][1]["summary"]
        assert second.count("1. Primary request and intent:") == 1
        assert "This session continues" not in second
        assert "[Skill release]" not in second
        assert second.startswith("1. Primary request and intent:\nstep 0 please")
        user_messages = second.split("6. All user messages:\n")[1].split("\n\n")[0].splitlines()
        assert user_messages == [
            "- step 0 please",
            "- step 1 please",
            "- step 2 please",
            "- now write the changelog",
        ]

    def test_a_model_gets_the_main_request_as_it_is_with_the_previous_summary_once(
        self, messages_api: Any
    ) -> None:
        """The shared prefix: the request the model saw (earlier summary, restored parts) plus the prompt."""
        messages_api.queue.append(text_message("<summary>second summary</summary>", "msg_s2"))
        main: list[Any] = []

        session = self._compacted_twice(_anthropic(messages_api), requests_before=main)

        first = next(e.payload for e in session.transcript if e.type == "compact_boundary")["summary"]
        body = messages_api.requests[-1]["body"]
        *sent, ask = [b for m in body["messages"] for b in m["content"]]
        texts = [b["text"] for b in sent if b.get("type") == "text"]
        assert sent == [b for m in main[0]["messages"] for b in m["content"]]
        assert {k: body.get(k) for k in ("system", "tools")} == {
            k: main[0].get(k) for k in ("system", "tools")
        }
        assert "tool_choice" not in body
        assert texts[0] == COMPACT_SUMMARY_PREFIX + first
        assert sum(first in t for t in texts) == 1
        assert ask["text"].startswith("IMPORTANT: answer with plain text only")
        assert [e.payload for e in session.transcript if e.type == "compact_boundary"][1]["summary"] == (
            "second summary"
        )


def test_no_session_memory_is_extracted_when_compaction_is_disabled() -> None:
    """With all compaction off nothing would use a memory: no summarizer call, no event."""
    seen: list[Any] = []

    class Recording(OfflineSummarizer):
        def summarize(self, request: Any) -> Any:
            seen.append(request)
            return super().summarize(request)

    session = _session(turns=2, config=SessionConfig(window=WindowConfig(disable_compaction=True)))
    session.append([UsageRecorded(input_tokens=12_000, output_tokens=10)])

    Pipeline(summarizer=Recording()).prepare(session)

    assert seen == []
    assert "session_memory_updated" not in [e.type for e in session.transcript]


def _grown_to(session: Session, used: int, *, calls: int = 0) -> None:
    """One more turn whose usage puts "used" at ``used`` (a text answer, or ``calls`` tool calls)."""
    n = session.last_seq
    uses = [
        {"type": "tool_use", "id": f"u{n}_{i}", "name": "Bash", "input": {"command": "ls"}}
        for i in range(calls)
    ]
    content: list[dict[str, Any]] = uses or [{"type": "text", "text": f"answer {n}"}]
    session.append(
        [
            MessageAppended(role="user", content=f"prompt {n}"),
            MessageAppended(role="assistant", content=content, api_message_id=f"m{n}"),
            UsageRecorded(input_tokens=used, output_tokens=0, api_message_id=f"m{n}"),
        ]
    )
    if uses:
        results = [{"type": "tool_result", "tool_use_id": u["id"], "content": "ok"} for u in uses]
        session.append([MessageAppended(role="user", content=results)])


class TestMemoryPacing:
    """Extraction paces on the context's growth since the last extraction, relative to the window."""

    def _session(self, window: int = 200_000) -> Session:
        return Session.create(
            sessionstore.open_store(":memory:"),
            model="claude-opus-5-5",
            context_window=window,
            max_output_tokens=64_000,
            tools=[BASH_TOOL],
            config=SessionConfig(snapshot_every=0),
        )

    @pytest.mark.parametrize(
        ("window", "interval"),
        [(200_000, 18_000), (1_000_000, 20_000), (40_000, 5_000)],
        ids=["10% of the effective window", "at most half the memory maximum", "at least 5,000"],
    )
    def test_the_interval_is_a_share_of_the_window_within_bounds(self, window: int, interval: int) -> None:
        """10% of the effective window, never under 5,000 nor over half of the 40,000 a memory keeps."""
        assert memory_growth_interval(self._session(window), CompactConfig()) == interval

    def test_first_at_the_init_mark_then_after_the_interval_of_growth(self) -> None:
        """10,000 tokens start the memory; the next update waits for 18,000 more, not 5,000."""
        session = self._session()
        config = CompactConfig()
        _grown_to(session, 9_000)
        early = memory_extraction_due(session, config)
        _grown_to(session, 12_000)
        assert maybe_extract_memory(session, OfflineSummarizer(), config)
        extracted_at = session.api_state.memory.tokens_at_extraction  # type: ignore[union-attr]
        _grown_to(session, extracted_at + 17_000)
        short = memory_extraction_due(session, config)
        _grown_to(session, extracted_at + 18_500)

        assert not early
        assert extracted_at >= 12_000
        assert not short
        assert memory_extraction_due(session, config)

    def test_growth_alone_is_not_enough_mid_tool_use(self) -> None:
        """After the growth, 3 tool calls since the last extraction or a turn without one are needed."""
        session = self._session()
        config = CompactConfig()
        _grown_to(session, 12_000)
        maybe_extract_memory(session, OfflineSummarizer(), config)
        base = session.used_tokens()
        _grown_to(session, base + 19_000, calls=2)
        two_calls = memory_extraction_due(session, config)
        _grown_to(session, base + 20_000, calls=1)

        assert not two_calls
        assert memory_extraction_due(session, config)

    def test_after_a_compaction_growth_counts_from_the_compacted_context(self) -> None:
        """Not an extraction at once because the context is over 10,000: it grows by the interval first."""
        session = self._session()
        config = CompactConfig()
        for used in (12_000, 40_000, 80_000, 120_000):
            _grown_to(session, used)
            maybe_extract_memory(session, OfflineSummarizer(), config)
        report = compact(session, OfflineSummarizer())
        after = report.tokens_after
        _grown_to(session, max(after, config.extract_init_tokens) + 1_000)
        right_after = memory_extraction_due(session, config)
        _grown_to(session, after + 19_000)

        assert report.ok
        assert not right_after
        assert memory_extraction_due(session, config)

    def test_the_extraction_reads_the_main_requests_cache(self) -> None:
        """The memory call is the main request plus the prompt: what it writes, the next turn reads."""
        with MessagesAPIServer(prompt_cache=True) as server:
            client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
            session = Session.create(
                sessionstore.open_store(":memory:"),
                model="claude-opus-5-5",
                system="\n".join(f"Rule {i}: keep the build green; small diffs." for i in range(200)),
                tools=[BASH_TOOL],
                config=SessionConfig(snapshot_every=0, cache_control=True),
            )
            _grown_to(session, 12_000)
            server.queue.append(text_message("<summary>notes</summary>", "msg_mem"))

            assert maybe_extract_memory(
                session, AnthropicSummarizer(client, "claude-opus-5-5"), CompactConfig()
            )
            extraction = server.requests[-1]["usage"]
            client.messages.create(model="claude-opus-5-5", max_tokens=100, **session.request())
            main = server.requests[-1]["usage"]

        assert extraction["cache_creation_input_tokens"] > 1_024
        assert main["cache_read_input_tokens"] == extraction["cache_creation_input_tokens"]
        assert main["cache_creation_input_tokens"] == 0


def test_a_prepared_compaction_sends_the_main_request_as_its_prefix(messages_api: Any) -> None:
    """Preparing ahead summarizes the whole request: the model gets it as it is, plus the prompt."""
    messages_api.queue.append(text_message("<summary>prepared</summary>", "msg_p"))
    session = _session(turns=3, config=SessionConfig(snapshot_every=0, cache_control=True))
    main = session.request()

    prepared = prepare_compaction(session, _anthropic(messages_api))

    body = messages_api.requests[-1]["body"]
    *sent, ask = [b for m in body["messages"] for b in m["content"]]
    assert prepared is not None
    assert prepared.summary == "prepared"
    assert "tool_choice" not in body
    assert body["tools"] == main["tools"]
    assert sent == [b for m in main["messages"] for b in m["content"]]
    assert ask["text"].startswith("IMPORTANT: answer with plain text only")

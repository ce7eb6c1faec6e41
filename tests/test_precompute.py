"""Pre-computed compaction: the summary prepared ahead, committed at the threshold, discarded when stale."""

from __future__ import annotations

import threading
from typing import Any, TypedDict

import anthropic
import pytest

import sessionstore
from sessionstore import (
    MessageAppended,
    Pipeline,
    PipelineConfig,
    Session,
    SessionConfig,
    SessionStore,
    UsageRecorded,
    ValidationError,
    revert,
)
from sessionstore.audit import audit
from sessionstore.claude_code import export_claude_code
from sessionstore.events import CompactFailed
from sessionstore.pipeline import BackgroundPreparer, prepare_compaction
from sessionstore.pipeline._collapse import collapse
from sessionstore.pipeline._compaction import CompactConfig, compact, compact_preview, compact_session
from sessionstore.pipeline._snip import snip
from sessionstore.pipeline._summarizers import AnthropicSummarizer, OfflineSummarizer
from sessionstore.projections._api_context import COMPACT_SUMMARY_PREFIX

from .messages_api import BASH_TOOL, text_message


class _Window(TypedDict):
    context_window: int
    max_output_tokens: int


# Window 100,000 with 10,000 of output: effective window 90,000, auto-compact threshold 77,000.
WINDOW: _Window = {"context_window": 100_000, "max_output_tokens": 10_000}
#: Prepared from 80% of the threshold (61,600 used); session memory off unless a test turns it on.
PRECOMPUTE = CompactConfig(session_memory=False, precompute_percent=80)


def _session(store: SessionStore | None = None, turns: int = 3) -> Session:
    store = store or sessionstore.open_store(":memory:")
    session = Session.create(
        store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0), tools=[BASH_TOOL], **WINDOW
    )
    for n in range(turns):
        _turn(session, n)
    return session


def _turn(session: Session, n: int, result: str = "ok\n" * 300) -> None:
    call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"make step{n}"}}
    session.append(
        [
            MessageAppended(role="user", content=f"step {n} please", message_uuid=f"p{n}"),
            MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}a", message_uuid=f"c{n}"),
            MessageAppended(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": result}],
                message_uuid=f"r{n}",
            ),
            MessageAppended(
                role="assistant", content=f"step {n} done", api_message_id=f"m{n}b", message_uuid=f"a{n}"
            ),
        ]
    )


def _used(session: Session, tokens: int) -> None:
    """An API usage that puts "used" at ``tokens``."""
    session.append([UsageRecorded(input_tokens=tokens, output_tokens=0)])


def _types(session: Session) -> list[str]:
    return [e.type for e in session.transcript]


def _payloads(session: Session, type_name: str) -> list[dict[str, Any]]:
    return [e.payload for e in session.transcript if e.type == type_name]


def _anthropic(messages_api: Any) -> AnthropicSummarizer:
    client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
    return AnthropicSummarizer(client, "claude-opus-5-5")


def _summary_calls(messages_api: Any) -> int:
    return sum(1 for r in messages_api.requests if r["path"] == "/v1/messages")


class TestPreparedThenCommitted:
    def test_the_threshold_turn_commits_the_prepared_summary_without_a_model_call(
        self, store: SessionStore, messages_api: Any
    ) -> None:
        """On every backend, real SDK: the summary is asked for below the threshold; at the
        threshold the compaction commits it, keeps what came after verbatim, and calls nothing."""
        messages_api.queue.append(text_message("1. Primary request and intent: build the steps."))
        pipeline = Pipeline(PipelineConfig(compact=PRECOMPUTE), summarizer=_anthropic(messages_api))
        session = _session(store)
        _used(session, 65_000)
        before = session.request_bytes()

        pipeline.prepare(session)
        calls_after_preparing = _summary_calls(messages_api)
        unchanged = session.request_bytes() == before
        _turn(session, 3)
        _used(session, 78_000)
        prepared = pipeline.prepare(session)

        assert calls_after_preparing == 1
        assert _summary_calls(messages_api) == 1  # the compaction turn made no model call
        staged = _payloads(session, "compaction_prepared")
        assert len(staged) == 1
        boundary = _payloads(session, "compact_boundary")[0]
        prepared_event = next(e for e in session.transcript if e.type == "compaction_prepared")
        assert boundary["prepared_event_id"] == prepared_event.event_id
        assert boundary["template"] == "partial_up_to"
        assert boundary["summary"] == "1. Primary request and intent: build the steps."
        messages = session.request()["messages"]
        assert messages[0]["content"][0]["text"].startswith(COMPACT_SUMMARY_PREFIX)
        texts = [b.get("text") for m in messages for b in m["content"]]
        assert "step 3 please" in texts and "step 2 please" not in texts
        assert session.api_state.prepared is None
        assert not prepared.tokens.above_autocompact
        assert unchanged  # preparing changed nothing the model is sent
        sessionstore.validate_request(session.request())
        rebuilt = Session(store, session.id, use_snapshots=False)
        assert rebuilt.request_bytes() == session.request_bytes()

    def test_a_pending_preparation_is_not_prepared_again(self) -> None:
        """One preparation per stretch below the threshold: the next turns reuse the pending one."""
        session = _session()
        _used(session, 65_000)
        pipeline = Pipeline(PipelineConfig(compact=PRECOMPUTE))

        pipeline.prepare(session)
        session.append([MessageAppended(role="user", content="and then?")])
        pipeline.prepare(session)

        assert _types(session).count("compaction_prepared") == 1

    def test_below_the_mark_nothing_is_prepared(self) -> None:
        """Under ``precompute_percent`` of the threshold, and with it unset, no summary is asked for."""
        session = _session()
        _used(session, 60_000)

        Pipeline(PipelineConfig(compact=PRECOMPUTE)).prepare(session)
        _used(session, 70_000)
        Pipeline(PipelineConfig(compact=CompactConfig(session_memory=False))).prepare(session)

        assert "compaction_prepared" not in _types(session)

    def test_a_reactive_compaction_commits_it_too(self) -> None:
        """The one compaction path (auto and reactive) uses a fresh preparation."""
        session = _session()
        prepared = prepare_compaction(session, OfflineSummarizer())

        report = compact_session(session, FailingSummarizer(), PRECOMPUTE, trigger="reactive")

        assert prepared is not None
        assert report.ok
        assert _payloads(session, "compact_boundary")[0]["prepared_event_id"] == str(prepared.event_id)


class FailingSummarizer:
    """Fails every call: proves no model call was needed."""

    name = "failing"

    def summarize(self, request: Any) -> Any:
        raise sessionstore.errors.SummaryFailedError("no model call expected")


class TestStale:
    def test_a_manual_compaction_discards_it_with_its_boundary(self) -> None:
        """Any other compaction replaces the history it was prepared on: discarded in the same append."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())

        compact(session, OfflineSummarizer())

        assert _types(session)[-2:] == ["compaction_preparation_discarded", "compact_boundary"]
        assert _payloads(session, "compaction_preparation_discarded")[0]["reason"] == "compacted"
        assert session.api_state.prepared is None

    def test_a_revert_of_the_compaction_it_was_prepared_on_makes_it_stale(self) -> None:
        """Prepared after a compaction that is then reverted: the history is not what it summarized."""
        session = _session()
        first = compact(session, OfflineSummarizer())
        _turn(session, 3)
        prepare_compaction(session, OfflineSummarizer())
        revert(session, first.event_id)

        report = compact_session(session, OfflineSummarizer(), PRECOMPUTE, trigger="auto")

        discarded = _payloads(session, "compaction_preparation_discarded")
        assert [d["reason"] for d in discarded] == ["compacted"]
        assert report.ok
        assert _payloads(session, "compact_boundary")[-1]["prepared_event_id"] is None

    @pytest.mark.parametrize(
        ("change", "reason"),
        [
            ("merge", "changed"),
            ("results", "unclean_cut"),
            ("grow", "grown"),
        ],
    )
    def test_a_changed_history_discards_it_and_summarizes_anew(self, change: str, reason: str) -> None:
        """A covered message that grew, kept messages opening with results, or too much growth."""
        session = _session()
        if change == "results":  # prepared while a call waits for its result
            call = {"type": "tool_use", "id": "tx", "name": "Bash", "input": {"command": "ls"}}
            session.append([MessageAppended(role="assistant", content=[call], api_message_id="mx")])
        prepare_compaction(session, OfflineSummarizer())
        if change == "merge":  # another streamed chunk of the last covered assistant message
            session.append([MessageAppended(role="assistant", content="more", api_message_id="m2b")])
        elif change == "results":
            result = {"type": "tool_result", "tool_use_id": "tx", "content": "a b c"}
            session.append([MessageAppended(role="user", content=[result])])
        else:
            session.append([MessageAppended(role="user", content="word " * 20_000)])

        report = compact_session(session, OfflineSummarizer(), PRECOMPUTE, trigger="auto")

        assert [d["reason"] for d in _payloads(session, "compaction_preparation_discarded")] == [reason]
        assert report.ok
        boundary = _payloads(session, "compact_boundary")[0]
        assert boundary["prepared_event_id"] is None and boundary["template"] == "base"
        sessionstore.validate_request(session.request())

    def test_a_collapse_across_its_end_discards_it(self) -> None:
        """A span collapsed since, half in what it summarized and half after: never committed."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())
        _turn(session, 3)
        _turn(session, 4)
        collapse(session, OfflineSummarizer(), "p2", "a3")

        compact_session(session, OfflineSummarizer(), PRECOMPUTE, trigger="auto")

        discarded = _payloads(session, "compaction_preparation_discarded")
        assert [d["reason"] for d in discarded] == ["changed"]
        assert "collapse" in discarded[0]["detail"]
        sessionstore.validate_request(session.request())

    @pytest.mark.parametrize("edit", ["snip", "collapse"])
    def test_an_edit_reverted_after_it_was_prepared_discards_it(self, edit: str) -> None:
        """Prepared while a snip or a collapse was in effect, it never saw what that edit hid:
        once the edit is reverted, committing it would drop those messages. Discarded."""
        session = _session(turns=5)
        report = snip(session, 1) if edit == "snip" else collapse(session, OfflineSummarizer(), "p1", "a2")
        prepare_compaction(session, OfflineSummarizer())
        revert(session, report.event_ids[-1])

        compact_session(session, OfflineSummarizer(), PRECOMPUTE, trigger="auto")

        discarded = _payloads(session, "compaction_preparation_discarded")
        assert [d["reason"] for d in discarded] == ["changed"]
        assert _payloads(session, "compact_boundary")[0]["prepared_event_id"] is None
        sessionstore.validate_request(session.request())

    def test_one_that_would_stay_above_the_threshold_is_discarded(self) -> None:
        """Growth allowed, but the kept tail alone would be over the threshold: summarized anew."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())
        session.append([MessageAppended(role="user", content="word " * 70_000)])
        config = CompactConfig(session_memory=False, precompute_percent=80, precompute_max_growth_percent=100)

        compact_session(session, OfflineSummarizer(), config, trigger="auto")

        assert _payloads(session, "compaction_preparation_discarded")[0]["reason"] == "above_threshold"

    def test_the_pipeline_discards_a_stale_one_and_prepares_again(self) -> None:
        """Below the threshold a stale preparation is replaced by a new one (recorded both)."""
        session = _session()
        pipeline = Pipeline(PipelineConfig(compact=PRECOMPUTE))
        _used(session, 65_000)
        pipeline.prepare(session)
        session.append([MessageAppended(role="user", content="word " * 20_000)])
        _used(session, 70_000)

        pipeline.prepare(session)

        assert [t for t in _types(session) if "prepar" in t] == [
            "compaction_prepared",
            "compaction_preparation_discarded",
            "compaction_prepared",
        ]


class TestInteractions:
    def test_session_memory_goes_first_and_supersedes_it(self) -> None:
        """A usable session memory compacts (no model call); the preparation is discarded with it."""
        session = _session(turns=8)
        config = CompactConfig(
            precompute_percent=80, memory_min_tokens=500, memory_min_text_messages=1, memory_max_tokens=60_000
        )
        session.append(
            [
                sessionstore.events.SessionMemoryUpdated(
                    memory="# Notes\nThe user builds steps one to eight.",
                    last_summarized_seq=session.last_seq - 8,
                    tokens_at_extraction=1_000,
                )
            ]
        )
        prepare_compaction(session, OfflineSummarizer(), config)

        report = compact_session(session, FailingSummarizer(), config, trigger="auto")

        assert report.strategy == "session_memory"
        assert _payloads(session, "compaction_preparation_discarded")[0]["reason"] == "compacted"

    def test_an_open_breaker_prepares_nothing(self) -> None:
        """After 3 automatic failures no compaction is attempted, so nothing is prepared for one."""
        session = _session()
        session.append([CompactFailed(trigger="auto", reason="x") for _ in range(3)])
        _used(session, 65_000)

        Pipeline(PipelineConfig(compact=PRECOMPUTE)).prepare(session)

        assert "compaction_prepared" not in _types(session)

    def test_a_failed_preparation_records_nothing_and_opens_no_breaker(self) -> None:
        """The summarizer failing ahead of time is background work: nothing recorded, nothing counted."""
        session = _session()
        last = session.last_seq

        assert prepare_compaction(session, FailingSummarizer()) is None
        assert session.last_seq == last
        assert session.api_state.compact_failures == 0

    def test_revert_of_the_committed_compaction_restores_the_request_not_the_preparation(self) -> None:
        """Reverting gives the request back byte for byte; the preparation stays spent."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())
        _turn(session, 3)
        before = session.request_bytes()
        report = compact_session(session, FailingSummarizer(), PRECOMPUTE, trigger="auto")

        revert(session, report.event_id)

        assert session.request_bytes() == before
        assert session.api_state.prepared is None
        assert Session(session.store, session.id, use_snapshots=False).request_bytes() == before

    def test_a_fork_after_the_preparation_commits_it_in_the_fork_only(self, store: SessionStore) -> None:
        """On every backend: the fork inherits the pending preparation; the parent keeps its own."""
        parent = _session(store)
        prepared = prepare_compaction(parent, OfflineSummarizer())
        fork = parent.fork()
        _turn(fork, 3)

        compact_session(fork, FailingSummarizer(), PRECOMPUTE, trigger="auto")

        assert prepared is not None
        assert _payloads(fork, "compact_boundary")[0]["prepared_event_id"] == str(prepared.event_id)
        assert parent.api_state.prepared is not None
        assert Session(store, fork.id, use_snapshots=False).request_bytes() == fork.request_bytes()

    def test_dry_run_neither_uses_nor_discards_it(self) -> None:
        """``compact --dry-run`` shows a fresh summary and records nothing, the preparation included."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())
        last = session.last_seq

        preview = compact_preview(session, OfflineSummarizer())

        assert preview.summary
        assert session.last_seq == last
        assert session.api_state.prepared is not None

    def test_the_audit_lists_preparations_and_discards(self) -> None:
        """The audit shows when a summary was prepared, and why one was thrown away."""
        session = _session()
        prepare_compaction(session, OfflineSummarizer())
        compact(session, OfflineSummarizer())

        entries = audit(session).entries

        kinds = [e.kind for e in entries]
        assert kinds == ["compaction_prepared", "compaction_preparation_discarded", "compact_boundary"]
        assert "prepared" in entries[0].what and entries[0].details["through_seq"] > 0
        assert "compacted" in entries[1].what

    def test_a_pending_preparation_never_reaches_the_exported_transcript(self, store: SessionStore) -> None:
        """On every backend: the Claude Code export is the same with or without a pending preparation."""
        session = _session(store)
        exported = export_claude_code(store, session.id)
        prepare_compaction(session, OfflineSummarizer())

        assert export_claude_code(store, session.id) == exported


class TestBackground:
    """``CompactConfig(preparer=BackgroundPreparer())``: the summary is asked for off the turn."""

    def _gated(self, messages_api: Any) -> threading.Event:
        """The local server holds every answer until the returned event is set."""
        gate = threading.Event()

        def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            gate.wait(30)
            return text_message("1. Primary request and intent: build the steps.")

        messages_api.responder = answer
        return gate

    def test_the_turn_does_not_wait_and_a_later_turn_records_it(
        self, store: SessionStore, messages_api: Any
    ) -> None:
        """On every backend, real SDK: the crossing turn returns while the summary is still being
        written; the next turn records it; the threshold turn commits it with no model call."""
        gate = self._gated(messages_api)
        with BackgroundPreparer() as preparer:
            config = CompactConfig(session_memory=False, precompute_percent=80, preparer=preparer)
            pipeline = Pipeline(PipelineConfig(compact=config), summarizer=_anthropic(messages_api))
            session = _session(store)
            _used(session, 65_000)
            through = session.last_seq

            pipeline.prepare(session)
            recorded_while_running = "compaction_prepared" in _types(session)
            running = preparer.running(session.id)
            gate.set()
            preparer.wait(session.id)
            _turn(session, 3)
            _used(session, 66_000)
            pipeline.prepare(session)
            prepared = _payloads(session, "compaction_prepared")
            _turn(session, 4)
            _used(session, 78_000)
            pipeline.prepare(session)

        assert running and not recorded_while_running
        assert [p["through_seq"] for p in prepared] == [through]
        assert _summary_calls(messages_api) == 1
        boundary = _payloads(session, "compact_boundary")[0]
        assert boundary["prepared_event_id"] is not None and boundary["template"] == "partial_up_to"
        texts = [b.get("text") for m in session.request()["messages"] for b in m["content"]]
        assert "step 3 please" in texts and "step 4 please" in texts
        sessionstore.validate_request(session.request())
        assert Session(store, session.id, use_snapshots=False).request_bytes() == session.request_bytes()

    def test_the_threshold_turn_waits_for_a_preparation_still_running(self, messages_api: Any) -> None:
        """Reaching the threshold with the summary in flight: the compaction waits for it rather
        than asking for a second one."""
        gate = self._gated(messages_api)
        running_when_waited: list[bool] = []

        class ReleasingWhenWaited(BackgroundPreparer):
            def wait(self, session_id: str) -> None:  # the summary is answered only once waited for
                running_when_waited.append(self.running(session_id))
                gate.set()
                super().wait(session_id)

        with ReleasingWhenWaited() as preparer:
            config = CompactConfig(session_memory=False, precompute_percent=80, preparer=preparer)
            pipeline = Pipeline(PipelineConfig(compact=config), summarizer=_anthropic(messages_api))
            session = _session()
            _used(session, 65_000)
            pipeline.prepare(session)
            _turn(session, 3)
            _used(session, 78_000)

            pipeline.prepare(session)

        assert running_when_waited == [True]
        assert _summary_calls(messages_api) == 1
        assert _types(session).count("compaction_prepared") == 1
        assert _payloads(session, "compact_boundary")[0]["prepared_event_id"] is not None

    def test_a_failed_background_preparation_records_nothing_and_is_tried_again(self) -> None:
        """A summarizer failing on the worker is dropped on the session's thread; the next turn retries."""
        with BackgroundPreparer() as preparer:
            config = CompactConfig(session_memory=False, precompute_percent=80, preparer=preparer)
            pipeline = Pipeline(PipelineConfig(compact=config), summarizer=FailingSummarizer())
            session = _session()
            _used(session, 65_000)
            pipeline.prepare(session)
            preparer.wait(session.id)
            last = session.last_seq

            pipeline.prepare(session)
            retried = preparer.running(session.id) or preparer.take(session.id, wait=True) is not None

        assert [t for t in _types(session) if "prepar" in t] == []
        assert session.last_seq == last + 1  # the served request only
        assert retried

    def test_a_preparation_that_raises_unexpectedly_never_stops_a_turn(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A summarizer raising something other than SummaryFailedError on the worker (a bug in
        a custom summarizer, a client error) is logged; the turns and the compaction go on."""

        class BrokenSummarizer:
            name = "broken"

            def summarize(self, request: Any) -> Any:
                raise RuntimeError("client misconfigured")

        with BackgroundPreparer() as preparer:
            config = CompactConfig(session_memory=False, precompute_percent=80, preparer=preparer)
            pipeline = Pipeline(PipelineConfig(compact=config), summarizer=BrokenSummarizer())
            session = _session()
            _used(session, 65_000)
            pipeline.prepare(session)
            preparer.wait(session.id)
            with caplog.at_level("WARNING", logger="sessionstore.pipeline"):
                pipeline.prepare(session)

        assert [t for t in _types(session) if "prepar" in t] == []
        assert "client misconfigured" in caplog.text


class TestConfig:
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"precompute_percent": 0},
            {"precompute_percent": 100},
            {"precompute_max_growth_percent": 0},
            {"precompute_max_growth_percent": 120},
        ],
    )
    def test_marks_out_of_range_are_refused_with_the_field(self, kwargs: dict[str, float]) -> None:
        """A mark that could never fire, or would fire at once, is a ValidationError naming it."""
        with pytest.raises(ValidationError) as raised:
            CompactConfig(**kwargs)  # type: ignore[arg-type]

        assert raised.value.field == next(iter(kwargs))

"""The no-model pipeline stages: tool-result budget, snip, micro-compact, blocking limit, revert."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import (
    BudgetConfig,
    MessageAppended,
    MicrocompactConfig,
    Pipeline,
    PipelineConfig,
    Session,
    SessionConfig,
    SessionStarted,
    SessionStore,
    UsageRecorded,
    ValidationError,
    revert,
    validate_request,
)
from sessionstore.errors import BlockingLimitError
from sessionstore.events import MicrocompactApplied
from sessionstore.pipeline import (
    STAGE_ORDER,
    BudgetStage,
    MicrocompactStage,
    SnipConfig,
    Stage,
    StageReport,
    microcompact,
    persisted_preview,
    prepare_compaction,
    record_events,
    snip,
)
from sessionstore.pipeline._collapse import (
    CollapseConfig,
    _next_span,
    collapse,
    commit_collapse,
    stage_collapse,
)
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import OfflineSummarizer
from sessionstore.projections import CLEARED_PLACEHOLDER, ApiContextState
from sessionstore.projections._api_context import committed_spans, request_bytes

from .messages_api import with_tool_definitions
from .strategies import examples, turn_logs, turns
from .test_projections import messy_logs, shared_results_session

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _open(store: SessionStore | None = None, **started: Any) -> Session:
    store = store or sessionstore.open_store(":memory:")
    return Session.create(store, model="claude-sonnet-5-5", config=SessionConfig(snapshot_every=0), **started)


def _round(session: Session, n: int, results: dict[str, tuple[str, Any]], *, when: datetime = T0) -> None:
    """One API round: assistant calls each tool, then all results arrive in one user message."""
    calls = [
        {"type": "tool_use", "id": tool_id, "name": name, "input": {"n": n}}
        for tool_id, (name, _) in results.items()
    ]
    session.append(
        [
            MessageAppended(role="user", content=f"step {n}"),
            MessageAppended(role="assistant", content=calls, api_message_id=f"msg_{n}", timestamp=when),
            MessageAppended(
                role="user",
                content=[
                    {"type": "tool_result", "tool_use_id": tool_id, "content": content}
                    for tool_id, (_, content) in results.items()
                ],
            ),
        ]
    )


def _lines(n_chars: int, seed: str = "x") -> str:
    line = (seed * 79)[:79] + "\n"
    return (line * (n_chars // 80 + 1))[:n_chars]


def _result_content(request: dict[str, Any], tool_use_id: str) -> Any:
    for message in request["messages"]:
        for block in message["content"]:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
                return block["content"]
    raise KeyError(tool_use_id)


def _events(session: Session, type_name: str) -> list[Any]:
    return [e for e in session.transcript if e.type == type_name]


def _edited(usage_total: int, edit: str) -> tuple[Session, str]:
    """Three rounds, the API's usage after them (``usage_total`` tokens), then a snip of the
    first round or a collapse of the second; returns the session and the event a revert takes.
    The rounds are timestamped now, so no time-based micro-compaction changes the count."""
    session = _open(context_window=100_000, max_output_tokens=10_000)
    now = datetime.now(UTC)
    for n in range(3):
        _round(session, n, {f"t{n}": ("Bash", _lines(2_000, str(n)))}, when=now)
    session.append([UsageRecorded(input_tokens=usage_total - 10, output_tokens=10)])
    if edit == "snip":
        return session, snip(session, 1).event_ids[0]
    messages = [e.payload["message_uuid"] for e in _events(session, "message_appended")]
    report = collapse(session, OfflineSummarizer(), messages[3], messages[5])  # round 1, whole
    return session, report.event_ids[-1]


class TestToolResultBudget:
    def test_large_result_is_persisted_once_and_survives_resume(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        """On every backend: blob and preview, file written once, the same preview after resume."""
        session = _open(store)
        big = _lines(60_000)
        _round(session, 1, {"t1": ("Bash", big)})
        pipeline = Pipeline(PipelineConfig(budget=BudgetConfig(materialize_root=tmp_path)))

        first = pipeline.prepare(session)
        (persisted,) = _events(session, "tool_result_persisted")
        resumed = Session(store, session.id)
        again = pipeline.prepare(resumed)
        file = tmp_path / session.id / "tool-results" / "t1.txt"

        preview = _result_content(first.request, "t1")
        assert preview.startswith("<persisted-output>\nOutput too large (59 KB). Full output saved to: ")
        assert str(file) in preview
        assert store.get_blob(persisted.payload["blob_sha256"]).decode() == big
        assert file.read_text() == big
        assert _result_content(again.request, "t1") == preview
        assert len(_events(Session(store, session.id), "tool_result_persisted")) == 1
        assert first.reports[0].tokens_freed > 5_000

    def test_a_tool_use_id_that_climbs_is_never_a_path(self, tmp_path: Path) -> None:
        """A tool_use_id from the log ('../../x') gets no file outside the root: the blob holds the output."""
        session = _open()
        big = _lines(60_000)
        _round(session, 1, {"../../escaped": ("Bash", big)})
        root = tmp_path / "spill"

        Pipeline(PipelineConfig(budget=BudgetConfig(materialize_root=root))).prepare(session)
        (persisted,) = _events(session, "tool_result_persisted")

        assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
        assert persisted.payload["location"] == f"sessionstore blob {persisted.payload['blob_sha256']}"
        assert session.store.get_blob(persisted.payload["blob_sha256"]).decode() == big

    def test_read_and_image_results_are_never_persisted(self) -> None:
        """Read's maximum is infinite; results with images have nothing to preview."""
        session = _open()
        image = [
            {"type": "text", "text": _lines(60_000)},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ]
        _round(session, 1, {"r": ("Read", _lines(80_000)), "i": ("Bash", image)})

        Pipeline().prepare(session)

        assert _events(session, "tool_result_persisted") == []

    def test_aggregate_budget_replaces_largest_fresh_first(self) -> None:
        """Five results under 50K each but 225K together: the largest goes, then the message fits."""
        session = _open()
        sizes = {"a": 40_000, "b": 49_000, "c": 45_000, "d": 46_000, "e": 45_000}
        _round(session, 1, {k: ("Grep", _lines(v, k)) for k, v in sizes.items()})

        Pipeline().prepare(session)

        persisted = _events(session, "tool_result_persisted")
        assert [(e.payload["tool_use_id"], e.payload["reason"]) for e in persisted] == [("b", "aggregate")]

    def test_frozen_results_are_never_replaced(self) -> None:
        """A result served un-replaced stays as it was, even when a later result overflows the message."""
        session = _open()
        session.append(
            [
                MessageAppended(role="user", content="go"),
                MessageAppended(
                    role="assistant",
                    api_message_id="m1",
                    content=[{"type": "tool_use", "id": t, "name": "Bash", "input": {}} for t in "abcde"],
                ),
                MessageAppended(
                    role="user",
                    content=[
                        {"type": "tool_result", "tool_use_id": t, "content": _lines(45_000, t)}
                        for t in "abcd"
                    ],
                ),
            ]
        )
        served = Pipeline().prepare(session)
        session.append(
            [
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": "e", "content": _lines(30_000)}],
                )
            ]
        )

        Pipeline().prepare(session)

        persisted = _events(session, "tool_result_persisted")
        assert [e.payload["tool_use_id"] for e in persisted] == ["e"]
        assert sorted(_events(session, "context_served")[0].payload["unreplaced_tool_results"]) == list(
            "abcd"
        )
        assert _result_content(session.request(), "a") == _result_content(served.request, "a")


class TestPreview:
    @given(text=st.text(st.sampled_from("ab \n"), min_size=0, max_size=6000), limit=st.integers(100, 3000))
    @settings(max_examples=examples(200))
    def test_preview_never_exceeds_the_limit_and_cuts_at_a_newline(self, text: str, limit: int) -> None:
        """The head is at most `limit` characters and, when cut, ends at a newline if one is near."""
        preview = persisted_preview(text, "where", limit)
        head = preview.split("characters):\n", 1)[1].rsplit("</persisted-output>", 1)[0]
        shown = head.removesuffix("...\n")

        assert preview.startswith("<persisted-output>\n")
        assert len(shown.rstrip("\n")) <= limit
        assert text.startswith(shown.rstrip("\n")) or shown == "\n"
        if len(text) > limit and "\n" in text[limit // 2 : limit]:
            assert text[: len(shown)].endswith("\n")


class TestSnip:
    def test_snip_removes_oldest_rounds_and_revert_restores_bytes(self, store: SessionStore) -> None:
        """The first round leaves the request, the log keeps it; revert gives the previous bytes back."""
        session = _open(store)
        for n in range(4):
            _round(session, n, {f"t{n}": ("Bash", _lines(2_000))})
        before = session.request_bytes()
        used_before = session.used_tokens()

        report = snip(session, rounds=2)
        after = session.request()

        assert after["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "step 2"}]}
        validate_request(with_tool_definitions(after))
        assert report.tokens_freed > 0
        assert session.used_tokens() < used_before
        assert len(session.transcript) == 1 + 4 * 3 + 1
        revert(session, report.event_ids[0])
        assert session.request_bytes() == before
        assert Session(store, session.id).request_bytes() == before
        assert session.used_tokens() == used_before

    def test_snip_never_cuts_where_it_would_orphan_a_result(self) -> None:
        """With a single round there is nothing that can be cut cleanly."""
        session = _open()
        _round(session, 1, {"t": ("Bash", "x")})

        with pytest.raises(ValidationError, match="snipped cleanly"):
            snip(session, rounds=1)
        assert _events(session, "snip_applied") == []


class TestMicrocompact:
    def _session(self, results: int = 8) -> Session:
        session = _open()
        for n in range(results):
            _round(session, n, {f"t{n}": ("Bash" if n != 2 else "CustomTool", _lines(3_000))})
        return session

    def test_tokens_freed_are_each_result_s_share_of_its_message_less_the_placeholder(self) -> None:
        """Results of 100, 300 and 600 characters in a message of 1,000 tokens and 2,000
        characters hold 50, 150 and 300 tokens; the placeholder counts 33 (one per character)."""
        session = shared_results_session()

        report = microcompact(session, tool_use_ids=["t1", "t2", "t3", "t4"])

        assert session.count_text(CLEARED_PLACEHOLDER) == 33
        assert report.tokens_freed == (50 - 33) + (150 - 33) + (300 - 33) + (1_000 - 33)

    def test_time_based_clears_all_but_the_newest_compactable(self) -> None:
        """After a 61-minute gap, every compactable result but the newest 5 becomes the placeholder."""
        session = self._session()
        clock = lambda: T0 + timedelta(minutes=61)  # noqa: E731
        before = session.request()

        prepared = Pipeline(clock=clock).prepare(session)

        cleared = [
            f"t{n}" for n in range(8) if _result_content(prepared.request, f"t{n}") == CLEARED_PLACEHOLDER
        ]
        assert cleared == ["t0", "t1"]  # t2 is not a compactable tool; t3..t7 are the newest five
        assert [m for m in prepared.request["messages"] if m["role"] == "assistant"] == [
            m for m in before["messages"] if m["role"] == "assistant"
        ]
        validate_request(with_tool_definitions(prepared.request))

    @pytest.mark.parametrize(("gap", "threshold"), [(59, 60.0), (600, math.nan), (600, math.inf)])
    def test_short_or_non_finite_gaps_never_fire(self, gap: int, threshold: float) -> None:
        """Below the threshold, or with a NaN / infinite threshold, nothing is cleared."""
        session = self._session()
        config = PipelineConfig(microcompact=MicrocompactConfig(gap_minutes=threshold))

        Pipeline(config, clock=lambda: T0 + timedelta(minutes=gap)).prepare(session)

        assert _events(session, "microcompact_applied") == []

    def test_missing_assistant_message_never_fires(self) -> None:
        """No assistant message yet means no gap to measure."""
        session = _open()
        session.append([MessageAppended(role="user", content="hello")])

        Pipeline(clock=lambda: T0 + timedelta(days=3)).prepare(session)

        assert _events(session, "microcompact_applied") == []

    def test_keep_zero_keeps_one(self) -> None:
        """keep_recent=0 behaves as 1 (never clear everything)."""
        session = self._session(results=3)
        config = PipelineConfig(microcompact=MicrocompactConfig(keep_recent=0))

        prepared = Pipeline(config, clock=lambda: T0 + timedelta(hours=2)).prepare(session)

        assert _result_content(prepared.request, "t0") == CLEARED_PLACEHOLDER
        assert _result_content(prepared.request, "t1") != CLEARED_PLACEHOLDER  # the newest compactable one
        assert _result_content(prepared.request, "t2") != CLEARED_PLACEHOLDER  # CustomTool: not compactable
        manual = microcompact(session, keep_recent=0)
        assert manual.note == "nothing to clear"

    def test_sub_agents_never_time_compact(self) -> None:
        """Only the main thread's results are cleared by the time-based path."""
        store = sessionstore.open_store(":memory:")
        sid = store.create_session(events=[SessionStarted(query_source="subagent")]).id
        session = Session(store, sid)
        for n in range(7):
            _round(session, n, {f"t{n}": ("Bash", "out")})

        Pipeline(clock=lambda: T0 + timedelta(hours=5)).prepare(session)

        assert _events(session, "microcompact_applied") == []

    def test_manual_clear_of_named_results_and_revert(self) -> None:
        """Clearing named results frees tokens; reverting restores the exact request."""
        session = self._session(results=3)
        before = session.request_bytes()

        report = microcompact(session, tool_use_ids=["t0"])
        cleared = session.request()
        revert(session, report.event_ids[0])

        assert _result_content(cleared, "t0") == CLEARED_PLACEHOLDER
        assert report.tokens_freed > 0
        assert session.request_bytes() == before

    def test_unknown_tool_use_id_is_an_error_and_writes_nothing(self) -> None:
        """A tool_use_id the session does not have is named in the error."""
        session = self._session(results=1)
        last = session.last_seq

        with pytest.raises(ValidationError, match="'toolu_nope'"):
            microcompact(session, tool_use_ids=["toolu_nope"])
        assert session.store.last_seq(session.id) == last


class TestRevertErrors:
    def test_not_revertible_already_reverted_and_unknown(self) -> None:
        """Each bad revert is a clear error and writes nothing."""
        session = _open()
        for n in range(3):
            _round(session, n, {f"t{n}": ("Bash", "out")})
        report = microcompact(session, tool_use_ids=["t0"])
        revert(session, report.event_ids[0])
        message_event = next(e for e in session.transcript if e.type == "message_appended")
        last = session.last_seq

        with pytest.raises(ValidationError, match="already reverted"):
            revert(session, report.event_ids[0])
        with pytest.raises(ValidationError, match="cannot be reverted"):
            revert(session, message_event.event_id)
        with pytest.raises(ValidationError, match="not in session"):
            revert(session, "00000000-0000-4000-8000-000000000000")
        assert session.store.last_seq(session.id) == last


class TestServedAndBlocking:
    def test_context_served_records_the_fingerprint_of_the_request(self) -> None:
        """The fingerprint is the SHA-256 of the canonical request bytes."""
        session = _open()
        _round(session, 1, {"t": ("Bash", "out")})

        prepared = Pipeline().prepare(session)

        (served,) = _events(session, "context_served")
        expected = hashlib.sha256(request_bytes(prepared.request)).hexdigest()
        assert served.payload["fingerprint"] == expected
        assert served.payload["unreplaced_tool_results"] == ["t"]
        assert served.event_id == prepared.served_event_id

    def test_blocking_limit_raises_with_the_numbers(self) -> None:
        """At or above the limit the request is refused with used, limit and what was tried."""
        session = _open(context_window=100_000, max_output_tokens=10_000)
        session.append(
            [
                MessageAppended(role="user", content="q"),
                UsageRecorded(input_tokens=87_500, output_tokens=10),
            ]
        )

        with pytest.raises(BlockingLimitError) as caught:
            Pipeline(PipelineConfig(auto_compact=False)).prepare(session)

        assert caught.value.limit == 87_000
        assert caught.value.used >= 87_510
        assert [r.stage for r in caught.value.tried] == ["tool_result_budget", "microcompact"]
        assert _events(session, "context_served") == []

    @pytest.mark.parametrize("edit", ["snip", "collapse"])
    @pytest.mark.parametrize(("offset", "refused"), [(-1, False), (0, True), (1, True)])
    def test_a_revert_landing_on_the_blocking_limit_is_refused_at_it_and_above(
        self, edit: str, offset: int, refused: bool
    ) -> None:
        """A revert gives the edit's tokens back. Landing on limit - 1 the request is served; on
        the limit itself, or one above, it is refused (SPEC 5.6 "at or above": used >= limit)."""
        limit = 87_000  # window 100,000, max output 10,000: effective 90,000, less 3,000
        session, event_id = _edited(limit + offset, edit)  # the API reported limit + offset
        pipeline = Pipeline(PipelineConfig(auto_compact=False))
        served = pipeline.prepare(session)  # the edit in effect: under the limit
        revert(session, event_id)

        assert served.tokens.used < limit
        assert session.token_state().used == limit + offset  # all the edit freed is back
        assert session.token_state().window.blocking_limit == limit
        assert session.token_state().at_blocking_limit is refused
        if refused:
            with pytest.raises(BlockingLimitError) as caught:
                pipeline.prepare(session)
            assert (caught.value.used, caught.value.limit) == (limit + offset, limit)
            assert len(_events(session, "context_served")) == 1
        else:
            again = pipeline.prepare(session)
            assert again.tokens.used == limit - 1
            assert len(_events(session, "context_served")) == 2


class TestServerSideEdits:
    def test_edits_go_through_the_sdk_and_applied_edits_become_events(self, messages_api: Any) -> None:
        """The SDK accepts the context_management parameter; the response's applied edits are recorded."""
        session = _open()
        for n in range(3):
            _round(session, n, {f"t{n}": ("Bash", "out")})
        config = PipelineConfig(
            microcompact=MicrocompactConfig(server_side=True, server_exclude_tools=("Read",))
        )
        prepared = Pipeline(config).prepare(session)
        messages_api.next_message = {
            **messages_api.next_message,
            "id": "msg_srv",
            "context_management": {
                "applied_edits": [
                    {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 900}
                ]
            },
        }
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)

        response = client.beta.messages.create(
            model="claude-opus-5-5",
            max_tokens=100,
            betas=[sessionstore.pipeline.CONTEXT_MANAGEMENT_BETA],
            **prepared.request,
        )
        event = sessionstore.pipeline.record_applied_edits(session, response)

        sent = messages_api.requests[-1]
        assert prepared.beta
        assert sent["body"]["context_management"]["edits"][0]["type"] == "clear_tool_uses_20250919"
        assert sent["body"]["context_management"]["edits"][0]["exclude_tools"] == ["Read"]
        assert "context-management-2025-06-27" in sent["headers"].get("anthropic-beta", "")
        assert event is not None
        assert event.cleared_input_tokens == 900
        assert _events(session, "server_edits_applied")[0].payload["edits"][0]["cleared_tool_uses"] == 2


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("snip"), st.integers(1, 3)),
        st.tuples(st.just("clear"), st.integers(0, 3)),
        st.tuples(st.just("budget"), st.integers(1, 40)),
        st.tuples(st.just("revert"), st.just(0)),
        st.tuples(st.just("collapse"), st.integers(1, 3)),
        st.tuples(st.just("compact"), st.just(0)),
        # A compaction summary prepared ahead; "compact" 1 commits it when still fresh.
        st.tuples(st.just("prepare"), st.just(0)),
        st.tuples(st.just("compact"), st.just(1)),
    ),
    max_size=7,
)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.one_of(messy_logs(), turn_logs()), ops=_OPS)
# A snip after a committed collapse (it once raised KeyError: 'ids'), and one reaching into it.
@example(events=turns(["a", "b", "c", "d"], [1, 1, 1, 1], [True] * 4), ops=[("collapse", 1), ("snip", 1)])
@example(events=turns(["a", "b", "c", "d"], [1, 1, 1, 1], [True] * 4), ops=[("collapse", 3), ("snip", 1)])
# Prepared, then a collapse inside what it covers, committed, reverted; and prepared, snipped, committed.
@example(
    events=turns(["a", "b", "c", "d"], [1, 1, 1, 1], [True] * 4),
    ops=[("prepare", 0), ("collapse", 1), ("compact", 1), ("revert", 0)],
)
@example(
    events=turns(["a", "b", "c", "d"], [1, 1, 1, 1], [True] * 4),
    ops=[("compact", 0), ("prepare", 0), ("snip", 1), ("compact", 1), ("revert", 0), ("revert", 0)],
)
def test_edits_keep_requests_valid_and_reverts_restore_bytes(
    events: list[Any], ops: list[tuple[str, int]]
) -> None:
    """Any mix of snips, clears, persistence, collapses, compactions (summarized then, or prepared
    ahead and committed) and reverts: valid requests, exact undo (newest first), rebuild == live ==
    resumed from a snapshot (the pending preparation included)."""
    store = sessionstore.open_store(":memory:")
    session = Session(store, store.create_session(events=events).id, SessionConfig(snapshot_every=0))
    applied: list[tuple[str, bytes]] = []
    for op, arg in ops:
        before = session.request_bytes()
        if op == "snip":
            try:
                report = snip(session, rounds=arg)
            except ValidationError:
                continue
            state = session.api_state
            # A committed collapse is snipped whole or not at all: half a span is never shown again.
            assert all(
                end <= state.first_visible or state.first_visible <= start
                for start, end, _ in committed_spans(state)
            )
        elif op == "clear":
            report = microcompact(session, keep_recent=arg, compactable_tools=frozenset({"Read"}))
        elif op == "budget":
            budget = BudgetConfig(per_result_chars=arg, per_message_chars=arg * 2, preview_chars=8)
            decided = sessionstore.pipeline._budget.budget_stage(session, budget)
            if decided:
                session.append(decided)
            report = sessionstore.pipeline.StageReport("budget", 0, tuple(str(e.event_id) for e in decided))
        elif op == "collapse":
            span = _next_span(session, CollapseConfig(span_rounds=arg, keep_recent_rounds=0))
            if span is None:
                continue
            staged = stage_collapse(session, OfflineSummarizer(), *span)
            committed = commit_collapse(session, str(staged.event_id))
            report = sessionstore.pipeline.StageReport("collapse", 0, (str(committed.event_id),))
        elif op == "prepare":
            prepare_compaction(session, OfflineSummarizer())
            assert session.request_bytes() == before  # preparing changes nothing the model is sent
            continue
        elif op == "compact":
            compacted = compact(session, OfflineSummarizer(), use_prepared=bool(arg))
            if not compacted.ok:
                continue
            # Reverted newest first, a compaction gives the bytes before it back like any edit.
            report = sessionstore.pipeline.StageReport("compact", 0, (compacted.event_id,))
        else:
            if applied:  # undo the latest edit: the request is exactly what it was before it
                event_id, bytes_before = applied.pop()
                revert(session, event_id)
                assert session.request_bytes() == bytes_before
            continue
        if report.event_ids:  # a budget run may persist several results in one transaction
            applied.extend((event_id, before) for event_id in report.event_ids[:-1])
            applied.append((report.event_ids[-1], before))
        request = session.request()
        if request["messages"]:
            validate_request(with_tool_definitions(request))
    rebuilt = Session(store, session.id, SessionConfig(snapshot_every=0), use_snapshots=False)
    assert rebuilt.request_bytes() == session.request_bytes()
    assert rebuilt.used_tokens() == session.used_tokens()
    # Resumed from a snapshot, the messages are parsed only where an edit or the request needs
    # them: the bytes still equal serializing the request, and every revert still undoes exactly.
    session.snapshot()
    resumed = Session(store, session.id, SessionConfig(snapshot_every=0))
    # Every record (edits, replacements, collapses, the compaction, the memory) reads back equal.
    assert _state_but_messages(resumed.api_state) == _state_but_messages(session.api_state)
    for cache in (False, True):
        assert resumed.request_bytes(cache_control=cache) == session.request_bytes(cache_control=cache)
        assert request_bytes(session.request(cache_control=cache)) == session.request_bytes(
            cache_control=cache
        )
    while applied:
        event_id, before = applied.pop()
        revert(resumed, event_id)
        assert resumed.request_bytes() == before


def _state_but_messages(state: ApiContextState) -> dict[str, Any]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "messages"}


class TestSnipStage:
    def test_automatic_snip_lands_just_under_the_target(self) -> None:
        """Enabled snip fires at its trigger and removes only as many rounds as the target needs."""
        session = _open(context_window=100_000, max_output_tokens=10_000)  # effective window 90,000
        for n in range(60):
            _round(session, n, {f"t{n}": ("Bash", "word " * 800)})
        config = PipelineConfig(
            snip=sessionstore.SnipConfig(enabled=True, trigger_percent=50, target_percent=30)
        )
        used_before = session.used_tokens()

        prepared = Pipeline(config, clock=lambda: T0 + timedelta(minutes=1)).prepare(session)

        (snipped,) = _events(session, "snip_applied")
        assert used_before >= 45_000
        assert 0.8 * 27_000 <= prepared.tokens.used <= 27_000
        assert snipped.payload["rounds_removed"] < 60 - 4
        validate_request(with_tool_definitions(prepared.request))


@dataclass(frozen=True)
class _ClearGrep:
    """A stage of a user's own: clears every visible Grep result, recorded as a micro-compaction."""

    name: str = field(default="clear_grep", init=False)

    def run(self, session: Session, now: datetime) -> StageReport | None:
        state = session.api_state
        ids = [i for i, tool in state.tool_names.items() if tool == "Grep" and i not in state.replaced]
        event = MicrocompactApplied(trigger="manual", cleared_tool_use_ids=ids, keep_recent=1, tokens_freed=7)
        return record_events(session, self.name, [event] if ids else [])


class TestStageProtocol:
    def test_the_configured_stages_are_stages_run_in_stage_order(self) -> None:
        """STAGE_ORDER names the stages prepare really runs, and the reports come in that order."""
        session = _open()
        for n in range(1, 7):
            _round(session, n, {f"t{n}": ("Bash", _lines(60_000 if n == 1 else 200))})
        config = PipelineConfig(snip=SnipConfig(enabled=True), collapse=CollapseConfig(enabled=True))
        pipeline = Pipeline(config, clock=lambda: T0 + timedelta(minutes=1))

        prepared = pipeline.prepare(session)

        assert all(isinstance(stage, Stage) for stage in pipeline.stages)
        assert (*(stage.name for stage in pipeline.stages), "blocking_limit") == STAGE_ORDER
        assert [r.stage for r in prepared.reports] == [
            "tool_result_budget",
            "snip",
            "microcompact",
            "collapse",
        ]
        assert [r.stage for r in prepared.reports] == [
            s for s in STAGE_ORDER if s in {r.stage for r in prepared.reports}
        ]
        assert prepared.reports[0].event_ids  # the budget persisted t1 before the pipeline went on

    def test_a_stage_of_ones_own_runs_where_the_list_puts_it_and_records_its_events(
        self, store: SessionStore
    ) -> None:
        """Pipeline(stages=...) runs that list in order; a stage's own events reach the log and the view."""
        session = _open(store)
        _round(session, 1, {"g1": ("Grep", "match\n" * 50), "b1": ("Bash", "ok")})
        stages: list[Stage] = [
            _ClearGrep(),
            MicrocompactStage(MicrocompactConfig()),
            BudgetStage(BudgetConfig()),
        ]

        prepared = Pipeline(stages=stages, clock=lambda: T0).prepare(session)

        assert [r.stage for r in prepared.reports] == ["clear_grep", "microcompact", "tool_result_budget"]
        (cleared,) = _events(Session(store, session.id), "microcompact_applied")
        assert prepared.reports[0].event_ids == (cleared.event_id,)
        assert prepared.reports[0].tokens_freed == 7
        assert _result_content(prepared.request, "g1") == CLEARED_PLACEHOLDER
        assert _result_content(prepared.request, "b1") == "ok"
        again = Pipeline(stages=stages, clock=lambda: T0).prepare(session)
        assert again.reports[0].event_ids == ()

    def test_the_docs_example_of_a_stage_runs(self) -> None:
        """docs/pipeline.md's own stage runs after the configured ones and reports its note."""
        text = (Path(__file__).parent.parent / "docs" / "pipeline.md").read_text()
        section = text[text.index("## Stages and how to add one") :]
        code = section[section.index("```python\n") + len("```python\n") :]
        code = code[: code.index("```")]
        session = _open()
        _round(session, 1, {"t1": ("Bash", "ok")})
        namespace: dict[str, Any] = {"__name__": "pipeline_docs", "session": session}

        exec(compile(code, "docs/pipeline.md", "exec", dont_inherit=True), namespace)

        reports = namespace["prepared"].reports
        assert [r.stage for r in reports] == ["tool_result_budget", "microcompact", "message_count"]
        assert reports[-1].note == "3 messages"

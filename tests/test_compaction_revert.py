"""Reverting a compaction in place, and the compaction dry run."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore, UsageRecorded, audit
from sessionstore.audit import served_request
from sessionstore.claude_code import import_claude_code
from sessionstore.cli import main
from sessionstore.errors import CompactionRevertTooLargeError, ValidationError
from sessionstore.pipeline import CompactReport, Pipeline, PipelineConfig, compact_preview, revert, snip
from sessionstore.pipeline._collapse import collapse
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import OfflineSummarizer

from ._claude_code_corpus import corpus_file
from .messages_api import with_tool_definitions
from .strategies import examples, message_events, turns
from .test_compaction import _session
from .test_projections import messy_logs

CONFIG = SessionConfig(snapshot_every=0)
#: The corpus transcript holding a real Claude Code compaction (of a 235k-token history).
COMPACTED_TRANSCRIPT = "entireio__cli__98-78b713483d-0-full.jsonl"
TWO_COMPACTIONS = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"


def _without_compactions(store: SessionStore, session: Session) -> Session:
    """A new session holding the same log with every compaction and its revert left out.

    The events get new ids (ids are unique in a store); reverts and commits name the new ones.
    """
    events = session.log.read(1, None)
    boundaries = {e.event_id for e in events if e.type == "compact_boundary"}
    kept = [
        e
        for e in events
        if e.event_id not in boundaries
        and not (e.type == "context_edit_reverted" and e.payload_dict()["target_event_id"] in boundaries)
    ]
    new_ids = {e.event_id: str(uuid4()) for e in kept}
    copies = []
    for recorded in kept:
        update: dict[str, Any] = {"event_id": new_ids[recorded.event_id]}
        for name in ("target_event_id", "staged_event_id"):
            if name in recorded.payload_dict():
                update[name] = new_ids[recorded.payload_dict()[name]]
        copies.append(recorded.event.model_copy(update=update))
    return Session(store, store.create_session(events=copies).id, CONFIG)


def _compacted_with_usage(usage_total: int) -> tuple[Session, CompactReport]:
    """20 turns compacted (offline), then the API's usage of the compacted request."""
    session = _session(20, context_window=40_000, max_output_tokens=2_000)
    compacted = compact(session, OfflineSummarizer())
    session.append([UsageRecorded(input_tokens=usage_total - 10, output_tokens=10)])
    return session, compacted


def _database(tmp_path: Path) -> str:
    """A migrated SQLite file the CLI opens with ``--db``."""
    db = str(tmp_path / "s.db")
    assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
    return db


def _turn(n: int, tool_rounds: int) -> list[Any]:
    """One well-formed turn (prompt ``u{n}``, tool rounds, answer ``e{n}``), no session start."""
    events = turns([f"prompt {n}"], [tool_rounds], [True])[1:]
    events[0] = events[0].model_copy(update={"message_uuid": f"u{n}"})
    events[-1] = events[-1].model_copy(update={"message_uuid": f"e{n}"})
    return events


class TestRevertInPlace:
    def test_the_request_is_back_byte_for_byte_and_the_revert_is_in_the_log(self) -> None:
        """Nothing appended after it: the request is exactly the one before the compaction."""
        session = _session(4)
        before = session.request_bytes()
        compacted = compact(session, OfflineSummarizer())
        assert session.request_bytes() != before

        report = revert(session, compacted.event_id)

        assert session.request_bytes() == before
        assert report.tokens_freed < 0  # the history is back in the context
        reverted = session.log.read(session.last_seq, None)[0]
        assert reverted.type == "context_edit_reverted"
        assert reverted.payload_dict()["target_type"] == "compact_boundary"
        rebuilt = Session(session.store, session.id, CONFIG, use_snapshots=False)
        assert rebuilt.request_bytes() == before
        assert rebuilt.used_tokens() == session.used_tokens()

    def test_what_followed_stays_after_the_restored_history(self) -> None:
        """A turn appended after the compaction: the request is the log's without the compaction."""
        session = _session(3)
        compacted = compact(session, OfflineSummarizer())
        session.append(_turn(9, 1))

        revert(session, compacted.event_id)

        assert session.request_bytes() == _without_compactions(session.store, session).request_bytes()
        assert "prompt 9" in session.request_bytes().decode()

    def test_a_snapshot_taken_with_compactions_resumes_and_reverts_the_same(
        self, store: SessionStore
    ) -> None:
        """On each backend: the compactions read back from the snapshot revert as the live ones do."""
        session = _session(3, store=store)
        first = compact(session, OfflineSummarizer())
        session.append(_turn(7, 1))
        second = compact(session, OfflineSummarizer())
        session.snapshot()
        resumed = Session(store, session.id, CONFIG)
        assert resumed.api_state.earlier_compactions == session.api_state.earlier_compactions
        assert resumed.api_state.compact == session.api_state.compact

        for live in (session, resumed):
            live.refresh()
        revert(resumed, second.event_id)
        revert(resumed, first.event_id)

        assert resumed.request_bytes() == _without_compactions(store, resumed).request_bytes()

    def test_usage_measured_after_the_compaction_does_not_hide_the_history_coming_back(self) -> None:
        """ "Used" after the revert counts the restored history on top of the latest usage."""
        session = _session(6)
        compacted = compact(session, OfflineSummarizer())
        session.append([UsageRecorded(input_tokens=compacted.tokens_after, output_tokens=0)])

        revert(session, compacted.event_id)

        used = session.used_tokens()
        assert compacted.tokens_before - 5 <= used <= compacted.tokens_before + 5
        rebuilt = Session(session.store, session.id, CONFIG, use_snapshots=False)
        assert rebuilt.used_tokens() == used

    def test_a_reverted_compaction_cannot_be_reverted_again(self) -> None:
        session = _session(2)
        compacted = compact(session, OfflineSummarizer())
        revert(session, compacted.event_id)
        seq = session.last_seq

        with pytest.raises(ValidationError, match="already reverted"):
            revert(session, compacted.event_id)
        assert session.last_seq == seq


class TestWhatBuiltOnIt:
    def test_compactions_are_reverted_newest_first(self) -> None:
        session = _session(3)
        first = compact(session, OfflineSummarizer())
        session.append(_turn(5, 1))
        middle = session.request_bytes()
        second = compact(session, OfflineSummarizer())
        seq = session.last_seq

        with pytest.raises(ValidationError, match=f"followed by compaction {second.event_id}.*first"):
            revert(session, first.event_id)
        assert session.last_seq == seq

        revert(session, second.event_id)
        assert session.request_bytes() == middle
        revert(session, first.event_id)
        assert session.request_bytes() == _without_compactions(session.store, session).request_bytes()

    def test_a_later_snip_or_collapse_goes_first(self) -> None:
        """A snip or collapse recorded after the compaction was cut against it: it is reverted first."""
        session = _session(2)
        compacted = compact(session, OfflineSummarizer())
        for n in range(4):
            session.append([*_turn(10 + n, 1)])
        before_edits = session.request_bytes()
        snipped = snip(session, rounds=1)
        collapsed = collapse(session, OfflineSummarizer(), "u12", "e12")

        with pytest.raises(
            ValidationError, match=f"collapse_committed {collapsed.event_ids[1]}.*revert it first"
        ):
            revert(session, compacted.event_id)
        revert(session, collapsed.event_ids[1])
        with pytest.raises(ValidationError, match=f"snip_applied {snipped.event_ids[0]}"):
            revert(session, compacted.event_id)
        revert(session, snipped.event_ids[0])
        assert session.request_bytes() == before_edits

        revert(session, compacted.event_id)

        assert session.request_bytes() == _without_compactions(session.store, session).request_bytes()

    def test_a_message_folded_against_the_compaction_refuses_the_revert(self) -> None:
        """A prompt right after a compaction that ended on a prompt would have merged with it."""
        session = _session(2)
        session.append([MessageAppended(role="user", content="one more thing")])
        compacted = compact(session, OfflineSummarizer())
        session.append([MessageAppended(role="user", content="and another")])
        seq = session.last_seq

        with pytest.raises(ValidationError, match=f"seq {seq} was added against compaction.*fork"):
            revert(session, compacted.event_id)
        assert session.last_seq == seq


class TestDoesNotFit:
    def test_the_refusal_carries_the_numbers_and_nothing_is_written(self) -> None:
        session = _session(20, context_window=20_000, max_output_tokens=2_000)
        compacted = compact(session, OfflineSummarizer())
        seq = session.last_seq

        with pytest.raises(CompactionRevertTooLargeError) as caught:
            revert(session, compacted.event_id)

        limit = session.token_state().window.blocking_limit
        assert caught.value.limit == limit
        assert caught.value.needed >= limit
        # Nothing followed the compaction: the restored request is the one it replaced.
        assert abs(caught.value.needed - compacted.tokens_before) <= 2
        assert session.last_seq == seq

    @pytest.mark.parametrize(("offset", "fits"), [(-1, True), (0, False), (1, False)])
    def test_a_revert_that_would_land_on_the_blocking_limit_is_refused(self, offset: int, fits: bool) -> None:
        """The restored request one token under the blocking limit: reverted, and the pipeline
        serves it at that count. On the limit (SPEC 5.6 refuses a request at it) or one above:
        refused with the numbers, nothing written."""
        session, compacted = _compacted_with_usage(35_000)
        limit = session.token_state().window.blocking_limit
        with pytest.raises(CompactionRevertTooLargeError) as measured:
            revert(session, compacted.event_id)
        restored = measured.value.needed - 35_000  # what the revert puts back on the usage

        session, compacted = _compacted_with_usage(limit + offset - restored)
        seq = session.last_seq

        assert limit == 35_000  # window 40,000, max output 2,000: effective 38,000, less 3,000
        if fits:
            revert(session, compacted.event_id)
            prepared = Pipeline(PipelineConfig(auto_compact=False)).prepare(session)
            assert session.api_state.compact is None
            assert prepared.tokens.used == limit - 1
        else:
            with pytest.raises(CompactionRevertTooLargeError) as caught:
                revert(session, compacted.event_id)
            assert (caught.value.needed, caught.value.limit) == (limit + offset, limit)
            assert session.last_seq == seq

    def test_the_cli_offers_what_fits_and_recompacts(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        db = _database(tmp_path)
        session = _session(
            20, store=sessionstore.open_store(db), context_window=20_000, max_output_tokens=2_000
        )
        compacted = compact(session, OfflineSummarizer())

        status = main(["revert", "--db", db, session.id, compacted.event_id])

        err = capsys.readouterr().err
        assert status == 1
        assert "would need" in err and f"the limit is {session.token_state().window.blocking_limit}" in err
        assert f"sessionstore revert {session.id} {compacted.event_id} --recompact" in err
        assert f"sessionstore collapse {session.id} --from" in err

        out = io.StringIO()
        status = main(
            ["revert", "--db", db, session.id, compacted.event_id, "--recompact", "--json"], out=out
        )

        outcome = json.loads(out.getvalue())
        assert status == 0
        assert outcome["recompacted"]["ok"]
        session.refresh()
        assert session.api_state.reverted[compacted.event_id] == outcome["event_id"]
        assert session.api_state.compact is not None
        assert session.api_state.compact.event_id == outcome["recompacted"]["event_id"]
        assert session.token_state().used < session.token_state().window.blocking_limit

    def test_recompact_of_anything_but_a_compaction_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--recompact` on a snip: one error line, nothing recorded (the API answers 422)."""
        db = _database(tmp_path)
        session = _session(4, store=sessionstore.open_store(db))
        snipped = snip(session, 1)
        seq = session.last_seq

        status = main(["revert", "--db", db, session.id, snipped.event_ids[0], "--recompact"])

        assert status == 1
        assert "recompact applies to a compaction only" in capsys.readouterr().err
        session.refresh()
        assert session.last_seq == seq


class TestAudit:
    def test_audit_shows_the_revert_and_earlier_turns_replay_unchanged(self) -> None:
        store = sessionstore.open_store(":memory:")
        session = _session(3, store=store)
        pipeline = Pipeline(PipelineConfig(auto_compact=False))
        served_first = pipeline.prepare(session).request
        session.append([UsageRecorded(input_tokens=900, output_tokens=10)])
        compacted = compact(session, OfflineSummarizer())
        served_second = pipeline.prepare(session).request
        reverted = revert(session, compacted.event_id)
        pipeline.prepare(session)

        report = audit(store, session.id)

        by_id = {e.event_id: e for e in report.entries}
        assert by_id[compacted.event_id].reverted_by == reverted.event_ids[0]
        assert f"reverted compact_boundary {compacted.event_id}" in by_id[reverted.event_ids[0]].what
        assert served_request(session, 1).request == served_first
        assert served_request(session, 2).request == served_second


class TestClaudeCodeImports:
    def test_a_real_235k_token_compaction_does_not_fit_and_reverts_past_the_limit_if_asked(self) -> None:
        """The pre-compaction messages are in the imported log: the revert gives them back."""
        store = sessionstore.open_store(":memory:")
        session_id = import_claude_code(store, [corpus_file(COMPACTED_TRANSCRIPT)]).sessions[0].session_id
        session = Session(store, session_id)
        boundary = session.api_state.compact
        assert boundary is not None

        with pytest.raises(CompactionRevertTooLargeError) as caught:
            revert(session, boundary.event_id)
        assert caught.value.needed > caught.value.limit == session.token_state().window.blocking_limit

        revert(session, boundary.event_id, over_limit=True)

        assert session.request_bytes() == _without_compactions(store, session).request_bytes()
        sessionstore.validate_request(with_tool_definitions(session.request()))

    def test_both_compactions_of_the_fixture_revert_to_the_uncompacted_log(self) -> None:
        store = sessionstore.open_store(":memory:")
        session = Session(store, import_claude_code(store, [TWO_COMPACTIONS]).sessions[0].session_id)
        state = session.api_state
        assert state.compact is not None and len(state.earlier_compactions) == 1
        first, second = state.earlier_compactions[0].event_id, state.compact.event_id

        revert(session, second)
        revert(session, first)

        assert session.request_bytes() == _without_compactions(store, session).request_bytes()


class TestDryRun:
    def test_the_preview_is_what_the_compaction_records(self) -> None:
        session = _session(4)
        seq = session.last_seq

        preview = compact_preview(session, OfflineSummarizer(), custom_instructions="keep the file names")

        assert session.last_seq == seq
        compacted = compact(session, OfflineSummarizer(), custom_instructions="keep the file names")
        boundary = session.log.read(session.last_seq, None)[0].payload_dict()
        assert preview.summary == boundary["summary"]
        assert (preview.tokens_before, preview.tokens_after) == (
            compacted.tokens_before,
            compacted.tokens_after,
        )
        assert preview.kept_messages == 0

    def test_the_cli_dry_run_records_nothing(self, tmp_path: Path) -> None:
        db = _database(tmp_path)
        session = _session(4, store=sessionstore.open_store(db))
        seq = session.last_seq
        out = io.StringIO()

        status = main(["compact", "--db", db, session.id, "--dry-run", "--summarizer", "offline"], out=out)

        assert status == 0
        text = out.getvalue()
        assert "nothing recorded" in text and "summary:" in text
        session.refresh()
        assert session.last_seq == seq
        out = io.StringIO()
        main(["compact", "--db", db, session.id, "--dry-run", "--json", "--up-to", "a1"], out=out)
        preview = json.loads(out.getvalue())
        assert preview["dry_run"] and preview["kept_messages"] == 8 and preview["kept_from_seq"] > 0


_APPEND = st.one_of(
    st.builds(lambda n, rounds: _turn(n, rounds), st.integers(0, 99), st.integers(0, 2)),
    st.builds(lambda m: [m], message_events()),
)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["compact", "compact", "revert"]), st.just([])),
        st.tuples(st.just("append"), _APPEND),
    ),
    max_size=8,
)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.one_of(messy_logs(), st.just(turns(["a", "b"], [1, 0], [True, True]))), steps=_STEPS)
@example(
    events=turns(["a", "b"], [1, 1], [True, True]),
    steps=[("compact", []), ("append", _turn(1, 1)), ("compact", []), ("append", _turn(2, 0))],
)
def test_reverting_every_compaction_gives_the_log_without_them(
    events: list[Any], steps: list[tuple[str, list[Any]]]
) -> None:
    """Sessions x compactions x reverts x appends: with every compaction reverted, the request is
    the one of the same log without the compactions; a revert with nothing appended after its
    compaction gives the bytes before it back; a refused revert writes nothing."""
    store = sessionstore.open_store(":memory:")
    session = Session(store, store.create_session(events=events).id, CONFIG)
    stack: list[tuple[str, bytes, int]] = []  # (boundary id, request before it, last seq after it)
    refused = False

    def revert_latest() -> None:
        nonlocal refused
        event_id, before, seq_after = stack.pop()
        seq = session.last_seq
        try:
            revert(session, event_id, over_limit=True)
        except ValidationError as e:
            assert "fork the session" in str(e)
            assert session.last_seq == seq
            refused = True
            return
        if seq == seq_after:
            assert session.request_bytes() == before

    for step, appended in steps:
        if step == "compact":
            before = session.request_bytes()
            try:
                compacted = compact(session, OfflineSummarizer())
            except ValidationError:
                continue
            if compacted.ok:
                stack.append((compacted.event_id, before, session.last_seq))
                event("compacted")
        elif step == "revert" and stack:
            revert_latest()
        elif step == "append":
            session.append(appended)
            stack = [(e, b, -1) for e, b, _ in stack]  # something now follows every compaction
    session.snapshot()
    resumed = Session(store, session.id, CONFIG)
    assert resumed.api_state.compact == session.api_state.compact
    assert resumed.api_state.earlier_compactions == session.api_state.earlier_compactions
    while stack and not refused:
        revert_latest()
    event(f"compactions {'refused' if refused else 'all reverted'}")
    if refused:
        return
    resumed.refresh()
    rebuilt = Session(store, session.id, CONFIG, use_snapshots=False)
    expected = _without_compactions(store, session).request_bytes()
    for view in (session, resumed, rebuilt):
        assert view.request_bytes() == expected

"""The token timeline (the gauge over turns, with stage markers) and the /context breakdown."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, UsageRecorded
from sessionstore.audit import BREAKDOWN_CATEGORIES, audit, context_breakdown, token_timeline
from sessionstore.errors import SessionNotFoundError
from sessionstore.pipeline import OfflineSummarizer, compact

from .test_audit import _scripted


class TestTokenTimeline:
    def test_one_turn_per_served_request_with_its_recorded_tokens(
        self, store: sessionstore.SessionStore
    ) -> None:
        """Each ContextServed is a turn, with the used tokens recorded when it went out."""
        session = _scripted(store)
        served = [e for e in session.transcript if e.type == "context_served"]

        timeline = token_timeline(store, session.id)

        assert [t.turn for t in timeline.turns] == list(range(1, len(served) + 1))
        assert [t.used for t in timeline.turns] == [e.payload["token_count"] for e in served]
        assert {t.source for t in timeline.turns} == {"served"}
        assert timeline.window.effective_window == session.token_state().window.effective_window

    def test_each_stage_is_marked_at_the_first_turn_it_shaped(self, store: sessionstore.SessionStore) -> None:
        """Every context operation of the audit is on the timeline once, at the turn after it."""
        session = _scripted(store)

        timeline = token_timeline(session)

        marked = {m.event_id: (m.kind, turn.turn) for turn in timeline.turns for m in turn.stages}
        assert {e.event_id for e in audit(session).entries} == set(marked)
        assert marked[_event_id(session, "tool_result_persisted")] == ("tool_result_persisted", 2)
        assert marked[_event_id(session, "microcompact_applied")][1] == 9
        assert marked[_event_id(session, "compact_boundary")][1] == 10
        assert timeline.turns[9].used < timeline.turns[8].used  # the compaction shrank turn 10
        assert timeline.pending == []

    def test_a_reverted_collapse_is_marked_with_its_revert(self, store: sessionstore.SessionStore) -> None:
        """The committed collapse the script reverted carries the revert's event id."""
        session = _scripted(store)

        markers = [m for t in token_timeline(session).turns for m in t.stages]

        committed = next(m for m in markers if m.kind == "collapse_committed")
        revert = next(m for m in markers if m.kind == "context_edit_reverted")
        assert committed.reverted_by == revert.event_id

    def test_stages_after_the_last_turn_are_pending(self, store: sessionstore.SessionStore) -> None:
        """A compaction recorded after the last served request waits in ``pending``."""
        session = _scripted(store)
        session.append(
            [MessageAppended(role="user", content="more"), MessageAppended(role="assistant", content="ok")]
        )
        compact(session, OfflineSummarizer())

        timeline = token_timeline(session)

        assert [m.kind for m in timeline.pending] == ["compact_boundary"]
        assert timeline.pending[0].turn is None

    def test_without_served_requests_each_usage_is_a_turn(self, store: sessionstore.SessionStore) -> None:
        """An imported session has no ContextServed: the API usage of each response is the gauge."""
        session = Session.create(store, model="claude-opus-5-5")
        for n, tokens in enumerate((1_000, 2_500, 4_000)):
            session.append(
                [
                    MessageAppended(role="user", content=f"question {n}"),
                    MessageAppended(role="assistant", content=f"answer {n}", api_message_id=f"m{n}"),
                    UsageRecorded(input_tokens=tokens, output_tokens=50, cache_read_input_tokens=10),
                ]
            )

        timeline = token_timeline(session)

        assert [(t.turn, t.used, t.source) for t in timeline.turns] == [
            (1, 1_060, "usage"),
            (2, 2_560, "usage"),
            (3, 4_060, "usage"),
        ]

    def test_to_dict_is_json_ready(self, store: sessionstore.SessionStore) -> None:
        """The web viewer serves it as JSON: every turn, its stages and the window."""
        import json

        data = json.loads(json.dumps(token_timeline(_scripted(store)).to_dict()))

        assert len(data["turns"]) == 10
        assert data["turns"][1]["stages"][0]["kind"] == "tool_result_persisted"
        assert data["window"]["effective_window"] > 0


class TestContextBreakdown:
    def test_every_category_of_the_next_request(self, store: sessionstore.SessionStore) -> None:
        """System, tools, messages and tool results are counted apart; nothing is a summary yet."""
        session = _with_tools(store)

        breakdown = context_breakdown(store, session.id)

        tokens = {row.category: row.tokens for row in breakdown.rows}
        blocks = {row.category: row.blocks for row in breakdown.rows}
        assert [row.category for row in breakdown.rows] == list(BREAKDOWN_CATEGORIES)
        assert tokens["system"] > 0 and blocks["system"] == 1
        assert tokens["tools"] > 0 and blocks["tools"] == 2
        assert tokens["tool results"] > tokens["messages"] > 0  # the results are the bulk
        assert blocks["tool results"] == 3
        assert tokens["summaries"] == 0 and blocks["summaries"] == 0
        assert breakdown.estimated == sum(tokens.values())

    def test_a_compaction_summary_is_a_summary(self, store: sessionstore.SessionStore) -> None:
        """After a compaction the summary message counts as summaries, and the results are gone."""
        session = _with_tools(store)
        compact(session, OfflineSummarizer())

        tokens = {row.category: row.tokens for row in context_breakdown(session).rows}

        assert tokens["summaries"] > 0
        assert tokens["tool results"] == 0

    def test_free_space_and_the_autocompact_buffer_come_from_the_window(
        self, store: sessionstore.SessionStore
    ) -> None:
        """Free is what the used tokens leave of the effective window; the buffer is above the threshold."""
        session = _with_tools(store)
        state = session.token_state()

        breakdown = context_breakdown(session)

        assert breakdown.used == state.used
        assert breakdown.unattributed == state.used - breakdown.estimated
        assert breakdown.free == state.window.effective_window - state.used
        assert (
            breakdown.autocompact_buffer == state.window.effective_window - state.window.autocompact_threshold
        )
        assert breakdown.percent_left == state.percent_left

    def test_a_missing_session_is_a_typed_error(self, store: sessionstore.SessionStore) -> None:
        """Both data functions raise SessionNotFoundError naming the session."""
        with pytest.raises(SessionNotFoundError, match="no-such"):
            context_breakdown(store, "no-such")
        with pytest.raises(SessionNotFoundError, match="no-such"):
            token_timeline(store, "no-such")


def _event_id(session: Session, kind: str) -> str:
    return next(e.event_id for e in session.transcript if e.type == kind)


def _with_tools(store: sessionstore.SessionStore) -> Session:
    """A session with a system prompt, two tools and three tool calls with sizeable results."""
    tools = [
        {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}},
        {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
    ]
    session = Session.create(
        store, model="claude-opus-5-5", system="You are a careful engineer.", tools=tools
    )
    for n in range(3):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"file_path": f"/src/m{n}.py"}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"line {n}\n" * 400}
        session.append(
            [
                MessageAppended(role="user", content=f"look at module {n}"),
                MessageAppended(role="assistant", content=[call], api_message_id=f"m{n}"),
                MessageAppended(role="user", content=[result]),
                MessageAppended(role="assistant", content=f"module {n} reads fine"),
            ]
        )
    return session

"""What a compaction records beside its boundary: the preserved segment, listings told again,
sub-agents still running; how they export, import and revert."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore
from sessionstore.agent import Conversation, finish_subagent, spawn_subagent
from sessionstore.claude_code import export_claude_code, import_claude_code, write_claude_code
from sessionstore.errors import ValidationError
from sessionstore.events import ListingDelta, SubagentStatusRestored, line_uuid
from sessionstore.pipeline import (
    CompactConfig,
    CompactHooks,
    announce_listings,
    compact_preview,
    listings,
    revert,
    running_subagents,
)
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import OfflineSummarizer

from .messages_api import BASH_TOOL, prompt_too_long, text_message, tool_use_message
from .strategies import examples
from .test_compaction import _session
from .test_compaction_revert import _turn, _without_compactions

CONFIG = SessionConfig(snapshot_every=0)
TWO_COMPACTIONS = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"
TOOLS = {"WebFetch": "Fetch a URL", "CronCreate": ""}
AGENTS = {"Explore": "Read-only search agent", "Plan": "Plans a change"}
MCP = {"linear": "Use the issue tracker for tickets."}


def _texts(session: Session) -> list[str]:
    """Every text block of the next request's messages, in order."""
    return [
        block["text"]
        for message in session.request()["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
    ]


def _recorded(session: Session, kind: type[Any]) -> list[Any]:
    return [r.event for r in session.log.read(1, None) if isinstance(r.event, kind)]


def _rebuilt(session: Session) -> list[Session]:
    """The session read again from the log alone, and resumed from a snapshot."""
    session.snapshot()
    return [
        Session(session.store, session.id, CONFIG, use_snapshots=False),
        Session(session.store, session.id, CONFIG),
    ]


class TestPreservedSegment:
    def test_a_compaction_keeping_the_tail_records_its_first_and_last_message_and_the_summary(self) -> None:
        """``--up-to``: head and tail are the kept messages' uuids, the anchor the summary line."""
        session = _session(4)

        done = compact(session, OfflineSummarizer(), up_to_uuid="a1")

        boundary = _recorded(session, sessionstore.CompactBoundary)[-1]
        segment = boundary.preserved_segment
        assert (segment.head_uuid, segment.tail_uuid) == ("p2", "a3")
        assert segment.anchor_uuid == line_uuid(done.event_id, "summary")

    def test_a_partial_from_compaction_hangs_the_kept_messages_off_its_boundary(self) -> None:
        """``--from``: the messages before the pivot are kept; the anchor is the boundary line."""
        session = _session(4)

        done = compact(session, OfflineSummarizer(), from_uuid="p2")

        segment = _recorded(session, sessionstore.CompactBoundary)[-1].preserved_segment
        assert (segment.head_uuid, segment.tail_uuid) == ("p0", "a1")
        assert segment.anchor_uuid == line_uuid(done.event_id, "boundary")

    def test_a_compaction_keeping_nothing_has_no_segment_and_exports_as_before(self) -> None:
        """Nothing kept: no segment, and the boundary line carries only trigger and tokens."""
        session = _session(3)

        compact(session, OfflineSummarizer())

        assert _recorded(session, sessionstore.CompactBoundary)[-1].preserved_segment is None
        line = next(
            json.loads(t) for t in export_claude_code(session.store, session.id) if "compactMetadata" in t
        )
        assert list(line["compactMetadata"]) == ["trigger", "preTokens"]

    def test_the_export_writes_claude_codes_segment_and_reimports_to_the_same_request(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        """On each backend: ``preservedSegment`` and ``preservedMessages`` name the kept lines and
        the summary line; the re-imported session keeps the same messages and sends the same text."""
        session = _session(4, store=store)
        done = compact(session, OfflineSummarizer(), up_to_uuid="a1")
        lines = [json.loads(t) for t in export_claude_code(store, session.id)]

        boundary = next(line for line in lines if line.get("subtype") == "compact_boundary")
        summary = next(line for line in lines if line.get("isCompactSummary"))
        metadata = boundary["compactMetadata"]
        assert metadata["preservedSegment"] == {
            "headUuid": "p2",
            "anchorUuid": summary["uuid"],
            "tailUuid": "a3",
        }
        assert metadata["preservedMessages"] == {
            "anchorUuid": summary["uuid"],
            "uuids": ["p2", "c2", "r2", "a2", "p3", "c3", "r3", "a3"],
        }
        assert summary["uuid"] == line_uuid(done.event_id, "summary")

        write_claude_code(store, session.id, tmp_path)
        elsewhere = sessionstore.open_store(":memory:")
        report = import_claude_code(elsewhere, [tmp_path / f"{session.id}.jsonl"])
        copy = Session(elsewhere, report.sessions[0].session_id, CONFIG)
        imported = _recorded(copy, sessionstore.CompactBoundary)[-1]
        assert (
            imported.preserved_segment
            == _recorded(session, sessionstore.CompactBoundary)[-1].preserved_segment
        )
        assert [m["content"] for m in copy.request()["messages"][1:]] == [
            m["content"] for m in session.request()["messages"][1:]
        ]

    def test_an_imported_claude_code_compaction_keeps_its_segment(self, store: SessionStore) -> None:
        """Claude Code 2.1.332's ``preservedSegment`` is recorded on the imported boundaries."""
        report = import_claude_code(store, [TWO_COMPACTIONS])
        session = Session(store, report.sessions[0].session_id, CONFIG)
        raw = [json.loads(line) for line in TWO_COMPACTIONS.read_text().splitlines() if line.strip()]
        expected = [
            line["compactMetadata"]["preservedSegment"]
            for line in raw
            if line.get("subtype") == "compact_boundary"
        ]

        recorded = [b.preserved_segment for b in _recorded(session, sessionstore.CompactBoundary)]

        assert [(s.head_uuid, s.anchor_uuid, s.tail_uuid) for s in recorded] == [
            (e["headUuid"], e["anchorUuid"], e["tailUuid"]) for e in expected
        ]
        assert "\n".join(export_claude_code(store, session.id)) + "\n" == TWO_COMPACTIONS.read_text()


class TestListings:
    def test_announcing_records_only_what_changed_and_the_model_reads_it(self) -> None:
        """One delta per changed listing, in the conversation; the same listing again adds nothing."""
        session = _session(1)

        first = announce_listings(session, deferred_tools=TOOLS, agents=AGENTS)
        again = announce_listings(session, deferred_tools=TOOLS, agents=AGENTS)
        changed = announce_listings(session, deferred_tools={"WebFetch": "Fetch a URL", "Monitor": ""})

        assert [d.kind for d in first] == ["deferred_tools", "agents"]
        assert again == []
        assert changed[0].added == {"Monitor": ""}
        assert changed[0].removed == ["CronCreate"]
        texts = _texts(session)
        assert first[0].text in texts and first[1].text in texts and changed[0].text in texts
        assert "- WebFetch: Fetch a URL" in first[0].text and "- CronCreate\n" in first[0].text
        assert "no longer available:\n- CronCreate" in changed[0].text
        current = listings(session.transcript)
        assert set(current["deferred_tools"]) == {"WebFetch", "Monitor"}

    def test_a_compaction_tells_every_listing_again_after_its_attachments(self) -> None:
        """The summary replaced the announcements: each listing comes back whole, after the restored
        files and skills and before the hook results, recorded as events naming the boundary."""
        session = _session(3)
        announce_listings(session, deferred_tools=TOOLS, agents=AGENTS, mcp_instructions=MCP)
        announce_listings(session, deferred_tools={"WebFetch": "Fetch a URL"})
        session.append([sessionstore.events.PlanUpdated(plan="1. ship it")])
        hooks = CompactHooks(post_compact=[lambda summary: "hook says hi"])

        done = compact(session, OfflineSummarizer(), config=CompactConfig(hooks=hooks))

        again = [d for d in _recorded(session, ListingDelta) if d.compaction_event_id == done.event_id]
        assert {d.kind: d.added for d in again} == {
            "deferred_tools": {"WebFetch": "Fetch a URL"},
            "agents": AGENTS,
            "mcp_instructions": MCP,
        }
        texts = _texts(session)
        plan = next(i for i, t in enumerate(texts) if t.startswith("[Current plan]"))
        told = [texts.index(d.text) for d in again]
        assert plan < min(told) and max(told) < texts.index("hook says hi")
        assert "## linear\nUse the issue tracker" in again[2].text
        for other in _rebuilt(session):
            assert other.request_bytes() == session.request_bytes()
            assert other.used_tokens() == session.used_tokens()

    def test_announcements_the_kept_messages_still_show_are_not_repeated(self) -> None:
        """A delta after the kept point stays visible verbatim: only what came before is told again."""
        session = _session(2)
        announce_listings(session, agents=AGENTS)
        session.append(_turn(5, 0))
        announce_listings(session, deferred_tools=TOOLS)
        session.append(_turn(6, 0))

        done = compact(session, OfflineSummarizer(), up_to_uuid="e5")

        again = [d for d in _recorded(session, ListingDelta) if d.compaction_event_id == done.event_id]
        assert [(d.kind, d.added) for d in again] == [("agents", AGENTS)]
        kept = _recorded(session, ListingDelta)[1]
        assert _texts(session).count(kept.text) == 1

    def test_a_second_compaction_does_not_summarize_the_first_ones_announcements(self) -> None:
        """What the first compaction told again is stripped from the summarizer's input and told
        once more after the second: the request holds each listing once."""
        session = _session(2)
        announce_listings(session, agents=AGENTS)
        first = compact(session, OfflineSummarizer())
        session.append(_turn(7, 1))
        told = next(d for d in _recorded(session, ListingDelta) if d.compaction_event_id == first.event_id)

        second = compact(session, OfflineSummarizer())

        summary = _recorded(session, sessionstore.CompactBoundary)[-1].summary
        assert "Read-only search agent" not in summary
        again = [d for d in _recorded(session, ListingDelta) if d.compaction_event_id == second.event_id]
        assert [d.added for d in again] == [AGENTS]
        assert _texts(session).count(told.text) == 1

    def test_reverting_the_compaction_takes_its_announcements_with_it(self) -> None:
        """The request is byte for byte the one before the compaction: what it told again goes too,
        the conversation's own announcements stay where they were."""
        session = _session(3)
        announce_listings(session, deferred_tools=TOOLS, agents=AGENTS)
        before = session.request_bytes()
        used = session.used_tokens()
        done = compact(session, OfflineSummarizer())

        revert(session, done.event_id)

        assert session.request_bytes() == before
        assert session.used_tokens() == used
        for other in _rebuilt(session):
            assert other.request_bytes() == before

    def test_native_deltas_export_as_claude_code_attachments_and_round_trip(
        self, store: SessionStore, tmp_path: Path
    ) -> None:
        """On each backend: each delta is a ``deferred_tools_delta`` / ``agent_listing_delta`` /
        ``mcp_instructions_delta`` line; imported back they are the same listings (kept as state),
        and the re-imported session exports byte for byte."""
        session = _session(1, store=store)
        announce_listings(session, deferred_tools=TOOLS, agents=AGENTS, mcp_instructions=MCP)
        announce_listings(session, agents={"Explore": "Read-only search agent"})
        lines = [json.loads(t) for t in export_claude_code(store, session.id)]
        attachments = [line["attachment"] for line in lines if line.get("type") == "attachment"]

        assert [a["type"] for a in attachments] == [
            "deferred_tools_delta",
            "agent_listing_delta",
            "mcp_instructions_delta",
            "agent_listing_delta",
        ]
        assert attachments[0]["addedNames"] == ["WebFetch", "CronCreate"]
        assert attachments[0]["addedLines"] == ["Fetch a URL", "CronCreate"]
        assert attachments[1]["addedLines"] == ["- Explore: Read-only search agent", "- Plan: Plans a change"]
        assert attachments[1]["isInitial"] and not attachments[3]["isInitial"]
        assert attachments[3]["removedTypes"] == ["Plan"]
        assert attachments[2]["addedBlocks"] == [MCP["linear"]]

        write_claude_code(store, session.id, tmp_path)
        path = tmp_path / f"{session.id}.jsonl"
        elsewhere = sessionstore.open_store(":memory:")
        copy_id = import_claude_code(elsewhere, [path]).sessions[0].session_id
        copy = Session(elsewhere, copy_id, CONFIG)
        assert {k: {n: e.line for n, e in v.items()} for k, v in listings(copy.transcript).items()} == {
            k: {n: e.line for n, e in v.items()} for k, v in listings(session.transcript).items()
        }
        assert all(not d.shown for d in _recorded(copy, ListingDelta))
        assert "\n".join(export_claude_code(elsewhere, copy_id)) + "\n" == path.read_text()

    def test_an_imported_listing_is_told_after_a_compaction_made_here(self, tmp_path: Path) -> None:
        """Claude Code's announcements are not in the rebuilt request (their rendering is not in
        the transcript), but a compaction made in the store tells them to the model."""
        session = _session(2)
        announce_listings(session, agents=AGENTS)
        write_claude_code(session.store, session.id, tmp_path)
        store = sessionstore.open_store(":memory:")
        copy_id = import_claude_code(store, [tmp_path / f"{session.id}.jsonl"]).sessions[0].session_id
        copy = Session(store, copy_id, CONFIG)
        assert not any("Read-only search agent" in t for t in _texts(copy))

        compact(copy, OfflineSummarizer())

        assert any("- Explore: Read-only search agent" in t for t in _texts(copy))


class TestRunningSubagents:
    def _parent(self, store: SessionStore | None = None) -> Session:
        session = _session(2, store=store)
        call = {"type": "tool_use", "id": "toolu_agent", "name": "Agent", "input": {"prompt": "find the bug"}}
        session.append([MessageAppended(role="assistant", content=[call], api_message_id="m_agent")])
        return session

    def test_a_background_sub_agent_running_when_the_parent_compacts_is_told_again(
        self, store: SessionStore
    ) -> None:
        """On each backend: the launch was acknowledged, the child still works; after the parent's
        compaction the model reads which sub-agent runs, for which call, and its task."""
        parent = self._parent(store)
        child = spawn_subagent(parent, "toolu_agent", agent_type="Explore", background=True)
        child.append([MessageAppended(role="user", content="find the bug in parser.py")])
        launched = {"type": "tool_result", "tool_use_id": "toolu_agent", "content": "launched in background"}
        parent.append([MessageAppended(role="user", content=[launched, {"type": "text", "text": "go on"}])])
        parent.append([MessageAppended(role="assistant", content="waiting", api_message_id="m_wait")])
        child.append([MessageAppended(role="assistant", content="reading parser.py", api_message_id="c1")])

        done = compact(parent, OfflineSummarizer())

        restored = _recorded(parent, SubagentStatusRestored)
        assert [(r.child_session_id, r.agent_type, r.parent_tool_use_id) for r in restored] == [
            (child.id, "Explore", "toolu_agent")
        ]
        assert restored[0].compaction_event_id == done.event_id
        assert "find the bug in parser.py" in restored[0].text
        assert restored[0].text in _texts(parent)
        for other in _rebuilt(parent):
            assert other.request_bytes() == parent.request_bytes()

    def test_a_parent_loop_that_compacts_while_its_sub_agent_runs_sends_the_restore(
        self, store: SessionStore, messages_api: Any
    ) -> None:
        """On each backend, the real SDK against the local Messages API: the parent's tool starts a
        background sub-agent; the next call is refused as too long, the reactive compaction runs,
        and the retried request tells the model the sub-agent still runs and its agent types."""
        messages_api.queue += [
            tool_use_message("toolu_agent", "Agent", {"prompt": "audit the parser"}, "msg_1"),
            prompt_too_long(210_000),
            text_message("waiting for the audit", "msg_2"),
        ]
        agent_tool = {**BASH_TOOL, "name": "Agent", "description": "Start a sub-agent."}
        parent = Session.create(store, model="claude-opus-5-5", tools=[agent_tool], config=CONFIG)
        for n in range(4):
            parent.append(
                [
                    MessageAppended(role="user", content=f"q{n}"),
                    MessageAppended(role="assistant", content=f"a{n} " * 200),
                ]
            )
        announce_listings(parent, agents=AGENTS)
        children: list[Session] = []

        def start_agent(use: dict[str, Any]) -> str:
            child = spawn_subagent(parent, use["id"], agent_type="Explore", background=True)
            child.append([MessageAppended(role="user", content=use["input"]["prompt"])])
            children.append(child)
            return "Launched in the background."

        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        loop = Conversation(parent, client, model="claude-opus-5-5")
        loop.user("audit the parser in the background")
        loop.run(start_agent)

        retried = messages_api.requests[-1]["body"]["messages"]
        sent = [
            b["text"]
            for m in retried
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "text"
        ]
        restored = _recorded(parent, SubagentStatusRestored)
        assert [r.child_session_id for r in restored] == [children[0].id]
        assert restored[0].text in sent
        assert "audit the parser" in restored[0].text
        assert any("- Explore: Read-only search agent" in t for t in sent)
        assert sent[0].startswith("This session continues")

    def test_a_finished_sub_agent_is_not_restored(self) -> None:
        """``finish_subagent`` (its result delivered) ends it; so does a foreground one's answer."""
        parent = self._parent()
        background = spawn_subagent(parent, "toolu_agent", background=True)
        answer = {"type": "tool_result", "tool_use_id": "toolu_agent", "content": "launched"}
        parent.append([MessageAppended(role="user", content=[answer])])
        parent.append(
            [
                MessageAppended(
                    role="assistant",
                    content=[{"type": "tool_use", "id": "toolu_fg", "name": "Agent", "input": {}}],
                    api_message_id="m_fg",
                )
            ]
        )
        foreground = spawn_subagent(parent, "toolu_fg")
        assert [a.child_session_id for a in running_subagents(parent.transcript)] == [
            background.id,
            foreground.id,
        ]
        parent.append(
            [
                MessageAppended(
                    role="user", content=[{"type": "tool_result", "tool_use_id": "toolu_fg", "content": "42"}]
                )
            ]
        )
        finish_subagent(parent, background.id)

        compact(parent, OfflineSummarizer())

        assert running_subagents(parent.transcript) == []
        assert _recorded(parent, SubagentStatusRestored) == []

    def test_a_foreground_sub_agent_whose_call_is_still_open_is_restored(self) -> None:
        """The compaction summarizes the open call away: the model is told the sub-agent still runs."""
        parent = self._parent()
        child = spawn_subagent(parent, "toolu_agent", agent_type="Plan")

        compact(parent, OfflineSummarizer())

        assert [r.child_session_id for r in _recorded(parent, SubagentStatusRestored)] == [child.id]

    def test_the_dry_run_lists_what_the_compaction_would_tell_again(self) -> None:
        """``compact_preview`` names each listing and running sub-agent, and counts them in the
        tokens after, which the compaction then reaches."""
        parent = self._parent()
        child = spawn_subagent(parent, "toolu_agent", background=True)
        announce_listings(parent, agents=AGENTS)

        preview = compact_preview(parent, OfflineSummarizer())
        done = compact(parent, OfflineSummarizer())

        told = [(kind, name) for kind, name, tokens in preview.attachments if tokens > 0]
        assert told == [("listing", "agents"), ("subagent", child.id)]
        assert preview.tokens_after == done.tokens_after

    def test_reverting_the_compaction_takes_the_restore_with_it(self) -> None:
        """Byte for byte the request before the compaction."""
        parent = self._parent()
        spawn_subagent(parent, "toolu_agent", background=True)
        before = parent.request_bytes()
        done = compact(parent, OfflineSummarizer())
        assert _recorded(parent, SubagentStatusRestored)

        revert(parent, done.event_id)

        assert parent.request_bytes() == before

    def test_finishing_a_sub_agent_the_session_never_started_is_refused(self) -> None:
        """A typo in the child id: a clear error, nothing written."""
        parent = self._parent()
        seq = parent.last_seq

        with pytest.raises(ValidationError, match="started no sub-agent 'nope'"):
            finish_subagent(parent, "nope")

        assert parent.last_seq == seq

    def test_imported_sub_agents_linked_after_their_answer_are_not_running(self, store: SessionStore) -> None:
        """An import links each sub-agent after the tool result that names it: it had finished."""
        fixture = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-agent"
        report = import_claude_code(store, [fixture])
        main = next(s for s in report.sessions if s.parent_session_id is None)
        session = Session(store, main.session_id, CONFIG)

        assert any(e.type == "subagent_started" for e in session.transcript)
        assert running_subagents(session.transcript) == []


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["compact", "compact", "revert"]), st.just(None)),
        st.tuples(
            st.just("append"),
            st.builds(lambda n, rounds: _turn(n, rounds), st.integers(0, 99), st.integers(0, 2)),
        ),
        st.tuples(
            st.just("announce"),
            st.fixed_dictionaries(
                {},
                optional={
                    "deferred_tools": st.dictionaries(
                        st.sampled_from(["A", "B", "C"]), st.sampled_from(["", "x"])
                    ),
                    "agents": st.dictionaries(
                        st.sampled_from(["Explore", "Plan"]), st.sampled_from(["y", "z"])
                    ),
                },
            ),
        ),
        st.tuples(st.just("spawn"), st.booleans()),
    ),
    max_size=8,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS)
def test_with_announcements_and_sub_agents_reverting_every_compaction_gives_the_log_without_them(
    steps: list[tuple[str, Any]],
) -> None:
    """Turns, listing changes, sub-agent spawns, compactions and reverts in any order: live,
    rebuilt and resumed views agree, and with every compaction reverted the request is the one
    the same log gives without the compactions (their announcements and restores go with them)."""
    session = _session(2)
    stack: list[str] = []
    spawned = 0
    for step, value in steps:
        if step == "compact":
            done = compact(session, OfflineSummarizer())
            if done.ok:
                stack.append(done.event_id)
                event("compacted")
        elif step == "revert" and stack:
            try:
                revert(session, stack[-1], over_limit=True)
            except ValidationError:
                return  # a later message depended on it: refused, as test_compaction_revert checks
            stack.pop()
        elif step == "append":
            session.append(value)
        elif step == "announce":
            announce_listings(session, **value)
        elif step == "spawn":
            spawned += 1
            spawn_subagent(session, f"toolu_spawn{spawned}", background=value)
    for other in _rebuilt(session):
        assert other.request_bytes() == session.request_bytes()
        assert other.used_tokens() == session.used_tokens()
    while stack:
        try:
            revert(session, stack.pop(), over_limit=True)
        except ValidationError:
            return
    assert session.request_bytes() == _without_compactions(session.store, session).request_bytes()


def test_a_listing_line_an_earlier_import_kept_opaque_stays_so_when_the_file_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transcript imported before listings were read, then grown: only its new lines are added,
    no listing delta for an old line lands at the end of the log."""
    from sessionstore.claude_code import _import

    session = _session(1)
    announce_listings(session, agents=AGENTS)
    write_claude_code(session.store, session.id, tmp_path)
    path = tmp_path / f"{session.id}.jsonl"
    store = sessionstore.open_store(":memory:")
    with monkeypatch.context() as patched:
        patched.setattr(_import, "_LISTING_ATTACHMENTS", {})
        copy_id = import_claude_code(store, [path]).sessions[0].session_id
    assert [r.type for r in store.read(copy_id)].count("opaque_entry") == 1
    grown = json.loads(path.read_text().splitlines()[-1])
    grown.update({"uuid": "late", "parentUuid": grown["uuid"], "type": "user"})
    grown.pop("attachment")
    grown["message"] = {"role": "user", "content": "one more"}
    path.write_text(path.read_text() + json.dumps(grown) + "\n")

    report = import_claude_code(store, [path])

    added = [r.type for r in store.read(copy_id)][-report.sessions[0].written :]
    assert added == ["imported_entry", "message_appended"]
    assert "listing_delta" not in [r.type for r in store.read(copy_id)]

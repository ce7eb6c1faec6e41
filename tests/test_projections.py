"""Projections: the API request is the same however it was computed, and always valid."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import (
    Event,
    MessageAppended,
    Session,
    SessionConfig,
    SessionStarted,
    UsageRecorded,
    validate_request,
)
from sessionstore.events import ContextConfigured
from sessionstore.projections._api_context import ApiContextProjection, request_bytes
from sessionstore.projections._base import fold, save_snapshot
from sessionstore.projections._transcript import TranscriptProjection

from .conftest import Backend
from .messages_api import with_tool_definitions
from .strategies import examples


@st.composite
def messy_logs(draw: st.DrawFn) -> list[Event]:
    """Random sessions: streamed chunks, parallel and interrupted tool calls, orphans, meta, usage."""
    events: list[Event] = [SessionStarted(model="claude-sonnet-4-5")]
    issued: list[str] = []
    api_id: str | None = None
    for step in range(draw(st.integers(0, 25))):
        kind = draw(
            st.sampled_from(
                [
                    "user",
                    "user",
                    "result",
                    "result",
                    "assistant",
                    "assistant",
                    "same_round",
                    "meta",
                    "side",
                    "usage",
                    "config",
                ]
            )
        )
        if kind == "user":
            text = draw(st.sampled_from(["please continue", "   ", "", "fix the bug in a.py"]))
            events.append(MessageAppended(role="user", content=text))
        elif kind == "result":
            known = draw(st.sampled_from([*issued, "toolu_unknown"])) if issued else "toolu_unknown"
            content: Any = draw(st.sampled_from(["ok", "", [{"type": "text", "text": "line 1"}]]))
            events.append(
                MessageAppended(
                    role="user", content=[{"type": "tool_result", "tool_use_id": known, "content": content}]
                )
            )
        elif kind in ("assistant", "same_round"):
            if kind == "assistant" or api_id is None:
                api_id = f"msg_{step}"
            blocks: list[dict[str, Any]] = []
            for i in range(draw(st.integers(1, 3))):
                choice = draw(st.sampled_from(["text", "tool", "tool", "thinking", "empty"]))
                if choice == "tool":
                    tool_id = f"toolu_{step}_{i}"
                    issued.append(tool_id)
                    blocks.append(
                        {"type": "tool_use", "id": tool_id, "name": "Read", "input": {"path": f"f{i}.py"}}
                    )
                elif choice == "thinking":
                    blocks.append({"type": "thinking", "thinking": "hmm", "signature": f"sig{step}"})
                else:
                    blocks.append({"type": "text", "text": "" if choice == "empty" else f"answer {step}"})
            events.append(MessageAppended(role="assistant", content=blocks, api_message_id=api_id))
        elif kind == "meta":
            events.append(
                MessageAppended(role="user", content="<system-reminder>meta</system-reminder>", is_meta=True)
            )
        elif kind == "side":
            events.append(MessageAppended(role="assistant", content="sub-agent says hi", is_sidechain=True))
        elif kind == "usage":
            events.append(
                UsageRecorded(input_tokens=draw(st.integers(0, 5000)), output_tokens=7, api_message_id=api_id)
            )
        else:
            events.append(
                ContextConfigured(
                    system=f"system v{step}", tools=[{"name": "Read", "input_schema": {"type": "object"}}]
                )
            )
    return events


def _store() -> sessionstore.SessionStore:
    return sessionstore.open_store(":memory:")


def _append_in_batches(
    store: sessionstore.SessionStore, sid: str, events: list[Event], cuts: list[int]
) -> Iterator[int]:
    """Append ``events`` split at ``cuts``; yield the seq after each batch."""
    bounds = sorted({0, len(events), *(c for c in cuts if 0 < c < len(events))})
    for start, end in itertools.pairwise(bounds):
        yield store.append(sid, events[start:end], expected_seq=start).last_seq


_PROPERTY = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
_NO_AUTO_SNAPSHOTS = SessionConfig(snapshot_every=0)


def _snapshot_prefix(
    store: sessionstore.SessionStore, sid: str, k: int, tokenizer: str, *, both: bool
) -> None:
    """Persist the fold of seqs 1..k as snapshots (of one or both projections)."""
    prefix = store.read(sid, 1, k)
    projections: list[Any] = (
        [ApiContextProjection(), TranscriptProjection()] if both else [ApiContextProjection()]
    )
    for projection in projections:
        save_snapshot(store, sid, projection, fold(projection, prefix), k, tokenizer=tokenizer)


@_PROPERTY
@given(events=messy_logs(), data=st.data())
def test_full_fold_equals_snapshot_plus_tail_equals_incremental(
    events: list[Event], data: st.DataObject
) -> None:
    """Full rebuild, snapshot + tail and incremental updates give the same request bytes; it is valid."""
    k = data.draw(st.integers(1, len(events)), label="snapshot seq")
    both = data.draw(st.booleans(), label="snapshot both projections")
    cuts = data.draw(st.lists(st.integers(1, len(events)), max_size=4), label="batch cuts")
    with _store() as store:
        sid = store.create_session().id
        live = Session(store, sid, _NO_AUTO_SNAPSHOTS)
        for _ in _append_in_batches(store, sid, events, cuts):
            live.refresh()
        rebuilt = Session(store, sid, _NO_AUTO_SNAPSHOTS, use_snapshots=False)
        _snapshot_prefix(store, sid, k, live.tokenizer, both=both)
        resumed = Session(store, sid, _NO_AUTO_SNAPSHOTS)

        full = rebuilt.request_bytes(cache_control=True)
        assert resumed.request_bytes(cache_control=True) == full
        assert live.request_bytes(cache_control=True) == full
        for cache in (False, True):  # bytes joined from kept JSON == serializing the request dict
            joined = Session(store, sid, _NO_AUTO_SNAPSHOTS).request_bytes(cache_control=cache)
            assert joined == request_bytes(resumed.request(cache_control=cache))
            assert joined == request_bytes(rebuilt.request(cache_control=cache))
        assert resumed.used_tokens() == live.used_tokens() == rebuilt.used_tokens()
        assert [e.seq for e in resumed.transcript] == list(range(1, len(events) + 1))
        request = live.request(cache_control=True)
        if request["messages"]:
            validate_request(with_tool_definitions(request))


def _session(*events: Event, **config: Any) -> Session:
    store = _store()
    sid = store.create_session(events=[SessionStarted(model="claude-sonnet-4-5"), *events]).id
    return Session(store, sid, SessionConfig(snapshot_every=0, **config))


def _tool_use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls"}}


def _result(tool_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


class FixedCounter:
    """A token counter with known numbers: every message counts 1,000 tokens, text one per character."""

    name = "fixed-1000"

    def count(self, event: Event) -> int | None:
        return 1_000 if event.type == "message_appended" else None

    def count_text(self, text: str) -> int:
        return len(text)


def shared_results_session() -> Session:
    """Calls t1-t3 answered in one message (results of 100, 300 and 600 characters around a text
    block of 1,000), then t4 answered alone: every message stored as 1,000 tokens."""
    store = sessionstore.open_store(":memory:", token_counter=FixedCounter())
    events = [
        SessionStarted(model="claude-sonnet-4-5"),
        MessageAppended(role="user", content="go"),
        MessageAppended(
            role="assistant", content=[_tool_use(t) for t in ("t1", "t2", "t3")], api_message_id="m1"
        ),
        MessageAppended(
            role="user",
            content=[
                _result("t1", "a" * 100),
                {"type": "text", "text": "b" * 1_000},
                _result("t2", "c" * 300),
                _result("t3", "d" * 600),
            ],
        ),
        MessageAppended(role="assistant", content=[_tool_use("t4")], api_message_id="m2"),
        MessageAppended(role="user", content=[_result("t4", "e" * 7)]),
    ]
    return Session(store, store.create_session(events=events).id, SessionConfig(snapshot_every=0))


class TestNormalization:
    def test_streamed_chunks_of_one_round_form_one_message_even_around_results(self) -> None:
        """Chunks sharing an API id merge, with the results written between them moved after."""
        session = _session(
            MessageAppended(role="user", content="go"),
            MessageAppended(role="assistant", content=[_tool_use("t1")], api_message_id="msg_1"),
            MessageAppended(role="user", content=[_result("t1")]),
            MessageAppended(role="assistant", content=[_tool_use("t2")], api_message_id="msg_1"),
            MessageAppended(role="user", content=[_result("t2")]),
        )

        messages = session.request()["messages"]

        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert [b["id"] for b in messages[1]["content"]] == ["t1", "t2"]
        assert [b["tool_use_id"] for b in messages[2]["content"]] == ["t1", "t2"]

    def test_interrupted_tool_call_gets_a_synthetic_error_result(self) -> None:
        """A tool_use with no result, followed by a new round, is answered deterministically."""
        session = _session(
            MessageAppended(role="user", content="go"),
            MessageAppended(role="assistant", content=[_tool_use("t1")], api_message_id="msg_1"),
            MessageAppended(role="user", content="never mind, stop"),
            MessageAppended(role="assistant", content="Stopped.", api_message_id="msg_2"),
        )

        messages = session.request()["messages"]

        assert messages[2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": sessionstore.projections.INTERRUPTED_TOOL_RESULT,
            "is_error": True,
        }
        assert messages[2]["content"][1] == {"type": "text", "text": "never mind, stop"}
        validate_request(with_tool_definitions(session.request()))

    def test_pending_tool_call_at_the_tail_is_closed_only_in_the_request(self) -> None:
        """The state keeps the call open (a result may still come); the request answers it."""
        session = _session(
            MessageAppended(role="user", content="go"),
            MessageAppended(role="assistant", content=[_tool_use("t1")], api_message_id="msg_1"),
        )

        before = session.request()["messages"]
        session.append([MessageAppended(role="user", content=[_result("t1", "real output")])])
        after = session.request()["messages"]

        assert before[-1]["content"][0]["content"] == sessionstore.projections.INTERRUPTED_TOOL_RESULT
        assert after[-1]["content"] == [_result("t1", "real output")]

    def test_orphan_and_duplicate_results_are_dropped_and_results_go_first(self) -> None:
        """Results answering nothing are not sent; a result arriving after text is moved before it."""
        session = _session(
            MessageAppended(role="user", content=[_result("ghost")]),
            MessageAppended(role="user", content="start"),
            MessageAppended(role="assistant", content=[_tool_use("t1")], api_message_id="msg_1"),
            MessageAppended(role="user", content="also this"),
            MessageAppended(role="user", content=[_result("t1"), _result("t1", "again")]),
        )

        messages = session.request()["messages"]

        assert messages[0] == {"role": "user", "content": [{"type": "text", "text": "start"}]}
        assert messages[2]["content"] == [_result("t1"), {"type": "text", "text": "also this"}]

    def test_meta_sidechain_and_empty_text_are_not_sent(self) -> None:
        """Meta entries, sub-agent chunks and whitespace text never reach the request."""
        session = _session(
            MessageAppended(role="user", content="<command-name>/clear</command-name>", is_meta=True),
            MessageAppended(role="user", content="hello"),
            MessageAppended(role="assistant", content="side", is_sidechain=True),
            MessageAppended(
                role="assistant", content=[{"type": "text", "text": "  "}, {"type": "text", "text": "hi"}]
            ),
        )

        assert session.request()["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        ]
        assert [e.type for e in session.transcript].count("message_appended") == 4

    def test_leading_assistant_message_gets_a_user_marker(self) -> None:
        """Requests start with a user message."""
        session = _session(MessageAppended(role="assistant", content="I was saying"))

        assert session.request()["messages"][0] == {
            "role": "user",
            "content": [{"type": "text", "text": sessionstore.projections.LEADING_USER_MARKER}],
        }

    def test_thinking_blocks_keep_their_signatures(self) -> None:
        """Thinking is sent back verbatim, signature included."""
        thinking = {"type": "thinking", "thinking": "consider", "signature": "EqQBCkYIARgCIkB"}
        session = _session(
            MessageAppended(role="user", content="q"),
            MessageAppended(
                role="assistant", content=[thinking, {"type": "text", "text": "a"}], api_message_id="m"
            ),
        )

        assert session.request()["messages"][1]["content"][0] == thinking


class TestCacheControl:
    def test_breakpoints_on_system_tools_and_last_cacheable_block(self) -> None:
        """Three breakpoints, never on a thinking block; the state itself is not modified."""
        session = _session(
            ContextConfigured(
                system="be brief",
                tools=[{"name": "A", "input_schema": {}}, {"name": "B", "input_schema": {}}],
            ),
            MessageAppended(role="user", content="q"),
            MessageAppended(
                role="assistant",
                content=[
                    {"type": "text", "text": "a"},
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                ],
                api_message_id="m",
            ),
        )
        marker = {"type": "ephemeral"}

        request = session.request(cache_control=True)
        plain = session.request()

        assert request["system"] == [{"type": "text", "text": "be brief", "cache_control": marker}]
        assert request["tools"][-1]["cache_control"] == marker
        assert "cache_control" not in request["tools"][0]
        assert request["messages"][-1]["content"][0]["cache_control"] == marker
        assert "cache_control" not in request["messages"][-1]["content"][1]
        assert plain["system"] == "be brief"
        assert "cache_control" not in plain["messages"][-1]["content"][0]
        validate_request(with_tool_definitions(request))


class TestTokenAccounting:
    def test_used_is_latest_usage_plus_calibrated_estimate_after_it(self) -> None:
        """Usage anchors the count; only what came after it is estimated (and calibrated)."""
        session = _session(calibration=1.5, block_overhead=10)
        session.append([MessageAppended(role="user", content="hello world")])  # 2 tokens
        before_usage = session.used_tokens()
        session.append(
            [
                MessageAppended(role="assistant", content="hi", api_message_id="msg_1"),
                UsageRecorded(
                    input_tokens=100,
                    cache_read_input_tokens=20,
                    cache_creation_input_tokens=5,
                    output_tokens=3,
                    api_message_id="msg_1",
                ),
            ]
        )
        at_usage = session.used_tokens()
        session.append([MessageAppended(role="user", content="hello world hello world")])  # 4 tokens

        assert before_usage == 3 + 10  # ceil(2 tokens * 1.5 + 1 block * 10)
        assert at_usage == 128
        assert session.used_tokens() == 128 + 6 + 10

    def test_streamed_chunk_after_its_usage_is_not_counted_twice(self) -> None:
        """A chunk of the round the usage already reports adds nothing to the estimate."""
        session = _session(calibration=1.0, block_overhead=0)
        session.append(
            [
                MessageAppended(role="user", content="q"),
                UsageRecorded(input_tokens=50, output_tokens=10, api_message_id="msg_1"),
                MessageAppended(role="assistant", content="a long streamed answer", api_message_id="msg_1"),
            ]
        )

        assert session.used_tokens() == 60

    def test_a_message_s_stored_count_is_shared_among_its_results_by_characters(self) -> None:
        """Each result gets ``tokens * its characters // the message's characters``, under its own
        tool_use id: 1,000 tokens over 2,000 characters (a text block's 1,000 included) give
        t1 50, t2 150 and t3 300; a result alone in its message gets the whole count."""
        session = shared_results_session()

        assert session.api_state.result_tokens == {"t1": 50, "t2": 150, "t3": 300, "t4": 1_000}

    def test_the_share_is_rounded_down(self) -> None:
        """Results of 1, 2 and 4 characters in a message of 1,000 tokens: 1000 * 1 // 7 = 142
        (142.86), 285 (285.71), 571 (571.43)."""
        store = sessionstore.open_store(":memory:", token_counter=FixedCounter())
        events = [
            SessionStarted(model="claude-sonnet-4-5"),
            MessageAppended(role="user", content="go"),
            MessageAppended(role="assistant", content=[_tool_use(t) for t in "xyz"], api_message_id="m1"),
            MessageAppended(
                role="user", content=[_result("x", "x"), _result("y", "yy"), _result("z", "zzzz")]
            ),
        ]
        session = Session(store, store.create_session(events=events).id, SessionConfig(snapshot_every=0))

        assert session.api_state.result_tokens == {"x": 142, "y": 285, "z": 571}

    def test_a_repeated_result_is_counted_by_the_one_the_view_keeps(self) -> None:
        """A message answering t1 twice: the view keeps the first result (900 characters), so
        that one's share is recorded, not the dropped one's (100 characters)."""
        store = sessionstore.open_store(":memory:", token_counter=FixedCounter())
        events = [
            SessionStarted(model="claude-sonnet-4-5"),
            MessageAppended(role="user", content="go"),
            MessageAppended(role="assistant", content=[_tool_use("t1")], api_message_id="m1"),
            MessageAppended(role="user", content=[_result("t1", "e" * 900), _result("t1", "f" * 100)]),
        ]
        session = Session(store, store.create_session(events=events).id, SessionConfig(snapshot_every=0))

        assert session.request()["messages"][-1]["content"] == [_result("t1", "e" * 900)]
        assert session.api_state.result_tokens == {"t1": 900}

    def test_token_state_uses_the_model_registry_and_session_limits(self) -> None:
        """SessionStarted's explicit numbers win over the registry; the state has every flag."""
        store = _store()
        session = Session.create(store, model="claude-sonnet-4-5", max_output_tokens=16_384)

        state = session.token_state().to_dict()

        assert state["effective_window"] == 183_616
        assert state["autocompact_threshold"] == 170_616
        assert state["blocking_limit"] == 180_616
        assert state["percent_left"] == 100
        assert state["at_blocking_limit"] is False


class TestSnapshots:
    def test_stale_version_and_corrupt_snapshots_fall_back_to_a_full_fold(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A snapshot of another version is never read; a damaged one is ignored with a warning."""

        def conversation() -> Session:
            session = Session.create(_store(), system="s")
            roles: tuple[Literal["user", "assistant"], ...] = ("user", "assistant")
            session.append([MessageAppended(role=roles[i % 2], content=f"m{i} é") for i in range(5)])
            session.append([MessageAppended(role="user", content='data [{"a":1},{"b":2}] end')])
            return session

        good = ApiContextProjection().dump(conversation().api_state)
        head, _, body = good.partition(b"\n")
        header = json.loads(head)
        shifted = {
            **header,
            "messages": {**header["messages"], "starts": [0, 1, *header["messages"]["starts"][2:]]},
        }
        # Offsets that still cut the bytes at "},{" -- inside the last message's string -- pass
        # every structural check; only the CRC over the offsets tells.
        inside = body.index(b'{\\"b\\"')
        moved = [*header["messages"]["starts"][:-1], inside]
        in_string = {**header, "messages": {**header["messages"], "starts": moved}}
        at = len(good) - 8  # inside the last message's text: still JSON, but not what was written
        damaged = {
            "not the format": b"{not json",
            "header only": head,
            "a flipped byte": good[:at] + bytes([good[at] ^ 0x01]) + good[at + 1 :],
            "truncated": good[:-3],
            "offsets not at message starts": json.dumps(shifted).encode() + b"\n" + body,
            "an offset inside a string": json.dumps(in_string).encode() + b"\n" + body,
            "another version": good,
        }
        for case, state in damaged.items():
            session = conversation()
            expected = session.request_bytes()
            version = 99 if case == "another version" else ApiContextProjection.version
            store = session.store
            store.put_snapshot(
                sessionstore.store.SnapshotRecord(
                    session.id, "api_context", version, session.tokenizer, 4, state
                )
            )
            caplog.clear()

            resumed = Session(store, session.id)

            assert resumed.request_bytes() == expected, case
            assert resumed.used_tokens() == session.used_tokens(), case
            warned = "ignoring unreadable api_context snapshot" in caplog.text
            assert warned == (case != "another version"), case

    def test_resume_sends_history_without_parsing_it(self) -> None:
        """Resumed from a snapshot, the bytes come from the kept JSON; a turn parses what it touches."""
        store = _store()
        session = Session.create(store, system="s", config=_NO_AUTO_SNAPSHOTS)
        for n in range(10):
            session.append(
                [
                    MessageAppended(role="user", content=f"question {n} ü"),
                    MessageAppended(role="assistant", content=[_tool_use(f"t{n}")]),
                    MessageAppended(role="user", content=[_result(f"t{n}", "x" * n)]),
                    MessageAppended(role="assistant", content=f"answer {n}"),
                ]
            )
        session.snapshot()
        count = len(session.api_state.messages)

        resumed = Session(store, session.id, _NO_AUTO_SNAPSHOTS)
        first = resumed.request_bytes()
        untouched = resumed.api_state.messages.unparsed
        resumed.append([MessageAppended(role="user", content="one more")])
        after_turn = resumed.api_state.messages.unparsed

        assert first == session.request_bytes()
        assert untouched == count
        assert after_turn == count  # a new prompt after an answer starts a message: nothing parsed
        assert resumed.request_bytes() == Session(store, session.id, use_snapshots=False).request_bytes()
        assert resumed.api_state.messages[0]["content"][0]["text"] == "question 0 ü"
        assert resumed.api_state.messages.unparsed == count - 1

    def test_automatic_snapshots_make_resume_skip_the_prefix(self) -> None:
        """Every snapshot_every events a snapshot is written; resume reads only the tail after it."""
        store = _store()
        session = Session.create(store, config=SessionConfig(snapshot_every=10))
        for i in range(25):
            session.append([MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")])
        snap = store.latest_snapshot(
            session.id, "api_context", ApiContextProjection.version, session.tokenizer
        )
        deleted_all = Session(store, session.id, use_snapshots=False)

        assert snap is not None
        assert snap.seq == 20
        assert (
            Session(store, session.id).request_bytes()
            == session.request_bytes()
            == deleted_all.request_bytes()
        )

    def test_racing_snapshotters_all_succeed(self, shared_backend: Backend) -> None:
        """Processes' sessions snapshotting the same key at the same moment all succeed (no key clash)."""
        writer = shared_backend.open()
        session = Session.create(writer)
        session.append([MessageAppended(role="user", content="x")])
        racers = 4
        stores = [shared_backend.open() for _ in range(racers)]
        views = [Session(racer, session.id, use_snapshots=False) for racer in stores]
        barrier = threading.Barrier(racers)
        errors: list[BaseException] = []

        def snapshot(view: Session) -> None:
            try:
                barrier.wait(timeout=30)
                view.snapshot()
            except BaseException as e:
                errors.append(e)

        try:
            threads = [threading.Thread(target=snapshot, args=(view,)) for view in views]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            snap = writer.latest_snapshot(
                session.id, "api_context", ApiContextProjection.version, session.tokenizer
            )

            assert not any(thread.is_alive() for thread in threads)
            assert errors == []
            assert snap is not None and snap.seq == session.last_seq
            assert Session(writer, session.id).request_bytes() == session.request_bytes()
        finally:
            for racer in stores:
                racer.close()
            writer.close()


def test_exact_count_through_the_sdk_uses_count_tokens(messages_api: Any) -> None:
    """count_tokens_exact sends the request to the Messages API's count endpoint."""
    import anthropic

    session = _session(MessageAppended(role="user", content="count me"))
    client = anthropic.Anthropic(api_key="test-key", base_url=messages_api.url, max_retries=0)

    assert session.count_tokens_exact(client) == messages_api.count_tokens_result
    assert messages_api.requests[-1]["path"] == "/v1/messages/count_tokens"
    assert messages_api.requests[-1]["body"]["messages"] == session.request()["messages"]
    assert messages_api.requests[-1]["body"]["model"] == "claude-sonnet-4-5"


def test_transcript_links_sub_agents_and_the_api_view_ignores_the_link() -> None:
    """A subagent_started entry names the child session; the request is unchanged by it."""
    session = _session(MessageAppended(role="user", content="research this"))
    before = session.request_bytes()

    started = sessionstore.events.SubagentStarted(child_session_id="child-1", parent_tool_use_id="toolu_9")
    session.append([started])

    assert [e.child_session_id for e in session.transcript if e.child_session_id] == ["child-1"]
    assert session.request_bytes() == before


def test_only_the_two_newest_snapshots_are_kept() -> None:
    """Older snapshots of the same projection are pruned when a new one is written."""
    store = _store()
    session = Session.create(store, config=SessionConfig(snapshot_every=5))
    for i in range(30):
        session.append([MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")])
    engine = store.engine  # type: ignore[attr-defined]

    with engine.connect().execution_options(sessionstore_read=True) as conn:
        seqs = [
            row[0]
            for row in conn.exec_driver_sql("SELECT seq FROM snapshots WHERE projection = 'api_context'")
        ]

    assert sorted(seqs) == [25, 30]
    assert Session(store, session.id).request_bytes() == session.request_bytes()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=messy_logs(), data=st.data())
def test_incremental_fingerprint_equals_hashing_the_whole_request(
    events: list[Event], data: st.DataObject
) -> None:
    """After every append, with or without cache breakpoints and extra keys, the digests agree."""
    import hashlib

    from sessionstore.projections._api_context import request_bytes

    with _store() as store:
        session = Session(store, store.create_session().id, _NO_AUTO_SNAPSHOTS)
        for event in events:
            session.append([event])
            request = session.request(cache_control=data.draw(st.booleans()))
            if data.draw(st.booleans()):
                request["context_management"] = {"edits": [{"type": "clear_tool_uses_20250919"}]}

            assert session.fingerprint(request) == hashlib.sha256(request_bytes(request)).hexdigest()

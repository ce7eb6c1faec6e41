"""The LangGraph bridge: LangGraph's own checkpointer conformance suite, and a real StateGraph with
an interrupt, resume, time travel and a fork, on SQLite and PostgreSQL, sync and async."""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import ChannelVersions
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from sessionstore import Session, SessionStore, audit, open_async_store
from sessionstore.bridges.langgraph import AsyncSessionStoreSaver, SessionStoreSaver, thread_session_id
from sessionstore.errors import SessionErasedError, ValidationError
from sessionstore.events import LangGraphCheckpointSaved
from sessionstore.store import LocalKeyProvider

from .conftest import Backend

#: The conformance suite's base checks (langgraph-checkpoint-conformance 0.0.2): put 17,
#: put_writes 10, get_tuple 10, list 16, delete_thread 5 (58 in all).
BASE_CAPABILITIES = ("put", "put_writes", "get_tuple", "list", "delete_thread")


def _conformance(backend: Backend, api: str) -> Any:
    """Run LangGraph's conformance suite against a fresh saver per capability: each has a
    tenant of its own, so the suite's fixed thread ids ("thread-0") never meet."""
    tenants = (f"conformance-{n}" for n in itertools.count())

    async def run() -> Any:
        if api == "sync":
            store = backend.open()

            @checkpointer_test(name=f"SessionStoreSaver-{backend.name}")
            async def saver() -> AsyncIterator[SessionStoreSaver]:
                yield SessionStoreSaver(store, tenant=next(tenants), user="suite")

            try:
                return await validate(saver)
            finally:
                store.close()
        astore = await open_async_store(backend.url, migrate=True)

        @checkpointer_test(name=f"AsyncSessionStoreSaver-{backend.name}")
        async def async_saver() -> AsyncIterator[AsyncSessionStoreSaver]:
            yield AsyncSessionStoreSaver(astore, tenant=next(tenants), user="suite")

        try:
            return await validate(async_saver)
        finally:
            await astore.close()

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_savers_pass_langgraphs_conformance_suite(shared_backend: Backend, api: str) -> None:
    """Every base check of langgraph-checkpoint-conformance passes, sync and async."""
    report = _conformance(shared_backend, api)
    results = {name: report.results[name] for name in BASE_CAPABILITIES}
    failures = [f for r in results.values() for f in r.failures]

    assert failures == []
    assert report.passed_all_base()
    assert sum(r.tests_passed for r in results.values()) == 58


# -- a real graph: draft, a human review (interrupt), publish --


class Draft(TypedDict):
    messages: Annotated[list[str], operator.add]
    approved: bool


def _draft(state: Draft) -> dict[str, Any]:
    return {"messages": [f"draft {len(state['messages'])}"]}


def _review(state: Draft) -> dict[str, Any]:
    answer = interrupt({"question": "publish this draft?", "draft": state["messages"][-1]})
    return {"messages": [f"review: {answer}"], "approved": answer == "yes"}


def _publish(state: Draft) -> dict[str, Any]:
    return {"messages": ["published" if state["approved"] else "discarded"]}


def _graph(saver: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Draft)
    builder.add_node("draft", _draft)
    builder.add_node("review", _review)
    builder.add_node("publish", _publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


CONFIG: Any = {"configurable": {"thread_id": "order-42"}}


def _check_bridged_session(store: SessionStore, checkpoints: int) -> str:
    """The thread's session verifies, and its audit lists every checkpoint and the one fork;
    returns its id."""
    sid = thread_session_id("order-42", None, None)
    report = audit(store, sid)
    forks = [e for e in report.entries if "FORK" in e.what]

    assert store.verify(sid).ok
    assert report.erasure is None
    assert [e.kind for e in report.entries] == ["langgraph_checkpoint"] * checkpoints
    assert len(forks) == 1 and "(step 2, update)" in forks[0].what
    return sid


def _story(graph: CompiledStateGraph[Any, Any, Any, Any]) -> list[Any]:
    """Run to the review, resume with "yes", fork from before the review with an edited draft and
    answer "no"; what LangGraph showed at each point."""
    first = graph.invoke({"messages": ["brief"]}, CONFIG)
    waiting = graph.get_state(CONFIG).next
    done = graph.invoke(Command(resume="yes"), CONFIG)
    history = list(graph.get_state_history(CONFIG))
    before_review = next(s for s in history if s.next == ("review",))
    fork = graph.update_state(before_review.config, {"messages": ["draft 1, edited"]}, as_node="draft")
    asked = graph.invoke(None, fork)
    forked = graph.invoke(Command(resume="no"), CONFIG)
    original = graph.get_state(history[0].config).values
    nexts = [s.next for s in graph.get_state_history(CONFIG)]
    return [
        first["__interrupt__"][0].value,
        waiting,
        done,
        asked["__interrupt__"][0].value,
        forked,
        original,
        nexts,
    ]


async def _astory(graph: CompiledStateGraph[Any, Any, Any, Any]) -> list[Any]:
    """``_story`` through the async API."""
    first = await graph.ainvoke({"messages": ["brief"]}, CONFIG)
    waiting = (await graph.aget_state(CONFIG)).next
    done = await graph.ainvoke(Command(resume="yes"), CONFIG)
    history = [s async for s in graph.aget_state_history(CONFIG)]
    before_review = next(s for s in history if s.next == ("review",))
    fork = await graph.aupdate_state(before_review.config, {"messages": ["draft 1, edited"]}, as_node="draft")
    asked = await graph.ainvoke(None, fork)
    forked = await graph.ainvoke(Command(resume="no"), CONFIG)
    original = (await graph.aget_state(history[0].config)).values
    nexts = [s.next async for s in graph.aget_state_history(CONFIG)]
    return [
        first["__interrupt__"][0].value,
        waiting,
        done,
        asked["__interrupt__"][0].value,
        forked,
        original,
        nexts,
    ]


def _check_story(story: list[Any]) -> None:
    question, waiting, done, asked, forked, original, _ = story

    assert question == {"question": "publish this draft?", "draft": "draft 1"}
    assert waiting == ("review",)
    assert done["messages"] == ["brief", "draft 1", "review: yes", "published"]
    assert asked["draft"] == "draft 1, edited"
    assert forked["messages"][-3:] == ["draft 1, edited", "review: no", "discarded"]
    assert original["messages"] == done["messages"]


def test_a_graph_interrupts_resumes_travels_back_and_forks(shared_backend: Backend) -> None:
    """Interrupt, resume, time travel and a fork show exactly what LangGraph's InMemorySaver
    shows; a new saver on the same database sees it all; delete_thread erases the session with
    a receipt, and the thread id starts afresh."""
    store = shared_backend.open()
    graph = _graph(SessionStoreSaver(store))

    story = _story(graph)

    _check_story(story)
    assert story == _story(_graph(InMemorySaver()))

    reopened = shared_backend.open()
    again = _graph(SessionStoreSaver(reopened))

    assert again.get_state(CONFIG).values == graph.get_state(CONFIG).values
    assert [s.next for s in again.get_state_history(CONFIG)] == story[-1]

    sid = _check_bridged_session(store, len(story[-1]))
    again.checkpointer.delete_thread("order-42")  # type: ignore[union-attr]
    receipt = store.erasure(sid)

    assert receipt is not None and receipt.reason == "LangGraph delete_thread"
    assert audit(store, sid).erasure == receipt
    assert graph.get_state(CONFIG).values == {}
    assert store.verify(sid).erasure == receipt

    reused = graph.invoke({"messages": ["new brief"]}, CONFIG)

    assert reused["messages"] == ["new brief", "draft 1"]
    reopened.close()
    store.close()


def test_the_async_saver_runs_the_same_graph(shared_backend: Backend) -> None:
    """The same story through ainvoke and AsyncSessionStoreSaver; then adelete_thread."""

    async def run() -> tuple[list[Any], list[Any], Any]:
        astore = await open_async_store(shared_backend.url, migrate=True)
        try:
            graph = _graph(AsyncSessionStoreSaver(astore))
            story = await _astory(graph)
            reference = await _astory(_graph(InMemorySaver()))
            await graph.checkpointer.adelete_thread("order-42")  # type: ignore[union-attr]
            return story, reference, (await graph.aget_state(CONFIG)).values
        finally:
            await astore.close()

    story, reference, after = asyncio.run(run())

    _check_story(story)
    assert story == reference
    assert after == {}


def test_a_growing_list_stores_only_the_appended_items(tmp_path: Any) -> None:
    """Each step's checkpoint event holds the messages added since its parent, not the whole list."""
    from sessionstore import open_store

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    graph = _graph(SessionStoreSaver(store))
    graph.invoke({"messages": ["brief"]}, CONFIG)
    graph.invoke(Command(resume="yes"), CONFIG)
    sid = thread_session_id("order-42", None, None)
    saved = [r.event for r in store.read(sid) if r.type == "langgraph_checkpoint"]
    lists = [
        e.channels["messages"]
        for e in saved
        if isinstance(e, LangGraphCheckpointSaved) and "messages" in e.channels
    ]

    assert [len(c.items or ()) for c in lists] == [1, 1, 1, 1]
    assert [c.base_version is None for c in lists] == [True, False, False, False]
    assert graph.get_state(CONFIG).values["messages"] == ["brief", "draft 1", "review: yes", "published"]
    store.close()


class TestBadInput:
    def test_a_config_without_a_thread_id_is_refused(self, store: SessionStore) -> None:
        """LangGraph needs a thread id; the error names the config key."""
        saver = SessionStoreSaver(store)

        with pytest.raises(ValidationError, match="thread_id") as caught:
            saver.get_tuple({"configurable": {}})

        assert caught.value.field == "configurable.thread_id"

    def test_writes_without_a_checkpoint_id_are_refused(self, store: SessionStore) -> None:
        """Pending writes belong to a checkpoint: without its id nothing is written."""
        saver = SessionStoreSaver(store)

        with pytest.raises(ValidationError, match="checkpoint_id"):
            saver.put_writes({"configurable": {"thread_id": "t"}}, [("messages", "x")], "task-1")

        assert store.list_sessions() == []


# -- storage, erasure, owners, several writers --

MASTER = LocalKeyProvider(bytes(range(32)))


def _put(
    saver: SessionStoreSaver,
    thread: str,
    values: dict[str, Any],
    parent: Any = None,
    version: int | None = None,
) -> Any:
    """Put a checkpoint whose every channel is new (version 1, or 2 after a parent, or ``version``)."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions: ChannelVersions = {k: version or (2 if parent is not None else 1) for k in values}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(config, checkpoint, {"source": "loop", "step": 0}, versions)


@pytest.mark.parametrize("mode", ["plaintext", "encrypted"])
def test_delete_thread_erases_the_values_stored_as_blobs(backend: Backend, mode: str) -> None:
    """A value over 4 KiB is a blob of the thread's session; delete_thread leaves it unreadable
    (purged, or crypto-shredded with the session's key) and the thread empty."""
    store = backend.open(encryption=MASTER if mode == "encrypted" else None)
    saver = SessionStoreSaver(store)
    big = "x" * 10_000
    stored = _put(saver, "t-1", {"report": big, "notes": ["short", big]})
    sid = thread_session_id("t-1", None, None)
    refs = {
        value.blob
        for r in store.read(sid)
        if isinstance(r.event, LangGraphCheckpointSaved)
        for channel in r.event.channels.values()
        for value in (channel.value, *(channel.items or ()))
        if value is not None and value.blob is not None
    }
    tup = saver.get_tuple(stored)

    assert tup is not None and tup.checkpoint["channel_values"] == {"report": big, "notes": ["short", big]}
    assert len(refs) == 1  # one blob: the same 10 KB twice

    saver.delete_thread("t-1")

    assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
    assert (store.erasure(sid) or pytest.fail("no receipt")).method == (
        "shredded" if mode == "encrypted" else "purged"
    )
    with pytest.raises((KeyError, SessionErasedError)):
        store.get_blob(refs.pop(), session_id=sid)
    store.close()


def test_a_list_that_is_not_an_extension_is_stored_whole(store: SessionStore) -> None:
    """A list channel that replaced its items, or that was not a list before, is stored whole
    and reads back exactly."""
    saver = SessionStoreSaver(store)
    first = _put(saver, "t-2", {"a": ["x", "y"], "b": "plain"})
    second = _put(saver, "t-2", {"a": ["z"], "b": ["now", "a", "list"]}, parent=first)
    later = SessionStoreSaver(store).get_tuple(second)
    earlier = SessionStoreSaver(store).get_tuple(first)

    assert later is not None and later.checkpoint["channel_values"] == {"a": ["z"], "b": ["now", "a", "list"]}
    assert earlier is not None and earlier.checkpoint["channel_values"] == {"a": ["x", "y"], "b": "plain"}


def test_owners_keep_their_threads_apart(store: SessionStore) -> None:
    """One thread id names a different session per (tenant, user); list(None) shows a saver
    only its owner's threads, and sessions carry the owner."""
    ada = SessionStoreSaver(store, tenant="acme", user="ada")
    bob = SessionStoreSaver(store, tenant="acme", user="bob")
    _put(ada, "shared-name", {"who": "ada"})
    _put(ada, "second", {"who": "ada again"})
    _put(bob, "shared-name", {"who": "bob"})

    seen_by_ada = sorted(t.checkpoint["channel_values"]["who"] for t in ada.list(None))
    bob_tuple = bob.get_tuple({"configurable": {"thread_id": "shared-name"}})

    assert seen_by_ada == ["ada", "ada again"]
    assert bob_tuple is not None and bob_tuple.checkpoint["channel_values"] == {"who": "bob"}
    assert {s.user for s in store.list_sessions(tenant="acme")} == {"ada", "bob"}


def test_two_savers_on_one_thread_see_each_others_checkpoints(shared_backend: Backend) -> None:
    """Savers in two processes (here: two stores on one database) append to one thread; each
    reads the other's checkpoints and writes, whatever it had folded before."""
    one, two = shared_backend.open(), shared_backend.open()
    first, second = SessionStoreSaver(one), SessionStoreSaver(two)
    a = _put(first, "t-3", {"step": "a"})
    assert second.get_tuple(a) is not None
    b = _put(second, "t-3", {"step": "b"}, parent=a)
    first.put_writes(b, [("step", "pending")], "task-1")

    newest = first.get_tuple({"configurable": {"thread_id": "t-3", "checkpoint_ns": ""}})
    seen_by_second = second.get_tuple(b)

    assert newest is not None and newest.checkpoint["channel_values"] == {"step": "b"}
    assert seen_by_second is not None and seen_by_second.pending_writes == [("task-1", "step", "pending")]
    assert [t.checkpoint["id"] for t in first.list({"configurable": {"thread_id": "t-3"}})] == [
        b["configurable"]["checkpoint_id"],
        a["configurable"]["checkpoint_id"],
    ]
    one.close()
    two.close()


def test_the_command_line_verifies_and_audits_a_thread_without_langgraph(tmp_path: Any) -> None:
    """`sessionstore verify` and `sessionstore audit` read a bridged session in a process where
    LangGraph cannot be imported: the bridge's events belong to the event catalogue."""
    from sessionstore import open_store

    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(db, migrate=True)
    graph = _graph(SessionStoreSaver(store))
    graph.invoke({"messages": ["brief"]}, CONFIG)
    graph.invoke(Command(resume="yes"), CONFIG)
    store.close()
    sid = thread_session_id("order-42", None, None)
    script = (
        "import sys; sys.modules['langgraph'] = None; sys.modules['langchain_core'] = None\n"
        "from sessionstore.cli import main\n"
        f"sys.exit(main(['verify', {sid!r}, '--db', {db!r}]) or main(['audit', {sid!r}, '--db', {db!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


def test_a_saver_with_more_threads_than_it_keeps_reads_each_back(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saver keeps the folds of its most recently used threads only; a thread it let go is
    read back from the log, its list channel included."""
    monkeypatch.setattr("sessionstore.bridges.langgraph._log._THREADS_KEPT", 2)
    saver = SessionStoreSaver(store)
    heads = {}
    for thread in ("t-a", "t-b", "t-c"):
        first = _put(saver, thread, {"messages": [f"{thread} 1"]})
        heads[thread] = _put(saver, thread, {"messages": [f"{thread} 1", f"{thread} 2"]}, parent=first)
    for thread in ("t-a", "t-b", "t-c", "t-a"):
        grown = _put(saver, thread, {"messages": [f"{thread} 1", f"{thread} 2", "3"]}, heads[thread], 3)
        tup = saver.get_tuple(grown)

        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == [
            f"{thread} 1",
            f"{thread} 2",
            "3",
        ]


@pytest.mark.parametrize("length", [0, 1, 15, 16, 17, 300])
def test_a_list_of_messages_reads_back_equal(store: SessionStore, length: int) -> None:
    """A list channel of LangChain messages and dicts reads back equal, grown by one item and
    from a fresh saver, whatever its length (msgpack's array headers change at 16 and 65,536)."""
    saver = SessionStoreSaver(store)
    items: list[Any] = [
        HumanMessage(content=f"m{i}", id=str(i)) if i % 2 else {"k": i, "v": [1.5, None]}
        for i in range(length)
    ]
    first = _put(saver, "t-4", {"messages": items})
    grown = _put(saver, "t-4", {"messages": [*items, AIMessage(content="last")]}, parent=first)
    fresh = SessionStoreSaver(store)
    before, after = fresh.get_tuple(first), fresh.get_tuple(grown)

    assert before is not None and before.checkpoint["channel_values"]["messages"] == items
    assert after is not None and after.checkpoint["channel_values"]["messages"] == [
        *items,
        AIMessage(content="last"),
    ]


def test_the_digest_keeps_what_the_audit_reads_of_a_checkpoint_and_no_value(shared_backend: Backend) -> None:
    """A checkpoint's digest entry holds its ids, step, source and each changed channel's name,
    base version and item count, never a value (a LangGraph thread's digest is not its log);
    the audit reads it the same."""
    store = shared_backend.open()
    try:
        _check_digest(store)
    finally:
        store.close()


def _check_digest(store: SessionStore) -> None:
    _story(_graph(SessionStoreSaver(store)))
    sid = thread_session_id("order-42", None, None)
    session = Session(store, sid)
    checkpoints = [e for e in session.transcript_digest if e.type == "langgraph_checkpoint"]
    assert len(checkpoints) == 8
    for entry in checkpoints:
        keys = {"checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "step", "source", "channels"}
        assert set(entry.payload) == keys
        assert all(
            set(channel) == {"base_version", "item_count"} for channel in entry.payload["channels"].values()
        )
    logged = [e for e in store.read(sid) if e.type == "langgraph_checkpoint"]
    assert len(json.dumps([e.payload for e in checkpoints])) < len("".join(e.payload for e in logged)) / 2
    report = audit(store, sid)
    assert [e.details for e in report.entries] == [
        {key: e.payload_dict()[key] for key in ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id")}
        for e in logged
    ]
    fork = f"FORK from checkpoint {report.entries[5].details['parent_checkpoint_id']}"
    assert [e.what.removeprefix("LangGraph checkpoint ") for e in report.entries] == [
        "(step -1, input): __start__",
        "(step 0, loop): __start__, messages, branch:to:draft",
        "(step 1, loop): messages +1, branch:to:draft, branch:to:review",
        "(step 2, loop): messages +1, branch:to:review, approved, branch:to:publish",
        "(step 3, loop): messages +1, branch:to:publish",
        f"(step 2, update): messages +1, branch:to:review; {fork}",
        "(step 3, loop): messages +1, branch:to:review, approved, branch:to:publish",
        "(step 4, loop): messages +1, branch:to:publish",
    ]

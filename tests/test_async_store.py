"""What only the async store has: awaitable calls sharing one event loop, and no threads.

The contract itself (append, idempotency, read, verify ...) is checked for the async store by
the contract suites (``store_contract`` marker: tests/test_store.py and others run each test
against ``open_store`` and ``open_async_store``).
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import (
    ANY,
    AsyncSessionStore,
    MessageAppended,
    Pipeline,
    Session,
    SessionStore,
    open_async_store,
)
from sessionstore.errors import ConcurrencyError, SessionNotFoundError, ValidationError
from sessionstore.store import SessionWrite, blocking_call

from .conftest import Backend


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_every_store_method_has_an_awaitable_counterpart() -> None:
    """A method added to the sync store contract needs its async delegate (one line in _async.py)."""
    public = {
        name
        for name, member in inspect.getmembers(SessionStore)
        if not name.startswith("_") and callable(member)
    }
    sync_only = {"visible_log"}  # a SessionLog object: read_visible / append_visible instead
    for name in sorted(public - sync_only):
        counterpart = getattr(AsyncSessionStore, name, None)
        assert counterpart is not None, f"AsyncSessionStore has no {name}"
        assert inspect.iscoroutinefunction(counterpart) or inspect.isasyncgenfunction(counterpart), name
        sync_parameters = inspect.signature(getattr(SessionStore, name)).parameters
        async_parameters = inspect.signature(counterpart).parameters
        assert list(async_parameters) == list(sync_parameters), name


def test_importing_sessionstore_does_not_import_aiosqlite() -> None:
    code = "import sys, sessionstore; print('aiosqlite' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_errors_are_the_typed_errors_of_the_sync_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await open_async_store(tmp_path / "a.db", migrate=True, token_counter=None) as store:
            with pytest.raises(SessionNotFoundError):
                await store.append("nobody", [MessageAppended(role="user", content="x")], ANY)
            with pytest.raises(ValidationError):
                await store.create_session("bad id!")
            sid = (await store.create_session()).id
            await store.append(sid, [MessageAppended(role="user", content="a")], 0)
            with pytest.raises(ConcurrencyError):
                await store.append(sid, [MessageAppended(role="user", content="b")], 0)

    _run(scenario())


def test_an_unmigrated_database_names_the_url_db_upgrade_takes(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.touch()
    with pytest.raises(sessionstore.SchemaOutOfDateError) as raised:
        _run(open_async_store(f"sqlite:///{path}"))
    assert f"--db sqlite:///{path}" in str(raised.value)
    assert "aiosqlite" not in str(raised.value)


def test_a_fork_is_read_and_appended_in_its_visible_numbering(backend: Backend) -> None:
    async def scenario() -> None:
        store = await open_async_store(backend.url, migrate=True, token_counter=None)
        try:
            parent = (await store.create_session()).id
            await store.append(parent, [MessageAppended(role="user", content=f"p{i}") for i in range(3)], 0)
            fork = (await store.create_session(parent_session_id=parent, fork_seq=2)).id
            assert await store.last_visible_seq(fork) == 2
            result = await store.append_visible(fork, [MessageAppended(role="user", content="f")], 2)
            assert result.seqs == (3,)
            visible = await store.read_visible(fork)
            assert [e.seq for e in visible] == [1, 2, 3]
            assert [e.event.content for e in visible] == ["p0", "p1", "f"]  # type: ignore[attr-defined]
            with pytest.raises(ConcurrencyError):
                await store.append_visible(fork, [MessageAppended(role="user", content="late")], 2)
        finally:
            await store.close()

    _run(scenario())


def test_write_sessions_creates_and_appends_in_one_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await open_async_store(tmp_path / "w.db", migrate=True, token_counter=None) as store:
            parent = SessionWrite("p", [MessageAppended(role="user", content="p")], create=True)
            child = SessionWrite(
                "c",
                [MessageAppended(role="user", content="c")],
                create=True,
                parent_session_id="p",
                fork_seq=1,
            )
            results = await store.write_sessions([parent, child])
            assert [r.seqs for r in results] == [(1,), (1,)]
            clash = SessionWrite("p", [MessageAppended(role="user", content="again")], create=True)
            extra = SessionWrite("q", [], create=True)
            with pytest.raises(sessionstore.SessionExistsError):
                await store.write_sessions([extra, clash])
            assert [s.id for s in await store.list_sessions()] == ["c", "p"]  # q was not kept

    _run(scenario())


def test_an_asyncio_event_stops_a_waiting_subscriber(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await open_async_store(tmp_path / "s.db", migrate=True, token_counter=None) as store:
            sid = (await store.create_session()).id
            await store.append(sid, [MessageAppended(role="user", content=str(i)) for i in range(2)], 0)
            stop = asyncio.Event()
            seen: list[int] = []

            async def consume() -> None:
                async for recorded in store.subscribe(stop=stop, poll_interval=3600):
                    seen.append(recorded.seq)

            consumer = asyncio.create_task(consume())
            while len(seen) < 2:
                await asyncio.sleep(0.01)
            stop.set()  # wakes the hour-long wait: the task ends instead of hanging the test
            await asyncio.wait_for(consumer, 60)
            assert seen == [1, 2]

    _run(scenario())


@pytest.mark.postgres
def test_200_tasks_appending_to_50_sessions_lose_and_duplicate_nothing(pg_backend: Backend) -> None:
    """200 concurrent tasks on one loop, 4 per session, each appending with expected_seq and
    re-reading on a conflict: every event stored exactly once, seqs gap-free, chains valid,
    and no thread was started for database I/O."""
    sessions, tasks, appends_per_task = 50, 200, 5

    async def scenario() -> None:
        store = await open_async_store(pg_backend.url, migrate=True, token_counter=None)
        try:
            ids = [(await store.create_session(f"s{i:02}")).id for i in range(sessions)]
            threads_before = set(threading.enumerate())
            threads_during: set[threading.Thread] = set()
            conflicts = 0

            async def writer(index: int) -> list[str]:
                nonlocal conflicts
                sid = ids[index % sessions]
                written: list[str] = []
                for n in range(appends_per_task):
                    event = MessageAppended(role="user", content=f"task {index} append {n}")
                    expected = await store.last_seq(sid)
                    while True:
                        try:
                            await store.append(sid, [event], expected)
                            break
                        except ConcurrencyError as e:
                            conflicts += 1
                            expected = e.actual
                    written.append(str(event.event_id))
                    threads_during.update(threading.enumerate())
                return written

            written = await asyncio.gather(*(writer(i) for i in range(tasks)))
            acknowledged = [event_id for batch in written for event_id in batch]
            stored = [e.event_id for e in await store.read_all(0, limit=10 * len(acknowledged))]
            duplicated = [event_id for event_id, n in Counter(stored).items() if n > 1]
            lost = set(acknowledged) - set(stored)
            assert (len(lost), len(duplicated)) == (0, 0)
            assert len(stored) == tasks * appends_per_task
            for sid in ids:
                events = await store.read(sid, verify=True)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                assert (await store.verify(sid)).ok
            assert conflicts > 0  # the tasks really raced on their sessions
            assert threads_during <= threads_before  # I/O awaited on the loop, not in threads
        finally:
            await store.close()

    _run(scenario())


def test_a_session_loaded_from_the_async_store_serves_the_same_request(tmp_path: Path) -> None:
    """Session.acreate / aappend / aload and Pipeline.aprepare on the async store give what the
    sync store gives for the same log."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], int]:
        async with await open_async_store(url, migrate=True) as store:
            session = await Session.acreate(store, "chat", model="claude-sonnet-4-5", system="Be brief.")
            await session.aappend([MessageAppended(role="user", content="What is 2 + 2?")])
            other = await Session.aload(store, "chat")
            await other.aappend([MessageAppended(role="assistant", content="4")])
            assert await session.arefresh() == 1
            prepared = await Pipeline().aprepare(session)
            return prepared.request, other.request(), session.last_seq

    served, other_request, last_seq = _run(scenario())
    with sessionstore.open_store(url) as sync_store:
        reloaded = Session(sync_store, "chat")
        assert reloaded.last_seq == last_seq == 5  # started, configured, two messages, served
        assert served == reloaded.request()
        assert other_request["messages"] == served["messages"] != []


def test_blocking_calls_from_store_code_leave_the_loop(tmp_path: Path) -> None:
    """A summarizer's model call made inside the async store's greenlet runs in a worker thread."""

    async def scenario() -> tuple[int, int]:
        async with await open_async_store(":memory:") as store:
            loop_thread = threading.get_ident()
            called_in = await store.run_sync(lambda _store: blocking_call(threading.get_ident))
            return loop_thread, called_in

    loop_thread, called_in = _run(scenario())
    assert called_in != loop_thread
    assert blocking_call(threading.get_ident) == threading.get_ident()  # outside: a plain call


def test_a_host_async_engine_with_a_table_prefix_is_shared_not_disposed(tmp_path: Path) -> None:
    """open_async_store(engine=...) runs on the host's AsyncEngine, under a table prefix, and
    leaves the engine usable after the store closes."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def scenario() -> list[str]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}")
        try:
            store = await open_async_store(engine=engine, table_prefix="agent_", migrate=True)
            sid = (await store.create_session()).id
            await store.append(sid, [MessageAppended(role="user", content="hi")], 0)
            assert (await store.verify(sid)).ok
            await store.close()
            async with engine.connect() as conn:  # still the host's, still open
                rows = await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
                return sorted(str(name) for (name,) in rows)
        finally:
            await engine.dispose()

    tables = _run(scenario())
    assert "agent_events" in tables
    assert "events" not in tables


def test_a_sync_engine_is_refused_as_the_async_stores_engine(tmp_path: Path) -> None:
    engine = sessionstore.store.create_engine_for_url(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(ValidationError, match="AsyncEngine"):
            _run(open_async_store(engine=engine))  # type: ignore[arg-type]
    finally:
        engine.dispose()

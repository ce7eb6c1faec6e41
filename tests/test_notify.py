"""PostgreSQL subscribers wake when an append commits (LISTEN/NOTIFY), without waiting for their poll.

Every test here sets the poll interval to a minute and has a pytest timeout well under it: an
event that arrives was delivered by the notification, never by a poll.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

import sessionstore
from sessionstore import MessageAppended, SessionExistsError, SessionStore
from sessionstore.store import SessionWrite
from sessionstore.store._listen import channel_sql

pytestmark = pytest.mark.postgres

#: Longer than any test here may take: an event that arrives was not fetched by a poll.
POLL_NEVER = 60.0

_WRITER = """
import sys
import sessionstore
from sessionstore import MessageAppended

url, session_id = sys.argv[1], sys.argv[2]
with sessionstore.open_store(url, token_counter=None) as store:
    result = store.append(session_id, [MessageAppended(role="user", content="from another process")], "any")
print(result.positions[-1])
"""


class Subscriber:
    """A subscriber on a thread of its own; ``received`` fills as events arrive."""

    def __init__(self, store: SessionStore, **options: Any) -> None:
        self.store = store
        self.stop = threading.Event()
        self.received: list[Any] = []
        self.arrived = threading.Condition()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, kwargs=options, daemon=True)
        self.thread.start()

    def _run(self, **options: Any) -> None:
        try:
            for recorded in self.store.subscribe(0, stop=self.stop, poll_interval=POLL_NEVER, **options):
                with self.arrived:
                    self.received.append(recorded)
                    self.arrived.notify_all()
        except BaseException as e:  # surfaced by wait_for
            self.error = e
            with self.arrived:
                self.arrived.notify_all()

    def wait_for(self, count: int) -> list[Any]:
        """Block until ``count`` events arrived (the test's timeout bounds it)."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.received) >= count or self.error is not None)
        assert self.error is None, self.error
        return self.received[:count]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


@pytest.mark.timeout(30)
def test_a_subscriber_wakes_when_another_process_commits(pg_backend: Any) -> None:
    """The writer is another process with its own connections; the subscriber polls once a minute."""
    writer = pg_backend.open(token_counter=None)
    reader = pg_backend.open(migrate=False, token_counter=None)
    sid = writer.create_session(events=[MessageAppended(role="user", content="history")]).id
    subscriber = Subscriber(reader)
    try:
        (history,) = subscriber.wait_for(1)  # caught up: now it waits on its LISTEN connection
        done = subprocess.run(
            [sys.executable, "-c", _WRITER, pg_backend.url, sid],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

        _, live = subscriber.wait_for(2)
    finally:
        subscriber.close()
        writer.close()
        reader.close()

    assert history.session_id == live.session_id == sid
    assert live.position == int(done.stdout)
    assert live.event.content == "from another process"


@pytest.mark.timeout(30)
def test_every_kind_of_write_wakes_subscribers(pg_backend: Any) -> None:
    """append, create_session with events and write_sessions all announce what they wrote."""
    store = pg_backend.open(token_counter=None)
    subscriber = Subscriber(pg_backend.open(migrate=False, token_counter=None))
    try:
        store.create_session("a", events=[MessageAppended(role="user", content="1")])
        assert [r.session_id for r in subscriber.wait_for(1)] == ["a"]
        store.append("a", [MessageAppended(role="user", content="2")], expected_seq=1)
        assert len(subscriber.wait_for(2)) == 2
        store.write_sessions([SessionWrite("b", [MessageAppended(role="user", content="3")], create=True)])
        assert [r.session_id for r in subscriber.wait_for(3)] == ["a", "a", "b"]
    finally:
        subscriber.close()
        subscriber.store.close()
        store.close()


def _listen(url: str, store: SessionStore) -> psycopg.Connection[Any]:
    """A plain psycopg connection LISTENing on the store's channel."""
    conninfo = sessionstore.store.resolve_url(url).replace("postgresql+psycopg://", "postgresql://")
    connection = psycopg.connect(conninfo, autocommit=True)
    row = connection.execute(f"SELECT {channel_sql(store.tables)}").fetchone()  # type: ignore[attr-defined]
    assert row is not None
    connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0])))
    return connection


@pytest.mark.timeout(30)
def test_the_notification_is_sent_by_the_commit_and_never_by_a_rollback(pg_backend: Any) -> None:
    """A transaction that inserted events and then failed announces nothing: the first
    notification heard is the next committed append's, carrying its last position."""
    store = pg_backend.open(token_counter=None)
    store.create_session("taken")
    listener = _listen(pg_backend.url, store)
    try:
        with pytest.raises(SessionExistsError):
            store.write_sessions(
                [
                    SessionWrite("fresh", [MessageAppended(role="user", content="rolled back")], create=True),
                    SessionWrite("taken", create=True),
                ]
            )
        assert store.read_all(0) == []  # the first write's events were inserted, then rolled back
        committed = store.append("taken", [MessageAppended(role="user", content="kept")], expected_seq=0)

        (heard,) = listener.notifies(stop_after=1)
    finally:
        listener.close()
        store.close()

    assert heard.payload == str(committed.positions[-1])


@pytest.mark.timeout(30)
def test_stores_under_another_schema_use_another_channel(pg_backend: Any) -> None:
    """The channel follows the store's schema: a neighbour's appends do not wake this store."""
    schema = f"n_{uuid.uuid4().hex[:10]}"
    store = pg_backend.open(token_counter=None)
    neighbour_url = pg_backend.url.replace("search_path%3D", f"search_path%3D{schema}%2C", 1)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        with sessionstore.open_store(neighbour_url, migrate=True, token_counter=None) as neighbour:
            ours = _listen(pg_backend.url, store)
            theirs = _listen(neighbour_url, neighbour)
            assert (
                ours.execute("SELECT current_schema()").fetchone()
                != theirs.execute("SELECT current_schema()").fetchone()
            )
            neighbour.create_session("n", events=[MessageAppended(role="user", content="theirs")])
            store.create_session("o", events=[MessageAppended(role="user", content="ours")])
            (heard,) = ours.notifies(stop_after=1)
            (heard_there,) = theirs.notifies(stop_after=1)
            ours.close()
            theirs.close()
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        store.close()

    assert heard.channel != heard_there.channel
    assert heard.payload == str(store_position(pg_backend, "o"))


def store_position(backend: Any, session_id: str) -> int:
    with backend.open(migrate=False, token_counter=None) as store:
        return int(store.read(session_id)[-1].position)


@pytest.mark.timeout(30)
def test_a_lost_listen_connection_falls_back_to_polling_and_listens_again(pg_backend: Any) -> None:
    """Its LISTEN connection killed, the subscriber polls (here every 50 ms) and reconnects."""
    application = f"listen-{uuid.uuid4().hex[:10]}"
    url = f"{pg_backend.url}&application_name={application}"
    writer = pg_backend.open(token_counter=None)
    reader = sessionstore.open_store(url, token_counter=None)
    stop = threading.Event()
    received: list[int] = []
    arrived = threading.Condition()

    def run() -> None:
        for recorded in reader.subscribe(0, stop=stop, poll_interval=0.05):
            with arrived:
                received.append(recorded.position)
                arrived.notify_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        writer.create_session("s", events=[MessageAppended(role="user", content="1")])
        with arrived:
            arrived.wait_for(lambda: len(received) == 1)
        with writer.engine.begin() as conn:
            # Only the connection this test's reader opened to LISTEN (its application name).
            killed = conn.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE application_name = '{application}' AND query LIKE 'LISTEN%%'"
            ).scalar_one()
        writer.append("s", [MessageAppended(role="user", content="2")], expected_seq=1)
        with arrived:
            arrived.wait_for(lambda: len(received) == 2)
        writer.append("s", [MessageAppended(role="user", content="3")], expected_seq=2)
        with arrived:
            arrived.wait_for(lambda: len(received) == 3)
        # It listens again (the test's timeout bounds the wait for the new connection).
        listening = 0
        while listening != 1:
            with writer.engine.begin() as conn:
                listening = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity "
                    f"WHERE application_name = '{application}' AND query LIKE 'LISTEN%%'"
                ).scalar_one()
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=5)
        writer.close()
        reader.close()

    assert killed == 1
    assert received == sorted(received)
    assert len(set(received)) == 3


@pytest.mark.timeout(30)
def test_the_async_store_s_appends_wake_subscribers_too(pg_backend: Any) -> None:
    """The async store runs the same write path: its commits notify as well."""
    import asyncio

    from sessionstore.store import open_async_store

    reader = pg_backend.open(token_counter=None)
    subscriber = Subscriber(reader)

    async def write() -> int:
        store = await open_async_store(pg_backend.url, token_counter=None)
        try:
            info = await store.create_session(events=[MessageAppended(role="user", content="async")])
            return int((await store.read(info.id))[-1].position)
        finally:
            await store.close()

    try:
        position = asyncio.run(write())
        (live,) = subscriber.wait_for(1)
    finally:
        subscriber.close()
        reader.close()

    assert live.position == position


async def _first_live_event(
    store: Any, stop: asyncio.Event, after_history: Callable[[], Awaitable[None]], **options: Any
) -> list[Any]:
    """Subscribe from 0 with a minute's poll interval; after the history event, run ``after_history``."""
    received: list[Any] = []
    async for recorded in store.subscribe(0, stop=stop, poll_interval=POLL_NEVER, **options):
        received.append(recorded)
        if len(received) == 1:
            await after_history()
        if len(received) == 2:
            stop.set()
    return received


@pytest.mark.timeout(30)
def test_an_async_subscriber_wakes_when_another_process_commits(pg_backend: Any) -> None:
    """The async store LISTENs on an AsyncConnection of its own; it polls once a minute."""
    from sessionstore.store import open_async_store

    writer = pg_backend.open(token_counter=None)
    sid = writer.create_session(events=[MessageAppended(role="user", content="history")]).id
    writer.close()
    written: list[int] = []

    async def append_from_another_process() -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, pg_backend.url, sid, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await process.communicate()
        assert process.returncode == 0
        written.append(int(out))

    async def run() -> list[Any]:
        store = await open_async_store(pg_backend.url, token_counter=None)
        try:
            return await _first_live_event(store, asyncio.Event(), append_from_another_process)
        finally:
            await store.close()

    history, live = asyncio.run(run())

    assert history.session_id == live.session_id == sid
    assert live.position == written[0]
    assert live.event.content == "from another process"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("listen", [True, False])
def test_an_async_subscriber_listens_on_a_connection_of_its_own_unless_told_not_to(
    pg_backend: Any, listen: bool
) -> None:
    """While it waits, the server shows its LISTEN connection; ``listen=False`` opens none and
    still receives appends by polling."""
    from sessionstore.store import open_async_store

    pg_backend.open(token_counter=None).close()

    async def run() -> tuple[list[Any], int]:
        store = await open_async_store(pg_backend.url, token_counter=None)
        other = await open_async_store(pg_backend.url, token_counter=None, migrate=False)
        listening: list[int] = []
        try:
            sid = (await store.create_session(events=[MessageAppended(role="user", content="1")])).id

            async def count_listeners_then_append() -> None:
                async with other.engine.connect() as conn:
                    channel_query = f"SELECT {channel_sql(store._store.tables)}"
                    channel = (await conn.exec_driver_sql(channel_query)).scalar()
                    rows = await conn.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN %%' "
                        "AND position(%s in query) > 0",
                        (channel,),
                    )
                    listening.append(int(rows.scalar_one()))
                await other.append(sid, [MessageAppended(role="user", content="2")], "any")

            options: dict[str, Any] = {"listen": listen}
            if not listen:
                options["poll_interval"] = 0.05
            received: list[Any] = []
            stop = asyncio.Event()
            async for recorded in store.subscribe(0, stop=stop, **options):
                received.append(recorded)
                if len(received) == 1:
                    await count_listeners_then_append()
                if len(received) == 2:
                    stop.set()
            return received, listening[0]
        finally:
            await other.close()
            await store.close()

    received, listeners = asyncio.run(run())
    assert [r.event.content for r in received] == ["1", "2"]
    assert listeners == (1 if listen else 0)


@pytest.mark.timeout(30)
def test_an_async_subscriber_whose_listen_connection_is_lost_polls_and_listens_again(
    pg_backend: Any,
) -> None:
    """Its LISTEN connection killed, the async subscriber polls (every 50 ms) and reconnects."""
    from sessionstore.store import open_async_store

    application = f"alisten-{uuid.uuid4().hex[:10]}"
    writer = pg_backend.open(token_counter=None)
    writer.create_session("s", events=[MessageAppended(role="user", content="1")])
    listen_connections = (
        "FROM pg_stat_activity "
        f"WHERE application_name = '{application}' AND query LIKE 'LISTEN%%'"
    )

    def sql_count(statement: str) -> int:
        with writer.engine.begin() as conn:
            return int(conn.exec_driver_sql(statement).scalar_one())

    async def run() -> tuple[list[int], int, int]:
        reader = await open_async_store(
            f"{pg_backend.url}&application_name={application}", token_counter=None, migrate=False
        )
        received: list[int] = []
        killed = listening = 0
        try:
            stop = asyncio.Event()
            async for recorded in reader.subscribe(0, stop=stop, poll_interval=0.05):
                received.append(recorded.position)
                if len(received) == 1:
                    # Only the connection this test's reader opened to LISTEN (its application name).
                    killed = await asyncio.to_thread(
                        sql_count, f"SELECT count(pg_terminate_backend(pid)) {listen_connections}"
                    )
                    await asyncio.to_thread(
                        writer.append, "s", [MessageAppended(role="user", content="2")], 1
                    )
                elif len(received) == 2:
                    await asyncio.to_thread(
                        writer.append, "s", [MessageAppended(role="user", content="3")], 2
                    )
                else:
                    # It listens again: it reconnected before the wait that ended in this read.
                    listening = await asyncio.to_thread(sql_count, f"SELECT count(*) {listen_connections}")
                    stop.set()
            return received, killed, listening
        finally:
            await reader.close()

    try:
        received, killed, listening = asyncio.run(run())
    finally:
        writer.close()

    assert killed == 1
    assert received == sorted(received)
    assert len(set(received)) == 3
    assert listening == 1

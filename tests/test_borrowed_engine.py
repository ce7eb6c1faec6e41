"""``open_store(engine=...)`` and ``open_async_store(engine=...)``: the store on the host
application's own SQLAlchemy engine."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

import sessionstore
from sessionstore import MessageAppended, SchemaOutOfDateError, SessionStarted, ValidationError
from sessionstore.store import resolve_url

from .conftest import Backend


@pytest.fixture
def host_engine(shared_backend: Backend) -> Iterator[Engine]:
    """The engine a host application makes for itself: plain ``create_engine``, nothing of ours."""
    engine = create_engine(resolve_url(shared_backend.url))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"))
    yield engine
    engine.dispose()


def test_the_store_works_on_the_host_engine_and_leaves_it_open(host_engine: Engine) -> None:
    pool = host_engine.pool

    store = sessionstore.open_store(engine=host_engine, migrate=True)
    sid = store.create_session(events=[SessionStarted()]).id
    store.append(sid, [MessageAppended(role="user", content="hi")], expected_seq=1)
    blob = store.put_blob(b"attachment")
    store.close()

    with host_engine.begin() as conn:  # the host's own work goes on on the same pool
        conn.execute(text("INSERT INTO orders (id, note) VALUES (1, 'paid')"))
    assert host_engine.pool is pool  # not disposed: the engine is the host's
    with sessionstore.open_store(engine=host_engine) as again:
        assert again.last_seq(sid) == 2
        assert again.verify(sid).ok
        assert again.get_blob(blob.sha256) == b"attachment"


def test_a_borrowed_engine_is_never_migrated_implicitly(host_engine: Engine) -> None:
    with pytest.raises(SchemaOutOfDateError, match="db upgrade"):
        sessionstore.open_store(engine=host_engine)


def test_url_and_engine_together_are_refused(host_engine: Engine) -> None:
    with pytest.raises(ValidationError, match="not both") as caught:
        sessionstore.open_store("x.db", engine=host_engine)
    assert caught.value.field == "engine"


def test_something_else_than_an_engine_is_refused() -> None:
    with pytest.raises(ValidationError, match="Engine") as caught:
        sessionstore.open_store(engine="sqlite://")  # type: ignore[arg-type]
    assert caught.value.field == "engine"


def test_prefix_and_schema_apply_to_a_borrowed_engine(host_engine: Engine) -> None:
    with sessionstore.open_store(engine=host_engine, table_prefix="agent_", migrate=True) as store:
        store.create_session("p")
    with host_engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM agent_sessions")).scalars().all() == ["p"]


class TestSQLiteEngine:
    """A host's SQLite engine gets sessionstore's connection setup, also on pooled connections."""

    @pytest.fixture
    def file_engine(self, tmp_path: Any) -> Iterator[Engine]:
        engine = create_engine(f"sqlite:///{tmp_path / 'host.db'}")
        yield engine
        engine.dispose()

    def test_connections_opened_before_are_configured_too(self, file_engine: Engine) -> None:
        with file_engine.connect() as conn:  # pooled before sessionstore sees the engine
            conn.execute(text("SELECT 1"))

        with sessionstore.open_store(engine=file_engine, migrate=True), file_engine.connect() as conn:
            pragmas = [conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in ("journal_mode", "foreign_keys")]

        assert pragmas == ["wal", 1]

    def test_a_host_transaction_in_progress_makes_an_append_wait_not_fail(self, file_engine: Engine) -> None:
        """The host holds the write lock; sessionstore's append queues behind it (busy_timeout)."""
        store = sessionstore.open_store(engine=file_engine, migrate=True)
        sid = store.create_session(events=[SessionStarted()]).id
        with file_engine.begin() as conn:
            conn.execute(text("CREATE TABLE notes (body TEXT)"))
        appended = threading.Event()
        errors: list[BaseException] = []

        def append() -> None:
            try:
                store.append(sid, [MessageAppended(role="user", content="later")], expected_seq=1)
                appended.set()
            except BaseException as e:  # reported below
                errors.append(e)

        with file_engine.begin() as conn:
            conn.execute(text("INSERT INTO notes VALUES ('holding the write lock')"))
            writer = threading.Thread(target=append)
            writer.start()
            assert not appended.wait(0.3)  # it waits for the host's commit
        writer.join(30)

        assert errors == []
        assert store.last_seq(sid) == 2
        store.close()

    def test_adopting_twice_configures_once(self, file_engine: Engine) -> None:
        with sessionstore.open_store(engine=file_engine, migrate=True) as first:
            first.create_session("a")
        with sessionstore.open_store(engine=file_engine) as second:
            assert [s.id for s in second.list_sessions()] == ["a"]
        with file_engine.begin() as conn:  # one BEGIN per transaction: a second would fail
            conn.execute(text("SELECT 1"))


class TestAsyncEngine:
    """``open_async_store(engine=...)``: the host's ``AsyncEngine`` (aiosqlite, psycopg async)."""

    @pytest.fixture
    def async_url(self, shared_backend: Backend) -> str:
        url = resolve_url(shared_backend.url)
        if url.startswith("sqlite"):
            return url.replace("sqlite://", "sqlite+aiosqlite://", 1)
        return url  # postgresql+psycopg: SQLAlchemy picks psycopg's async mode for an AsyncEngine

    def test_the_async_store_works_on_the_host_engine_and_leaves_it_open(self, async_url: str) -> None:
        async def scenario() -> tuple[int, bool, int]:
            engine = create_async_engine(async_url)
            try:
                async with engine.begin() as conn:
                    await conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)"))
                pool = engine.sync_engine.pool
                store = await sessionstore.open_async_store(
                    engine=engine, table_prefix="agent_", migrate=True
                )
                sid = (await store.create_session(events=[SessionStarted()])).id
                await store.append(sid, [MessageAppended(role="user", content="hi")], expected_seq=1)
                await store.close()
                async with engine.begin() as conn:  # the host's own work goes on on the same pool
                    await conn.execute(text("INSERT INTO orders (id, note) VALUES (1, 'paid')"))
                    in_prefixed = (await conn.execute(text("SELECT count(*) FROM agent_events"))).scalar_one()
                again = await sessionstore.open_async_store(engine=engine, table_prefix="agent_")
                try:
                    return await again.last_seq(sid), engine.sync_engine.pool is pool, int(in_prefixed)
                finally:
                    await again.close()
            finally:
                await engine.dispose()

        assert asyncio.run(scenario()) == (2, True, 2)

    def test_an_unmigrated_async_engine_is_not_migrated_implicitly(self, async_url: str) -> None:
        async def scenario() -> None:
            engine = create_async_engine(async_url)
            try:
                await sessionstore.open_async_store(engine=engine)
            finally:
                await engine.dispose()

        with pytest.raises(SchemaOutOfDateError, match="db upgrade"):
            asyncio.run(scenario())

    def test_a_sync_engine_is_refused(self, host_engine: Engine) -> None:
        with pytest.raises(ValidationError, match="AsyncEngine") as caught:
            asyncio.run(sessionstore.open_async_store(engine=host_engine))  # type: ignore[arg-type]
        assert caught.value.field == "engine"

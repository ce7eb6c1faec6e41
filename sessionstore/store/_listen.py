"""PostgreSQL change notifications: subscribers wake when an append commits, not at their next poll.

Every transaction that writes events ends with ``SELECT pg_notify(channel, last_position)``
(``DriverSQL.notify``). PostgreSQL delivers a notification when, and only if, its transaction
commits, so a woken subscriber always finds the events it was told of. A subscriber LISTENs on
a dedicated connection of its own *before* it reads the log, so an append committing between
its read and its wait still wakes it (the notification waits in the socket).

The channel is per store: ``<own_name("events")>_<16 hex of md5(schema)>`` (the store's schema,
else the connection's ``current_schema()``), so stores under another table prefix or schema in
the same database do not wake each other, and the name stays under PostgreSQL's 63 bytes.

Polling stays: a notification only shortens the wait, the subscriber still reads the durable log
(so nothing is lost if one is missed), waits at most ``poll_interval`` without one, and falls
back to polling alone while its LISTEN connection is down (reconnecting after the next read that
succeeds). SQLite has no notifications and polls.

``AsyncChangeListener`` does the same for the async store, on psycopg's ``AsyncConnection``:
it waits for ``notifies()`` on the event loop, never blocking it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import threading
import time
from typing import TYPE_CHECKING, Any

from .._telemetry import log_record, logger
from ._schema import StoreTables

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["STOP_CHECK_SECONDS", "AsyncChangeListener", "ChangeListener", "channel_sql"]

#: While waiting for a notification, how often a subscriber looks at its ``stop`` event.
STOP_CHECK_SECONDS = 0.1
_LOG = logger("store")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _warn_listen_failed(error: BaseException) -> None:
    log_record(
        _LOG,
        logging.WARNING,
        "listen",
        "cannot LISTEN for appends, polling instead: {error}",
        error=str(error),
    )


def _warn_listen_lost(error: BaseException) -> None:
    log_record(
        _LOG,
        logging.WARNING,
        "listen",
        "the LISTEN connection was lost, polling until it is back: {error}",
        error=str(error),
    )


def channel_sql(tables: StoreTables) -> str:
    """The SQL expression of the store's notification channel (see the module docstring)."""
    schema = _literal(tables.schema) if tables.schema else "current_schema()"
    return f"{_literal(tables.own_name('events') + '_')} || substr(md5({schema}), 1, 16)"


class ChangeListener:
    """A connection of its own, LISTENing on one store's channel, that a subscriber waits on."""

    def __init__(self, engine: Engine, tables: StoreTables) -> None:
        self._engine = engine
        self._tables = tables
        self._connection: Any = None

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._connection is not None

    def listen(self) -> bool:
        """(Re)open the connection and LISTEN; False (polling goes on) when that fails."""
        if self._connection is not None:
            return True
        import psycopg
        from psycopg import sql

        try:
            raw = self._engine.raw_connection()
            connection = raw.driver_connection
            raw.detach()  # a connection for good: it never goes back to the pool LISTENing
            assert isinstance(connection, psycopg.Connection)
            connection.rollback()  # whatever the pool's checkout began
            connection.autocommit = True
            channel = connection.execute(f"SELECT {channel_sql(self._tables)}").fetchone()
            assert channel is not None
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(str(channel[0]))))
        except (psycopg.Error, OSError) as e:
            _warn_listen_failed(e)
            return False
        self._connection = connection
        return True

    def wait(self, seconds: float, stop: threading.Event | None) -> bool:
        """Until a notification arrives (True), ``seconds`` pass or ``stop`` is set (False).

        A lost connection ends the wait early (False) and closes the listener: the caller polls
        until ``listen`` succeeds again.
        """
        import psycopg

        connection = self._connection
        assert connection is not None
        deadline = time.monotonic() + seconds
        while stop is None or not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                pause = min(remaining, STOP_CHECK_SECONDS)
                readable, _, _ = select.select([connection.fileno()], [], [], pause)
                if not readable:
                    continue
                pgconn = connection.pgconn
                pgconn.consume_input()
                heard = False
                while pgconn.notifies() is not None:
                    heard = True
                if pgconn.status != psycopg.pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the LISTEN connection was closed by the server")
            except (psycopg.Error, OSError, ValueError) as e:
                _warn_listen_lost(e)
                self.close()
                return False
            if heard:
                return True
        return False

    def close(self) -> None:
        """Close the LISTEN connection (a no-op when it is down)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection must not raise
                connection.close()


class AsyncChangeListener:
    """``ChangeListener`` for the async store: a psycopg ``AsyncConnection`` of its own.

    ``engine`` is the async engine's ``sync_engine``: the connection comes from its pool (the
    store's connect arguments and credentials) through SQLAlchemy's greenlet bridge, and is
    then detached, so it never returns to the pool LISTENing.
    """

    def __init__(self, engine: Engine, tables: StoreTables) -> None:
        self._engine = engine
        self._tables = tables
        self._connection: Any = None

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._connection is not None

    async def listen(self) -> bool:
        """(Re)open the connection and LISTEN; False (polling goes on) when that fails."""
        if self._connection is not None:
            return True
        import psycopg
        from psycopg import sql
        from sqlalchemy.util.concurrency import greenlet_spawn

        connection: Any = None
        try:
            raw = await greenlet_spawn(self._engine.raw_connection)
            connection = raw.driver_connection
            raw.detach()
            assert isinstance(connection, psycopg.AsyncConnection)
            await connection.rollback()  # whatever the pool's checkout began
            await connection.set_autocommit(True)
            cursor = await connection.execute(f"SELECT {channel_sql(self._tables)}")
            channel = await cursor.fetchone()
            assert channel is not None
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(str(channel[0]))))
        except (psycopg.Error, OSError) as e:
            _warn_listen_failed(e)
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()
            return False
        self._connection = connection
        return True

    async def wait(self, seconds: float, stop: asyncio.Event | threading.Event | None) -> bool:
        """Until a notification arrives (True), ``seconds`` pass or ``stop`` is set (False).

        An ``asyncio.Event`` ends the wait at once, a ``threading.Event`` within
        ``STOP_CHECK_SECONDS``. A lost connection ends the wait early (False) and closes the
        listener: the caller polls until ``listen`` succeeds again.
        """
        import psycopg

        heard = asyncio.ensure_future(self._next_notification())
        stopped = asyncio.ensure_future(stop.wait()) if isinstance(stop, asyncio.Event) else None
        waiting = {heard} if stopped is None else {heard, stopped}
        deadline = time.monotonic() + seconds
        try:
            while not heard.done() and (stopped is None or not stopped.done()):
                if isinstance(stop, threading.Event) and stop.is_set():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                polled_stop = isinstance(stop, threading.Event)
                pause = min(remaining, STOP_CHECK_SECONDS) if polled_stop else remaining
                await asyncio.wait(waiting, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
            if not heard.done():
                return False
            heard.result()  # raises what ended the connection
            return True
        except (psycopg.Error, OSError) as e:
            _warn_listen_lost(e)
            await self.close()
            return False
        finally:
            for task in waiting:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, psycopg.Error, OSError):
                        await task

    async def _next_notification(self) -> None:
        # notifies() without arguments works on every psycopg 3 (its timeout came in 3.2);
        # the wait above bounds it and cancels it, and aclosing frees the connection at once.
        async with contextlib.aclosing(self._connection.notifies()) as notifies:
            async for _ in notifies:
                return

    async def close(self) -> None:
        """Close the LISTEN connection (a no-op when it is down)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection must not raise
                await connection.close()

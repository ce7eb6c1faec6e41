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
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from typing import TYPE_CHECKING, Any

from .._telemetry import log_record, logger
from ._schema import StoreTables

if TYPE_CHECKING:
    import threading

    from sqlalchemy import Engine

__all__ = ["STOP_CHECK_SECONDS", "ChangeListener", "channel_sql"]

#: While waiting for a notification, how often a subscriber looks at its ``stop`` event.
STOP_CHECK_SECONDS = 0.1
_LOG = logger("store")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


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
            log_record(
                _LOG,
                logging.WARNING,
                "listen",
                "cannot LISTEN for appends, polling instead: {error}",
                error=str(e),
            )
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
                log_record(
                    _LOG,
                    logging.WARNING,
                    "listen",
                    "the LISTEN connection was lost, polling until it is back: {error}",
                    error=str(e),
                )
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

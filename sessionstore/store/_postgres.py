"""PostgreSQL backend: many agent processes and machines sharing sessions.

Global order without skips: positions come from a sequence, and a sequence value is taken
at INSERT time, not at COMMIT. Two concurrent transactions can therefore commit positions
out of order, and a subscriber that has already read position 11 would never see a 10
that commits a moment later. Every event-writing transaction therefore takes
``LOCK TABLE events IN EXCLUSIVE MODE`` first: writers queue (readers do not — EXCLUSIVE
still admits ACCESS SHARE), so positions are assigned in commit order and a reader tailing
``read_all`` can never skip. It also makes the per-session head check race-free, so seqs stay
gap-free. We chose the table lock over a transaction-id horizon reader because its
correctness is evident and holds for every reader query; its cost (appends to different
sessions serialize) is measured in bench/postgres.py. ``lock_timeout`` bounds the wait.

Durability: ``synchronous_commit`` is left at the server default (``on``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Select, create_engine
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.engine import URL, make_url

from ..errors import MissingDependencyError
from ._driver import DriverSQL
from ._hashing import as_utc
from ._listen import AsyncChangeListener, ChangeListener
from ._sql import SqlSessionStore

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "PostgresSessionStore",
    "create_async_postgres_engine",
    "create_postgres_engine",
    "require_psycopg",
]

#: Server-side bounds on waiting, in milliseconds (G11 of the guarantees).
LOCK_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000
STATEMENT_TIMEOUT_MS = 300_000
#: Seconds one connection attempt may take.
CONNECT_TIMEOUT_S = 10


def require_psycopg() -> None:
    """Import psycopg (the ``postgres`` extra) now, or say which extra to install.

    Raises:
        MissingDependencyError: psycopg 3 is not installed.
    """
    try:
        import psycopg  # noqa: F401 - an optional extra: imported when PostgreSQL is used
    except ImportError as e:
        raise MissingDependencyError("postgres", "a PostgreSQL database", e.name or "psycopg") from e


def create_postgres_engine(url: str, **engine_kwargs: Any) -> Engine:
    """An engine over psycopg 3 with bounded lock, statement and idle-transaction waits.

    ``options`` given in the URL's query (``?options=-csearch_path%3Dtenant``) are kept and
    come first, so a URL can still pick a schema.

    Raises:
        MissingDependencyError: the ``postgres`` extra (psycopg) is not installed.
    """
    require_psycopg()
    parsed, kwargs = _engine_args(url, engine_kwargs)
    return create_engine(parsed, **kwargs)


def create_async_postgres_engine(url: str, **engine_kwargs: Any) -> AsyncEngine:
    """``create_postgres_engine`` in psycopg 3's async mode (the same driver, the same bounds).

    Raises:
        MissingDependencyError: the ``postgres`` extra (psycopg) is not installed.
    """
    require_psycopg()
    from sqlalchemy.ext.asyncio import create_async_engine  # not loaded by ``import sessionstore``

    parsed, kwargs = _engine_args(url, engine_kwargs)
    return create_async_engine(parsed.set(drivername="postgresql+psycopg_async"), **kwargs)


def _engine_args(url: str, engine_kwargs: dict[str, Any]) -> tuple[URL, dict[str, Any]]:
    """The URL (its ``options`` moved into the connect arguments) and the engine's keywords."""
    parsed = make_url(url)
    url_options = parsed.query.get("options")
    own = (
        f"-c lock_timeout={LOCK_TIMEOUT_MS} "
        f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS} "
        f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"
    )
    given = url_options if isinstance(url_options, str) else " ".join(url_options or ())
    options = f"{given} {own}".strip()
    kwargs: dict[str, Any] = {
        "pool_pre_ping": True,
        "pool_timeout": 30,
        # A server that accepts TCP but never answers must not hang a call: the retry policy
        # bounds the total, this bounds each connection attempt.
        "connect_args": {"options": options, "connect_timeout": CONNECT_TIMEOUT_S},
    }
    kwargs.update(engine_kwargs)
    return parsed.difference_update_query(["options"]), kwargs


class PostgresSessionStore(SqlSessionStore):
    """The store on a PostgreSQL database."""

    dialect_insert = staticmethod(postgres_insert)
    driver_sql = DriverSQL(
        mark="%s",
        # psycopg opens the transaction implicitly; the lock is its first statement.
        begin_write="LOCK TABLE {events} IN EXCLUSIVE MODE",
        to_timestamp=lambda moment: moment,
        to_datetime=as_utc,  # psycopg returns timestamptz aware, in the connection's time zone
        many_returning=True,
        # Sent inside the append's transaction: listeners hear of it on COMMIT, never before,
        # and never for a transaction that rolled back.
        notify="SELECT pg_notify({channel}, %s)",
    )
    # An erasure serializes against event writers like an append does.
    lock_writers = True

    def _change_listener(self) -> ChangeListener:
        """LISTEN/NOTIFY: subscribers wake when an append commits (``_listen.py``)."""
        return ChangeListener(self.engine, self.tables)

    def _async_change_listener(self) -> AsyncChangeListener:
        """The same for the async store (``self.engine`` is its async engine's ``sync_engine``)."""
        return AsyncChangeListener(self.engine, self.tables)

    def _read_snapshot(self, conn: Connection, newest: Select[Any]) -> tuple[int, bytes] | None:
        # In psycopg's default text format a bytea arrives hex-encoded, twice its size, and is
        # decoded again: the binary format reads a 28 MB snapshot in ~60% of the time.
        if self.in_greenlet:  # the async driver adapter offers no binary cursor
            return super()._read_snapshot(conn, newest)
        query = newest.add_columns(self.tables.snapshots.c.state).compile(dialect=conn.dialect)
        import psycopg  # imported already: the engine needed it

        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        with driver.cursor(binary=True) as cursor:
            cursor.execute(str(query), query.params)
            row = cursor.fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

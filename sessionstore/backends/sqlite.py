"""SQLite backend: one machine, many processes, WAL.

Concurrency: every write transaction starts with ``BEGIN IMMEDIATE``, which takes the
database's write lock up front. With the default deferred ``BEGIN`` two writers can both
read the session head and then both try to upgrade to a write lock; SQLite cannot wait for
that (it would deadlock) and fails one with SQLITE_BUSY immediately, ignoring busy_timeout.
IMMEDIATE makes the second writer wait (up to busy_timeout) instead, so a race yields a
clean ``ConcurrencyError``, never "database is locked". Reads use a deferred ``BEGIN`` and,
under WAL, never block writers. See https://sqlite.org/lang_transaction.html and
https://sqlite.org/wal.html.

Durability: ``synchronous=FULL`` by default (an acknowledged append survives power loss);
``NORMAL`` is an explicit opt-in (survives application crashes; the last commits may roll
back on power loss).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from sqlalchemy import Connection, Engine, Select, create_engine, event, literal_column
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.pool import StaticPool

from ._driver import DriverSQL, sqlite_timestamp
from ._sql import SqlSessionStore

__all__ = ["SQLiteDurability", "SQLiteSessionStore", "create_sqlite_engine"]

SQLiteDurability = Literal["full", "normal"]

#: How long a writer waits for another writer's lock before failing (milliseconds).
BUSY_TIMEOUT_MS = 30_000
# RETURNING (used to learn assigned positions) arrived in SQLite 3.35.
_MIN_SQLITE = (3, 35, 0)


def create_sqlite_engine(url: str, *, durability: SQLiteDurability = "full") -> Engine:
    """An engine whose every connection has sessionstore's PRAGMAs and begin modes."""
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        msg = f"sessionstore needs SQLite >= 3.35 (RETURNING); this Python has {sqlite3.sqlite_version}"
        raise RuntimeError(msg)
    if durability not in ("full", "normal"):
        msg = f"durability must be 'full' or 'normal', not {durability!r}"
        raise ValueError(msg)
    in_memory = url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url
    kwargs: dict[str, Any] = {}
    if in_memory:
        # One connection shared by all threads, or every connection would get its own empty database.
        kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    engine = create_engine(url, **kwargs)
    synchronous = durability.upper()

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # Autocommit at the driver level: sessionstore issues BEGIN itself (below), so the
        # pysqlite module's own implicit BEGIN never runs.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        if conn.get_execution_options().get("sessionstore_read"):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class SQLiteSessionStore(SqlSessionStore):
    """The store on a SQLite file (or ``:memory:`` for throwaway use)."""

    dialect_insert = staticmethod(sqlite_insert)
    driver_sql = DriverSQL(
        mark="?",
        begin_write="BEGIN IMMEDIATE",  # see the module docstring: no SQLITE_BUSY under contention
        to_timestamp=sqlite_timestamp,
        many_returning=False,  # sqlite3's executemany returns no rows ...
        # ... but BEGIN IMMEDIATE makes the positions of one batch consecutive.
        last_rowid="SELECT last_insert_rowid()",
    )

    def _read_snapshot(self, conn: Connection, newest: Select[Any]) -> tuple[int, bytes] | None:
        # Incremental blob I/O copies the row's overflow pages straight into the result: a
        # SELECT assembles the value in SQLite first and copies it again (~2x slower at 100 MB).
        # Same connection and read transaction as the SELECT, so the row is the one it found.
        row = conn.execute(newest.add_columns(literal_column("rowid").label("rowid"))).first()
        if row is None:
            return None
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        with driver.blobopen("snapshots", "state", int(row.rowid), readonly=True) as blob:
            return int(row.seq), blob.read()

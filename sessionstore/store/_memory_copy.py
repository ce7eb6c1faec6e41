"""A new private in-memory SQLite database starts as a copy of one migrated before.

Running every Alembic revision costs about 60 ms; an in-memory store is opened for each test of
an application, each throwaway agent run. The first in-memory database this process migrates
(per table prefix) is serialized once, and every later empty one is loaded from those bytes
(``sqlite3.Connection.deserialize``, well under a millisecond): the same schema, triggers and
version row, since the same code migrated it. A named shared in-memory database
(``mode=memory``) may already hold data and is always migrated as usual, and so is a
connection that is not the standard library's ``sqlite3`` (aiosqlite, or a SQLite without
``serialize``).
"""

from __future__ import annotations

import sqlite3
import threading

from sqlalchemy import Connection, Engine

from ._schema import StoreTables

__all__ = ["is_private_memory_url", "load_migrated_copy", "remember_migrated"]

#: The serialized migrated database of each table prefix.
_MIGRATED: dict[str, bytes] = {}
_LOCK = threading.Lock()


def is_private_memory_url(url: str) -> bool:
    """True for an in-memory database no other connection can see (``sqlite://``)."""
    return url in ("sqlite://", "sqlite:///:memory:")


def _driver(conn: Connection) -> sqlite3.Connection | None:
    """``conn``'s sqlite3 connection when nothing runs on it and it can (de)serialize, else None."""
    driver = conn.connection.driver_connection
    if not isinstance(driver, sqlite3.Connection) or driver.in_transaction:
        return None
    if not hasattr(driver, "serialize"):  # a SQLite built without SQLITE_ENABLE_DESERIALIZE
        return None
    return driver


def load_migrated_copy(engine: Engine, tables: StoreTables) -> bool:
    """Load the migrated database for ``tables`` into ``engine``'s one (empty) connection.

    False when there is none yet or the connection cannot take it: then migrate as usual.
    """
    with _LOCK:
        migrated = _MIGRATED.get(tables.prefix)
    if migrated is None:
        return False
    with engine.connect() as conn:
        driver = _driver(conn)
        if driver is None:
            return False
        driver.deserialize(migrated)
    return True


def remember_migrated(engine: Engine, tables: StoreTables) -> None:
    """Keep a copy of ``engine``'s just-migrated, still empty in-memory database."""
    with engine.connect() as conn:
        driver = _driver(conn)
        if driver is None:
            return
        migrated = driver.serialize()
    with _LOCK:
        _MIGRATED.setdefault(tables.prefix, migrated)

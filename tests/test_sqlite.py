"""SQLite specifics: PRAGMAs on every pooled connection, durability opt-in, begin modes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import sessionstore


def _pragmas(store: sessionstore.SessionStore, count: int) -> list[tuple[str, int, int, int]]:
    """Check out ``count`` connections at once so the pool must create distinct ones."""
    engine = store.engine  # type: ignore[attr-defined]
    connections = [engine.connect().execution_options(sessionstore_read=True) for _ in range(count)]
    try:
        return [
            (
                conn.exec_driver_sql("PRAGMA journal_mode").scalar(),
                conn.exec_driver_sql("PRAGMA synchronous").scalar(),
                conn.exec_driver_sql("PRAGMA busy_timeout").scalar(),
                conn.exec_driver_sql("PRAGMA foreign_keys").scalar(),
            )
            for conn in connections
        ]
    finally:
        for conn in connections:
            conn.close()


def test_every_pooled_connection_is_configured(tmp_path: Path) -> None:
    """WAL, synchronous=FULL (2), a 30 s busy timeout and foreign keys on each connection."""
    with sessionstore.open_store(tmp_path / "p.db", migrate=True) as store:
        settings = _pragmas(store, 4)

    assert settings == [("wal", 2, 30_000, 1)] * 4


def test_normal_durability_is_an_explicit_opt_in(tmp_path: Path) -> None:
    """durability='normal' sets synchronous=NORMAL (1)."""
    with sessionstore.open_store(tmp_path / "n.db", migrate=True, durability="normal") as store:
        assert {s[1] for s in _pragmas(store, 2)} == {1}

    with pytest.raises(ValueError, match="durability"):
        sessionstore.open_store(tmp_path / "bad.db", migrate=True, durability="off")  # type: ignore[arg-type]


def test_writes_begin_immediate_and_reads_deferred(tmp_path: Path) -> None:
    """A write transaction holds the write lock from BEGIN; reads still proceed beside it."""
    path = tmp_path / "b.db"
    with sessionstore.open_store(path, migrate=True, token_counter=None) as store:
        sid = store.create_session().id
        engine = store.engine  # type: ignore[attr-defined]
        other = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        try:
            with engine.connect() as writer, writer.begin():
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("BEGIN IMMEDIATE")
                assert other.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
                assert store.last_seq(sid) == 0
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()

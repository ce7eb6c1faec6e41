"""A private in-memory store starts as a copy of the first one this process migrated
(store/_memory_copy.py): the same schema, triggers and version row, none of its data."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import MessageAppended
from sessionstore.errors import AppendOnlyViolation
from sessionstore.store import SCHEMA_REVISION, database_revision
from sessionstore.store._sql import translate_errors


def _tables(store: sessionstore.SessionStore) -> list[str]:
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"))
        return [row[0] for row in rows]


def test_a_later_in_memory_store_is_migrated_and_holds_none_of_an_earlier_ones_data() -> None:
    with sessionstore.open_store(":memory:", token_counter=None) as first:
        first.create_session("kept-apart", events=[MessageAppended(role="user", content="one")])
        with sessionstore.open_store("sqlite://", token_counter=None) as second:
            assert second.list_sessions() == []
            assert database_revision(second.engine) == SCHEMA_REVISION  # type: ignore[attr-defined]
            assert _tables(second) == _tables(first)
            second.create_session("s", events=[MessageAppended(role="user", content="two")])
            assert len(second.read("s")) == 1
        assert [info.id for info in first.list_sessions()] == ["kept-apart"]


def test_the_copy_keeps_the_append_only_triggers() -> None:
    sessionstore.open_store(":memory:", token_counter=None).close()
    with sessionstore.open_store(":memory:", token_counter=None) as store:
        store.create_session("s", events=[MessageAppended(role="user", content="one")])
        engine = store.engine  # type: ignore[attr-defined]
        with pytest.raises(AppendOnlyViolation), translate_errors(), engine.begin() as conn:
            conn.execute(text("DELETE FROM events"))
        assert len(store.read("s")) == 1


def test_a_table_prefix_gets_a_copy_of_its_own_layout() -> None:
    sessionstore.open_store(":memory:", token_counter=None).close()
    for _ in range(2):
        with sessionstore.open_store(":memory:", table_prefix="agent_", token_counter=None) as store:
            tables = _tables(store)
            assert "agent_events" in tables and "events" not in tables
            store.create_session("s")


def test_only_the_first_in_memory_store_of_a_process_runs_the_migrations() -> None:
    """Counted in a fresh interpreter: three stores, one migration; a named shared in-memory
    database (which another connection may already fill) is migrated as usual."""
    code = (
        "import sessionstore\n"
        "from sessionstore.store import _open\n"
        "runs = []\n"
        "real = _open.upgrade\n"
        "_open.upgrade = lambda *a, **k: (runs.append(1), real(*a, **k))[1]\n"
        "for _ in range(3):\n"
        "    sessionstore.open_store(':memory:', token_counter=None).close()\n"
        "print(len(runs))\n"
        "shared = 'sqlite:///file:copytest?mode=memory&cache=shared&uri=true'\n"
        "sessionstore.open_store(shared, migrate=True, token_counter=None).close()\n"
        "print(len(runs))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "2"]

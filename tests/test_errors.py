"""Driver errors become sessionstore errors, per backend, at one boundary."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import SessionStore
from sessionstore.store._sql import translate_errors


def _execute(store: SessionStore, statement: str, **params: Any) -> None:
    with translate_errors(), store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text(statement), params)


class TestTranslation:
    def test_missing_table_is_a_programming_error(self, store: SessionStore) -> None:
        """Querying a table that does not exist raises ProgrammingError."""
        with pytest.raises(sessionstore.errors.ProgrammingError) as caught:
            _execute(store, "SELECT * FROM no_such_table")

        assert isinstance(caught.value.__cause__, Exception)

    def test_broken_sql_is_a_programming_error_or_operational(self, store: SessionStore) -> None:
        """Syntax errors surface as a DatabaseError subclass (PEP 249 names), never a driver class."""
        with pytest.raises(sessionstore.errors.DatabaseError):
            _execute(store, "SELEKT 1")

    @pytest.mark.parametrize(
        ("statement", "constraint"),
        [
            (
                "INSERT INTO sessions (id, created_at, metadata) VALUES ('dup', CURRENT_TIMESTAMP, '{}')",
                "pk_sessions",
            ),
            (
                "INSERT INTO sessions (id, created_at, metadata, fork_seq) "
                "VALUES ('orphan-fork', CURRENT_TIMESTAMP, '{}', 3)",
                "ck_sessions_fork_needs_parent",
            ),
            (
                "INSERT INTO sessions (id, created_at, metadata, parent_session_id) "
                "VALUES ('no-parent', CURRENT_TIMESTAMP, '{}', 'ghost')",
                "fk_sessions_parent_session_id_sessions",
            ),
        ],
    )
    def test_constraint_violations_name_the_constraint(
        self, store: SessionStore, statement: str, constraint: str
    ) -> None:
        """Unique, check and foreign-key violations are IntegrityError carrying the constraint's name."""
        store.create_session("dup")

        with pytest.raises(sessionstore.errors.IntegrityError) as caught:
            _execute(store, statement)

        if store.engine.dialect.name == "sqlite" and constraint.startswith("fk_"):  # type: ignore[attr-defined]
            assert caught.value.constraint is None  # SQLite's message names no foreign key
        else:
            assert caught.value.constraint == constraint

    def test_append_only_is_distinguished_from_constraint_errors(self, store: SessionStore) -> None:
        """The trigger's refusal is AppendOnlyViolation, not IntegrityError."""
        store.create_session("s1", events=[sessionstore.SessionStarted()])

        with pytest.raises(sessionstore.errors.AppendOnlyViolation) as caught:
            _execute(store, "DELETE FROM events")

        assert not isinstance(caught.value, sessionstore.errors.IntegrityError)

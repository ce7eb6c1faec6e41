"""The store contract with sessionstore's tables under a table prefix, or in a PostgreSQL schema.

The ``backend`` fixture is overridden here: the contract classes of tests/test_store.py (imported
below, so pytest runs them again in this module) run on each layout, given through the URL's
``table_prefix`` / ``schema`` parameters as a user would configure them. The tests after them
check what only a layout can break: names of triggers, constraints and the version table, and
that nothing lands outside the layout.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, make_url, text

import sessionstore
from sessionstore import MessageAppended, SessionStarted, SessionStore, ValidationError
from sessionstore.cli import main
from sessionstore.store import SCHEMA_REVISION, _sql, resolve_url, store_tables

from .conftest import Backend, _make_backend
from .test_store import (  # noqa: F401 - collected again here, on every layout
    TestAppendAndRead,
    TestConcurrencyControl,
    TestIdempotency,
    TestSessions,
    TestValidation,
    TestVerify,
    test_a_very_large_batch_is_stored_whole,
)

PREFIX = "ss_"
LAYOUTS = [
    "sqlite-file+prefix",
    pytest.param("postgres+prefix", marks=pytest.mark.postgres),
    pytest.param("postgres+schema", marks=pytest.mark.postgres),
    pytest.param("postgres+prefix+schema", marks=pytest.mark.postgres),
]


def _with_query(url: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture(params=LAYOUTS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A database on one layout: sessionstore's tables under a prefix and/or in their own schema."""
    yield from _layout_backend(str(request.param), tmp_path)


@pytest.fixture(params=[p for p in LAYOUTS if not isinstance(p, str)])
def pg_layout_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """A migrated store on each PostgreSQL layout."""
    for backend in _layout_backend(str(request.param), tmp_path):
        with backend.open() as store:
            yield store


def _layout_backend(layout: str, tmp_path: Path) -> Iterator[Backend]:
    base, *options = layout.split("+")
    for plain in _make_backend("sqlite-file" if base == "sqlite-file" else "postgres", tmp_path):
        params: dict[str, str] = {}
        if "prefix" in options:
            params["table_prefix"] = PREFIX
        if "schema" not in options:
            yield Backend(plain.name, _with_query(plain.url, **params))
            return
        # A schema of its own beside the test's (which is the connection's search_path).
        schema = f"ss_{uuid.uuid4().hex[:12]}"
        admin = create_engine(resolve_url(plain.url))
        try:
            yield Backend(plain.name, _with_query(plain.url, schema=schema, **params))
        finally:
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            admin.dispose()


def _layout(store: SessionStore) -> Any:
    return store.tables  # type: ignore[attr-defined]


def _objects(store: SessionStore) -> dict[str | None, set[str]]:
    """Table names per schema: the connection's default schema (None) and the layout's."""
    layout = _layout(store)
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        inspector = inspect(conn)
        found: dict[str | None, set[str]] = {None: set(inspector.get_table_names())}
        if layout.schema is not None:
            found[layout.schema] = set(inspector.get_table_names(schema=layout.schema))
    return found


def test_the_tables_are_where_the_layout_says_and_nowhere_else(store: SessionStore) -> None:
    layout = _layout(store)
    bases = (
        "sessions",
        "events",
        "blobs",
        "blob_refs",
        "token_counts",
        "snapshots",
        "session_keys",
        "erasures",
        "erasure_guard",
    )
    expected = {layout.name(t) for t in bases} | {layout.version_table}

    found = _objects(store)

    assert found[layout.schema] == expected
    if layout.schema is not None:
        assert found[None] == set()  # nothing of sessionstore's in the connection's own schema
    assert "alembic_version" not in set().union(*found.values())
    assert layout.version_table == (
        f"{PREFIX}alembic_version" if layout.prefix else "sessionstore_alembic_version"
    )


@pytest.fixture
def raw_sql(store: SessionStore) -> Callable[[str], None]:
    """Run one statement (``{events}``, ``{blobs}``, ``{sessions}``: the layout's names)."""
    layout = _layout(store)
    names = {t: layout.sql_name(t) for t in ("events", "blobs", "sessions")}

    def run(statement: str) -> None:
        with _sql.translate_errors(layout), store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(text(statement.format(**names)))

    return run


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {events} SET payload = '{{}}'",
        "DELETE FROM {events}",
        "UPDATE {blobs} SET size = 0",
        "DELETE FROM {blobs}",
        "UPDATE {sessions} SET metadata = '{{}}'",
        "DELETE FROM {sessions}",
    ],
)
def test_the_append_only_guard_covers_the_layouts_tables(
    store: SessionStore, raw_sql: Callable[[str], None], statement: str
) -> None:
    sid = store.create_session(events=[SessionStarted()]).id
    store.put_blob(b"payload")

    with pytest.raises(sessionstore.errors.AppendOnlyViolation, match="append-only"):
        raw_sql(statement)
    assert store.verify(sid).ok


def test_truncate_is_refused_on_postgres(pg_layout_store: SessionStore) -> None:
    store = pg_layout_store
    layout = _layout(store)
    store.create_session(events=[SessionStarted()])

    for table in ("events", "blobs", "sessions"):
        with (
            pytest.raises(sessionstore.errors.AppendOnlyViolation),
            _sql.translate_errors(layout),
            store.engine.begin() as conn,  # type: ignore[attr-defined]
        ):
            conn.execute(text(f"TRUNCATE {layout.sql_name(table)} CASCADE"))
    assert store.max_position() == 1


def test_blobs_snapshots_and_a_resumed_session(store: SessionStore) -> None:
    """Blobs and snapshots (SQLite reads snapshots by table name) work in the layout's tables."""
    ref = store.put_blob(("tool output\n" * 2000).encode())
    session = sessionstore.Session.create(store, model="claude-sonnet-4-5", system="s")
    session.append([MessageAppended(role="user", content="hello")])
    session.snapshot()

    resumed = sessionstore.Session(store, session.id)

    assert store.get_blob(ref.sha256) == ("tool output\n" * 2000).encode()
    assert resumed.request() == session.request()
    current = sessionstore.projections.ApiContextProjection.version
    assert store.latest_snapshot(session.id, "api_context", current, session.tokenizer) is not None


def test_get_or_create_uses_the_layouts_unique_index(store: SessionStore) -> None:
    first, created = store.get_or_create_session("acme", "ada", "chat-1")
    again, created_again = store.get_or_create_session("acme", "ada", "chat-1")

    assert (created, created_again) == (True, False)
    assert again.id == first.id


def test_unique_violations_keep_their_names(store: SessionStore) -> None:
    """The store recognises its constraints by the layout's names (a reused event id is a retry)."""
    sid = store.create_session(events=[SessionStarted()]).id
    event = MessageAppended(role="user", content="once")
    first = store.append(sid, [event], expected_seq=1)

    retried = store.append(sid, [event], expected_seq=1)

    assert retried.deduplicated
    assert retried.positions == first.positions


def test_two_layouts_share_a_database_without_seeing_each_other(backend: Backend) -> None:
    """The same database, with and without the layout: separate sessions, separate migrations."""
    parsed = make_url(backend.url).difference_update_query(["table_prefix", "schema"])
    plain_url = parsed.render_as_string(hide_password=False)
    with backend.open() as ours, sessionstore.open_store(plain_url, migrate=True) as theirs:
        ours.create_session("mine")
        theirs.create_session("theirs")
        assert [s.id for s in ours.list_sessions()] == ["mine"]
        assert [s.id for s in theirs.list_sessions()] == ["theirs"]
        ours_layout, their_layout = _layout(ours), _layout(theirs)
    assert ours_layout != their_layout

    engine = sessionstore.store.create_engine_for_url(backend.url)
    try:
        sessionstore.store.downgrade(engine, "base", drop_events=True, tables=their_layout)
        with sessionstore.open_store(backend.url) as ours:
            assert [s.id for s in ours.list_sessions()] == ["mine"]
    finally:
        engine.dispose()


def test_db_commands_take_the_layout_as_flags(tmp_path: Path) -> None:
    """`db upgrade --table-prefix` and `sessions --table-prefix` address the prefixed tables."""
    db = str(tmp_path / "host.db")
    out = io.StringIO()

    assert main(["db", "upgrade", "--db", db, "--table-prefix", "agent_"], out=io.StringIO()) == 0
    assert main(["new", "--id", "t-1", "--db", db, "--table-prefix", "agent_"], out=io.StringIO()) == 0
    assert main(["db", "current", "--db", db, "--table-prefix", "agent_", "--json"], out=out) == 0
    with sessionstore.open_store(db, table_prefix="agent_") as store:
        assert [s.id for s in store.list_sessions()] == ["t-1"]
    assert f'"revision": "{SCHEMA_REVISION}"' in out.getvalue()
    assert main(["db", "current", "--db", db], out=(plain := io.StringIO())) == 0
    assert plain.getvalue().strip() == "none"  # no unprefixed sessionstore schema there


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"table_prefix": "Agent"}, "table_prefix"),
        ({"table_prefix": "a; DROP TABLE x"}, "table_prefix"),
        ({"table_prefix": "a" * 13}, "table_prefix"),
        ({"schema": "Bad-Schema"}, "schema"),
    ],
)
def test_a_bad_prefix_or_schema_is_refused_before_anything_is_touched(
    tmp_path: Path, options: dict[str, str], field: str
) -> None:
    db = tmp_path / "x.db"
    with pytest.raises(ValidationError) as caught:
        sessionstore.open_store(db, migrate=True, **options)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_a_schema_on_sqlite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="PostgreSQL") as caught:
        sessionstore.open_store(tmp_path / "x.db", migrate=True, schema="agents")
    assert caught.value.field == "schema"


def test_url_and_argument_must_agree(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}?table_prefix=a_"
    with pytest.raises(ValidationError, match="disagrees"):
        sessionstore.open_store(url, migrate=True, table_prefix="b_")
    with sessionstore.open_store(url, migrate=True, table_prefix="a_") as store:
        assert _layout(store) is store_tables("a_")

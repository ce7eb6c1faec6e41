"""A host application and sessionstore in one database, each with its own Alembic history.

The host's migration environment is a real, tiny Alembic project written into the test's tmp
dir (its own ``alembic_version``, its own tables: on some layouts named ``sessions`` and
``events`` like sessionstore's). Both histories upgrade and downgrade independently, in either
order, and neither touches the other's tables or version row.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, inspect, make_url, text

import sessionstore
from sessionstore.store import SCHEMA_REVISION, StoreTables, downgrade, store_tables, upgrade

from .conftest import Backend, _make_backend

_ENV = """
from alembic import context

config = context.config
connection = config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
"""

_REVISION = """
from alembic import op
import sqlalchemy as sa

revision = {revision!r}
down_revision = {down!r}
branch_labels = None
depends_on = None


def upgrade():
    op.create_table({table!r}, sa.Column("id", sa.Integer, primary_key=True), sa.Column("note", sa.Text))


def downgrade():
    op.drop_table({table!r})
"""


def _host_project(root: Path, tables: tuple[str, str]) -> Path:
    """An Alembic project: revision ``h1`` creates the first table, ``h2`` the second."""
    scripts = root / "host_migrations"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text(_ENV)
    (scripts / "script.py.mako").write_text("")
    for revision, down, table in (("h1", None, tables[0]), ("h2", "h1", tables[1])):
        body = _REVISION.format(revision=revision, down=down, table=table)
        (scripts / "versions" / f"{revision}.py").write_text(textwrap.dedent(body))
    return scripts


class Host:
    """The host application's migrations, run over its own connection like its deploy would."""

    def __init__(self, engine: Engine, scripts: Path, tables: tuple[str, str]) -> None:
        self.engine = engine
        self.scripts = scripts
        self.tables = tables

    def _run(self, action: Any, revision: str) -> None:
        config = Config()
        config.set_main_option("script_location", str(self.scripts))
        with self.engine.begin() as conn:
            config.attributes["connection"] = conn
            action(config, revision)

    def upgrade(self) -> None:
        self._run(command.upgrade, "head")

    def downgrade(self) -> None:
        self._run(command.downgrade, "base")

    def revision(self) -> list[str]:
        with self.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return []
            return [str(r) for r in conn.execute(text("SELECT version_num FROM alembic_version")).scalars()]

    def write_row(self) -> None:
        with self.engine.begin() as conn:
            for table in self.tables:
                conn.execute(text(f"INSERT INTO {table} (note) VALUES ('host data')"))

    def rows(self) -> int:
        with self.engine.connect() as conn:
            return sum(int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in self.tables)


#: (host tables, sessionstore's table prefix, sessionstore's PostgreSQL schema or None)
LAYOUTS = {
    "beside": (("orders", "customers"), "", None),
    # The host already has tables called sessions and events: a prefix keeps sessionstore apart.
    "prefixed": (("sessions", "events"), "agent_", None),
    "own-schema": (("sessions", "events"), "", "agents"),
}


#: Schemas are PostgreSQL's: on SQLite a prefix is how sessionstore keeps apart.
CASES = [
    "sqlite-file/beside",
    "sqlite-file/prefixed",
    *(pytest.param(f"postgres/{name}", marks=pytest.mark.postgres) for name in LAYOUTS),
]


@pytest.fixture(params=CASES)
def host_and_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Host, Engine, StoreTables, str]]:
    """One database (SQLite file or PostgreSQL), the host's project, and sessionstore's layout."""
    backend_name, layout = str(request.param).split("/")
    for backend in _make_backend(backend_name, tmp_path):
        yield from _host_and_store(backend, LAYOUTS[layout], tmp_path)


def _host_and_store(
    backend: Backend, layout: tuple[tuple[str, str], str, str | None], tmp_path: Path
) -> Iterator[tuple[Host, Engine, StoreTables, str]]:
    url = backend.url
    host_tables, prefix, schema = layout
    if schema is not None:
        schema = f"{schema}_{uuid.uuid4().hex[:8]}"  # the PostgreSQL server is shared
    engine = create_engine(sessionstore.store.resolve_url(url))
    tables = store_tables(prefix, schema)
    host = Host(engine, _host_project(tmp_path, host_tables), host_tables)
    try:
        yield host, engine, tables, url
    finally:
        if schema is not None:
            with engine.begin() as conn:
                conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


def _store_revision(engine: Engine, tables: StoreTables) -> str | None:
    with engine.connect() as conn:
        return sessionstore.store.current_revision(conn, tables)


def _store_events(engine: Engine, tables: StoreTables) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {tables.sql_name('events')}")).scalar_one())


def _open(url: str, tables: StoreTables) -> sessionstore.SessionStore:
    return sessionstore.open_store(url, table_prefix=tables.prefix or None, schema=tables.schema)


def test_both_histories_upgrade_and_downgrade_independently(
    host_and_store: tuple[Host, Engine, StoreTables, str],
) -> None:
    host, engine, tables, url = host_and_store

    host.upgrade()
    host.write_row()
    upgrade(engine, tables=tables)  # sessionstore after the host: the host's alembic_version is there
    with _open(url, tables) as store:
        store.create_session("s", events=[sessionstore.SessionStarted()])

    assert host.revision() == ["h2"]
    assert _store_revision(engine, tables) == SCHEMA_REVISION

    host.downgrade()  # the host goes away entirely: sessionstore's tables and row stay
    assert host.revision() == []
    assert _store_revision(engine, tables) == SCHEMA_REVISION
    assert _store_events(engine, tables) == 1

    host.upgrade()  # ... and comes back beside it
    host.write_row()
    downgrade(engine, "base", drop_events=True, tables=tables)  # now sessionstore goes
    assert host.revision() == ["h2"]
    assert host.rows() == 2
    assert _store_revision(engine, tables) is None

    upgrade(engine, tables=tables)  # and comes back, the host untouched
    assert host.revision() == ["h2"]
    assert host.rows() == 2
    with _open(url, tables) as store:
        assert store.list_sessions() == []


def test_sessionstore_first_then_the_host(host_and_store: tuple[Host, Engine, StoreTables, str]) -> None:
    """The other order: the host's first `alembic upgrade` finds sessionstore already there."""
    host, engine, tables, url = host_and_store

    upgrade(engine, tables=tables)
    with _open(url, tables) as store:
        store.create_session("s", events=[sessionstore.SessionStarted()])
    host.upgrade()
    host.write_row()
    downgrade(engine, "0001", drop_events=True, tables=tables)  # a partial downgrade, too

    assert host.revision() == ["h2"]
    assert host.rows() == 2
    assert _store_revision(engine, tables) == "0001"
    assert _store_events(engine, tables) == 1


@pytest.mark.postgres
def test_a_schema_a_dba_created_needs_no_create_privilege_on_the_database(pg_backend: Backend) -> None:
    """The application role may not create schemas; the DBA made ``agents`` for it beforehand."""
    suffix = uuid.uuid4().hex[:8]
    role, schema = f"app_{suffix}", f"agents_{suffix}"
    admin = create_engine(sessionstore.store.resolve_url(pg_backend.url))
    with admin.begin() as conn:
        # A new role has no CREATE on the database (PostgreSQL grants PUBLIC only CONNECT, TEMP).
        conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
        conn.execute(text(f"CREATE SCHEMA {schema} AUTHORIZATION {role}"))
    url = make_url(sessionstore.store.resolve_url(pg_backend.url)).set(username=role, password="pw")
    app = create_engine(url)
    try:
        upgrade(app, tables=store_tables(schema=schema))
        with sessionstore.open_store(engine=app, schema=schema) as store:
            store.create_session("s")
            assert [s.id for s in store.list_sessions()] == ["s"]
    finally:
        app.dispose()
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()

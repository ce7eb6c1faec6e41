"""Schema migrations through Alembic, usable from an installed package (no ini file).

sessionstore records its revision in a version table of its own (``StoreTables.version_table``:
``sessionstore_alembic_version``, or ``<prefix>alembic_version`` under a table prefix), so a host
application's Alembic history in the same database keeps ``alembic_version`` to itself.
Databases migrated before kept sessionstore's revision in ``alembic_version``: every upgrade or
downgrade first moves that row into the new table (``_adopt_legacy_version``). Alembic reads the
version table before it runs any revision, so the move cannot be a revision itself.

Alembic is imported by the functions that run it, not with this module: opening a database
that is already at this version reads its version row and never needs Alembic.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    text,
)

from ..errors import SchemaOutOfDateError, ValidationError
from ._schema import DEFAULT_TABLES, LEGACY_VERSION_TABLE, StoreTables
from ._sql import naming_the_file, translate_errors

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "SCHEMA_REVISION",
    "check_schema",
    "current_revision",
    "database_revision",
    "downgrade",
    "known_revisions",
    "migration_tables",
    "upgrade",
]

#: The Alembic head this code expects. A test asserts it equals the scripts' head.
SCHEMA_REVISION = "0008"

# Serializes concurrent first-use migrations on PostgreSQL (SQLite uses BEGIN IMMEDIATE).
_MIGRATION_LOCK_KEY = 0x5E55_0001


def alembic_config() -> Config:
    """An Alembic config pointing at the migration scripts shipped in the package."""
    from alembic.config import Config

    # The top-level migrations/ folder is installed as this package (see pyproject.toml).
    scripts = Path(str(importlib.resources.files("sessionstore._migrations")))
    config = Config()
    config.set_main_option("script_location", str(scripts))
    return config


def migration_tables() -> StoreTables:
    """The tables the running migration creates or changes (for the revision scripts)."""
    from alembic import context

    tables = context.config.attributes.get("sessionstore_tables", DEFAULT_TABLES)
    assert isinstance(tables, StoreTables)
    return tables


def known_revisions() -> list[str]:
    """The revisions of the migration scripts shipped with this version, oldest first."""
    return list(_shipped_revisions())


@functools.cache
def _shipped_revisions() -> tuple[str, ...]:
    # Read once per process: the scripts are part of the installed package, and Alembic
    # compiles every one of them to walk them (a third of a migration's time).
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return tuple(script.revision for script in reversed(list(scripts.walk_revisions())))


#: The sync driver of each async driver ``open_async_store`` uses.
_SYNC_DRIVERS = {"sqlite+aiosqlite": "sqlite", "postgresql+psycopg_async": "postgresql+psycopg"}


def _schema_error(engine_or_conn: Engine | Connection, current: str | None) -> SchemaOutOfDateError:
    # An async driver's URL is shown as the user's (``db upgrade --db`` takes that one).
    shown = engine_or_conn.engine.url
    shown = shown.set(drivername=_SYNC_DRIVERS.get(shown.drivername, shown.drivername))
    url = shown.render_as_string(hide_password=True)
    newer = current is not None and current not in known_revisions()
    return SchemaOutOfDateError(url, current, SCHEMA_REVISION, newer=newer)


_REVISION = re.compile(r"(?P<anchor>[A-Za-z0-9_]*?)(?P<step>[+-][0-9]+)?")


def _check_revision(direction: str, revision: str) -> None:
    """Accept ``head``, ``heads``, ``base`` or a shipped revision, optionally with a relative
    step (``-1``, ``head-1``, ``0001+1``): Alembic answers some other spellings (``""``,
    ``"@"``) with an AssertionError rather than an error of its own.

    Raises:
        ValidationError: any other ``revision``, listing the revisions.
    """
    parsed = _REVISION.fullmatch(revision) if isinstance(revision, str) else None
    if parsed is None or not revision:
        raise _unknown_revision(direction, revision, "not a revision")
    anchor = parsed["anchor"]
    if anchor and anchor not in ("head", "heads", "base", *known_revisions()):
        raise _unknown_revision(direction, revision, "no such revision")


def _unknown_revision(direction: str, revision: object, why: str) -> ValidationError:
    known = ", ".join(["base", *known_revisions(), "head"])
    msg = f"cannot {direction} to revision {revision!r}: {why} (revisions: {known})"
    return ValidationError(msg, field="revision")


def _run_alembic(conn: Connection, tables: StoreTables, direction: str, revision: str) -> None:
    """``alembic upgrade|downgrade revision`` on ``conn``, its errors as sessionstore's.

    Raises:
        SchemaOutOfDateError: the database was written by a newer sessionstore.
        ValidationError: ``revision`` is not one of this version's revisions (or a valid step).
    """
    from alembic import command
    from alembic.util import CommandError

    current = current_revision(conn, tables)
    if current is not None and current not in known_revisions():
        raise _schema_error(conn, current)
    _check_revision(direction, revision)
    config = alembic_config()
    config.attributes["connection"] = conn
    config.attributes["sessionstore_tables"] = tables
    try:
        (command.upgrade if direction == "upgrade" else command.downgrade)(config, revision)
    except CommandError as e:
        raise _unknown_revision(direction, revision, str(e)) from None


def current_revision(conn: Connection, tables: StoreTables = DEFAULT_TABLES) -> str | None:
    """The revision the database is at, or None when it has no sessionstore schema (under these
    ``tables``' prefix and schema).

    A database not yet moved to sessionstore's own version table answers from the legacy
    ``alembic_version`` when that holds one of sessionstore's revisions.
    """
    if inspect(conn).has_table(tables.version_table, schema=tables.schema):
        version = _version_table(tables.version_table, tables.schema)
        return conn.execute(version.select()).scalar()
    return _legacy_revision(conn, tables)


def database_revision(engine: Engine, tables: StoreTables = DEFAULT_TABLES) -> str | None:
    """``current_revision`` on a connection of its own (``sessionstore db current``).

    Raises:
        OperationalError, DatabaseError: the database cannot be reached or read (a SQLite path
            that is no database is named).
    """
    with (
        naming_the_file(engine),
        translate_errors(),
        engine.connect().execution_options(sessionstore_read=True) as conn,
    ):
        return current_revision(conn, tables)


def _version_table(name: str, schema: str | None) -> Table:
    """An Alembic version table (the shape Alembic creates)."""
    return Table(
        name,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{name}_pkc"),
        schema=schema,
    )


def _legacy_revision(conn: Connection, tables: StoreTables) -> str | None:
    """sessionstore's revision in ``alembic_version``, if that table holds ours and only ours.

    Only the unprefixed layout was ever recorded there, and only with its tables beside it:
    any other row (a host application's revision) means the table is not sessionstore's.
    """
    inspector = inspect(conn)
    if tables.prefix or not inspector.has_table(LEGACY_VERSION_TABLE, schema=tables.schema):
        return None
    if not inspector.has_table(tables.events.name, schema=tables.schema):
        return None
    legacy = _version_table(LEGACY_VERSION_TABLE, tables.schema)
    rows = [str(row) for row in conn.execute(legacy.select()).scalars()]
    if len(rows) != 1 or rows[0] not in known_revisions():
        return None
    return rows[0]


def _adopt_legacy_version(conn: Connection, tables: StoreTables) -> None:
    """Move sessionstore's row from ``alembic_version`` into its own version table.

    Runs inside the migration's transaction (under its lock), so concurrent upgrades move it
    once and a failure leaves the database as it was. ``alembic_version`` is dropped once it
    is empty: it was sessionstore's (it held only sessionstore's revision), and a host's
    Alembic creates it afresh.
    """
    if inspect(conn).has_table(tables.version_table, schema=tables.schema):
        return
    revision = _legacy_revision(conn, tables)
    if revision is None:
        return
    version = _version_table(tables.version_table, tables.schema)
    version.create(conn)
    conn.execute(version.insert().values(version_num=revision))
    legacy = _version_table(LEGACY_VERSION_TABLE, tables.schema)
    conn.execute(legacy.delete().where(legacy.c.version_num == revision))
    legacy.drop(conn)


def _stored_counts(conn: Connection, tables: StoreTables) -> tuple[int, int]:
    """(events, sessions) stored, (0, 0) when there are no tables."""
    if not inspect(conn).has_table(tables.events.name, schema=tables.schema):
        return 0, 0
    events = conn.execute(text(f"SELECT count(*) FROM {tables.sql_name('events')}")).scalar_one()
    sessions = conn.execute(text(f"SELECT count(*) FROM {tables.sql_name('sessions')}")).scalar_one()
    return int(events), int(sessions)


def _refuse_dropping_events(conn: Connection, tables: StoreTables, before: tuple[int, int]) -> None:
    """Raise (rolling the downgrade back) if it dropped the event log while it held events."""
    events, sessions = before
    if events and not inspect(conn).has_table(tables.events.name, schema=tables.schema):
        msg = (
            f"this downgrade drops the event log with {events} event(s) in {sessions} session(s); "
            "nothing was changed. Pass --yes (drop_events=True) to delete them"
        )
        raise ValidationError(msg, field="drop_events")


def _migrate(
    engine: Engine, tables: StoreTables, direction: str, revision: str, *, drop_events: bool = True
) -> None:
    with (
        naming_the_file(engine),
        translate_errors(),
        engine.connect().execution_options(sessionstore_write=True) as conn,
        conn.begin(),
    ):
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        _check_schema_option(conn, tables)
        _adopt_legacy_version(conn, tables)
        at_head = current_revision(conn, tables) == SCHEMA_REVISION
        if direction == "upgrade" and revision == "head" and at_head:
            return
        if direction == "upgrade":
            # Only when missing: PostgreSQL checks the CREATE privilege on the database even for
            # CREATE SCHEMA IF NOT EXISTS, and a role may be given a schema a DBA made for it.
            if tables.schema is not None and not inspect(conn).has_schema(tables.schema):
                conn.execute(text(f'CREATE SCHEMA "{tables.schema}"'))
            _run_alembic(conn, tables, direction, revision)
            return
        before = _stored_counts(conn, tables)
        _run_alembic(conn, tables, direction, revision)
        # Checked after the fact, inside the same transaction (DDL is transactional on SQLite
        # and PostgreSQL): whatever the revision's spelling (base, -1, 0001 ...), a downgrade
        # that took the events with it is undone unless confirmed.
        if not drop_events:
            _refuse_dropping_events(conn, tables, before)


def _check_schema_option(conn: Connection, tables: StoreTables) -> None:
    """Raise ``ValidationError`` for a schema on a backend without schemas (SQLite)."""
    if tables.schema is not None and conn.dialect.name != "postgresql":
        msg = f"schema {tables.schema!r}: schemas are a PostgreSQL option; on SQLite use a table prefix"
        raise ValidationError(msg, field="schema")


def upgrade(engine: Engine, revision: str = "head", *, tables: StoreTables = DEFAULT_TABLES) -> None:
    """Migrate the database up to ``revision`` in one transaction (safe to run concurrently).

    ``tables`` says which tables (prefix, PostgreSQL schema); a missing schema is created.

    Raises:
        SchemaOutOfDateError: the database was written by a newer sessionstore.
        ValidationError: an unknown revision, or a schema on SQLite; nothing was changed.
    """
    _migrate(engine, tables, "upgrade", revision)


def downgrade(
    engine: Engine, revision: str = "base", *, drop_events: bool = False, tables: StoreTables = DEFAULT_TABLES
) -> None:
    """Migrate the database down to ``revision`` (``base`` removes every sessionstore table of
    ``tables``; an empty version table and the schema stay).

    Raises:
        ValidationError: the downgrade would drop stored events and ``drop_events`` is False,
            an unknown revision, or a schema on SQLite; nothing was changed.
        SchemaOutOfDateError: the database was written by a newer sessionstore.
    """
    _migrate(engine, tables, "downgrade", revision, drop_events=drop_events)


def check_schema(engine: Engine, tables: StoreTables = DEFAULT_TABLES) -> None:
    """Raise ``SchemaOutOfDateError`` unless the database is at ``SCHEMA_REVISION``.

    The error says whether ``db upgrade`` helps, or the database was written by a newer
    sessionstore (a revision this version does not know).
    """
    with (
        translate_errors(),
        engine.connect().execution_options(sessionstore_read=True) as conn,
        conn.begin(),
    ):
        _check_schema_option(conn, tables)
        current = current_revision(conn, tables)
    if current != SCHEMA_REVISION:
        raise _schema_error(engine, current)

"""Schema migrations through Alembic, usable from an installed package (no ini file)."""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, inspect, text

from ..errors import SchemaOutOfDateError, ValidationError
from ._sql import translate_errors

__all__ = ["SCHEMA_REVISION", "check_schema", "current_revision", "downgrade", "known_revisions", "upgrade"]

#: The Alembic head this code expects. A test asserts it equals the scripts' head.
SCHEMA_REVISION = "0004"

# Serializes concurrent first-use migrations on PostgreSQL (SQLite uses BEGIN IMMEDIATE).
_MIGRATION_LOCK_KEY = 0x5E55_0001


def alembic_config() -> Config:
    """An Alembic config pointing at the migration scripts shipped in the package."""
    # The top-level migrations/ folder is installed as this package (see pyproject.toml).
    scripts = Path(str(importlib.resources.files("sessionstore._migrations")))
    config = Config()
    config.set_main_option("script_location", str(scripts))
    return config


def known_revisions() -> list[str]:
    """The revisions of the migration scripts shipped with this version, oldest first."""
    scripts = ScriptDirectory.from_config(alembic_config())
    return [script.revision for script in reversed(list(scripts.walk_revisions()))]


def _schema_error(engine_or_conn: Engine | Connection, current: str | None) -> SchemaOutOfDateError:
    url = engine_or_conn.engine.url.render_as_string(hide_password=True)
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


def _run_alembic(conn: Connection, direction: str, revision: str) -> None:
    """``alembic upgrade|downgrade revision`` on ``conn``, its errors as sessionstore's.

    Raises:
        SchemaOutOfDateError: the database was written by a newer sessionstore.
        ValidationError: ``revision`` is not one of this version's revisions (or a valid step).
    """
    current = current_revision(conn)
    if current is not None and current not in known_revisions():
        raise _schema_error(conn, current)
    _check_revision(direction, revision)
    config = alembic_config()
    config.attributes["connection"] = conn
    try:
        (command.upgrade if direction == "upgrade" else command.downgrade)(config, revision)
    except CommandError as e:
        raise _unknown_revision(direction, revision, str(e)) from None


def current_revision(conn: Connection) -> str | None:
    """The revision the database is at, or None when it has no sessionstore schema."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _stored_counts(conn: Connection) -> tuple[int, int]:
    """(events, sessions) stored, (0, 0) when there are no tables."""
    if not inspect(conn).has_table("events"):
        return 0, 0
    events = conn.execute(text("SELECT count(*) FROM events")).scalar_one()
    sessions = conn.execute(text("SELECT count(*) FROM sessions")).scalar_one()
    return int(events), int(sessions)


def _refuse_dropping_events(conn: Connection, before: tuple[int, int]) -> None:
    """Raise (rolling the downgrade back) if it dropped the event log while it held events."""
    events, sessions = before
    if events and not inspect(conn).has_table("events"):
        msg = (
            f"this downgrade drops the event log with {events} event(s) in {sessions} session(s); "
            "nothing was changed. Pass --yes (drop_events=True) to delete them"
        )
        raise ValidationError(msg, field="drop_events")


def _migrate(engine: Engine, direction: str, revision: str, *, drop_events: bool = True) -> None:
    with translate_errors(), engine.connect() as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        if direction == "upgrade" and revision == "head" and current_revision(conn) == SCHEMA_REVISION:
            return
        if direction == "upgrade":
            _run_alembic(conn, direction, revision)
            return
        before = _stored_counts(conn)
        _run_alembic(conn, direction, revision)
        # Checked after the fact, inside the same transaction (DDL is transactional on SQLite
        # and PostgreSQL): whatever the revision's spelling (base, -1, 0001 ...), a downgrade
        # that took the events with it is undone unless confirmed.
        if not drop_events:
            _refuse_dropping_events(conn, before)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to ``revision`` in one transaction (safe to run concurrently).

    Raises:
        SchemaOutOfDateError: the database was written by a newer sessionstore.
        ValidationError: an unknown revision; nothing was changed.
    """
    _migrate(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str = "base", *, drop_events: bool = False) -> None:
    """Migrate the database down to ``revision`` (``base`` removes every sessionstore table).

    Raises:
        ValidationError: the downgrade would drop stored events and ``drop_events`` is False,
            or an unknown revision; nothing was changed.
        SchemaOutOfDateError: the database was written by a newer sessionstore.
    """
    _migrate(engine, "downgrade", revision, drop_events=drop_events)


def check_schema(engine: Engine) -> None:
    """Raise ``SchemaOutOfDateError`` unless the database is at ``SCHEMA_REVISION``.

    The error says whether ``db upgrade`` helps, or the database was written by a newer
    sessionstore (a revision this version does not know).
    """
    with (
        translate_errors(),
        engine.connect().execution_options(sessionstore_read=True) as conn,
        conn.begin(),
    ):
        current = current_revision(conn)
    if current != SCHEMA_REVISION:
        raise _schema_error(engine, current)

"""Migrated databases for the storage tests, made once per test process and copied.

Running every Alembic revision for each test costs 50-500 ms; copying what one migration made
costs a few. ``sqlite_file`` copies a migrated SQLite file; ``postgres_schema`` replays, in an
empty schema, the ``pg_dump`` of a schema migrated once (the dump's schema name swapped for the
test's). A private in-memory database needs nothing here: ``open_store("sqlite://")`` itself
starts from a copy of the first one it migrated (sessionstore/store/_memory_copy.py).

Only what the tests of migrations do not test is skipped: tests/test_migrations.py and every
test that opens with a table prefix, a schema or ``migrate=False`` migrate from scratch.
Without ``pg_dump`` the PostgreSQL schemas are migrated as before.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

import sessionstore

__all__ = ["copy_migrated_sqlite", "fill_migrated_schema", "schema_is_empty"]

_PLACEHOLDER = "sessionstore_template_schema"


def copy_migrated_sqlite(path: Path) -> None:
    """Make ``path`` (which must not exist) a copy of a freshly migrated SQLite file."""
    shutil.copyfile(_migrated_sqlite_file(), path)


@functools.cache
def _migrated_sqlite_file() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="sessionstore-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    template = folder / "migrated.db"
    sessionstore.open_store(template, migrate=True, token_counter=None).close()
    # Everything in the main file: the copy needs no -wal beside it.
    with contextlib.closing(sqlite3.connect(template)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return template


def _pg_dump() -> str | None:
    folder = os.environ.get("SESSIONSTORE_PG_BINDIR")
    if folder and (Path(folder) / "pg_dump").is_file():
        return str(Path(folder) / "pg_dump")
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"), key=lambda p: int(p.parts[-3]))
    return str(installed[-1]) if installed else shutil.which("pg_dump")


@functools.cache
def _migrated_schema_sql(base_url: str) -> str | None:
    """The SQL that rebuilds a migrated schema (named ``_PLACEHOLDER``), or None without pg_dump."""
    dump = _pg_dump()
    if dump is None:
        return None
    schema = f"t_template_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        sep = "&" if "?" in base_url else "?"
        url = f"{base_url}{sep}options={quote(f'-csearch_path={schema}')}"
        sessionstore.open_store(url, migrate=True, token_counter=None).close()
        parsed = make_url(base_url)
        env = {**os.environ, **({"PGPASSWORD": parsed.password} if parsed.password else {})}
        command = [dump, "--schema", schema, "--no-owner", "--no-privileges", "--inserts"]
        command += ["-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432)]
        command += ["-U", parsed.username or "postgres", "-d", parsed.database or "postgres"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        if done.returncode != 0:
            return None
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
    lines = [
        line
        for line in done.stdout.splitlines()
        # psql's meta-commands (\restrict), and the schema itself: the test made it already.
        if not line.startswith("\\") and line != f"CREATE SCHEMA {schema};"
    ]
    return "\n".join(lines).replace(schema, _PLACEHOLDER)


def schema_is_empty(admin: Engine, schema: str) -> bool:
    query = text(
        "SELECT count(*) FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :schema"
    )
    with admin.connect() as conn:
        return int(conn.execute(query, {"schema": schema}).scalar_one()) == 0


def fill_migrated_schema(admin: Engine, schema: str) -> bool:
    """Give the empty ``schema`` a migrated store's tables; False when it must be migrated instead."""
    sql = _migrated_schema_sql(admin.url.render_as_string(hide_password=False))
    if sql is None:
        return False
    raw = admin.raw_connection()
    try:
        # No parameters: psycopg sends the whole dump as one simple query.
        raw.cursor().execute(sql.replace(_PLACEHOLDER, schema))
        raw.commit()
    finally:
        raw.close()
    return True

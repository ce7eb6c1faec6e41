"""Compressed payloads and blobs, and the references that let sessions share blobs.

* ``events.payload_packed``: a payload of 256 bytes or more is stored compressed there (a codec
  byte, then zstd), with ``''`` in ``payload`` (store/_codec.py). Rows written before keep their
  text in ``payload`` and are not rewritten: they read as before, and the hash chain, which is
  over the text, is the same either way.
* ``blobs.compression`` may be ``zstd`` too. On SQLite the CHECK constraint cannot be altered, so
  the blobs table is copied into one with the new constraint and its append-only triggers are
  made again; PostgreSQL swaps the constraint.
* ``blob_refs``: which sessions stored each plaintext blob. A purge deletes a blob only when no
  other session refers to it; before this revision it looked for the blob's hash in every other
  payload, which compressed payloads no longer allow. Filled here from the payloads that name a
  stored blob (the rule the purge used until now).

Downgrading writes packed payloads back as text and zstd blobs as zlib (the append-only
triggers are lifted for it, inside the migration's transaction). A sealed blob cannot be
re-encoded without its session's key: downgrading refuses while one is stored as zstd.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

import sqlalchemy as sa
from alembic import op

from sessionstore.errors import ValidationError
from sessionstore.store._codec import decompress_blob, unpack_payload
from sessionstore.store._crypto import BLOB_MAGIC, PAYLOAD_PREFIX
from sessionstore.store._migrate import migration_tables
from sessionstore.store._schema import APPEND_ONLY_MESSAGE, StoreTables

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_HEX64 = re.compile(r"[0-9a-f]{64}")
_BATCH = 500


def _dialect() -> str:
    dialect = op.get_bind().dialect.name
    if dialect not in ("sqlite", "postgresql"):
        msg = f"sessionstore supports sqlite and postgresql, not {dialect}"
        raise NotImplementedError(msg)
    return dialect


# --- the blobs table's CHECK constraint ----------------------------------------------------


def _blob_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("compression", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant_id", sa.String(255), nullable=True),
    ]


# Spelled out (only the names are the store's), as revision 0005 left them.
def _sqlite_blob_triggers(blobs: str, guard: str) -> list[str]:
    return [
        f"CREATE TRIGGER {blobs}_append_only_update BEFORE UPDATE ON {blobs} "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {blobs}: UPDATE rejected'); END",
        f"CREATE TRIGGER {blobs}_append_only_delete BEFORE DELETE ON {blobs} "
        f"WHEN NOT EXISTS (SELECT 1 FROM {guard} WHERE target = 'blob:' || OLD.sha256) "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {blobs}: DELETE rejected'); END",
    ]


def _rebuild_sqlite_blobs(tables: StoreTables, codecs: str, convert_zstd: bool) -> None:
    """Copy SQLite's blobs table into one whose CHECK allows ``codecs``; the copy drops the old
    table's triggers, which are made again. ``convert_zstd``: zstd blobs become zlib."""
    blobs, new = tables.name("blobs"), tables.name("blobs") + "_0006"
    op.create_table(
        new,
        *_blob_columns(),
        sa.PrimaryKeyConstraint("sha256", name=op.f(f"pk_{blobs}")),
        sa.CheckConstraint("size >= 0", name=op.f(f"ck_{blobs}_size_not_negative")),
        sa.CheckConstraint(f"compression IN ({codecs})", name=op.f(f"ck_{blobs}_compression_known")),
    )
    columns = "sha256, size, compression, data, created_at, tenant_id"
    skip = " WHERE compression != 'zstd'" if convert_zstd else ""
    op.execute(f"INSERT INTO {new} ({columns}) SELECT {columns} FROM {blobs}{skip}")
    if convert_zstd:
        conn = op.get_bind()
        rows = conn.execute(sa.text(f"SELECT {columns} FROM {blobs} WHERE compression = 'zstd'"))
        for row in rows.mappings().all():
            converted = dict(row, compression="zlib", data=_zstd_to_zlib(bytes(row["data"]), row["sha256"]))
            conn.execute(sa.text(f"INSERT INTO {new} ({columns}) VALUES ({_marks(columns)})"), converted)
    op.execute(f"DROP TABLE {blobs}")  # its triggers go with it; DROP fires no DELETE trigger
    op.execute(f"ALTER TABLE {new} RENAME TO {blobs}")
    for statement in _sqlite_blob_triggers(blobs, tables.name("erasure_guard")):
        op.execute(statement)


def _marks(columns: str) -> str:
    return ", ".join(f":{name.strip()}" for name in columns.split(","))


def _zstd_to_zlib(data: bytes, sha256: str) -> bytes:
    if data.startswith(BLOB_MAGIC):
        msg = (
            f"blob {sha256} is sealed and stored as zstd: revision 0005 cannot read it, and it "
            "cannot be re-encoded without its session's key. Nothing was changed"
        )
        raise ValidationError(msg, field="revision")
    return zlib.compress(decompress_blob(data, "zstd", sha256), 6)


def _swap_postgres_check(tables: StoreTables, codecs: str) -> None:
    name = f"ck_{tables.name('blobs')}_compression_known"
    op.drop_constraint(op.f(name), tables.name("blobs"), schema=tables.schema, type_="check")
    op.create_check_constraint(
        op.f(name), tables.name("blobs"), f"compression IN ({codecs})", schema=tables.schema
    )


# --- blob references -----------------------------------------------------------------------


def _rows(query: str) -> Iterator[sa.Row[object]]:
    """The rows of ``query`` in batches (a large log is never held whole)."""
    yield from op.get_bind().execute(sa.text(query).execution_options(yield_per=_BATCH))


def _backfill_refs(tables: StoreTables) -> None:
    """A reference for every stored plaintext blob a plaintext payload names."""
    conn = op.get_bind()
    stored = {str(sha) for (sha,) in conn.execute(sa.text(f"SELECT sha256 FROM {tables.sql_name('blobs')}"))}
    if not stored:
        return
    tenants = dict(conn.execute(sa.text(f"SELECT id, tenant_id FROM {tables.sql_name('sessions')}")).all())
    found: set[tuple[str, str]] = set()
    for session_id, payload in _rows(f"SELECT session_id, payload FROM {tables.sql_name('events')}"):
        if payload.startswith(PAYLOAD_PREFIX):
            continue
        found.update((session_id, sha) for sha in _HEX64.findall(payload) if sha in stored)
    columns = (sa.column("session_id"), sa.column("sha256"), sa.column("tenant_id"))
    refs = sa.table(tables.name("blob_refs"), *columns, schema=tables.schema)
    rows = [{"session_id": sid, "sha256": sha, "tenant_id": tenants.get(sid)} for sid, sha in sorted(found)]
    for start in range(0, len(rows), _BATCH):
        conn.execute(refs.insert(), rows[start : start + _BATCH])


def upgrade() -> None:
    tables = migration_tables()
    schema, refs = tables.schema, tables.name("blob_refs")
    dialect = _dialect()
    # Plain ADD COLUMN (no copy): the events table keeps its triggers and every row as it was.
    op.add_column(
        tables.name("events"), sa.Column("payload_packed", sa.LargeBinary(), nullable=True), schema=schema
    )
    op.create_table(
        refs,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("session_id", "sha256", name=op.f(f"pk_{refs}")),
        schema=schema,
    )
    op.create_index(op.f(f"ix_{refs}_sha256"), refs, ["sha256"], schema=schema)
    _backfill_refs(tables)
    codecs = "'none', 'zlib', 'zstd'"
    if dialect == "sqlite":
        _rebuild_sqlite_blobs(tables, codecs, convert_zstd=False)
    else:
        _swap_postgres_check(tables, codecs)


# --- downgrade -----------------------------------------------------------------------------


def _unpack_events(tables: StoreTables, dialect: str) -> None:
    """Write every packed payload back as text (its hash is over that text: it still verifies)."""
    conn = op.get_bind()
    events = tables.sql_name("events")
    packed = conn.execute(
        sa.text(
            f"SELECT position, session_id, seq, payload_packed FROM {events} WHERE payload_packed IS NOT NULL"
        )
    )
    rows = [
        {"p": position, "t": unpack_payload(bytes(data), session_id=sid, seq=seq)}
        for position, sid, seq, data in packed
    ]
    if not rows:
        return
    name = tables.name("events")
    if dialect == "sqlite":
        lift = [f"DROP TRIGGER {name}_append_only_update"]
        restore = [
            f"CREATE TRIGGER {name}_append_only_update BEFORE UPDATE ON {name} "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {name}: UPDATE rejected'); END"
        ]
    else:
        lift = [f"ALTER TABLE {events} DISABLE TRIGGER {name}_append_only_row"]
        restore = [f"ALTER TABLE {events} ENABLE TRIGGER {name}_append_only_row"]
    for statement in lift:
        op.execute(statement)
    update = sa.text(f"UPDATE {events} SET payload = :t, payload_packed = NULL WHERE position = :p")
    for start in range(0, len(rows), _BATCH):
        conn.execute(update, rows[start : start + _BATCH])
    for statement in restore:
        op.execute(statement)


def _postgres_zstd_blobs_to_zlib(tables: StoreTables) -> None:
    conn = op.get_bind()
    blobs, name = tables.sql_name("blobs"), tables.name("blobs")
    found = conn.execute(sa.text(f"SELECT sha256, data FROM {blobs} WHERE compression = 'zstd'")).all()
    if not found:
        return
    rows = [{"s": sha, "d": _zstd_to_zlib(bytes(data), sha)} for sha, data in found]
    op.execute(f"ALTER TABLE {blobs} DISABLE TRIGGER {name}_append_only_row")
    update = sa.text(
        f"UPDATE {blobs} SET data = :d, compression = 'zlib' WHERE sha256 = :s AND compression = 'zstd'"
    )
    conn.execute(update, rows)
    op.execute(f"ALTER TABLE {blobs} ENABLE TRIGGER {name}_append_only_row")


def downgrade() -> None:
    tables = migration_tables()
    schema, refs = tables.schema, tables.name("blob_refs")
    dialect = _dialect()
    codecs = "'none', 'zlib'"
    if dialect == "sqlite":
        _rebuild_sqlite_blobs(tables, codecs, convert_zstd=True)
    else:
        _postgres_zstd_blobs_to_zlib(tables)
        _swap_postgres_check(tables, codecs)
    _unpack_events(tables, dialect)
    op.drop_index(op.f(f"ix_{refs}_sha256"), refs, schema=schema)
    op.drop_table(refs, schema=schema)
    op.drop_column(tables.name("events"), "payload_packed", schema=schema)

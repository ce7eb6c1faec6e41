"""The database schema: every table sessionstore owns, as SQLAlchemy Core ``Table`` objects.

Keys lead with ``session_id`` so the schema partitions or shards by session without change.
Every constraint is named (see ``NAMING_CONVENTION``) so Alembic migrations and downgrades
address them by stable names on both SQLite and PostgreSQL.

The append-only triggers are not expressible as ``Table`` metadata; the DDL for them lives
here too (``APPEND_ONLY_DDL``) so the migration and the tests share one definition.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "APPEND_ONLY_ERRCODE",
    "APPEND_ONLY_MESSAGE",
    "APPEND_ONLY_TABLES",
    "blobs",
    "events",
    "metadata",
    "postgres_append_only_ddl",
    "sessions",
    "snapshots",
    "sqlite_append_only_ddl",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# SQLite only aliases the rowid for a column declared exactly INTEGER PRIMARY KEY.
_Position = BigInteger().with_variant(Integer(), "sqlite")

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(64), nullable=False),
    Column("parent_session_id", String(64), nullable=True),
    Column("fork_seq", BigInteger, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("metadata", Text, nullable=False),
    # Who the session belongs to (revision 0004): NULL for sessions created without them,
    # including every session written before. A fork or child carries its parent's.
    Column("tenant_id", String(255), nullable=True),
    Column("user_id", String(255), nullable=True),
    # The caller's own key for the session (a conversation id), unique per tenant and user.
    Column("external_id", String(255), nullable=True),
    PrimaryKeyConstraint("id"),
    ForeignKeyConstraint(["parent_session_id"], ["sessions.id"]),
    CheckConstraint("fork_seq IS NULL OR parent_session_id IS NOT NULL", name="fork_needs_parent"),
    CheckConstraint("fork_seq IS NULL OR fork_seq >= 0", name="fork_seq_not_negative"),
)

events = Table(
    "events",
    metadata,
    # Global position: monotonic across sessions, for subscribers and replication.
    Column("position", _Position, primary_key=True, autoincrement=True),
    Column("session_id", String(64), ForeignKey("sessions.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    # The exact JSON text that was hashed. Text, not JSONB: JSONB re-serialises, and the
    # hash chain must be computed over the bytes actually stored.
    Column("payload", Text, nullable=False),
    Column("token_count", Integer, nullable=True),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("session_id", "seq"),
    UniqueConstraint("event_id"),
    CheckConstraint("seq >= 1", name="seq_positive"),
    CheckConstraint("schema_version >= 1", name="schema_version_positive"),
    CheckConstraint("token_count IS NULL OR token_count >= 0", name="token_count_not_negative"),
    sqlite_autoincrement=True,
)

blobs = Table(
    "blobs",
    metadata,
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("compression", String(16), nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The tenant that stored it, under PostgreSQL row-level security (revision 0004; filled by
    # the column default the policies install, NULL otherwise). See ``_tenancy.py``.
    Column("tenant_id", String(255), nullable=True),
    PrimaryKeyConstraint("sha256"),
    CheckConstraint("size >= 0", name="size_not_negative"),
    CheckConstraint("compression IN ('none', 'zlib')", name="compression_known"),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("session_id", String(64), ForeignKey("sessions.id"), nullable=False),
    Column("projection", String(64), nullable=False),
    Column("projection_version", Integer, nullable=False),
    Column("tokenizer", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("session_id", "projection", "projection_version", "tokenizer", "seq"),
    CheckConstraint("seq >= 1", name="seq_positive"),
)

Index("ix_sessions_parent_session_id", sessions.c.parent_session_id)
# Listing a tenant's (or a user's) sessions pages through this index in id order.
Index("ix_sessions_tenant_id_user_id_id", sessions.c.tenant_id, sessions.c.user_id, sessions.c.id)
# Get-or-create is race-safe because the database refuses a second row for the same key
# (NULLs are distinct: sessions without an external id never collide).
Index(
    "uq_sessions_tenant_id_user_id_external_id",
    sessions.c.tenant_id,
    sessions.c.user_id,
    sessions.c.external_id,
    unique=True,
)

# --- append-only enforcement -------------------------------------------------------------

#: Tables whose rows may never change or disappear once written (sessions since revision 0003).
APPEND_ONLY_TABLES = ("events", "blobs", "sessions")
#: Text every rejection carries; error translation recognises it on SQLite.
APPEND_ONLY_MESSAGE = "sessionstore: append-only table"
#: SQLSTATE raised by the PostgreSQL trigger function (a class of its own, so it can
#: never be confused with a constraint violation or a serialization failure).
APPEND_ONLY_ERRCODE = "SSAO1"


def sqlite_append_only_ddl(table: str) -> tuple[list[str], list[str]]:
    """Return (create statements, drop statements) for the SQLite triggers of one table."""
    creates = [
        f"CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {table}: {op} rejected'); END"
        for op in ("UPDATE", "DELETE")
    ]
    drops = [f"DROP TRIGGER IF EXISTS {table}_append_only_{op}" for op in ("update", "delete")]
    return creates, drops


_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION sessionstore_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{APPEND_ONLY_MESSAGE} %: % rejected', TG_TABLE_NAME, TG_OP
        USING ERRCODE = '{APPEND_ONLY_ERRCODE}';
END
$$
"""


def postgres_append_only_ddl(tables: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Return (create statements, drop statements) for the PostgreSQL triggers.

    Row triggers catch UPDATE and DELETE; TRUNCATE bypasses row triggers, so a
    statement-level BEFORE TRUNCATE trigger guards it.
    """
    creates = [_PG_FUNCTION]
    drops: list[str] = []
    for table in tables:
        creates.append(
            f"CREATE TRIGGER {table}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION sessionstore_reject_change()"
        )
        creates.append(
            f"CREATE TRIGGER {table}_append_only_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION sessionstore_reject_change()"
        )
        drops.append(f"DROP TRIGGER IF EXISTS {table}_append_only_row ON {table}")
        drops.append(f"DROP TRIGGER IF EXISTS {table}_append_only_truncate ON {table}")
    drops.append("DROP FUNCTION IF EXISTS sessionstore_reject_change()")
    return creates, drops

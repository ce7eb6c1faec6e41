"""Initial schema: sessions, events, blobs, snapshots, and append-only triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sessionstore.store._migrate import migration_tables
from sessionstore.store._schema import (
    postgres_append_only_ddl,
    sqlite_append_only_ddl,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

#: The tables this revision makes append-only (0003 adds sessions).
_APPEND_ONLY_TABLES = ("events", "blobs")
_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _append_only_ddl() -> tuple[list[str], list[str]]:
    dialect = op.get_bind().dialect.name
    tables = migration_tables()
    if dialect == "sqlite":
        creates: list[str] = []
        drops: list[str] = []
        for table in _APPEND_ONLY_TABLES:
            c, d = sqlite_append_only_ddl(tables.name(table))
            creates += c
            drops += d
        return creates, drops
    if dialect == "postgresql":
        return postgres_append_only_ddl(tables, _APPEND_ONLY_TABLES)
    msg = f"sessionstore supports sqlite and postgresql, not {dialect}"
    raise NotImplementedError(msg)


def upgrade() -> None:
    # Names carry the store's table prefix and live in its schema (docs/storage.md "Embedding").
    tables = migration_tables()
    schema = tables.schema
    sessions, events = tables.name("sessions"), tables.name("events")
    blobs, snapshots = tables.name("blobs"), tables.name("snapshots")
    sessions_id = f"{schema}.{sessions}.id" if schema else f"{sessions}.id"
    op.create_table(
        sessions,
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("parent_session_id", sa.String(64), nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{sessions}")),
        sa.ForeignKeyConstraint(
            ["parent_session_id"], [sessions_id], name=op.f(f"fk_{sessions}_parent_session_id_{sessions}")
        ),
        sa.CheckConstraint(
            "fork_seq IS NULL OR parent_session_id IS NOT NULL", name=op.f(f"ck_{sessions}_fork_needs_parent")
        ),
        sa.CheckConstraint(
            "fork_seq IS NULL OR fork_seq >= 0", name=op.f(f"ck_{sessions}_fork_seq_not_negative")
        ),
        schema=schema,
    )
    op.create_index(f"ix_{sessions}_parent_session_id", sessions, ["parent_session_id"], schema=schema)
    op.create_table(
        events,
        sa.Column("position", _POSITION, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f(f"pk_{events}")),
        sa.ForeignKeyConstraint(
            ["session_id"], [sessions_id], name=op.f(f"fk_{events}_session_id_{sessions}")
        ),
        sa.UniqueConstraint("session_id", "seq", name=op.f(f"uq_{events}_session_id_seq")),
        sa.UniqueConstraint("event_id", name=op.f(f"uq_{events}_event_id")),
        sa.CheckConstraint("seq >= 1", name=op.f(f"ck_{events}_seq_positive")),
        sa.CheckConstraint("schema_version >= 1", name=op.f(f"ck_{events}_schema_version_positive")),
        sa.CheckConstraint(
            "token_count IS NULL OR token_count >= 0", name=op.f(f"ck_{events}_token_count_not_negative")
        ),
        sqlite_autoincrement=True,
        schema=schema,
    )
    op.create_table(
        blobs,
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("compression", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f(f"pk_{blobs}")),
        sa.CheckConstraint("size >= 0", name=op.f(f"ck_{blobs}_size_not_negative")),
        sa.CheckConstraint("compression IN ('none', 'zlib')", name=op.f(f"ck_{blobs}_compression_known")),
        schema=schema,
    )
    op.create_table(
        snapshots,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("projection", sa.String(64), nullable=False),
        sa.Column("projection_version", sa.Integer(), nullable=False),
        sa.Column("tokenizer", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "projection", "projection_version", "tokenizer", "seq", name=op.f(f"pk_{snapshots}")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], [sessions_id], name=op.f(f"fk_{snapshots}_session_id_{sessions}")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f(f"ck_{snapshots}_seq_positive")),
        schema=schema,
    )
    for statement in _append_only_ddl()[0]:
        op.execute(statement)


def downgrade() -> None:
    tables = migration_tables()
    schema = tables.schema
    for statement in _append_only_ddl()[1]:
        op.execute(statement)
    op.drop_table(tables.name("snapshots"), schema=schema)
    op.drop_table(tables.name("blobs"), schema=schema)
    op.drop_table(tables.name("events"), schema=schema)
    sessions = tables.name("sessions")
    op.drop_index(f"ix_{sessions}_parent_session_id", table_name=sessions, schema=schema)
    op.drop_table(sessions, schema=schema)

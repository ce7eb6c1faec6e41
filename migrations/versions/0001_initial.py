"""Initial schema: sessions, events, blobs, snapshots, and append-only triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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
    if dialect == "sqlite":
        creates: list[str] = []
        drops: list[str] = []
        for table in _APPEND_ONLY_TABLES:
            c, d = sqlite_append_only_ddl(table)
            creates += c
            drops += d
        return creates, drops
    if dialect == "postgresql":
        return postgres_append_only_ddl(_APPEND_ONLY_TABLES)
    msg = f"sessionstore supports sqlite and postgresql, not {dialect}"
    raise NotImplementedError(msg)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("parent_session_id", sa.String(64), nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.ForeignKeyConstraint(
            ["parent_session_id"], ["sessions.id"], name=op.f("fk_sessions_parent_session_id_sessions")
        ),
        sa.CheckConstraint(
            "fork_seq IS NULL OR parent_session_id IS NOT NULL", name=op.f("ck_sessions_fork_needs_parent")
        ),
        sa.CheckConstraint(
            "fork_seq IS NULL OR fork_seq >= 0", name=op.f("ck_sessions_fork_seq_not_negative")
        ),
    )
    op.create_index("ix_sessions_parent_session_id", "sessions", ["parent_session_id"])
    op.create_table(
        "events",
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
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_events_session_id_sessions")),
        sa.UniqueConstraint("session_id", "seq", name=op.f("uq_events_session_id_seq")),
        sa.UniqueConstraint("event_id", name=op.f("uq_events_event_id")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_events_seq_positive")),
        sa.CheckConstraint("schema_version >= 1", name=op.f("ck_events_schema_version_positive")),
        sa.CheckConstraint(
            "token_count IS NULL OR token_count >= 0", name=op.f("ck_events_token_count_not_negative")
        ),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("compression", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
        sa.CheckConstraint("size >= 0", name=op.f("ck_blobs_size_not_negative")),
        sa.CheckConstraint("compression IN ('none', 'zlib')", name=op.f("ck_blobs_compression_known")),
    )
    op.create_table(
        "snapshots",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("projection", sa.String(64), nullable=False),
        sa.Column("projection_version", sa.Integer(), nullable=False),
        sa.Column("tokenizer", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "projection", "projection_version", "tokenizer", "seq", name=op.f("pk_snapshots")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_snapshots_session_id_sessions")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_snapshots_seq_positive")),
    )
    for statement in _append_only_ddl()[0]:
        op.execute(statement)


def downgrade() -> None:
    for statement in _append_only_ddl()[1]:
        op.execute(statement)
    op.drop_table("snapshots")
    op.drop_table("blobs")
    op.drop_table("events")
    op.drop_index("ix_sessions_parent_session_id", table_name=op.f("sessions"))
    op.drop_table("sessions")

"""Snapshots hold bytes: a projection may store pre-serialized JSON it hands out without parsing.

The api_context projection keeps each message's canonical JSON in its snapshot, so a resume
produces the request bytes by slicing them instead of parsing and re-serializing the whole
history. Snapshots are disposable caches: the text ones are of projection versions no reader
asks for any more, so the table is recreated empty rather than converted (the next resume folds
from the log and snapshots again).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sessionstore.store._migrate import migration_tables

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _create_snapshots(state_type: sa.types.TypeEngine[object]) -> None:
    tables = migration_tables()
    snapshots, sessions = tables.name("snapshots"), tables.name("sessions")
    op.create_table(
        snapshots,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("projection", sa.String(64), nullable=False),
        sa.Column("projection_version", sa.Integer(), nullable=False),
        sa.Column("tokenizer", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("state", state_type, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "projection", "projection_version", "tokenizer", "seq", name=op.f(f"pk_{snapshots}")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            [f"{tables.schema}.{sessions}.id" if tables.schema else f"{sessions}.id"],
            name=op.f(f"fk_{snapshots}_session_id_{sessions}"),
        ),
        sa.CheckConstraint("seq >= 1", name=op.f(f"ck_{snapshots}_seq_positive")),
        schema=tables.schema,
    )


def _drop_snapshots() -> None:
    tables = migration_tables()
    op.drop_table(tables.name("snapshots"), schema=tables.schema)


def upgrade() -> None:
    _drop_snapshots()
    _create_snapshots(sa.LargeBinary())


def downgrade() -> None:
    _drop_snapshots()
    _create_snapshots(sa.Text())

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

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _create_snapshots(state_type: sa.types.TypeEngine[object]) -> None:
    op.create_table(
        "snapshots",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("projection", sa.String(64), nullable=False),
        sa.Column("projection_version", sa.Integer(), nullable=False),
        sa.Column("tokenizer", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("state", state_type, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "projection", "projection_version", "tokenizer", "seq", name=op.f("pk_snapshots")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_snapshots_session_id_sessions")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_snapshots_seq_positive")),
    )


def upgrade() -> None:
    op.drop_table("snapshots")
    _create_snapshots(sa.LargeBinary())


def downgrade() -> None:
    op.drop_table("snapshots")
    _create_snapshots(sa.Text())

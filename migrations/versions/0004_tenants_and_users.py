"""Sessions carry a tenant, a user and an external id; blobs a tenant (for row-level security).

All three are nullable: every session written before has none, and its hash chain verifies as
before (a session's genesis binds these keys only when one is set; see ``_hashing.py``). The
unique index makes get-or-create by (tenant, user, external id) race-safe across writers.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_KEY = sa.String(255)


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy): the tables keep their append-only triggers.
    op.add_column("sessions", sa.Column("tenant_id", _KEY, nullable=True))
    op.add_column("sessions", sa.Column("user_id", _KEY, nullable=True))
    op.add_column("sessions", sa.Column("external_id", _KEY, nullable=True))
    op.add_column("blobs", sa.Column("tenant_id", _KEY, nullable=True))
    op.create_index("ix_sessions_tenant_id_user_id_id", "sessions", ["tenant_id", "user_id", "id"])
    op.create_index(
        "uq_sessions_tenant_id_user_id_external_id",
        "sessions",
        ["tenant_id", "user_id", "external_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_sessions_tenant_id_user_id_external_id", "sessions")
    op.drop_index("ix_sessions_tenant_id_user_id_id", "sessions")
    op.drop_column("blobs", "tenant_id")
    op.drop_column("sessions", "external_id")
    op.drop_column("sessions", "user_id")
    op.drop_column("sessions", "tenant_id")

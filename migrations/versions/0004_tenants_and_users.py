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

from sessionstore.store._migrate import migration_tables

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_KEY = sa.String(255)


def upgrade() -> None:
    tables = migration_tables()  # the store's table prefix and schema
    sessions, blobs, schema = tables.name("sessions"), tables.name("blobs"), tables.schema
    # Plain ADD COLUMN (no batch copy): the tables keep their append-only triggers.
    op.add_column(sessions, sa.Column("tenant_id", _KEY, nullable=True), schema=schema)
    op.add_column(sessions, sa.Column("user_id", _KEY, nullable=True), schema=schema)
    op.add_column(sessions, sa.Column("external_id", _KEY, nullable=True), schema=schema)
    op.add_column(blobs, sa.Column("tenant_id", _KEY, nullable=True), schema=schema)
    op.create_index(
        f"ix_{sessions}_tenant_id_user_id_id", sessions, ["tenant_id", "user_id", "id"], schema=schema
    )
    op.create_index(
        f"uq_{sessions}_tenant_id_user_id_external_id",
        sessions,
        ["tenant_id", "user_id", "external_id"],
        unique=True,
        schema=schema,
    )


def downgrade() -> None:
    tables = migration_tables()
    sessions, blobs, schema = tables.name("sessions"), tables.name("blobs"), tables.schema
    op.drop_index(f"uq_{sessions}_tenant_id_user_id_external_id", sessions, schema=schema)
    op.drop_index(f"ix_{sessions}_tenant_id_user_id_id", sessions, schema=schema)
    op.drop_column(blobs, "tenant_id", schema=schema)
    op.drop_column(sessions, "external_id", schema=schema)
    op.drop_column(sessions, "user_id", schema=schema)
    op.drop_column(sessions, "tenant_id", schema=schema)

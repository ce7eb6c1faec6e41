"""Token counts made after COMMIT, outside the hash chain.

* ``events.token_count_deferred``: true for an event appended without its count (the default
  since this revision): its ``token_count`` is NULL in the row, and its hash holds that the count
  is deferred instead of a count (``_hashing.DEFERRED_COUNT``).
* ``token_counts``: the counts of those events, stored when a reader first counted them. A
  missing row is counted again by the next reader that needs it.

Plain ADD COLUMN and CREATE TABLE: no row is rewritten. Under row-level security, run
`sessionstore rls enable` and grant the tenant roles again after upgrading: until then a tenant
role cannot read the new table, and its reads of events with deferred counts fail.

Downgrading drops both: the counts are derived data (a pure function of each event), but an
older version reads an event whose count was deferred as one without text, so its token
estimate after the latest API usage is lower until the session is compacted or a new usage is
recorded. The deferred counts were never in the hash chain, but the flag is: an event appended
with its count deferred no longer verifies once the column is gone (as a session's tenant, user
and external id in its genesis below 0004). Events counted in the append and events without
text verify as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sessionstore.store._migrate import migration_tables

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    tables = migration_tables()
    schema, counts = tables.schema, tables.name("token_counts")
    op.add_column(
        tables.name("events"), sa.Column("token_count_deferred", sa.Boolean(), nullable=True), schema=schema
    )
    op.create_table(
        counts,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f(f"pk_{counts}")),
        sa.CheckConstraint(
            "token_count IS NULL OR token_count >= 0", name=op.f(f"ck_{counts}_token_count_not_negative")
        ),
        schema=schema,
    )


def downgrade() -> None:
    tables = migration_tables()
    op.drop_table(tables.name("token_counts"), schema=tables.schema)
    op.drop_column(tables.name("events"), "token_count_deferred", schema=tables.schema)

"""Sessions are append-only too: the database refuses UPDATE, DELETE and TRUNCATE of their rows.

A session's row says what the session is (its parent and fork point, its creation time,
its metadata). Nothing in sessionstore changes or removes one once written, and since seq 1 of
every chain is bound to the row, an edit would only break verification: the same triggers as
on ``events`` and ``blobs`` now refuse it for every role but one that switches them off.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from sessionstore.store._migrate import migration_tables
from sessionstore.store._schema import reject_function, sqlite_append_only_ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Spelled out rather than derived (only the names are the store's), so this revision stays what
# it was when later ones change.
_POSTGRES_CREATE = [
    "CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
    "FOR EACH ROW EXECUTE FUNCTION {function}",
    "CREATE TRIGGER {name}_append_only_truncate BEFORE TRUNCATE ON {table} "
    "FOR EACH STATEMENT EXECUTE FUNCTION {function}",
]
_POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS {name}_append_only_row ON {table}",
    "DROP TRIGGER IF EXISTS {name}_append_only_truncate ON {table}",
]


def _ddl() -> tuple[list[str], list[str]]:
    dialect = op.get_bind().dialect.name
    tables = migration_tables()
    if dialect == "sqlite":
        return sqlite_append_only_ddl(tables.name("sessions"))
    if dialect == "postgresql":  # the trigger function is 0001's
        names = {
            "name": tables.name("sessions"),
            "table": tables.sql_name("sessions"),
            "function": reject_function(tables),
        }
        return [s.format(**names) for s in _POSTGRES_CREATE], [s.format(**names) for s in _POSTGRES_DROP]
    msg = f"sessionstore supports sqlite and postgresql, not {dialect}"
    raise NotImplementedError(msg)


def upgrade() -> None:
    for statement in _ddl()[0]:
        op.execute(statement)


def downgrade() -> None:
    for statement in _ddl()[1]:
        op.execute(statement)

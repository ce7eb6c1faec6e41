"""Erasure: session data keys, erasure receipts, and the guarded purge path.

* ``session_keys``: the wrapped data key of each encrypted session (deleting its row is
  crypto-shredding).
* ``erasures``: one append-only receipt per erased session.
* ``erasure_guard``: the append-only triggers of ``events``, ``sessions`` and ``blobs`` now let a
  DELETE through only while a guard row names the session (``session:<id>``) or blob
  (``blob:<sha256>``). Only the purge transaction writes guard rows, and removes them before it
  commits. UPDATE and TRUNCATE are refused as before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sessionstore.store._migrate import migration_tables
from sessionstore.store._schema import (
    APPEND_ONLY_ERRCODE,
    APPEND_ONLY_MESSAGE,
    StoreTables,
    reject_function,
    sqlite_append_only_ddl,
)

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: table -> (guard prefix, the column naming the guarded thing)
_GUARDED = {
    "events": ("session:", "session_id"),
    "sessions": ("session:", "id"),
    "blobs": ("blob:", "sha256"),
}


def _guarded_function(tables: StoreTables) -> str:
    name = tables.own_name("guarded_change")
    return f'"{tables.schema}".{name}' if tables.schema else name


# Spelled out rather than derived (only the names are the store's), so this revision stays what
# it was when later ones change.
def _pg_guarded_function_ddl(tables: StoreTables) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {_guarded_function(tables)}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM {tables.sql_name("erasure_guard")}
        WHERE target = TG_ARGV[0] || (to_jsonb(OLD) ->> TG_ARGV[1])
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{APPEND_ONLY_MESSAGE} %: % rejected', TG_TABLE_NAME, TG_OP
        USING ERRCODE = '{APPEND_ONLY_ERRCODE}';
END
$$
"""


def _sqlite_ddl(tables: StoreTables) -> tuple[list[str], list[str]]:
    creates, drops = sqlite_append_only_ddl(tables.name("erasures"))
    guard = tables.name("erasure_guard")
    for base, (prefix, column) in _GUARDED.items():
        table = tables.name(base)
        creates.append(f"DROP TRIGGER {table}_append_only_delete")
        creates.append(
            f"CREATE TRIGGER {table}_append_only_delete BEFORE DELETE ON {table} "
            f"WHEN NOT EXISTS (SELECT 1 FROM {guard} WHERE target = '{prefix}' || OLD.{column}) "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {table}: DELETE rejected'); END"
        )
        drops.append(f"DROP TRIGGER {table}_append_only_delete")
        drops.append(
            f"CREATE TRIGGER {table}_append_only_delete BEFORE DELETE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {table}: DELETE rejected'); END"
        )
    return creates, drops


def _postgres_ddl(tables: StoreTables) -> tuple[list[str], list[str]]:
    reject, guarded = reject_function(tables), _guarded_function(tables)
    name, table = tables.name("erasures"), tables.sql_name("erasures")
    creates = [
        _pg_guarded_function_ddl(tables),
        f"CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {reject}",
        f"CREATE TRIGGER {name}_append_only_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {reject}",
    ]
    drops = [
        f"DROP TRIGGER IF EXISTS {name}_append_only_row ON {table}",
        f"DROP TRIGGER IF EXISTS {name}_append_only_truncate ON {table}",
    ]
    for base, (prefix, column) in _GUARDED.items():
        name, table = tables.name(base), tables.sql_name(base)
        creates.append(f"DROP TRIGGER {name}_append_only_row ON {table}")
        creates.append(
            f"CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {guarded}('{prefix}', '{column}')"
        )
        drops.append(f"DROP TRIGGER {name}_append_only_row ON {table}")
        drops.append(
            f"CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {reject}"
        )
    drops.append(f"DROP FUNCTION IF EXISTS {guarded}()")
    return creates, drops


def _ddl(tables: StoreTables) -> tuple[list[str], list[str]]:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        return _sqlite_ddl(tables)
    if dialect == "postgresql":
        return _postgres_ddl(tables)
    msg = f"sessionstore supports sqlite and postgresql, not {dialect}"
    raise NotImplementedError(msg)


def upgrade() -> None:
    tables = migration_tables()
    schema = tables.schema
    keys, erasures, guard = tables.name("session_keys"), tables.name("erasures"), tables.name("erasure_guard")
    op.create_table(
        keys,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(255), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f(f"pk_{keys}")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            [f"{schema}.{tables.name('sessions')}.id" if schema else f"{tables.name('sessions')}.id"],
            name=op.f(f"fk_{keys}_session_id_{tables.name('sessions')}"),
        ),
        schema=schema,
    )
    op.create_table(
        erasures,
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("parent_session_id", sa.String(64), nullable=True),
        sa.Column("head_hash", sa.String(64), nullable=False),
        sa.Column("event_count", sa.BigInteger(), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=True),
        sa.Column("last_position", sa.BigInteger(), nullable=True),
        sa.Column("snapshots_dropped", sa.Integer(), nullable=False),
        sa.Column("blobs_removed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f(f"pk_{erasures}")),
        sa.CheckConstraint("method IN ('shredded', 'purged')", name=op.f(f"ck_{erasures}_method_known")),
        sa.CheckConstraint("event_count >= 0", name=op.f(f"ck_{erasures}_event_count_not_negative")),
        schema=schema,
    )
    op.create_table(
        guard,
        sa.Column("target", sa.String(80), nullable=False),
        sa.PrimaryKeyConstraint("target", name=op.f(f"pk_{guard}")),
        schema=schema,
    )
    for statement in _ddl(tables)[0]:
        op.execute(statement)


def downgrade() -> None:
    tables = migration_tables()
    for statement in _ddl(tables)[1]:
        op.execute(statement)
    for base in ("erasure_guard", "erasures", "session_keys"):
        op.drop_table(tables.name(base), schema=tables.schema)

"""An erased session stays erased, and deferred token counts are append-only.

* The database refuses a row naming a session that has an erasure receipt: an INSERT into
  ``sessions`` (its ``id``), ``events``, ``snapshots``, ``session_keys``, ``blob_refs`` and
  ``token_counts`` (their ``session_id``), and an UPDATE moving a ``snapshots`` or ``blob_refs``
  row onto such a session (the other four refuse every UPDATE already). Before, only the store's
  own checks kept an erased id from coming back: a store without the key provider wrote a
  snapshot for a shredded session, which ``latest_snapshot`` then returned. On PostgreSQL the
  trigger function is ``SECURITY DEFINER`` (with a fixed ``search_path``), so it sees every
  receipt, including the purged ones a tenant role's row-level security policy hides.
* ``token_counts`` gets the append-only triggers of the log: UPDATE and TRUNCATE are refused,
  and DELETE is let through only while an ``erasure_guard`` row names the session
  (``counts:<id>``), which only an erasure writes, inside its own transaction.

Rows already stored are not checked or rewritten. Downgrading drops the triggers and the
function.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from sessionstore.store._migrate import migration_tables
from sessionstore.store._schema import (
    APPEND_ONLY_MESSAGE,
    ERASED_ERRCODE,
    ERASED_MESSAGE,
    StoreTables,
    reject_function,
)

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# Spelled out here (only the names are the store's), so this revision stays what it is when
# later ones change: table -> the column naming the session.
_GUARDED = {
    "sessions": "id",
    "events": "session_id",
    "snapshots": "session_id",
    "session_keys": "session_id",
    "blob_refs": "session_id",
    "token_counts": "session_id",
}
#: Tables whose UPDATE no append-only trigger refuses: moving a row onto an erased id is refused.
_UPDATABLE = ("snapshots", "blob_refs")


def _sqlite_ddl(tables: StoreTables) -> tuple[list[str], list[str]]:
    erasures, guard = tables.name("erasures"), tables.name("erasure_guard")
    counts = tables.name("token_counts")
    creates: list[str] = []
    drops: list[str] = []
    for base, column in _GUARDED.items():
        table = tables.name(base)
        for operation in ("INSERT", *(("UPDATE",) if base in _UPDATABLE else ())):
            name = f"{table}_erased_{operation.lower()}"
            # SQLite's RAISE takes a literal only: the store names the session (_sql.py).
            creates.append(
                f"CREATE TRIGGER {name} BEFORE {operation} ON {table} "
                f"WHEN EXISTS (SELECT 1 FROM {erasures} WHERE session_id = NEW.{column}) "
                f"BEGIN SELECT RAISE(ABORT, '{ERASED_MESSAGE}: {operation} into {table} rejected'); END"
            )
            drops.append(f"DROP TRIGGER IF EXISTS {name}")
    creates += [
        f"CREATE TRIGGER {counts}_append_only_update BEFORE UPDATE ON {counts} "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {counts}: UPDATE rejected'); END",
        f"CREATE TRIGGER {counts}_append_only_delete BEFORE DELETE ON {counts} "
        f"WHEN NOT EXISTS (SELECT 1 FROM {guard} WHERE target = 'counts:' || OLD.session_id) "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {counts}: DELETE rejected'); END",
    ]
    drops += [f"DROP TRIGGER IF EXISTS {counts}_append_only_{kind}" for kind in ("update", "delete")]
    return creates, drops


def _qualified(schema: str, tables: StoreTables, base: str) -> str:
    return f'"{schema}".{tables.name(base)}'


def _function(schema: str, tables: StoreTables, base: str) -> str:
    return f'"{schema}".{tables.own_name(base)}'


def _postgres_ddl(tables: StoreTables, schema: str) -> tuple[list[str], list[str]]:
    refuse = _function(schema, tables, "refuse_erased")
    guarded = _function(schema, tables, "guarded_change")  # revision 0005's
    erasures = _qualified(schema, tables, "erasures")
    # SECURITY DEFINER: a tenant role's policy hides a purged session's receipt, and the refusal
    # must not depend on what the writer may read. Every name is qualified and the search_path
    # fixed (pg_temp last), so no object a caller creates can stand in for the receipts table.
    creates = [
        f"""
CREATE OR REPLACE FUNCTION {refuse}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    sid text;
    receipt record;
BEGIN
    IF TG_ARGV[0] = 'id' THEN
        sid := NEW.id;
    ELSE
        sid := NEW.session_id;
    END IF;
    SELECT method, erased_at INTO receipt FROM {erasures} WHERE session_id = sid;
    IF FOUND THEN
        RAISE EXCEPTION '{ERASED_MESSAGE}: % (% at %): % into % rejected', sid, receipt.method,
            to_char(receipt.erased_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
            TG_OP, TG_TABLE_NAME
            USING ERRCODE = '{ERASED_ERRCODE}';
    END IF;
    RETURN NEW;
END
$$
"""
    ]
    drops: list[str] = []
    for base, column in _GUARDED.items():
        name, table = tables.name(base), _qualified(schema, tables, base)
        events = "INSERT OR UPDATE" if base in _UPDATABLE else "INSERT"
        creates.append(
            f"CREATE TRIGGER {name}_erased BEFORE {events} ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {refuse}('{column}')"
        )
        drops.append(f"DROP TRIGGER IF EXISTS {name}_erased ON {table}")
    name, table = tables.name("token_counts"), _qualified(schema, tables, "token_counts")
    creates += [
        f"CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {guarded}('counts:', 'session_id')",
        f"CREATE TRIGGER {name}_append_only_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {reject_function(tables)}",
    ]
    drops += [
        f"DROP TRIGGER IF EXISTS {name}_append_only_row ON {table}",
        f"DROP TRIGGER IF EXISTS {name}_append_only_truncate ON {table}",
        f"DROP FUNCTION IF EXISTS {refuse}()",
    ]
    return creates, drops


def _ddl() -> tuple[list[str], list[str]]:
    bind = op.get_bind()
    tables = migration_tables()
    if bind.dialect.name == "sqlite":
        return _sqlite_ddl(tables)
    if bind.dialect.name == "postgresql":
        schema = tables.schema or str(bind.execute(text("SELECT current_schema()")).scalar_one())
        return _postgres_ddl(tables, schema)
    msg = f"sessionstore supports sqlite and postgresql, not {bind.dialect.name}"
    raise NotImplementedError(msg)


def upgrade() -> None:
    for statement in _ddl()[0]:
        op.execute(statement)


def downgrade() -> None:
    for statement in _ddl()[1]:
        op.execute(statement)

"""Alembic environment for sessionstore.

Run by `sessionstore db upgrade` (which passes an open connection in
``config.attributes["connection"]`` and the store's tables in
``config.attributes["sessionstore_tables"]``) or by the plain `alembic` command from a checkout
(``-x url=... -x table_prefix=... -x schema=...``).

sessionstore keeps its own version table (``StoreTables.version_table``), never the
``alembic_version`` a host application's own migrations use.
"""

from __future__ import annotations

from alembic import context

from sessionstore.store._config import create_engine_for_url, resolve_url
from sessionstore.store._schema import store_tables

config = context.config
_x = context.get_x_argument(as_dictionary=True)
tables = config.attributes.get("sessionstore_tables") or store_tables(
    _x.get("table_prefix", ""), _x.get("schema") or None
)
config.attributes["sessionstore_tables"] = tables  # the revisions read it (migration_tables())


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=tables.metadata,
        version_table=tables.version_table,
        version_table_schema=tables.schema,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate over the caller's connection, or open one for the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = _x.get("url") or resolve_url(None)
    engine = create_engine_for_url(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("sessionstore migrations run online only: they install triggers per dialect")
run_migrations_online()

"""Alembic environment for sessionstore.

Run by `sessionstore db upgrade` (which passes an open connection in
``config.attributes["connection"]``) or by the plain `alembic` command from a checkout.
"""

from __future__ import annotations

from alembic import context

from sessionstore.store._config import create_engine_for_url, resolve_url
from sessionstore.store._schema import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
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
    url = context.get_x_argument(as_dictionary=True).get("url") or resolve_url(None)
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

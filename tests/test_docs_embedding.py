"""docs/storage.md "Embedding" runs as written: the FastAPI service on a SQLite file and on
PostgreSQL (through ``DATABASE_URL``), printing what the text says, and the host's ``env.py``
filter keeps Alembic's autogenerate away from sessionstore's tables."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, Table, create_engine

import sessionstore
from sessionstore.store import resolve_url, store_tables, upgrade

from .conftest import Backend

STORAGE = Path(__file__).parent.parent / "docs" / "storage.md"


def _section() -> str:
    return STORAGE.read_text().split("\n## Embedding\n", 1)[1].split("\n## ", 1)[0]


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)


def _promised_output(block: str) -> str | None:
    after = _section().split(block, 1)[1]
    match = re.match(r"```\n\nprints `([^`]*)`", after)
    return match.group(1) if match else None


def test_the_fastapi_service_runs_on_each_backend(
    shared_backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", resolve_url(shared_backend.url))
    service, client = [b for b in _python_blocks() if "include_name" not in b]
    namespace: dict[str, Any] = {}
    try:
        exec(compile(service, str(STORAGE), "exec"), namespace)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(client, str(STORAGE), "exec"), namespace)
    finally:
        if "store" in namespace:
            namespace["store"].close()
        if "engine" in namespace:
            namespace["engine"].dispose()

    assert printed.getvalue().strip() == _promised_output(client)
    # What the service wrote is in sessionstore's prefixed tables, beside the host's own.
    with sessionstore.open_store(shared_backend.url, table_prefix="agent_") as store:
        (session,) = store.list_sessions()
        assert store.verify(session.id).ok


def test_the_env_py_filter_keeps_autogenerate_off_sessionstores_tables(shared_backend: Backend) -> None:
    (filter_block,) = [b for b in _python_blocks() if "include_name" in b]
    definition = filter_block.split("\ncontext.configure", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(definition, str(STORAGE), "exec"), namespace)
    host_models = MetaData()
    Table("tickets", host_models, Column("id", Integer, primary_key=True))
    engine = create_engine(resolve_url(shared_backend.url))
    try:
        host_models.create_all(engine)
        upgrade(engine, tables=store_tables("agent_"))
        with engine.connect() as conn:
            unfiltered = compare_metadata(MigrationContext.configure(conn), host_models)
            filtered = compare_metadata(
                MigrationContext.configure(conn, opts={"include_name": namespace["include_name"]}),
                host_models,
            )
    finally:
        engine.dispose()

    dropped = {diff[1].name for diff in unfiltered if diff[0] == "remove_table"}
    assert {"agent_events", "agent_sessions", "agent_alembic_version"} <= dropped  # what the filter prevents
    assert filtered == []

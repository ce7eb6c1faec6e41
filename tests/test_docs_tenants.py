"""docs/storage.md "Tenants" runs as written: its Python blocks in order, printing what the text
says they print. The row-level security blocks run on PostgreSQL, in a database of their own,
with the role name made unique (roles are shared by every database of the server)."""

from __future__ import annotations

import contextlib
import io
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import sessionstore

from .conftest import _need_pg

STORAGE = Path(__file__).parent.parent / "docs" / "storage.md"


def _section() -> str:
    return STORAGE.read_text().split("\n## Tenants\n", 1)[1].split("\n## ", 1)[0]


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)


def _run(block: str, namespace: dict[str, Any]) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, str(STORAGE), "exec"), namespace)
    return printed.getvalue()


def _promised_output(block: str) -> str | None:
    """The ``prints `...` `` sentence right after ``block`` in the text, if there is one."""
    after = _section().split(block, 1)[1]
    match = re.match(r"```\n\nprints `([^`]*)`", after)
    return match.group(1) if match else None


def test_the_store_examples_print_what_the_text_says() -> None:
    blocks = [b for b in _python_blocks() if "SESSIONSTORE_URL" not in b]
    namespace: dict[str, Any] = {}
    checked = 0
    try:
        for block in blocks:
            output = _run(block, namespace)
            promised = _promised_output(block)
            if promised is not None:
                assert output.strip() == promised
                checked += 1
    finally:
        namespace["store"].close()

    assert len(blocks) >= 4
    assert checked >= 3


@pytest.mark.postgres
def test_the_row_level_security_examples_run_on_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [b for b in _python_blocks() if "SESSIONSTORE_URL" in b]
    tag = uuid.uuid4().hex[:10]
    role, database = f"tenant_acme_{tag}", f"ss_docs_{tag}"
    server = make_url(sessionstore.store.resolve_url(_need_pg())).difference_update_query(["options"])
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {database}"))
        conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
    url = server.set(database=database).render_as_string(hide_password=False)
    try:
        sessionstore.store.upgrade(engine := sessionstore.store.create_engine_for_url(url))
        engine.dispose()
        # Another tenant's session, stored by the owner: the tenant's listing must not show it.
        with sessionstore.open_store(url, token_counter=None) as owner:
            owner.create_session("beta-1", tenant="beta", user="bob")
        monkeypatch.setenv("SESSIONSTORE_URL", url)
        namespace: dict[str, Any] = {}
        outputs = [_run(block.replace("tenant_acme", role), namespace) for block in blocks]

        assert len(blocks) == 2
        assert outputs[1].strip() == _promised_output(blocks[1]) == "['acme-1']"
        with sessionstore.open_store(url, token_counter=None) as owner:
            assert {s.id for s in owner.list_sessions()} == {"acme-1", "beta-1"}
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {database}"))
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()

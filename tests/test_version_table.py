"""sessionstore's own Alembic version table, and the move of databases that used ``alembic_version``.

Databases migrated before sessionstore had a version table of its own recorded their revision in
``alembic_version``: ``_legacy_database`` builds one exactly as that code left it (the tables at a
revision, the revision in ``alembic_version`` with Alembic's own table shape).
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest
from sqlalchemy import inspect, text

import sessionstore
from sessionstore import SchemaOutOfDateError
from sessionstore.cli import main
from sessionstore.store import SCHEMA_REVISION
from sessionstore.store._config import create_engine_for_url
from sessionstore.store._migrate import current_revision, downgrade, upgrade

OWN = "sessionstore_alembic_version"
LEGACY = "alembic_version"


@pytest.fixture
def engine(shared_backend: Any) -> Any:
    created = create_engine_for_url(shared_backend.url)
    yield created
    created.dispose()


def _tables(engine: Any) -> set[str]:
    with engine.connect() as conn:
        return set(inspect(conn).get_table_names())


def _rows(engine: Any, table: str) -> list[str]:
    with engine.connect() as conn:
        return [str(v) for v in conn.execute(text(f"SELECT version_num FROM {table}")).scalars()]


def _legacy_database(engine: Any, revision: str) -> None:
    """sessionstore's tables at ``revision``, its revision recorded in ``alembic_version``."""
    upgrade(engine, revision)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE {LEGACY} (version_num VARCHAR(32) NOT NULL, "
                f"CONSTRAINT {LEGACY}_pkc PRIMARY KEY (version_num))"
            )
        )
        conn.execute(text(f"INSERT INTO {LEGACY} (version_num) VALUES (:r)"), {"r": revision})
        conn.execute(text(f"DROP TABLE {OWN}"))


def _host_version_table(engine: Any, revision: str) -> None:
    """A host application's ``alembic_version`` (its own history's revision)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE {LEGACY} (version_num VARCHAR(32) NOT NULL, "
                f"CONSTRAINT {LEGACY}_pkc PRIMARY KEY (version_num))"
            )
        )
        conn.execute(text(f"INSERT INTO {LEGACY} (version_num) VALUES (:r)"), {"r": revision})


def test_a_new_database_records_its_revision_in_its_own_table(engine: Any) -> None:
    upgrade(engine)

    assert _rows(engine, OWN) == [SCHEMA_REVISION]
    assert LEGACY not in _tables(engine)


def test_upgrading_a_0002_database_moves_the_row_and_keeps_the_log(engine: Any, shared_backend: Any) -> None:
    """A database left at 0002 by an older sessionstore: its events survive, its revision moves."""
    _legacy_database(engine, "0002")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO sessions (id, created_at, metadata) VALUES ('old', CURRENT_TIMESTAMP, '{}')")
        )

    upgrade(engine)

    assert _rows(engine, OWN) == [SCHEMA_REVISION]
    assert LEGACY not in _tables(engine)  # it held only sessionstore's row: it was sessionstore's
    with shared_backend.open(migrate=False) as store:
        store.append("old", [sessionstore.MessageAppended(role="user", content="still here")], 0)
        assert store.verify("old").ok
        assert [e.seq for e in store.read("old")] == [1]


def test_downgrading_a_legacy_database_moves_the_row_first(engine: Any) -> None:
    """Alembic reads only the new table: without the move, a downgrade would think it is at base."""
    _legacy_database(engine, "0003")

    downgrade(engine, "0002")

    assert _rows(engine, OWN) == ["0002"]
    assert LEGACY not in _tables(engine)


def test_a_legacy_database_at_the_current_revision_opens_before_the_move(
    engine: Any, shared_backend: Any
) -> None:
    """Its tables are the current ones: reading and writing work, the next upgrade moves the row."""
    _legacy_database(engine, SCHEMA_REVISION)

    with shared_backend.open(migrate=False) as store:
        store.create_session("s")
    with engine.connect() as conn:
        assert current_revision(conn) == SCHEMA_REVISION
    assert _rows(engine, LEGACY) == [SCHEMA_REVISION]


def test_a_legacy_database_behind_says_to_upgrade(engine: Any, shared_backend: Any) -> None:
    _legacy_database(engine, "0002")

    with pytest.raises(SchemaOutOfDateError, match="db upgrade") as caught:
        shared_backend.open(migrate=False)

    assert caught.value.current == "0002"


def test_a_host_alembic_version_is_never_touched(engine: Any) -> None:
    """A host's own revision in ``alembic_version``: sessionstore migrates beside it, leaves it be."""
    _host_version_table(engine, "1f2e3d4c5b6a")

    upgrade(engine)
    downgrade(engine, "base")
    upgrade(engine)

    assert _rows(engine, LEGACY) == ["1f2e3d4c5b6a"]
    assert _rows(engine, OWN) == [SCHEMA_REVISION]


def test_a_host_revision_that_looks_like_ours_is_not_taken(engine: Any) -> None:
    """A host numbering its revisions 0001, 0002 ... and no sessionstore tables: the row stays the host's."""
    _host_version_table(engine, "0002")

    upgrade(engine)

    assert _rows(engine, LEGACY) == ["0002"]
    assert _rows(engine, OWN) == [SCHEMA_REVISION]


def test_db_current_reports_a_legacy_database_and_db_upgrade_moves_it(
    shared_backend: Any, engine: Any
) -> None:
    _legacy_database(engine, "0002")

    before = io.StringIO()
    assert main(["db", "current", "--json", "--db", shared_backend.url], out=before) == 0
    assert main(["db", "upgrade", "--db", shared_backend.url], out=io.StringIO()) == 0

    assert json.loads(before.getvalue())["revision"] == "0002"
    assert _rows(engine, OWN) == [SCHEMA_REVISION]
    assert LEGACY not in _tables(engine)


def test_processes_starting_together_move_the_row_once(engine: Any, shared_backend: Any) -> None:
    """Four upgrades of a legacy database at once (as workers starting together): one moves the
    row, the others find it moved; nothing fails and nothing is left in ``alembic_version``."""
    _legacy_database(engine, "0002")
    errors: list[BaseException] = []

    def start_worker() -> None:
        worker = create_engine_for_url(shared_backend.url)
        try:
            upgrade(worker)
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            worker.dispose()

    workers = [threading.Thread(target=start_worker) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)

    assert errors == []
    assert _rows(engine, OWN) == [SCHEMA_REVISION]
    assert LEGACY not in _tables(engine)

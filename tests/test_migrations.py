"""Schema migrations on every backend: up, down, up again, and the unmigrated-database error."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

import sessionstore
from sessionstore import (
    MessageAppended,
    SchemaOutOfDateError,
    SessionStarted,
    ToolResultPersisted,
    ValidationError,
)
from sessionstore.cli import main
from sessionstore.store import SCHEMA_REVISION
from sessionstore.store._config import create_engine_for_url
from sessionstore.store._migrate import alembic_config, current_revision, downgrade, known_revisions, upgrade
from sessionstore.store._schema import DEFAULT_TABLES
from sessionstore.store._sql import translate_errors

TABLES = {
    "sessions",
    "events",
    "blobs",
    "blob_refs",
    "token_counts",
    "snapshots",
    "session_keys",
    "erasures",
    "erasure_guard",
}
VERSION_TABLE = "sessionstore_alembic_version"


def _tables(engine: Any) -> set[str]:
    with engine.connect() as conn:
        return set(inspect(conn).get_table_names()) & (TABLES | {VERSION_TABLE, "alembic_version"})


def test_code_expects_the_scripts_head() -> None:
    """SCHEMA_REVISION is the head of the shipped migration scripts."""
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_REVISION


@pytest.fixture
def engine(shared_backend: Any) -> Any:
    created = create_engine_for_url(shared_backend.url)
    yield created
    created.dispose()


def test_upgrade_downgrade_upgrade(engine: Any) -> None:
    """upgrade head / downgrade base / upgrade head leaves the schema equal to the models."""
    upgrade(engine)
    assert _tables(engine) == TABLES | {VERSION_TABLE}
    downgrade(engine, "base")
    assert _tables(engine) <= {VERSION_TABLE}
    upgrade(engine)

    with engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}), DEFAULT_TABLES.metadata
        )
        revision = current_revision(conn)

    assert diff == []
    assert revision == SCHEMA_REVISION
    assert _named_constraints(engine) == _named_constraints_in_models()


def _named_constraints(engine: Any) -> set[str]:
    with engine.connect() as conn:
        inspector = inspect(conn)
        names: set[str] = set()
        for table in TABLES:
            names |= {c["name"] for c in inspector.get_check_constraints(table)}
            names |= {c["name"] for c in inspector.get_unique_constraints(table)}
            names |= {c["name"] for c in inspector.get_foreign_keys(table) if c["name"]}
        return names


def _named_constraints_in_models() -> set[str]:
    """Check, unique and foreign-key constraint names as the models' naming convention spells them."""
    from sqlalchemy import CheckConstraint, ForeignKeyConstraint, UniqueConstraint

    return {
        str(c.name)
        for table in DEFAULT_TABLES.metadata.tables.values()
        for c in table.constraints
        if isinstance(c, CheckConstraint | UniqueConstraint | ForeignKeyConstraint)
    }


def test_triggers_come_back_after_a_round_trip(engine: Any, shared_backend: Any) -> None:
    """After down and up again, the database still refuses to delete events."""
    upgrade(engine)
    downgrade(engine, "base")
    upgrade(engine)
    store = shared_backend.open(migrate=False)
    try:
        sid = store.create_session(events=[sessionstore.SessionStarted()]).id
        refused = pytest.raises(sessionstore.errors.AppendOnlyViolation)
        with refused, translate_errors(), engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM events")
        assert store.last_seq(sid) == 1
    finally:
        store.close()


def test_unmigrated_database_gives_the_command_to_run(shared_backend: Any) -> None:
    """Opening a configured database without a schema says how to migrate it."""
    with pytest.raises(SchemaOutOfDateError, match="sessionstore db upgrade") as caught:
        sessionstore.open_store(shared_backend.url)

    assert caught.value.current is None
    assert caught.value.expected == SCHEMA_REVISION


def test_upgrade_is_idempotent_and_safe_to_repeat(engine: Any) -> None:
    """A second upgrade is a no-op."""
    upgrade(engine)
    upgrade(engine)

    with engine.connect() as conn:
        assert current_revision(conn) == SCHEMA_REVISION


def test_embedded_default_is_created_and_migrated_on_first_use(tmp_path: Any, monkeypatch: Any) -> None:
    """With nothing configured, a SQLite file appears under SESSIONSTORE_HOME, ready to use."""
    monkeypatch.setenv("SESSIONSTORE_HOME", str(tmp_path / "fresh-home"))

    with sessionstore.open_store() as store:
        store.create_session("first")

    assert sessionstore.store.default_database_path() == tmp_path / "fresh-home" / "sessionstore.db"
    assert sessionstore.store.default_database_path().exists()


def test_environment_url_is_not_migrated_implicitly(tmp_path: Any, monkeypatch: Any) -> None:
    """A database named by SESSIONSTORE_URL is the operator's: it is never migrated behind their back."""
    monkeypatch.setenv("SESSIONSTORE_URL", f"sqlite:///{tmp_path / 'configured.db'}")

    with pytest.raises(SchemaOutOfDateError):
        sessionstore.open_store()


def test_binary_snapshots_migration_keeps_the_log_and_drops_old_snapshots(
    engine: Any, shared_backend: Any
) -> None:
    """0001 -> 0002 on a used database: events intact, text snapshots gone, resume and snapshots work."""
    upgrade(engine, "0001")
    with translate_errors(), engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, created_at, metadata) VALUES ('old', CURRENT_TIMESTAMP, '{}')"
        )
        conn.exec_driver_sql(
            "INSERT INTO snapshots (session_id, projection, projection_version, tokenizer, seq, state,"
            " created_at) VALUES ('old', 'api_context', 1, 'none', 1, '{}', CURRENT_TIMESTAMP)"
        )
    upgrade(engine)  # through 0002, to the head this code opens
    store = shared_backend.open(migrate=False)
    try:
        store.append("old", [sessionstore.MessageAppended(role="user", content="still here")], 0)
        session = sessionstore.Session(store, "old")
        session.snapshot()
        resumed = sessionstore.Session(store, "old")

        assert resumed.request()["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "still here"}]}
        ]
        assert store.latest_snapshot("old", "api_context", 1, session.tokenizer) is None
        current = sessionstore.projections.ApiContextProjection.version
        assert store.latest_snapshot("old", "api_context", current, session.tokenizer) is not None
    finally:
        store.close()
    downgrade(engine, "0001")
    with engine.connect() as conn:
        assert current_revision(conn) == "0001"
        assert conn.exec_driver_sql("SELECT count(*) FROM events").scalar() == 1


def test_downgrading_away_the_events_needs_confirmation(engine: Any, shared_backend: Any) -> None:
    """`downgrade base` on a database holding events refuses, and changes nothing, unless confirmed."""
    upgrade(engine)
    with shared_backend.open(migrate=False) as store:
        sid = store.create_session(events=[sessionstore.SessionStarted()]).id

    # base, and a relative step from the head down past 0001
    for revision in ("base", f"-{len(known_revisions())}"):
        with pytest.raises(ValidationError, match=r"1 event\(s\) in 1 session\(s\)"):
            downgrade(engine, revision)
        assert _tables(engine) == TABLES | {VERSION_TABLE}
    with shared_backend.open(migrate=False) as store:
        assert store.last_seq(sid) == 1

    downgrade(engine, "base", drop_events=True)
    assert _tables(engine) <= {VERSION_TABLE}


def test_the_cli_asks_for_yes_before_dropping_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "s.db")
    assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
    assert main(["new", "--id", "keep-me", "--db", db], out=io.StringIO()) == 0
    with sessionstore.open_store(db, token_counter=None) as store:
        store.append("keep-me", [sessionstore.SessionStarted()], expected_seq=0)

    refused = main(["db", "downgrade", "base", "--db", db], out=io.StringIO())
    message = capsys.readouterr().err
    with sessionstore.open_store(db, token_counter=None) as store:
        kept = store.last_seq("keep-me")
    confirmed = main(["db", "downgrade", "base", "--db", db, "--yes"], out=io.StringIO())

    assert refused == 1
    assert "--yes" in message
    assert kept == 1
    assert confirmed == 0


def test_downgrading_an_empty_database_needs_no_confirmation(engine: Any) -> None:
    upgrade(engine)
    downgrade(engine, "base")
    assert _tables(engine) <= {VERSION_TABLE}


def test_append_only_sessions_migration_up_and_down(engine: Any) -> None:
    """0002 -> 0003 makes sessions rows unchangeable (the database refuses an edit); down undoes it."""

    def edit_session() -> None:
        with translate_errors(), engine.begin() as conn:
            conn.exec_driver_sql("UPDATE sessions SET metadata = '{\"edited\":true}' WHERE id = 's'")

    upgrade(engine, "0002")
    with translate_errors(), engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, created_at, metadata) VALUES ('s', CURRENT_TIMESTAMP, '{}')"
        )
    edit_session()  # before 0003 the row could be changed

    upgrade(engine, "0003")
    with pytest.raises(sessionstore.errors.AppendOnlyViolation, match="append-only"):
        edit_session()
    with pytest.raises(sessionstore.errors.AppendOnlyViolation), translate_errors(), engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM sessions")

    downgrade(engine, "0002")
    edit_session()
    with engine.connect() as conn:
        assert current_revision(conn) == "0002"
        assert conn.exec_driver_sql("SELECT metadata FROM sessions").scalar() == '{"edited":true}'


def test_compressed_rows_go_back_to_text_and_old_rows_are_read_as_they_are(
    engine: Any, shared_backend: Any
) -> None:
    """Down to 0005 writes packed payloads back as text and zstd blobs as zlib; up again rewrites
    nothing, reads and verifies those rows, and records the blob their payload names."""
    upgrade(engine)
    long = "a line of tool output\n" * 200
    data = b"blob bytes " * 100
    # Counted in the append: a deferred row's flag is in its hash, and below 0007 it is gone (next test).
    with shared_backend.open(migrate=False, defer_token_counts=False) as store:
        sid = store.create_session(events=[MessageAppended(role="user", content=long)]).id
        blob = store.put_blob(data)  # no session: found by the payload that names it
        persisted = ToolResultPersisted(
            tool_use_id="t1", blob_sha256=blob.sha256, original_chars=blob.size,
            preview="p", reason="size", location="l",
        )  # fmt: skip
        store.append(sid, [persisted], expected_seq=1)
        head = store.head(sid)

    downgrade(engine, "0005")
    with engine.connect() as conn:
        old_payloads = conn.execute(text("SELECT payload FROM events ORDER BY seq")).scalars().all()
        old_codecs = conn.execute(text("SELECT compression FROM blobs")).scalars().all()
    upgrade(engine)
    with engine.connect() as conn:
        packed = conn.execute(text("SELECT count(*) FROM events WHERE payload_packed IS NOT NULL")).scalar()
        refs = conn.execute(text("SELECT session_id, sha256 FROM blob_refs")).all()
    with shared_backend.open(migrate=False) as store:
        report = store.verify(sid, head=head)
        first = store.read(sid)[0].event
        stored = store.get_blob(blob.sha256)

    assert json.loads(old_payloads[0])["content"] == long
    assert old_codecs == ["zlib"]
    assert packed == 0
    assert refs == [(sid, blob.sha256)]
    assert report.ok
    assert isinstance(first, MessageAppended) and first.content == long
    assert stored == data


def test_a_downgrade_below_0007_loses_the_deferred_flag_its_rows_hash(
    engine: Any, shared_backend: Any
) -> None:
    """An event whose count is deferred has that fact in its hash; down to 0006 drops the column
    that holds it, so the row no longer verifies (as 0004's owner keys in the genesis). Rows
    counted in the append, and rows without text, verify as before."""
    upgrade(engine)
    with shared_backend.open(migrate=False, defer_token_counts=False) as inline:
        counted = inline.create_session(events=[MessageAppended(role="user", content="counted")]).id
    with shared_backend.open(migrate=False) as store:
        started = [SessionStarted(model="m"), MessageAppended(role="user", content="deferred")]
        deferred = store.create_session(events=started).id
        assert [e.token_count_deferred for e in store.read(deferred)] == [False, True]

    downgrade(engine, "0006")
    upgrade(engine)
    with shared_backend.open(migrate=False) as store:
        reports = {sid: store.verify(sid) for sid in (counted, deferred)}

    assert reports[counted].ok
    assert (reports[deferred].first_bad_seq, reports[deferred].reason) == (
        2,
        "stored content does not match its hash",
    )


def test_erased_ids_and_token_counts_are_guarded_from_0008_and_free_again_below(engine: Any) -> None:
    """0007 -> 0008: a row naming an erased session is refused, and so is an edit of a deferred
    count; down to 0007 both are possible again (the triggers and the function are gone)."""

    def write_for_the_erased_session() -> None:
        with translate_errors(), engine.begin() as conn:
            conn.execute(
                text("INSERT INTO token_counts (session_id, seq, token_count) VALUES ('gone', 1, 5)")
            )

    def edit_a_count() -> None:
        with translate_errors(), engine.begin() as conn:
            conn.execute(text("UPDATE token_counts SET token_count = 169349 WHERE session_id = 'live'"))

    upgrade(engine, "0007")
    with translate_errors(), engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO erasures (session_id, method, reason, erased_at, head_hash, event_count, "
                "snapshots_dropped, blobs_removed) "
                "VALUES ('gone', 'purged', 'r', CURRENT_TIMESTAMP, :h, 0, 0, 0)"
            ),
            {"h": "0" * 64},
        )
        conn.execute(text("INSERT INTO token_counts (session_id, seq, token_count) VALUES ('live', 2, 449)"))

    upgrade(engine, "0008")
    with pytest.raises(sessionstore.errors.SessionErasedError):
        write_for_the_erased_session()
    with pytest.raises(sessionstore.errors.AppendOnlyViolation, match="append-only"):
        edit_a_count()

    downgrade(engine, "0007")
    write_for_the_erased_session()
    edit_a_count()
    with engine.connect() as conn:
        assert current_revision(conn) == "0007"
        counts = conn.execute(text("SELECT session_id, token_count FROM token_counts ORDER BY session_id"))
        assert counts.all() == [("gone", 5), ("live", 169349)]

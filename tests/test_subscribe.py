"""Catch-up subscriptions and recovery from dropped connections."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text

from sessionstore import ANY, MessageAppended, SessionStore

pytestmark = pytest.mark.store_contract


def test_subscriber_gets_history_then_live_events_exactly_once(shared_backend: Any) -> None:
    """While a writer keeps appending, the subscriber receives every position once, in order."""
    writer_store = shared_backend.open(token_counter=None)
    reader_store = shared_backend.open(migrate=False, token_counter=None)
    try:
        sid = writer_store.create_session().id
        writer_store.append(sid, [MessageAppended(role="user", content=f"old {i}") for i in range(30)], ANY)
        stop = threading.Event()
        received: list[int] = []

        def write_live() -> None:
            for i in range(60):
                writer_store.append(sid, [MessageAppended(role="user", content=f"live {i}")], ANY)

        writer = threading.Thread(target=write_live)
        writer.start()
        for recorded in reader_store.subscribe(0, stop=stop, poll_interval=0.01, batch_size=7):
            received.append(recorded.position)
            if len(received) == 90:
                stop.set()
        writer.join()
        everything = [r.position for r in writer_store.read_all(0, limit=1000)]
    finally:
        writer_store.close()
        reader_store.close()

    assert received == everything
    assert len(received) == 90


@pytest.mark.postgres
def test_store_recovers_after_the_server_drops_its_connections(pg_backend: Any) -> None:
    """pg_terminate_backend on every pooled connection: the next call reconnects and succeeds."""
    store: SessionStore = pg_backend.open()
    admin = pg_backend.open(migrate=False)
    try:
        sid = store.create_session().id
        store.append(sid, [MessageAppended(role="user", content="before")], expected_seq=0)
        engine = store.engine  # type: ignore[attr-defined]
        pooled = [engine.connect() for _ in range(2)]  # the store's own connections, nobody else's
        pids = [conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() for conn in pooled]
        for conn in pooled:
            conn.rollback()
            conn.close()
        with admin.engine.begin() as conn:
            killed = conn.execute(
                text("SELECT count(pg_terminate_backend(pid)) FROM unnest(CAST(:pids AS int[])) AS pid"),
                {"pids": pids},
            ).scalar_one()

        result = store.append(sid, [MessageAppended(role="user", content="after")], expected_seq=1)

        assert killed == 2
        assert result.seqs == (2,)
        assert [r.event.content for r in store.read(sid)] == ["before", "after"]  # type: ignore[attr-defined]
    finally:
        store.close()
        admin.close()

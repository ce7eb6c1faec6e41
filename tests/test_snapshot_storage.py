"""Snapshot states are stored compressed: read back as they were put, smaller on disk, and a
damaged one is a cache to ignore, never a wrong view."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore
from sessionstore.store import SnapshotRecord
from sessionstore.store._codec import SNAPSHOT_PACKED

_STATE = b'{"header":1}\n' + b'{"role":"user","content":"the same words again"},' * 2_000


def _stored_states(path: Path, projection: str = "a-projection") -> list[bytes]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT state FROM snapshots WHERE projection = ?", (projection,))
        return [bytes(row[0]) for row in rows]


def test_a_snapshot_reads_back_as_it_was_put(store: SessionStore) -> None:
    store.create_session("s1")
    for seq, state in enumerate((_STATE, b"short", b"", _STATE[::-1]), start=1):
        store.put_snapshot(SnapshotRecord("s1", "a-projection", 1, "none", seq, state))

        found = store.latest_snapshot("s1", "a-projection", 1, "none")

        assert found is not None
        assert found.state == state


def test_a_long_state_is_stored_compressed(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sessionstore.open_store(path, migrate=True) as store:
        store.create_session("s1")
        store.put_snapshot(SnapshotRecord("s1", "a-projection", 1, "none", 1, _STATE))

    (stored,) = _stored_states(path)

    assert len(stored) < len(_STATE) // 10


def test_a_damaged_compressed_snapshot_is_ignored_and_the_log_folded(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sessionstore.open_store(path, migrate=True) as store:
        session = Session.create(store, config=SessionConfig(snapshot_every=0))
        for n in range(20):
            role: Literal["user", "assistant"] = "user" if n % 2 == 0 else "assistant"
            session.append([MessageAppended(role=role, content=f"message {n}: " + "words " * 50)])
        session.snapshot()
        expected = session.request_bytes()
    (stored,) = _stored_states(path, "api_context")
    damaged = stored[:-40] + bytes(40)  # the zstd frame's tail: it no longer decompresses
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET state = ? WHERE state = ?", (damaged, stored))

    with sessionstore.open_store(path, migrate=True) as store:
        resumed = Session(store, session.id)

        assert stored.startswith(SNAPSHOT_PACKED)
        assert resumed.request_bytes() == expected

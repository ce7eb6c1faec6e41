"""The sync store contract over an ``AsyncSessionStore``, so the contract tests drive the async store.

Each call is a coroutine of the async store, run on an event loop in a background thread and
waited for; results and exceptions come back unchanged. Nothing here implements store
behaviour: every contract method, ``verify`` and ``head`` included, is the async store's own.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Coroutine, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.util.concurrency import greenlet_spawn

from sessionstore.events import Event
from sessionstore.store import (
    AppendResult,
    AsyncSessionStore,
    BlobRef,
    ChainHead,
    ErasureReceipt,
    ExpectedSeq,
    RecordedEvent,
    RetentionPlan,
    SessionInfo,
    SessionStore,
    SessionWrite,
    SnapshotRecord,
    VerifyReport,
    create_engine_for_url,
    open_async_store,
)

_T = TypeVar("_T")


class AsyncStoreOnThread(SessionStore):
    """A ``SessionStore`` whose every method awaits the same method of an ``AsyncSessionStore``."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self.inner: AsyncSessionStore = self._wait(open_async_store(url, **kwargs))
        except BaseException:
            self._stop_loop()
            raise
        self.token_counter = self.inner.token_counter
        self._engine: Engine | None = None

    def _wait(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def engine(self) -> Engine:
        """A sync engine on the same database, for tests that inspect or tamper with rows."""
        if self._engine is None:
            if self.inner.engine.url.database in (None, "", ":memory:"):
                # One in-memory database: reach the very sqlite3 connection aiosqlite drives.
                # The test thread waits for every async call, so the two never overlap.
                proxied = self._wait(self.inner.engine.raw_connection())
                connection = proxied.driver_connection._conn  # type: ignore[union-attr]
                self._wait(greenlet_spawn(proxied.close))  # back to the (static) pool
                assert isinstance(connection, sqlite3.Connection)
                self._engine = create_engine(
                    "sqlite://", creator=lambda: connection, poolclass=StaticPool, pool_reset_on_return=None
                )
            else:
                self._engine = create_engine_for_url(self.url)
        return self._engine

    def create_session(
        self,
        session_id: str | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        parent_session_id: str | None = None,
        fork_seq: int | None = None,
        events: Sequence[Event | dict[str, Any]] = (),
        tenant: str | None = None,
        user: str | None = None,
        external_id: str | None = None,
    ) -> SessionInfo:
        return self._wait(
            self.inner.create_session(
                session_id,
                metadata=metadata,
                parent_session_id=parent_session_id,
                fork_seq=fork_seq,
                events=events,
                tenant=tenant,
                user=user,
                external_id=external_id,
            )
        )

    def get_or_create_session(
        self,
        tenant: str,
        user: str,
        external_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        events: Sequence[Event | dict[str, Any]] = (),
    ) -> tuple[SessionInfo, bool]:
        return self._wait(
            self.inner.get_or_create_session(
                tenant, user, external_id, metadata=metadata, session_id=session_id, events=events
            )
        )

    def get_session(self, session_id: str) -> SessionInfo:
        return self._wait(self.inner.get_session(session_id))

    def list_sessions(
        self,
        *,
        limit: int = 100,
        after: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> list[SessionInfo]:
        return self._wait(self.inner.list_sessions(limit=limit, after=after, tenant=tenant, user=user))

    def append(
        self, session_id: str, events: Sequence[Event | dict[str, Any]], expected_seq: ExpectedSeq
    ) -> AppendResult:
        return self._wait(self.inner.append(session_id, events, expected_seq))

    def write_sessions(self, writes: Sequence[SessionWrite]) -> list[AppendResult]:
        return self._wait(self.inner.write_sessions(writes))

    def write_streamed(
        self, writes: Sequence[SessionWrite], *, batch_size: int = 1000, json_checked: bool = False
    ) -> list[AppendResult]:
        return self._wait(self.inner.write_streamed(writes, batch_size=batch_size, json_checked=json_checked))

    def last_seq(self, session_id: str) -> int:
        return self._wait(self.inner.last_seq(session_id))

    def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, *, verify: bool = False
    ) -> list[RecordedEvent]:
        return self._wait(self.inner.read(session_id, from_seq, to_seq, verify=verify))

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        return self._wait(self.inner.read_all(after_position, limit))

    def max_position(self) -> int:
        return self._wait(self.inner.max_position())

    def put_blob(self, data: bytes, *, session_id: str | None = None) -> BlobRef:
        return self._wait(self.inner.put_blob(data, session_id=session_id))

    def get_blob(self, sha256: str, *, session_id: str | None = None) -> bytes:
        return self._wait(self.inner.get_blob(sha256, session_id=session_id))

    def read_stored(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> list[RecordedEvent]:
        return self._wait(self.inner.read_stored(session_id, from_seq, to_seq))

    def erase(self, session_id: str, *, reason: str, with_forks: bool = False) -> list[ErasureReceipt]:
        return self._wait(self.inner.erase(session_id, reason=reason, with_forks=with_forks))

    def erasure(self, session_id: str) -> ErasureReceipt | None:
        return self._wait(self.inner.erasure(session_id))

    def erasures(self, *, limit: int = 1000, after: str | None = None) -> list[ErasureReceipt]:
        return self._wait(self.inner.erasures(limit=limit, after=after))

    def descendants(self, session_id: str) -> list[str]:
        return self._wait(self.inner.descendants(session_id))

    def retention_plan(
        self, older_than: timedelta, *, now: datetime | None = None, tenant: str | None = None
    ) -> RetentionPlan:
        return self._wait(self.inner.retention_plan(older_than, now=now, tenant=tenant))

    def purge_expired(
        self,
        older_than: timedelta,
        *,
        reason: str,
        dry_run: bool = False,
        now: datetime | None = None,
        tenant: str | None = None,
    ) -> RetentionPlan:
        return self._wait(
            self.inner.purge_expired(older_than, reason=reason, dry_run=dry_run, now=now, tenant=tenant)
        )

    def put_snapshot(self, snapshot: SnapshotRecord) -> None:
        self._wait(self.inner.put_snapshot(snapshot))

    def store_token_counts(self) -> int:
        return self._wait(self.inner.store_token_counts())

    def latest_snapshot(
        self,
        session_id: str,
        projection: str,
        projection_version: int,
        tokenizer: str,
        max_seq: int | None = None,
    ) -> SnapshotRecord | None:
        return self._wait(
            self.inner.latest_snapshot(session_id, projection, projection_version, tokenizer, max_seq)
        )

    def orphaned_sessions(self) -> list[str]:
        return self._wait(self.inner.orphaned_sessions())

    def genesis(self, session: str | SessionInfo) -> str | None:
        return self._wait(self.inner.genesis(session))

    def chain_start(self, session: str | SessionInfo, first: RecordedEvent | None) -> str | None:
        return self._wait(self.inner.chain_start(session, first))

    def head(self, session_id: str) -> ChainHead:
        return self._wait(self.inner.head(session_id))

    def verify(self, session_id: str, *, head: str | ChainHead | None = None) -> VerifyReport:
        return self._wait(self.inner.verify(session_id, head=head))

    def subscribe(
        self,
        after_position: int = 0,
        *,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
        batch_size: int = 500,
        listen: bool = True,
    ) -> Iterator[RecordedEvent]:
        events = self.inner.subscribe(
            after_position, stop=stop, poll_interval=poll_interval, batch_size=batch_size, listen=listen
        )
        try:
            while True:
                try:
                    yield self._wait(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._wait(events.aclose())

    def close(self) -> None:
        if self._engine is not None and self.inner.engine.url.database not in (None, "", ":memory:"):
            self._engine.dispose()
        self._wait(self.inner.close())
        self._stop_loop()

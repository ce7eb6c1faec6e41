"""``AsyncSessionStore``: the store contract for asyncio, on SQLAlchemy's asyncio engine.

There is one implementation of the store, ``SqlSessionStore`` (``_sql.py``): its statements, row
decoding, hash chain, validation, token counting, error translation and retry. The async store
runs that very code, in a greenlet on the event loop, over an ``AsyncEngine``'s ``sync_engine``
(aiosqlite for SQLite, psycopg 3's async mode for PostgreSQL). This is how SQLAlchemy's own
asyncio layer works: every driver call inside the greenlet suspends it and awaits the driver's
coroutine on the loop, so a store call never blocks the loop on I/O and needs no worker thread
(psycopg's async mode uses none; aiosqlite runs each SQLite connection in a thread of its own,
as sqlite3 has no async API); the CPU work between (validation, hashing, tokenizing, decoding
rows) runs on the loop as plain code. A method added to the sync store therefore works here once
it gets a one-line delegate below (tests/test_async_store.py checks that each has one).

Rules for code in the shared store, so it stays usable from here: pause with
``self._sleep`` (the retry policy does), never wait on ``threading`` primitives, and touch
the driver connection only through the DB-API methods SQLAlchemy's async adapters offer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.util.concurrency import await_only, greenlet_spawn, in_greenlet

from ..errors import SessionStoreError
from ..events import Event
from ._contract import (
    AppendResult,
    BlobRef,
    ChainHead,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    SessionWrite,
    SnapshotRecord,
    VerifyReport,
    check_subscription,
)
from ._observed import STORE_LOG
from ._receipts import ErasureReceipt, RetentionPlan
from ._retry import RetryPolicy
from ._sql import SqlSessionStore
from ._tokens import TokenCounter

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["AsyncSessionStore", "blocking_call", "on_store", "run_in_store"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class AsyncSessionStore:
    """The ``SessionStore`` contract with awaitable methods; open it with ``open_async_store``.

    Every method means exactly what the sync ``SessionStore`` method of the same name means:
    the same arguments, results, errors, retry policy and guarantees (one implementation
    serves both). ``run_sync`` runs sync code that takes a ``SessionStore`` (a ``Session``,
    a ``Pipeline``, ``visible_log``) against this store without a thread.

    One store serves any number of concurrent tasks on its event loop (an in-memory SQLite
    store, which has a single connection, runs their calls one at a time).
    """

    def __init__(
        self, engine: AsyncEngine, store: SqlSessionStore, *, single_connection: bool = False
    ) -> None:
        if not store.in_greenlet:
            msg = "AsyncSessionStore needs a store on the async engine's sync_engine (in_greenlet=True)"
            raise ValueError(msg)
        self.engine = engine
        self._store = store
        # A single shared connection (SQLite :memory:) must not interleave two tasks' transactions.
        self._lock: asyncio.Lock | None = asyncio.Lock() if single_connection else None
        store.async_store = self

    @property
    def token_counter(self) -> TokenCounter | None:
        """The token counter the store counts appended events with (None: counting off)."""
        return self._store.token_counter

    @property
    def retry(self) -> RetryPolicy:
        """How transient failures are retried (``open_async_store(retry=...)``)."""
        return self._store.retry

    async def run_sync(
        self, fn: Callable[Concatenate[SqlSessionStore, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``fn(store, *args, **kwargs)`` with a sync ``SessionStore`` whose I/O is awaited here.

        ``fn`` runs on the event loop (in a greenlet, as ``AsyncConnection.run_sync`` does):
        its database calls suspend it instead of blocking, its CPU work runs inline. The store
        it receives works only inside such a call: keep it (or a ``Session`` on it) and use it
        again only through ``run_sync`` / ``run_in_store``.
        """
        call = functools.partial(fn, self._store, *args, **kwargs)
        if self._lock is None:
            return await greenlet_spawn(call)
        async with self._lock:
            return await greenlet_spawn(call)

    # -- sessions --

    async def create_session(
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
        """See ``SessionStore.create_session``."""
        return await self.run_sync(
            SqlSessionStore.create_session,
            session_id,
            metadata=metadata,
            parent_session_id=parent_session_id,
            fork_seq=fork_seq,
            events=events,
            tenant=tenant,
            user=user,
            external_id=external_id,
        )

    async def get_or_create_session(
        self,
        tenant: str,
        user: str,
        external_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        events: Sequence[Event | dict[str, Any]] = (),
    ) -> tuple[SessionInfo, bool]:
        """See ``SessionStore.get_or_create_session``."""
        return await self.run_sync(
            SqlSessionStore.get_or_create_session,
            tenant,
            user,
            external_id,
            metadata=metadata,
            session_id=session_id,
            events=events,
        )

    async def get_session(self, session_id: str) -> SessionInfo:
        """See ``SessionStore.get_session``."""
        return await self.run_sync(SqlSessionStore.get_session, session_id)

    async def list_sessions(
        self,
        *,
        limit: int = 100,
        after: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> list[SessionInfo]:
        """See ``SessionStore.list_sessions``."""
        return await self.run_sync(
            SqlSessionStore.list_sessions, limit=limit, after=after, tenant=tenant, user=user
        )

    async def write_sessions(self, writes: Sequence[SessionWrite]) -> list[AppendResult]:
        """See ``SessionStore.write_sessions``."""
        return await self.run_sync(SqlSessionStore.write_sessions, writes)

    async def write_streamed(
        self, writes: Sequence[SessionWrite], *, batch_size: int = 1000, json_checked: bool = False
    ) -> list[AppendResult]:
        """See ``SessionStore.write_streamed``: the events' iterators are drawn on the event loop's
        thread, between the batches' awaited statements."""
        return await self.run_sync(
            SqlSessionStore.write_streamed, writes, batch_size=batch_size, json_checked=json_checked
        )

    # -- events --

    async def append(
        self, session_id: str, events: Sequence[Event | dict[str, Any]], expected_seq: ExpectedSeq
    ) -> AppendResult:
        """See ``SessionStore.append``."""
        return await self.run_sync(SqlSessionStore.append, session_id, events, expected_seq)

    async def last_seq(self, session_id: str) -> int:
        """See ``SessionStore.last_seq``."""
        return await self.run_sync(SqlSessionStore.last_seq, session_id)

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, *, verify: bool = False
    ) -> list[RecordedEvent]:
        """See ``SessionStore.read``."""
        return await self.run_sync(SqlSessionStore.read, session_id, from_seq, to_seq, verify=verify)

    async def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """See ``SessionStore.read_all``."""
        return await self.run_sync(SqlSessionStore.read_all, after_position, limit)

    async def max_position(self) -> int:
        """See ``SessionStore.max_position``."""
        return await self.run_sync(SqlSessionStore.max_position)

    async def orphaned_sessions(self) -> list[str]:
        """See ``SessionStore.orphaned_sessions``."""
        return await self.run_sync(SqlSessionStore.orphaned_sessions)

    async def subscribe(
        self,
        after_position: int = 0,
        *,
        stop: asyncio.Event | threading.Event | None = None,
        poll_interval: float = 0.2,
        batch_size: int = 500,
        listen: bool = True,
    ) -> AsyncGenerator[RecordedEvent, None]:
        """See ``SessionStore.subscribe``: history, then live events, exactly once each.

        Ends when ``stop`` is set: an ``asyncio.Event`` wakes a waiting subscriber at once, a
        ``threading.Event`` is checked every ``poll_interval`` (every 0.1 s while it LISTENs).
        With ``listen`` on PostgreSQL it LISTENs on a psycopg ``AsyncConnection`` of its own,
        opened before the first read, and wakes as soon as an append commits; it polls alone
        while that connection is down. ``listen=False`` and SQLite poll only.
        """
        check_subscription(after_position, stop, poll_interval, batch_size)
        listener = self._store._async_change_listener() if listen else None
        try:
            if listener is not None:
                await listener.listen()  # before the first read: no commit after it goes unheard
            position = after_position
            while stop is None or not stop.is_set():
                batch = await self.read_all(position, batch_size)
                for recorded in batch:
                    yield recorded
                    position = recorded.position
                if len(batch) < batch_size:
                    if listener is not None and await listener.listen():
                        await listener.wait(poll_interval, stop)
                    elif isinstance(stop, asyncio.Event):
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), poll_interval)
                    else:
                        await asyncio.sleep(poll_interval)
        finally:
            if listener is not None:
                await listener.close()

    # -- a fork's visible history (``SessionStore.visible_log``) --

    async def read_visible(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> list[RecordedEvent]:
        """See ``SessionLog.read``: the history users see, a fork's parent prefix included."""
        return await self.run_sync(lambda store: store.visible_log(session_id).read(from_seq, to_seq))

    async def last_visible_seq(self, session_id: str) -> int:
        """See ``SessionLog.last_seq``."""
        return await self.run_sync(lambda store: store.visible_log(session_id).last_seq())

    async def append_visible(
        self, session_id: str, events: Sequence[Event | dict[str, Any]], expected_seq: ExpectedSeq
    ) -> AppendResult:
        """See ``SessionLog.append``: append after the visible ``expected_seq``."""
        return await self.run_sync(lambda store: store.visible_log(session_id).append(events, expected_seq))

    # -- blobs and snapshots --

    async def put_blob(self, data: bytes, *, session_id: str | None = None) -> BlobRef:
        """See ``SessionStore.put_blob``."""
        return await self.run_sync(SqlSessionStore.put_blob, data, session_id=session_id)

    async def get_blob(self, sha256: str, *, session_id: str | None = None) -> bytes:
        """See ``SessionStore.get_blob``."""
        return await self.run_sync(SqlSessionStore.get_blob, sha256, session_id=session_id)

    async def put_snapshot(self, snapshot: SnapshotRecord) -> None:
        """See ``SessionStore.put_snapshot``."""
        await self.run_sync(SqlSessionStore.put_snapshot, snapshot)

    async def latest_snapshot(
        self,
        session_id: str,
        projection: str,
        projection_version: int,
        tokenizer: str,
        max_seq: int | None = None,
    ) -> SnapshotRecord | None:
        """See ``SessionStore.latest_snapshot``."""
        return await self.run_sync(
            SqlSessionStore.latest_snapshot, session_id, projection, projection_version, tokenizer, max_seq
        )

    # -- integrity --

    async def genesis(self, session: str | SessionInfo) -> str | None:
        """See ``SessionStore.genesis``."""
        return await self.run_sync(SqlSessionStore.genesis, session)

    async def chain_start(self, session: str | SessionInfo, first: RecordedEvent | None) -> str | None:
        """See ``SessionStore.chain_start``."""
        return await self.run_sync(SqlSessionStore.chain_start, session, first)

    async def head(self, session_id: str) -> ChainHead:
        """See ``SessionStore.head``."""
        return await self.run_sync(SqlSessionStore.head, session_id)

    async def verify(self, session_id: str, *, head: str | ChainHead | None = None) -> VerifyReport:
        """See ``SessionStore.verify``."""
        return await self.run_sync(SqlSessionStore.verify, session_id, head=head)

    # -- erasure --

    async def erase(self, session_id: str, *, reason: str, with_forks: bool = False) -> list[ErasureReceipt]:
        """See ``SessionStore.erase``."""
        return await self.run_sync(SqlSessionStore.erase, session_id, reason=reason, with_forks=with_forks)

    async def erasure(self, session_id: str) -> ErasureReceipt | None:
        """See ``SessionStore.erasure``."""
        return await self.run_sync(SqlSessionStore.erasure, session_id)

    async def erasures(self, *, limit: int = 1000, after: str | None = None) -> list[ErasureReceipt]:
        """See ``SessionStore.erasures``."""
        return await self.run_sync(SqlSessionStore.erasures, limit=limit, after=after)

    async def descendants(self, session_id: str) -> list[str]:
        """See ``SessionStore.descendants``."""
        return await self.run_sync(SqlSessionStore.descendants, session_id)

    async def retention_plan(
        self, older_than: timedelta, *, now: datetime | None = None, tenant: str | None = None
    ) -> RetentionPlan:
        """See ``SessionStore.retention_plan``."""
        return await self.run_sync(SqlSessionStore.retention_plan, older_than, now=now, tenant=tenant)

    async def read_stored(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> list[RecordedEvent]:
        """See ``SessionStore.read_stored``."""
        return await self.run_sync(SqlSessionStore.read_stored, session_id, from_seq, to_seq)

    async def purge_expired(
        self,
        older_than: timedelta,
        *,
        reason: str,
        dry_run: bool = False,
        now: datetime | None = None,
        tenant: str | None = None,
    ) -> RetentionPlan:
        """See ``SessionStore.purge_expired``."""
        return await self.run_sync(
            SqlSessionStore.purge_expired, older_than, reason=reason, dry_run=dry_run, now=now, tenant=tenant
        )

    # -- lifetime --

    async def store_token_counts(self) -> int:
        """See ``SessionStore.store_token_counts``."""
        return await self.run_sync(SqlSessionStore.store_token_counts)

    async def close(self) -> None:
        """Store the token counts reads made (a failure is logged), then close the engine's
        connections (unless the engine was handed in: the host's). The store cannot be used
        afterwards."""
        if len(self._store._counts):
            try:
                await self.store_token_counts()
            except SessionStoreError as e:
                STORE_LOG.warning("token counts not stored at close (counted again when read): %s", e)
        if self._store._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> AsyncSessionStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def run_in_store(store: Any, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run sync store code for async callers: ``fn(*args, **kwargs)`` where it may use ``store``.

    For a store an ``AsyncSessionStore`` serves (a ``Session`` loaded through its ``run_sync``),
    ``fn`` runs on the event loop and its database I/O is awaited; for an ordinary sync
    store, ``fn`` runs in a worker thread (``asyncio.to_thread``) so it does not block the loop.
    """
    owner = getattr(store, "async_store", None)
    if isinstance(owner, AsyncSessionStore):
        return await owner.run_sync(lambda _store: fn(*args, **kwargs))
    return await asyncio.to_thread(fn, *args, **kwargs)


async def on_store(
    store: AsyncSessionStore | SessionStore,
    fn: Callable[Concatenate[SessionStore, _P], _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """``fn(sync_store, *args, **kwargs)`` for async callers holding either kind of store: through
    ``run_sync`` on an ``AsyncSessionStore`` (a greenlet on the event loop), in a worker thread
    for a sync ``SessionStore`` (``asyncio.to_thread``). One sync body then serves both (the
    bridges' calls)."""
    if isinstance(store, AsyncSessionStore):
        return await store.run_sync(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, store, *args, **kwargs)


def blocking_call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``fn(*args, **kwargs)`` for a call that blocks on something other than the database (a
    summarizer's model request) made from store code.

    Inside an async store's greenlet it runs in a worker thread while the greenlet awaits it,
    so the event loop keeps serving other tasks; anywhere else it is a plain call.
    """
    # Without greenlet (the async extra) there is no async store, so no call runs in its
    # greenlets; asking SQLAlchemy would raise ImportError on an install without the extra.
    if sys.modules.get("greenlet") is not None and in_greenlet():
        return await_only(asyncio.to_thread(fn, *args, **kwargs))
    return fn(*args, **kwargs)

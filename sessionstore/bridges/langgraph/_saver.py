"""``SessionStoreSaver`` and ``AsyncSessionStoreSaver``: LangGraph checkpointers on a session store.

Both are thin: every operation is ``CheckpointLog``'s, run on a ``SessionStore`` directly (sync)
or through ``AsyncSessionStore.run_sync`` (async: the same code in a greenlet on the loop).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...store import AsyncSessionStore, SessionStore
from ._log import ERASE_REASON, CheckpointLog

__all__ = ["AsyncSessionStoreSaver", "SessionStoreSaver"]


def _next_version(current: str | int | float | None) -> str:
    """LangGraph's string versions (as its in-memory and PostgreSQL savers make them): a
    zero-padded counter and a random tail, so two branches forked from one checkpoint never
    give one channel the same version with different values."""
    number = (
        0 if current is None else int(current) if not isinstance(current, str) else int(current.split(".")[0])
    )
    return f"{number + 1:032}.{random.random():016}"


class _Saver(BaseCheckpointSaver[str]):
    """What both savers share: the serializer, the owner, the erasure reason and the versions."""

    def __init__(
        self, *, serde: SerializerProtocol | None, tenant: str | None, user: str | None, erase_reason: str
    ) -> None:
        super().__init__(serde=serde)
        self.erase_reason = erase_reason
        self._log = CheckpointLog(self.serde, tenant=tenant, user=user)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """The channel's next version (see ``_next_version``)."""
        return _next_version(current)


class SessionStoreSaver(_Saver):
    """A LangGraph checkpointer storing each thread as a session of ``store``.

    Checkpoints and pending writes are events (``langgraph_checkpoint``, ``langgraph_writes``) in
    the thread's session, large values blobs; ``delete_thread`` erases the session (a receipt
    remains). The async methods run the sync ones in a worker thread; on an event loop, prefer
    ``AsyncSessionStoreSaver``.

    Args:
        store: the store (SQLite or PostgreSQL, encrypted or not).
        serde: LangGraph's serializer (default: its ``JsonPlusSerializer``).
        tenant, user: the owner of the sessions this saver creates; a thread id names a
            different session for each owner.
        erase_reason: the reason ``delete_thread`` records in the erasure receipt.

    .. versionadded:: 0.3.0
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        serde: SerializerProtocol | None = None,
        tenant: str | None = None,
        user: str | None = None,
        erase_reason: str = ERASE_REASON,
    ) -> None:
        super().__init__(serde=serde, tenant=tenant, user=user, erase_reason=erase_reason)
        self.store = store

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The config's checkpoint, or the namespace's newest; None if there is none."""
        return self._log.get_tuple(self.store, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, filtered by metadata, ``before`` and ``limit``."""
        return self._log.list(self.store, config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; returns the config that names it."""
        return self._log.put(self.store, config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes against the config's checkpoint."""
        self._log.put_writes(self.store, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Erase the thread's session: checkpoints, writes and blobs only it holds."""
        self._log.delete_thread(self.store, thread_id, reason=self.erase_reason)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple`` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list`` in a worker thread."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put`` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """``put_writes`` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)


class AsyncSessionStoreSaver(_Saver):
    """``SessionStoreSaver`` for asyncio, on an ``AsyncSessionStore``: the same storage, and
    the same code run on the event loop (``AsyncSessionStore.run_sync``), no worker thread.

    The sync methods are for code outside the loop (e.g. another thread calling
    ``graph.get_state``): they run on the loop the saver was created on, and raise
    ``asyncio.InvalidStateError`` when called from that loop's own thread.

    .. versionadded:: 0.3.0
    """

    def __init__(
        self,
        store: AsyncSessionStore,
        *,
        serde: SerializerProtocol | None = None,
        tenant: str | None = None,
        user: str | None = None,
        erase_reason: str = ERASE_REASON,
    ) -> None:
        super().__init__(serde=serde, tenant=tenant, user=user, erase_reason=erase_reason)
        self.store = store
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The config's checkpoint, or the namespace's newest; None if there is none."""
        return await self.store.run_sync(self._log.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first, filtered by metadata, ``before`` and ``limit``."""

        def collect(store: SessionStore) -> list[CheckpointTuple]:
            return [*self._log.list(store, config, filter=filter, before=before, limit=limit)]

        for item in await self.store.run_sync(collect):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; returns the config that names it."""
        return await self.store.run_sync(self._log.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes against the config's checkpoint."""
        await self.store.run_sync(self._log.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase the thread's session: checkpoints, writes and blobs only it holds."""
        await self.store.run_sync(self._log.delete_thread, thread_id, reason=self.erase_reason)

    # -- sync, from outside the loop --

    def _on_loop(self, make: Any) -> Any:
        loop = self.loop
        if loop is None:
            msg = "AsyncSessionStoreSaver was created outside an event loop: use its async methods"
            raise asyncio.InvalidStateError(msg)
        try:
            if asyncio.get_running_loop() is loop:
                msg = (
                    "AsyncSessionStoreSaver's sync methods block: on its event loop, use the async "
                    "ones (ainvoke, aget_state, ...)"
                )
                raise asyncio.InvalidStateError(msg)
        except RuntimeError:
            pass  # no loop in this thread: fine
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``aget_tuple``, run on the saver's loop from another thread."""
        found: CheckpointTuple | None = self._on_loop(lambda: self.aget_tuple(config))
        return found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``alist``, run on the saver's loop from another thread."""

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        found: list[CheckpointTuple] = self._on_loop(collect)
        return iter(found)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``aput``, run on the saver's loop from another thread."""
        stored: RunnableConfig = self._on_loop(lambda: self.aput(config, checkpoint, metadata, new_versions))
        return stored

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """``aput_writes``, run on the saver's loop from another thread."""
        self._on_loop(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """``adelete_thread``, run on the saver's loop from another thread."""
        self._on_loop(lambda: self.adelete_thread(thread_id))

"""What the OpenAI Agents SDK bridge tests share: a store of each kind on each database.

``run(body)`` runs ``async body(store)`` on a fresh store: an ``AsyncSessionStore`` or a sync
``SessionStore`` (the bridge runs the sync one in worker threads), on SQLite or PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import sessionstore
from sessionstore import SessionStore
from sessionstore.store import AsyncSessionStore

from .conftest import Backend

AnyStore = SessionStore | AsyncSessionStore
Body = Callable[[AnyStore], Awaitable[Any]]


@dataclass
class Stores:
    """A database, and whether the bridge gets the async or the sync store of it."""

    backend: Backend
    api: str  # "async" or "sync"

    async def open(self, *, migrate: bool = True) -> AnyStore:
        if self.api == "async":
            return await sessionstore.open_async_store(self.backend.url, migrate=migrate, token_counter=None)
        return sessionstore.open_store(self.backend.url, migrate=migrate, token_counter=None)

    async def close(self, store: AnyStore) -> None:
        if isinstance(store, AsyncSessionStore):
            await store.close()
        else:
            store.close()

    def run(self, body: Body) -> Any:
        async def main() -> Any:
            store = await self.open()
            try:
                return await body(store)
            finally:
                await self.close(store)

        return asyncio.run(main())

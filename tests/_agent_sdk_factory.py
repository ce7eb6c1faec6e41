"""Adapters for the resilience suite (sessionstore.bridges.claude_agent_sdk.testing), made in any
process from what the environment names: ``SessionStoreClaudeStore`` over the store at
``$SESSIONSTORE_RESILIENCE_URL``, and two adapters that each lack a guarantee, kept in files
under ``$SESSIONSTORE_RESILIENCE_DIR``, to show the suite catches them."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

from claude_agent_sdk import InMemorySessionStore

import sessionstore
from sessionstore.bridges.claude_agent_sdk import SessionStoreClaudeStore
from sessionstore.store import AsyncSessionStore

URL_VARIABLE = "SESSIONSTORE_RESILIENCE_URL"
DIR_VARIABLE = "SESSIONSTORE_RESILIENCE_DIR"


class ClosingClaudeStore(SessionStoreClaudeStore):
    """The adapter, closing the store it was made with when the suite is done with it."""

    async def aclose(self) -> None:
        if isinstance(self.store, AsyncSessionStore):
            await self.store.close()
        else:
            self.store.close()


def sync_adapter() -> ClosingClaudeStore:
    return ClosingClaudeStore(sessionstore.open_store(os.environ[URL_VARIABLE]))


async def async_adapter() -> ClosingClaudeStore:
    return ClosingClaudeStore(await sessionstore.open_async_store(os.environ[URL_VARIABLE]))


def _folder() -> Path:
    return Path(os.environ[DIR_VARIABLE])


class UnlockedFileStore(InMemorySessionStore):
    """The SDK's in-memory store made to outlive its process: it reads its JSON file when made
    and on every ``load``, and rewrites the file after every ``append``, without a lock (two
    processes overwrite each other's entries)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._read()

    def _read(self) -> None:
        if self.path.exists():
            self._store = json.loads(self.path.read_text())

    async def append(self, key: Any, entries: list[Any]) -> None:
        await super().append(key, entries)
        scratch = self.path.with_suffix(f".{os.getpid()}")
        scratch.write_text(json.dumps(self._store))
        scratch.replace(self.path)

    async def load(self, key: Any) -> Any:
        self._read()
        return await super().load(key)


def unlocked_file_store() -> UnlockedFileStore:
    return UnlockedFileStore(_folder() / "store.json")


#: A batch at least this long stalls half way in a child process.
STALLS_FROM = 100


class PartialAppendStore:
    """Appends a batch one entry at a time, each a line of the session's file; in a child process
    a long batch stalls half way (a slow disk), so a kill leaves part of it stored."""

    def _path(self, key: Any) -> Path:
        name = "-".join([key["project_key"], key["session_id"], key.get("subpath") or ""])
        return _folder() / f"{name.replace('/', '_')}.jsonl"

    async def append(self, key: Any, entries: list[Any]) -> None:
        with self._path(key).open("a") as file:
            for n, entry in enumerate(entries):
                if (
                    n == len(entries) // 2
                    and len(entries) >= STALLS_FROM
                    and multiprocessing.parent_process()
                ):
                    threading.Event().wait()  # until the suite kills this process
                file.write(json.dumps(entry) + "\n")
                file.flush()

    async def load(self, key: Any) -> list[Any] | None:
        path = self._path(key)
        if not path.exists():
            return None
        return [json.loads(line) for line in path.read_text().splitlines()]

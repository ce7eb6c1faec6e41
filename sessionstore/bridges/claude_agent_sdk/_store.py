"""``SessionStoreClaudeStore``: the Claude Agent SDK's ``SessionStore`` on sessionstore.

The SDK mirrors every transcript line the CLI writes (``ClaudeAgentOptions(session_store=...)``)
and resumes from what ``load`` gives back. Here each line goes through
``sessionstore.claude_code.TranscriptMirror``: it becomes the events ``sessionstore import``
writes for it, in the transcript's own session, and each ``append`` is also a record of the
transcript's mirror log (which numbers the lines and holds those not settled yet). The layout:

* ``project_key`` is the tenant of every session of the project (listed, isolated and, on
  PostgreSQL, row-level secured as a tenant's);
* a main transcript's session is ``claude-agent-sdk-`` and 40 hex digits of a hash of
  (project_key, session_id); a sub-agent's (``subpath`` ``subagents/agent-<id>``) is a child
  session of it, as ``sessionstore import`` links sub-agents;
* ``delete`` is the store's erasure (crypto-shredding where the store encrypts), with receipts.

Each call is one sync store operation: through ``run_sync`` on an ``AsyncSessionStore`` (a
greenlet on the event loop), in a worker thread for a sync ``SessionStore``. Calls for one
session are serialized (the SDK serializes its appends anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from ...claude_code import MirroredTranscript, MirrorFamily, TranscriptMirror
from ...errors import ValidationError
from ...store import AsyncSessionStore, ErasureReceipt, SessionStore, on_store
from ...store._contract import check_owner_key

if TYPE_CHECKING:  # the SDK's own types: what its type checker sees of this store
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

__all__ = ["ERASE_REASON", "SESSION_PREFIX", "SessionStoreClaudeStore", "transcript_session_id"]

#: Every main transcript's store session id starts with this.
SESSION_PREFIX = "claude-agent-sdk-"
#: The reason ``delete`` gives its erasure (the receipt keeps it).
ERASE_REASON = "deleted through the Claude Agent SDK session store"
#: Metadata of every mirror log this bridge writes.
_CLIENT = {"client": "claude-agent-sdk"}

_P = ParamSpec("_P")
_T = TypeVar("_T")


def transcript_session_id(project_key: str, session_id: str) -> str:
    """The store session of the main transcript of (``project_key``, ``session_id``)."""
    # NUL is no character of an owner key: no two pairs join to the same text.
    digest = hashlib.sha256(f"transcript\x00{project_key}\x00{session_id}".encode()).hexdigest()
    return SESSION_PREFIX + digest[:40]


def _key_parts(key: object) -> tuple[str, str, str | None]:
    """(project_key, session_id, subpath) of an SDK ``SessionKey``, checked."""
    if not isinstance(key, dict):
        msg = f"a session key is a dict with project_key and session_id, not {type(key).__name__}"
        raise ValidationError(msg, field="key")
    project = check_owner_key("project_key", key.get("project_key"))
    session = check_owner_key("session_id", key.get("session_id"))
    subpath = key.get("subpath")
    if subpath is not None:
        subpath = check_owner_key("subpath", subpath)
    return project, session, subpath


def _family(project: str, session: str) -> MirrorFamily:
    metadata = {**_CLIENT, "project_key": project}
    return MirrorFamily(project, session, transcript_session_id(project, session), metadata)


def _millis(when: datetime | None) -> int:
    return 0 if when is None else int(when.timestamp() * 1000)


def _summary_fold(
    project: str, session: str
) -> Callable[[dict[str, Any] | None, list[dict[str, Any]]], dict[str, Any]]:
    """The SDK's own summary fold, for the records of a main transcript."""
    from claude_agent_sdk import fold_session_summary

    def fold(previous: dict[str, Any] | None, entries: list[dict[str, Any]]) -> dict[str, Any]:
        prev: Any = None if previous is None else {"session_id": session, "mtime": 0, "data": previous}
        key: Any = {"project_key": project, "session_id": session}
        batch: Any = entries  # the SDK's own entry type: the dicts it handed to append
        data: dict[str, Any] = fold_session_summary(prev, key, batch)["data"]
        return data

    return fold


class SessionStoreClaudeStore:
    """The Claude Agent SDK's ``SessionStore`` kept in sessionstore: give it to
    ``ClaudeAgentOptions(session_store=...)``.

    ``store`` is an ``AsyncSessionStore`` (``await sessionstore.open_async_store(url)``) or a sync
    ``SessionStore`` (``sessionstore.open_store(url)``), SQLite or PostgreSQL; the adapter does not
    close it. Every method of the SDK's protocol is implemented: ``append``, ``load``,
    ``list_sessions``, ``list_session_summaries``, ``delete`` and ``list_subkeys``.
    docs/bridges/claude-agent-sdk.md.
    """

    def __init__(self, store: AsyncSessionStore | SessionStore, *, cache_size: int = 64) -> None:
        if not isinstance(store, (AsyncSessionStore, SessionStore)):
            msg = f"store must be a SessionStore or an AsyncSessionStore, not {type(store).__name__}"
            raise ValidationError(msg, field="store")
        self.store = store
        self._mirror = TranscriptMirror(cache_size=cache_size)
        self._locks: dict[str, asyncio.Lock] = {}

    # -- the SDK's protocol --

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror a batch of transcript entries: all of it is stored, or nothing (a malformed
        entry, or a uuid stored before with other content, refuses the batch with a
        ``ValidationError`` naming the entry). An entry whose uuid is stored already, with the
        same content, is not stored again (a retried batch writes nothing)."""
        project, session, subpath = _key_parts(key)
        family = _family(project, session)
        fold = _summary_fold(project, session) if subpath is None else None
        async with self._lock(family):
            batch = cast("list[dict[str, Any]]", entries)
            await self._run(self._mirror.append, family, subpath, batch, client_state=fold)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries of the transcript, deep-equal to those appended, in order; None when none
        were (or the transcript was deleted)."""
        project, session, subpath = _key_parts(key)
        found = await self._run(self._mirror.entries, _family(project, session), subpath)
        return cast("list[SessionStoreEntry] | None", found)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """Every main transcript of the project with entries: its session id and the time its
        last batch was stored (Unix epoch milliseconds)."""
        return [
            {"session_id": session, "mtime": _millis(main.updated_at)}
            for session, main in await self._run(self._mains, check_owner_key("project_key", project_key))
        ]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summary of every main transcript of the project, as ``fold_session_summary``
        left it with its last batch (stored with that batch, in its transaction); ``mtime`` is
        that batch's store time, the clock ``list_sessions`` reads."""
        return [
            {"session_id": session, "mtime": _millis(main.updated_at), "data": main.client_state or {}}
            for session, main in await self._run(self._mains, check_owner_key("project_key", project_key))
        ]

    async def delete(self, key: SessionKey) -> None:
        """Erase the transcript (a main one with its sub-agents'): see ``erase``."""
        await self.erase(key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's sub-agent transcripts that hold entries."""
        project, session, _ = _key_parts(key)
        found = await self._run(self._mirror.transcripts, _family(project, session))
        return [t.subpath for t in found if t.subpath is not None]

    # -- what the store adds --

    async def erase(self, key: SessionKey, reason: str = ERASE_REASON) -> list[ErasureReceipt]:
        """Erase the transcript for good: its session and mirror log (a main transcript's with
        every sub-agent's) are purged, or in an encrypting store shredded, and a receipt of
        each stays (``store.erasure``). [] for a transcript never written."""
        project, session, subpath = _key_parts(key)
        family = _family(project, session)
        async with self._lock(family):
            return await self._run(self._mirror.erase, family, subpath, reason=reason)

    def session_id(self, key: SessionKey) -> str:
        """The store session that holds the transcript's events (for ``sessionstore context``,
        ``show``, ``audit``, the viewer)."""
        project, session, subpath = _key_parts(key)
        return self._mirror.store_id(_family(project, session), subpath)

    # -- sync code, run on the store --

    def _mains(self, store: SessionStore, project: str) -> list[tuple[str, MirroredTranscript]]:
        found: list[tuple[str, MirroredTranscript]] = []
        for session in self._mirror.families(store, project, _CLIENT):
            main = self._mirror.transcript(store, _family(project, session), None)
            if main is not None:
                found.append((session, main))
        return found

    def _lock(self, family: MirrorFamily) -> contextlib.AbstractAsyncContextManager[object]:
        """One call of the family's at a time. On an async store the mirror's own lock cannot:
        its calls share the event loop's thread (a second would wait on the first's thread)."""
        if not isinstance(self.store, AsyncSessionStore):
            return contextlib.nullcontext()  # worker threads: the mirror's lock serializes them
        return self._locks.setdefault(family.main_id, asyncio.Lock())

    async def _run(
        self, fn: Callable[Concatenate[SessionStore, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await on_store(self.store, fn, *args, **kwargs)

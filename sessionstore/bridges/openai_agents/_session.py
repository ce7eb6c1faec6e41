"""``SessionStoreSession``: the OpenAI Agents SDK's ``Session`` on sessionstore.

Each SDK call is one store operation: on an ``AsyncSessionStore`` it runs through ``run_sync``
(a greenlet on the event loop, no thread), on a sync ``SessionStore`` in a worker thread
(``asyncio.to_thread``, as the SDK's own ``SQLiteSession`` does). The same sync code serves both.

The session object keeps the fold of the log it has read (``ItemFold``) and reads only the events
appended since on each call, so ``get_items`` costs one indexed read of what is new.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import pydantic
from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from ...errors import (
    ConcurrencyError,
    SessionErasedError,
    SessionExistsError,
    SessionNotFoundError,
    ValidationError,
)
from ...events import (
    Event,
    OpenAIAgentsItemPopped,
    OpenAIAgentsItemsAdded,
    OpenAIAgentsRemovalReverted,
    OpenAIAgentsSessionCleared,
)
from ...store import ANY, AsyncSessionStore, ErasureReceipt, SessionStore, on_store
from ...store._contract import check_owner_key
from ._fold import CLEARED, POPPED, ItemFold, ItemRemoval

__all__ = ["ERASE_REASON", "SESSION_PREFIX", "SessionStoreSession", "agents_session_id"]

#: Every bridged session's store id starts with this.
SESSION_PREFIX = "openai-agents-"
#: The reason ``erase`` gives its erasure unless told another (the receipt keeps it).
ERASE_REASON = "erased through the OpenAI Agents SDK session"
#: The session metadata key that holds the SDK's session id.
_SESSION_KEY = "openai_agents_session_id"

_P = ParamSpec("_P")
_T = TypeVar("_T")


def agents_session_id(session_id: str, tenant: str | None = None, user: str | None = None) -> str:
    """The store's session id for an SDK session: ``openai-agents-`` and 40 hex digits of a hash
    of (tenant, user, session id), so any SDK session id maps to a valid store id."""
    digest = hashlib.sha256(json.dumps([tenant, user, session_id]).encode()).hexdigest()[:40]
    return SESSION_PREFIX + digest


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"limit"})
        if unknown:
            msg = f"unknown session settings: {', '.join(unknown)} (SessionSettings has: limit)"
            raise ValidationError(msg, field="session_settings")
        return SessionSettings(**value)
    msg = f"session_settings must be a SessionSettings or a dict, not {type(value).__name__}"
    raise ValidationError(msg, field="session_settings")


def _check_limit(limit: object) -> int | None:
    if limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
        return limit
    msg = f"limit must be None or an int >= 0, not {limit!r}"
    raise ValidationError(msg, field="limit")


def _added(items: object) -> OpenAIAgentsItemsAdded:
    """The event for ``add_items``; every item checked to be a JSON object first."""
    if not isinstance(items, list):
        msg = f"add_items takes a list of items, not {type(items).__name__}"
        raise ValidationError(msg, event_type="openai_agents_items_added", field="items")
    for index, item in enumerate(items):
        problem = None
        if not isinstance(item, dict):
            problem = f"is a {type(item).__name__}, not a dict (an SDK input item)"
        else:
            try:
                json.dumps(item, allow_nan=False)
            except (TypeError, ValueError) as e:
                problem = f"cannot be stored as JSON: {e}"
        if problem is not None:
            msg = f"item {index} {problem}; nothing was added"
            raise ValidationError(msg, event_type="openai_agents_items_added", field=f"items[{index}]")
    try:
        return OpenAIAgentsItemsAdded(items=items)
    except pydantic.ValidationError as e:  # pragma: no cover - the checks above cover what it checks
        raise ValidationError(str(e), event_type="openai_agents_items_added", field="items") from e


class SessionStoreSession:
    """An OpenAI Agents SDK session kept in sessionstore: give it to ``Runner.run(...,
    session=...)`` as you would a ``SQLiteSession``.

    ``store`` is an ``AsyncSessionStore`` (``await sessionstore.open_async_store(url)``) or a sync
    ``SessionStore`` (``sessionstore.open_store(url)``), SQLite or PostgreSQL; the session does
    not close it. Use a sync store with ``Runner.run_sync``, which runs each call on an event loop
    of its own (an async store belongs to the loop it was opened on).

    Every change is an event of the session's hash-chained log: ``add_items`` appends the items,
    ``pop_item`` and ``clear_session`` append what they removed (the items stay in the log, so
    ``removals`` lists them and ``revert`` undoes one). ``erase`` deletes the session's data for
    good, with a receipt. The store session is created by the first ``add_items``;
    ``tenant`` and ``user`` (both or neither) make it a tenant's session, with the SDK session
    id as its ``external_id``. docs/bridges/openai-agents.md.

    .. versionadded:: 0.2.0
    """

    def __init__(
        self,
        session_id: str,
        store: SessionStore | AsyncSessionStore,
        *,
        tenant: str | None = None,
        user: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        """Raises sessionstore's ``ValidationError`` for an id, owner or store it cannot use."""
        if not isinstance(store, SessionStore | AsyncSessionStore):
            msg = f"store must be a SessionStore or an AsyncSessionStore, not {type(store).__name__}"
            raise ValidationError(msg, field="store")
        check_owner_key("session_id", session_id)
        if (tenant is None) != (user is None):
            msg = "give tenant and user together, or neither"
            raise ValidationError(msg, field="tenant" if tenant is None else "user")
        if tenant is not None:
            check_owner_key("tenant", tenant)
            check_owner_key("user", user)
        self.session_id = session_id
        self.store = store
        self.tenant = tenant
        self.user = user
        self.session_settings: SessionSettings | None = _settings(session_settings)
        #: The store's id of this session (``agents_session_id``).
        self.store_session_id = agents_session_id(session_id, tenant, user)
        self._fold = ItemFold()
        self._fold_lock = threading.Lock()  # a sync store's calls run in several worker threads
        self._created = False

    # -- the SDK's Session protocol --

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (else ``session_settings.limit``),
        the newest ``limit`` of them. A session nothing was added to has none.

        Raises:
            sessionstore.ValidationError: a negative or non-int ``limit``.
            sessionstore.SessionErasedError: the session was erased.
        """
        chosen = _check_limit(limit if limit is not None else getattr(self.session_settings, "limit", None))
        fold = await self._run(self._refresh)
        items: list[TResponseInputItem] = fold.items(chosen)  # type: ignore[assignment]
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (one event; none for an empty list), after whatever is there.

        Raises:
            sessionstore.ValidationError: an item is not a dict JSON can hold; nothing is added.
            sessionstore.SessionErasedError: the session was erased (its id is not used again).
        """
        event = None if isinstance(items, list) and not items else _added(items)
        if event is not None:
            await self._run(self._append, event)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None when there is none). The removal is an
        event: the item stays in the log, and ``revert`` brings it back.

        Concurrent pops each remove a different item (each appends only after the log position
        it read; a writer in between makes it read again).

        Raises:
            sessionstore.SessionErasedError: the session was erased.
        """
        popped: TResponseInputItem | None = await self._run(self._pop)
        return popped

    async def clear_session(self) -> None:
        """Remove every item (one event; none when there is nothing to remove). The items stay
        in the log: ``revert`` brings them back, ``erase`` deletes them.

        Raises:
            sessionstore.SessionErasedError: the session was erased.
        """
        await self._run(self._clear)

    # -- what the store adds --

    async def removals(self) -> list[ItemRemoval]:
        """Every ``pop_item`` and ``clear_session`` of the session, oldest first, with the items
        each removed and the revert that undid it, if any."""
        fold = await self._run(self._refresh)
        return fold.removals()

    async def revert(self, removal_event_id: str) -> str:
        """Undo a pop or a clear: the items it removed are present again, each at its place in
        the order items were added (an item another pop or clear removed stays removed).
        Appends an ``openai_agents_removal_reverted`` event and returns its id.

        Raises:
            sessionstore.ValidationError: no pop or clear of this session has that id, or it was
                reverted already.
            sessionstore.SessionErasedError: the session was erased.
        """
        return await self._run(self._revert, str(removal_event_id))

    async def erase(self, reason: str = ERASE_REASON) -> list[ErasureReceipt]:
        """Erase the session's log for good: its rows are purged (or, in an encrypting store, its
        key destroyed) and a receipt recording what, when and why stays (``store.erasure``).
        Afterwards every call on this session raises ``SessionErasedError``.

        Returns:
            The receipts (the store's ``erase``); [] when nothing was ever added; the earlier
            receipt when it was erased already.
        """
        return await self._run(self._erase, reason)

    # -- sync code, run on the store --

    async def _run(
        self, fn: Callable[Concatenate[SessionStore, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await on_store(self.store, fn, *args, **kwargs)

    def _refresh(self, store: SessionStore) -> ItemFold:
        """The fold, brought up to the end of the log."""
        try:
            events = store.read(self.store_session_id, self._fold.last_seq + 1)
        except SessionErasedError:
            raise
        except SessionNotFoundError:
            return self._fold  # nothing added yet
        self._created = True
        with self._fold_lock:
            for event in events:
                self._fold.apply(event)
        return self._fold

    def _append(self, store: SessionStore, event: Event, expected_seq: int | object = ANY) -> None:
        if not self._created:
            try:
                store.create_session(
                    self.store_session_id,
                    metadata={_SESSION_KEY: self.session_id},
                    events=[event],
                    tenant=self.tenant,
                    user=self.user,
                    external_id=self.session_id if self.tenant is not None else None,
                )
                self._created = True
                return
            except SessionExistsError:
                receipt = store.erasure(self.store_session_id)
                if receipt is not None:
                    raise SessionErasedError(
                        self.store_session_id, method=receipt.method, erased_at=receipt.erased_at.isoformat()
                    ) from None
                self._created = True  # another writer created it just now
        store.append(self.store_session_id, [event], expected_seq)  # type: ignore[arg-type]

    def _pop(self, store: SessionStore) -> TResponseInputItem | None:
        while True:
            fold = self._refresh(store)
            newest = fold.newest()
            if newest is None:
                return None
            (added_event_id, index), item = newest
            try:
                store.append(
                    self.store_session_id,
                    [OpenAIAgentsItemPopped(added_event_id=added_event_id, index=index)],
                    fold.last_seq,
                )
            except ConcurrencyError:
                continue  # another writer appended since the read: read again, pop the newest then
            return item  # type: ignore[return-value]

    def _clear(self, store: SessionStore) -> None:
        # Nothing present: no event (an item added concurrently is after this clear anyway).
        if self._refresh(store).newest() is not None:
            store.append(self.store_session_id, [OpenAIAgentsSessionCleared()], ANY)

    def _revert(self, store: SessionStore, event_id: str) -> str:
        while True:
            fold = self._refresh(store)
            removal = fold.removal(event_id)
            if removal is None:
                msg = f"event {event_id} is not a pop_item or clear_session of session {self.session_id!r}"
                raise ValidationError(msg, field="removal_event_id")
            if removal.reverted_by is not None:
                msg = f"event {event_id} was already reverted by event {removal.reverted_by}"
                raise ValidationError(msg, field="removal_event_id")
            event = OpenAIAgentsRemovalReverted(
                target_event_id=event_id, target_type=POPPED if removal.kind == "pop" else CLEARED
            )
            try:
                store.append(self.store_session_id, [event], fold.last_seq)
            except ConcurrencyError:
                continue  # read again: a concurrent revert of the same removal wins once
            return str(event.event_id)

    def _erase(self, store: SessionStore, reason: str) -> list[ErasureReceipt]:
        try:
            return store.erase(self.store_session_id, reason=reason)
        except SessionErasedError:  # pragma: no cover - erase returns the earlier receipt instead
            receipt = store.erasure(self.store_session_id)
            return [] if receipt is None else [receipt]
        except SessionNotFoundError:
            return []

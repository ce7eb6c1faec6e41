"""``SessionStoreSessionService``: Google ADK's ``BaseSessionService`` on an ``AsyncSessionStore``.

Each ADK call is one ``run_sync`` on the store (one greenlet on the event loop, no thread), and
each write is one transaction: ``append_event`` writes the ADK event to the session's log and its
``app:`` / ``user:`` state changes to their streams together (``write_sessions``), or nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pydantic_core
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from typing_extensions import override

from ...errors import (
    ConcurrencyError,
    SessionErasedError,
    SessionExistsError,
    SessionNotFoundError,
    ValidationError,
)
from ...events import AdkEventRecorded, AdkSessionCreated, AdkStateChanged
from ...store import (
    ANY,
    AppendResult,
    AsyncSessionStore,
    ErasureReceipt,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    SessionWrite,
)
from ...store._contract import check_owner_key
from ._layout import (
    KIND,
    app_stream_id,
    fold_scope,
    json_safe,
    scoped,
    session_store_id,
    split_delta,
    user_stream_id,
    without_temp,
)

__all__ = ["SessionStoreSessionService"]

#: The revision an ADK ``Session`` object was loaded at (its ``_storage_update_marker``).
_MARKER = "sessionstore:"
#: Names the event ids the bridge derives (uuid5), so a re-delivered ADK event is deduplicated.
_EVENT_IDS = uuid.UUID("4d1c5a52-7f0e-5d3b-9a55-0a8d2b6f1e7c")
_PAGE = 500
#: Entries each cache of the service keeps (streams known to exist, user stream generations,
#: folded state): a service of many users keeps the most recently used ones.
_CACHED = 4096

_STALE = (
    "The session has been modified in storage since it was loaded (session {id!r}: expected "
    "seq {expected}, the log is at {actual}). Please reload the session before appending more events."
)


@dataclasses.dataclass(frozen=True)
class _Key:
    """An ADK session's name, checked: (app_name, user_id, session_id)."""

    app_name: str
    user_id: str
    session_id: str

    @classmethod
    def of(cls, app_name: object, user_id: object, session_id: object) -> _Key:
        """Raises sessionstore's ``ValidationError`` for a name the store cannot hold."""
        return cls(
            check_owner_key("app_name", app_name),
            check_owner_key("user_id", user_id),
            check_owner_key("session_id", session_id),
        )

    @property
    def store_id(self) -> str:
        return session_store_id(self.app_name, self.user_id, self.session_id)


@dataclasses.dataclass(frozen=True)
class _Loaded:
    """A bridged session folded out of its log (state without the app and user scopes)."""

    state: dict[str, Any]
    events: list[dict[str, Any]]  # adk_event_recorded payloads, in seq order
    last_seq: int
    last_update_time: float


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Keep ``key`` as the most recently used entry; drop the least recently used past _CACHED."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _CACHED:
        cache.popitem(last=False)


def _owns(info: SessionInfo, key: _Key) -> bool:
    return info.metadata.get(KIND) == "session" and (info.tenant, info.user, info.external_id) == (
        key.app_name,
        key.user_id,
        key.session_id,
    )


def _fold(events: Sequence[RecordedEvent]) -> _Loaded:
    state: dict[str, Any] = {}
    recorded: list[dict[str, Any]] = []
    updated = 0.0
    for event in events:
        payload = event.payload_dict()
        if event.type == "adk_session_created":
            state.update(payload["state"])
            updated = payload["created_at"]
        elif event.type == "adk_event_recorded":
            state.update(split_delta(payload["state_delta"])[0])
            recorded.append(payload)
            updated = payload["timestamp"]
    return _Loaded(state, recorded, events[-1].seq if events else 0, updated)


def _load(store: SessionStore, key: _Key) -> _Loaded | None:
    """The session folded, or None when it does not exist (or was erased).

    One read: the session's first event (written with it, in its creation's transaction) says
    whose it is.
    """
    try:
        events = store.read(key.store_id)
    except SessionNotFoundError:
        return None
    first = events[0].payload_dict() if events and events[0].type == "adk_session_created" else {}
    if (first.get("app_name"), first.get("user_id"), first.get("adk_session_id")) != (
        key.app_name,
        key.user_id,
        key.session_id,
    ):
        return None
    return _fold(events)


def _adk_event(payload: dict[str, Any]) -> AdkEvent:
    data = dict(payload["event"])
    data["actions"] = {**data.get("actions", {}), "state_delta": payload["state_delta"]}
    return AdkEvent.model_validate(data)


def _session(
    key: _Key, loaded: _Loaded, app: dict[str, Any], user: dict[str, Any], events: list[AdkEvent]
) -> Session:
    session = Session(
        id=key.session_id,
        app_name=key.app_name,
        user_id=key.user_id,
        state=scoped(loaded.state, app, user),
        events=events,
        last_update_time=loaded.last_update_time,
    )
    session._storage_update_marker = f"{_MARKER}{loaded.last_seq}"
    return session


def _recent(events: list[dict[str, Any]], config: GetSessionConfig | None) -> list[dict[str, Any]]:
    """The events ``config`` asks for: at or after ``after_timestamp``, then the last N."""
    if config is None:
        return events
    if config.after_timestamp is not None:
        events = [e for e in events if e["timestamp"] >= config.after_timestamp]
    if config.num_recent_events is not None:
        events = events[max(0, len(events) - config.num_recent_events) :] if config.num_recent_events else []
    return events


def _recorded(store_id: str, event: AdkEvent, delta: dict[str, Any]) -> AdkEventRecorded:
    """The store event for an ADK event; its id is derived from the session, the ADK event id and
    the content, so delivering the same event twice stores it once."""
    try:
        dumped = event.model_dump(mode="json", exclude_none=True, exclude={"actions": {"state_delta"}})
    except pydantic_core.PydanticSerializationError as e:
        msg = f"ADK event {event.id!r} cannot be stored as JSON: {e}"
        raise ValidationError(msg, event_type="adk_event_recorded", field="event") from e
    digest = hashlib.sha256(
        json.dumps([dumped, delta], sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return AdkEventRecorded(
        event_id=uuid.uuid5(_EVENT_IDS, f"{store_id}\n{event.id}\n{digest}"),
        adk_event_id=event.id,
        invocation_id=event.invocation_id,
        author=event.author,
        timestamp=event.timestamp,
        state_delta=delta,
        event=dumped,
    )


class SessionStoreSessionService(BaseSessionService):
    """Google ADK sessions kept in sessionstore: every ADK event, and every change of session, app
    and user state, is an event in a hash-chained, append-only log.

    ``store`` is an ``AsyncSessionStore`` (``await sessionstore.open_async_store(url)``), SQLite or
    PostgreSQL; the service does not close it. docs/bridges/adk.md maps ADK's model onto the store.

    Behaves as ADK's ``DatabaseSessionService``: ``app:`` state is shared by every session of the
    app, ``user:`` state by every session of the user in the app, ``temp:`` state is applied to the
    session object but never stored, partial events are not stored, and ``append_event`` on a
    session object that is older than what is stored raises ``StaleSessionError``.
    ``delete_session`` erases the session (``erase_session`` returns the receipts).

    .. versionadded:: 0.3.0
    """

    def __init__(
        self, store: AsyncSessionStore, *, erasure_reason: str = "deleted through Google ADK"
    ) -> None:
        if not isinstance(store, AsyncSessionStore):
            msg = f"store must be an AsyncSessionStore (open_async_store), not {type(store).__name__}"
            raise ValidationError(msg, field="store")
        self.store = store
        self.erasure_reason = erasure_reason
        # Caches, each of at most _CACHED entries (the least recently used go first):
        self._streams: OrderedDict[str, None] = OrderedDict()  # state streams known to exist
        # (app, user) -> the generation of the user's state stream (see user_stream_id)
        self._generations: OrderedDict[tuple[str, str], int] = OrderedDict()
        # stream id -> (seq, state) folded so far: streams only grow, so a read folds what is new
        self._folded: OrderedDict[str, tuple[int, dict[str, Any]]] = OrderedDict()

    # -- sessions --

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create the session with ``state`` (its ``app:`` and ``user:`` keys go to their scopes).

        A blank or missing ``session_id`` gets a uuid4; surrounding whitespace is stripped.

        Raises:
            AlreadyExistsError: the app's user has a session with this id, or had one that was
                deleted (an erased session's id is not used again).
            sessionstore.ValidationError: a name or a state value the store cannot hold.
        """
        key = _Key.of(app_name, user_id, (session_id or "").strip() or str(uuid.uuid4()))
        own, app, user = split_delta(json_safe(state or {}))
        created = AdkSessionCreated(
            app_name=key.app_name,
            user_id=key.user_id,
            adk_session_id=key.session_id,
            state=own,
            created_at=time.time(),
        )

        def writes(store: SessionStore) -> list[SessionWrite]:
            self._ensure_streams(store, key)
            creation = SessionWrite(
                key.store_id,
                [created],
                create=True,
                metadata={KIND: "session"},
                tenant=key.app_name,
                user=key.user_id,
                external_id=key.session_id,
            )
            return [creation, *self._scope_writes(store, key, app, user, None, None)]

        def create(store: SessionStore) -> Session:
            try:
                self._write(store, key, writes)
            except SessionExistsError as e:
                erased = store.erasure(key.store_id) is not None
                note = " (it was deleted, and a deleted session's id is not used again)" if erased else ""
                raise AlreadyExistsError(f"Session with id {key.session_id} already exists{note}.") from e
            session = self._read_session(store, key, None)
            assert session is not None  # created in this call
            return session

        return await self.store.run_sync(create)

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state and its events (``config``: the recent ones), or
        None when there is none (or it was deleted)."""
        key = _Key.of(app_name, user_id, session_id.strip() if isinstance(session_id, str) else session_id)
        return await self.store.run_sync(self._read_session, key, config)

    def _read_session(
        self, store: SessionStore, key: _Key, config: GetSessionConfig | None
    ) -> Session | None:
        loaded = _load(store, key)
        if loaded is None:
            return None
        app = self._scope(store, app_stream_id(key.app_name))
        user = self._user_scope(store, key.app_name, key.user_id)
        return _session(key, loaded, app, user, [_adk_event(p) for p in _recent(loaded.events, config)])

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (the user's, given ``user_id``) with merged state and no events,
        least recently updated first (ties by user id, then session id).

        Each session's log is read to fold its state: the cost grows with the events listed.
        """
        check_owner_key("app_name", app_name)
        if user_id is not None:
            check_owner_key("user_id", user_id)

        def listing(store: SessionStore) -> list[Session]:
            app = self._scope(store, app_stream_id(app_name))
            users: dict[str, dict[str, Any]] = {}
            found: list[Session] = []
            after: str | None = None
            while True:
                page = store.list_sessions(limit=_PAGE, after=after, tenant=app_name, user=user_id)
                for info in page:
                    if info.metadata.get(KIND) != "session" or info.user is None or info.external_id is None:
                        continue
                    key = _Key(app_name, info.user, info.external_id)
                    loaded = _load(store, key)
                    if loaded is None:
                        continue
                    if info.user not in users:
                        users[info.user] = self._user_scope(store, app_name, info.user)
                    found.append(_session(key, loaded, app, users[info.user], []))
                if len(page) < _PAGE:
                    break
                after = page[-1].id
            found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
            return found

        return ListSessionsResponse(sessions=await self.store.run_sync(listing))

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session (see ``erase_session``); nothing happens when there is none."""
        await self.erase_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def erase_session(
        self, *, app_name: str, user_id: str, session_id: str, reason: str | None = None
    ) -> list[ErasureReceipt]:
        """Erase the session's log (and any fork of it made in sessionstore) with receipts.

        A plaintext store purges the rows, an encrypting one destroys the session's key; either
        way reading it afterwards finds nothing (``get_session`` returns None) and the receipt
        stays (``store.erasure``). App and user state are not the session's: they stay, as with
        ADK's own services (``erase_user`` erases a user's).

        Returns:
            The receipts (the session's first); [] when there is no such session; the earlier
            receipt when it was erased already.
        """
        key = _Key.of(app_name, user_id, session_id.strip() if isinstance(session_id, str) else session_id)
        why = reason if reason is not None else self.erasure_reason

        def erase(store: SessionStore) -> list[ErasureReceipt]:
            try:
                info = store.get_session(key.store_id)
            except SessionErasedError:
                receipt = store.erasure(key.store_id)
                return [] if receipt is None else [receipt]
            except SessionNotFoundError:
                return []
            if not _owns(info, key):
                return []
            return store.erase(key.store_id, reason=why, with_forks=True)

        return await self.store.run_sync(erase)

    async def erase_user(
        self, *, app_name: str, user_id: str, reason: str | None = None
    ) -> list[ErasureReceipt]:
        """Erase every session of the user in the app and the user's ``user:`` state stream.

        Returns:
            Every receipt written (sessions already erased are skipped).
        """
        check_owner_key("app_name", app_name)
        check_owner_key("user_id", user_id)
        why = reason if reason is not None else self.erasure_reason

        def erase(store: SessionStore) -> list[ErasureReceipt]:
            receipts: list[ErasureReceipt] = []
            after: str | None = None
            while True:
                page = store.list_sessions(limit=_PAGE, after=after, tenant=app_name, user=user_id)
                for info in page:
                    if (
                        info.metadata.get(KIND) in ("session", "user_state")
                        and store.erasure(info.id) is None
                    ):
                        receipts += store.erase(info.id, reason=why, with_forks=True)
                if len(page) < _PAGE:
                    break
                after = page[-1].id
            self._forget_user_stream(app_name, user_id)
            return receipts

        return await self.store.run_sync(erase)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state in the app, keys without the prefix ({} when none)."""
        check_owner_key("app_name", app_name)
        check_owner_key("user_id", user_id)
        return await self.store.run_sync(lambda store: self._user_scope(store, app_name, user_id))

    # -- events --

    @override
    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        """Store ``event`` and apply it to ``session``, as ADK's database service does.

        A partial event is returned untouched. ``temp:`` keys of its state delta are applied to
        ``session`` and removed from the event; the rest of the delta is stored with it in one
        transaction, ``app:`` and ``user:`` keys in their streams. Delivering the same event
        (same id, same content) again stores nothing.

        Raises:
            StaleSessionError: ``session`` was loaded before the last stored change of the session
                (another writer appended since); nothing was stored.
            google.adk SessionNotFoundError: the session does not exist (or was deleted).
            sessionstore.ValidationError: the event cannot be stored as JSON.
        """
        if event.partial:
            return event
        key = _Key.of(session.app_name, session.user_id, session.id)
        delta = json_safe(without_temp(event.actions.state_delta)) if event.actions else {}
        recorded = _recorded(key.store_id, event, delta)
        marker = getattr(session, "_storage_update_marker", None)
        last_event_id = session.events[-1].id if session.events else None
        expected: ExpectedSeq = ANY

        _, app, user = split_delta(delta)

        def writes(store: SessionStore) -> list[SessionWrite]:
            if app or user:
                self._ensure_streams(store, key)
            stored = SessionWrite(key.store_id, [recorded], expected_seq=expected)
            return [stored, *self._scope_writes(store, key, app, user, event.id, str(recorded.event_id))]

        def append(store: SessionStore) -> tuple[int, bool]:
            nonlocal expected
            expected = self._expected_seq(store, key, marker, last_event_id)
            try:
                result = self._write(store, key, writes)[0]
            except ConcurrencyError as e:
                raise StaleSessionError(
                    _STALE.format(id=key.session_id, expected=e.expected, actual=e.actual)
                ) from e
            return result.last_seq, result.deduplicated

        last_seq, deduplicated = await self.store.run_sync(append)
        if deduplicated and any(e.id == event.id for e in session.events):
            return event  # an equal re-delivery: already applied to this session object
        session._storage_update_marker = f"{_MARKER}{last_seq}"
        session.last_update_time = event.timestamp
        return await super().append_event(session, event)

    def _expected_seq(self, store: SessionStore, key: _Key, marker: object, last_event_id: str | None) -> int:
        """The seq the session object was loaded at: its marker, or (a session object this
        service did not load) the stored seq, if the object's last event is the stored last one.

        Raises:
            google.adk SessionNotFoundError: no such session.
            StaleSessionError: the object's last event is not the stored last one.
        """
        if isinstance(marker, str) and marker.startswith(_MARKER) and marker[len(_MARKER) :].isdigit():
            return int(marker[len(_MARKER) :])  # the write itself finds a missing session
        if _load(store, key) is None:
            raise AdkSessionNotFoundError(f"Session {key.session_id} not found.")
        last = store.last_seq(key.store_id)
        stored = [e for e in store.read(key.store_id, max(1, last), last) if e.type == "adk_event_recorded"]
        stored_last = stored[0].payload_dict()["adk_event_id"] if stored else None
        if stored_last != last_event_id:
            raise StaleSessionError(_STALE.format(id=key.session_id, expected="unknown", actual=last))
        return last

    # -- state streams --

    def _write(
        self, store: SessionStore, key: _Key, writes: Callable[[SessionStore], list[SessionWrite]]
    ) -> list[AppendResult]:
        """``store.write_sessions(writes(store))``, once more if the user's state stream this
        service knew was erased meanwhile (by another process): then to the user's new stream.

        Raises:
            google.adk SessionNotFoundError: the session does not exist (or was erased).
        """
        for attempt in (1, 2):
            try:
                return store.write_sessions(writes(store))
            except SessionNotFoundError as e:
                if e.session_id == key.store_id:
                    raise AdkSessionNotFoundError(f"Session {key.session_id} not found.") from e
                if attempt == 2 or not isinstance(e, SessionErasedError):
                    raise
                self._forget_user_stream(key.app_name, key.user_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _user_stream(self, store: SessionStore, app_name: str, user_id: str) -> str:
        """The id of the user's current state stream: the first generation not erased."""
        generation = self._generations.get((app_name, user_id))
        if generation is None:
            generation = 0
            while store.erasure(user_stream_id(app_name, user_id, generation)) is not None:
                generation += 1
        _remember(self._generations, (app_name, user_id), generation)
        return user_stream_id(app_name, user_id, generation)

    def _forget_user_stream(self, app_name: str, user_id: str) -> None:
        """Drop what this service knew of the user's state stream (it was erased)."""
        generation = self._generations.pop((app_name, user_id), None)
        if generation is not None:
            self._folded.pop(user_stream_id(app_name, user_id, generation), None)

    def _user_scope(self, store: SessionStore, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state, from the user's current stream (another process may have
        erased the one this service read last)."""
        try:
            return self._scope(store, self._user_stream(store, app_name, user_id), erased_ok=False)
        except SessionErasedError:
            self._forget_user_stream(app_name, user_id)
            return self._scope(store, self._user_stream(store, app_name, user_id))

    def _scope(self, store: SessionStore, stream_id: str, *, erased_ok: bool = True) -> dict[str, Any]:
        """An app or user state stream folded (a copy); {} when there is none (or, ``erased_ok``,
        when it was erased: otherwise that raises ``SessionErasedError``).

        Only the events after the ones folded earlier are read: a stream is append-only.
        """
        seq, state = self._folded.get(stream_id, (0, {}))
        try:
            new = store.read(stream_id, seq + 1)
        except SessionNotFoundError as e:
            self._folded.pop(stream_id, None)
            if isinstance(e, SessionErasedError) and not erased_ok:
                raise
            return {}
        if new:
            state = {**state, **fold_scope(new)}
            if new[-1].seq > self._folded.get(stream_id, (0, {}))[0]:  # a concurrent read may be ahead
                _remember(self._folded, stream_id, (new[-1].seq, state))
        elif stream_id in self._folded:
            self._folded.move_to_end(stream_id)
        return copy.deepcopy(state)

    def _ensure_streams(self, store: SessionStore, key: _Key) -> None:
        """Create the app's and the user's state streams unless they exist."""
        streams = (
            (app_stream_id(key.app_name), {KIND: "app_state"}, None),
            (self._user_stream(store, key.app_name, key.user_id), {KIND: "user_state"}, key.user_id),
        )
        for stream, metadata, user in streams:
            if stream in self._streams:
                self._streams.move_to_end(stream)
                continue
            with contextlib.suppress(SessionExistsError):  # made earlier, or by another writer just now
                store.create_session(stream, metadata=metadata, tenant=key.app_name, user=user)
            _remember(self._streams, stream, None)

    def _scope_writes(
        self,
        store: SessionStore,
        key: _Key,
        app: dict[str, Any],
        user: dict[str, Any],
        adk_event_id: str | None,
        recorded_id: str | None,
    ) -> list[SessionWrite]:
        """Appends of ``app:`` and ``user:`` changes to their streams (after any seq: they commute
        with other sessions' changes key by key, in commit order)."""
        writes = []
        for scope, delta in (("app", app), ("user", user)):
            if not delta:
                continue
            if scope == "app":
                stream = app_stream_id(key.app_name)
            else:
                stream = self._user_stream(store, key.app_name, key.user_id)
            change = AdkStateChanged(
                scope=scope,  # type: ignore[arg-type]
                delta=delta,
                adk_session_id=key.session_id,
                adk_event_id=adk_event_id,
            )
            if recorded_id is not None:  # derived: a re-delivered event changes state once
                change = change.model_copy(
                    update={"event_id": uuid.uuid5(_EVENT_IDS, f"{scope}\n{recorded_id}")}
                )
            writes.append(SessionWrite(stream, [change], expected_seq=ANY))
        return writes

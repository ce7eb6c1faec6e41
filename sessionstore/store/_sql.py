"""The store's implementation, shared by SQLite and PostgreSQL.

Reads, blobs and snapshots go through SQLAlchemy Core; event writes (append, create_session)
run their few fixed statements on the pooled driver connection (``_driver.py``), because they
are the hot path. Dialect differences are confined to what a subclass sets: ``driver_sql``
(placeholder style and the statement that serializes writers), the dialect's ``insert`` (for
ON CONFLICT DO NOTHING), and engine configuration (in the backend modules). Driver errors,
raw or wrapped by SQLAlchemy, are translated here and nowhere else (``translate_errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import uuid4

from sqlalchemy import Connection, Engine, Select, Table, delete, func, select, type_coerce
from sqlalchemy import exc as sa_exc
from sqlalchemy.types import NullType
from sqlalchemy.util.concurrency import await_only

from .._telemetry import Attribute, span
from ..errors import (
    AccessDeniedError,
    AppendOnlyViolation,
    ConcurrencyError,
    DatabaseError,
    DataCorruptionError,
    DuplicateEventError,
    EncryptionKeyError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    SessionErasedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    ValidationError,
)
from ..events import Event, parse_event
from ..events._base import encode_event, json_problem, nested_deeper_than
from ._codec import compress_blob, decompress_blob, pack_payload, pack_snapshot, unpack_snapshot
from ._contract import (
    ALTERED_DEPTH,
    ANY,
    AppendResult,
    BlobRef,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    SessionWrite,
    SnapshotRecord,
    chain_problem,
    check_int,
    check_lookup,
    check_session_id,
    loaded_payload,
)
from ._counts import RIDE_ALONG_COUNTS, CountBacklog, checked_counts, counts_later, fill_counts, store_counts
from ._crypto import (
    SNAPSHOT_MAGIC,
    KeyProvider,
    SessionCipher,
    check_key_provider,
    is_sealed_payload,
    new_data_key,
)
from ._driver import DriverSQL, DriverTransaction, Prepared, chain_rows, recorded_events, stored_int
from ._erasure import ErasureMixin, erased_error
from ._hashing import SessionIdentity, as_utc
from ._observed import STORE_LOG, log_append, observe_append, observe_read
from ._owners import Owner, check_owner, inherit_owner
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._schema import (
    APPEND_ONLY_ERRCODE,
    APPEND_ONLY_MESSAGE,
    DEFAULT_TABLES,
    ERASED_ERRCODE,
    ERASED_MESSAGE,
    StoreTables,
)
from ._tokens import TokenCounter, check_token_counter

if TYPE_CHECKING:
    from ._async import AsyncSessionStore

__all__ = ["SqlSessionStore", "translate_errors"]

_T = TypeVar("_T")
#: Unwrapped session keys kept per store (a KMS unwrap is a network call).
_CIPHER_CACHE = 4096
#: Forks of forks deeper than this are a tampered cycle.
_MAX_LINEAGE = 10_000
#: A session's wrapped data key as ``session_keys`` holds it: (key_id, wrapped bytes).
_WrappedKey = tuple[str, bytes]


@dataclasses.dataclass(frozen=True)
class _Sealing:
    """The key a batch was sealed with (None: the session is plaintext)."""

    wrapped: bytes | None
    cipher: SessionCipher | None = None

    def seal(self, prepared: Sequence[Prepared]) -> list[Prepared]:
        if self.cipher is None:
            return list(prepared)
        cipher = self.cipher
        # Sealed text is stored as it is: ciphertext does not compress, and compressing before
        # sealing would let the stored length tell how repetitive the plaintext is.
        return [
            dataclasses.replace(p, payload=cipher.seal_payload(p.event_id, p.payload), packed=None)
            for p in prepared
        ]


_PLAINTEXT = _Sealing(None)


@dataclasses.dataclass(frozen=True)
class _CheckedWrite:
    """One write of ``write_sessions``, validated and sealed before the transaction."""

    write: SessionWrite
    meta_json: str
    prepared: list[Prepared]
    sealing: _Sealing
    key: _WrappedKey | None
    owner: Owner


# --- error translation ---------------------------------------------------------------------


_SQLITE_FAILED = re.compile(r"(?:UNIQUE|PRIMARY KEY|NOT NULL) constraint failed: (.+)$")


def _constraint_of(orig: BaseException, tables: StoreTables) -> str | None:
    diag = getattr(orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name:
        return str(name)
    match = _SQLITE_FAILED.search(str(orig))
    if match:
        return tables.constraint_names_by_columns().get(match.group(1), match.group(1))
    check = re.search(r"CHECK constraint failed: (\w+)", str(orig))
    return check.group(1) if check else None


def _driver_errors() -> tuple[type[Exception], ...]:
    """The drivers' PEP 249 base classes: errors raised on the driver connection directly.

    psycopg is an optional extra, imported only when a PostgreSQL store is opened: until it is
    in ``sys.modules`` none of its errors can be raised, so it is looked up, never imported.
    """
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


def _pep249_kind(orig: BaseException) -> set[str]:
    """PEP 249 class names in the error's ancestry (the same names for every driver)."""
    return {cls.__name__ for cls in type(orig).__mro__}


#: PostgreSQL SQLSTATEs worth retrying besides class 08 (connection exception): the server
#: shutting down or starting up, and the transaction conflicts a retry resolves.
_TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown (pg_terminate_backend, a fast shutdown)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, shutting down)
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
    }
)


def _is_transient(orig: BaseException) -> bool:
    """True for a PostgreSQL failure a retry can cure: a lost connection or a restarting server.

    A psycopg error without a SQLSTATE was raised by the client library itself: the connection
    broke or could not be made. SQLite's operational errors are not transient: a lock was already
    waited for (busy_timeout), and disk or file errors do not heal by themselves.
    """
    psycopg = sys.modules.get("psycopg")  # not imported: not a psycopg error
    if psycopg is None or not isinstance(orig, psycopg.Error):
        return False
    sqlstate = orig.sqlstate
    if sqlstate is None:
        return True
    return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


def _translate(error: BaseException, tables: StoreTables = DEFAULT_TABLES) -> SessionStoreError:
    """One driver error (raw, or wrapped by SQLAlchemy) as the sessionstore error it means
    (constraint names as in ``tables``)."""
    orig = getattr(error, "orig", None) or error
    message = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    kinds = _pep249_kind(orig)
    if getattr(orig, "sqlstate", None) == APPEND_ONLY_ERRCODE or APPEND_ONLY_MESSAGE in message:
        return AppendOnlyViolation(message)
    if getattr(orig, "sqlstate", None) == ERASED_ERRCODE or ERASED_MESSAGE in message:
        return _erased_refusal(message)
    if "IntegrityError" in kinds:
        return IntegrityError(message, constraint=_constraint_of(orig, tables))
    if "DataError" in kinds and ("NUL (0x00)" in message or getattr(orig, "sqlstate", None) == "22021"):
        # PostgreSQL text cannot hold a NUL: only a lookup sends one (a session id or cursor a
        # caller asked for; stored text is JSON-escaped or checked first). No row can match it.
        return ValidationError("a lookup with a NUL character, which PostgreSQL text cannot hold")
    if getattr(orig, "sqlstate", None) == "42501":  # insufficient_privilege, row-level security too
        return AccessDeniedError(message)
    if "no such table" in message or "no such column" in message:
        return ProgrammingError(message)
    if kinds & {"OperationalError", "InterfaceError"}:
        return OperationalError(message, transient=_is_transient(orig))
    if "ProgrammingError" in kinds:
        return ProgrammingError(message)
    return DatabaseError(message)


#: PostgreSQL's refusal names the session and its receipt (migration 0008's trigger function).
_ERASED_DETAIL = re.compile(
    re.escape(ERASED_MESSAGE) + r": ([A-Za-z0-9][A-Za-z0-9._:-]{0,63}) \((shredded|purged) at ([^)]+)\)"
)


def _erased_refusal(message: str) -> SessionErasedError:
    """The database refused a row naming an erased session (revision 0008's triggers).

    PostgreSQL's message names the session and its receipt; SQLite's trigger can raise a literal
    only, so its error names no session (``session_id`` is ``""``): the store, which knows
    which session it wrote, reads the receipt and raises the full error (``_retrying``).
    """
    found = _ERASED_DETAIL.search(message)
    if found is not None:
        return SessionErasedError(found.group(1), method=found.group(2), erased_at=found.group(3))
    error = SessionErasedError("", method="unknown", erased_at="unknown")
    error.args = (message,)
    return error


@contextlib.contextmanager
def translate_errors(tables: StoreTables = DEFAULT_TABLES) -> Iterator[None]:
    """Re-raise SQLAlchemy / driver errors as sessionstore errors (``raise ... from e``).

    A lone surrogate in a query parameter (a session id or cursor a caller looks up; stored
    values are refused before they reach SQL) cannot be encoded by the driver: a ValidationError;
    so is a NUL, which PostgreSQL text cannot hold (``_translate``).
    """
    try:
        yield
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end]
        msg = f"a lookup with text that is not valid Unicode (a lone surrogate): {bad!r}"
        raise ValidationError(msg) from e
    except Exception as e:
        if isinstance(e, (sa_exc.DBAPIError, *_driver_errors())):
            raise _translate(e, tables) from e
        raise


@contextlib.contextmanager
def naming_the_file(engine: Engine) -> Iterator[None]:
    """A ``DatabaseError`` or ``OperationalError`` raised while opening a SQLite file names the file:
    SQLite's own messages (``file is not a database``, ``unable to open database file``) do not,
    so whether ``--db``, ``$SESSIONSTORE_URL`` or the default was at fault went unsaid."""
    try:
        yield
    except (DatabaseError, OperationalError) as e:
        path = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
        if not path or path == ":memory:" or type(e) not in (DatabaseError, OperationalError):
            raise  # a server names itself; a subclass (StoreUnavailableError ...) says more already
        if isinstance(e, OperationalError):
            raise OperationalError(f"{path}: {e}", transient=e.transient) from e
        raise DatabaseError(f"{path}: {e}") from e


class _AwaitedLock:
    """An ``asyncio.Lock`` entered from a greenlet of the async store (awaited, not blocking)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    def __enter__(self) -> None:
        await_only(self._lock.acquire())

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def _await_sleep(seconds: float) -> None:
    """Pause without blocking the event loop (inside a greenlet the async store spawned)."""
    await_only(asyncio.sleep(seconds))


def _batches(events: Iterable[_T], size: int) -> Iterator[list[_T]]:
    """``events`` in lists of up to ``size``, drawn one list at a time."""
    it = iter(events)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _check_read(session_id: str, events: Sequence[RecordedEvent]) -> None:
    """``SqlSessionStore.check_reads``: each event matches its hash and links to the one before."""
    problem = chain_problem(events, None)
    if problem is not None:
        seq, reason = problem
        msg = (
            f"session {session_id!r}, seq {seq}: the event read does not match its hash ({reason}); "
            f"`sessionstore verify {session_id}` checks the whole chain"
        )
        raise DataCorruptionError(msg, session_id=session_id, seq=seq)


def _check_event_sequence(events: object) -> None:
    if isinstance(events, Event | dict | str | bytes) or not isinstance(events, Iterable):
        kind = type(events).__name__
        msg = f"events must be a sequence of events (wrap a single event in a list), not {kind}"
        raise ValidationError(msg)


def _check_writes(writes: object) -> list[SessionWrite]:
    """``writes`` as a list, if it is a sequence of ``SessionWrite`` (a lone write, a dict or a
    generator of something else is refused before any of it is written)."""
    if isinstance(writes, SessionWrite | str | bytes | dict) or not isinstance(writes, Iterable):
        kind = type(writes).__name__
        msg = f"writes must be a sequence of SessionWrite (wrap a single write in a list), not {kind}"
        raise ValidationError(msg, field="writes")
    listed = list(writes)
    for index, write in enumerate(listed):
        if not isinstance(write, SessionWrite):
            msg = f"writes[{index}] must be a SessionWrite, not {type(write).__name__}"
            raise ValidationError(msg, field="writes")
    return listed


def _check_projection_version(version: object) -> int:
    """A snapshot's projection version: an int of the column's 32 bits."""
    value = check_int("projection_version", version)
    if not -(2**31) <= value <= 2**31 - 1:
        msg = f"projection_version must be from -2**31 to 2**31 - 1, not {value}"
        raise ValidationError(msg, field="projection_version")
    return value


def _check_snapshot(snapshot: object) -> None:
    """Refuse what ``put_snapshot`` cannot store, before anything is written."""
    if not isinstance(snapshot, SnapshotRecord):
        msg = f"snapshot must be a SnapshotRecord, not {type(snapshot).__name__}"
        raise ValidationError(msg, field="snapshot")
    check_session_id(snapshot.session_id)
    for name in ("projection", "tokenizer"):  # VARCHAR(64) columns
        if len(check_lookup(name, getattr(snapshot, name))) > 64:
            raise ValidationError(f"a snapshot's {name} must be at most 64 characters", field=name)
    _check_projection_version(snapshot.projection_version)
    check_int("seq", snapshot.seq, minimum=1)
    if not isinstance(snapshot.state, bytes):
        msg = f"a snapshot's state must be bytes, not {type(snapshot.state).__name__}"
        raise ValidationError(msg, field="state")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _metadata_json(value: dict[str, Any] | None) -> str:
    """The stored text of a session's metadata: a JSON object that reads back equal."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        msg = f"session metadata must be a JSON object (a dict), not {type(value).__name__}"
        raise ValidationError(msg, field="metadata")
    problem = json_problem(value)
    if problem is not None:
        raise ValidationError(f"session metadata: {problem}", field="metadata")
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# --- the store -----------------------------------------------------------------------------


class SqlSessionStore(ErasureMixin, SessionStore):
    """``SessionStore`` over a SQLAlchemy engine whose schema is at the current revision.

    Use ``sessionstore.open_store`` rather than constructing this directly. With ``encryption``
    (a ``KeyProvider``), every session it creates is encrypted (``_crypto.py``).
    """

    #: The dialect's ``insert`` construct (it has ``on_conflict_do_nothing``).
    dialect_insert: ClassVar[Callable[..., Any]]
    #: The append path's statements in the driver's own SQL and parameter style.
    driver_sql: ClassVar[DriverSQL]
    #: The ``AsyncSessionStore`` that runs this store's calls in greenlets (``in_greenlet``).
    async_store: AsyncSessionStore | None = None

    def __init__(
        self,
        engine: Engine,
        *,
        token_counter: TokenCounter | None = None,
        single_connection: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        tables: StoreTables = DEFAULT_TABLES,
        owns_engine: bool = True,
        in_greenlet: bool = False,
        encryption: KeyProvider | None = None,
        defer_token_counts: bool = True,
    ) -> None:
        if token_counter is not None:
            check_token_counter(token_counter)
        self.encryption = None if encryption is None else check_key_provider(encryption)
        self._ciphers: dict[tuple[str, bytes], SessionCipher] = {}
        self.engine = engine
        # A host's engine (``open_store(engine=...)``) is the host's to dispose of, not the store's.
        self._owns_engine = owns_engine
        #: Where this store's tables are (prefix, schema); every statement takes its names from it.
        self.tables = tables
        self._write_sql = self.driver_sql.for_tables(tables)
        self.token_counter = token_counter
        #: Count an event's tokens when a reader first needs them, not inside the append (``_counts``).
        self.defer_token_counts = defer_token_counts
        self._counts = CountBacklog()
        self.retry = retry
        #: True when ``engine`` is an ``AsyncEngine``'s ``sync_engine``: ``AsyncSessionStore``
        #: runs every call of this store in a greenlet on the event loop, where each driver
        #: call is awaited (SQLAlchemy's asyncio bridge). Code here must then never block the
        #: thread: pauses go through ``self._sleep``, and no ``threading`` waits.
        self.in_greenlet = in_greenlet
        self._sleep: Callable[[float], None] = _await_sleep if in_greenlet else time.sleep
        if in_greenlet:  # the async driver adapters' executemany returns no rows: one INSERT per event
            self._write_sql = dataclasses.replace(self._write_sql, many_returning=False)
        # In a greenlet, this process's event writers take turns before they open a write
        # transaction. The database serializes them anyway (BEGIN IMMEDIATE, LOCK TABLE), but a
        # task holding the database's write lock resumes only when the loop gets to it: with
        # hundreds of tasks queued at the server, every lock holder would wait behind all of
        # them at each round trip, and the lock would be held that long (bench/async_append.py).
        self._writer_turn: contextlib.AbstractContextManager[Any] = (
            _AwaitedLock() if in_greenlet else contextlib.nullcontext()
        )
        # One shared connection (SQLite :memory:) must not interleave transactions. In a
        # greenlet the async store serializes its calls with an asyncio lock instead.
        self._lock: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if single_connection and not in_greenlet else contextlib.nullcontext()
        )

    def _unique(self, *columns: str) -> str:
        """The name of the events table's unique constraint over ``columns``."""
        return f"uq_{self.tables.events.name}_{'_'.join(columns)}"

    def _retrying(self, what: str, operation: Callable[[], _T], session_id: str | None = None) -> _T:
        """``operation()`` (one whole transaction) retried per the store's retry policy.

        A refusal of the database's erasure guard that names no session (SQLite's) is raised
        again as the full ``SessionErasedError`` of ``session_id``, from its receipt.
        """
        try:
            return self.retry.run(operation, what=what, session_id=session_id, sleep=self._sleep)
        except SessionErasedError as e:
            if e.session_id or session_id is None:
                raise
            receipt = self.erasure(session_id)
            if receipt is None:  # pragma: no cover - the guard refused only because a receipt exists
                raise
            erased_at = receipt.erased_at.isoformat()
            raise SessionErasedError(session_id, method=receipt.method, erased_at=erased_at) from e

    @property
    def db_system(self) -> str:
        """The database's name in telemetry (OpenTelemetry's ``db.system.name``)."""
        return str(self.engine.dialect.name)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """A SQLAlchemy write transaction for rows outside the event log (blobs, snapshots)."""
        with (
            self._lock,
            translate_errors(self.tables),
            self.engine.connect().execution_options(sessionstore_write=True) as conn,
        ):
            with conn.begin():
                yield conn
                self._check_file(conn.connection.info)
            self._check_file(conn.connection.info)

    def _check_file(self, info: Mapping[str, Any]) -> None:
        """Raise if the database this connection writes to is no longer the one opened.

        A hook for file-based backends (SQLite): a no-op where the server owns the storage.
        """

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with (
            self._lock,
            translate_errors(self.tables),
            self.engine.connect().execution_options(sessionstore_read=True) as conn,
            conn.begin(),
        ):
            yield conn

    # -- encryption keys (docs/storage.md "Encryption at rest") --

    def _key_row(self, conn: Connection, session_id: str) -> _WrappedKey | None:
        session_keys = self.tables.session_keys
        row = conn.execute(
            select(session_keys.c.key_id, session_keys.c.wrapped_key).where(
                session_keys.c.session_id == session_id
            )
        ).first()
        return None if row is None else (str(row.key_id), bytes(row.wrapped_key))

    def _cipher(self, session_id: str, key: _WrappedKey) -> SessionCipher:
        """The session's cipher, its data key unwrapped by the key provider (cached).

        Raises:
            EncryptionKeyError: this store has no key provider, or it cannot unwrap the key.
        """
        if self.encryption is None:
            msg = (
                f"session {session_id!r} is encrypted: open the store with its key provider "
                "(open_store(..., encryption=...), or SESSIONSTORE_MASTER_KEY for the command line)"
            )
            raise EncryptionKeyError(msg)
        cached = self._ciphers.get((session_id, key[1]))
        if cached is not None:
            return cached
        data_key = self.encryption.unwrap(key[1], key_id=key[0], context=session_id)
        cipher = SessionCipher(session_id, data_key)
        if len(self._ciphers) >= _CIPHER_CACHE:
            self._ciphers.clear()
        self._ciphers[(session_id, key[1])] = cipher
        return cipher

    def _new_key(self, session_id: str) -> tuple[_WrappedKey, _Sealing]:
        """A fresh data key for a new session: (its row's values, the sealing it gives)."""
        assert self.encryption is not None
        data_key = new_data_key()
        wrapped = self.encryption.wrap(data_key, context=session_id)
        cipher = SessionCipher(session_id, data_key)
        self._ciphers[(session_id, wrapped)] = cipher
        return (self.encryption.key_id, wrapped), _Sealing(wrapped, cipher)

    def _sealing(self, session_id: str) -> _Sealing:
        """How to seal a batch for an existing session, read before the write transaction
        (which checks the key is still there: ``_append_in``)."""
        if self.encryption is None:
            return _PLAINTEXT

        def attempt() -> _WrappedKey | None:
            with self._read() as conn:
                key = self._key_row(conn, session_id)
                if key is None:
                    self._require_session(conn, session_id)  # erased, or never created: raise
                    erased = erased_error(conn, self.tables, session_id)
                    if erased is not None:
                        raise erased
                return key

        key = self._retrying("read key", attempt)
        if key is None:
            return _PLAINTEXT  # created before encryption was turned on: it stays plaintext
        return _Sealing(key[1], self._cipher(session_id, key))

    def _opened(self, conn: Connection, rows: list[RecordedEvent], *, strict: bool) -> list[RecordedEvent]:
        """``rows`` with sealed payloads decrypted.

        An erased session's rows raise SessionErasedError (``strict``), or are marked ``erased``
        and keep their sealed text (``read_all``: a subscriber must not stop at them).
        """
        sealed = {r.session_id for r in rows if _is_sealed(r)}
        if not sealed:
            return rows
        ciphers: dict[str, SessionCipher | None] = {}
        for sid in sealed:
            key = self._key_row(conn, sid)
            if key is not None:
                ciphers[sid] = self._cipher(sid, key)
                continue
            if strict:
                erased = erased_error(conn, self.tables, sid)
                if erased is not None:
                    raise erased
                msg = (
                    f"session {sid!r}: its events are encrypted but its key is gone, "
                    "and no erasure is recorded"
                )
                raise DataCorruptionError(msg, session_id=sid)
            ciphers[sid] = None
        opened = []
        for r in rows:
            cipher = ciphers.get(r.session_id)
            if not _is_sealed(r):
                opened.append(r)
            elif cipher is None:
                opened.append(dataclasses.replace(r, erased=True))
            else:
                plain = cipher.open_payload(r.event_id, r.payload)
                opened.append(dataclasses.replace(r, payload=plain, stored_payload=r.payload))
        return opened

    def _refuse_plaintext(self, conn: Connection, session_id: str, what: str) -> None:
        """Raise ``EncryptionKeyError`` when the session is encrypted: ``what`` (a snapshot, a
        blob) would be written in the clear beside its sealed events, and read back as its own."""
        if self._key_row(conn, session_id) is not None:
            msg = (
                f"session {session_id!r} is encrypted: {what} of it is written sealed, so open the "
                "store with its key provider (open_store(..., encryption=...), or "
                "SESSIONSTORE_MASTER_KEY for the command line)"
            )
            raise EncryptionKeyError(msg)

    def _lineage(self, conn: Connection, session_id: str) -> list[str]:
        """The session and its ancestors, nearest first."""
        sessions = self.tables.sessions
        found = [session_id]
        while len(found) < _MAX_LINEAGE:
            row = conn.execute(select(sessions.c.parent_session_id).where(sessions.c.id == found[-1])).first()
            if row is None or row.parent_session_id is None or row.parent_session_id in found:
                break
            found.append(str(row.parent_session_id))
        return found

    # -- preparation (outside any transaction: validation and tokenizing hold no lock) --

    def _prepare(
        self, batch: Iterable[Event | dict[str, Any]], start: int = 0, *, json_checked: bool = False
    ) -> list[Prepared]:
        """The batch's events checked, encoded, counted and packed; errors name each event by its
        index in the whole write (``start``: the index of the batch's first event).
        ``json_checked``: see ``SessionStore.write_streamed``."""
        _check_event_sequence(batch)
        prepared: list[Prepared] = []
        seen: set[str] = set()
        counter = self.token_counter
        defer = counter is not None and self.defer_token_counts
        for index, raw in enumerate(batch, start):
            event = parse_event(raw, index=index, check_json=not json_checked)
            event_id = str(event.event_id)
            if event_id in seen:
                msg = f"event #{index}: event_id {event_id} appears twice in the batch"
                raise ValidationError(msg, index=index, event_type=event.type, field="event_id")
            seen.add(event_id)
            payload = encode_event(event, index=index)
            later = defer and counts_later(event)
            prepared.append(
                Prepared(
                    event_id,
                    event.type,
                    type(event).SCHEMA_VERSION,
                    payload,
                    counter.count(event) if counter is not None and not defer else None,
                    pack_payload(payload),
                    later,
                )
            )
        return prepared

    # -- sessions --

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
        """See ``SessionStore.create_session``."""
        owner = check_owner(tenant, user, external_id)
        sid = check_session_id(session_id if session_id is not None else str(uuid4()))
        if parent_session_id is not None:
            check_session_id(parent_session_id)
        if fork_seq is not None and (parent_session_id is None or check_int("fork_seq", fork_seq) < 0):
            msg = "fork_seq needs a parent_session_id and must be >= 0"
            raise ValidationError(msg, field="fork_seq")
        meta_json = _metadata_json(metadata)
        prepared = self._prepare(events)
        return self._create_prepared(sid, parent_session_id, fork_seq, meta_json, prepared, owner)

    def _create_prepared(
        self,
        sid: str,
        parent_session_id: str | None,
        fork_seq: int | None,
        meta_json: str,
        prepared: Sequence[Prepared],
        owner: Owner,
    ) -> SessionInfo:
        """``create_session`` after its input was checked and prepared: retried per the policy."""
        # Made once: a retry writes the same key and the same sealed payloads.
        key: _WrappedKey | None = None
        if self.encryption is not None:
            key, sealing = self._new_key(sid)
            prepared = sealing.seal(prepared)
        failed_before = False

        def attempt() -> SessionInfo:
            nonlocal failed_before
            try:
                return self._create_once(sid, parent_session_id, fork_seq, meta_json, prepared, owner, key)
            except SessionExistsError:
                # A retry after a lost acknowledgement finds its own session: that is success.
                if failed_before:
                    created = self._created_before(
                        sid, parent_session_id, fork_seq, meta_json, prepared, owner
                    )
                    if created is not None:
                        return created
                raise
            except OperationalError:
                failed_before = True
                raise

        if not prepared:
            return self._retrying("create_session", attempt, sid)
        with observe_append(self.db_system, "create_session", sid, prepared, None) as done:
            info = self._retrying("create_session", attempt, sid)
            done(AppendResult(sid, tuple(range(1, len(prepared) + 1)), (), len(prepared)))
        return info

    def _create_once(
        self,
        sid: str,
        parent_session_id: str | None,
        fork_seq: int | None,
        meta_json: str,
        prepared: Sequence[Prepared],
        owner: Owner,
        key: _WrappedKey | None,
    ) -> SessionInfo:
        """One try of ``create_session``: one write transaction."""
        now = _utcnow()
        try:
            with self._lock, self._driver_transaction() as txn:
                _, _, identity = self._create_in(
                    txn, sid, parent_session_id, fork_seq, meta_json, prepared, now, owner, key
                )
        except IntegrityError as e:
            if e.constraint == f"pk_{self.tables.sessions.name}":
                # A row this connection cannot see holds the id (another tenant's, under
                # row-level security): the id is taken all the same.
                raise SessionExistsError(sid) from e
            raise
        return _info_of(identity)

    def _create_in(
        self,
        txn: DriverTransaction,
        sid: str,
        parent_session_id: str | None,
        fork_seq: int | None,
        meta_json: str,
        prepared: Sequence[Prepared],
        now: datetime,
        owner: Owner,
        key: _WrappedKey | None,
    ) -> tuple[tuple[int, ...], tuple[int, ...], SessionIdentity]:
        """Create a session (and its first events) inside ``txn``: the (seqs, positions) written
        and the identity it was created with (its owner completed from its parent).

        ``key``: an encrypted session's wrapped data key (``prepared`` is sealed with it).
        """
        if txn.last_seq(sid) is not None or txn.erased(sid) is not None:
            raise SessionExistsError(sid)  # an erased session's id is not reused
        parent_identity = None
        if parent_session_id is not None:
            parent = txn.last_seq(parent_session_id)
            parent_identity = txn.identity(parent_session_id)
            if parent is None or parent_identity is None:
                raise txn.missing(parent_session_id)
            erased = txn.erased(parent_session_id)
            if erased is not None:  # shredded: its row stays, its log cannot be read
                raise erased
            # A fork of a fork counts seqs through its parent's shared prefix too.
            parent_last = parent + txn.fork_seq(parent_session_id)
            if fork_seq is not None and fork_seq > parent_last:
                msg = f"fork_seq {fork_seq} is beyond the parent's last seq {parent_last}"
                raise ValidationError(msg, field="fork_seq")
        owner = inherit_owner(sid, owner, parent_identity)
        if owner.tenant is not None and owner.user is not None and owner.external_id is not None:
            # Writers are serialized, so this check decides; the unique index backs it up.
            taken = txn.owned_session(owner.tenant, owner.user, owner.external_id)
            if taken is not None:
                raise SessionExistsError(taken, key=(owner.tenant, owner.user, owner.external_id))
        identity = SessionIdentity(
            sid,
            parent_session_id,
            fork_seq,
            now,
            json.loads(meta_json),
            owner.tenant,
            owner.user,
            owner.external_id,
        )
        txn.insert_session(identity, meta_json)
        if key is not None:
            txn.insert_key(sid, key[0], key[1], now)
        if not prepared:
            return (), (), identity
        if txn.stored_result(sid, prepared) is not None:  # pragma: no cover - the session is new
            raise DuplicateEventError(prepared[0].event_id, "already stored")
        seqs, rows = chain_rows(sid, 0, txn.genesis(identity), prepared, now, txn.timestamp)
        return seqs, txn.insert(rows), identity

    def write_sessions(self, writes: Sequence[SessionWrite]) -> list[AppendResult]:
        """See ``SessionStore.write_sessions``."""
        checked: list[_CheckedWrite] = []
        batch_keys: dict[str, _Sealing] = {}  # sessions this batch creates: appends use their keys
        for write in _check_writes(writes):
            one = self._check_write(write, batch_keys)
            if write.create:
                batch_keys[write.session_id] = one.sealing
            checked.append(one)
        # Prepared once, outside the transaction: a retry writes the very same event ids.
        attributes: dict[str, Attribute] = {
            "db.system.name": self.db_system,
            "sessionstore.sessions": len(checked),
            "sessionstore.event_count": sum(len(one.prepared) for one in checked),
        }
        with span("sessionstore.write_sessions", attributes, client=True):
            results = self._retrying("write_sessions", lambda: self._write_sessions_settled(checked))
        for one, result in zip(checked, results, strict=True):
            write = one.write
            operation, expected = ("create_session", None) if write.create else ("append", write.expected_seq)
            log_append(operation, write.session_id, one.prepared, result, expected)
        return results

    def write_streamed(
        self, writes: Sequence[SessionWrite], *, batch_size: int = 1000, json_checked: bool = False
    ) -> list[AppendResult]:
        """See ``SessionStore.write_streamed``."""
        check_int("batch_size", batch_size, minimum=1)
        checked: list[tuple[_CheckedWrite, Iterable[Event | dict[str, Any]]]] = []
        batch_keys: dict[str, _Sealing] = {}
        for write in _check_writes(writes):
            # Checked (and a new session's key made) up front; the events are not touched yet.
            _check_event_sequence(write.events)  # a lone event would be iterated as its fields
            one = self._check_write(dataclasses.replace(write, events=()), batch_keys)
            if write.create:
                batch_keys[write.session_id] = one.sealing
            checked.append((one, write.events))
        attributes: dict[str, Attribute] = {
            "db.system.name": self.db_system,
            "sessionstore.sessions": len(checked),
        }
        with span("sessionstore.write_streamed", attributes, client=True):
            now = _utcnow()
            with self._lock, self._driver_transaction() as txn:
                return [
                    self._stream_in(txn, one, events, batch_size, now, json_checked)
                    for one, events in checked
                ]

    def _stream_in(
        self,
        txn: DriverTransaction,
        one: _CheckedWrite,
        events: Iterable[Event | dict[str, Any]],
        batch_size: int,
        now: datetime,
        json_checked: bool,
    ) -> AppendResult:
        """One write of ``write_streamed``: its events prepared and inserted a batch at a time."""
        write, sid = one.write, one.write.session_id
        seqs: list[int] = []
        positions: list[int] = []
        batches = _batches(events, batch_size)
        first = one.sealing.seal(self._prepare(next(batches, []), json_checked=json_checked))
        starts = itertools.count(len(first), batch_size)  # error messages index the whole write
        if write.create:
            created, at, _ = self._create_in(
                txn,
                sid,
                write.parent_session_id,
                write.fork_seq,
                one.meta_json,
                first,
                now,
                one.owner,
                one.key,
            )
            seqs.extend(created)
            positions.extend(at)
            last = created[-1] if created else 0
        else:
            last_stored = txn.last_seq(sid)
            if last_stored is None:
                raise txn.missing(sid)
            if write.expected_seq != ANY and write.expected_seq != last_stored:
                raise ConcurrencyError(sid, write.expected_seq, last_stored)  # streamed: never a replay
            last = last_stored
        rest = (
            one.sealing.seal(self._prepare(batch, next(starts), json_checked=json_checked))
            for batch in batches
        )
        for prepared in itertools.chain([first] if first and not write.create else [], rest):
            outcome = self._append_in(txn, sid, prepared, last, one.sealing)
            if isinstance(outcome, AppendResult):  # pragma: no cover - the head was checked above
                raise ConcurrencyError(sid, last, outcome.last_seq)
            seqs.extend(outcome[0])
            positions.extend(outcome[1])
            last = outcome[0][-1]
        return AppendResult(sid, tuple(seqs), tuple(positions), last)

    def _check_write(self, write: SessionWrite, batch_keys: Mapping[str, _Sealing]) -> _CheckedWrite:
        """Validate (and seal) one write up front."""
        check_session_id(write.session_id)
        owner = check_owner(write.tenant, write.user, write.external_id)
        if owner != Owner() and not write.create:
            msg = f"session {write.session_id}: tenant, user and external_id are given when it is created"
            raise ValidationError(msg, field="tenant")
        if write.create:
            if write.parent_session_id is not None:
                check_session_id(write.parent_session_id)
            fork_seq = write.fork_seq
            if fork_seq is not None and (
                write.parent_session_id is None or check_int("fork_seq", fork_seq) < 0
            ):
                msg = f"session {write.session_id}: fork_seq needs a parent_session_id and must be >= 0"
                raise ValidationError(msg, field="fork_seq")
        elif not (isinstance(write.expected_seq, str) and write.expected_seq == ANY):
            check_int("expected_seq", write.expected_seq, minimum=0)  # ANY, or a 64-bit seq
        meta_json, prepared = _metadata_json(write.metadata), self._prepare(write.events)
        key: _WrappedKey | None = None
        if write.create:
            sealing = _PLAINTEXT
            if self.encryption is not None:
                key, sealing = self._new_key(write.session_id)
        else:
            known = batch_keys.get(write.session_id)
            sealing = known if known is not None else self._sealing(write.session_id)
        return _CheckedWrite(write, meta_json, sealing.seal(prepared), sealing, key, owner)

    def _write_sessions_settled(self, checked: Sequence[_CheckedWrite]) -> list[AppendResult]:
        """One try of ``write_sessions``; when an id of an append is stored though its head matched
        (a re-delivery at the current revision), the transaction runs again with every append
        settled against the stored ids first, as ``append`` settles its own."""
        try:
            return self._write_sessions_once(checked)
        except IntegrityError as e:
            if e.constraint != self._unique("event_id"):
                raise
        return self._write_sessions_once(checked, settle=True)

    def _write_sessions_once(
        self, checked: Sequence[_CheckedWrite], *, settle: bool = False
    ) -> list[AppendResult]:
        """One try of ``write_sessions``: one write transaction for every session."""
        now = _utcnow()
        results: list[AppendResult] = []
        with self._lock, self._driver_transaction() as txn:
            for one in checked:
                write, meta_json, prepared, sealing = one.write, one.meta_json, one.prepared, one.sealing
                sid = write.session_id
                if write.create:
                    seqs, positions, _ = self._create_in(
                        txn,
                        sid,
                        write.parent_session_id,
                        write.fork_seq,
                        meta_json,
                        prepared,
                        now,
                        one.owner,
                        one.key,
                    )
                    results.append(AppendResult(sid, seqs, positions, seqs[-1] if seqs else 0))
                elif not prepared:
                    last = txn.last_seq(sid)
                    if last is None:
                        raise txn.missing(sid)
                    if write.expected_seq != ANY and write.expected_seq != last:
                        raise ConcurrencyError(sid, write.expected_seq, last)
                    results.append(AppendResult(sid, (), (), last))
                else:
                    outcome = self._append_in(txn, sid, prepared, write.expected_seq, sealing, settle=settle)
                    if isinstance(outcome, AppendResult):
                        results.append(outcome)
                    else:
                        seqs, positions = outcome
                        results.append(AppendResult(sid, seqs, positions, seqs[-1]))
        return results

    def _created_before(
        self,
        sid: str,
        parent_session_id: str | None,
        fork_seq: int | None,
        meta_json: str,
        prepared: Sequence[Prepared],
        owner: Owner,
    ) -> SessionInfo | None:
        """The stored session if it is exactly the one this call creates (its commit's reply was lost)."""
        info = self.get_session(sid)
        same = (info.parent_session_id, info.fork_seq, info.metadata) == (
            parent_session_id,
            fork_seq,
            json.loads(meta_json),
        )
        stored_owner = (info.tenant, info.user, info.external_id)
        asked = (owner.tenant, owner.user, owner.external_id)
        # An owner key left out may have been inherited from the parent.
        same = same and all(a is None or a == b for a, b in zip(asked, stored_owner, strict=True))
        if not same:
            return None
        with self._lock, self._driver_transaction() as txn:
            last = txn.last_seq(sid)
            stored = txn.stored_result(sid, prepared) if prepared else None
        if last is None:  # pragma: no cover - get_session found it, and sessions are never removed
            return None
        # Its events are exactly the batch, from seq 1 (nothing appended since, or it is not ours).
        wrote = stored.seqs if stored is not None else ()
        return info if wrote == tuple(range(1, last + 1)) else None

    def get_session(self, session_id: str) -> SessionInfo:
        """See ``SessionStore.get_session``."""
        check_lookup("session_id", session_id)
        sessions = self.tables.sessions

        def attempt() -> Any:
            with self._read() as conn:
                row = conn.execute(_select_sessions(sessions).where(sessions.c.id == session_id)).first()
                if row is None:
                    raise erased_error(conn, self.tables, session_id) or SessionNotFoundError(session_id)
                return row

        return _session_info(self._retrying("get_session", attempt, session_id))

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
        """See ``SessionStore.get_or_create_session``."""
        owner = check_owner(tenant, user, external_id)
        if None in (owner.tenant, owner.user, owner.external_id):
            msg = "get_or_create_session needs a tenant, a user and an external_id"
            raise ValidationError(msg, field="tenant" if owner.tenant is None else "user")
        # Checked whether or not the session exists: bad input is an error either way.
        sid = check_session_id(session_id if session_id is not None else str(uuid4()))
        meta_json = _metadata_json(metadata)
        prepared = self._prepare(events)
        found = self._owned_session(owner)
        if found is not None:
            return found, False
        try:
            created = self._create_prepared(sid, None, None, meta_json, prepared, owner)
        except (SessionExistsError, IntegrityError) as e:
            # Another writer created it first (its commit decided; the unique index holds it).
            owner_key = f"uq_{self.tables.sessions.name}_tenant_id_user_id_external_id"
            if isinstance(e, IntegrityError) and e.constraint != owner_key:
                raise
            found = self._owned_session(owner)
            if found is None:
                raise  # the session id is taken by a session with another key
            return found, False
        return created, True

    def _owned_session(self, owner: Owner) -> SessionInfo | None:
        sessions = self.tables.sessions
        query = _select_sessions(sessions).where(
            sessions.c.tenant_id == owner.tenant,
            sessions.c.user_id == owner.user,
            sessions.c.external_id == owner.external_id,
        )

        def attempt() -> Any:
            with self._read() as conn:
                return conn.execute(query).first()

        row = self._retrying("get_or_create_session", attempt)
        return None if row is None else _session_info(row)

    def list_sessions(
        self,
        *,
        limit: int = 100,
        after: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> list[SessionInfo]:
        """See ``SessionStore.list_sessions``."""
        sessions = self.tables.sessions
        owner = check_owner(tenant, user, None)
        if owner.user is not None and owner.tenant is None:
            msg = "list_sessions: a user needs a tenant (users are counted per tenant)"
            raise ValidationError(msg, field="tenant")
        query = _select_sessions(sessions).order_by(sessions.c.id).limit(check_int("limit", limit, minimum=0))
        if after is not None:
            query = query.where(sessions.c.id > check_lookup("after", after))
        if owner.tenant is not None:
            query = query.where(sessions.c.tenant_id == owner.tenant)
        if owner.user is not None:
            query = query.where(sessions.c.user_id == owner.user)

        def attempt() -> list[SessionInfo]:
            with self._read() as conn:
                return [_session_info(row) for row in conn.execute(query)]

        return self._retrying("list_sessions", attempt)

    # -- append --

    def append(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        expected_seq: ExpectedSeq,
    ) -> AppendResult:
        """See ``SessionStore.append``."""
        check_lookup("session_id", session_id)
        if not (isinstance(expected_seq, str) and expected_seq == ANY):
            check_int("expected_seq", expected_seq, minimum=0)  # ANY, or a 64-bit seq (not a bool)
        sealing = self._sealing(session_id)
        prepared = sealing.seal(self._prepare(events))
        with observe_append(self.db_system, "append", session_id, prepared, expected_seq) as done:
            # Prepared once: a retry writes the very same event ids, so it is idempotent.
            result = self._retrying(
                "append", lambda: self._append_once(session_id, prepared, expected_seq, sealing), session_id
            )
            done(result)
        return result

    def _append_once(
        self, session_id: str, prepared: Sequence[Prepared], expected_seq: ExpectedSeq, sealing: _Sealing
    ) -> AppendResult:
        """One try of ``append``."""
        if not prepared:
            # Nothing to write: a read answers it, without queueing behind (or blocking) writers.
            with self._read() as conn:
                head_seq = self._last_seq(conn, session_id)
                erased = erased_error(conn, self.tables, session_id)
                if erased is not None:
                    raise erased
            if expected_seq != ANY and expected_seq != head_seq:
                raise ConcurrencyError(session_id, expected_seq, head_seq)
            return AppendResult(session_id, (), (), head_seq)
        # Counts this process made of the session's earlier events ride along (no commit of their
        # own), a bounded number: a large backlog (a first read of an import) is not written
        # while this append holds the write lock. A failure to store them never fails the append.
        counts = self._counts.known(session_id, limit=RIDE_ALONG_COUNTS)
        try:
            with self._lock, self._driver_transaction() as txn:
                outcome = self._append_in(txn, session_id, prepared, expected_seq, sealing)
                stored = txn.try_store_counts(session_id, counts)
            if stored:  # in the table now (or stored before by another process): done with them
                self._counts.stored(session_id, counts)
            if not isinstance(outcome, tuple):
                return outcome  # an idempotent retry: the original result
            seqs, positions = outcome
            # Built only after COMMIT: what is returned was durably written.
            return AppendResult(session_id, seqs, positions, seqs[-1])
        except IntegrityError as e:
            if e.constraint != self._unique("event_id"):
                raise
        # An id of the batch is stored, though the head matched: settle it in a fresh transaction
        # (the failed one is gone; stored rows never change).
        with self._lock, self._driver_transaction() as txn:
            outcome = self._append_in(txn, session_id, prepared, expected_seq, sealing, settle=True)
        if not isinstance(outcome, AppendResult):  # pragma: no cover - the violation proves a stored id
            msg = "event id conflict that no stored row explains"
            raise DatabaseError(msg)
        return outcome

    def _append_in(
        self,
        txn: DriverTransaction,
        session_id: str,
        prepared: Sequence[Prepared],
        expected_seq: ExpectedSeq,
        sealing: _Sealing,
        *,
        settle: bool = False,
    ) -> AppendResult | tuple[tuple[int, ...], tuple[int, ...]]:
        """The append itself, inside one serialized write transaction on the driver connection.

        Returns the original result of a retry, or the (seqs, positions) it wrote.

        The idempotency lookup runs only when the batch may be a retry: with ANY, or when the
        head is not the expected one (a retry after a lost reply always sees a moved head).
        Otherwise ``UNIQUE(event_id)`` catches a reused id, and the caller runs the transaction
        again with ``settle``: the lookup first, whatever the head.
        """
        if expected_seq == ANY or settle:
            replay = txn.stored_result(session_id, prepared)
            if replay is not None:
                return replay
        # The key state is checked under the write lock: an erasure that committed since the
        # batch was sealed wins, and plaintext is never written into an encrypted session.
        head, stored_key, erased = txn.head_and_key_state(session_id)
        if head is None:
            raise txn.missing(session_id)
        if erased:
            raise txn.missing(session_id)
        if stored_key != sealing.wrapped:
            msg = (
                f"session {session_id!r} is encrypted: open the store with its key provider "
                "(open_store(..., encryption=...), or SESSIONSTORE_MASTER_KEY for the command line)"
            )
            raise EncryptionKeyError(msg)
        head_seq, head_hash = head
        if expected_seq != ANY and expected_seq != head_seq:
            replay = txn.stored_result(session_id, prepared)
            if replay is not None:
                return replay
            raise ConcurrencyError(session_id, expected_seq, head_seq)
        seqs, rows = chain_rows(session_id, head_seq, head_hash, prepared, _utcnow(), txn.timestamp)
        try:
            positions = txn.insert(rows)
        except _driver_errors() as e:
            error = _translate(e, self.tables)
            if isinstance(error, IntegrityError) and error.constraint == self._unique("session_id", "seq"):
                # A writer that bypassed the lock; the transaction is dead, the head moved on.
                raise ConcurrencyError(session_id, head_seq, head_seq + 1) from e
            raise error from e
        return seqs, positions

    @contextlib.contextmanager
    def _driver_transaction(self) -> Iterator[DriverTransaction]:
        """A serialized write transaction on the pooled driver connection (the append hot path).

        SQLAlchemy Core costs ~1 ms of CPU per append in statement building and caching;
        the driver runs the same three statements in a fraction of that.
        """
        with self._writer_turn, translate_errors(self.tables):
            raw = self._checkout_writer()
            try:
                cursor = raw.cursor()
                try:
                    cursor.execute(self._write_sql.begin_write)
                    txn = DriverTransaction(cursor, self._write_sql)
                    yield txn
                    txn.notify_if_written()
                    self._check_file(raw.info)
                    raw.commit()
                    self._check_file(raw.info)  # the file vanished during the commit: not kept
                except BaseException:
                    _rollback_or_discard(raw)
                    raise
                finally:
                    cursor.close()
            finally:
                self._release_writer(raw)

    def _checkout_writer(self) -> Any:
        """The driver connection of one write transaction, from the pool (``_release_writer``
        gives it back)."""
        return self.engine.raw_connection()

    def _release_writer(self, raw: Any) -> None:
        """Give back what ``_checkout_writer`` returned, after its transaction ended."""
        raw.close()

    def _last_seq(self, conn: Connection, session_id: str) -> int:
        events = self.tables.events
        row = conn.execute(
            select(events.c.seq)
            .where(events.c.session_id == session_id)
            .order_by(events.c.seq.desc())
            .limit(1)
        ).first()
        if row is not None:
            return stored_int(row.seq, "seq", session_id)
        self._require_session(conn, session_id)
        return 0

    def _require_session(self, conn: Connection, session_id: str) -> None:
        """Raise unless the session has a row (SessionErasedError when it was erased)."""
        sessions = self.tables.sessions
        if conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first() is None:
            raise erased_error(conn, self.tables, session_id) or SessionNotFoundError(session_id)

    # -- reads --

    def last_seq(self, session_id: str) -> int:
        """See ``SessionStore.last_seq``."""
        check_lookup("session_id", session_id)

        def attempt() -> int:
            with self._read() as conn:
                return self._last_seq(conn, session_id)

        return self._retrying("last_seq", attempt, session_id)

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        verify: bool = False,
    ) -> list[RecordedEvent]:
        """See ``SessionStore.read``."""
        check_lookup("session_id", session_id)
        check_int("from_seq", from_seq)
        if to_seq is not None:
            check_int("to_seq", to_seq)

        def attempt() -> tuple[list[RecordedEvent], list[_Uncounted]]:
            with self._read() as conn:
                found = self._session_events(conn, session_id, from_seq, to_seq)
                if not found:
                    self._require_session(conn, session_id)
                    # A shredded session without events still reads as erased.
                    erased = erased_error(conn, self.tables, session_id) if self.encryption else None
                    if erased is not None:
                        raise erased
                opened = self._opened(conn, found, strict=True)
                return opened, self._uncounted(conn, opened)

        with observe_read(
            self.db_system, "read", session_id=session_id, from_seq=from_seq, to_seq=to_seq
        ) as done:
            result, uncounted = self._retrying("read", attempt, session_id)
            self._count(uncounted)
            done(len(result))
        if verify:
            start = self.chain_start(session_id, result[0]) if from_seq <= 1 and result else None
            if from_seq <= 1 and result and start is None:
                msg = f"session {session_id!r}: the parent's event at its fork point is missing"
                raise DataCorruptionError(msg, session_id=session_id, seq=1)
            problem = chain_problem(result, start, from_seq=1 if start is not None else None)
            if problem is not None:
                seq, reason = problem
                msg = f"session {session_id!r}: integrity check failed at seq {seq}: {reason}"
                raise DataCorruptionError(msg, session_id=session_id, seq=seq)
        elif self.check_reads and result:
            _check_read(session_id, result)
        return result

    def _session_events(
        self, conn: Connection, session_id: str, from_seq: int, to_seq: int | None
    ) -> list[RecordedEvent]:
        """The session's own events from ``from_seq`` (to ``to_seq``), as stored (sealed ones too)."""
        sql = self._write_sql
        if to_seq is None:
            return self._select_events(conn, sql.session_events(upper_bound=False), (session_id, from_seq))
        return self._select_events(conn, sql.session_events(upper_bound=True), (session_id, from_seq, to_seq))

    def _select_events(self, conn: Connection, statement: str, params: Sequence[Any]) -> list[RecordedEvent]:
        """Events a read statement of ``DriverSQL`` selects, on ``conn``'s driver cursor (in its
        transaction, with its settings: row-level security sees the same connection)."""
        cursor = conn.connection.cursor()
        try:
            return recorded_events(cursor, statement, params, self._write_sql.to_datetime)
        finally:
            cursor.close()

    def _uncounted(self, conn: Connection, records: Sequence[RecordedEvent]) -> list[_Uncounted]:
        """The records waiting for a deferred count, by session, with the counts stored for them
        (looked up in the read's transaction; ``_count`` fills them in after it)."""
        waiting: dict[str, list[RecordedEvent]] = {}
        for record in records:
            if record.token_count_deferred and record.token_count is None and not record.erased:
                waiting.setdefault(record.session_id, []).append(record)
        if not waiting:
            return []
        found = []
        cursor = conn.connection.cursor()
        try:
            for session_id, group in waiting.items():
                cursor.execute(self._write_sql.stored_counts(), (session_id, group[0].seq, group[-1].seq))
                found.append((group, checked_counts(session_id, cursor.fetchall())))
        finally:
            cursor.close()
        return found

    def _count(self, uncounted: Sequence[_Uncounted]) -> None:
        """Fill in deferred counts (``_counts.fill_counts``), outside the read's transaction: a
        large first read tokenizes for seconds, and must not hold a snapshot of the database."""
        for group, stored in uncounted:
            fill_counts(group, stored, self._counts, self.token_counter)

    def store_token_counts(self) -> int:
        """Store the token counts this store's reads made and no write has stored yet; returns how
        many rows it added (counts another process stored first, or of events erased meanwhile,
        add none). Appends and snapshots store a session's along; ``close`` stores the rest.
        """
        stored = 0
        for session_id in self._counts.sessions():
            counts = self._counts.known(session_id)

            def attempt(session_id: str = session_id, counts: Mapping[int, int | None] = counts) -> int:
                with self._lock, self._driver_transaction() as txn:
                    return txn.store_counts(session_id, counts)

            stored += self._retrying("store_token_counts", attempt, session_id)
            self._counts.stored(session_id, counts)
        return stored

    def _store_counts_before_close(self) -> None:
        """``store_token_counts`` at close: a failure is logged (the counts are made again when
        next read), never raised."""
        if len(self._counts):
            try:
                self.store_token_counts()
            except SessionStoreError as e:
                STORE_LOG.warning("token counts not stored at close (counted again when read): %s", e)

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """See ``SessionStore.read_all``."""
        check_int("after_position", after_position)
        check_int("limit", limit, minimum=0)
        statement = self._write_sql.events_after()

        def attempt() -> tuple[list[RecordedEvent], list[_Uncounted]]:
            with self._read() as conn:
                found = self._select_events(conn, statement, (after_position, limit))
                opened = self._opened(conn, found, strict=False)
                return opened, self._uncounted(conn, opened)

        with observe_read(self.db_system, "read_all", after_position=after_position, limit=limit) as done:
            found, uncounted = self._retrying("read_all", attempt)
            self._count(uncounted)
            done(len(found))
        if self.check_reads:
            for recorded in found:
                if not recorded.erased:
                    _check_read(recorded.session_id, [recorded])
        return found

    def read_stored(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> list[RecordedEvent]:
        """See ``SessionStore.read_stored``."""
        check_lookup("session_id", session_id)
        check_int("from_seq", from_seq)
        if to_seq is not None:
            check_int("to_seq", to_seq)

        def attempt() -> list[RecordedEvent]:
            with self._read() as conn:
                found = self._session_events(conn, session_id, from_seq, to_seq)
                if not found:
                    self._require_session(conn, session_id)
                return found

        return self._retrying("read_stored", attempt)

    def orphaned_sessions(self) -> list[str]:
        """See ``SessionStore.orphaned_sessions``."""
        sessions, events = self.tables.sessions, self.tables.events
        has_row = select(sessions.c.id).where(sessions.c.id == events.c.session_id).exists()
        query = select(events.c.session_id).where(~has_row).distinct().order_by(events.c.session_id)

        def attempt() -> list[str]:
            with self._read() as conn:
                return [str(sid) for (sid,) in conn.execute(query)]

        return self._retrying("orphaned_sessions", attempt)

    def max_position(self) -> int:
        """See ``SessionStore.max_position``."""
        events = self.tables.events

        def attempt() -> int:
            with self._read() as conn:
                return int(conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one())

        return self._retrying("max_position", attempt)

    # -- blobs --

    def put_blob(self, data: bytes, *, session_id: str | None = None) -> BlobRef:
        """See ``SessionStore.put_blob``."""
        blobs = self.tables.blobs
        if not isinstance(data, bytes | bytearray | memoryview):
            msg = f"blob data must be bytes, not {type(data).__name__}"
            raise ValidationError(msg, field="data")
        if session_id is not None:
            check_session_id(session_id)  # the blob's reference row is written under it
        raw = bytes(data)
        cipher = None
        if self.encryption is not None:
            if session_id is None:
                msg = "an encrypted store keeps blobs per session: pass session_id= to put_blob"
                raise ValidationError(msg, field="session_id")
            cipher = self._sealing(session_id).cipher
        digest = hashlib.sha256(raw).hexdigest()
        stored, compression = compress_blob(raw)
        row_id = digest
        if cipher is not None:
            # Keyed by the session: no dedup across sessions, and no plain hash of the content
            # in the database (it would confirm a guessed file).
            row_id = cipher.blob_row_id(digest)
            stored = cipher.seal_blob(row_id, stored)
        statement = (
            type(self)
            .dialect_insert(blobs)
            .values(sha256=row_id, size=len(raw), compression=compression, data=stored, created_at=_utcnow())
            # No conflict target: under row-level security the key is (sha256, tenant) (_rls.py).
            .on_conflict_do_nothing()
        )
        # A plaintext blob is shared by every session that stores the same bytes: each one's
        # reference keeps it until the last of them is erased (_erasure.py). A sealed one is its
        # session's alone, and goes with its key.
        reference = None
        if session_id is not None and cipher is None:
            refs = self.tables.blob_refs
            reference = (
                type(self)
                .dialect_insert(refs)
                .values(sha256=digest, session_id=session_id)
                .on_conflict_do_nothing()
            )

        def attempt() -> None:
            with self._write() as conn:
                # Never a blob for an erased session (a plaintext store may take one before the
                # session exists: an import stores blobs first, then the events naming them).
                # The database refuses its reference too (revision 0008); a sealed blob has none,
                # and needs the session's key, which an erasure destroyed.
                erased = None if session_id is None else erased_error(conn, self.tables, session_id)
                if erased is not None:
                    raise erased
                if session_id is not None and cipher is None:
                    self._refuse_plaintext(conn, session_id, "a blob")
                conn.execute(statement)
                if reference is not None:
                    conn.execute(reference)

        self._retrying("put_blob", attempt, session_id)  # content-addressed: a repeat is a no-op
        return BlobRef(digest, len(raw))

    def get_blob(self, sha256: str, *, session_id: str | None = None) -> bytes:
        """See ``SessionStore.get_blob``."""
        check_lookup("sha256", sha256)
        if session_id is not None:
            check_lookup("session_id", session_id)
        blobs = self.tables.blobs

        def attempt() -> tuple[Any, SessionCipher | None]:
            with self._read() as conn:
                # Where the blob may be: in the clear, or sealed in the session or an ancestor.
                where: dict[str, SessionCipher | None] = {sha256: None}
                if session_id is not None and self.encryption is not None:
                    for sid in self._lineage(conn, session_id):
                        key = self._key_row(conn, sid)
                        if key is not None:
                            cipher = self._cipher(sid, key)
                            where[cipher.blob_row_id(sha256)] = cipher
                row = conn.execute(
                    select(blobs.c.sha256, blobs.c.compression, blobs.c.data)
                    .where(blobs.c.sha256.in_(list(where)))
                    .limit(1)
                ).first()
                erased = None
                if row is None and session_id is not None:
                    erased = erased_error(conn, self.tables, session_id)
                if erased is not None:
                    raise erased
                if row is None and session_id is not None and self.encryption is None:
                    # Sealed blobs are stored under a keyed hash: without the key, not found
                    # would be the answer, when the truth is "encrypted". Raises if so.
                    for sid in self._lineage(conn, session_id):
                        key = self._key_row(conn, sid)
                        if key is not None:
                            self._cipher(sid, key)
                return row, None if row is None else where[row.sha256]

        row, cipher = self._retrying("get_blob", attempt)
        if row is None:
            raise KeyError(sha256)
        data = bytes(row.data)
        if cipher is not None:
            opened = cipher.open_blob(row.sha256, data)
            if opened is None:
                msg = f"blob {sha256} of session {cipher.session_id!r} does not decrypt with its key"
                raise DataCorruptionError(msg, session_id=cipher.session_id)
            data = opened
        data = decompress_blob(data, row.compression, sha256)
        if hashlib.sha256(data).hexdigest() != sha256:
            msg = f"blob {sha256} does not match its hash"
            raise DataCorruptionError(msg)
        return data

    # -- snapshots --

    def put_snapshot(self, snapshot: SnapshotRecord) -> None:
        """See ``SessionStore.put_snapshot``."""
        _check_snapshot(snapshot)
        snapshots = self.tables.snapshots
        sealing = _PLAINTEXT
        if self.encryption is not None:
            try:
                sealing = self._sealing(snapshot.session_id)
            except SessionErasedError:
                raise
            except SessionNotFoundError:
                return  # gone: a cache of it is never written
        if sealing.cipher is not None:
            state = sealing.cipher.seal_snapshot(_snapshot_label(snapshot), snapshot.state)
        else:  # compressed, as payloads are: not under a seal (its length would tell what repeats)
            state = pack_snapshot(snapshot.state)
        snapshot = dataclasses.replace(snapshot, state=state)
        statement = (
            type(self)
            .dialect_insert(snapshots)
            .values(
                session_id=snapshot.session_id,
                projection=snapshot.projection,
                projection_version=snapshot.projection_version,
                tokenizer=snapshot.tokenizer,
                seq=snapshot.seq,
                state=snapshot.state,
                created_at=_utcnow(),
            )
            .on_conflict_do_nothing()
        )
        same_key = (
            snapshots.c.session_id == snapshot.session_id,
            snapshots.c.projection == snapshot.projection,
            snapshots.c.projection_version == snapshot.projection_version,
            snapshots.c.tokenizer == snapshot.tokenizer,
        )

        # The counts the snapshot's fold made are stored with it (the same transaction).
        counts = self._counts.known(snapshot.session_id)

        def attempt() -> None:
            with self._write() as conn:
                # Checked in the write transaction; the database refuses the row too (0008).
                erased = erased_error(conn, self.tables, snapshot.session_id)
                if erased is not None:
                    raise erased
                if sealing.cipher is None:
                    self._refuse_plaintext(conn, snapshot.session_id, "a snapshot")
                conn.execute(statement)
                if counts:
                    cursor = conn.connection.cursor()
                    try:
                        store_counts(cursor, self._write_sql, snapshot.session_id, counts)
                    finally:
                        cursor.close()
                # Keep the two newest per key: a snapshot is a cache, and old ones only cost space.
                newest = select(snapshots.c.seq).where(*same_key).order_by(snapshots.c.seq.desc()).limit(2)
                floor = conn.execute(select(func.min(newest.subquery().c.seq))).scalar()
                if floor is not None:
                    conn.execute(delete(snapshots).where(*same_key, snapshots.c.seq < floor))

        # Keyed and ON CONFLICT DO NOTHING: a repeat is a no-op.
        self._retrying("put_snapshot", attempt, snapshot.session_id)
        self._counts.stored(snapshot.session_id, counts)

    def latest_snapshot(
        self,
        session_id: str,
        projection: str,
        projection_version: int,
        tokenizer: str,
        max_seq: int | None = None,
    ) -> SnapshotRecord | None:
        """See ``SessionStore.latest_snapshot``."""
        check_lookup("session_id", session_id)
        check_lookup("projection", projection)
        _check_projection_version(projection_version)
        check_lookup("tokenizer", tokenizer)
        snapshots = self.tables.snapshots
        newest = (
            select(snapshots.c.seq)
            .where(
                snapshots.c.session_id == session_id,
                snapshots.c.projection == projection,
                snapshots.c.projection_version == projection_version,
                snapshots.c.tokenizer == tokenizer,
            )
            .order_by(snapshots.c.seq.desc())
            .limit(1)
        )
        if max_seq is not None:
            newest = newest.where(snapshots.c.seq <= check_int("max_seq", max_seq))

        def attempt() -> tuple[int, bytes] | None:
            with self._read() as conn:
                return self._read_snapshot(conn, newest)

        found = self._retrying("latest_snapshot", attempt)
        if found is None:
            return None
        seq, state = found
        record = SnapshotRecord(session_id, projection, projection_version, tokenizer, seq, state)
        if state.startswith(SNAPSHOT_MAGIC):
            return self._open_snapshot(record)
        return dataclasses.replace(record, state=unpack_snapshot(state))

    def _open_snapshot(self, record: SnapshotRecord) -> SnapshotRecord | None:
        """A sealed snapshot opened; None when it cannot be (a cache: the reader folds the log,
        which raises the real reason: an erased session, a missing key provider)."""
        if self.encryption is None:
            return None

        def attempt() -> _WrappedKey | None:
            with self._read() as conn:
                return self._key_row(conn, record.session_id)

        key = self._retrying("read key", attempt)
        if key is None:
            return None
        state = self._cipher(record.session_id, key).open_snapshot(_snapshot_label(record), record.state)
        return None if state is None else dataclasses.replace(record, state=state)

    def _read_snapshot(self, conn: Connection, newest: Select[Any]) -> tuple[int, bytes] | None:
        """(seq, state) of the row ``newest`` (a select of ``seq``) finds, if any.

        Snapshot rows can be large (a resume reads the whole history's JSON): backends read the
        state the fastest way their driver offers.
        """
        snapshots = self.tables.snapshots
        row = conn.execute(newest.add_columns(snapshots.c.state)).first()
        return None if row is None else (int(row.seq), bytes(row.state))  # bytes: not a memoryview

    def close(self) -> None:
        """Store the token counts reads made (``store_token_counts``; a failure is logged: they are
        counted again when next read), then dispose of the engine's connection pool (unless the
        engine was handed in: the host's)."""
        self._store_counts_before_close()
        self._release_connections()

    def _release_connections(self) -> None:
        """Dispose of the engine's connection pool (unless the engine was handed in: the host's)."""
        if self._owns_engine:
            self.engine.dispose()


#: One session's records waiting for a deferred count, and the counts ``token_counts`` holds
#: for that span (seq -> count).
_Uncounted = tuple[list[RecordedEvent], dict[int, int | None]]


def _is_sealed(recorded: RecordedEvent) -> bool:
    """True for a row holding sealed text (never a packed one: it is not decompressed to tell)."""
    text = loaded_payload(recorded)
    return text is not None and is_sealed_payload(text)


def _rollback_or_discard(raw: Any) -> None:
    """Roll back a failed write; a connection too broken to roll back leaves the pool for good."""
    try:
        raw.rollback()
    except _driver_errors():
        # The server is gone or killed this backend: the transaction died with it.
        raw.invalidate()


def _snapshot_label(snapshot: SnapshotRecord) -> str:
    """What a sealed snapshot is bound to: it opens only as the snapshot it was written as."""
    return "\x1f".join(
        (snapshot.projection, str(snapshot.projection_version), snapshot.tokenizer, str(snapshot.seq))
    )


def _select_sessions(sessions: Table) -> Select[Any]:
    """Every column of ``sessions``, ``created_at`` as the driver returns it: SQLAlchemy's own
    parsing would fail on an altered value with a bare ValueError, ``_session_info`` names it."""
    return select(
        *(type_coerce(c, NullType()).label(c.name) if c.name == "created_at" else c for c in sessions.c)
    )


def _session_info(row: Any) -> SessionInfo:
    """A ``sessions`` row (from ``_select_sessions``) as ``SessionInfo``.

    Raises:
        DataCorruptionError: a value that the store never writes (SQLite keeps whatever is
            written into a column): a creation time that is no timestamp, metadata that is not
            a JSON object, a fork point that is not a whole number.
    """
    sid = row.id
    fork_seq = row.fork_seq
    if fork_seq is not None and (type(fork_seq) is not int or fork_seq < 0):
        raise _altered_session(sid, "fork_seq", fork_seq)
    return SessionInfo(
        id=sid,
        created_at=_stored_created_at(sid, row.created_at),
        parent_session_id=row.parent_session_id,
        fork_seq=fork_seq,
        metadata=_stored_metadata(sid, row.metadata),
        tenant=row.tenant_id,
        user=row.user_id,
        external_id=row.external_id,
    )


def _stored_created_at(session_id: str, value: object) -> datetime:
    if isinstance(value, datetime):  # PostgreSQL's timestamptz
        return as_utc(value)
    if isinstance(value, str):  # SQLite's text, as SQLAlchemy's DateTime writes it
        with contextlib.suppress(ValueError):
            return as_utc(datetime.fromisoformat(value))
    raise _altered_session(session_id, "created_at", value)


def _stored_metadata(session_id: str, value: object) -> dict[str, Any]:
    try:
        metadata = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        metadata = None
    except RecursionError:
        assert isinstance(value, str)
        if not nested_deeper_than(value, ALTERED_DEPTH):
            raise  # the caller's own stack was deep: not the row's fault
        metadata = None
    if not isinstance(metadata, dict):
        raise _altered_session(session_id, "metadata", value)
    return metadata


def _altered_session(session_id: str, column: str, value: object) -> DataCorruptionError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    msg = f"session {session_id!r}: its sessions row's {column} is {shown} (altered: never written so)"
    return DataCorruptionError(msg, session_id=session_id)


def _info_of(identity: SessionIdentity) -> SessionInfo:
    """The ``SessionInfo`` of a session just created with ``identity``."""
    i = identity
    return SessionInfo(
        i.session_id,
        i.created_at,
        i.parent_session_id,
        i.fork_seq,
        i.metadata,
        i.tenant,
        i.user,
        i.external_id,
    )

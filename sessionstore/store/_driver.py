"""The hot paths on the driver's own connection: the few statements every append runs, and
the event reads.

SQLAlchemy Core builds, caches and executes a statement for ~0.3 ms of CPU; an append runs
three of them, which made single appends several times slower than the database itself. The
write path therefore runs its fixed statements as plain SQL on the pooled driver connection
(``engine.raw_connection()``), in the dialect's parameter style. Event reads run their one
SELECT on the driver cursor of their SQLAlchemy connection (its transaction, its settings):
SQLAlchemy's per-row result processing cost as much as the database's own fetch. Migrations
and everything else stay on SQLAlchemy Core. Statements here touch only the columns defined in
``sessionstore.store._schema``, under the table names of the store's ``StoreTables``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .._telemetry import logger
from ..errors import (
    DatabaseError,
    DataCorruptionError,
    DuplicateEventError,
    SessionErasedError,
    SessionNotFoundError,
)
from ._codec import unpack_payload
from ._contract import AppendResult, RecordedEvent, stored_event
from ._counts import store_counts
from ._hashing import SessionIdentity, as_utc, batch_hasher, fork_point_hash, session_genesis
from ._listen import channel_sql
from ._schema import StoreTables

__all__ = [
    "DriverSQL",
    "DriverTransaction",
    "Prepared",
    "chain_rows",
    "recorded_events",
    "sqlite_datetime",
    "sqlite_timestamp",
]

_LOG = logger("store")
#: Event ids looked up per statement when checking a batch for an idempotent retry.
_LOOKUP_CHUNK = 1000
_EVENT_COLUMNS = (
    "session_id, seq, event_id, type, schema_version, payload, payload_packed, token_count, prev_hash, "
    "hash, created_at, token_count_deferred"
)
#: What a read selects, in ``stored_event``'s argument order.
_READ_COLUMNS = (
    "session_id, seq, position, event_id, type, schema_version, payload, token_count, prev_hash, hash, "
    "created_at, payload_packed, token_count_deferred"
)


@dataclass(frozen=True, slots=True)
class Prepared:
    """An event validated, serialized and counted before the write transaction starts.

    ``packed``: the payload compressed for storage (``_codec.pack_payload``), or None to store
    the text as it is. ``deferred``: the event has text whose tokens are counted after COMMIT
    (``token_count`` is then None in the row; its hash holds that it is deferred).
    """

    event_id: str
    type: str
    schema_version: int
    payload: str
    token_count: int | None
    packed: bytes | None = None
    deferred: bool = False


def sqlite_timestamp(moment: datetime) -> str:
    """A UTC datetime in the text form SQLAlchemy's SQLite ``DateTime`` stores and parses
    (``2026-12-01 03:00:00.000000``: always six digits of microseconds).

    ``isoformat`` rather than ``strftime``: the same text for one twentieth of the CPU, once per
    append.
    """
    return moment.replace(tzinfo=None).isoformat(" ", "microseconds")


def sqlite_datetime(stored: str) -> datetime:
    """The aware UTC datetime of a SQLite timestamp (``sqlite_timestamp``'s text, which is UTC).

    Parsed with the offset appended: ``fromisoformat`` then ``replace(tzinfo=...)`` costs five
    times as much, once per event read.
    """
    return datetime.fromisoformat(stored + "+00:00")


def stored_int(value: object, column: str, session_id: str) -> int:
    """An integer column of an event row as an int.

    SQLite keeps whatever is written into a column, so an altered row can hold a REAL (5.5) or
    TEXT where a seq, position or schema version goes: that is DataCorruptionError naming the
    session, not a ValueError, and not a silent ``int(5.5) == 5`` that would hide the forged row
    behind its neighbour. A whole REAL (8.0, 1e19) is its integer.
    """
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    msg = f"session {session_id!r}: an event row's {column} is {value!r}, not an integer (altered)"
    raise DataCorruptionError(msg, session_id=session_id)


def recorded_events(
    cursor: Any, statement: str, params: Sequence[Any], to_datetime: Callable[[Any], datetime]
) -> list[RecordedEvent]:
    """The events a ``DriverSQL`` read statement selects, as ``RecordedEvent``s.

    Nothing is decoded beyond the envelope: the payload stays text until ``event`` is asked for.
    """
    cursor.execute(statement, params)
    rows = cursor.fetchall()
    try:
        return _recorded(rows, to_datetime)
    except (ValueError, TypeError, OverflowError) as e:
        # A creation time that does not parse (the other columns are checked by type below):
        # found again row by row, to name the event.
        altered = _unreadable_time(rows, to_datetime)
        if altered is None:
            raise
        raise altered from e


def _recorded(rows: list[Any], to_datetime: Callable[[Any], datetime]) -> list[RecordedEvent]:
    return [
        stored_event(
            session_id,
            seq if type(seq) is int else stored_int(seq, "seq", session_id),
            position if type(position) is int else stored_int(position, "position", session_id),
            event_id,
            type_name,
            schema_version
            if type(schema_version) is int
            else stored_int(schema_version, "schema_version", session_id),
            payload if type(payload) is str else _not_text(payload, session_id, seq),
            token_count
            if token_count is None or type(token_count) is int
            else stored_int(token_count, "token_count", session_id),
            prev_hash,
            digest,
            to_datetime(created_at),
            # psycopg gives a memoryview; a value that is not bytes is kept for unpack_payload to
            # report as corruption when the payload is used (verify names the event).
            bytes(packed) if isinstance(packed, (bytearray, memoryview)) else packed,
            # Only a row without a count of its own waits for one (a count in the row is hashed).
            token_count is None and bool(deferred),
        )
        for (
            session_id,
            seq,
            position,
            event_id,
            type_name,
            schema_version,
            payload,
            token_count,
            prev_hash,
            digest,
            created_at,
            packed,
            deferred,
        ) in rows
    ]


def _not_text(payload: object, session_id: str, seq: object) -> str:
    """An event row's payload that SQLite holds as a BLOB, a number or NULL (it keeps whatever
    is written into a column): DataCorruptionError naming the event."""
    kind = type(payload).__name__
    msg = f"session {session_id!r}, seq {seq}: the event row's payload is {kind}, not text (altered)"
    raise DataCorruptionError(msg, session_id=session_id, seq=seq if type(seq) is int else None)


def _unreadable_time(rows: list[Any], to_datetime: Callable[[Any], datetime]) -> DataCorruptionError | None:
    """DataCorruptionError naming the first row whose ``created_at`` does not parse (SQLite keeps
    whatever is written into a column: text that is no timestamp, an INTEGER), or None."""
    for row in rows:
        session_id, seq, created_at = row[0], row[1], row[10]
        try:
            to_datetime(created_at)
        except (ValueError, TypeError, OverflowError):
            msg = (
                f"session {session_id!r}, seq {seq}: the event row's created_at is {str(created_at)[:80]!r}, "
                "not a timestamp (altered)"
            )
            return DataCorruptionError(msg, session_id=session_id, seq=seq if type(seq) is int else None)
    return None


@dataclass(frozen=True)
class DriverSQL:
    """A dialect's write-path statements.

    Args:
        mark: the driver's parameter placeholder (``?`` for sqlite3, ``%s`` for psycopg).
        begin_write: the statement that opens a write transaction serialized against every
            other event writer (see the backend modules for why each is what it is);
            ``{events}`` in it stands for the events table.
        to_timestamp: turns an aware UTC datetime into the driver's parameter.
        to_datetime: turns a timestamp column as the driver returns it into an aware UTC datetime.
        many_returning: the driver returns RETURNING rows from ``executemany``.
        last_rowid: a query for the last inserted position, when positions in one batch are
            consecutive by construction (a single writer with AUTOINCREMENT).
    """

    mark: str
    begin_write: str
    to_timestamp: Callable[[datetime], Any]
    to_datetime: Callable[[Any], datetime]
    many_returning: bool
    #: A query for the last inserted position, where batches may rely on it (SQLite).
    last_rowid: str | None = None
    #: The tables' names in SQL (schema-qualified and prefixed: see ``for_tables``).
    events: str = "events"
    sessions: str = "sessions"
    #: A statement run last in a transaction that wrote events, with the highest position
    #: written as its one parameter: PostgreSQL's NOTIFY, delivered on COMMIT only
    #: (``{channel}`` stands for the channel's SQL expression, ``_listen.channel_sql``).
    notify: str | None = None
    session_keys: str = "session_keys"
    erasures: str = "erasures"
    token_counts: str = "token_counts"

    def for_tables(self, tables: StoreTables) -> DriverSQL:
        """These statements on ``tables`` (a store's prefix and schema)."""
        events = tables.sql_name("events")
        return replace(
            self,
            events=events,
            sessions=tables.sql_name("sessions"),
            session_keys=tables.sql_name("session_keys"),
            erasures=tables.sql_name("erasures"),
            token_counts=tables.sql_name("token_counts"),
            begin_write=self.begin_write.format(events=events),
            notify=None if self.notify is None else self.notify.format(channel=channel_sql(tables)),
        )

    def session_events(self, *, upper_bound: bool) -> str:
        """A session's events from a seq (and up to one, with ``upper_bound``), in seq order."""
        m = self.mark
        bound = f" AND seq <= {m}" if upper_bound else ""
        return (
            f"SELECT {_READ_COLUMNS} FROM {self.events} "
            f"WHERE session_id = {m} AND seq >= {m}{bound} ORDER BY seq"
        )

    def events_after(self) -> str:
        """Events after a global position, in position order, at most a limit of them."""
        m = self.mark
        return f"SELECT {_READ_COLUMNS} FROM {self.events} WHERE position > {m} ORDER BY position LIMIT {m}"

    def head(self) -> str:
        """The session's last seq and hash."""
        return f"SELECT seq, hash FROM {self.events} WHERE session_id = {self.mark} ORDER BY seq DESC LIMIT 1"

    def fork_point(self) -> str:
        """A session's fork_seq (NULL unless it is a fork)."""
        return f"SELECT fork_seq FROM {self.sessions} WHERE id = {self.mark}"

    def session_exists(self) -> str:
        """One row when the session exists."""
        return f"SELECT 1 FROM {self.sessions} WHERE id = {self.mark}"

    def session_row(self) -> str:
        """The columns of a session's identity (``SessionIdentity``)."""
        return (
            "SELECT parent_session_id, fork_seq, created_at, metadata, tenant_id, user_id, external_id "
            f"FROM {self.sessions} WHERE id = {self.mark}"
        )

    def owned_session(self) -> str:
        """The id of the session with a (tenant, user, external id)."""
        m = self.mark
        return f"SELECT id FROM {self.sessions} WHERE tenant_id = {m} AND user_id = {m} AND external_id = {m}"

    def hash_at(self) -> str:
        """The hash of one event of a session."""
        return f"SELECT hash FROM {self.events} WHERE session_id = {self.mark} AND seq = {self.mark}"

    def stored(self, count: int) -> str:
        """Stored rows for ``count`` event ids."""
        marks = ", ".join([self.mark] * count)
        return (
            "SELECT event_id, session_id, seq, position, type, schema_version, payload, payload_packed "
            f"FROM {self.events} WHERE event_id IN ({marks})"
        )

    def insert_event(self) -> str:
        """One event row, returning its global position."""
        marks = ", ".join([self.mark] * 12)
        return f"INSERT INTO {self.events} ({_EVENT_COLUMNS}) VALUES ({marks}) RETURNING position"

    def head_with_key_state(self) -> str:
        """``head`` and ``key_state`` in one statement: no row when the session has no events."""
        m = self.mark
        return (
            f"SELECT seq, hash, (SELECT wrapped_key FROM {self.session_keys} WHERE session_id = {m}), "
            f"(SELECT 1 FROM {self.erasures} WHERE session_id = {m}) "
            f"FROM {self.events} WHERE session_id = {m} ORDER BY seq DESC LIMIT 1"
        )

    def stored_counts(self) -> str:
        """The ``token_counts`` rows of a session between two seqs."""
        m = self.mark
        return (
            f"SELECT seq, token_count FROM {self.token_counts} "
            f"WHERE session_id = {m} AND seq BETWEEN {m} AND {m}"
        )

    def insert_count(self) -> str:
        """One deferred count (session, seq, count, then session, seq and session again), stored
        only for an event that exists and waits for it, of a session never erased (a shredded
        session keeps its rows), and only once (``_counts.store_counts``)."""
        m = self.mark
        return (
            f"INSERT INTO {self.token_counts} (session_id, seq, token_count) SELECT {m}, {m}, {m} "
            f"WHERE EXISTS (SELECT 1 FROM {self.events} WHERE session_id = {m} AND seq = {m} "
            "AND token_count_deferred IS NOT NULL) "
            f"AND NOT EXISTS (SELECT 1 FROM {self.erasures} WHERE session_id = {m}) ON CONFLICT DO NOTHING"
        )

    def key_state(self) -> str:
        """A session's wrapped data key (NULL: plaintext, or erased) and whether it was erased."""
        return (
            f"SELECT (SELECT wrapped_key FROM {self.session_keys} WHERE session_id = {self.mark}), "
            f"(SELECT 1 FROM {self.erasures} WHERE session_id = {self.mark})"
        )

    def insert_key(self) -> str:
        """One session_keys row."""
        marks = ", ".join([self.mark] * 4)
        return (
            f"INSERT INTO {self.session_keys} (session_id, key_id, wrapped_key, created_at) VALUES ({marks})"
        )

    def erasure(self) -> str:
        """A session's erasure receipt (how and when)."""
        return f"SELECT method, erased_at FROM {self.erasures} WHERE session_id = {self.mark}"

    def insert_session(self) -> str:
        """One session row."""
        marks = ", ".join([self.mark] * 8)
        return (
            f"INSERT INTO {self.sessions} (id, parent_session_id, fork_seq, created_at, metadata, "
            f"tenant_id, user_id, external_id) VALUES ({marks})"
        )


def chain_rows(
    session_id: str,
    head_seq: int,
    head_hash: str,
    prepared: Sequence[Prepared],
    now: datetime,
    to_timestamp: Callable[[datetime], Any],
) -> tuple[tuple[int, ...], list[tuple[Any, ...]]]:
    """The seqs and insert parameters of ``prepared``, hash-chained after the head."""
    seqs = tuple(range(head_seq + 1, head_seq + 1 + len(prepared)))
    stamp = to_timestamp(now)
    rows = []
    prev = head_hash
    hash_event = batch_hasher(session_id, now)
    for seq, p in zip(seqs, prepared, strict=True):
        digest = hash_event(
            prev, seq, p.event_id, p.type, p.schema_version, p.token_count, p.deferred, p.payload
        )
        rows.append(
            (
                session_id,
                seq,
                p.event_id,
                p.type,
                p.schema_version,
                "" if p.packed is not None else p.payload,  # the hash above is over the text
                p.packed,
                p.token_count,
                prev,
                digest,
                stamp,
                True if p.deferred else None,
            )
        )
        prev = digest
    return seqs, rows


class DriverTransaction:
    """The statements of one write transaction, on a driver cursor."""

    def __init__(self, cursor: Any, sql: DriverSQL) -> None:
        self.cursor = cursor
        self.sql = sql
        #: The highest global position this transaction inserted (None: no event yet).
        self.last_position: int | None = None

    def notify_if_written(self) -> None:
        """Announce the events written, as the transaction's last statement (if the backend can)."""
        if self.sql.notify is not None and self.last_position is not None:
            self.cursor.execute(self.sql.notify, (str(self.last_position),))

    def timestamp(self, moment: datetime) -> Any:
        """``moment`` as this driver's parameter."""
        return self.sql.to_timestamp(moment)

    def head(self, session_id: str) -> tuple[int, str] | None:
        """(last seq, its hash); (0, genesis) for an empty session; None if there is no session."""
        self.cursor.execute(self.sql.head(), (session_id,))
        row = self.cursor.fetchone()
        if row is not None:
            return int(row[0]), str(row[1])
        identity = self.identity(session_id)
        return None if identity is None else (0, self.genesis(identity))

    def head_and_key_state(self, session_id: str) -> tuple[tuple[int, str] | None, bytes | None, bool]:
        """(``head``, then ``key_state``'s two values): one round trip once the session has events."""
        self.cursor.execute(self.sql.head_with_key_state(), (session_id, session_id, session_id))
        row = self.cursor.fetchone()
        if row is None:  # no event yet (or no session): the head from the session's identity
            return (self.head(session_id), *self.key_state(session_id))
        seq, digest, wrapped, erased = row
        head = (stored_int(seq, "seq", session_id), str(digest))
        return head, (None if wrapped is None else bytes(wrapped)), erased is not None

    def last_seq(self, session_id: str) -> int | None:
        """The session's last seq (0 when it has no events), or None if there is no session."""
        self.cursor.execute(self.sql.head(), (session_id,))
        row = self.cursor.fetchone()
        if row is not None:
            return int(row[0])
        self.cursor.execute(self.sql.session_exists(), (session_id,))
        return 0 if self.cursor.fetchone() is not None else None

    def identity(self, session_id: str) -> SessionIdentity | None:
        """The session's identity as its row holds it, or None if there is no session."""
        self.cursor.execute(self.sql.session_row(), (session_id,))
        row = self.cursor.fetchone()
        if row is None:
            return None
        parent, fork_seq, created_at, metadata, tenant, user, external_id = row
        if isinstance(created_at, str):  # sqlite3 hands back the stored text
            created_at = datetime.fromisoformat(created_at)
        fork = None if fork_seq is None else int(fork_seq)
        return SessionIdentity(
            session_id, parent, fork, as_utc(created_at), json.loads(metadata), tenant, user, external_id
        )

    def owned_session(self, tenant: str, user: str, external_id: str) -> str | None:
        """The id of the session with this (tenant, user, external id), if there is one."""
        self.cursor.execute(self.sql.owned_session(), (tenant, user, external_id))
        row = self.cursor.fetchone()
        return None if row is None else str(row[0])

    def genesis(self, identity: SessionIdentity) -> str:
        """The ``prev_hash`` of the session's first event: its identity, bound to its fork point.

        Raises:
            DatabaseError: the parent's event at the fork point is missing.
        """

        def lineage(session_id: str) -> tuple[str | None, int | None] | None:
            row = self.identity(session_id)
            return None if row is None else (row.parent_session_id, row.fork_seq)

        point = fork_point_hash(identity.parent_session_id, identity.fork_seq, lineage, self._hash_at)
        if point is None:
            msg = (
                f"session {identity.session_id!r}: the parent's event at fork point "
                f"{identity.fork_seq} is missing"
            )
            raise DatabaseError(msg)
        return session_genesis(identity, point)

    def _hash_at(self, session_id: str, seq: int) -> str | None:
        self.cursor.execute(self.sql.hash_at(), (session_id, seq))
        row = self.cursor.fetchone()
        return None if row is None else str(row[0])

    def fork_seq(self, session_id: str) -> int:
        """The session's fork point (0 when it is not a fork)."""
        self.cursor.execute(self.sql.fork_point(), (session_id,))
        row = self.cursor.fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0

    def stored_result(self, session_id: str, prepared: Sequence[Prepared]) -> AppendResult | None:
        """The original result if this batch was stored before (an idempotent retry), else None.

        Raises:
            DuplicateEventError: some ids are stored but the batch is not a faithful retry.
        """
        ids = [p.event_id for p in prepared]
        stored: dict[str, Any] = {}
        # Chunks: drivers cap a statement's parameters (PostgreSQL at 65,535).
        for start in range(0, len(ids), _LOOKUP_CHUNK):
            chunk = ids[start : start + _LOOKUP_CHUNK]
            self.cursor.execute(self.sql.stored(len(chunk)), chunk)
            stored.update((row[0], row) for row in self.cursor.fetchall())
        if not stored:
            return None
        for p in prepared:
            row = stored.get(p.event_id)
            if row is None:
                raise DuplicateEventError(
                    next(iter(stored)), "only part of this batch was stored before; nothing written"
                )
            if row[1] != session_id:
                raise DuplicateEventError(p.event_id, f"already stored in session {row[1]!r}")
            payload = row[6] if row[7] is None else unpack_payload(row[7], session_id=row[1], seq=row[2])
            if (row[4], int(row[5]), payload) != (p.type, p.schema_version, p.payload):
                raise DuplicateEventError(p.event_id, "already stored with different content")
        rows = [stored[p.event_id] for p in prepared]
        seqs = tuple(stored_int(r[2], "seq", session_id) for r in rows)
        if seqs != tuple(range(seqs[0], seqs[0] + len(seqs))):
            raise DuplicateEventError(rows[0][0], "these events were stored in another batch or order")
        positions = tuple(int(r[3]) for r in rows)
        return AppendResult(session_id, seqs, positions, seqs[-1], deduplicated=True)

    def insert(self, rows: Sequence[tuple[Any, ...]]) -> tuple[int, ...]:
        """Insert event rows; their global positions in order."""
        positions = self._insert(rows)
        if positions:
            self.last_position = max(positions[-1], self.last_position or 0)
        return positions

    def _insert(self, rows: Sequence[tuple[Any, ...]]) -> tuple[int, ...]:
        statement = self.sql.insert_event()
        if self.sql.many_returning and len(rows) > 1:
            # psycopg returns one result set per row: one round trip for the whole batch.
            self.cursor.executemany(statement, rows, returning=True)
            positions = []
            while True:
                positions.append(int(self.cursor.fetchone()[0]))
                if not self.cursor.nextset():
                    break
            return tuple(positions)
        if self.sql.last_rowid is not None and len(rows) > 1:
            # SQLite: the write lock is held and positions come from AUTOINCREMENT, so one
            # executemany assigns consecutive positions ending at last_insert_rowid().
            self.cursor.executemany(statement.removesuffix(" RETURNING position"), rows)
            self.cursor.execute(self.sql.last_rowid)
            last = int(self.cursor.fetchone()[0])
            return tuple(range(last - len(rows) + 1, last + 1))
        result = []
        for row in rows:
            self.cursor.execute(statement, row)
            result.append(int(self.cursor.fetchone()[0]))
        return tuple(result)

    def store_counts(self, session_id: str, counts: Mapping[int, int | None]) -> int:
        """Store deferred token counts of the session (``_counts.store_counts``); how many rows
        were added (none for counts another process stored first)."""
        return store_counts(self.cursor, self.sql, session_id, counts)

    def try_store_counts(self, session_id: str, counts: Mapping[int, int | None]) -> bool:
        """``store_counts`` under a savepoint: a failure (a tenant role not granted the table
        yet) leaves the transaction as it was and returns False (logged); True once they are in
        the table, whoever stored them."""
        if not counts:
            return True
        self.cursor.execute("SAVEPOINT token_counts")
        try:
            store_counts(self.cursor, self.sql, session_id, counts)
        except Exception as e:  # the driver's own error types: whatever failed, the append goes on
            self.cursor.execute("ROLLBACK TO SAVEPOINT token_counts")
            _LOG.warning("session %s: token counts not stored with the append: %s", session_id, e)
            return False
        self.cursor.execute("RELEASE SAVEPOINT token_counts")
        return True

    def key_state(self, session_id: str) -> tuple[bytes | None, bool]:
        """(the session's wrapped data key or None, whether it was erased): one round trip."""
        self.cursor.execute(self.sql.key_state(), (session_id, session_id))
        wrapped, erased = self.cursor.fetchone()
        return (None if wrapped is None else bytes(wrapped)), erased is not None

    def insert_key(self, session_id: str, key_id: str, wrapped: bytes, now: datetime) -> None:
        """Store an encrypted session's wrapped data key."""
        self.cursor.execute(self.sql.insert_key(), (session_id, key_id, wrapped, self.timestamp(now)))

    def erased(self, session_id: str) -> SessionErasedError | None:
        """The error reading the session gives if it was erased, else None."""
        self.cursor.execute(self.sql.erasure(), (session_id,))
        row = self.cursor.fetchone()
        return None if row is None else SessionErasedError(session_id, method=row[0], erased_at=str(row[1]))

    def missing(self, session_id: str) -> SessionNotFoundError:
        """The error for a session without a row: erased, or never created."""
        return self.erased(session_id) or SessionNotFoundError(session_id)

    def insert_session(self, identity: SessionIdentity, metadata: str) -> None:
        """Insert a session row (``metadata``: its stored JSON text)."""
        i = identity
        self.cursor.execute(
            self.sql.insert_session(),
            (
                i.session_id,
                i.parent_session_id,
                i.fork_seq,
                self.timestamp(i.created_at),
                metadata,
                i.tenant,
                i.user,
                i.external_id,
            ),
        )

"""The store contract and the records it returns.

``SessionStore`` is the one seam between sessionstore and a database. Everything above it
(projections, the pipeline, the CLI) talks to this contract and never branches on the
backend it holds.
"""

from __future__ import annotations

import abc
import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from ._errors import ValidationError
from ._events import Event, decode_event
from ._hashing import GENESIS_HASH, event_hash

__all__ = [
    "ANY",
    "AppendResult",
    "BlobRef",
    "ExpectedSeq",
    "RecordedEvent",
    "SessionInfo",
    "SessionStore",
    "SnapshotRecord",
    "VerifyReport",
    "check_int",
    "check_session_id",
]

#: ``expected_seq`` value that skips the concurrency check (idempotency still holds).
ANY: Literal["any"] = "any"
ExpectedSeq = int | Literal["any"]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` if it is 1-64 of ``[A-Za-z0-9._:-]`` starting alphanumeric.

    Raises:
        ValidationError: otherwise, saying what is allowed.
    """
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        msg = (
            f"invalid session id {session_id!r}: use 1-64 characters of letters, digits, "
            "'.', '_', ':' or '-', starting with a letter or digit"
        )
        raise ValidationError(msg, field="session_id")
    return session_id


#: The range of the database's integer columns (seq, position: signed 64-bit).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_int(name: str, value: object, *, minimum: int = INT64_MIN) -> int:
    """Return ``value`` if it is an int (not a bool) from ``minimum`` to 2**63 - 1.

    Seqs, positions and limits are compared with 64-bit columns: a larger number would reach
    the driver and fail there (SQLite) or mean something else per backend.

    Raises:
        ValidationError: otherwise, naming the argument.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int, not {type(value).__name__}"
        raise ValidationError(msg, field=name)
    if not minimum <= value <= INT64_MAX:
        lowest = "-2**63" if minimum == INT64_MIN else str(minimum)
        msg = f"{name} must be from {lowest} to 2**63 - 1, not {value}"
        raise ValidationError(msg, field=name)
    return value


@dataclass(frozen=True)
class SessionInfo:
    """A session's row: identity, lineage and metadata."""

    id: str
    created_at: datetime
    parent_session_id: str | None = None
    fork_seq: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedEvent:
    """An event as stored: the envelope plus the payload text exactly as hashed.

    ``event`` decodes (and upcasts) the payload on first access.
    """

    session_id: str
    seq: int
    position: int
    event_id: str
    type: str
    schema_version: int
    payload: str
    token_count: int | None
    prev_hash: str
    hash: str
    created_at: datetime

    @cached_property
    def event(self) -> Event:
        """The decoded event model (raises UnknownEventTypeError for unknown types)."""
        return decode_event(self.type, self.schema_version, self.payload, self.event_id)

    def payload_dict(self) -> dict[str, Any]:
        """The payload as a dict, without decoding into a model."""
        result: dict[str, Any] = json.loads(self.payload)
        return result

    def computed_hash(self) -> str:
        """The hash this row should carry, recomputed from its stored columns."""
        return event_hash(
            self.prev_hash,
            self.session_id,
            self.seq,
            self.event_id,
            self.type,
            self.schema_version,
            self.token_count,
            self.created_at,
            self.payload,
        )


@dataclass(frozen=True)
class AppendResult:
    """What an append assigned.

    Attributes:
        seqs: per-session sequence numbers of the events, in batch order.
        positions: global positions of the events, in batch order.
        last_seq: the session's last seq after the append (the next ``expected_seq``).
        deduplicated: True when every event was already stored (an idempotent retry):
            nothing was written and the original seqs and positions are returned.
    """

    session_id: str
    seqs: tuple[int, ...]
    positions: tuple[int, ...]
    last_seq: int
    deduplicated: bool = False


@dataclass(frozen=True)
class BlobRef:
    """A content-addressed blob: its SHA-256 (hex) and size in bytes."""

    sha256: str
    size: int


@dataclass(frozen=True)
class SnapshotRecord:
    """A stored projection state: the fold of a session's events up to ``seq``."""

    session_id: str
    projection: str
    projection_version: int
    tokenizer: str
    seq: int
    #: The projection's own serialization (``Projection.dump``).
    state: bytes


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of walking a session's hash chain.

    ``first_bad_seq`` is None when the chain verifies.
    """

    session_id: str
    events_checked: int
    first_bad_seq: int | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """True when every event's hash and link verified."""
        return self.first_bad_seq is None


def chain_problem(events: Sequence[RecordedEvent], prev_hash: str | None) -> tuple[int, str] | None:
    """The first (seq, reason) where ``events`` break the chain, or None.

    Args:
        events: consecutive events of one session in seq order.
        prev_hash: hash of the event before ``events[0]`` (GENESIS for seq 1), or None
            to trust ``events[0].prev_hash``.
    """
    expected_prev = prev_hash
    expected_seq = events[0].seq if events else 1
    for recorded in events:
        if recorded.seq != expected_seq:
            return recorded.seq, f"seq gap: expected {expected_seq}"
        if expected_prev is not None and recorded.prev_hash != expected_prev:
            return recorded.seq, "prev_hash does not match the previous event's hash"
        if recorded.computed_hash() != recorded.hash:
            return recorded.seq, "stored content does not match its hash"
        expected_prev = recorded.hash
        expected_seq += 1
    return None


class SessionStore(abc.ABC):
    """An append-only, per-session event log with a global order.

    Guarantees every implementation keeps (the contract suite in ``sessionstore.testing``
    proves them):

    * ``append`` is one transaction: all events of the batch or none.
    * Per-session ``seq`` starts at 1 and has no gaps; ``expected_seq`` turns a race into
      a ``ConcurrencyError`` for every writer but one.
    * Appends are idempotent by ``event_id``.
    * Global positions strictly increase in commit order: a reader tailing
      ``read_all`` never skips an event that commits later.
    * Stored events and blobs are never changed or deleted (enforced by the database).
    """

    @abc.abstractmethod
    def create_session(
        self,
        session_id: str | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        parent_session_id: str | None = None,
        fork_seq: int | None = None,
        events: Sequence[Event | dict[str, Any]] = (),
    ) -> SessionInfo:
        """Create a session (and append ``events`` to it) in one transaction.

        Raises:
            SessionExistsError: the id is taken.
            SessionNotFoundError: ``parent_session_id`` does not exist.
            ValidationError: a bad id, fork point or event.
        """

    @abc.abstractmethod
    def get_session(self, session_id: str) -> SessionInfo:
        """The session's row.

        Raises:
            SessionNotFoundError: no such session.
        """

    @abc.abstractmethod
    def list_sessions(self, *, limit: int = 100, after: str | None = None) -> list[SessionInfo]:
        """Sessions ordered by id, ``limit`` at a time, starting after id ``after``.

        Raises:
            ValidationError: ``limit`` is negative or not a 64-bit int.
        """

    @abc.abstractmethod
    def append(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        expected_seq: ExpectedSeq,
    ) -> AppendResult:
        """Append ``events`` atomically after seq ``expected_seq`` (or ``ANY``).

        Returns only after the transaction committed (durability per the backend's
        setting). Retrying the same event ids returns the original result and writes
        nothing, even if the session moved on meanwhile.

        Raises:
            ConcurrencyError: the session's last seq is not ``expected_seq``.
            DuplicateEventError: an event id is stored with other content, in another
                session, or only part of the batch was stored before.
            ValidationError: a bad event; names its index, type and field.
            SessionNotFoundError: no such session.
        """

    @abc.abstractmethod
    def last_seq(self, session_id: str) -> int:
        """The session's last seq (0 when it has no events).

        Raises:
            SessionNotFoundError: no such session.
        """

    @abc.abstractmethod
    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        verify: bool = False,
    ) -> list[RecordedEvent]:
        """The session's events with ``from_seq <= seq <= to_seq``, in seq order.

        With ``verify``, every returned event's hash and link is checked.

        Raises:
            SessionNotFoundError: no such session.
            IntegrityCheckError: ``verify`` found a stored event altered.
            ValidationError: a seq that is not a 64-bit int.
        """

    @abc.abstractmethod
    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Up to ``limit`` events of all sessions with position > ``after_position``, in order.

        Raises:
            ValidationError: ``limit`` is negative, or an argument is not a 64-bit int.
        """

    @abc.abstractmethod
    def max_position(self) -> int:
        """The highest committed global position (0 for an empty store)."""

    @abc.abstractmethod
    def put_blob(self, data: bytes) -> BlobRef:
        """Store ``data`` once under its SHA-256; storing the same bytes again is a no-op."""

    @abc.abstractmethod
    def get_blob(self, sha256: str) -> bytes:
        """The bytes stored under ``sha256``, checked against the hash.

        Raises:
            KeyError: no such blob (a ``LookupError``).
            IntegrityCheckError: the stored bytes do not hash to ``sha256``.
        """

    @abc.abstractmethod
    def put_snapshot(self, snapshot: SnapshotRecord) -> None:
        """Store a projection snapshot; an identical key already stored is left as it is.

        Snapshots are disposable caches: two snapshotters racing on one key both succeed, and
        only the two newest per (session, projection, version, tokenizer) are kept.
        """

    @abc.abstractmethod
    def latest_snapshot(
        self,
        session_id: str,
        projection: str,
        projection_version: int,
        tokenizer: str,
        max_seq: int | None = None,
    ) -> SnapshotRecord | None:
        """The snapshot with the highest seq <= ``max_seq`` for exactly this key, if any."""

    def subscribe(
        self,
        after_position: int = 0,
        *,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
        batch_size: int = 500,
    ) -> Iterator[RecordedEvent]:
        """Yield every event after ``after_position``: history first, then live events.

        A catch-up subscription: it polls the durable log, so there is no gap or duplicate at
        the switch from history to live, and a subscriber that restarts from its own stored
        checkpoint (the position of the last event it *processed*) misses nothing. Ends when
        ``stop`` is set (checked between polls), or runs forever.
        """
        position = after_position
        while stop is None or not stop.is_set():
            batch = self.read_all(position, batch_size)
            for recorded in batch:
                yield recorded
                position = recorded.position
            if len(batch) < batch_size:
                if stop is None:
                    time.sleep(poll_interval)
                else:
                    stop.wait(poll_interval)

    def verify(self, session_id: str) -> VerifyReport:
        """Walk the session's whole hash chain and report the first bad seq, if any."""
        events = self.read(session_id)
        problem = chain_problem(events, GENESIS_HASH)
        if problem is None:
            return VerifyReport(session_id, len(events))
        seq, reason = problem
        return VerifyReport(session_id, len(events), seq, reason)

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. The store cannot be used afterwards."""

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

"""The store contract and the records it returns.

``SessionStore`` is the one seam between sessionstore and a database. Everything above it
(projections, the pipeline, the CLI) talks to this contract and never branches on the
backend it holds.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError as PydanticValidationError

from ..errors import (
    DataCorruptionError,
    SessionErasedError,
    SessionNotFoundError,
    SessionStoreError,
    ValidationError,
)
from ..events import Event
from ..events._base import MAX_JSON_DEPTH, decode_event, nested_deeper_than
from ._codec import unpack_payload
from ._hashing import LEGACY_GENESIS_HASH, SessionIdentity, event_hash, fork_point_hash, session_genesis

if TYPE_CHECKING:
    from ._crypto import KeyProvider
    from ._lineage import SessionLog
    from ._listen import AsyncChangeListener, ChangeListener
    from ._receipts import ErasureReceipt, RetentionPlan
    from ._tokens import TokenCounter

__all__ = [
    "ANY",
    "AppendResult",
    "BlobRef",
    "ChainHead",
    "ExpectedSeq",
    "RecordedEvent",
    "SessionInfo",
    "SessionStore",
    "SessionWrite",
    "SnapshotRecord",
    "VerifyReport",
    "check_int",
    "check_lookup",
    "check_number",
    "check_owner_key",
    "check_session_id",
    "check_seconds",
    "check_store",
    "check_subscription",
    "check_waiting",
    "loaded_payload",
    "stored_event",
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
        if not isinstance(session_id, str):  # repr() of an int past 4,300 digits raises
            shown = f"(a {type(session_id).__name__}, not a str)"
        elif len(session_id) > 100:  # a megabyte of id is not repeated back
            shown = f"{session_id[:64]!r}... ({len(session_id)} characters)"
        else:
            shown = repr(session_id)
        msg = (
            f"invalid session id {shown}: use 1-64 characters of letters, digits, "
            "'.', '_', ':' or '-', starting with a letter or digit"
        )
        raise ValidationError(msg, field="session_id")
    return session_id


def check_lookup(name: str, value: object) -> str:
    """Return ``value`` if it is text a query can look up: a str with no NUL and no lone
    surrogate. For the ids and keys callers look up (``read``, ``get_session``, a cursor): a
    string that names nothing is then simply not found, on every backend.

    Raises:
        ValidationError: otherwise, naming the argument (``SessionInfo`` for a session id: pass
            its ``.id``); the driver's binding error or PostgreSQL's NUL refusal escaped before.
    """
    if not isinstance(value, str):
        hint = " (pass its .id)" if isinstance(value, SessionInfo) else ""
        msg = f"{name} must be a str, not {type(value).__name__}{hint}"
        raise ValidationError(msg, field=name)
    if value.isascii():  # every session id: no surrogate possible, one scan for NUL
        if "\x00" in value:
            raise ValidationError(f"{name} holds a NUL character", field=name)
        return value
    bad = next((c for c in value if c == "\x00" or "\ud800" <= c <= "\udfff"), None)
    if bad == "\x00":
        raise ValidationError(f"{name} holds a NUL character", field=name)
    if bad is not None:
        msg = f"{name} is not valid Unicode (a lone surrogate): {bad!r}"
        raise ValidationError(msg, field=name)
    return value


#: The longest tenant, user or external id (the columns are VARCHAR(255)).
OWNER_KEY_MAX = 255


def _forbidden_in_key(code: int) -> bool:
    """C0 and C1 control characters, DEL, and lone surrogates (not storable as UTF-8)."""
    return code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code < 0xE000


def check_owner_key(name: str, value: object) -> str:
    """Return ``value`` if it is a usable tenant, user or external id: 1-255 characters of valid
    Unicode with no control characters (an e-mail address or a UUID fits; a stray newline does not).

    Raises:
        ValidationError: otherwise, naming the argument.
    """
    if not isinstance(value, str):
        msg = f"{name} must be a str, not {type(value).__name__}"
        raise ValidationError(msg, field=name)
    if not 1 <= len(value) <= OWNER_KEY_MAX:
        msg = f"{name} must be 1-{OWNER_KEY_MAX} characters, not {len(value)}"
        raise ValidationError(msg, field=name)
    bad = next((c for c in value if _forbidden_in_key(ord(c))), None)
    if bad is not None:
        msg = f"{name} {value!r} holds {bad!r}: no control characters or lone surrogates"
        raise ValidationError(msg, field=name)
    return value


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
        # A huge int is described, not printed: str() refuses past 4,300 digits.
        given = str(value) if value.bit_length() <= 128 else f"an int of {value.bit_length()} bits"
        msg = f"{name} must be from {lowest} to 2**63 - 1, not {given}"
        raise ValidationError(msg, field=name)
    return value


def check_number(name: str, value: object, *, finite: bool = True) -> float:
    """Return ``value`` if it is an int or float (not a bool), finite unless ``finite=False``.

    For the numbers of a config: a str or None compared with a number raised TypeError later,
    in the middle of a turn.

    Raises:
        ValidationError: otherwise, naming the argument.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{name} must be a number, not {type(value).__name__}", field=name)
    if isinstance(value, int):
        return check_int(name, value)  # an int past 64 bits means nothing here (nor prints)
    if finite and not math.isfinite(value):
        raise ValidationError(f"{name} must be a finite number, not {value!r}", field=name)
    return value


@dataclass(frozen=True)
class SessionInfo:
    """A session's row: identity, lineage, metadata and owner.

    Attributes:
        tenant, user: who the session belongs to (None when created without them); a fork or
            child session always has its parent's.
        external_id: the caller's own key for it, unique per (tenant, user): see
            ``SessionStore.get_or_create_session``.
    """

    id: str
    created_at: datetime
    parent_session_id: str | None = None
    fork_seq: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    user: str | None = None
    external_id: str | None = None


#: JSON nested deeper than this in a stored payload or metadata is an altered row: appends refuse
#: anything past ``MAX_JSON_DEPTH`` (counted from the event, the margin covers the event itself).
ALTERED_DEPTH = MAX_JSON_DEPTH + 8


@dataclass(frozen=True)
class RecordedEvent:
    """An event as stored: the envelope plus its payload.

    ``event`` decodes (and upcasts) the payload on first access. For an encrypted session,
    ``payload`` is the decrypted text and ``stored_payload`` the sealed text that was hashed;
    otherwise ``stored_payload`` is None and ``payload`` is the text exactly as hashed. An event
    of an erased session (from ``read_all``) has ``erased`` set and its sealed text as
    ``payload``: decoding it raises ``SessionErasedError``.

    A payload stored compressed (store/_codec.py) is decompressed on first access of ``payload``
    (or of anything built from it): a read costs only the payloads its caller looks at. A stored
    payload that does not decompress raises ``DataCorruptionError`` there.
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
    stored_payload: str | None = None
    erased: bool = False
    #: The count was made after COMMIT (``open_store(defer_token_counts=True)``, the default): it
    #: is not part of the row's hash. ``token_count`` is None until a reader with a token counter
    #: counted it (the store's reads fill it in).
    token_count_deferred: bool = False

    if not TYPE_CHECKING:  # hidden from mypy: it would accept any attribute name

        def __getattr__(self, name: str) -> Any:
            # Only reached while ``payload`` is not in the instance's __dict__ yet: a packed row.
            # Two threads may both get here: each decompresses, and either result is the same.
            fields = self.__dict__
            packed = fields.get("_packed")
            if name != "payload" or packed is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            text = unpack_payload(packed, session_id=fields["session_id"], seq=fields["seq"])
            fields["payload"] = text
            return text

    def _check_readable(self) -> None:
        if self.erased:
            raise SessionErasedError(self.session_id, method="shredded", erased_at="an earlier erasure")

    @cached_property
    def event(self) -> Event:
        """The decoded event model (raises UnknownEventTypeError for unknown types,
        SessionErasedError for an erased session's event)."""
        self._check_readable()
        try:
            return decode_event(self.type, self.schema_version, self.payload, self.event_id)
        except SessionStoreError:
            raise
        except (json.JSONDecodeError, PydanticValidationError) as e:
            # Only the payload's own failures are corruption: an upcaster's bug (any other
            # ValueError) is raised as it is, not reported as an altered row.
            raise self._undecodable(e) from None
        except RecursionError:
            if not nested_deeper_than(self.payload, ALTERED_DEPTH):
                raise  # the caller's own stack was deep: not the row's fault
            raise self._undecodable(ValueError("JSON nested too deeply")) from None

    def payload_dict(self) -> dict[str, Any]:
        """The payload as a dict, without decoding into a model."""
        self._check_readable()
        try:
            result = json.loads(self.payload)
        except ValueError as e:
            raise self._undecodable(e) from None
        except RecursionError:
            if not nested_deeper_than(self.payload, ALTERED_DEPTH):
                raise  # the caller's own stack was deep: not the row's fault
            raise self._undecodable(ValueError("JSON nested too deeply")) from None
        if not isinstance(result, dict):
            raise self._undecodable(ValueError("not a JSON object"))
        return result

    def _undecodable(self, error: ValueError) -> DataCorruptionError:
        """A payload that was hashed as a valid event no longer decodes: the row was altered."""
        if isinstance(error, PydanticValidationError):  # its message would quote the payload
            first = error.errors(include_url=False, include_input=False)[0]
            reason = f"{'.'.join(map(str, first['loc'])) or 'payload'}: {first['msg']}"
        else:
            reason = str(error)
        msg = (
            f"session {self.session_id!r}, seq {self.seq}: the stored {self.type} event does not decode "
            f"({reason}); `sessionstore verify` checks the whole log"
        )
        return DataCorruptionError(msg, session_id=self.session_id, seq=self.seq)

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data (``sessionstore events --json``, the server's events)."""
        return {
            "seq": self.seq,
            "session_id": self.session_id,
            "position": self.position,
            "event_id": self.event_id,
            "type": self.type,
            "schema_version": self.schema_version,
            "token_count": self.token_count,
            # True: the count is not part of the hash (that it is deferred is), see ``token_count_deferred``.
            "token_count_deferred": self.token_count_deferred,
            "created_at": self.created_at.isoformat(),
            "hash": self.hash,
            "payload": self.payload_dict(),
        }

    def computed_hash(self) -> str:
        """The hash this row should carry, recomputed from its stored columns."""
        return event_hash(
            self.prev_hash,
            self.session_id,
            self.seq,
            self.event_id,
            self.type,
            self.schema_version,
            None if self.token_count_deferred else self.token_count,
            self.created_at,
            self.payload if self.stored_payload is None else self.stored_payload,
            deferred=self.token_count_deferred,
        )


_new_object = object.__new__


def stored_event(
    session_id: str,
    seq: int,
    position: int,
    event_id: str,
    type_name: str,
    schema_version: int,
    payload: str,
    token_count: int | None,
    prev_hash: str,
    digest: str,
    created_at: datetime,
    packed: object = None,
    token_count_deferred: bool = False,
) -> RecordedEvent:
    """The ``RecordedEvent`` of a stored row, equal to ``RecordedEvent(...)`` of the same values.

    Reads build one per event: filling the instance's ``__dict__`` at once costs half of the
    frozen dataclass's ``__init__``, which sets each of its 13 fields through
    ``object.__setattr__`` (tests/test_read_path.py holds the two equal, field for field).
    ``packed``: the row's ``payload_packed`` (then ``payload`` is ``''``), decompressed into
    ``payload`` on first access. ``token_count_deferred``: the row waits for a count made after
    COMMIT (see the field).
    """
    event: RecordedEvent = _new_object(RecordedEvent)
    event.__dict__.update(
        session_id=session_id,
        seq=seq,
        position=position,
        event_id=event_id,
        type=type_name,
        schema_version=schema_version,
        token_count=token_count,
        prev_hash=prev_hash,
        hash=digest,
        created_at=created_at,
        stored_payload=None,
        erased=False,
        token_count_deferred=token_count_deferred,
    )
    if packed is None:
        event.__dict__["payload"] = payload
    else:
        event.__dict__["_packed"] = packed
    return event


def loaded_payload(event: RecordedEvent) -> str | None:
    """The event's payload text if it is not waiting to be decompressed (None if it is)."""
    text: str | None = event.__dict__.get("payload")
    return text


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
class SessionWrite:
    """One session's part of ``SessionStore.write_sessions``: create it, or append to it.

    Attributes:
        session_id: the session.
        events: its events (for a new session: its first events); ``write_streamed`` draws
            them a batch at a time, so they may come from a generator.
        create: create the session (with ``metadata``, ``parent_session_id``, ``fork_seq``,
            ``tenant``, ``user``, ``external_id``); otherwise append after ``expected_seq``.
        expected_seq: for an append, the session's expected last seq, or ``ANY``.
    """

    session_id: str
    events: Iterable[Event | dict[str, Any]] = ()
    create: bool = False
    expected_seq: ExpectedSeq = "any"
    metadata: dict[str, Any] | None = None
    parent_session_id: str | None = None
    fork_seq: int | None = None
    tenant: str | None = None
    user: str | None = None
    external_id: str | None = None


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
class ChainHead:
    """Where a session's chain ends: its last seq (own numbering) and that event's hash.

    An empty session's head is seq 0 and its genesis (the hash of its identity). Keep heads
    outside the database and pass one to ``SessionStore.verify(head=...)``: it proves the chain
    still holds that event, which no rewrite inside the database can fake.
    """

    session_id: str
    seq: int
    hash: str


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of walking a session's hash chain.

    Attributes:
        first_bad_seq: the first seq that does not verify (None when the chain verifies, or
            when the failure has no seq: an anchored head missing, a deleted sessions row).
        reason: what failed (None when everything verified).
        head: the chain's head hash (None when the chain did not verify).
        identity_bound: False for a chain written before sessions bound their identity
            (id, parent, fork point, creation, metadata) into it: edits to its sessions row
            cannot be detected.
        erasure: the session's erasure receipt, when it was erased. A purged session has no
            events left to check: the receipt explains the gap (its events, head and positions).
    """

    session_id: str
    events_checked: int
    first_bad_seq: int | None = None
    reason: str | None = None
    head: str | None = None
    identity_bound: bool = True
    erasure: ErasureReceipt | None = None

    @property
    def ok(self) -> bool:
        """True when every event's hash and link verified (and the anchored head, if one was given)."""
        return self.reason is None


#: Events ``verify`` reads and checks at a time: a long session's chain is walked in bounded
#: memory (a 67,221-event import held every event, payloads included, at once).
VERIFY_PAGE = 1000
#: The highest seq a read can ask for (a signed 64-bit integer).
_MAX_SEQ = 2**63 - 1

_IDENTITY_CHANGED = (
    "the chain does not start from the session's identity: its sessions row (parent_session_id, "
    "fork_seq, created_at or metadata) or the parent's event at the fork point was changed"
)


def chain_problem(
    events: Sequence[RecordedEvent],
    prev_hash: str | None,
    *,
    from_seq: int | None = None,
    after: RecordedEvent | None = None,
) -> tuple[int, str] | None:
    """The first (seq, reason) where ``events`` break the chain, or None.

    Within a session, global positions must increase with seq (the database assigns them in
    commit order): a swapped ``position`` would reorder ``read_all`` and subscribers.

    Args:
        events: consecutive events of one session in seq order.
        prev_hash: hash of the event before ``events[0]`` (the session's genesis for seq 1),
            or None to trust ``events[0].prev_hash``.
        from_seq: the seq ``events`` must start at (default: whatever ``events[0]`` has).
        after: the event before ``events[0]`` (a walk a page at a time), whose position the
            first must follow.
    """
    expected_prev = prev_hash
    expected_seq = from_seq if from_seq is not None else events[0].seq if events else 1
    previous = after
    for recorded in events:
        if recorded.seq != expected_seq:
            return recorded.seq, f"seq gap: expected {expected_seq}"
        if expected_prev is not None and recorded.prev_hash != expected_prev:
            if recorded.seq == 1:
                return 1, _IDENTITY_CHANGED
            return recorded.seq, "prev_hash does not match the previous event's hash"
        try:
            computed = recorded.computed_hash()
        except DataCorruptionError:  # its compressed payload was altered
            return recorded.seq, "its stored payload does not decompress"
        if computed != recorded.hash:
            return recorded.seq, "stored content does not match its hash"
        if previous is not None and recorded.position <= previous.position:
            reason = (
                f"position {recorded.position} is not after seq {previous.seq}'s position "
                f"{previous.position}: the global order was changed"
            )
            return recorded.seq, reason
        expected_prev = recorded.hash
        expected_seq += 1
        previous = recorded
    return None


def check_subscription(
    after_position: object, stop: object, poll_interval: object, batch_size: object
) -> None:
    """The arguments of ``subscribe`` (sync and async), checked before it reads or listens.

    Raises:
        ValidationError: naming the argument.
    """
    check_int("after_position", after_position)
    check_int("batch_size", batch_size, minimum=1)  # 0 would read nothing, forever
    check_waiting(stop, poll_interval)


def check_seconds(name: str, value: object) -> float:
    """Return ``value`` if it is a number of seconds a wait takes: from 0 to
    ``threading.TIMEOUT_MAX`` (NaN and infinities are refused: the sleep raised on them).

    Raises:
        ValidationError: otherwise, naming the argument.
    """
    seconds = check_number(name, value, finite=False)
    if not 0 <= seconds <= threading.TIMEOUT_MAX:  # NaN and infinities fail too
        raise ValidationError(f"{name} must be a number of seconds >= 0, not {value!r}", field=name)
    return seconds


def _async_store_type() -> type:
    """``AsyncSessionStore``, imported when asked: its module imports this one."""
    from ._async import AsyncSessionStore

    return AsyncSessionStore


def check_store(name: str, value: object) -> SessionStore:
    """Return ``value`` if it is a sync ``SessionStore``: for the public calls that take one,
    before they read or write (a str, a ``Session`` or an async store failed deep inside, or not
    at all).

    Raises:
        ValidationError: otherwise, naming the argument and what to pass instead.
    """
    if isinstance(value, SessionStore):
        return value
    kind = type(value).__name__
    if kind == "Session" and isinstance(getattr(value, "store", None), SessionStore):
        hint = " (pass its .store)"
    elif isinstance(value, _async_store_type()):
        hint = (
            ": this call needs a sync store; open one with sessionstore.open_store, or run the "
            "call inside the async store's run_sync(fn, ...), which hands fn a sync store"
        )
    else:
        hint = ""
    msg = f"{name} must be a sessionstore.SessionStore, not {kind}{hint}"
    raise ValidationError(msg, field=name)


def check_waiting(stop: object, poll_interval: object) -> None:
    """A poller's ``stop`` (an Event, or None) and ``poll_interval`` (``check_seconds``).

    Raises:
        ValidationError: naming the argument.
    """
    check_seconds("poll_interval", poll_interval)
    if stop is not None and not callable(getattr(stop, "is_set", None)):
        msg = f"stop must be an Event (threading or asyncio), not {type(stop).__name__}"
        raise ValidationError(msg, field="stop")


def _check_head(head: object) -> None:
    """An anchored head ``verify`` can compare: a hash (str) or a ``ChainHead``."""
    if isinstance(head, ChainHead):
        check_int("head.seq", head.seq, minimum=0)
        check_lookup("head.hash", head.hash)
    elif not isinstance(head, str):
        msg = f"head must be a hash (str) or a ChainHead, not {type(head).__name__}"
        raise ValidationError(msg, field="head")


def anchor_problem(hashes: dict[int, str], head: str | ChainHead) -> str | None:
    """Why the chain (``hashes``: seq -> hash, 0 the genesis) does not hold ``head``, or None."""
    if isinstance(head, ChainHead):
        last = max(hashes)
        if head.seq > last:
            return (
                f"the log ends at seq {last}, before the anchored head at seq {head.seq}: "
                "events were removed from the end"
            )
        if hashes.get(head.seq) != head.hash:
            return (
                f"seq {head.seq} does not hold the anchored head {head.hash[:16]}: the chain up to it "
                "was rewritten (hashes recomputed) or the session's identity changed"
            )
        return None
    if head not in hashes.values():
        return (
            f"the anchored head {head[:16]} is not in the chain: events were removed from the end, "
            "or the chain was rewritten (hashes recomputed)"
        )
    return None


def session_identity(info: SessionInfo) -> SessionIdentity:
    """The identity a session's chain starts from, as its row holds it."""
    return SessionIdentity(
        info.id,
        info.parent_session_id,
        info.fork_seq,
        info.created_at,
        info.metadata,
        info.tenant,
        info.user,
        info.external_id,
    )


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

    ``append``, ``last_seq`` and ``read`` use the storage numbering: the session's own rows,
    from 1, the numbering the hash chain is over. For a fork that is NOT what users see: its
    visible history is the parent's prefix followed by its own events, numbered through the
    prefix (``visible_log``; ``Session``, ``Conversation``, the views and the CLI use it). The
    two agree for every session that is not a fork.

    An argument of the wrong type is a ``ValidationError`` naming it, before anything is read or
    written: a session id, cursor or key that is not a str (a ``SessionInfo`` passed for its
    ``.id``) or holds NUL, a seq, position or limit that is not a 64-bit int. A str that names no
    session is ``SessionNotFoundError``, as always.
    """

    #: Counts the tokens of appended events (stored in ``token_count``) and of texts the views
    #: measure; None: the store counts nothing and the views estimate ~4 characters a token.
    token_counter: TokenCounter | None = None
    #: Encrypts the sessions this store creates (``open_store(..., encryption=...)``); None: plaintext.
    encryption: KeyProvider | None = None
    #: True: every event ``read`` and ``read_all`` return is checked against its hash and its
    #: link to the event before it in the same read (``DataCorruptionError`` otherwise), so a
    #: reader never hands out an altered event as intact. The command line sets it; ``verify``
    #: walks the whole chain and anchors heads.
    check_reads: bool = False

    def visible_log(self, session_id: str) -> SessionLog:
        """The session's visible history in the numbering users see (a fork's seqs count
        through its parent's prefix); read and append a fork through it, not ``read``/``append``.

        Raises:
            SessionNotFoundError: no such session (or a missing parent).
        """
        from ._lineage import SessionLog  # here: the lineage module is built on this contract

        return SessionLog(self, session_id)

    @abc.abstractmethod
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
        """Create a session (and append ``events`` to it) in one transaction.

        A fork or child session (``parent_session_id``) belongs to its parent's tenant and
        user: left out, they are inherited; given, they must be the parent's.

        Raises:
            SessionExistsError: the id is taken, or (tenant, user, external_id) names another session.
            SessionNotFoundError: ``parent_session_id`` does not exist.
            ValidationError: a bad id, fork point, owner key or event; a tenant or user that is
                not the parent's; an ``external_id`` without a tenant and a user.
        """

    @abc.abstractmethod
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
        """The session (tenant, user, external_id) names, created (with ``metadata`` and
        ``events``) when there is none; ``(info, created)``.

        Race-safe: concurrent callers with the same key, in any process, all get the one session
        a unique index lets exist, and exactly one of them gets ``created`` True. An existing
        session is returned as it is (``metadata``, ``session_id`` and ``events`` are ignored).

        Raises:
            ValidationError: a bad key, id, metadata or event.
            SessionExistsError: ``session_id`` is taken by a session with another key.
        """

    @abc.abstractmethod
    def get_session(self, session_id: str) -> SessionInfo:
        """The session's row.

        Raises:
            SessionNotFoundError: no such session.
        """

    @abc.abstractmethod
    def list_sessions(
        self,
        *,
        limit: int = 100,
        after: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> list[SessionInfo]:
        """Sessions ordered by id, ``limit`` at a time, starting after id ``after``.

        The id order is a stable cursor: pass the last id of a page as ``after`` for the next,
        and sessions created meanwhile never shift or repeat a page. ``tenant`` (and ``user``)
        keep only that tenant's (and user's) sessions; ``user`` needs ``tenant``.

        Raises:
            ValidationError: ``limit`` is negative or not a 64-bit int; a bad tenant or user;
                ``user`` without ``tenant``.
        """

    @abc.abstractmethod
    def append(
        self,
        session_id: str,
        events: Sequence[Event | dict[str, Any]],
        expected_seq: ExpectedSeq,
    ) -> AppendResult:
        """Append ``events`` atomically after seq ``expected_seq`` (or ``ANY``), in the storage
        numbering (for a fork, its own events from 1: use ``visible_log(...).append`` instead).

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
    def write_sessions(self, writes: Sequence[SessionWrite]) -> list[AppendResult]:
        """Create and append to several sessions in ONE transaction: all of it, or nothing.

        Writes apply in order, so a session created earlier in ``writes`` can be the parent of
        a later one. Each append is checked and deduplicated as ``append`` does; a created
        session's result has seqs from 1. For an import of a transcript with its sub-agents, a
        failure in a later session leaves no earlier one half-linked. Appends in it are
        idempotent by event id; a create is not: if the reply to a committed call was lost, a
        retry gets ``SessionExistsError`` — re-read and write what is missing (the importer does).

        Raises:
            SessionExistsError, SessionNotFoundError, ConcurrencyError, DuplicateEventError,
            ValidationError: as ``create_session`` / ``append`` would for that write; nothing of
                any write is kept.
        """

    @abc.abstractmethod
    def write_streamed(
        self, writes: Sequence[SessionWrite], *, batch_size: int = 1000, json_checked: bool = False
    ) -> list[AppendResult]:
        """``write_sessions`` for writes too large to hold: each write's ``events`` may be an
        iterator, drawn ``batch_size`` events at a time inside the ONE transaction.

        ``json_checked=True`` says every value in the events was decoded from JSON text by a
        decoder that refuses NaN, infinities and integers too long to read back, and is nested
        less than ``MAX_JSON_DEPTH`` deep (the importer's first pass checks each line so): the
        store then skips its own walk over every value for those (a sixth of an import's time).
        Lone surrogates are still refused, by the serializer; a value the caller vouched for
        wrongly (a NaN) would be stored as ``null``.

        All or nothing as ``write_sessions``: an event that fails to validate, or an iterator
        that raises, rolls back every write of the call. The writer's turn is held while the
        events are drawn, so other writers wait for the whole call, and only as long as their
        lock wait allows (SQLite's ``busy_timeout``, 30 s; PostgreSQL's ``lock_timeout``, 10 s):
        an agent appending during a long import fails after that wait. On PostgreSQL an
        iterator that pauses longer than ``idle_in_transaction_session_timeout`` (60 s) between
        batches ends the whole call. Unlike ``write_sessions`` it
        is tried once (an iterator cannot be replayed) and an append is not settled against
        stored ids: an append whose ``expected_seq`` is not the head raises ``ConcurrencyError``.

        Raises:
            SessionExistsError, SessionNotFoundError, ConcurrencyError, DuplicateEventError,
            IntegrityError, ValidationError: as ``write_sessions``; nothing of any write is kept.
            Whatever the events' iterator raises, likewise.
        """

    @abc.abstractmethod
    def last_seq(self, session_id: str) -> int:
        """The session's last seq in the storage numbering: how many events it stores itself
        (0 when none). A fork's visible last seq is ``visible_log(session_id).last_seq()``.

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
        """The session's own stored events with ``from_seq <= seq <= to_seq``, in seq order.

        Storage numbering: a fork's own events from 1, without the parent's prefix. Users see
        ``visible_log(session_id).read(...)``, the history numbered through the prefix.

        With ``verify``, every returned event's hash and link is checked.

        Raises:
            SessionNotFoundError: no such session.
            DataCorruptionError: ``verify`` found a stored event altered.
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
    def put_blob(self, data: bytes, *, session_id: str | None = None) -> BlobRef:
        """Store ``data`` once under its SHA-256; storing the same bytes again is a no-op.

        ``session_id`` names the session the blob belongs to. An encrypted store needs it: the
        blob is sealed with that session's key, under a keyed hash of its content instead of the
        SHA-256 (no dedup across sessions, so erasing one session shreds its blobs).

        Raises:
            ValidationError: not bytes, or no ``session_id`` in an encrypted store.
            SessionErasedError: the session was erased.
        """

    @abc.abstractmethod
    def get_blob(self, sha256: str, *, session_id: str | None = None) -> bytes:
        """The bytes stored under ``sha256``, checked against the hash (or, sealed, authenticated
        with the key of ``session_id`` or of one of its parents).

        Raises:
            EncryptionKeyError: the blob is not in the clear, and ``session_id`` (or a parent) is
                encrypted while this store has no key provider (or one that cannot unwrap its key).
            SessionErasedError: the blob's session was erased.
            KeyError: no such blob (a ``LookupError``); without ``session_id`` a sealed blob is
                not found either.
            DataCorruptionError: the stored bytes do not hash to ``sha256``.
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
        listen: bool = True,
    ) -> Iterator[RecordedEvent]:
        """Yield every event after ``after_position``: history first, then live events.

        A catch-up subscription: it reads the durable log, so there is no gap or duplicate at
        the switch from history to live, and a subscriber that restarts from its own stored
        checkpoint (the position of the last event it *processed*) misses nothing. Ends when
        ``stop`` is set (checked while it waits), or runs forever.

        Between reads it waits up to ``poll_interval`` seconds. With ``listen`` (the default)
        on PostgreSQL it wakes as soon as an append commits (LISTEN/NOTIFY on a connection of
        its own, opened before the first read), and polls alone while that connection is down;
        ``listen=False`` and SQLite poll only.

        Raises:
            ValidationError: (at the first ``next``) a position or ``batch_size`` (>= 1) that
                is not a 64-bit int, a ``poll_interval`` that is not a finite number >= 0, or a
                ``stop`` without ``is_set``.
        """
        check_subscription(after_position, stop, poll_interval, batch_size)
        listener = self._change_listener() if listen else None
        try:
            if listener is not None:
                listener.listen()  # before the first read: no commit after it goes unheard
            position = after_position
            while stop is None or not stop.is_set():
                batch = self.read_all(position, batch_size)
                for recorded in batch:
                    yield recorded
                    position = recorded.position
                if len(batch) < batch_size:
                    if listener is not None and listener.listen():
                        listener.wait(poll_interval, stop)
                    elif stop is None:
                        time.sleep(poll_interval)
                    else:
                        stop.wait(poll_interval)
        finally:
            if listener is not None:
                listener.close()

    def _change_listener(self) -> ChangeListener | None:
        """A listener for this store's commit notifications, None where the database has none."""
        return None

    def _async_change_listener(self) -> AsyncChangeListener | None:
        """The async store's listener for them (``AsyncSessionStore.subscribe``), or None."""
        return None

    @abc.abstractmethod
    def orphaned_sessions(self) -> list[str]:
        """Session ids that stored events name but no ``sessions`` row holds, in id order.

        Only tampering makes one (the row was deleted with foreign keys off).
        """

    def genesis(self, session: str | SessionInfo) -> str | None:
        """The ``prev_hash`` the session's first event must carry, from its row (or the row given);
        None when the parent's event at its fork point is missing.

        Raises:
            SessionNotFoundError: no such session.
        """
        info = session if isinstance(session, SessionInfo) else self.get_session(session)

        def lineage(sid: str) -> tuple[str | None, int | None] | None:
            try:
                row = self.get_session(sid)
            except SessionNotFoundError:
                return None
            return row.parent_session_id, row.fork_seq

        def hash_at(sid: str, seq: int) -> str | None:
            found = self.read_stored(sid, seq, seq)
            return found[0].hash if found else None

        point = fork_point_hash(info.parent_session_id, info.fork_seq, lineage, hash_at)
        return None if point is None else session_genesis(session_identity(info), point)

    def _identity_change(self, session_id: str, started_from: str) -> str:
        """What changed in a fork's row, when a plausible earlier row reproduces ``started_from``
        (the genesis its first event holds): ": ..." or ""."""
        info = self.get_session(session_id)
        if info.parent_session_id is None:
            return ""  # id, creation time or metadata: a hash cannot say which
        identity = session_identity(info)
        unforked = dataclasses.replace(identity, parent_session_id=None, fork_seq=None)
        if session_genesis(unforked, "") == started_from:
            return ": it was not a fork or child session when its chain started (parent_session_id set later)"
        if info.fork_seq is None:
            return ""
        try:
            parent_hashes = self._continuous_hashes(info.parent_session_id)
        except SessionNotFoundError:  # no such parent, or a loop of parents
            return ""
        for seq, digest in sorted({0: "", **parent_hashes}.items()):
            if session_genesis(dataclasses.replace(identity, fork_seq=seq), digest) == started_from:
                return f": fork_seq is {info.fork_seq}, but the chain was started at fork point {seq}"
        return ""

    def _continuous_hashes(self, session_id: str) -> dict[int, str]:
        """seq -> hash of the session's whole history, a fork's parent prefix included."""
        return self._hashes_through_forks(session_id, ())

    def _hashes_through_forks(self, session_id: str, forks: tuple[str, ...]) -> dict[int, str]:
        info = self.get_session(session_id)
        base = info.fork_seq if info.parent_session_id is not None and info.fork_seq else 0
        hashes = {}
        if base:
            assert info.parent_session_id is not None
            if info.parent_session_id in (*forks, session_id):  # an altered row: it would never end
                raise SessionNotFoundError(info.parent_session_id)
            parent = self._hashes_through_forks(info.parent_session_id, (*forks, session_id))
            hashes = {k: v for k, v in parent.items() if k <= base}
        hashes.update((e.seq + base, e.hash) for e in self.read_stored(session_id))
        return hashes

    def chain_start(self, session: str | SessionInfo, first: RecordedEvent | None) -> str | None:
        """The ``prev_hash`` seq 1 must carry: the legacy zeros when it has them, else the genesis."""
        if first is not None and first.prev_hash == LEGACY_GENESIS_HASH:
            return LEGACY_GENESIS_HASH
        return self.genesis(session)

    def head(self, session_id: str) -> ChainHead:
        """Where the session's chain ends now: keep it outside the database to check later.

        Raises:
            SessionNotFoundError: no such session.
            DataCorruptionError: an empty fork whose parent's event at the fork point is missing.
        """
        last = self.last_seq(session_id)
        if last:
            return ChainHead(session_id, last, self.read_stored(session_id, last, last)[0].hash)
        genesis = self.genesis(session_id)
        if genesis is None:
            msg = f"session {session_id!r}: the parent's event at its fork point is missing"
            raise DataCorruptionError(msg, session_id=session_id)
        return ChainHead(session_id, 0, genesis)

    def verify(self, session_id: str, *, head: str | ChainHead | None = None) -> VerifyReport:
        """Walk the session's whole hash chain and report the first bad seq, if any.

        Also checks that seq 1 starts from the session's identity (its ``sessions`` row), that
        global positions increase with seq, and, given ``head`` (a hash or ``ChainHead`` kept
        outside the database), that the chain still holds that event.

        An erased session reports its receipt (``erasure``): a shredded one's chain is walked over
        the ciphertext as always and must end at the receipt's head; a purged one has nothing
        left to walk, and the receipt says what was there (given ``head``, it must be the
        receipt's).

        Raises:
            SessionNotFoundError: no such session (neither a row, nor events, nor a receipt).
            ValidationError: a ``session_id`` or ``head`` of the wrong type.
        """
        check_lookup("session_id", session_id)
        if head is not None:
            _check_head(head)
        receipt = self.erasure(session_id)
        try:
            info = self.get_session(session_id)
        except SessionNotFoundError:
            if receipt is not None and receipt.method == "purged":
                return self._verify_purged(receipt, head)
            events = self.read_stored(session_id)  # raises when there are no events either
            reason = f"{len(events)} events but no sessions row: the session's row was deleted"
            return VerifyReport(session_id, len(events), None, reason)
        try:
            report = self._verify_chain(info, head)
        except SessionNotFoundError:  # purged while its chain was walked, a page at a time
            receipt = self.erasure(session_id)
            if receipt is None or receipt.method != "purged":
                raise
            return self._verify_purged(receipt, head)
        except DataCorruptionError as e:  # a row no event can be read from (a TEXT seq, say)
            return VerifyReport(session_id, 0, e.seq, str(e))
        if receipt is None:
            return report
        if report.ok and report.head != receipt.head_hash:
            reason = (
                f"the chain ends at {str(report.head)[:16]}, not at the head its erasure receipt holds "
                f"({receipt.head_hash[:16]}): the log changed after the erasure, or the receipt did"
            )
            report = dataclasses.replace(report, reason=reason, head=None)
        return dataclasses.replace(report, erasure=receipt)

    def _verify_purged(self, receipt: ErasureReceipt, head: str | ChainHead | None) -> VerifyReport:
        """The report of a purged session: its receipt, checked against an anchored head."""
        reason = None
        if head is not None:
            anchored = head.hash if isinstance(head, ChainHead) else head
            if anchored != receipt.head_hash:
                reason = (
                    f"the session was purged at head {receipt.head_hash[:16]}, not at the anchored head "
                    f"{anchored[:16]}: events were appended after the anchor, or the receipt was changed"
                )
        return VerifyReport(
            receipt.session_id,
            0,
            None,
            reason,
            head=receipt.head_hash if reason is None else None,
            erasure=receipt,
        )

    def _verify_chain(self, info: SessionInfo, head: str | ChainHead | None) -> VerifyReport:
        """``verify`` of a session that has its row, walked ``VERIFY_PAGE`` events at a time."""
        session_id = info.id
        pages = self._stored_pages(session_id, self.last_seq(session_id))
        first_page = next(pages, [])
        first = first_page[0] if first_page else None
        start = self.chain_start(info, first)
        legacy = start == LEGACY_GENESIS_HASH
        if start is None:
            reason = (
                f"fork point seq {info.fork_seq} is not in the log of parent {info.parent_session_id!r}: "
                "the sessions row or the parent's log was changed"
            )
            total = len(first_page) + sum(len(page) for page in pages)
            return VerifyReport(session_id, total, 1 if first else None, reason, identity_bound=not legacy)
        # Only the hashes an anchor is checked against are kept: a seq's, or every one for a hash.
        wanted = head.seq if isinstance(head, ChainHead) else None
        hashes: dict[int, str] = {0: start}
        total = 0
        problem: tuple[int, str] | None = None
        previous: RecordedEvent | None = None  # the last event checked
        for page in itertools.chain([first_page], pages):
            total += len(page)
            if problem is not None or not page:
                continue  # counting the events past a break (the report counts them all)
            expected, seq = (previous.hash, previous.seq + 1) if previous is not None else (start, 1)
            problem = chain_problem(page, expected, from_seq=seq, after=previous)
            if head is not None:
                hashes.update((e.seq, e.hash) for e in page if wanted is None or e.seq == wanted)
            previous = page[-1]
        if problem is not None:
            seq, reason = problem
            if reason == _IDENTITY_CHANGED and first is not None:
                reason += self._identity_change(session_id, first.prev_hash)
            return VerifyReport(session_id, total, seq, reason, identity_bound=not legacy)
        if head is not None:
            if previous is not None:
                hashes.setdefault(previous.seq, previous.hash)  # ``anchor_problem`` reads the last seq
            anchor = anchor_problem(hashes, head)
            if anchor is not None:
                return VerifyReport(session_id, total, None, anchor, identity_bound=not legacy)
        last = previous.hash if previous is not None else start
        return VerifyReport(session_id, total, head=last, identity_bound=not legacy)

    def _stored_pages(self, session_id: str, last: int) -> Iterator[list[RecordedEvent]]:
        """The session's stored events, ``VERIFY_PAGE`` seqs at a time through seq ``last``
        (its highest when the walk began), then any row past it.

        A page that does not hold exactly its seqs was altered (a row deleted, or a seq forged
        between two others: SQLite keeps a REAL such as 5.5): the rest is then read in one go,
        unbounded, as the walk before paging read everything, so the break is reported at the
        row where it is. So is a highest seq past 2**63 - 1 (a forged REAL): one read of it all.
        The last read takes every row from ``last`` on: events appended meanwhile (checked
        too), and forged seqs past the last whole one (10.5 after 10).
        """
        if last > _MAX_SEQ:
            yield self.read_stored(session_id)
            return
        start, seen = 1, None
        while start <= last:
            end = min(last, start + VERIFY_PAGE - 1)
            page = self.read_stored(session_id, start, end)
            if len(page) != end - start + 1:
                yield self.read_stored(session_id, start)
                return
            yield page
            start, seen = end + 1, page[-1].event_id
        tail = self.read_stored(session_id, max(last, 1))
        yield tail[1:] if tail and tail[0].event_id == seen else tail

    def read_stored(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> list[RecordedEvent]:
        """The session's events exactly as stored and hashed: an encrypted session's payloads stay
        sealed (no key is needed), and an erased session's events are still returned (``erased``).
        What ``verify`` walks. Backends without encryption return ``read``.

        Raises:
            SessionNotFoundError: no such session.
        """
        return self.read(session_id, from_seq, to_seq)

    # -- erasure (docs/storage.md "Erasure and retention") --

    @abc.abstractmethod
    def erase(self, session_id: str, *, reason: str, with_forks: bool = False) -> list[ErasureReceipt]:
        """Erase the session: shred it (encrypted: destroy its key) or purge it (plaintext: remove
        its rows through the guarded path), drop its snapshots and record a receipt, in one
        transaction. ``with_forks`` erases its forks and children with it; without, a session
        that has any is refused. Erasing an erased session returns its receipt again.

        Raises:
            SessionNotFoundError: no such session.
            ErasureRefusedError: forks or children not yet erased, and not ``with_forks``.
            ValidationError: a bad id or an empty reason.
        """

    @abc.abstractmethod
    def erasure(self, session_id: str) -> ErasureReceipt | None:
        """The session's erasure receipt, or None when it was not erased."""

    @abc.abstractmethod
    def erasures(self, *, limit: int = 1000, after: str | None = None) -> list[ErasureReceipt]:
        """Erasure receipts in session id order, ``limit`` at a time, after id ``after``."""

    @abc.abstractmethod
    def descendants(self, session_id: str) -> list[str]:
        """The session's forks and children, and theirs, nearest first."""

    @abc.abstractmethod
    def retention_plan(
        self, older_than: timedelta, *, now: datetime | None = None, tenant: str | None = None
    ) -> RetentionPlan:
        """Which sessions a retention of ``older_than`` (since their last activity) erases, and
        which it keeps because a fork or child of theirs is still active (or was shredded
        before and still names them)."""

    @abc.abstractmethod
    def purge_expired(
        self,
        older_than: timedelta,
        *,
        reason: str,
        dry_run: bool = False,
        now: datetime | None = None,
        tenant: str | None = None,
    ) -> RetentionPlan:
        """Erase what ``retention_plan`` selects (nothing with ``dry_run``), with receipts."""

    def store_token_counts(self) -> int:
        """Store the token counts this store's reads made after the events' COMMIT that no write
        stored along yet (``open_store(defer_token_counts=True)``); returns how many. A store
        without deferred counts has nothing to store."""
        return 0

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. The store cannot be used afterwards."""

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

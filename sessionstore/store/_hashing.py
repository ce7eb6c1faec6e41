"""The per-session hash chain that makes tampering with stored events evident.

Each event's hash covers the previous event's hash and the exact stored column values,
payload text included, so flipping one byte anywhere breaks the chain at that seq. A count made
after COMMIT is not in the row: the hash holds that it is deferred instead (``DEFERRED_COUNT``).

The chain starts from the session's *genesis*: a hash of what the session is (its id,
parent, fork point, creation time and metadata, and for a fork the hash of the parent's event
at the fork point). The ``sessions`` row is not otherwise hashed, so this is what makes an edit
to it (a fork re-pointed at another history, say) break the chain at seq 1. A session's tenant,
user and external id are part of what it is: when any is set, the genesis binds them too, so
moving a session to another tenant or user breaks its chain. A session with none of them hashes
exactly as before they existed, so chains written earlier still verify. Chains written
before identities were bound start from ``LEGACY_GENESIS_HASH`` instead; they still verify,
without that protection (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "DEFERRED_COUNT",
    "LEGACY_GENESIS_HASH",
    "SessionIdentity",
    "EventHasher",
    "as_utc",
    "batch_hasher",
    "event_hash",
    "fork_point_hash",
    "session_genesis",
]

#: ``prev_hash`` of seq 1 in chains written before the session's identity was bound into it.
LEGACY_GENESIS_HASH = "0" * 64
#: Leads the genesis input, so a genesis can never equal an event hash of the same fields.
_GENESIS_TAG = "sessionstore-session-v2"
#: Leads the genesis of a session with a tenant, user or external id (revision 0004).
_OWNED_GENESIS_TAG = "sessionstore-session-v3"
#: What an event's hash holds in place of its count when the count is deferred (made after
#: COMMIT, kept in ``token_counts`` outside the chain): the row's ``token_count_deferred`` flag
#: is bound, so clearing it (the count would vanish from every read) or setting it on a row
#: without a count (readers would count it) breaks the hash. Never a number, so it stands for
#: no count; a row without the flag, every row written before revision 0007 included, hashes
#: its count ("" for none) as before.
DEFERRED_COUNT = "deferred"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def as_utc(moment: datetime) -> datetime:
    """The same instant as an aware UTC datetime (SQLite hands back naive UTC values)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def event_hash(
    prev_hash: str,
    session_id: str,
    seq: int,
    event_id: str,
    type_name: str,
    schema_version: int,
    token_count: int | None,
    created_at: datetime,
    payload: str,
    *,
    deferred: bool = False,
) -> str:
    """SHA-256 (hex) of one event's stored columns chained to ``prev_hash``.

    Args:
        token_count: the row's own count (None when it has none).
        deferred: the row's ``token_count_deferred`` flag as readers take it (set, and no count
            of its own): the hash then holds ``DEFERRED_COUNT`` in place of a count.
    """
    return batch_hasher(session_id, created_at)(
        prev_hash, seq, event_id, type_name, schema_version, token_count, deferred, payload
    )


#: ``event_hash`` with the session and the creation time bound: (prev_hash, seq, event_id,
#: type, schema_version, token_count, deferred, payload) -> hex digest.
EventHasher = Callable[[str, int, str, str, int, int | None, bool, str], str]


def batch_hasher(session_id: str, created_at: datetime) -> EventHasher:
    """``event_hash`` for the events of one batch (one session, one creation time).

    What every event of the batch shares is formatted once: a 100-event append hashes each
    event without recomputing the timestamp's microseconds.
    """
    micros = str((as_utc(created_at) - _EPOCH) // _MICROSECOND)
    sha256 = hashlib.sha256

    def hash_event(
        prev_hash: str,
        seq: int,
        event_id: str,
        type_name: str,
        schema_version: int,
        token_count: int | None,
        deferred: bool,
        payload: str,
    ) -> str:
        tokens = DEFERRED_COUNT if deferred else "" if token_count is None else str(token_count)
        # \x1f separates fields and cannot occur in ids, types or numbers; the payload comes last.
        header = (
            f"{prev_hash}\x1f{session_id}\x1f{seq}\x1f{event_id}\x1f{type_name}\x1f"
            f"{schema_version}\x1f{tokens}\x1f{micros}\x1e"
        )
        digest = sha256(header.encode())
        digest.update(payload.encode())
        return digest.hexdigest()

    return hash_event


@dataclass(frozen=True)
class SessionIdentity:
    """The columns of a ``sessions`` row that say what the session is."""

    session_id: str
    parent_session_id: str | None
    fork_seq: int | None
    created_at: datetime
    metadata: dict[str, Any]
    tenant: str | None = None
    user: str | None = None
    external_id: str | None = None

    @property
    def owned(self) -> bool:
        """True when the session has a tenant, a user or an external id (bound into its genesis)."""
        return (self.tenant, self.user, self.external_id) != (None, None, None)


def session_genesis(identity: SessionIdentity, fork_point: str) -> str:
    """SHA-256 (hex) of the session's identity: ``prev_hash`` of its first event.

    Args:
        fork_point: ``fork_point_hash`` of the session ("" when it shares no parent prefix).
    """
    micros = (as_utc(identity.created_at) - _EPOCH) // _MICROSECOND
    fork_seq = "" if identity.fork_seq is None else str(identity.fork_seq)
    fields: tuple[str, ...] = (
        _OWNED_GENESIS_TAG if identity.owned else _GENESIS_TAG,
        identity.session_id,
        identity.parent_session_id or "",
        fork_seq,
        str(micros),
        fork_point,
    )
    if identity.owned:
        # Keys are never empty and hold no control characters, so "" stands for None unambiguously.
        fields += (identity.tenant or "", identity.user or "", identity.external_id or "")
    # Metadata in a fixed canonical form (not the stored text): the row's JSON, whatever its spacing.
    meta = json.dumps(identity.metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(("\x1f".join(fields) + "\x1e").encode())
    digest.update(meta.encode())
    return digest.hexdigest()


def fork_point_hash(
    parent_session_id: str | None,
    fork_seq: int | None,
    lineage: Callable[[str], tuple[str | None, int | None] | None],
    hash_at: Callable[[str, int], str | None],
) -> str | None:
    """The hash of the parent's event at ``fork_seq`` (in its continuous numbering), or None.

    "" when there is no shared prefix (no parent, no fork point, or ``fork_seq`` 0); None when
    the event is not there (a missing row or event, or a cycle of parents).

    Args:
        lineage: a session's (parent_session_id, fork_seq), or None when it has no row.
        hash_at: the hash of a session's own event at a seq, or None.
    """
    if parent_session_id is None or not fork_seq:
        return ""
    session = parent_session_id
    # Each ancestor is looked up once: one seen again means an altered row made the ancestry
    # loop (A's parent is B, B's is A), found on the second lookup instead of walking on.
    seen: set[str] = set()
    while session not in seen:
        seen.add(session)
        row = lineage(session)
        if row is None:
            return None
        parent, base = row
        base = base if parent is not None and base is not None else 0
        if fork_seq > base:  # the parent's own event; below its base it is the grandparent's
            return hash_at(session, fork_seq - base)
        if parent is None:
            return None
        session = parent
    return None

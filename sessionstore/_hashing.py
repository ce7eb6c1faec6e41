"""The per-session hash chain that makes tampering with stored events evident.

Each event's hash covers the previous event's hash and the exact stored column values,
payload text included, so flipping one byte anywhere breaks the chain at that seq.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

__all__ = ["GENESIS_HASH", "as_utc", "event_hash"]

#: ``prev_hash`` of a session's first event.
GENESIS_HASH = "0" * 64

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
) -> str:
    """SHA-256 (hex) of one event's stored columns chained to ``prev_hash``."""
    micros = (as_utc(created_at) - _EPOCH) // _MICROSECOND
    tokens = "" if token_count is None else str(token_count)
    # \x1f separates fields and cannot occur in ids, types or numbers; the payload comes last.
    fields = (prev_hash, session_id, str(seq), event_id, type_name, str(schema_version), tokens, str(micros))
    header = "\x1f".join(fields) + "\x1e"
    digest = hashlib.sha256(header.encode())
    digest.update(payload.encode())
    return digest.hexdigest()

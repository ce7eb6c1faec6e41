"""What an erasure leaves behind: its receipt, and what a retention run decided."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = ["ErasureMethod", "ErasureReceipt", "RetentionPlan"]

#: ``shredded``: encrypted, its data key destroyed (the ciphertext stays, the chain verifies);
#: ``purged``: a plaintext session's rows removed by the guarded purge.
ErasureMethod = Literal["shredded", "purged"]


@dataclass(frozen=True)
class ErasureReceipt:
    """The append-only record of one erased session.

    Attributes:
        session_id: the session erased.
        method: ``"shredded"`` or ``"purged"`` (see ``ErasureMethod``).
        reason: why, as the caller gave it (keep personal data out of it: it is not erased).
        erased_at: when (UTC).
        parent_session_id: its parent, for a fork or child session.
        head_hash: its chain's head when erased (the last event's hash; the genesis when empty):
            compare it with a head kept outside the database to prove what was erased.
        event_count: how many events of its own it had.
        first_position, last_position: the global positions those events held (None when it had
            none): a purge leaves exactly this gap in ``read_all``.
        snapshots_dropped: projection snapshots deleted.
        blobs_removed: blobs only it referenced, deleted (purge only: a shredded session's sealed
            blobs stay, unreadable).
    """

    session_id: str
    method: ErasureMethod
    reason: str
    erased_at: datetime
    parent_session_id: str | None
    head_hash: str
    event_count: int
    first_position: int | None
    last_position: int | None
    snapshots_dropped: int
    blobs_removed: int

    def to_dict(self) -> dict[str, Any]:
        """The receipt as a JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "method": self.method,
            "reason": self.reason,
            "erased_at": self.erased_at.isoformat(),
            "parent_session_id": self.parent_session_id,
            "head_hash": self.head_hash,
            "event_count": self.event_count,
            "first_position": self.first_position,
            "last_position": self.last_position,
            "snapshots_dropped": self.snapshots_dropped,
            "blobs_removed": self.blobs_removed,
        }

    def summary(self) -> str:
        """One line: what was erased, how, when and why."""
        positions = ""
        if self.first_position is not None:
            positions = f", positions {self.first_position}-{self.last_position}"
        return (
            f"erased ({self.method} {self.erased_at.isoformat(timespec='seconds')}): "
            f"{self.event_count} events{positions}, head {self.head_hash[:16]}, reason: {self.reason}"
        )


@dataclass(frozen=True)
class RetentionPlan:
    """What a retention policy selects: sessions to erase, and sessions it must keep.

    Attributes:
        expired: sessions whose last activity is before the cutoff, in erasure groups: a
            session and every fork or child of it (all expired too) are erased together.
        kept: expired sessions kept because a fork or child of theirs is still active, or
            was shredded before and still names them, mapped to those descendants.
        receipts: the erasures done (empty for a dry run).
    """

    cutoff: datetime
    expired: tuple[str, ...]
    kept: dict[str, tuple[str, ...]]
    receipts: tuple[ErasureReceipt, ...] = ()

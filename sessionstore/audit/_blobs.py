"""``verify``'s blob check: every blob a session's events name is there and is what was stored.

Blobs are content-addressed (``put_blob``: keyed by the SHA-256 of their bytes) and outside the
hash chain: the chain proves that an event names a blob, not that the blob is still there.
``get_blob`` notices a replaced blob only when something reads it; this check reads each blob
the session's own events name (``ToolResultPersisted``, ``FileBackedUp``; a fork's prefix is
its parent's to check), which recomputes its hash (and opens a sealed one with the session's
key), so a blob deleted or replaced behind the store fails ``verify`` at the seq naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DataCorruptionError
from ..events import FileBackedUp, ToolResultPersisted
from ..projections._base import read_pages
from ..store import SessionStore

__all__ = ["BlobCheck", "check_blobs"]


@dataclass(frozen=True)
class BlobCheck:
    """What reading a session's blobs found.

    Attributes:
        checked: distinct blobs read.
        problems: ``(seq, sha256, what is wrong)`` of each blob missing or not what was stored.
    """

    checked: int
    problems: tuple[tuple[int, str, str], ...] = ()


def check_blobs(store: SessionStore, session_id: str) -> BlobCheck:
    """Read every blob the session's own events name, each once.

    Raises:
        SessionNotFoundError: no such session.
    """
    seen: set[str] = set()
    problems: list[tuple[int, str, str]] = []
    for record in read_pages(lambda start, end: store.read(session_id, start, end), 1, None):
        event = record.event
        if not isinstance(event, ToolResultPersisted | FileBackedUp) or event.blob_sha256 is None:
            continue
        sha = event.blob_sha256
        if sha in seen:
            continue
        seen.add(sha)
        try:
            store.get_blob(sha, session_id=session_id)
        except KeyError:
            problems.append((record.seq, sha, "missing"))
        except DataCorruptionError as e:
            problems.append((record.seq, sha, str(e)))
    return BlobCheck(len(seen), tuple(problems))

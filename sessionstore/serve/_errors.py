"""The library's typed errors as JSON with an HTTP status: the one place the server translates them.

The body is ``{"error": {"type": "ConcurrencyError", "message": "...", ...}}``: the class name a
library caller would catch, its message, and the context attributes it carries (``field``,
``session_id``, ``expected``, ``actual``) when they are set. A message naming the server's
database file names it without its path; a storage failure's message (a driver's, naming the
database server's address and port) is not sent at all: ``withheld`` says what is instead.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    AccessDeniedError,
    BlockingLimitError,
    CompactionDisabledError,
    CompactionRevertTooLargeError,
    ConcurrencyError,
    DatabaseError,
    DatabaseFileGoneError,
    DatabaseNotFoundError,
    DataCorruptionError,
    DuplicateEventError,
    EncryptionKeyError,
    ErasureRefusedError,
    InvalidRequestError,
    MissingDependencyError,
    OperationalError,
    SessionErasedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    SummaryFailedError,
    ValidationError,
)

__all__ = ["error_body", "http_status", "withheld"]

#: Most specific first: the first class the error is an instance of gives the status.
STATUS: tuple[tuple[type[SessionStoreError], int], ...] = (
    (SessionErasedError, 410),  # Gone: the receipt says when and why
    (SessionNotFoundError, 404),
    (DatabaseNotFoundError, 404),
    (ValidationError, 422),
    (InvalidRequestError, 422),
    (ConcurrencyError, 409),
    (DuplicateEventError, 409),
    (SessionExistsError, 409),
    (ErasureRefusedError, 409),
    (CompactionDisabledError, 409),
    (CompactionRevertTooLargeError, 409),
    (BlockingLimitError, 409),
    (AccessDeniedError, 403),
    (EncryptionKeyError, 423),  # Locked: encrypted, and this server has no key that opens it
    (SummaryFailedError, 502),  # the summarizing model did not give a usable summary
    (OperationalError, 503),  # the database is unavailable: retry later
    (MissingDependencyError, 501),
    (DataCorruptionError, 500),
)

#: Context attributes some errors carry; sent when present.
_CONTEXT = (
    "field",
    "index",
    "session_id",
    "seq",
    "expected",
    "actual",
    "event_id",
    "used",
    "needed",
    "limit",
)


#: Errors whose message names a file of the server's (``path``): a client is told the kind of
#: trouble, not where the database lives.
_SERVER_FILES = (DatabaseFileGoneError, DatabaseNotFoundError)


def withheld(error: SessionStoreError) -> str | None:
    """What a client is told instead of a storage failure's message; None: its message is sent.

    A ``DatabaseFileGoneError``'s message is sent, its path withheld (``error_body``).
    """
    if isinstance(error, _SERVER_FILES) or not isinstance(error, DatabaseError) or http_status(error) < 500:
        return None
    if isinstance(error, OperationalError):
        return "database unavailable: try again later (the server's log has the details)"
    return "database error (the server's log has the details)"


def http_status(error: SessionStoreError) -> int:
    """The HTTP status for ``error``: 4xx for the caller's input, 5xx for the server's state."""
    return next((status for kind, status in STATUS if isinstance(error, kind)), 500)


def error_body(error: SessionStoreError) -> dict[str, Any]:
    """``{"error": {"type", "message", ...context}}`` for ``error``."""
    message = str(error)
    path = getattr(error, "path", None)
    if isinstance(error, _SERVER_FILES) and isinstance(path, str) and path:
        message = message.replace(path, "(path withheld)")
    body: dict[str, Any] = {"type": type(error).__name__, "message": message}
    for name in _CONTEXT:
        value = getattr(error, name, None)
        if isinstance(value, str | int | float | bool):
            body[name] = value
    return {"error": body}

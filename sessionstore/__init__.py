"""sessionstore: the durable, event-sourced session backend for agents on Anthropic's Messages API.

Every message, tool result and context operation is an append-only event in SQLite (the
embedded default) or PostgreSQL; what the model sees is a deterministic projection of the log.

    >>> import sessionstore
    >>> store = sessionstore.open_store(":memory:")
    >>> started = sessionstore.SessionStarted(model="claude-sonnet-4-5")
    >>> session = store.create_session(events=[started])
    >>> hello = sessionstore.MessageAppended(role="user", content="hi")
    >>> store.append(session.id, [hello], expected_seq=1).seqs
    (2,)
"""

from __future__ import annotations

from ._config import default_database_path, resolve_url
from ._errors import (
    AppendOnlyViolation,
    ConcurrencyError,
    DatabaseError,
    DuplicateEventError,
    IntegrityCheckError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    SchemaOutOfDateError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    UnknownEventTypeError,
    ValidationError,
)
from ._events import (
    AnyEvent,
    ContentBlock,
    Event,
    MessageAppended,
    QuerySource,
    SessionStarted,
    UsageRecorded,
    parse_event,
    register_event,
    register_upcaster,
)
from ._migrate import SCHEMA_REVISION
from ._open import open_store
from ._store import (
    ANY,
    AppendResult,
    BlobRef,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    VerifyReport,
)
from ._tokens import TiktokenCounter, TokenCounter
from .backends import PostgresSessionStore, SQLiteSessionStore

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "AnyEvent",
    "AppendOnlyViolation",
    "AppendResult",
    "BlobRef",
    "ConcurrencyError",
    "ContentBlock",
    "DatabaseError",
    "DuplicateEventError",
    "Event",
    "ExpectedSeq",
    "IntegrityCheckError",
    "IntegrityError",
    "MessageAppended",
    "OperationalError",
    "PostgresSessionStore",
    "ProgrammingError",
    "QuerySource",
    "RecordedEvent",
    "SCHEMA_REVISION",
    "SQLiteSessionStore",
    "SchemaOutOfDateError",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStarted",
    "SessionStore",
    "SessionStoreError",
    "TiktokenCounter",
    "TokenCounter",
    "UnknownEventTypeError",
    "UsageRecorded",
    "ValidationError",
    "VerifyReport",
    "default_database_path",
    "open_store",
    "parse_event",
    "register_event",
    "register_upcaster",
    "resolve_url",
]

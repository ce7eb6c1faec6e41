"""sessionstore: the durable, event-sourced session backend for agents on Anthropic's Messages API.

Every message, tool result and context operation is an append-only event in SQLite (the
embedded default) or PostgreSQL; what the model sees is a deterministic projection of the log.

    >>> import sessionstore
    >>> store = sessionstore.open_store(":memory:")
    >>> started = sessionstore.SessionStarted(model="claude-sonnet-5-5")
    >>> session = store.create_session(events=[started])
    >>> hello = sessionstore.MessageAppended(role="user", content="hi")
    >>> store.append(session.id, [hello], expected_seq=1).seqs
    (2,)
"""

from __future__ import annotations

from ._api_context import CLEARED_PLACEHOLDER, INTERRUPTED_TOOL_RESULT, LEADING_USER_MARKER
from ._config import default_database_path, resolve_url
from ._context_events import (
    ContextEditReverted,
    ContextServed,
    MicrocompactApplied,
    ServerEditsApplied,
    SnipApplied,
    ToolResultPersisted,
)
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
    ContextConfigured,
    Event,
    MessageAppended,
    QuerySource,
    SessionStarted,
    SubagentStarted,
    UsageRecorded,
    parse_event,
    register_event,
    register_upcaster,
)
from ._migrate import SCHEMA_REVISION
from ._open import open_store
from ._pipeline import (
    COMPACTABLE_TOOLS,
    CONTEXT_MANAGEMENT_BETA,
    STAGE_ORDER,
    BlockingLimitError,
    BudgetConfig,
    MicrocompactConfig,
    Pipeline,
    PipelineConfig,
    PreparedRequest,
    SnipConfig,
    StageReport,
    microcompact,
    persisted_preview,
    record_applied_edits,
    revert,
    snip,
)
from ._projection import Projection, fold, register_projection
from ._session import DEFAULT_BLOCK_OVERHEAD, DEFAULT_CALIBRATION, Session, SessionConfig
from ._store import (
    ANY,
    AppendResult,
    BlobRef,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    SnapshotRecord,
    VerifyReport,
)
from ._tokens import TiktokenCounter, TokenCounter
from ._transcript import TranscriptEntry
from ._validate import InvalidRequestError, RequestProblem, request_problems, validate_request
from ._window import (
    DEFAULT_MODEL_LIMITS,
    ModelLimits,
    TokenState,
    TokenWindow,
    WindowConfig,
    model_limits,
    token_state,
    token_window,
)
from .backends import PostgresSessionStore, SQLiteSessionStore

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "AnyEvent",
    "AppendOnlyViolation",
    "AppendResult",
    "BlobRef",
    "BlockingLimitError",
    "BudgetConfig",
    "CLEARED_PLACEHOLDER",
    "COMPACTABLE_TOOLS",
    "CONTEXT_MANAGEMENT_BETA",
    "ConcurrencyError",
    "ContentBlock",
    "ContextConfigured",
    "ContextEditReverted",
    "ContextServed",
    "DEFAULT_BLOCK_OVERHEAD",
    "DEFAULT_CALIBRATION",
    "DEFAULT_MODEL_LIMITS",
    "DatabaseError",
    "DuplicateEventError",
    "Event",
    "ExpectedSeq",
    "INTERRUPTED_TOOL_RESULT",
    "IntegrityCheckError",
    "IntegrityError",
    "InvalidRequestError",
    "LEADING_USER_MARKER",
    "MessageAppended",
    "MicrocompactApplied",
    "MicrocompactConfig",
    "ModelLimits",
    "OperationalError",
    "Pipeline",
    "PipelineConfig",
    "PostgresSessionStore",
    "PreparedRequest",
    "ProgrammingError",
    "Projection",
    "QuerySource",
    "RecordedEvent",
    "RequestProblem",
    "SCHEMA_REVISION",
    "SQLiteSessionStore",
    "STAGE_ORDER",
    "SchemaOutOfDateError",
    "ServerEditsApplied",
    "Session",
    "SessionConfig",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStarted",
    "SessionStore",
    "SessionStoreError",
    "SnapshotRecord",
    "SnipApplied",
    "SnipConfig",
    "StageReport",
    "SubagentStarted",
    "TiktokenCounter",
    "TokenCounter",
    "TokenState",
    "TokenWindow",
    "ToolResultPersisted",
    "TranscriptEntry",
    "UnknownEventTypeError",
    "UsageRecorded",
    "ValidationError",
    "VerifyReport",
    "WindowConfig",
    "default_database_path",
    "fold",
    "microcompact",
    "model_limits",
    "open_store",
    "parse_event",
    "persisted_preview",
    "record_applied_edits",
    "register_event",
    "register_projection",
    "register_upcaster",
    "request_problems",
    "resolve_url",
    "revert",
    "snip",
    "token_state",
    "token_window",
    "validate_request",
]

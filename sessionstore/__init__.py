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

The facade offers the names a user needs (``__all__``, listed by layer in docs/architecture.md
"The facade"); every other public name is imported from its layer package, e.g.
``from sessionstore.pipeline import snip`` or ``from sessionstore.errors import DuplicateEventError``.
"""

from __future__ import annotations

from .agent import (
    AsyncConversation,
    Conversation,
    TokenBudget,
    spawn_subagent,
)
from .audit import (
    AuditReport,
    audit,
    served_request,
)
from .checkpoints import (
    FileHistory,
)
from .claude_code import (
    export_claude_code,
    import_claude_code,
    write_claude_code,
)
from .errors import (
    ConcurrencyError,
    DataCorruptionError,
    PromptTooLongError,
    SchemaOutOfDateError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StoreUnavailableError,
    SubagentSpawnRefusedError,
    ValidationError,
)
from .events import (
    CompactBoundary,
    Event,
    MessageAppended,
    SessionStarted,
    ToolResultPersisted,
    UsageRecorded,
    register_event,
    register_upcaster,
)
from .pipeline import (
    AnthropicSummarizer,
    BudgetConfig,
    CollapseConfig,
    CompactConfig,
    MicrocompactConfig,
    OfflineSummarizer,
    Pipeline,
    PipelineConfig,
    PreparedRequest,
    SnipConfig,
    revert,
)
from .projections import (
    Session,
    SessionConfig,
    validate_request,
)
from .store import (
    ANY,
    AsyncSessionStore,
    RecordedEvent,
    RetryPolicy,
    SessionStore,
    open_async_store,
    open_store,
)

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "AnthropicSummarizer",
    "AsyncConversation",
    "AsyncSessionStore",
    "AuditReport",
    "BudgetConfig",
    "CollapseConfig",
    "CompactBoundary",
    "CompactConfig",
    "ConcurrencyError",
    "Conversation",
    "DataCorruptionError",
    "Event",
    "FileHistory",
    "MessageAppended",
    "MicrocompactConfig",
    "OfflineSummarizer",
    "Pipeline",
    "PipelineConfig",
    "PreparedRequest",
    "PromptTooLongError",
    "RecordedEvent",
    "RetryPolicy",
    "SchemaOutOfDateError",
    "Session",
    "SessionConfig",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStarted",
    "SessionStore",
    "SessionStoreError",
    "SnipConfig",
    "StoreUnavailableError",
    "SubagentSpawnRefusedError",
    "TokenBudget",
    "ToolResultPersisted",
    "UsageRecorded",
    "ValidationError",
    "audit",
    "export_claude_code",
    "import_claude_code",
    "open_async_store",
    "open_store",
    "register_event",
    "register_upcaster",
    "revert",
    "served_request",
    "spawn_subagent",
    "validate_request",
    "write_claude_code",
]


def __getattr__(name: str) -> object:
    """Error names renamed in 0.2.0 still resolve here (with a DeprecationWarning); not in __all__."""
    from . import errors

    if name in errors.DEPRECATED_NAMES:
        return getattr(errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

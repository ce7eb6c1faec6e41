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

import importlib
import sys
import types
import typing

# The layers are imported on first use (PEP 562 ``__getattr__`` below), so ``import sessionstore``
# and the command line's ``--help`` do not pay for SQLAlchemy, Pydantic and the SDK up front.
if typing.TYPE_CHECKING:
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


#: Where each facade name lives: ``sessionstore.X`` imports that layer package on first use.
_LAYER_OF: dict[str, str] = {
    "AsyncConversation": "agent",
    "Conversation": "agent",
    "TokenBudget": "agent",
    "spawn_subagent": "agent",
    "AuditReport": "audit",
    "audit": "audit",
    "served_request": "audit",
    "FileHistory": "checkpoints",
    "export_claude_code": "claude_code",
    "import_claude_code": "claude_code",
    "write_claude_code": "claude_code",
    "ConcurrencyError": "errors",
    "DataCorruptionError": "errors",
    "PromptTooLongError": "errors",
    "SchemaOutOfDateError": "errors",
    "SessionExistsError": "errors",
    "SessionNotFoundError": "errors",
    "SessionStoreError": "errors",
    "StoreUnavailableError": "errors",
    "SubagentSpawnRefusedError": "errors",
    "ValidationError": "errors",
    "CompactBoundary": "events",
    "Event": "events",
    "MessageAppended": "events",
    "SessionStarted": "events",
    "ToolResultPersisted": "events",
    "UsageRecorded": "events",
    "register_event": "events",
    "register_upcaster": "events",
    "AnthropicSummarizer": "pipeline",
    "BudgetConfig": "pipeline",
    "CollapseConfig": "pipeline",
    "CompactConfig": "pipeline",
    "MicrocompactConfig": "pipeline",
    "OfflineSummarizer": "pipeline",
    "Pipeline": "pipeline",
    "PipelineConfig": "pipeline",
    "PreparedRequest": "pipeline",
    "SnipConfig": "pipeline",
    "revert": "pipeline",
    "Session": "projections",
    "SessionConfig": "projections",
    "validate_request": "projections",
    "ANY": "store",
    "AsyncSessionStore": "store",
    "RecordedEvent": "store",
    "RetryPolicy": "store",
    "SessionStore": "store",
    "open_async_store": "store",
    "open_store": "store",
}


#: The layer packages reachable as ``sessionstore.X`` right after ``import sessionstore`` (as they
#: were when the facade imported every layer up front). ``audit`` is the facade's function.
_LAYERS = frozenset(
    {
        "agent",
        "bridges",
        "checkpoints",
        "claude_code",
        "cli",
        "errors",
        "events",
        "pipeline",
        "projections",
        "serve",
        "store",
    }
)


def __getattr__(name: str) -> object:
    """A facade name, imported from its layer on first use; error names renamed in 0.2.0 still
    resolve here (with a DeprecationWarning) and are not in __all__. A layer package
    (``sessionstore.store``) is imported on first use too."""
    layer = _LAYER_OF.get(name)
    if layer is not None:
        value = getattr(importlib.import_module(f".{layer}", __name__), name)
        globals()[name] = value  # the next lookup is an ordinary attribute
        return value
    if name in _LAYERS:
        try:
            return importlib.import_module(f".{name}", __name__)  # the import sets it on the facade
        except ModuleNotFoundError as e:  # serve without its extra: hasattr() must not raise this
            raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({e})") from e
    # Not ``from . import errors``: before errors is loaded, that asks this very function for
    # ``errors`` first, and every lookup of an unknown name recursed until RecursionError.
    errors = importlib.import_module(f"{__name__}.errors")
    if name in errors.DEPRECATED_NAMES:
        return getattr(errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Facade(types.ModuleType):
    """The package module: importing the ``sessionstore.audit`` package must not rebind the facade's
    ``audit`` function to it (the import system sets a loaded subpackage on its parent)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAYER_OF and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade

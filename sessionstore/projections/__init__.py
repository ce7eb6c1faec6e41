"""Read-time projections of the log: the transcript, the API request, token window, file history, Session."""

from __future__ import annotations

from typing import Any

from ._api_context import (
    CLEARED_PLACEHOLDER,
    INTERRUPTED_TOOL_RESULT,
    LEADING_USER_MARKER,
    ApiContextProjection,
    ApiContextState,
    materialize,
    request_bytes,
)
from ._api_records import (
    ActiveEdit,
    CollapseEdit,
    CompactionRecord,
    MemoryRecord,
    PendingReplacement,
    PreparedCompaction,
    ResultReplacement,
    ResultsEdit,
    SnipEdit,
    StagedCollapse,
)
from ._base import (
    Projection,
    fold,
    register_projection,
)
from ._digest import TranscriptDigestProjection
from ._file_history import (
    MAX_SNAPSHOTS,
    POST_COMPACT_MAX_FILES_TO_RESTORE,
    FileCheckpoint,
    FileHistoryProjection,
    FileHistoryState,
    FileVersion,
    ReadRecord,
    UnfinishedRewind,
)
from ._session import (
    DEFAULT_BLOCK_OVERHEAD,
    DEFAULT_CALIBRATION,
    Session,
    SessionConfig,
)
from ._transcript import (
    TranscriptEntry,
    TranscriptProjection,
)
from ._validate import (
    RequestProblem,
    request_problems,
    validate_request,
)
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

#: Every projection of the package, in name order: what ``verify`` rebuilds and compares with the
#: stored snapshots. Spelled out, so no import has to run first to fill a registry.
PROJECTIONS: tuple[type[Projection[Any]], ...] = (
    ApiContextProjection,
    FileHistoryProjection,
    TranscriptProjection,
    TranscriptDigestProjection,
)

__all__ = [
    "ActiveEdit",
    "ApiContextProjection",
    "ApiContextState",
    "CLEARED_PLACEHOLDER",
    "CollapseEdit",
    "CompactionRecord",
    "DEFAULT_BLOCK_OVERHEAD",
    "DEFAULT_CALIBRATION",
    "DEFAULT_MODEL_LIMITS",
    "FileCheckpoint",
    "FileHistoryProjection",
    "FileHistoryState",
    "FileVersion",
    "INTERRUPTED_TOOL_RESULT",
    "LEADING_USER_MARKER",
    "MAX_SNAPSHOTS",
    "MemoryRecord",
    "ModelLimits",
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "PROJECTIONS",
    "PendingReplacement",
    "PreparedCompaction",
    "Projection",
    "ReadRecord",
    "RequestProblem",
    "ResultReplacement",
    "ResultsEdit",
    "Session",
    "SessionConfig",
    "SnipEdit",
    "StagedCollapse",
    "TokenState",
    "TokenWindow",
    "TranscriptDigestProjection",
    "TranscriptEntry",
    "TranscriptProjection",
    "UnfinishedRewind",
    "WindowConfig",
    "fold",
    "materialize",
    "model_limits",
    "register_projection",
    "request_bytes",
    "request_problems",
    "token_state",
    "token_window",
    "validate_request",
]

"""Read-time projections of the log: the transcript, the API request, token window, file history, Session."""

from __future__ import annotations

from ._api_context import (
    CLEARED_PLACEHOLDER,
    INTERRUPTED_TOOL_RESULT,
    LEADING_USER_MARKER,
)
from ._base import (
    Projection,
    fold,
    register_projection,
)
from ._file_history import (
    MAX_SNAPSHOTS,
    POST_COMPACT_MAX_FILES_TO_RESTORE,
    FileCheckpoint,
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

__all__ = [
    "CLEARED_PLACEHOLDER",
    "DEFAULT_BLOCK_OVERHEAD",
    "DEFAULT_CALIBRATION",
    "DEFAULT_MODEL_LIMITS",
    "FileCheckpoint",
    "FileHistoryState",
    "FileVersion",
    "INTERRUPTED_TOOL_RESULT",
    "LEADING_USER_MARKER",
    "MAX_SNAPSHOTS",
    "ModelLimits",
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "Projection",
    "ReadRecord",
    "RequestProblem",
    "Session",
    "SessionConfig",
    "TokenState",
    "TokenWindow",
    "TranscriptEntry",
    "UnfinishedRewind",
    "WindowConfig",
    "fold",
    "model_limits",
    "register_projection",
    "request_problems",
    "token_state",
    "token_window",
    "validate_request",
]

"""File checkpoints and rewind: capture the tracked files per user turn, restore them atomically.

The pure ``file_history`` view these events fold into lives in ``sessionstore.projections``;
this layer reads and writes the files (under a project root, behind the path safety checks of
``sessionstore._paths``) and records what it did in the session.
"""

from __future__ import annotations

from ._history import FileHistory
from ._rewind import FileChange, RewindPlan, RewindResult

__all__ = [
    "FileChange",
    "FileHistory",
    "RewindPlan",
    "RewindResult",
]

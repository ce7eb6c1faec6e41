"""LangGraph's checkpointer on sessionstore (``pip install 'sessionstore[langgraph]'``).

``SessionStoreSaver`` (sync) and ``AsyncSessionStoreSaver`` (asyncio) are LangGraph
``BaseCheckpointSaver``s: each thread is one session, its checkpoints and pending writes are
events, large values blobs; ``delete_thread`` is an erasure with a receipt. docs/bridges/langgraph.md.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

try:
    import langgraph.checkpoint.base  # noqa: F401 - checked here, used by the modules below
except ImportError as e:  # pragma: no cover - the extra is installed where the tests run
    raise MissingDependencyError("langgraph", "the LangGraph bridge", e.name or "langgraph") from e

from ._log import thread_session_id
from ._saver import AsyncSessionStoreSaver, SessionStoreSaver

__all__ = ["AsyncSessionStoreSaver", "SessionStoreSaver", "thread_session_id"]

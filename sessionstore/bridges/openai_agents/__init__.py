"""The OpenAI Agents SDK's ``Session`` on sessionstore (``pip install 'sessionstore[openai-agents]'``).

``SessionStoreSession(session_id, store)`` is an SDK session (``Runner.run(agent, input,
session=...)``) over an ``AsyncSessionStore`` or a sync ``SessionStore``: every ``add_items``,
``pop_item`` and ``clear_session`` is an event of the session's hash-chained log, so pops and
clears are auditable and ``revert`` undoes them; ``erase`` deletes the session with a receipt.
docs/bridges/openai-agents.md.

The event types it writes live in ``sessionstore.events`` (a log of them decodes without the
SDK); the fold that turns them into the item list (``fold_items``) imports nothing of the SDK.
"""

from __future__ import annotations

from ...events import (
    OpenAIAgentsItemPopped,
    OpenAIAgentsItemsAdded,
    OpenAIAgentsRemovalReverted,
    OpenAIAgentsSessionCleared,
)
from ._fold import ItemRemoval, fold_items

try:
    from ._session import SessionStoreSession, agents_session_id
except ImportError as e:  # openai-agents is not installed
    if e.name is None or not e.name.startswith("agents"):
        raise
    from ...errors import MissingDependencyError

    raise MissingDependencyError("openai-agents", "the OpenAI Agents SDK session", e.name) from e

__all__ = [
    "ItemRemoval",
    "OpenAIAgentsItemPopped",
    "OpenAIAgentsItemsAdded",
    "OpenAIAgentsRemovalReverted",
    "OpenAIAgentsSessionCleared",
    "SessionStoreSession",
    "agents_session_id",
    "fold_items",
]

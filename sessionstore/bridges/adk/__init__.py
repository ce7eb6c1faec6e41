"""Google ADK's session service on sessionstore (the ``adk`` extra: ``google-adk``).

``SessionStoreSessionService(store)`` is a ``google.adk.sessions.BaseSessionService`` over an
``AsyncSessionStore``: give it to ADK's ``Runner`` as ``session_service``. Every ADK event and
every state change is an event of the store's hash-chained log, so ``verify``, erasure, the CLI
and PostgreSQL work for ADK sessions; docs/bridges/adk.md says how ADK's model maps onto the store.

The event types it writes (``AdkSessionCreated``, ``AdkEventRecorded``, ``AdkStateChanged``) live in
``sessionstore.events``, so a log of them decodes without ADK; they are re-exported here.
"""

from __future__ import annotations

from ...events import (
    AdkEventRecorded,
    AdkSessionCreated,
    AdkStateChanged,
)
from ._layout import (
    app_stream_id,
    session_store_id,
    user_stream_id,
)

try:
    from ._service import (
        SessionStoreSessionService,
    )
except ImportError as e:  # google-adk is not installed
    if e.name is None or not e.name.startswith("google"):
        raise
    from ...errors import MissingDependencyError

    raise MissingDependencyError("adk", "the Google ADK session service", e.name) from e

__all__ = [
    "AdkEventRecorded",
    "AdkSessionCreated",
    "AdkStateChanged",
    "SessionStoreSessionService",
    "app_stream_id",
    "session_store_id",
    "user_stream_id",
]

"""Where an ADK session lives in the store, and how ADK's state scopes fold out of the log.

An ADK session is named by (app_name, user_id, session_id); the store's session for it has
tenant = app_name, user = user_id, external_id = the ADK session id, and an id derived from the
three (so a lookup is one primary-key read). App-scoped state lives in one stream per app,
user-scoped state in one per (app, user): sessions of their own, marked in their metadata, that
``SessionStoreSessionService.list_sessions`` leaves out.

Pure functions: nothing here imports ADK.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pydantic_core import to_jsonable_python

from ...store import RecordedEvent

__all__ = [
    "APP_PREFIX",
    "KIND",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "app_stream_id",
    "fold_scope",
    "json_safe",
    "scoped",
    "session_store_id",
    "split_delta",
    "user_stream_id",
    "without_temp",
]

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"

#: The metadata key that marks what a store session holds for ADK.
KIND = "adk"


def _digest(*parts: str) -> str:
    # NUL cannot occur in an owner key (check_owner_key refuses control characters): no two
    # tuples join to the same text.
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


def session_store_id(app_name: str, user_id: str, session_id: str) -> str:
    """The store's session id for an ADK session (``adk-`` and 40 hex digits)."""
    return f"adk-{_digest('session', app_name, user_id, session_id)}"


def app_stream_id(app_name: str) -> str:
    """The store's session that holds the app's ``app:`` state changes."""
    return f"adk-app-{_digest('app', app_name)}"


def user_stream_id(app_name: str, user_id: str, generation: int = 0) -> str:
    """The store's session that holds the user's ``user:`` state changes in this app.

    ``generation`` counts the user's earlier state streams that were erased (``erase_user``): an
    erased session's id is never used again, so the user's next state starts a new stream.
    """
    if generation == 0:
        return f"adk-user-{_digest('user', app_name, user_id)}"
    return f"adk-user-{_digest('user', app_name, user_id, str(generation))}"


def json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as JSON values; a value JSON cannot hold becomes its ``str`` (as ADK's database
    service stores it), so one odd value does not lose the whole event."""
    result: dict[str, Any] = to_jsonable_python(state, fallback=str)
    return result


def split_delta(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(session, app, user) parts of a state delta; ``temp:`` keys dropped, prefixes removed."""
    session: dict[str, Any] = {}
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            app[key.removeprefix(APP_PREFIX)] = value
        elif key.startswith(USER_PREFIX):
            user[key.removeprefix(USER_PREFIX)] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return session, app, user


def without_temp(delta: dict[str, Any]) -> dict[str, Any]:
    """The delta as ADK persists it: every key but the ``temp:`` ones."""
    return {key: value for key, value in delta.items() if not key.startswith(TEMP_PREFIX)}


def fold_scope(events: Iterable[RecordedEvent]) -> dict[str, Any]:
    """An app or user state stream folded: each change's keys replace the earlier values."""
    state: dict[str, Any] = {}
    for recorded in events:
        if recorded.type == "adk_state_changed":
            state.update(recorded.payload_dict()["delta"])
    return state


def scoped(session: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """The state an ADK ``Session`` shows: its own keys, then ``app:`` and ``user:`` ones."""
    merged = dict(session)
    merged.update((APP_PREFIX + key, value) for key, value in app.items())
    merged.update((USER_PREFIX + key, value) for key, value in user.items())
    return merged

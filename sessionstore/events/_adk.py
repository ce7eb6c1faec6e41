"""Events of Google ADK sessions (written by ``sessionstore.bridges.adk``): a session's creation,
each ADK event, and each change of app- or user-scoped state (in a stream of their own, so every
change is in a hash-chained log).

They carry plain JSON (the ADK event as ``model_dump(mode="json")`` gives it), so a log of them
decodes without ADK installed, and without importing the bridge.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ._base import Event, register_event

__all__ = ["AdkEventRecorded", "AdkSessionCreated", "AdkStateChanged"]


@register_event
class AdkSessionCreated(Event):
    """The first event of a bridged ADK session: who owns it and its initial session-scoped state.

    ``created_at`` is the ADK timestamp (seconds since the epoch) the session reports as its
    ``last_update_time`` until its first event.
    """

    type: Literal["adk_session_created"] = "adk_session_created"
    app_name: str
    user_id: str
    adk_session_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    created_at: float


@register_event
class AdkEventRecorded(Event):
    """One ADK ``Event``, as ADK serializes it (``event``), its ``state_delta`` kept apart.

    ``state_delta`` is the delta as it was applied: ``temp:`` keys removed, values made JSON
    (a value JSON cannot hold is stored as its ``str``, as ADK's database service does). The
    session's state is the fold of these deltas over the creation state.
    """

    type: Literal["adk_event_recorded"] = "adk_event_recorded"
    adk_event_id: str
    invocation_id: str = ""
    author: str = ""
    timestamp: float
    state_delta: dict[str, Any] = Field(default_factory=dict)
    event: dict[str, Any]

    def countable_text(self) -> list[str]:
        """The text parts of the event's content (what a model reads of it)."""
        content = self.event.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            return []
        return [str(p["text"]) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


@register_event
class AdkStateChanged(Event):
    """A change of app-scoped (``app:``) or user-scoped (``user:``) state, keys without the prefix.

    Appended to the app's or the user's state stream; ``adk_session_id`` and ``adk_event_id`` say
    which session and event made it (None for the initial state given to ``create_session``).
    """

    type: Literal["adk_state_changed"] = "adk_state_changed"
    scope: Literal["app", "user"]
    delta: dict[str, Any]
    adk_session_id: str
    adk_event_id: str | None = None

"""The Claude Agent SDK's ``SessionStore`` on sessionstore (``pip install 'sessionstore[claude-agent-sdk]'``).

``SessionStoreClaudeStore(store)`` is a ``claude_agent_sdk.types.SessionStore`` over an
``AsyncSessionStore`` or a sync ``SessionStore``: give it to
``ClaudeAgentOptions(session_store=...)``. Every mirrored transcript line becomes the events
``sessionstore import`` writes for it, so an Agent SDK session is an imported Claude Code session
(``context``, ``audit``, ``show``, ``served``, ``verify``, the viewer, ``revert``, ``export``);
``delete`` is an erasure with receipts. docs/bridges/claude-agent-sdk.md.

The adapter imports nothing of the SDK until a main transcript is appended (its summary fold).
"""

from __future__ import annotations

from ._store import ERASE_REASON, SESSION_PREFIX, SessionStoreClaudeStore, transcript_session_id

__all__ = ["ERASE_REASON", "SESSION_PREFIX", "SessionStoreClaudeStore", "transcript_session_id"]

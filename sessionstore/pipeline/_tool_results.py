"""Reading tool results out of the API view: shared by the budget and micro-compact stages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ValidationError
from ..projections import Session

__all__ = ["result_block", "result_text", "result_tokens"]


def result_text(block: Mapping[str, Any]) -> str | None:
    """The text of a tool_result's content, or None when it holds images or other media."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            return None
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)


def result_tokens(session: Session, tool_use_id: str, text: str) -> int:
    """Raw tokens of a result: the count stored at append when there is one, else counted now."""
    known = session.api_state.result_tokens.get(tool_use_id)
    return known if known else session.count_text(text)


def result_block(session: Session, tool_use_id: str) -> Mapping[str, Any]:
    state = session.api_state
    index = state.result_index.get(tool_use_id)
    if index is None:
        msg = f"tool_use_id {tool_use_id!r} has no result in session {session.id!r}"
        raise ValidationError(msg, field="tool_use_id")
    for block in state.messages[index]["content"]:
        if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
            return block  # type: ignore[no-any-return]
    raise AssertionError(tool_use_id)  # pragma: no cover - result_index points at its message

"""Events of transcripts mirrored line by line (``sessionstore.claude_code.TranscriptMirror``,
which the Claude Agent SDK's ``SessionStore`` bridge writes through).

A client (the Claude Agent SDK) hands over each Claude Code transcript line as the CLI writes
it. The mirror turns the lines into the events ``sessionstore import`` writes for them, in the
transcript's own session, as soon as each line is settled (the follower's rule: its events will
not change). Each hand-over is also one ``TranscriptLinesMirrored`` in a session of the mirror's
own (the transcript's *mirror log*): it numbers the lines that call added and holds, verbatim,
those not settled yet, so an acknowledged line is durable the moment the call returns.

Nothing here is part of any model's context: the API view ignores these events.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt

from ._base import Event, register_event

__all__ = ["TranscriptLinesMirrored"]


@register_event
class TranscriptLinesMirrored(Event):
    """One hand-over: lines ``first_line`` .. ``first_line + count - 1`` of the transcript, of
    which the last ``len(held)`` were not settled when it was written (their JSON text, as the
    transcript line); ``client_state``: what the client keeps beside them, verbatim (the Agent
    SDK's session summary)."""

    type: Literal["transcript_lines_mirrored"] = "transcript_lines_mirrored"
    first_line: PositiveInt
    count: PositiveInt
    held: list[str] = Field(default_factory=list)
    client_state: dict[str, Any] | None = None

"""Events of the compaction lab: a compaction re-run at a past point, recorded in a fork.

``sessionstore.pipeline.compare_compactions`` forks the session at the point and appends one
``CompactionExperiment`` per summarizer, prompt or model it tried; the session compared is never
written to. The events change nothing the model sees (no projection folds them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from ._base import Event, register_event

__all__ = ["CompactionExperiment", "ReplacedFactKept"]


class ReplacedFactKept(BaseModel):
    """One file, error or pending task named in the replaced messages, and whether a result kept it.

    ``in_summary``: the summary mentions it (docs/compaction.md, "Comparing summarizers", says
    how a mention is decided); ``restored``: a file put back verbatim after the summary.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["file", "error", "task"]
    #: The file's path, the error's first line, or the task's text.
    name: str
    #: ``read`` / ``edited`` (a file), the tool call that failed (an error), the status (a task).
    detail: str = ""
    in_summary: bool
    restored: bool = False

    @property
    def kept(self) -> bool:
        """True when the model still has it after the compaction: mentioned or restored."""
        return self.in_summary or self.restored


@register_event
class CompactionExperiment(Event):
    """One compaction tried at a past point of another session, and what it kept.

    ``ok`` false: the summarizer failed (``error`` says why) and nothing else is set.
    """

    type: Literal["compaction_experiment"] = "compaction_experiment"
    #: The session compared, and the last seq of it the compaction saw.
    of_session_id: str
    at_seq: NonNegativeInt
    #: The compaction re-run (its ``compact_boundary`` or ``compact_failed``), if the point was one.
    at_event_id: str | None = None
    #: How the comparison names this try (``offline``, ``anthropic:MODEL``, ``recorded`` ...).
    label: str
    #: ``offline``, ``anthropic``, ``session_memory``, ... : what summarized (``recorded``: the
    #: compaction the session actually recorded at this point, for reference).
    summarizer: str
    model: str | None = None
    custom_instructions: str | None = None
    ok: bool
    error: str | None = None
    strategy: str | None = None
    summary: str = ""
    tokens_before: NonNegativeInt = 0
    tokens_after: NonNegativeInt = 0
    summary_tokens: NonNegativeInt = 0
    kept_messages: NonNegativeInt = 0
    kept_from_seq: NonNegativeInt = 0
    kept_before_seq: NonNegativeInt = 0
    #: (kind, name, tokens) of each file, skill or plan put back after the summary.
    attachments: list[tuple[str, str, int]] = Field(default_factory=list)
    #: The summarizer's model usage (input, output, cache tokens), when it reported one.
    usage: dict[str, int] = Field(default_factory=dict)
    #: Wall-clock time of the summarizer call, in milliseconds (0 for ``recorded``).
    elapsed_ms: NonNegativeInt = 0
    facts: list[ReplacedFactKept] = Field(default_factory=list)

"""The records the API context view keeps about context operations: frozen, typed, snapshot-able.

Each record is what the view needs later from one event (a persisted or cleared result, a snip,
a staged or committed collapse, the latest compaction, the latest session memory), copied out
when the event is folded so that no one reads an event payload by string key. They are frozen:
a fold replaces a record, it never edits one, so a state handed out earlier stays as it was.

``to_json`` / ``record_from_json`` carry them through the ``api_context`` snapshot; a record
read back equals the record written (tuples stay tuples).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

__all__ = [
    "ActiveEdit",
    "CollapseEdit",
    "CompactionRecord",
    "MemoryRecord",
    "PendingReplacement",
    "PreparedCompaction",
    "ResultReplacement",
    "ResultsEdit",
    "SnipEdit",
    "StagedCollapse",
    "StateRecord",
    "ViewAtChange",
    "edit_from_json",
    "record_from_json",
]

Block = dict[str, Any]


class StateRecord:
    """JSON round trip for a frozen dataclass whose tuple fields are named in ``_TUPLES``."""

    _TUPLES: ClassVar[frozenset[str]] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """The record's fields as a JSON-able dict (tuples become lists)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any:
        """The record ``to_json`` gave ``data`` for (raises TypeError on missing or unknown keys)."""
        return cls(**{k: tuple(v) if k in cls._TUPLES else v for k, v in data.items()})


@dataclass(frozen=True, slots=True)
class ResultReplacement(StateRecord):
    """A tool result in the view whose content an edit replaced."""

    #: Event id of the edit that replaced it (the first one stands).
    by: str
    #: The result block as it was before, restored when the edit is reverted.
    original: Block | None


@dataclass(frozen=True, slots=True)
class PendingReplacement(StateRecord):
    """A replacement recorded before its result reached the view: applied when the result arrives."""

    by: str
    content: object


@dataclass(frozen=True, slots=True)
class ResultsEdit(StateRecord):
    """An active persisted-result or micro-compaction edit: which results it replaced."""

    _TUPLES: ClassVar[frozenset[str]] = frozenset({"ids"})
    type: Literal["tool_result_persisted", "microcompact_applied"]
    tokens: int
    blocks: int
    #: The results this edit replaced (results an earlier edit already replaced are not listed).
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SnipEdit(StateRecord):
    """An active snip: messages that began before ``keep_from_seq`` left the request."""

    tokens: int
    blocks: int
    keep_from_seq: int
    type: Literal["snip_applied"] = "snip_applied"


@dataclass(frozen=True, slots=True)
class StagedCollapse(StateRecord):
    """A collapse summarized and waiting: its span and summary, nothing changed yet."""

    first_seq: int
    end_seq: int
    summary: str
    summary_tokens: int
    tokens_covered: int


@dataclass(frozen=True, slots=True)
class CollapseEdit(StateRecord):
    """An active committed collapse: the span ``first_seq``..``end_seq`` stands as ``summary``."""

    tokens: int
    blocks: int
    staged_event_id: str
    first_seq: int
    end_seq: int
    summary: str
    type: Literal["collapse_committed"] = "collapse_committed"


@dataclass(frozen=True, slots=True)
class ViewAtChange(StateRecord):
    """The view as a compact boundary or a snip found it, kept for the audit (which lists what
    each took out) so that it never has to fold the log again to see it.

    ``first_seq`` is the seq of the first message visible before it (None: none was);
    ``collapse_*`` the committed collapses active then (commit event id, span), in the order
    they were applied; ``compact_seq`` and ``compact_from_seq`` the latest boundary before it
    (0: none, or not a partial one); ``tokens_after`` and ``blocks_after`` the view's raw
    tokens and blocks right after a boundary (None for a snip).
    """

    _TUPLES: ClassVar[frozenset[str]] = frozenset(
        {"collapse_event_ids", "collapse_first_seqs", "collapse_end_seqs"}
    )
    seq: int
    first_seq: int | None
    collapse_event_ids: tuple[str, ...]
    collapse_first_seqs: tuple[int, ...]
    collapse_end_seqs: tuple[int, ...]
    compact_seq: int
    compact_from_seq: int
    tokens_after: int | None = None
    blocks_after: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ViewAtChange:
        """The view ``to_json`` gave ``data`` for; a snapshot is database data, so each field's
        type is checked (ValueError naming the field: the snapshot is then ignored and refolded)."""
        view: ViewAtChange = super(ViewAtChange, cls).from_json(data)  # slots: no bare super()
        ints = {"seq": view.seq, "compact_seq": view.compact_seq, "compact_from_seq": view.compact_from_seq}
        optional = {
            "first_seq": view.first_seq,
            "tokens_after": view.tokens_after,
            "blocks_after": view.blocks_after,
        }
        bad = [k for k, v in ints.items() if not _is_int(v)]
        bad += [k for k, v in optional.items() if v is not None and not _is_int(v)]
        bad += [
            k for k in ("collapse_first_seqs", "collapse_end_seqs") if not all(map(_is_int, getattr(view, k)))
        ]
        if not all(isinstance(v, str) for v in view.collapse_event_ids):
            bad.append("collapse_event_ids")
        if bad:
            raise ValueError(f"api_context snapshot: a view at a change has a bad {', '.join(bad)}")
        return view


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: An edit the view applies until a ``ContextEditReverted`` takes it back.
ActiveEdit = ResultsEdit | SnipEdit | CollapseEdit

_EDITS: dict[str, type[ResultsEdit] | type[SnipEdit] | type[CollapseEdit]] = {
    "tool_result_persisted": ResultsEdit,
    "microcompact_applied": ResultsEdit,
    "snip_applied": SnipEdit,
    "collapse_committed": CollapseEdit,
}


def edit_from_json(data: dict[str, Any]) -> ActiveEdit:
    """The edit ``to_json`` gave ``data`` for, chosen by its ``type``."""
    kind = _EDITS.get(str(data.get("type")))
    if kind is None:
        msg = f"unknown edit type {data.get('type')!r} in api_context snapshot"
        raise ValueError(msg)
    edit: ActiveEdit = kind.from_json(data)
    return edit


@dataclass(frozen=True, slots=True)
class CompactionRecord(StateRecord):
    """A compact boundary: what it keeps and adds, the view's counts when it was folded, and
    the fold's cursor it reset (so that a revert can restore it)."""

    _TUPLES: ClassVar[frozenset[str]] = frozenset({"attachments", "hook_results", "open_at", "announcements"})
    #: Seq and event id of the boundary event.
    seq: int
    event_id: str
    #: First seq of the messages kept after the summary (0: none kept).
    keep_from_seq: int
    #: A partial "from" compaction: messages before this seq stay before the summary (0: not partial).
    from_seq: int
    summary: str
    #: The summary already is the whole message the model got (no prefix is added).
    verbatim: bool
    attachments: tuple[str, ...]
    hook_results: tuple[str, ...]
    #: Raw tokens and blocks of the view right after the boundary.
    base_tokens: int
    base_blocks: int
    #: The view's running counts when the boundary was folded (later growth is measured from them).
    messages_total_at: int
    removed_at: int
    removed_blocks_at: int
    blocks_at: int
    #: What the boundary reset, as it was before: a revert puts it back. ``cleared`` is False
    #: for a compaction that kept the tail (it reset nothing of the message fold).
    cleared: bool
    messages_at: int
    merge_floor_at: int
    open_at: tuple[str, ...]
    last_assistant_index_at: int
    last_assistant_api_id_at: str | None
    usage_at: int | None
    failures_at: int
    #: First seq whose fold depended on this boundary (a message merged, answered or closed
    #: differently than without it): a revert could not give the request without it, so it is
    #: refused (0: none).
    diverged_seq: int = 0
    #: What events recorded with the compaction told the model again after its attachments
    #: (listings, sub-agents still running); they go with it when it is reverted.
    announcements: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedCompaction(StateRecord):
    """A compaction summary prepared ahead and not yet committed or discarded (``CompactionPrepared``)."""

    _TUPLES: ClassVar[frozenset[str]] = frozenset({"hook_messages"})
    event_id: str
    seq: int
    summary: str
    summarizer: str
    through_seq: int
    covered_tokens: int
    base_compaction_event_id: str | None
    tokens_at_preparation: int
    custom_instructions: str | None
    hook_messages: tuple[str, ...]
    ptl_retries: int
    ptl_dropped_before_seq: int


@dataclass(frozen=True, slots=True)
class MemoryRecord(StateRecord):
    """The latest session memory and how far the conversation was when it was extracted."""

    text: str
    last_summarized_seq: int
    tokens_at_extraction: int
    tool_calls_at_extraction: int


def record_from_json(kind: type[StateRecord], data: dict[str, Any] | None) -> Any:
    """``kind.from_json(data)``, or None for None."""
    return None if data is None else kind.from_json(data)

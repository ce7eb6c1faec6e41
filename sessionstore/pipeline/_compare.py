"""The compaction lab: re-run a compaction at a past point with other summarizers, prompts or
models, and compare what each kept (``compare_compactions``).

The session compared is never written to. Its history up to the point is forked (nothing is
copied), each try runs there as ``compact_preview`` does (hooks and summarizer, nothing recorded
as a boundary), and the fork records one ``CompactionExperiment`` per try, all in one append.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CompactionDisabledError, SessionStoreError, SummaryFailedError, ValidationError
from ..events import CompactionExperiment
from ..projections import Session, TranscriptEntry
from ..projections._session import check_session
from ._compaction import CompactConfig, _attachment_line, _predicted_used, compact_preview
from ._replaced_facts import facts_kept, replaced_facts
from ._summarizers import Summarizer, Summary, SummaryRequest

__all__ = ["RECORDED", "SESSION_MEMORY", "CompactionComparison", "CompactionVariant", "compare_compactions"]

#: The ``summarizer`` of the try that stands for what the session actually recorded.
RECORDED = "recorded"
#: The ``summarizer`` of a session-memory try (no model call).
SESSION_MEMORY = "session_memory"


@dataclass(frozen=True)
class CompactionVariant:
    """One way to compact: a summarizer (None: the session memory), a model, instructions.

    Args:
        summarizer: what summarizes; None tries the session memory alone (no model call) and
            fails when it is not usable at the point, never falling back to a model.
        model: the model the summarizer asks (default: the session's).
        instructions: custom instructions; None at a compaction re-run takes that compaction's
            own (say ``""`` for none), elsewhere none.
        label: how the comparison names it (default: the summarizer, ``:model``, instructions).
    """

    summarizer: Summarizer | None
    model: str | None = None
    instructions: str | None = None
    label: str = ""

    def name(self) -> str:
        """The label, or one made from the summarizer, model and instructions."""
        if self.label:
            return self.label
        name = self.summarizer.name if self.summarizer is not None else SESSION_MEMORY
        if self.model:
            name += f":{self.model}"
        if self.instructions:
            short = " ".join(self.instructions.split())
            name += f" ({short[:30]}{'…' if len(short) > 30 else ''})"
        return name


@dataclass(frozen=True)
class CompactionComparison:
    """The tries at one point, as recorded in the fork ``fork_id``.

    ``trials`` holds the compaction the session recorded at the point first (``summarizer``
    ``recorded``) when the point is one, then each variant in the order given.
    """

    session_id: str
    fork_id: str
    at_seq: int
    at_event_id: str | None
    trials: tuple[CompactionExperiment, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the point, the fork, and each try (``facts`` with ``kept`` spelled out)."""
        return {
            "session_id": self.session_id,
            "fork_id": self.fork_id,
            "at_seq": self.at_seq,
            "at_event_id": self.at_event_id,
            "trials": [_trial_json(t) for t in self.trials],
        }


def _trial_json(trial: CompactionExperiment) -> dict[str, Any]:
    data = trial.model_dump(mode="json")
    data["facts"] = [{**f.model_dump(mode="json"), "kept": f.kept} for f in trial.facts]
    return data


@dataclass(frozen=True)
class _Point:
    """Where to compact: the last seq the compaction sees, and the compaction re-run, if any."""

    seq: int
    event: TranscriptEntry | None = None

    @property
    def boundary(self) -> dict[str, Any] | None:
        if self.event is None or self.event.type != "compact_boundary":
            return None
        return self.event.payload


def _point(session: Session, at: str | int) -> _Point:
    """``at`` as a point: a compaction (or failed one) is re-run from the seq before it; any
    other event or seq is compacted right after it.

    Raises:
        ValidationError: a seq outside the session or an event not in it.
    """
    if isinstance(at, int) or at.isdigit():
        seq = int(at)
        if not 1 <= seq <= session.last_seq:
            msg = f"cannot compact session {session.id!r} at seq {seq}: it has seqs 1 to {session.last_seq}"
            raise ValidationError(msg, field="at")
        return _Point(seq)
    entry = next((e for e in session.transcript if e.event_id == at), None)
    if entry is None:
        msg = f"event {at} is not in session {session.id!r} (give an event id or a seq)"
        raise ValidationError(msg, field="at")
    if entry.type in ("compact_boundary", "compact_failed"):
        return _Point(entry.seq - 1, entry)
    return _Point(entry.seq)


def _pivots(session: Session, boundary: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(up_to_uuid, from_uuid) that make a compaction cut where the recorded ``boundary`` did."""
    if boundary is None:
        return None, None
    messages = [
        e for e in session.transcript if e.type == "message_appended" and e.payload.get("message_uuid")
    ]
    if boundary.get("template") == "partial_up_to" and boundary.get("keep_from_seq"):
        before = [e for e in messages if e.seq < boundary["keep_from_seq"]]
        if before:
            return str(before[-1].payload["message_uuid"]), None
    elif boundary.get("template") == "partial_from" and boundary.get("summarized_from_seq"):
        start = next((e for e in messages if e.seq >= boundary["summarized_from_seq"]), None)
        if start is not None:
            return None, str(start.payload["message_uuid"])
    else:
        return None, None
    # Re-running it over the whole history would compare another cut than the one recorded.
    msg = (
        f"cannot re-run compaction {boundary.get('event_id', '')}: no message with a uuid marks where it cut"
    )
    raise ValidationError(msg, field="at")


class _Observed:
    """A summarizer asked for ``model``, keeping the summaries it returned (for their usage)."""

    def __init__(self, inner: Summarizer, model: str | None) -> None:
        self.inner = inner
        self.model = model
        self.summaries: list[Summary] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def summarize(self, request: SummaryRequest) -> Summary:
        if self.model:
            request = dataclasses.replace(request, model=self.model)
        summary = self.inner.summarize(request)
        self.summaries.append(summary)
        return summary


class _MemoryOnly:
    """Stands in for a model when only the session memory may summarize: it always refuses."""

    name = SESSION_MEMORY

    def summarize(self, request: SummaryRequest) -> Summary:
        # Why (empty, too old, or still above the threshold) is in docs/compaction.md.
        msg = "no usable session memory at this point"
        raise SummaryFailedError(msg)


def _replaced(fork: Session, kept_from_seq: int, kept_before_seq: int) -> list[dict[str, Any]]:
    """The view messages a compaction keeping what these seqs say replaces."""
    state = fork.api_state
    starts = state.message_first_seq
    first, end = state.first_visible, len(state.messages)
    if kept_before_seq:
        first = max(first, bisect.bisect_left(starts, kept_before_seq))
    elif kept_from_seq:
        end = bisect.bisect_left(starts, kept_from_seq)
    return [state.messages[i] for i in range(first, end)]


def _restored_files(attachments: Sequence[tuple[str, str, int]]) -> list[str]:
    return [name for kind, name, _ in attachments if kind == "file"]


def _recorded(fork: Session, session_id: str, point: _Point) -> CompactionExperiment:
    """The compaction the session recorded at the point, measured as the tries are."""
    assert point.event is not None
    payload = point.event.payload
    common: dict[str, Any] = {
        "of_session_id": session_id,
        "at_seq": point.seq,
        "at_event_id": point.event.event_id,
        "label": RECORDED,
        "summarizer": RECORDED,
    }
    if point.event.type == "compact_failed":
        return CompactionExperiment(**common, ok=False, error=str(payload.get("reason", "")))
    attachments = [_attachment_line(a) for a in payload.get("attachments", []) if isinstance(a, dict)]
    keep_from, keep_before = int(payload.get("keep_from_seq", 0)), int(payload.get("summarized_from_seq", 0))
    replaced = _replaced(fork, keep_from, keep_before)
    summary = str(payload.get("summary", ""))
    state = fork.api_state
    return CompactionExperiment(
        **common,
        model=None,
        custom_instructions=payload.get("custom_instructions"),
        ok=True,
        strategy=str(payload.get("strategy", "")),
        summary=summary,
        tokens_before=int(payload.get("pre_compact_tokens", 0)),
        tokens_after=_predicted_used(
            fork, int(payload.get("post_compact_raw_tokens", 0)), int(payload.get("post_compact_blocks", 0))
        ),
        summary_tokens=fork.count_text(summary),
        kept_messages=len(state.messages) - state.first_visible - len(replaced),
        kept_from_seq=keep_from,
        kept_before_seq=keep_before,
        attachments=attachments,
        facts=facts_kept(replaced_facts(replaced), summary, _restored_files(attachments)),
    )


def _trial(
    fork: Session,
    session_id: str,
    point: _Point,
    variant: CompactionVariant,
    config: CompactConfig,
) -> CompactionExperiment:
    """One variant at the point: its summary, sizes and facts kept; a failure is a result too."""
    boundary = point.boundary
    instructions = variant.instructions
    if instructions is None and boundary is not None:
        instructions = boundary.get("custom_instructions")
    up_to_uuid, from_uuid = _pivots(fork, boundary)
    memory = variant.summarizer is None
    observed = _Observed(variant.summarizer or _MemoryOnly(), variant.model)
    common: dict[str, Any] = {
        "of_session_id": session_id,
        "at_seq": point.seq,
        "at_event_id": point.event.event_id if point.event is not None else None,
        "label": variant.name(),
        "summarizer": observed.name,
        "model": variant.model,
        "custom_instructions": instructions or None,
    }
    started = time.perf_counter()
    try:
        preview = compact_preview(
            fork,
            observed,
            custom_instructions=instructions or None,
            up_to_uuid=up_to_uuid,
            from_uuid=from_uuid,
            config=config,
            use_memory=memory,
        )
    except SummaryFailedError as e:
        elapsed = round(1000 * (time.perf_counter() - started))
        return CompactionExperiment(**common, ok=False, error=e.reason, elapsed_ms=elapsed)
    except SessionStoreError:
        raise
    except Exception as e:  # a summarizer's own bug is that try's result, not the comparison's end
        elapsed = round(1000 * (time.perf_counter() - started))
        error = f"{type(e).__name__}: {e}"
        return CompactionExperiment(**common, ok=False, error=error, elapsed_ms=elapsed)
    elapsed = round(1000 * (time.perf_counter() - started))
    replaced = _replaced(fork, preview.kept_from_seq, preview.kept_before_seq)
    usage = observed.summaries[-1].usage if observed.summaries else {}
    return CompactionExperiment(
        **{**common, "summarizer": SESSION_MEMORY if memory else preview.summarizer},
        ok=True,
        strategy=preview.strategy,
        summary=preview.summary,
        tokens_before=preview.tokens_before,
        tokens_after=preview.tokens_after,
        summary_tokens=fork.count_text(preview.summary),
        kept_messages=preview.kept_messages,
        kept_from_seq=preview.kept_from_seq,
        kept_before_seq=preview.kept_before_seq,
        attachments=list(preview.attachments),
        usage=dict(usage),
        elapsed_ms=elapsed,
        facts=facts_kept(replaced_facts(replaced), preview.summary, _restored_files(preview.attachments)),
    )


def compare_compactions(
    session: Session,
    at: str | int,
    variants: Sequence[CompactionVariant],
    *,
    fork_id: str | None = None,
    config: CompactConfig | None = None,
) -> CompactionComparison:
    """Compact the session as it was at ``at`` in each of ``variants``, and compare the results.

    ``at`` is a ``compact_boundary`` (or ``compact_failed``) event id: that compaction is re-run
    on the history it saw, cut where it cut (its template and pivot), with its instructions
    unless a variant gives others, and what it recorded comes first in the results. Any other
    event id or seq: the compaction runs right after that event, on the whole visible history.

    Each try measures tokens before and after, the summary's size, the model's usage and time,
    and which files, errors and pending tasks named in the messages it replaced it still
    mentions or restores (``sessionstore.pipeline._replaced_facts`` says how). A summarizer that
    fails is a try with ``ok`` false and its ``error``.

    Args:
        fork_id: the id of the fork that records the tries (default: a new uuid).
        config: hooks and session-memory settings, as for ``compact``.

    Returns:
        The tries, as the fork recorded them (one ``CompactionExperiment`` each).

    Raises:
        ValidationError: no variants, or ``at`` is not a seq or event of the session.
        CompactionDisabledError: the session's window config disables all compaction.
        SessionExistsError: ``fork_id`` is taken.

    .. versionadded:: 0.3.0
    """
    check_session("session", session)
    if not variants:
        raise ValidationError("give at least one summarizer to compare", field="summarizers")
    if session.config.window.disable_compaction:
        raise CompactionDisabledError(session.id)
    point = _point(session, at)
    metadata = {
        "compaction_experiment": {
            "of_session_id": session.id,
            "at_seq": point.seq,
            "at_event_id": point.event.event_id if point.event is not None else None,
        }
    }
    _pivots(session, point.boundary)  # a cut it cannot reproduce is refused before the fork exists
    info = session.store.create_session(
        fork_id, parent_session_id=session.id, fork_seq=point.seq, metadata=metadata
    )
    fork = Session(session.store, info.id, session.config)
    trials = [_recorded(fork, session.id, point)] if point.event is not None else []
    trials += [_trial(fork, session.id, point, v, config or CompactConfig()) for v in variants]
    fork.append(trials)
    return CompactionComparison(
        session.id, fork.id, point.seq, point.event.event_id if point.event else None, tuple(trials)
    )

"""Pre-computed compaction: when a preparation is due, and when one has gone stale.

A ``CompactionPrepared`` holds the summary of the view messages that began at or before its
``through_seq``. Committed at the threshold, the compaction replaces those messages with it and
keeps everything after them verbatim. That is only right while the preparation still describes
the history, so it is *stale* (and discarded, recorded) when any of these holds, checked in this
order:

1. ``compacted``: the latest compaction is no longer the one it was prepared on (a compaction
   was recorded, or one reverted, since);
2. ``changed``: what it summarized is not what the request now holds up to ``through_seq``
   (``covered_tokens`` differs: a message grew, e.g. results merged into it; a snip or a
   collapse was committed or reverted since, so messages it never saw would be dropped or ones
   it summarized are gone), a snip took messages that came after it out of the request, or a
   committed collapse spans the cut (part of its span would be summarized, part kept);
3. ``unclean_cut``: the first message after it opens with tool results (their calls would be
   summarized away);
4. ``grown``: the messages after it weigh more than ``precompute_max_growth_percent`` of the
   effective window (calibrated estimate, as the view holds them: less what persisted results,
   clears and collapses freed): the kept tail would be most of the new context;
5. ``above_threshold`` (checked by the compaction, which knows the restored attachments):
   committing it would leave "used" at or above the auto-compact threshold.

Nothing here calls a model or appends; ``_compaction`` prepares, commits and discards.
``BackgroundPreparer`` runs the preparation's model call on a worker thread.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Literal

from ..projections import ApiContextState, CollapseEdit, PreparedCompaction, Session
from ..projections._api_context import committed_spans, leading_results, view_size

__all__ = [
    "BackgroundPreparer",
    "StaleReason",
    "covered_tokens",
    "prepared_keep_index",
    "preparation_mark",
    "stale_reason",
]

StaleReason = Literal["compacted", "changed", "grown", "above_threshold", "unclean_cut"]


def preparation_mark(session: Session, percent: float) -> int:
    """The "used" tokens from which a preparation is due: ``percent`` of the auto-compact threshold."""
    return math.ceil(session.token_state().window.autocompact_threshold * percent / 100)


def prepared_keep_index(session: Session, prepared: PreparedCompaction) -> int:
    """Index of the first view message a commit of ``prepared`` keeps (``len(messages)``: none)."""
    return bisect.bisect_right(session.api_state.message_first_seq, prepared.through_seq)


def covered_tokens(state: ApiContextState, keep: int) -> int:
    """Raw tokens of the visible messages before index ``keep``, less what committed collapses
    among them freed: what a summary of them saw. A snip or a collapse committed or reverted
    since changes it, as does a message that grew."""
    first = state.first_visible
    collapsed = sum(
        edit.tokens
        for edit in state.edits.values()
        if isinstance(edit, CollapseEdit)
        and first <= bisect.bisect_left(state.message_first_seq, edit.first_seq) < keep
    )
    return sum(state.message_tokens[first:keep]) - collapsed


def stale_reason(
    session: Session, prepared: PreparedCompaction, max_growth_percent: float
) -> tuple[StaleReason, str] | None:
    """Why ``prepared`` may no longer be committed (rules 1-4 of the module docstring), or None."""
    state = session.api_state
    base = state.compact.event_id if state.compact is not None else None
    if base != prepared.base_compaction_event_id:
        was = prepared.base_compaction_event_id or "none"
        return "compacted", f"prepared on compaction {was}, the latest is now {base or 'none'}"
    keep = prepared_keep_index(session, prepared)
    if keep < state.first_visible:
        return "changed", "a snip took messages after it out of the request"
    if any(start < keep < end for start, end, _ in committed_spans(state)):
        return "changed", "a collapse committed since spans the messages it covers and those after it"
    covered = covered_tokens(state, keep)
    if covered != prepared.covered_tokens:
        return (
            "changed",
            f"the messages it covers hold {covered} tokens, {prepared.covered_tokens} when prepared",
        )
    messages = state.messages
    if keep < len(messages) and messages.role(keep) == "user" and leading_results(messages[keep]["content"]):
        return "unclean_cut", "the first message after it opens with tool results"
    grown = session.estimate(*view_size(state, keep, len(messages)))
    limit = math.floor(session.token_state().window.effective_window * max_growth_percent / 100)
    if grown > limit:
        share = f"{max_growth_percent}% of the window"
        return "grown", f"{grown} tokens came after it, more than {limit} ({share})"
    return None


class BackgroundPreparer:
    """Runs compaction preparations on a worker thread, one at a time per session.

    Give it to ``CompactConfig(preparer=...)``: the turn that crosses the mark captures the
    preparation and hands its summarizer call here instead of waiting for it; a later turn
    records the result (``CompactionPrepared``) once it is done, and the compaction at the
    threshold waits for one still running. Only the model call runs on the worker: every event
    is appended on the session's own thread. Close it (or use it as a context manager) to wait
    for the calls in flight and stop the worker.
    """

    def __init__(self, max_workers: int = 1) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="sessionstore-precompute"
        )
        self._jobs: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()

    def submit(self, session_id: str, job: Callable[[], Any]) -> None:
        """Start ``job`` for ``session_id`` unless one for it is still held."""
        with self._lock:
            if session_id not in self._jobs:
                self._jobs[session_id] = self._executor.submit(job)

    def running(self, session_id: str) -> bool:
        """True while a job for ``session_id`` has not finished."""
        with self._lock:
            future = self._jobs.get(session_id)
        return future is not None and not future.done()

    def wait(self, session_id: str) -> None:
        """Block until the job for ``session_id``, if any, has finished (its result stays to be taken)."""
        with self._lock:
            future = self._jobs.get(session_id)
        if future is not None:
            futures.wait([future])

    def take(self, session_id: str, *, wait: bool = False) -> Any:
        """The result of the session's job, handed out once; None when there is none (or, without
        ``wait``, it has not finished). A job that raised re-raises here, on the caller's thread."""
        with self._lock:
            future = self._jobs.get(session_id)
            if future is None or not (wait or future.done()):
                return None
            del self._jobs[session_id]
        return future.result()

    def close(self) -> None:
        """Wait for the jobs in flight, then stop the worker (their results are dropped)."""
        self._executor.shutdown(wait=True)
        with self._lock:
            self._jobs.clear()

    def __enter__(self) -> BackgroundPreparer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

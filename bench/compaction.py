"""What each context-reduction strategy buys and costs, and how often it fires in a live session.

Usage::

    python bench/compaction.py [--quick] [--sizes 2000,10000] [--live-turns N] [--profile]

No network: every summary comes from ``OfflineSummarizer`` (deterministic, extractive). Every
store is a SQLite file in a temporary folder (``open_store(path, migrate=True)``: WAL,
``synchronous=FULL``) with token counting on (tiktoken cl100k, the default counter).

The workload
------------
Seeded and deterministic. A *turn* is a user prompt (20-1,500 characters), then 1-3 API rounds
in which the assistant writes a short text and 1-3 ``tool_use`` blocks (Bash, Read, Edit, Grep,
Write) and the user message answers them with ``tool_result`` blocks of 200 B - 20 KB
(log-uniform; 5% flagged ``is_error``), then a final round in which the assistant answers
(100-3,000 characters, no tool call). Every round records a ``UsageRecorded`` right after its
assistant message, whose numbers follow the context: input = "used" before the round plus the
calibrated estimate of what the turn added before it, output = the estimate of the assistant
message, so ``used_tokens()`` tracks the view as an API would report it. About 9 events,
~24 KB of request JSON and ~6,900 tokens (calibrated estimate) a turn. Model ``claude-opus-5-5`` with
``context_window=200_000, max_output_tokens=64_000``: effective window 180,000, auto-compact
threshold 167,000, blocking limit 177,000.

(a) One reduction of a long session, per strategy and history size (2,000 and 10,000 turns;
``--quick``: 300 and 1,000). One session is grown to each size in turn with batched
``store.append`` (500 events a batch; two worker processes tokenize while the main process
appends; not timed) and the file is copied aside at each size. The history is *counted*
(tiktoken), not appended with ``token_counter=None``: without stored counts every message weighs
0 tokens, so a session-memory compact finds no cut (``memory_keep_index`` never reaches
``memory_min_tokens``) and a collapse frees no counted tokens (only the per-block overhead of the
estimate). That copy is copied again per strategy and a ``Session`` is opened on it (full fold,
``SessionConfig(snapshot_every=0)``; not timed), so every strategy starts from the same history.
(Automatic snapshots are off: with the default every 1,000 events, the append inside a reduction
that crosses a multiple of 1,000 would also write a full snapshot of both views, ~10 s at 10,000
turns; bench/projection.py costs those.)

* ``llm``: ``compact(session, OfflineSummarizer(), trigger="manual")``, the base template over
  the whole request.
* ``memory``: ``maybe_extract_memory(session, summarizer, CompactConfig())`` records a
  ``SessionMemoryUpdated`` (the background summarizer call; its time is ``prep``), then
  ``compact(..., use_memory=True)`` (no summarizer call: the memory is the summary; it keeps the
  newest 10,000-40,000 tokens verbatim).
* ``collapse``: every span the pipeline's policy would pick (``CollapseConfig()``: 8 API rounds,
  from a user prompt to just before the next one, the newest 4 rounds left out; consecutive spans
  share their boundary prompt, as ``_next_span`` makes them) is staged with ``stage_collapse``
  (one summarizer call and one append each: the work done ahead of pressure, ``prep``), then
  ``drain_collapses`` commits them all at once (the overflow recovery, no model call).
  ``Pipeline.prepare`` alone cannot do this: it stages one span per call and would raise
  ``BlockingLimitError`` on a session this far over the window.

Columns: ``tokens`` = ``session.used_tokens()`` before and after (before: anchored on the last
``UsageRecorded``; after a compaction: the calibrated estimate of the new view, since a boundary
drops the usage anchor); ``req est`` = an independent calibrated estimate of the request
``materialize`` actually builds (stored counts of the messages it shares with the state, fresh
counts of every other message): it should equal ``after``, and a note flags it when it does not;
``req MB`` = ``len(request_bytes)`` before and after; ``msgs`` = messages in the request;
``offline ms`` = wall time of the reduction call itself (``compact(...)`` / ``drain_collapses``),
with the parts of it spent in the summarizer (``summ``), building the transcript view
(``transcr``: ``Session._loaded_transcript``; on first use a full re-read of the log, which
``compact()`` needs for the last message's uuid), building the session's file-history view (``files``: a
fold of the log, to put recently read files back after the summary), in ``count_text``
(``tok``) and in ``session.append`` (``append``); ``prep ms`` = the summarizer work
done before (memory extraction; staging every span); ``summary KB`` = the summary (collapse: all
of them together).

(b) Cadence in a live session. A fresh session is driven turn by turn for ``--live-turns``
(1,000; ``--quick`` 400; ~40 compactions at ~24 turns each, enough to see the cadence settle, and
what keeps the full run within 5 minutes): append one turn (prompt, rounds, usages, answer) in one
``session.append``, then ``Pipeline(config, summarizer=OfflineSummarizer(), clock=...)
.prepare(session)``. The clock reads one minute after the last assistant message, so time-based
micro-compact never fires. Each round's usage is ``used_tokens()`` before the turn plus the turn's
calibrated size so far. A run ends early at the first ``BlockingLimitError``. The four runs are
independent sessions and run two at a time (one process per core). Configurations:

* ``auto (memory)``: ``PipelineConfig()`` as shipped: auto-compact with session memory
  (extraction when due, memory compact first, LLM compact if it fails or stays above the
  threshold).
* ``memory, pacing before``: the same, with memory extraction paced as it was before it was
  relative to the window (every 5,000 tokens of growth, and at once after each compaction;
  ``_extraction_due_before``, patched in for that run's process): the reference for the
  ``memory extractions per 100 turns`` line under the table.
* ``auto (llm only)``: ``PipelineConfig(compact=CompactConfig(session_memory=False))``.
* ``collapse``: ``PipelineConfig(collapse=CollapseConfig(enabled=True))`` (auto-compact never
  fires then; stage from 80%, commit from 90% of the effective window).

Columns: ``events`` = compact boundaries (collapse: commits); ``first`` = the turn of the first;
``gap turns`` = turns between consecutive ones (the first counted from turn 0; 0 = two in one
``prepare``); ``summary KB`` = the summary of the first and of the last boundary (collapse: the
median staged summary); ``used after`` = ``used_tokens()`` right after the first and the last
boundary; ``memory`` = ``SessionMemoryUpdated`` events; ``prepare ms`` = median and max of
``prepare`` (the max is a turn that compacted); ``append`` = median ``session.append`` of a turn;
``end: used/req est`` = ``used_tokens()`` and the request estimate of (a) at the end; ``end`` =
``ok`` or where a ``BlockingLimitError`` stopped the run. Below the table: the gaps in order, the
strategy, summary size and ``used_tokens()`` after every boundary, the ``prepare`` time of the
compacting turns with the total spent building the file-history view, and a MISMATCH line when,
after some boundary or commit, the request held more than ``used_tokens()`` said (the worst case).

``--profile`` adds cProfile tables (own time, top 16) of one ``compact()`` and one memory
compact at the largest size, each on its own copy. On a 2-core machine the full run takes 3-4
minutes (the live runs use both cores), ``--quick`` 30-40 s. The script only reports; no targets
are asserted.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import math
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import SYSTEM_PROMPT, TOOL_NAMES, TOOLS, PooledText, print_table, profiled, text_pool

import sessionstore
from sessionstore import (
    Event,
    MessageAppended,
    Session,
    SessionConfig,
    SessionStarted,
    UsageRecorded,
    open_store,
)
from sessionstore.errors import BlockingLimitError
from sessionstore.events import ContextConfigured
from sessionstore.events._base import _block_text
from sessionstore.pipeline import _compaction
from sessionstore.pipeline._collapse import CollapseConfig, drain_collapses, stage_collapse
from sessionstore.pipeline._compaction import CompactConfig, compact, maybe_extract_memory
from sessionstore.pipeline._pipeline import Pipeline, PipelineConfig
from sessionstore.pipeline._summarizers import OfflineSummarizer
from sessionstore.projections._api_context import leading_results
from sessionstore.projections._session import DEFAULT_BLOCK_OVERHEAD, DEFAULT_CALIBRATION
from sessionstore.store._tokens import TiktokenCounter

SEED = 20250617
MODEL = "claude-opus-5-5"
CONTEXT_WINDOW = 200_000
MAX_OUTPUT_TOKENS = 64_000
FULL_SIZES, QUICK_SIZES = (2_000, 10_000), (300, 1_000)
FULL_LIVE, QUICK_LIVE = 1_000, 400
#: The live run with memory extraction paced as before (``_extraction_due_before``).
PACED_BEFORE = "memory, pacing before"
SETUP_BATCH = 500
COUNT_BATCH = 50  # turns per tokenizing task
BASE_TIME = datetime(2025, 6, 17, 9, 0, tzinfo=UTC)
TURN_SPACING = timedelta(seconds=90)

# --- the workload ----------------------------------------------------------------------------


@functools.cache
def _pool(chars: int = 1_500_000) -> str:
    """The text every workload slices its strings from (seeded; built once per process)."""
    return text_pool(random.Random(SEED), chars)


@dataclass
class Round:
    api_id: str
    blocks: list[dict[str, Any]]
    results: list[dict[str, Any]]  # empty on the final round


@dataclass
class Turn:
    index: int
    prompt: str
    rounds: list[Round]

    @property
    def when(self) -> datetime:
        return BASE_TIME + TURN_SPACING * self.index


class Workload(PooledText):
    """Deterministic turns (seeded): ``turn()`` gives the next one."""

    def __init__(self, seed: int = SEED) -> None:
        super().__init__(random.Random(seed), _pool())
        self.turns_made = 0

    def turn(self) -> Turn:
        rng = self.rng
        prompt = self.text(rng.randint(20, 1500))
        rounds: list[Round] = []
        for _ in range(rng.randint(1, 3)):
            calls = [self._tool_use(rng.choice(TOOL_NAMES)) for _ in range(rng.randint(1, 3))]
            results = []
            for call in calls:
                result: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": call["id"],
                    "content": self.text(int(200 * 100 ** rng.random())),  # 200 B - 20 KB, log-uniform
                }
                if rng.random() < 0.05:
                    result["is_error"] = True
                results.append(result)
            text = {"type": "text", "text": self.text(rng.randint(20, 300))}
            rounds.append(Round(self._id("msg_01"), [text, *calls], results))
        answer = {"type": "text", "text": self.text(rng.randint(100, 3000))}
        rounds.append(Round(self._id("msg_01"), [answer], []))
        self.turns_made += 1
        return Turn(self.turns_made - 1, prompt, rounds)


class MemoCounter:
    """The default tiktoken counter, remembering each event's count by event id.

    The benchmark counts a turn's events to set its usage numbers, then appends them: the store
    calls ``count`` again on the same events and gets the remembered number instead of a second
    tokenization. Same name as the wrapped counter: nothing else changes.
    """

    def __init__(self) -> None:
        self.inner = TiktokenCounter()
        self.name = self.inner.name
        self._memo: dict[str, int | None] = {}

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def remember(self, event: Event, count: int | None) -> None:
        """Use ``count`` (counted elsewhere) when the store counts ``event``."""
        self._memo[str(event.event_id)] = count

    def precount(self, event: Event) -> int | None:
        """Count ``event`` now and remember it for the store's ``count`` call."""
        value = self._memo[str(event.event_id)] = self.inner.count(event)
        return value

    def count(self, event: Event) -> int | None:
        key = str(event.event_id)
        return self._memo.pop(key) if key in self._memo else self.inner.count(event)


def _estimate(raw: int, blocks: int) -> int:
    """The session's calibrated estimate (``Session.estimate`` with the default config)."""
    return math.ceil(raw * DEFAULT_CALIBRATION + blocks * DEFAULT_BLOCK_OVERHEAD)


def turn_messages(turn: Turn) -> list[MessageAppended]:
    """The message events of one turn: the prompt, then per round the assistant message and results."""
    when = turn.when
    messages = [MessageAppended(role="user", content=turn.prompt, timestamp=when)]
    for k, rnd in enumerate(turn.rounds):
        moment = when + timedelta(seconds=5 + 10 * k)
        messages.append(
            MessageAppended(
                role="assistant",
                content=rnd.blocks,
                api_message_id=rnd.api_id,
                stop_reason="tool_use" if rnd.results else "end_turn",
                timestamp=moment,
            )
        )
        if rnd.results:
            messages.append(
                MessageAppended(role="user", content=rnd.results, timestamp=moment + timedelta(seconds=5))
            )
    return messages


def with_usage(
    messages: list[MessageAppended], counts: list[int], used_before: int
) -> tuple[list[Event], int]:
    """The turn's events with a ``UsageRecorded`` after each assistant message; and "used" after it.

    Round k's usage: input = ``used_before`` + the estimate of what the turn added before its
    assistant message; output = the estimate of that assistant message.
    """
    events: list[Event] = []
    raw = blocks = 0
    for message, count in zip(messages, counts, strict=True):
        before = used_before + _estimate(raw, blocks)
        events.append(message)
        raw += count
        blocks += 1 if isinstance(message.content, str) else len(message.content)
        if message.role == "assistant":
            after = used_before + _estimate(raw, blocks)
            events.append(
                UsageRecorded(
                    input_tokens=before,
                    output_tokens=after - before,
                    api_message_id=message.api_message_id,
                    model=MODEL,
                )
            )
    return events, used_before + _estimate(raw, blocks)


def turn_events(turn: Turn, counter: MemoCounter, used_before: int) -> tuple[list[Event], int]:
    """``with_usage`` of the turn's messages, counted here (remembered for the store's count)."""
    messages = turn_messages(turn)
    return with_usage(messages, [counter.precount(m) or 0 for m in messages], used_before)


def _count_texts(batch: list[list[list[str]]]) -> list[list[int]]:
    """Worker: raw tokens of each message (its countable texts) of each turn of a batch."""
    counter = _worker_counter()
    return [[sum(counter.count_text(t) for t in texts if t) for texts in turn] for turn in batch]


@functools.cache
def _worker_counter() -> TiktokenCounter:
    return TiktokenCounter()


# --- measuring helpers -------------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return seconds * 1e3


class Timer:
    """Accumulated wall time (seconds) and calls of one wrapped callable."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0


class Probe:
    """Timers patched onto live objects, classes and module globals, restored by ``close``.

    Nothing in the package is edited: ``wrap`` swaps an attribute for a plain function that
    times the original (a plain function, so it also binds as a method when ``owner`` is a
    class). A name a later version no longer has is skipped, and its column shows ``-``.
    """

    def __init__(self) -> None:
        self.timers: dict[str, Timer] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        had_own = attr in getattr(owner, "__dict__", {})
        fn = owner.__dict__[attr] if had_own else getattr(owner, attr, None)
        if fn is None:
            return
        timer = self.timers.setdefault(label, Timer())

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timer.total += time.perf_counter() - start
                timer.calls += 1

        setattr(owner, attr, timed)
        self._undo.append(lambda: setattr(owner, attr, fn) if had_own else delattr(owner, attr))

    def seconds(self, label: str) -> float | None:
        timer = self.timers.get(label)
        return timer.total if timer is not None else None

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def _probe(session: Session, summarizer: OfflineSummarizer) -> Probe:
    """Where a reduction's time goes: the columns summ, transcript, files, tok and append."""
    probe = Probe()
    probe.wrap(summarizer, "summarize", "summ")
    probe.wrap(session, "_loaded_transcript", "transcript")  # built on first use: a full re-read
    probe.wrap(session, "_loaded_file_history", "files")  # built on first use: folds the log
    probe.wrap(session, "count_text", "tok")
    probe.wrap(session, "append", "append")
    return probe


# --- (a) one reduction of a long session --------------------------------------------------------


class HistoryBuilder:
    """Grows one session turn by turn with batched ``store.append``, counting on (not timed).

    Tokenizing is most of the work: two worker processes count batches of turns while this
    process generates the next batches and appends the counted ones.
    """

    def __init__(self, path: Path, pool: Any) -> None:
        self.path = path
        self.pool = pool
        self.counter = MemoCounter()
        self.store = open_store(path, migrate=True, token_counter=self.counter)
        configured = ContextConfigured(system=SYSTEM_PROMPT, tools=TOOLS)
        self.used = _estimate(self.counter.inner.count(configured) or 0, 0)
        started = SessionStarted(
            model=MODEL, context_window=CONTEXT_WINDOW, max_output_tokens=MAX_OUTPUT_TOKENS
        )
        self.sid = self.store.create_session(events=[started, configured]).id
        self.last = self.store.last_seq(self.sid)
        self.workload = Workload()
        self.batch: list[Event] = []
        self.pending: collections.deque[tuple[list[list[MessageAppended]], Any]] = collections.deque()

    def _take_counted(self) -> None:
        turns, result = self.pending.popleft()
        for messages, counts in zip(turns, result.get(), strict=True):
            for message, count in zip(messages, counts, strict=True):
                self.counter.remember(message, count)
            events, self.used = with_usage(messages, counts, self.used)
            self.batch.extend(events)
        if len(self.batch) >= SETUP_BATCH:
            self._flush()

    def _flush(self) -> None:
        if self.batch:
            self.last = self.store.append(self.sid, self.batch, self.last).last_seq
            self.batch = []

    def grow(self, size: int) -> None:
        """Append turns until the session holds ``size`` turns."""
        while self.workload.turns_made < size:
            turns = [
                turn_messages(self.workload.turn())
                for _ in range(min(COUNT_BATCH, size - self.workload.turns_made))
            ]
            texts = [[m.countable_text() for m in messages] for messages in turns]
            self.pending.append((turns, self.pool.apply_async(_count_texts, (texts,))))
            if len(self.pending) > 4:
                self._take_counted()
        while self.pending:
            self._take_counted()
        self._flush()

    def copy_to(self, target: Path) -> Path:
        """Copy the database as it is now (closing the store checkpoints the WAL first)."""
        self.store.close()
        _copy(self.path, target)
        self.store = open_store(self.path, migrate=True, token_counter=self.counter)
        return target

    def close(self) -> None:
        self.store.close()
        _unlink(self.path)


def build_histories(folder: Path, sizes: tuple[int, ...]) -> tuple[str, dict[int, tuple[Path, float, int]]]:
    """One session grown to each size in turn, copied aside at each (not timed).

    The smaller histories are prefixes of the larger ones, so no turn is generated or tokenized
    twice. Returns the session id and, per size, the copy, the cumulative seconds spent building
    and the number of events.
    """
    started = time.perf_counter()
    built: dict[int, tuple[Path, float, int]] = {}
    with multiprocessing.get_context("fork").Pool(2) as pool:
        builder = HistoryBuilder(folder / "history.db", pool)
        try:
            for size in sorted(sizes):
                builder.grow(size)
                copy = builder.copy_to(folder / f"history-{size}.db")
                built[size] = (copy, time.perf_counter() - started, builder.last)
        finally:
            builder.close()
    return builder.sid, built


def _copy(source: Path, target: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
    return target


@dataclass
class ReductionRow:
    turns: int
    strategy: str
    used: str  # what actually ran (e.g. a memory compact that fell back to llm)
    tokens_before: int
    tokens_after: int
    request_after: int
    mb_before: float
    mb_after: float
    msgs_before: int
    msgs_after: int
    offline_ms: float
    parts_ms: dict[str, float | None]
    prep_ms: float | None
    summary_kb: float
    note: str = ""


def _spans(session: Session, config: CollapseConfig) -> Iterator[tuple[int, int]]:
    """Every span ``_next_span`` would pick one after the other, found in one pass.

    (``_next_span`` recounts the rounds of the whole uncovered tail on each call: fine for a live
    session, quadratic for staging a 10,000-turn history from scratch.)
    """
    state = session.api_state
    messages = state.messages

    def prompt(i: int) -> bool:
        m = messages[i]
        return m["role"] == "user" and isinstance(m["content"], list) and leading_results(m["content"]) == 0

    total = sum(1 for m in messages[state.first_visible :] if m["role"] == "assistant")
    seen = 0  # rounds before ``start``
    start = next((i for i in range(state.first_visible, len(messages)) if prompt(i)), None)
    while start is not None:
        rounds = 0
        end = None
        for index in range(start, len(messages) - 1):
            if messages[index]["role"] == "assistant":
                rounds += 1
            elif rounds >= config.span_rounds and index > start and prompt(index):
                end = index
                break
        if end is None or total - seen - rounds < config.keep_recent_rounds:
            return
        yield start, end
        seen += rounds
        start = end


def request_estimate(session: Session) -> int:
    """The calibrated token estimate of the request ``materialize`` actually builds.

    Independent of the session's running accounting (``removed_tokens``): messages the request
    shares with the state weigh their stored count, every other message (summaries, merged or
    trimmed messages) is counted now. Should agree with ``used_tokens()`` when no usage anchors it.
    """
    state = session.api_state
    known = {id(m): t for m, t in zip(state.messages, state.message_tokens, strict=True)}
    raw, blocks = state.context_tokens, 0
    for message in session.request()["messages"]:
        blocks += len(message["content"])
        tokens = known.get(id(message))
        if tokens is None:
            tokens = sum(_counted(session, t) for b in message["content"] for t in _block_text(b) if t)
        raw += tokens
    return session.estimate(raw, blocks)


_COUNTED: dict[str, int] = {}


def _counted(session: Session, text: str) -> int:
    """``session.count_text`` remembered by text (summaries come back in every request)."""
    count = _COUNTED.get(text)
    if count is None:
        count = _COUNTED[text] = session.count_text(text)
    return count


def _request_stats(session: Session) -> tuple[float, int]:
    request = session.request()
    return len(json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()) / 1e6, len(
        request["messages"]
    )


def reduce_once(session: Session, strategy: str, turns: int) -> tuple[ReductionRow, float]:
    """Run one strategy on a freshly opened session; returns the row and its own wall time."""
    started = time.perf_counter()
    summarizer = OfflineSummarizer()
    before = session.used_tokens()
    prep: float | None = None
    note = ""
    probe = _probe(session, summarizer)
    if strategy == "llm":
        t0 = time.perf_counter()
        report = compact(session, summarizer, trigger="manual")
        offline = time.perf_counter() - t0
        used = report.strategy if report.ok else f"failed: {report.reason}"
        summary = len(session.api_state.compact.summary.encode()) if session.api_state.compact else 0
        if report.above_threshold:
            note = "still above the auto-compact threshold"
    elif strategy == "memory":
        probe.close()
        t0 = time.perf_counter()
        extracted = maybe_extract_memory(session, summarizer, CompactConfig())
        prep = time.perf_counter() - t0
        if not extracted:
            note = "no memory extracted"
        probe = _probe(session, summarizer)
        t0 = time.perf_counter()
        report = compact(session, summarizer, trigger="manual", use_memory=True)
        offline = time.perf_counter() - t0
        used = report.strategy if report.ok else f"failed: {report.reason}"
        if report.strategy != "session_memory":
            note = "memory compact found no cut: fell back to the LLM summary"
        elif report.above_threshold:
            note = "still above the auto-compact threshold"
        summary = len(session.api_state.compact.summary.encode()) if session.api_state.compact else 0
    else:
        probe.close()
        config = CollapseConfig(enabled=True)
        staged = 0
        t0 = time.perf_counter()
        summary = 0
        for start, end in list(_spans(session, config)):
            event = stage_collapse(session, summarizer, start, end)
            summary += len(event.summary.encode())
            staged += 1
        prep = time.perf_counter() - t0
        probe = _probe(session, summarizer)
        t0 = time.perf_counter()
        drained = drain_collapses(session)
        offline = time.perf_counter() - t0
        used = f"{len(drained.event_ids)} spans"
        if staged != len(drained.event_ids):
            note = f"staged {staged}, drained {len(drained.event_ids)}"
    parts = {label: probe.seconds(label) for label in ("summ", "transcript", "files", "tok", "append")}
    probe.close()
    after = session.used_tokens()
    mb_after, msgs_after = _request_stats(session)
    request_after = request_estimate(session)
    if request_after > 1.05 * after + 1_000:
        note = (note + "; " if note else "") + (
            f"the request holds {request_after:,} tokens, "
            f"{request_after / max(after, 1):.1f}x what used_tokens() reports"
        )
    row = ReductionRow(
        turns=turns,
        strategy=strategy,
        used=used,
        tokens_before=before,
        tokens_after=after,
        request_after=request_after,
        mb_before=0.0,
        mb_after=mb_after,
        msgs_before=0,
        msgs_after=msgs_after,
        offline_ms=_ms(offline),
        parts_ms={k: (_ms(v) if v is not None else None) for k, v in parts.items()},
        prep_ms=_ms(prep) if prep is not None else None,
        summary_kb=summary / 1e3,
        note=note,
    )
    return row, time.perf_counter() - started


def _open_session(path: Path, sid: str) -> tuple[Any, Session]:
    """A store with the default counter and a Session opened by a full fold, auto-snapshots off."""
    counter = TiktokenCounter()
    counter.count_text("warm up the tokenizer")
    store = open_store(path, migrate=True, token_counter=counter)
    return store, Session(store, sid, SessionConfig(snapshot_every=0))


def run_size(
    folder: Path, sid: str, turns: int, source: Path, *, profile: bool
) -> tuple[list[ReductionRow], list[str]]:
    timings: list[str] = []
    rows: list[ReductionRow] = []
    mb_before = msgs_before = None
    for strategy in ("llm", "memory", "collapse"):
        path = _copy(source, folder / f"history-{turns}-{strategy}.db")
        t0 = time.perf_counter()
        store, session = _open_session(path, sid)
        open_s = time.perf_counter() - t0
        if mb_before is None:
            mb_before, msgs_before = _request_stats(session)
            timings.append(f"open {open_s:.1f} s")
        gc.collect()
        row, spent = reduce_once(session, strategy, turns)
        row.mb_before, row.msgs_before = mb_before, msgs_before or 0
        rows.append(row)
        timings.append(f"{strategy} {spent:.1f} s")
        store.close()
        del session
        _unlink(path)
    if profile:
        for label, strategy in (("compact() (llm)", "llm"), ("compact(use_memory=True)", "memory")):
            path = _copy(source, folder / f"history-{turns}-profile.db")
            store, session = _open_session(path, sid)
            summarizer = OfflineSummarizer()
            if strategy == "memory":
                maybe_extract_memory(session, summarizer, CompactConfig())
            gc.collect()
            use_memory = strategy == "memory"

            def one(s: Session = session, f: OfflineSummarizer = summarizer, m: bool = use_memory) -> Any:
                return compact(s, f, use_memory=m)

            profiled(f"{label} at {turns:,} turns", one)
            store.close()
            del session
            _unlink(path)
    return rows, timings


def _unlink(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# --- (b) cadence in a live session -------------------------------------------------------------


@dataclass
class LiveRow:
    name: str
    turns: int
    boundaries: list[int] = field(default_factory=list)  # turn of each compact boundary
    strategies: list[str] = field(default_factory=list)
    summary_kb: list[float] = field(default_factory=list)
    after: list[int] = field(default_factory=list)  # used_tokens() after each boundary
    commits: list[int] = field(default_factory=list)  # turn of each collapse commit
    staged_kb: list[float] = field(default_factory=list)
    memory: int = 0
    failed: int = 0
    prepare_ms: list[float] = field(default_factory=list)
    append_ms: list[float] = field(default_factory=list)
    end: str = "ok"
    end_used: int = 0
    end_request: int = 0
    worst: tuple[float, int, int, int] = (0.0, 0, 0, 0)  # (request/used, turn, used, request)
    compact_ms: list[float] = field(default_factory=list)  # prepare of the turns that compacted
    files_s: float | None = None  # total time building the file-history view
    seconds: float = 0.0


def _extraction_due_before(session: Session, config: CompactConfig) -> bool:
    """Memory extraction's pacing before it was relative to the window (the reference run).

    First at ``extract_init_tokens``, and again at once after every compaction; else after
    ``extract_growth_tokens`` (5,000) of growth and (3 tool calls or a turn without one).
    """
    state = session.api_state
    used = session.used_tokens()
    memory = state.memory
    if memory is None or (state.compact is not None and memory.last_summarized_seq < state.compact.seq):
        return used >= config.extract_init_tokens and bool(state.messages)
    grown = used - memory.tokens_at_extraction >= config.extract_growth_tokens
    calls = state.tool_calls - memory.tool_calls_at_extraction >= config.extract_tool_calls
    last = state.messages[-1] if state.messages else None
    quiet = (
        last is not None
        and last["role"] == "assistant"
        and not any(b.get("type") == "tool_use" for b in last["content"])
    )
    return grown and (calls or quiet) and bool(state.messages)


def run_live(
    folder: Path, name: str, config: PipelineConfig, turns: int, pacing_before: bool = False
) -> LiveRow:
    """Drive a fresh session for ``turns`` turns: append a turn, then ``prepare``.

    ``pacing_before``: memory extraction paced as before (``_extraction_due_before``), patched in
    for this run's process only.
    """
    if pacing_before:
        _compaction.memory_extraction_due = _extraction_due_before
    started = time.perf_counter()
    counter = MemoCounter()
    path = folder / f"live-{sum(map(ord, name))}.db"
    store = open_store(path, migrate=True, token_counter=counter)
    counter.count_text("warm up the tokenizer")
    session = Session.create(
        store,
        model=MODEL,
        context_window=CONTEXT_WINDOW,
        max_output_tokens=MAX_OUTPUT_TOKENS,
        system=SYSTEM_PROMPT,
        tools=TOOLS,
    )
    workload = Workload(SEED + 1)
    now = [BASE_TIME]
    pipeline = Pipeline(config, summarizer=OfflineSummarizer(), clock=lambda: now[0])
    row = LiveRow(name, turns)
    probe = Probe()
    probe.wrap(session, "_loaded_file_history", "files")

    def check(index: int) -> None:
        used, request = session.used_tokens(), request_estimate(session)
        ratio = request / max(used, 1)
        if ratio > row.worst[0]:
            row.worst = (ratio, index, used, request)

    try:
        for index in range(1, turns + 1):
            turn = workload.turn()
            events, _ = turn_events(turn, counter, session.used_tokens())
            t0 = time.perf_counter()
            session.append(events)
            row.append_ms.append(_ms(time.perf_counter() - t0))
            now[0] = turn.when + timedelta(minutes=1)
            seq = session.last_seq
            t0 = time.perf_counter()
            try:
                pipeline.prepare(session)
            except BlockingLimitError as e:
                row.end = f"blocked at turn {index} ({e.used:,} tokens)"
                row.turns = index
                break
            finally:
                row.prepare_ms.append(_ms(time.perf_counter() - t0))
            changed = False
            for recorded in store.read(session.id, seq + 1):
                kind = recorded.type
                if kind == "compact_boundary":
                    payload = recorded.payload_dict()
                    row.boundaries.append(index)
                    row.strategies.append(str(payload["strategy"]))
                    row.summary_kb.append(len(str(payload["summary"]).encode()) / 1e3)
                    row.after.append(session.used_tokens())
                    changed = True
                elif kind == "compact_failed":
                    row.failed += 1
                elif kind == "collapse_committed":
                    row.commits.append(index)
                    changed = True
                elif kind == "collapse_staged":
                    row.staged_kb.append(len(str(recorded.payload_dict()["summary"]).encode()) / 1e3)
                elif kind == "session_memory_updated":
                    row.memory += 1
            if changed:
                check(index)
            if row.boundaries and row.boundaries[-1] == index:
                row.compact_ms.append(row.prepare_ms[-1])
        row.end_used, row.end_request = session.used_tokens(), request_estimate(session)
        check(row.turns)
    finally:
        row.files_s = probe.seconds("files")
        probe.close()
        store.close()
        row.seconds = time.perf_counter() - started
    _unlink(path)
    return row


# --- output ----------------------------------------------------------------------------------


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _gaps(turns: list[int]) -> list[int]:
    """Turns between consecutive events (the first counted from turn 0); 0 = same turn."""
    return [b - a for a, b in zip([0, *turns], turns, strict=False)]


def _k(tokens: int) -> str:
    return f"{tokens / 1e3:,.0f}k"


def print_reductions(rows: list[ReductionRow]) -> None:
    print(
        "\n(a) one reduction of a long session. Histories: batched store.append, token counting ON "
        "(tiktoken), not token_counter=None (see the docstring)"
    )
    print_table(
        [
            ("history", "turns", 7),
            ("strategy", "", 8),
            ("tokens", "before", 8),
            ("tokens", "after", 7),
            ("after/", "before", 6),
            ("req est", "after", 8),
            ("req MB", "before", 7),
            ("req MB", "after", 7),
            ("msgs", "before", 7),
            ("msgs", "after", 6),
            ("offline", "ms", 8),
            ("summ", "ms", 6),
            ("transcr", "ms", 7),
            ("files", "ms", 6),
            ("tok", "ms", 5),
            ("append", "ms", 6),
            ("prep", "ms", 7),
            ("summary", "KB", 8),
            ("ran", "", 14),
        ],
        [
            [
                f"{r.turns:,}",
                r.strategy,
                _k(r.tokens_before),
                _k(r.tokens_after),
                f"{r.tokens_after / r.tokens_before:.3f}" if r.tokens_before else "-",
                _k(r.request_after),
                f"{r.mb_before:.1f}",
                f"{r.mb_after:.2f}",
                f"{r.msgs_before:,}",
                f"{r.msgs_after:,}",
                f"{r.offline_ms:,.0f}",
                _opt(r.parts_ms["summ"]),
                _opt(r.parts_ms["transcript"]),
                _opt(r.parts_ms["files"]),
                _opt(r.parts_ms["tok"]),
                _opt(r.parts_ms["append"]),
                _opt(r.prep_ms),
                f"{r.summary_kb:,.0f}",
                r.used,
            ]
            for r in rows
        ],
    )
    print(
        "  tokens: used_tokens(); req est: the materialized request's own calibrated estimate (should"
        " equal 'after'); offline = the reduction call; summ/transcr/files/tok/append: parts of it; prep:"
        " summarizer work done earlier (memory extraction, staging every span)"
    )
    for r in rows:
        if r.note:
            print(f"  note: {r.turns:,} turns, {r.strategy}: {r.note}")


def print_live(rows: list[LiveRow]) -> None:
    print(
        f"\n(b) cadence in a live session: {MODEL}, window {CONTEXT_WINDOW:,}, max output "
        f"{MAX_OUTPUT_TOKENS:,} (auto-compact at 167k, blocking limit 177k); append a turn, then prepare()"
    )
    table = []
    for r in rows:
        marks = r.commits or r.boundaries
        gaps = _gaps(marks)
        if r.commits:
            kb = f"{statistics.median(r.staged_kb):.1f} (median)" if r.staged_kb else "-"
            after = "-"
        else:
            kb = f"{r.summary_kb[0]:.0f} -> {r.summary_kb[-1]:.0f}" if r.summary_kb else "-"
            after = f"{_k(r.after[0])} -> {_k(r.after[-1])}" if r.after else "-"
        table.append(
            [
                r.name,
                f"{r.turns:,}",
                f"{len(marks)}" + (" commits" if r.commits else ""),
                f"{marks[0]}" if marks else "-",
                f"{min(gaps)}/{statistics.median(gaps):g}/{max(gaps)}" if gaps else "-",
                kb,
                after,
                f"{r.memory}",
                f"{statistics.median(r.prepare_ms):.1f}/{max(r.prepare_ms):,.0f}",
                f"{statistics.median(r.append_ms):.1f}",
                f"{_k(r.end_used)}/{_k(r.end_request)}",
                r.end,
            ]
        )
    print_table(
        [
            ("config", "", 15),
            ("turns", "", 5),
            ("events", "", 11),
            ("first", "turn", 5),
            ("gap turns", "min/med/max", 11),
            ("summary KB", "first -> last", 13),
            ("used after", "first -> last", 13),
            ("memory", "updates", 7),
            ("prepare ms", "med/max", 10),
            ("append", "ms", 6),
            ("end: used/", "req est", 11),
            ("end", "", 30),
        ],
        table,
    )
    paced = {r.name: r for r in rows}
    if "auto (memory)" in paced and PACED_BEFORE in paced:
        now, before = paced["auto (memory)"], paced[PACED_BEFORE]
        print(
            f"  memory extractions per 100 turns: {100 * before.memory / before.turns:.0f} paced as before "
            f"(5,000 tokens; again at once after each compaction), {100 * now.memory / now.turns:.0f} now "
            f"(10% of the effective window since the last extraction or compaction)"
        )
    for r in rows:
        if r.commits:
            gaps = _gaps(r.commits)
            print(
                f"  {r.name}: {len(r.staged_kb)} staged, {len(r.commits)} committed; turns between commits "
                f"(first 30): {gaps[:30]}"
            )
        else:
            print(f"  {r.name}: turns between compactions: {_gaps(r.boundaries)}")
            print(f"  {r.name}: strategy of each: {_runs(r.strategies)}; CompactFailed: {r.failed}")
            print(f"  {r.name}: summary KB of each: " + ", ".join(f"{kb:.0f}" for kb in r.summary_kb))
            print(f"  {r.name}: used_tokens() after each: " + ", ".join(_k(u) for u in r.after))
            if r.compact_ms:
                files = "-" if r.files_s is None else f"{r.files_s:.2f} s"
                print(
                    f"  {r.name}: prepare of a compacting turn: "
                    f"median {statistics.median(r.compact_ms):.0f} ms, "
                    f"first {r.compact_ms[0]:.0f} ms, last {r.compact_ms[-1]:.0f} ms; "
                    f"folding the file-history view over all compactions: {files}"
                )
        ratio, turn, used, request = r.worst
        if ratio > 1.05:
            print(
                f"  {r.name}: MISMATCH: at turn {turn} used_tokens() = {used:,} but the materialized request "
                f"holds ~{request:,} tokens ({ratio:.1f}x)"
            )


def _runs(values: list[str]) -> str:
    """Run-length form: ``llm x3, session_memory, llm x2``."""
    out: list[tuple[str, int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1] + 1)
        else:
            out.append((v, 1))
    return ", ".join(v if n == 1 else f"{v} x{n}" for v, n in out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 and 1,000 turns, 400 live turns")
    parser.add_argument("--sizes", help="comma-separated history sizes in turns (overrides the defaults)")
    parser.add_argument("--live-turns", type=int, help="turns of each live run")
    parser.add_argument("--profile", action="store_true", help="cProfile compactions at the largest size")
    args = parser.parse_args(argv)
    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    live_turns = args.live_turns or (QUICK_LIVE if args.quick else FULL_LIVE)
    load = os.getloadavg()
    print(
        f"sessionstore {sessionstore.__version__} compaction bench: Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load[0]:.2f}, "
        f"{'quick' if args.quick else 'full'} run, sizes {', '.join(f'{s:,}' for s in sizes)} turns, "
        f"{live_turns:,} live turns; summarizer: OfflineSummarizer (no network)"
    )
    started = time.perf_counter()
    reductions: list[ReductionRow] = []
    live: list[LiveRow] = []
    with tempfile.TemporaryDirectory(prefix="ss-compaction-bench-") as name:
        folder = Path(name)
        t0 = time.perf_counter()
        sid, built = build_histories(folder, sizes)
        print(
            "  histories: "
            + ", ".join(
                f"{n:,} turns ({events:,} events) at {spent:.1f} s" for n, (_, spent, events) in built.items()
            )
            + f"; built in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        for size in sizes:
            t0 = time.perf_counter()
            rows, timings = run_size(
                folder, sid, size, built[size][0], profile=args.profile and size == sizes[-1]
            )
            reductions.extend(rows)
            _unlink(built[size][0])
            print(
                f"  {size:>6,} turns: {', '.join(timings)}; all {time.perf_counter() - t0:.1f} s", flush=True
            )
        configs = (
            ("auto (memory)", PipelineConfig(), False),
            (PACED_BEFORE, PipelineConfig(), True),
            ("auto (llm only)", PipelineConfig(compact=CompactConfig(session_memory=False)), False),
            ("collapse", PipelineConfig(collapse=CollapseConfig(enabled=True)), False),
        )
        # Independent sessions: two at a time, one per core (maxtasksperchild: the patched
        # pacing of one run never leaks into another).
        t0 = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
            live = pool.starmap(
                run_live, [(folder, label, config, live_turns, before) for label, config, before in configs]
            )
        print(
            "  live runs (two processes): "
            + ", ".join(f"{r.name} {r.seconds:.1f} s" for r in live)
            + f"; all {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    print_reductions(reductions)
    print_live(live)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

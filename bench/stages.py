"""Cost of the no-model pipeline stages (``Pipeline.prepare``) against json.dumps of the request.

Usage::

    python bench/stages.py [--quick] [--history N] [--turns K] [--repeats R] [--profile]

Everything runs against SQLite files in a temporary folder (``open_store(path, migrate=True)``:
WAL, ``synchronous=FULL``) with token counting on (tiktoken cl100k, the default). The reference
of every ratio is ``json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()`` of
the very request ``prepare()`` returned, timed in the same run: the bytes any caller has to
produce to send it. ``prepare()`` itself serializes the request once (the ContextServed
fingerprint), so ``prepare/dumps`` cannot go below ~1.

(a) Tool-result budget. A fresh session (system prompt + 5 tool definitions) gets one turn: a
prompt, an assistant message with 10 parallel ``Bash`` tool_use blocks, and one user message
with their 10 results, 100,000 characters each (seeded log-like multi-line text, different per
repeat so blobs never deduplicate). Appending that turn is not timed. Timed:
``Pipeline().prepare(session)``, which persists all 10 results (each is above the 50,000-char
per-result threshold): tokenizes each original and preview for ``tokens_freed``, writes each to
the blob store (sha256, zlib, one SQLite transaction each), appends the 10
``ToolResultPersisted`` events, then builds, fingerprints and records the request
(``ContextServed``). Median of ``--repeats`` fresh sessions (``--quick``: 5) after one warm-up.
Breakdown columns (medians, inside ``prepare``): ``budget`` = ``budget_stage`` (deciding,
tokenizing, blob writes), of which ``tokenize`` = ``count_text`` and ``put_blob``; ``appends``
= the two ``session.append`` calls (10 events, then ContextServed; each a SQLite transaction
plus refresh); ``served`` = ``_served_event`` (canonical dumps + sha256). ``unbudgeted dumps``
is json.dumps of the 1 MB request before the stage ran, for scale.

(b) The full no-model chain on a long session. History: ``--history`` turns (2,000; ``--quick``
300) appended in batches of ~500 events, counting on. A turn is: the assistant's reply to the
pending prompt (one text block and 0-3 ``tool_use`` blocks of Bash/Read/Edit/Grep/Write), the
user message with their results (200 B - 20 KB each, log-uniform), and the user's next prompt
(merged into the results message, so every request ends with a user message, as it does when
an agent calls ``prepare``). Seeded and deterministic; event timestamps 30 s apart. The
history carries one ``ContextServed`` per turn (placeholder fingerprints), as if a pipeline
had served it, so its results are frozen; it carries no ``UsageRecorded`` and was never
snipped. Then the session is opened (full fold), and one untimed *catch-up* ``prepare`` snips
the never-snipped view (its time and how many messages it kept are reported on their own
line). Model ``claude-sonnet-4-5`` (200k window, 180k effective).

Pipeline: budget on (defaults; it never fires here: results are <= 20 KB, <= 3 per message),
snip on (``SnipConfig(enabled=True, trigger_percent=85, target_percent=60,
keep_recent_rounds=4)``: at ~2.4k tokens a turn it fires about every 20 turns once the view
is back near the target), micro-compact time-based (60-minute gap, keep 5) with a clock 1
minute after the last assistant message, so it does not fire. Each measured turn also records a
``UsageRecorded`` whose input is the previous ``prepare``'s "used" (what the API would report
for that request), so the usage-anchored estimate follows the snips.

Per measured turn (2 warm-up turns first, then ``--turns``: 100; ``--quick`` 40):
``append`` = ``session.append(turn events)`` (validation, tokenizing, one SQLite transaction,
refresh; it includes Session's automatic snapshot every 1,000 events: ``auto snaps`` counts
the turns that took one, in ``append`` or in ``prepare``'s appends; they set ``max turn``);
``prepare`` = ``pipeline.prepare(session)``; ``turn`` = both; ``dumps`` = the reference.
Rows: ``steady`` = turns where no stage fired; ``snip fires`` = turns where snip fired; and
``mc fires (+2h)``: after the measured turns, ``--fires`` turns (3; quick 2) whose clock is 2
hours after the last assistant message, so time-based micro-compact clears every visible
compactable result but the newest 5 (re-tokenizing each for ``tokens_freed``); each is reverted
(untimed) before the next, so they clear the same span. The second table splits ``prepare``
into its stages (medians, ms): ``budget``, ``snip``, ``mc`` (the stage functions),
``appends`` (``session.append`` of the stage events and of ContextServed), ``request``
(``session.request()``), ``served`` (fingerprint: canonical dumps + sha256), ``other``.

``--profile`` prints cProfile top functions (own time) of ``prepare`` for: the budget turn of
(a), 10 steady turns, one snip-firing turn and one micro-compact-firing turn on the long
session. The full run takes well under 4 minutes on 2 cores, ``--quick`` under a minute. No
targets are asserted: the script reports; it exits 1 only if a stage did not do what the
scenario needs (e.g. the budget did not persist all 10 results).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import json
import os
import platform
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import (
    SYSTEM_PROMPT,
    TOOL_NAMES,
    TOOLS,
    PooledText,
    Timed,
    median,
    ns_to_ms,
    print_table,
    profiled,
    text_pool,
)

import sessionstore
from sessionstore import (
    Event,
    MessageAppended,
    MicrocompactConfig,
    Pipeline,
    PipelineConfig,
    PreparedRequest,
    Session,
    SessionConfig,
    SessionStarted,
    SnipConfig,
    UsageRecorded,
    open_store,
    revert,
)
from sessionstore.events import ContextConfigured, ContextServed
from sessionstore.pipeline import _budget, _microcompact, _pipeline, _snip
from sessionstore.projections import ResultsEdit

SEED = 20250617
MODEL = "claude-sonnet-4-5-20250929"
FULL_HISTORY, QUICK_HISTORY = 2_000, 300
FULL_TURNS, QUICK_TURNS = 100, 40
FULL_REPEATS, QUICK_REPEATS = 10, 5
FULL_FIRES, QUICK_FIRES = 3, 2
WARMUP_TURNS = 2
SETUP_BATCH = 500
BUDGET_RESULTS = 10
BUDGET_RESULT_CHARS = 100_000
SNIP = SnipConfig(enabled=True, trigger_percent=85.0, target_percent=60.0, keep_recent_rounds=4)
MICROCOMPACT = MicrocompactConfig(time_based=True, gap_minutes=60.0, keep_recent=5)
WITHIN_GAP = timedelta(minutes=1)
PAST_GAP = timedelta(hours=2)
BASE_TIME = datetime(2025, 6, 17, 9, 0, tzinfo=UTC)
TURN_SPACING = timedelta(seconds=30)

# --- the workload ----------------------------------------------------------------------------


class Workload(PooledText):
    """Deterministic (seeded) turns: ``turn()`` gives the events of the next one."""

    def __init__(self, seed: int = SEED, pool_chars: int = 1_500_000) -> None:
        rng = random.Random(seed)
        super().__init__(rng, text_pool(rng, pool_chars))
        self.turns_made = 0

    def first_prompt(self) -> MessageAppended:
        return MessageAppended(
            role="user", content=self.text(self.rng.randint(20, 1500)), timestamp=BASE_TIME
        )

    def turn(self, usage_input: int | None = None) -> tuple[list[Event], list[str], datetime]:
        """The assistant's reply (0-3 tool calls), its results, and the next prompt.

        ``usage_input``: also record a ``UsageRecorded`` for the reply with this input size.
        Returns the events, the tool_use ids, and the assistant message's timestamp.
        """
        rng = self.rng
        when = BASE_TIME + TURN_SPACING * (self.turns_made + 1)
        self.turns_made += 1
        api_id = self._id("msg_01")
        blocks: list[dict[str, Any]] = [{"type": "text", "text": self.text(rng.randint(20, 600))}]
        results: list[dict[str, Any]] = []
        for _ in range(rng.randint(0, 3)):
            block = self._tool_use(rng.choice(TOOL_NAMES))
            blocks.append(block)
            output = self.text(int(200 * 100 ** rng.random()))  # 200 B - 20 KB, log-uniform
            results.append({"type": "tool_result", "tool_use_id": block["id"], "content": output})
        events: list[Event] = [
            MessageAppended(
                role="assistant",
                content=blocks,
                api_message_id=api_id,
                stop_reason="tool_use" if results else "end_turn",
                timestamp=when,
            )
        ]
        if usage_input is not None:
            output_tokens = sum(len(json.dumps(b)) for b in blocks) // 4 + 1
            events.append(
                UsageRecorded(
                    input_tokens=usage_input, output_tokens=output_tokens, api_message_id=api_id, model=MODEL
                )
            )
        if results:
            events.append(
                MessageAppended(role="user", content=results, timestamp=when + timedelta(seconds=10))
            )
        prompt = self.text(rng.randint(20, 1500))
        events.append(MessageAppended(role="user", content=prompt, timestamp=when + timedelta(seconds=20)))
        return events, [r["tool_use_id"] for r in results], when


# --- measuring ---------------------------------------------------------------------------------


def _dumps(request: dict[str, Any]) -> bytes:
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()


class Probe:
    """Timers patched onto live objects and module globals (restored by ``close``); no file edits."""

    def __init__(self) -> None:
        self.timers: dict[str, Timed] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        fn = getattr(owner, attr, None)
        if fn is None:  # renamed by a later version: that column shows "-"
            return
        timer = Timed(fn)
        had_own = attr in getattr(owner, "__dict__", {})
        setattr(owner, attr, timer)
        self.timers[label] = timer
        self._undo.append(lambda: setattr(owner, attr, fn) if had_own else delattr(owner, attr))

    def take(self) -> dict[str, int]:
        return {label: timer.take() for label, timer in self.timers.items()}

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.timers.clear()


def _open(path: Path) -> sessionstore.SessionStore:
    store = open_store(path, migrate=True)
    store.token_counter.count_text("warm up the tokenizer")  # type: ignore[union-attr]  # the default counts
    return store


# --- (a) the tool-result budget ------------------------------------------------------------------


@dataclass
class BudgetRow:
    repeats: int
    prepare_ms: float
    dumps_ms: float
    budget_ms: float
    tokenize_ms: float
    put_blob_ms: float
    appends_ms: float
    served_ms: float
    before_kb: float
    after_kb: float
    unbudgeted_dumps_ms: float
    max_prepare_ms: float


def _budget_session(store: sessionstore.SessionStore, rep: int) -> Session:
    """A fresh session holding one turn with 10 parallel 100,000-char Bash results (not timed)."""
    workload = Workload(SEED + 1000 + rep, pool_chars=1_200_000)
    session = Session.create(store, model=MODEL, system=SYSTEM_PROMPT, tools=TOOLS)
    calls = [
        {
            "type": "tool_use",
            "id": workload._id("toolu_01"),
            "name": "Bash",
            "input": {"command": f"cat logs/worker-{i}.log", "description": "Show the worker log"},
        }
        for i in range(BUDGET_RESULTS)
    ]
    # Non-overlapping slices of the pool: ten different results, and different from other repeats.
    results = [
        {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": workload.pool[i * BUDGET_RESULT_CHARS : (i + 1) * BUDGET_RESULT_CHARS],
        }
        for i, call in enumerate(calls)
    ]
    session.append(
        [
            MessageAppended(role="user", content="Why do the workers keep restarting? Check all ten logs."),
            MessageAppended(
                role="assistant",
                content=[{"type": "text", "text": "Let me read every worker's log."}, *calls],
                api_message_id=workload._id("msg_01"),
                stop_reason="tool_use",
            ),
            MessageAppended(role="user", content=results),
        ]
    )
    return session


def bench_budget(folder: Path, repeats: int, *, profile: bool) -> BudgetRow:
    store = _open(folder / "budget.db")
    try:
        rows: dict[str, list[float]] = {}
        sizes: tuple[int, int] = (0, 0)
        for rep in range(1 + repeats):  # the first is a warm-up
            session = _budget_session(store, rep)
            unbudgeted = session.request()
            t0 = time.perf_counter_ns()
            before = _dumps(unbudgeted)
            unbudgeted_ns = time.perf_counter_ns() - t0
            del unbudgeted
            probe = Probe()
            probe.wrap(_budget, "budget_stage", "budget")
            probe.wrap(_pipeline, "_served_event", "served")
            probe.wrap(session, "append", "appends")
            probe.wrap(store, "put_blob", "put_blob")
            probe.wrap(store.token_counter, "count_text", "tokenize")
            gc.collect()
            try:
                t0 = time.perf_counter_ns()
                prepared = Pipeline().prepare(session)  # default config; the session's clock is "now"
                t1 = time.perf_counter_ns()
                data = _dumps(prepared.request)
                t2 = time.perf_counter_ns()
                parts = probe.take()
            finally:
                probe.close()
            persisted = prepared.reports[0].event_ids if prepared.reports else ()
            if len(persisted) != BUDGET_RESULTS:
                msg = f"(a): the budget persisted {len(persisted)} results, expected {BUDGET_RESULTS}"
                raise SystemExit(msg)
            if rep == 0:
                continue
            sizes = (len(before), len(data))
            parts.update(prepare=t1 - t0, dumps=t2 - t1, unbudgeted=unbudgeted_ns)
            for name, value in parts.items():
                rows.setdefault(name, []).append(value)
        if profile:
            session = _budget_session(store, repeats + 1)
            profiled("(a) prepare(): 10 x 100 KB Bash results persisted", lambda: Pipeline().prepare(session))
    finally:
        store.close()

    def med(name: str) -> float:
        return ns_to_ms(median(rows.get(name, [])))

    return BudgetRow(
        repeats=repeats,
        prepare_ms=med("prepare"),
        dumps_ms=med("dumps"),
        budget_ms=med("budget"),
        tokenize_ms=med("tokenize"),
        put_blob_ms=med("put_blob"),
        appends_ms=med("appends"),
        served_ms=med("served"),
        before_kb=sizes[0] / 1e3,
        after_kb=sizes[1] / 1e3,
        unbudgeted_dumps_ms=med("unbudgeted"),
        max_prepare_ms=ns_to_ms(max(rows["prepare"])),
    )


# --- (b) the whole chain on a long session --------------------------------------------------------


@dataclass
class ChainRow:
    label: str
    turns: int = 0
    request_mb: float = 0.0
    append_ms: float = float("nan")
    prepare_ms: float = float("nan")
    turn_ms: float = float("nan")
    dumps_ms: float = float("nan")
    max_turn_ms: float = float("nan")
    snapshots: int = 0
    parts_ms: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class ChainInfo:
    history: int
    events: int
    build_s: float
    open_s: float
    catchup_ms: float
    catchup_note: str
    visible_messages: int
    total_messages: int
    used_range: tuple[int, int]
    trigger: int
    target: int
    rows: list[ChainRow]


class Clock:
    """The pipeline's clock, set by the driver before each prepare."""

    def __init__(self) -> None:
        self.now = BASE_TIME

    def __call__(self) -> datetime:
        return self.now


def build_history(store: sessionstore.SessionStore, workload: Workload, turns: int) -> str:
    """Create the session and append ``turns`` turns in batches (counting on). Not timed."""
    info = store.create_session(
        events=[SessionStarted(model=MODEL), ContextConfigured(system=SYSTEM_PROMPT, tools=TOOLS)]
    )
    seq = store.last_seq(info.id)
    batch: list[Event] = [workload.first_prompt()]
    for i in range(turns):
        events, tool_ids, _ = workload.turn()
        batch.extend(events)
        # What a pipeline would have recorded for the request after this turn: its results went
        # out un-replaced, so they are frozen (placeholder fingerprint: not re-serialized here).
        batch.append(
            ContextServed(
                fingerprint=hashlib.sha256(f"history turn {i}".encode()).hexdigest(),
                through_seq=seq + len(batch),
                token_count=0,
                unreplaced_tool_results=tool_ids,
                model=MODEL,
            )
        )
        if len(batch) >= SETUP_BATCH or i == turns - 1:
            seq = store.append(info.id, batch, seq).last_seq
            batch = []
    return info.id


def _fired(prepared: PreparedRequest) -> set[str]:
    return {report.stage for report in prepared.reports if report.event_ids}


def _stage_probe(session: Session) -> Probe:
    probe = Probe()
    probe.wrap(_budget, "budget_stage", "budget")
    probe.wrap(_snip, "snip_stage", "snip")
    probe.wrap(_microcompact, "microcompact_stage", "mc")
    probe.wrap(_pipeline, "_served_event", "served")
    probe.wrap(session, "request", "request")
    probe.wrap(session, "append", "appends")
    return probe


PART_NAMES = ("budget", "snip", "mc", "appends", "request", "served", "other")


@dataclass
class _Sample:
    append_ns: int
    prepare_ns: int
    dumps_ns: int
    size: int
    parts: dict[str, int]
    fired: set[str]
    snapshots: int  # automatic snapshots taken during the turn (append or prepare)


class ChainDriver:
    """Appends turns and prepares requests on the long session, measuring each."""

    def __init__(self, session: Session, workload: Workload) -> None:
        self.session = session
        self.workload = workload
        self.clock = Clock()
        self.pipeline = Pipeline(PipelineConfig(snip=SNIP, microcompact=MICROCOMPACT), clock=self.clock)
        self.used = 0
        self.used_seen: list[int] = []

    def prepare(self) -> PreparedRequest:
        prepared = self.pipeline.prepare(self.session)
        self.used = prepared.tokens.used
        self.used_seen.append(self.used)
        return prepared

    def turn(
        self, gap: timedelta = WITHIN_GAP, *, timed: bool = True
    ) -> tuple[_Sample | None, PreparedRequest]:
        events, _, when = self.workload.turn(usage_input=self.used)
        self.clock.now = when + gap
        if not timed:
            self.session.append(events)
            return None, self.prepare()
        probe = _stage_probe(self.session)
        snapshot_seq = self.session._last_snapshot_seq
        try:
            gc.collect()
            t0 = time.perf_counter_ns()
            self.session.append(events)
            t1 = time.perf_counter_ns()
            probe.take()
            prepared = self.prepare()
            t2 = time.perf_counter_ns()
            parts = probe.take()
        finally:
            probe.close()
        data = _dumps(prepared.request)
        t3 = time.perf_counter_ns()
        parts["other"] = (t2 - t1) - sum(parts.values())
        snapshots = int(self.session._last_snapshot_seq != snapshot_seq)
        sample = _Sample(t1 - t0, t2 - t1, t3 - t2, len(data), parts, _fired(prepared), snapshots)
        return sample, prepared


def _row(label: str, samples: list[_Sample], note: str = "") -> ChainRow:
    if not samples:
        return ChainRow(label, note=note or "none in this run")
    turn = [s.append_ns + s.prepare_ns for s in samples]
    return ChainRow(
        label=label,
        turns=len(samples),
        request_mb=median([s.size for s in samples]) / 1e6,
        append_ms=ns_to_ms(median([s.append_ns for s in samples])),
        prepare_ms=ns_to_ms(median([s.prepare_ns for s in samples])),
        turn_ms=ns_to_ms(median(turn)),
        dumps_ms=ns_to_ms(median([s.dumps_ns for s in samples])),
        max_turn_ms=ns_to_ms(max(turn)),
        snapshots=sum(s.snapshots for s in samples),
        parts_ms={name: ns_to_ms(median([s.parts.get(name, 0) for s in samples])) for name in PART_NAMES},
        note=note,
    )


def bench_chain(folder: Path, history: int, turns: int, fires: int, *, profile: bool) -> ChainInfo:
    workload = Workload(SEED)
    path = folder / "chain.db"
    t0 = time.perf_counter()
    store = _open(path)
    try:
        sid = build_history(store, workload, history)
        t1 = time.perf_counter()
        session = Session(store, sid)  # full fold: no snapshot yet
        t2 = time.perf_counter()
        driver = ChainDriver(session, workload)
        last = session.api_state.last_assistant_time
        driver.clock.now = datetime.fromisoformat(last) + WITHIN_GAP if last else BASE_TIME
        messages_before = len(session.api_state.messages)
        t3 = time.perf_counter_ns()
        prepared = driver.prepare()
        catchup_ns = time.perf_counter_ns() - t3
        state = session.api_state
        catchup_note = (
            f"stages fired: {', '.join(sorted(_fired(prepared))) or 'none'}; visible messages "
            f"{messages_before:,} -> {len(state.messages) - state.first_visible:,}"
        )
        for _ in range(WARMUP_TURNS):
            driver.turn(timed=False)
        driver.used_seen.clear()
        steady: list[_Sample] = []
        snipped: list[_Sample] = []
        for _ in range(turns):
            sample, _ = driver.turn()
            assert sample is not None
            if sample.fired - {"snip"}:
                raise SystemExit(f"(b): unexpected stages fired in a within-gap turn: {sorted(sample.fired)}")
            (snipped if "snip" in sample.fired else steady).append(sample)
        used_range = (min(driver.used_seen), max(driver.used_seen))
        fired_mc: list[_Sample] = []
        cleared: list[int] = []
        for _ in range(fires):
            sample, prepared = driver.turn(PAST_GAP)
            assert sample is not None
            if "microcompact" not in sample.fired:
                msg = "(b): micro-compact did not fire with the clock 2 hours after the last assistant"
                raise SystemExit(msg)
            fired_mc.append(sample)
            report = next(r for r in prepared.reports if r.stage == "microcompact")
            event_id = report.event_ids[0]
            cleared_by = session.api_state.edits[event_id]
            assert isinstance(cleared_by, ResultsEdit)
            cleared.append(len(cleared_by.ids))
            revert(session, event_id)  # untimed: the next fire clears the same span again
        window = session.token_state().window
        state = session.api_state
        info = ChainInfo(
            history=history,
            events=session.last_seq,
            build_s=t1 - t0,
            open_s=t2 - t1,
            catchup_ms=ns_to_ms(catchup_ns),
            catchup_note=catchup_note,
            visible_messages=len(state.messages) - state.first_visible,
            total_messages=len(state.messages),
            used_range=used_range,
            trigger=int(window.effective_window * SNIP.trigger_percent / 100),
            target=int(window.effective_window * SNIP.target_percent / 100),
            rows=[
                _row("steady", steady),
                _row("snip fires", snipped),
                _row(
                    "mc fires (+2h)",
                    fired_mc,
                    f"clears {statistics.median(cleared):.0f} results" if cleared else "",
                ),
            ],
        )
        if profile:
            _profile_chain(driver, history)
    finally:
        store.close()
    return info


def _profile_chain(driver: ChainDriver, history: int) -> None:
    session = driver.session

    def steady() -> None:
        for _ in range(10):
            events, _, when = driver.workload.turn(usage_input=driver.used)
            driver.clock.now = when + WITHIN_GAP
            profiler.disable()
            session.append(events)
            profiler.enable()
            driver.prepare()

    profiler = cProfile.Profile()
    profiler.enable()
    steady()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
    stats.print_stats(16)
    body = out.getvalue()
    print(
        f"\n--- cProfile: (b) prepare() x 10 steady turns at {history:,} turns "
        f"(total {stats.total_tt * 1e3:.0f} ms under the profiler; top by own time) ---"  # type: ignore[attr-defined]
    )
    print(body[body.find("   ncalls") :].rstrip())

    # The next turn where snip will fire: "used" after the append reaches the trigger.
    for _ in range(200):
        events, _, when = driver.workload.turn(usage_input=driver.used)
        driver.clock.now = when + WITHIN_GAP
        session.append(events)
        state = session.token_state()
        if state.used >= state.window.effective_window * SNIP.trigger_percent / 100:
            prepared = profiled(f"(b) prepare() of a snip-firing turn at {history:,} turns", driver.prepare)
            if "snip" not in _fired(prepared):
                print("  (snip did not fire in the profiled turn)")
            break
        driver.prepare()

    events, _, when = driver.workload.turn(usage_input=driver.used)
    driver.clock.now = when + PAST_GAP
    session.append(events)
    profiled(f"(b) prepare() of a micro-compact-firing turn (+2 h) at {history:,} turns", driver.prepare)


# --- report --------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2, suffix: str = "") -> str:
    return "-" if value != value else f"{value:.{digits}f}{suffix}"  # NaN -> "-"


def print_budget(row: BudgetRow) -> None:
    print(
        f"\n(a) tool-result budget: prepare() of one turn with {BUDGET_RESULTS} parallel Bash results of "
        f"{BUDGET_RESULT_CHARS:,} chars, fresh session each, median of {row.repeats} (after 1 warm-up)"
    )
    print_table(
        [
            ("prepare", "ms", 8),
            ("dumps", "ms", 7),
            ("prepare/", "dumps", 9),
            ("budget", "ms", 7),
            ("tokenize", "ms", 8),
            ("put_blob", "ms", 8),
            ("appends", "ms", 8),
            ("served", "ms", 7),
            ("request KB", "before->after", 14),
            ("unbudgeted", "dumps ms", 10),
            ("max prepare", "ms", 11),
        ],
        [
            [
                _f(row.prepare_ms, 1),
                _f(row.dumps_ms, 3),
                _f(row.prepare_ms / row.dumps_ms, 0, "x"),
                _f(row.budget_ms, 1),
                _f(row.tokenize_ms, 1),
                _f(row.put_blob_ms, 1),
                _f(row.appends_ms, 1),
                _f(row.served_ms, 2),
                f"{row.before_kb:,.0f}->{row.after_kb:,.0f}",
                _f(row.unbudgeted_dumps_ms, 2),
                _f(row.max_prepare_ms, 1),
            ]
        ],
    )
    print(
        f"  prepare() vs json.dumps of the 1 MB request it replaced: "
        f"{row.prepare_ms / row.unbudgeted_dumps_ms:.0f}x"
    )


def print_chain(info: ChainInfo, turns: int) -> None:
    print(
        f"\n(b) no-model chain on a {info.history:,}-turn session ({info.events:,} events at the end): "
        f"append one turn + prepare(), {turns} measured turns after {WARMUP_TURNS} warm-up"
    )
    print(
        f"  budget on, snip on (trigger {SNIP.trigger_percent:.0f}% = {info.trigger:,} tokens, target "
        f"{SNIP.target_percent:.0f}% = {info.target:,}), micro-compact time-based (gap "
        f"{MICROCOMPACT.gap_minutes:.0f} min, clock +1 min; +2 h in the last row)"
    )
    print_table(
        [
            ("turns", "", 16),
            ("n", "", 4),
            ("req MB", "", 7),
            ("append", "ms", 7),
            ("prepare", "ms", 8),
            ("turn", "ms", 7),
            ("dumps", "ms", 6),
            ("prepare/", "dumps", 8),
            ("turn/", "dumps", 6),
            ("max turn", "ms", 8),
            ("auto", "snaps", 5),
        ],
        [
            [
                r.label,
                f"{r.turns}",
                _f(r.request_mb, 2),
                _f(r.append_ms),
                _f(r.prepare_ms),
                _f(r.turn_ms),
                _f(r.dumps_ms),
                _f(r.prepare_ms / r.dumps_ms, 1, "x"),
                _f(r.turn_ms / r.dumps_ms, 1, "x"),
                _f(r.max_turn_ms, 1),
                f"{r.snapshots}",
            ]
            for r in info.rows
        ],
    )
    print("\n  prepare() by stage (median ms per turn)")
    print_table(
        [("turns", "", 16), *[(name, "", 8) for name in PART_NAMES], ("", "", 0)],
        [
            [r.label, *[_f(r.parts_ms.get(name, float("nan")), 2) for name in PART_NAMES], r.note]
            for r in info.rows
        ],
    )
    print(
        f"  history: built in {info.build_s:.1f} s (batched appends, counting on), opened (full fold) in "
        f"{info.open_s:.1f} s; catch-up prepare (untimed above) {info.catchup_ms:.0f} ms, {info.catchup_note}"
    )
    print(
        f"  during the measured turns: 'used' {info.used_range[0]:,}-{info.used_range[1]:,} tokens, "
        f"{info.visible_messages:,} of {info.total_messages:,} messages visible at the end; 'auto snaps': "
        f"turns that took Session's automatic snapshot (every {SessionConfig().snapshot_every:,} events), "
        "which is what 'max turn' shows when it is > 0"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300-turn history, fewer turns; under a minute")
    parser.add_argument("--history", type=int, help="turns in the long session (default 2,000; quick 300)")
    parser.add_argument("--turns", type=int, help="measured turns on it (default 100; quick 40)")
    parser.add_argument("--repeats", type=int, help="fresh sessions for (a) (default 10; quick 5)")
    parser.add_argument("--fires", type=int, help="micro-compact-firing turns (default 3; quick 2)")
    parser.add_argument("--profile", action="store_true", help="cProfile prepare() in each scenario")
    args = parser.parse_args(argv)
    quick = args.quick
    history = args.history or (QUICK_HISTORY if quick else FULL_HISTORY)
    turns = args.turns or (QUICK_TURNS if quick else FULL_TURNS)
    repeats = args.repeats or (QUICK_REPEATS if quick else FULL_REPEATS)
    fires = args.fires or (QUICK_FIRES if quick else FULL_FIRES)
    load = os.getloadavg()
    print(
        f"sessionstore {sessionstore.__version__} stages bench: Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load[0]:.2f}, "
        f"{'quick' if quick else 'full'} run: (a) {repeats} repeats, (b) {history:,}-turn history, "
        f"{turns} turns, {fires} micro-compact fires",
        flush=True,
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ss-stages-bench-") as folder:
        budget = bench_budget(Path(folder), repeats, profile=args.profile)
        print(f"  (a) done in {time.perf_counter() - started:.1f} s", flush=True)
        chain = bench_chain(Path(folder), history, turns, fires, profile=args.profile)
    print_budget(budget)
    print_chain(chain, turns)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

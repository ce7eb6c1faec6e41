"""Per-turn overhead of the agent loop (``Conversation.prepare`` + ``record``) on long sessions.

Usage::

    python bench/loop.py [--quick] [--sizes 200,2000,10000] [--turns K] [--no-profile]

What a turn costs the session backend, against what the turn costs anyway, all measured in the
same run on the same requests:

* ``prepare`` = ``Conversation.prepare()``: the default ``Pipeline()`` (tool-result budget,
  time-based micro-compact, auto-compact check, blocking-limit check; none of them fires
  here), the request built from the live projection, its fingerprint (canonical JSON +
  SHA-256) and the ``ContextServed`` append (one SQLite transaction + refresh). ``fp`` is
  the part of it spent in ``_pipeline._served_event`` (the fingerprint), timed by patching
  that module function with a timer (no file is edited).
* ``record`` = ``Conversation.record(response)``: the assistant message and its usage, one
  transaction + refresh. (Any append of a turn, in ``prepare``, ``record`` or ``appends``,
  includes Session's automatic snapshot when it crosses a multiple of 1,000 events: see
  ``snapshot`` below; it shows in ``p+r max``.)
* ``round trip`` = ``client.messages.create(**params)`` alone: the real ``anthropic`` SDK
  (request transform, httpx, JSON both ways, response parsing) against an in-process local
  Messages API server (``tests/messages_api.MessagesAPIServer``: a threading HTTP server that
  reads and ``json.loads`` the body and answers at once). A real API round trip adds network
  and model time on top: this is the floor.
* ``dumps`` = ``json.dumps(params)`` of the same request (``ensure_ascii=False``, compact):
  the bytes any caller has to produce to send it.

History: ``N`` turns built with batched ``store.append`` (500 events a batch) on a store with
token counting off (setup speed only); then the store is reopened with counting on (tiktoken
cl100k, the default) and a ``Session`` opened on it (full fold; no snapshot exists yet).
A turn, in the history as in the measured loop: a user prompt (40-400 chars), the
``ContextServed`` of the request, the assistant's answer (a text block of 40-300 chars and,
in 3 turns of 4, one ``Bash``/``Read``/``Grep`` tool_use) with its ``UsageRecorded``, and the
tool's result (100-2,000 chars, log-uniform). The next prompt merges into the results message,
so every request ends on a user message. Seeded and deterministic; ~1.1 KB of request JSON
a turn. The whole history stays in the view: no stage fires. Every ``UsageRecorded`` (the
history's and the server's) reports 60,000 input tokens, far below the auto-compact
threshold of the model's 1M window (``claude-opus-5-5``), so the default pipeline runs but
does not compact; the timestamps end "now", so time-based micro-compact does not fire either.
(The bench measures bookkeeping on an N-turn view; ``bench/stages.py`` and
``bench/compaction.py`` measure the stages firing.)

Measured loop, per turn (``--turns`` K after 2 untimed warm-up turns): ``loop.user(prompt)``
-> ``loop.prepare()`` -> SDK call -> ``loop.record(response)`` -> ``loop.user([tool_result])``
when the server answered with a tool_use (3 turns of 4). The server's answers are queued per
turn (a text or a tool_use message). Columns are medians over the K turns; ``appends`` is
the two ``loop.user`` calls (not part of prepare + record). ``snapshot`` is one explicit
``session.snapshot()`` after the loop (what a turn that crosses a multiple of 1,000 events
pays; ``/turn`` amortizes it over the ~4.75 events of a turn), and ``open`` the initial
``Session(store, id)`` (a resume without a snapshot).

Finally (unless ``--no-profile``) cProfile of prepare + record over a few turns at the
largest size, top functions by own time and by cumulative time.

The full run (200, 2,000, 10,000 turns) takes well under 4 minutes on 2 cores; ``--quick``
(200 and 1,000) under 45 seconds. Nothing is asserted: the script reports.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import json
import math
import os
import platform
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import ns_to_ms  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore import Event, MessageAppended, Session, SessionStarted, UsageRecorded, open_store  # noqa: E402
from sessionstore.agent._conversation import Conversation  # noqa: E402
from sessionstore.events import ContextConfigured, ContextServed  # noqa: E402
from sessionstore.pipeline import _pipeline  # noqa: E402
from tests.messages_api import MessagesAPIServer  # noqa: E402

SEED = 20250801
MODEL = "claude-opus-5-5"
FULL_SIZES, QUICK_SIZES = (200, 2_000, 10_000), (200, 1_000)
#: Measured turns per size (the request grows with the history, so fewer turns on larger ones).
FULL_TURNS = {200: 60, 2_000: 40, 10_000: 20}
QUICK_TURNS = {200: 30, 1_000: 20}
DEFAULT_TURNS = 20
WARMUP_TURNS = 2
PROFILE_TURNS = 5
SETUP_BATCH = 500
USAGE_INPUT = 60_000
TOOL_USE_EVERY = (True, True, True, False)  # 3 turns of 4 call a tool
MAX_TOKENS = 1024

SYSTEM_PROMPT = "You are a coding agent. Be concise; run the tests after every change.\n" + "\n".join(
    f"- Rule {i}: prefer editing existing files; never commit unless asked." for i in range(20)
)
_STR = {"type": "string"}
TOOLS = [
    {
        "name": "Bash",
        "description": "Executes a bash command.",
        "input_schema": {"type": "object", "properties": {"command": _STR}, "required": ["command"]},
    },
    {
        "name": "Read",
        "description": "Reads a file.",
        "input_schema": {"type": "object", "properties": {"file_path": _STR}, "required": ["file_path"]},
    },
    {
        "name": "Grep",
        "description": "Searches file contents.",
        "input_schema": {"type": "object", "properties": {"pattern": _STR}, "required": ["pattern"]},
    },
]
_VOCABULARY = (
    "the a of to and in is for on with error value function return import self config request "
    "response session token file path line data user model tool result index cache update query "
    "table json string list dict None True False async await class def if else try except raise "
    "open read write close status ok failed warning info debug test build module server client"
)
_WORDS = tuple(_VOCABULARY.split())


# --- the workload ------------------------------------------------------------------------------


class Workload:
    """Seeded turns: the same texts for the history and for the measured loop."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        words = [self.rng.choice(_WORDS) for _ in range(200_000)]
        lines, line = [], []
        for word in words:
            line.append(word)
            if self.rng.random() < 0.1:
                lines.append(" ".join(line))
                line = []
        self.pool = "\n".join(lines)
        self.tools_made = 0

    def text(self, low: int, high: int, *, log: bool = False) -> str:
        size = int(low * (high / low) ** self.rng.random()) if log else self.rng.randint(low, high)
        start = self.rng.randrange(len(self.pool) - size - 1)
        return self.pool[start : start + size]

    def prompt(self) -> str:
        return self.text(40, 400)

    def tool_call(self) -> dict[str, Any]:
        self.tools_made += 1
        name = ("Bash", "Read", "Grep")[self.tools_made % 3]
        tool_input = {
            "Bash": {"command": f"pytest -q tests/test_{self.rng.choice(_WORDS)}.py"},
            "Read": {"file_path": f"src/{self.rng.choice(_WORDS)}/{self.rng.choice(_WORDS)}.py"},
            "Grep": {"pattern": self.rng.choice(_WORDS)},
        }[name]
        return {"type": "tool_use", "id": f"toolu_{self.tools_made:08d}", "name": name, "input": tool_input}

    def answer(self, turn: int, message_id: str) -> dict[str, Any]:
        """An assistant Message JSON (as the API sends it) for this turn."""
        content: list[dict[str, Any]] = [{"type": "text", "text": self.text(40, 300)}]
        if TOOL_USE_EVERY[turn % len(TOOL_USE_EVERY)]:
            content.append(self.tool_call())
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": content,
            "stop_reason": "tool_use" if len(content) > 1 else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": USAGE_INPUT, "output_tokens": 20 + self.rng.randrange(200)},
        }

    def result(self, use: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": use["id"], "content": self.text(100, 2_000, log=True)}


def build_history(path: Path, workload: Workload, turns: int, end: datetime) -> tuple[str, int]:
    """The session with ``turns`` turns, appended in batches with counting off. Returns (id, events)."""
    store = open_store(path, migrate=True, token_counter=None)
    try:
        info = store.create_session(
            "bench",
            events=[SessionStarted(model=MODEL), ContextConfigured(system=SYSTEM_PROMPT, tools=TOOLS)],
        )
        seq = store.last_seq(info.id)
        batch: list[Event] = []
        fresh: list[str] = []
        for turn in range(turns):
            when = end - timedelta(seconds=30 * (turns - turn))
            batch.append(MessageAppended(role="user", content=workload.prompt(), timestamp=when))
            batch.append(
                ContextServed(
                    fingerprint=hashlib.sha256(f"history turn {turn}".encode()).hexdigest(),
                    through_seq=seq + len(batch),
                    token_count=USAGE_INPUT,
                    unreplaced_tool_results=fresh,
                    model=MODEL,
                )
            )
            answer = workload.answer(turn, f"msg_h{turn:06d}")
            batch.append(
                MessageAppended(
                    role="assistant",
                    content=answer["content"],
                    api_message_id=answer["id"],
                    stop_reason=answer["stop_reason"],
                    timestamp=when + timedelta(seconds=5),
                )
            )
            batch.append(
                UsageRecorded(
                    input_tokens=USAGE_INPUT,
                    output_tokens=answer["usage"]["output_tokens"],
                    api_message_id=answer["id"],
                    model=MODEL,
                )
            )
            uses = [b for b in answer["content"] if b["type"] == "tool_use"]
            fresh = [u["id"] for u in uses]
            if uses:
                batch.append(
                    MessageAppended(
                        role="user",
                        content=[workload.result(u) for u in uses],
                        timestamp=when + timedelta(seconds=10),
                    )
                )
            if len(batch) >= SETUP_BATCH or turn == turns - 1:
                seq = store.append(info.id, batch, seq).last_seq
                batch = []
        return info.id, seq
    finally:
        store.close()


# --- measuring ---------------------------------------------------------------------------------


def _dumps(params: dict[str, Any]) -> bytes:
    return json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Row:
    history: int
    events: int
    turns: int
    request_mb: float
    setup_s: float
    open_s: float
    prepare_ms: float
    fingerprint_ms: float
    record_ms: float
    round_trip_ms: float
    dumps_ms: float
    appends_ms: float
    snapshot_ms: float
    max_pr_ms: float
    mean_pr_ms: float

    @property
    def pr_ms(self) -> float:
        return self.prepare_ms + self.record_ms


class Timer:
    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = {}

    def add(self, name: str, ns: int) -> None:
        self.samples.setdefault(name, []).append(ns)

    def median_ms(self, name: str) -> float:
        values = self.samples.get(name, [])
        return ns_to_ms(statistics.median(values)) if values else math.nan


class FingerprintProbe:
    """Times ``_pipeline._served_event`` (the ContextServed fingerprint) while installed."""

    def __init__(self) -> None:
        self.original = _pipeline._served_event
        self.total_ns = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return self.original(*args, **kwargs)
        finally:
            self.total_ns += time.perf_counter_ns() - started

    def __enter__(self) -> FingerprintProbe:
        _pipeline._served_event = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        _pipeline._served_event = self.original

    def take(self) -> int:
        total, self.total_ns = self.total_ns, 0
        return total


def run_turn(
    loop: Conversation,
    client: anthropic.Anthropic,
    server: MessagesAPIServer,
    workload: Workload,
    turn: int,
    timer: Timer | None,
    profiler: cProfile.Profile | None = None,
    probe: FingerprintProbe | None = None,
) -> int:
    """One measured turn; returns the request's size in bytes."""
    server.queue.append((200, workload.answer(turn, f"msg_m{turn:06d}")))
    t0 = time.perf_counter_ns()
    loop.user(workload.prompt())
    t1 = time.perf_counter_ns()
    if profiler:
        profiler.enable()
    prepared = loop.prepare()
    if profiler:
        profiler.disable()
    t2 = time.perf_counter_ns()
    params = loop.params(prepared)
    t3 = time.perf_counter_ns()
    response = client.messages.create(**params)
    t4 = time.perf_counter_ns()
    if profiler:
        profiler.enable()
    loop.record(response)
    if profiler:
        profiler.disable()
    t5 = time.perf_counter_ns()
    uses = [block for block in response.content if block.type == "tool_use"]
    if uses:
        loop.user([workload.result({"id": use.id}) for use in uses])
    t6 = time.perf_counter_ns()
    data = _dumps(params)
    t7 = time.perf_counter_ns()
    server.requests.clear()  # the server keeps every parsed body: drop them
    if timer is not None:
        timer.add("prepare", t2 - t1)
        if probe is not None:
            timer.add("fingerprint", probe.take())
        timer.add("record", t5 - t4)
        timer.add("round_trip", t4 - t3)
        timer.add("dumps", t7 - t6)
        timer.add("appends", (t1 - t0) + (t6 - t5))
        timer.add("pr", (t2 - t1) + (t5 - t4))
    return len(data)


def bench_size(
    folder: Path, server: MessagesAPIServer, history: int, turns: int, *, profile: bool
) -> tuple[Row, cProfile.Profile | None]:
    workload = Workload(SEED + history)
    path = folder / f"loop-{history}.db"
    started = time.perf_counter()
    session_id, events = build_history(path, workload, history, datetime.now(UTC))
    setup_s = time.perf_counter() - started

    store = open_store(path)  # counting on (tiktoken cl100k)
    store.token_counter.count_text("warm up the tokenizer")  # type: ignore[union-attr]  # the default counts
    try:
        started = time.perf_counter()
        session = Session(store, session_id)
        open_s = time.perf_counter() - started
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        loop = Conversation(session, client, model=MODEL, max_tokens=MAX_TOKENS)
        for turn in range(WARMUP_TURNS):
            run_turn(loop, client, server, workload, turn, None)
        timer = Timer()
        size = 0
        gc.collect()
        with FingerprintProbe() as probe:
            for turn in range(WARMUP_TURNS, WARMUP_TURNS + turns):
                size = run_turn(loop, client, server, workload, turn, timer, probe=probe)
        profiler = None
        if profile:
            profiler = cProfile.Profile()
            for turn in range(WARMUP_TURNS + turns, WARMUP_TURNS + turns + PROFILE_TURNS):
                run_turn(loop, client, server, workload, turn, None, profiler)
        started_ns = time.perf_counter_ns()
        session.snapshot()
        snapshot_ns = time.perf_counter_ns() - started_ns
        pr = timer.samples["pr"]
        row = Row(
            history=history,
            events=events,
            turns=turns,
            request_mb=size / 1e6,
            setup_s=setup_s,
            open_s=open_s,
            prepare_ms=timer.median_ms("prepare"),
            fingerprint_ms=timer.median_ms("fingerprint"),
            record_ms=timer.median_ms("record"),
            round_trip_ms=timer.median_ms("round_trip"),
            dumps_ms=timer.median_ms("dumps"),
            appends_ms=timer.median_ms("appends"),
            snapshot_ms=ns_to_ms(snapshot_ns),
            max_pr_ms=ns_to_ms(max(pr)),
            mean_pr_ms=ns_to_ms(statistics.fmean(pr)),
        )
        client.close()
        return row, profiler
    finally:
        store.close()


def print_table(rows: Sequence[Row]) -> None:
    events_per_turn = 4.75  # prompt, ContextServed, answer, usage, and a result in 3 turns of 4
    print(
        "\nms per turn (medians). p+r = prepare + record; rt = SDK round trip to the local server;"
        "\ndumps = json.dumps of the same request; fp = prepare's fingerprint (_served_event)."
        "\nsnapshot: one session.snapshot() (taken every 1,000 events), /turn amortized."
    )
    header = (
        f"{'turns':>7} {'events':>7} {'req MB':>7} | {'prepare':>8} {'(fp)':>7} {'record':>7} {'p+r':>7} | "
        f"{'rt':>8} {'dumps':>7} | {'p+r/rt':>7} {'p+r/dumps':>9} | {'appends':>7} "
        f"{'p+r mean':>8} {'p+r max':>8} | {'snapshot':>8} {'/turn':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        amortized = r.snapshot_ms * events_per_turn / 1000
        print(
            f"{r.history:>7,} {r.events:>7,} {r.request_mb:>7.2f} | {r.prepare_ms:>8.2f} "
            f"{r.fingerprint_ms:>7.2f} {r.record_ms:>7.2f} {r.pr_ms:>7.2f} | "
            f"{r.round_trip_ms:>8.2f} {r.dumps_ms:>7.2f} | "
            f"{r.pr_ms / r.round_trip_ms:>7.2f} {r.pr_ms / r.dumps_ms:>9.2f} | {r.appends_ms:>7.2f} "
            f"{r.mean_pr_ms:>8.2f} {r.max_pr_ms:>8.2f} | {r.snapshot_ms:>8.1f} {amortized:>6.2f}"
        )
    print()
    for r in rows:
        print(
            f"  {r.history:>6,} turns: history built in {r.setup_s:.1f} s (counting off), "
            f"Session opened (full fold, no snapshot) in {r.open_s:.2f} s, {r.turns} turns measured"
        )


def print_profile(label: str, profiler: cProfile.Profile, top: int = 18) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order)
        stats.print_stats(top)
        body = out.getvalue()
        start = body.find("   ncalls")
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"\n--- cProfile: {label}, by {order} (total {total * 1e3:.0f} ms under the profiler) ---")
        print(body[start:].rstrip() if start >= 0 else body.rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 turns; under 45 seconds")
    parser.add_argument("--sizes", help="comma-separated history sizes (turns)")
    parser.add_argument("--turns", type=int, help="measured turns per size (default: 60/40/20 by size)")
    parser.add_argument("--no-profile", action="store_true", help="skip cProfile at the largest size")
    args = parser.parse_args(argv)
    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    per_size = QUICK_TURNS if args.quick else FULL_TURNS
    print(
        f"sessionstore {sessionstore.__version__} loop bench: Python {platform.python_version()}, "
        f"anthropic {anthropic.__version__}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}, {'quick' if args.quick else 'full'} run, "
        f"sizes {', '.join(f'{s:,}' for s in sizes)} turns",
        flush=True,
    )
    started = time.perf_counter()
    rows: list[Row] = []
    profiled: cProfile.Profile | None = None
    with tempfile.TemporaryDirectory(prefix="ss-loop-bench-") as folder, MessagesAPIServer() as server:
        for history in sizes:
            turns = args.turns or per_size.get(history, DEFAULT_TURNS)
            profile = not args.no_profile and history == max(sizes)
            row, profiler = bench_size(Path(folder), server, history, turns, profile=profile)
            rows.append(row)
            profiled = profiler or profiled
            print(f"  {history:,} turns done at {time.perf_counter() - started:.1f} s", flush=True)
    print_table(rows)
    if profiled is not None:
        print_profile(f"prepare + record, {PROFILE_TURNS} turns at {max(sizes):,} turns", profiled)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Turn latency saved at the compaction turn by pre-computed compaction.

Usage::

    python bench/precompute.py [--quick] [--latency SECONDS] [--repeats N]

Each run grows a fresh session turn by turn and runs ``Pipeline.prepare`` after every turn,
until the turn whose ``prepare`` records the first ``compact_boundary`` (the compaction turn).
Two paths, measured in the same run, one after the other, on the same seeded turns:

* ``summarize at threshold``: ``CompactConfig(session_memory=False)``, the path as shipped: the
  compaction turn calls the summarizer.
* ``pre-computed``: ``CompactConfig(session_memory=False, precompute_percent=85)``: a turn below
  the threshold prepares the summary (``compaction_prepared``), in the turn; the compaction turn
  commits it.
* ``pre-computed, background``: the same with ``preparer=BackgroundPreparer()``: the crossing turn
  hands the summarizer call to a worker thread and does not wait; a later turn records it.

and two summarizers:

* ``offline``: ``OfflineSummarizer`` (extractive, no network);
* ``anthropic``: ``AnthropicSummarizer`` over the real anthropic SDK against the local Messages
  API server of the tests (``tests/messages_api.py``), which waits ``--latency`` seconds
  (default 1.0) before each answer, standing for a model's time. With it, every turn also sends
  its own request to the same server right after ``prepare``, as an agent loop would (so a
  background preparation has the turns' model time to finish in), and ``turn ms`` includes it.

The workload: seeded turns (a prompt of 200-800 characters, one round calling Bash or Read with a
2-8 KB result, an answer of 200-800 characters), no API usage recorded (so "used" is the
calibrated estimate of the view), model ``claude-opus-5-5`` with ``context_window=100_000,
max_output_tokens=10_000``: effective window 90,000, auto-compact threshold 77,000, preparation
from 65,450 (85%). Every store is a SQLite file in a temporary folder (``migrate=True``).

Columns, medians over ``--repeats`` runs (3; ``--quick`` 1): ``compaction turn ms`` =
``Pipeline.prepare`` of the compaction turn; ``x`` = that against the ``summarize at threshold``
path of the same summarizer; ``turn ms`` (anthropic) = ``prepare`` plus the turn's own request;
``slowest other ms`` = the slowest turn before the compaction turn (``prepare``, plus the
turn's request with the anthropic summarizer; in the in-turn path, the turn that prepared: the
model call moved there); ``other turns ms`` = median
``prepare`` of the turns before the compaction turn; ``prep turn`` = the turn that recorded the
``compaction_prepared``; ``calls`` = summarizer calls made by the compaction turn's ``prepare``.
The script only reports; no targets are asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import SYSTEM_PROMPT, TOOLS, PooledText, print_table, text_pool  # noqa: E402

from sessionstore import MessageAppended, Session, SessionConfig, open_store  # noqa: E402
from sessionstore.pipeline import (  # noqa: E402
    AnthropicSummarizer,
    BackgroundPreparer,
    OfflineSummarizer,
    Pipeline,
    PipelineConfig,
)
from sessionstore.pipeline._compaction import CompactConfig  # noqa: E402
from sessionstore.pipeline._summarizers import Summarizer  # noqa: E402
from tests.messages_api import MessagesAPIServer, text_message  # noqa: E402

SEED = 20261130
MODEL = "claude-opus-5-5"
WINDOW = {"context_window": 100_000, "max_output_tokens": 10_000}
PRECOMPUTE_PERCENT = 85.0
MAX_TURNS = 400
BASELINE, IN_TURN, BACKGROUND = "summarize at threshold", "pre-computed", "pre-computed, background"
SUMMARY = (
    "1. Primary request and intent: run and fix the test suite of the orders service.\n"
    "2. Key technical concepts: pytest, the session store.\n"
    "6. All user messages: run the tests; fix what fails.\n"
    "7. Pending tasks: none.\n"
    "8. Current work: the last failing test."
)


class Workload(PooledText):
    """Seeded turns: a prompt, one tool round, an answer."""

    def __init__(self) -> None:
        rng = random.Random(SEED)
        super().__init__(rng, text_pool(rng, 400_000))
        self.n = 0

    def turn(self) -> list[MessageAppended]:
        rng, self.n = self.rng, self.n + 1
        call = self._tool_use(rng.choice(("Bash", "Read")))
        result = {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": self.text(rng.randint(2_000, 8_000)),
        }
        return [
            MessageAppended(role="user", content=self.text(rng.randint(200, 800))),
            MessageAppended(role="assistant", content=[call], api_message_id=f"msg_{self.n}a"),
            MessageAppended(role="user", content=[result]),
            MessageAppended(
                role="assistant",
                content=[{"type": "text", "text": self.text(rng.randint(200, 800))}],
                api_message_id=f"msg_{self.n}b",
            ),
        ]


class Counting:
    """A summarizer wrapped to count its calls (the compaction turn's ``calls`` column)."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0

    def summarize(self, request: Any) -> Any:
        self.calls += 1
        return self.inner.summarize(request)


@dataclass
class Run:
    compaction_ms: float = 0.0
    turn_ms: float | None = None
    other_ms: list[float] = field(default_factory=list)
    other_turn_ms: list[float] = field(default_factory=list)
    calls: int = 0
    turns: int = 0
    prepared_turn: int | None = None


def run(folder: Path, summarizer: Summarizer, path: str, client: anthropic.Anthropic | None) -> Run:
    """Grow one session to its first compaction; time every turn's ``prepare``."""
    store = open_store(folder / f"{os.getpid()}-{time.perf_counter_ns()}.db", migrate=True)
    try:
        session = Session.create(
            store,
            model=MODEL,
            config=SessionConfig(snapshot_every=0),
            system=SYSTEM_PROMPT,
            tools=TOOLS,
            **WINDOW,
        )
        counting = Counting(summarizer)
        preparer = BackgroundPreparer() if path == BACKGROUND else None
        percent = None if path == BASELINE else PRECOMPUTE_PERCENT
        config = CompactConfig(session_memory=False, precompute_percent=percent, preparer=preparer)
        pipeline = Pipeline(PipelineConfig(compact=config), summarizer=counting)
        workload = Workload()
        result = Run()
        for turn in range(1, MAX_TURNS + 1):
            session.append(workload.turn())
            calls_before, last = counting.calls, session.last_seq
            start = time.perf_counter()
            prepared = pipeline.prepare(session)
            elapsed = (time.perf_counter() - start) * 1e3
            calls = counting.calls - calls_before
            if client is not None:  # the turn's own request, right after prepare, as a loop sends it
                client.messages.create(model=MODEL, max_tokens=1024, **prepared.request)
            turn_ms = (time.perf_counter() - start) * 1e3
            kinds = {e.type for e in session.transcript if e.seq > last}
            if "compact_boundary" in kinds:
                result.compaction_ms, result.turn_ms, result.calls, result.turns = (
                    elapsed,
                    turn_ms,
                    calls,
                    turn,
                )
                if preparer is not None:
                    preparer.close()
                return result
            if "compaction_prepared" in kinds:
                result.prepared_turn = turn
            result.other_ms.append(elapsed)
            result.other_turn_ms.append(turn_ms)
        msg = f"no compaction within {MAX_TURNS} turns"
        raise RuntimeError(msg)
    finally:
        store.close()


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one run per configuration")
    parser.add_argument(
        "--latency", type=float, default=1.0, help="seconds the local server waits per answer"
    )
    parser.add_argument("--repeats", type=int, default=None, help="runs per configuration (3; --quick 1)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    print(f"python {platform.python_version()}, {platform.platform()}, load {os.getloadavg()[0]:.1f}")
    print(f"latency {args.latency} s per Messages API answer, {repeats} run(s) per configuration")
    rows: list[list[str]] = []
    with MessagesAPIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        server.next_message = text_message(SUMMARY)[1]
        client = anthropic.Anthropic(api_key="bench", base_url=server.url, max_retries=0)
        summarizers: list[tuple[str, Summarizer, anthropic.Anthropic | None]] = [
            ("offline", OfflineSummarizer(), None),
            ("anthropic", AnthropicSummarizer(client, MODEL), client),
        ]
        for label, summarizer, main_client in summarizers:
            reference: float | None = None
            for path in (BASELINE, IN_TURN, BACKGROUND):
                runs = [run(Path(tmp), summarizer, path, main_client) for _ in range(repeats)]
                compaction = _median([r.compaction_ms for r in runs])
                reference = compaction if reference is None else reference
                turn_values = [r.turn_ms for r in runs if r.turn_ms is not None]
                rows.append(
                    [
                        label,
                        path,
                        str(runs[0].turns),
                        "-" if runs[0].prepared_turn is None else str(runs[0].prepared_turn),
                        f"{compaction:,.1f}",
                        f"{compaction / reference:.3f}",
                        f"{_median(turn_values):,.1f}" if turn_values else "-",
                        f"{_median([max(r.other_turn_ms) for r in runs]):,.1f}",
                        f"{_median([m for r in runs for m in r.other_ms]):,.1f}",
                        str(runs[0].calls),
                    ]
                )
    print_table(
        [
            ("summarizer", "", 10),
            ("path", "", 24),
            ("compaction", "turn", 10),
            ("prep", "turn", 5),
            ("compaction", "turn ms", 11),
            ("x", "", 6),
            ("turn ms", "+request", 9),
            ("slowest", "other ms", 9),
            ("other", "turns ms", 9),
            ("calls", "", 5),
        ],
        rows,
    )


if __name__ == "__main__":
    main()

"""Disk use and speed of the LangGraph bridge against LangGraph's own SqliteSaver, in one run
(not named langgraph.py: bench/ is on sys.path, and that name would hide the langgraph package).

Usage::

    python bench/langgraph_checkpoints.py [--quick] [--steps 25,50,100,200] [--message-bytes 1000]

What is measured
----------------
One LangGraph ``StateGraph`` whose node appends one message (``--message-bytes`` of seeded text)
to a ``messages`` list (the ``operator.add`` reducer, as a chat agent's state grows) and loops
until the list holds N messages: N super-steps, a checkpoint and pending writes each. It runs
once per N on each checkpointer, each in a fresh SQLite file in a temporary folder:

* ``SqliteSaver`` (langgraph-checkpoint-sqlite): the reference; it stores every checkpoint
  with all its channel values inline, so step k writes the whole k-message list again.
* ``SessionStoreSaver`` on ``open_store`` (SQLite, WAL, synchronous=FULL): a checkpoint event
  holds only the channels whose version changed, and a list that grew stores the new items.

Columns, per N: the database file's bytes after the run (the connection closed, so the WAL is
folded in) divided by N; the wall-clock ms per step of ``graph.invoke`` (puts of checkpoints
and writes included, LangGraph's own work too); ``get_tuple`` of the newest checkpoint, warm
(the saver that ran the graph) and cold (a fresh saver on the reopened file). Ratios are
ours / SqliteSaver: below 1 is smaller or faster. Bytes per step that grow with N mean
quadratic total growth; flat bytes per step mean linear growth.
"""

from __future__ import annotations

import argparse
import operator
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from _common import WORDS
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from sessionstore import open_store
from sessionstore.bridges.langgraph import SessionStoreSaver


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def _graph(saver: Any, steps: int, message_bytes: int) -> Any:
    rng = random.Random(7)

    def speak(state: Chat) -> dict[str, Any]:
        text = " ".join(rng.choices(WORDS, k=message_bytes // 3))
        return {"messages": [text[:message_bytes]]}

    def more(state: Chat) -> str:
        return "speak" if len(state["messages"]) < steps else END

    builder = StateGraph(Chat)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_conditional_edges("speak", more)
    return builder.compile(checkpointer=saver)


def _timed(fn: Callable[[], Any], repeats: int = 1) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


CONFIG: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 100_000}


def run_sqlite_saver(path: Path, steps: int, message_bytes: int) -> dict[str, float]:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = _graph(saver, steps, message_bytes)
    run = _timed(lambda: graph.invoke({"messages": []}, CONFIG))
    warm = _timed(lambda: saver.get_tuple(CONFIG), repeats=20)
    conn.close()
    conn = sqlite3.connect(path, check_same_thread=False)
    cold = _timed(lambda: SqliteSaver(conn).get_tuple(CONFIG))
    conn.close()
    return {"bytes": os.path.getsize(path), "run": run, "warm": warm, "cold": cold}


def run_session_store(path: Path, steps: int, message_bytes: int) -> dict[str, float]:
    url = f"sqlite:///{path}"
    store = open_store(url, migrate=True, token_counter=None)
    saver = SessionStoreSaver(store)
    graph = _graph(saver, steps, message_bytes)
    run = _timed(lambda: graph.invoke({"messages": []}, CONFIG))
    warm = _timed(lambda: saver.get_tuple(CONFIG), repeats=20)
    store.close()
    store = open_store(url, token_counter=None)
    cold = _timed(lambda: SessionStoreSaver(store).get_tuple(CONFIG))
    store.close()
    return {"bytes": os.path.getsize(path), "run": run, "warm": warm, "cold": cold}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="N = 25, 50, 100")
    parser.add_argument("--steps", default="25,50,100,200,400", help="comma-separated N")
    parser.add_argument("--message-bytes", type=int, default=1000)
    args = parser.parse_args()
    steps = [25, 50, 100] if args.quick else [int(n) for n in args.steps.split(",")]
    print(f"one message of {args.message_bytes} bytes a step; SQLite files; load {os.getloadavg()[0]:.2f}")
    header = " | ".join(
        [f"{'N':>5}"]
        + [
            f"{name:>{width}} {'ours':>{width}} {'ratio':>6}"
            for name, width in (("bytes/step", 10), ("ms/step", 7), ("get warm ms", 11), ("get cold ms", 11))
        ]
    )
    print("SqliteSaver first, then SessionStoreSaver (ours), ratio = ours / SqliteSaver")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as folder:
        for n in steps:
            ref = run_sqlite_saver(Path(folder) / f"ref-{n}.db", n, args.message_bytes)
            ours = run_session_store(Path(folder) / f"ours-{n}.db", n, args.message_bytes)
            cells = [f"{n:>5}"]
            for key, scale, width in (
                ("bytes", 1 / n, 10),
                ("run", 1e3 / n, 7),
                ("warm", 1e3, 11),
                ("cold", 1e3, 11),
            ):
                mine, theirs = ours[key] * scale, ref[key] * scale
                cells.append(f"{theirs:>{width}.2f} {mine:>{width}.2f} {mine / theirs:>6.2f}")
            print(" | ".join(cells))
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

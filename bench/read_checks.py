"""What checking every event a read returns costs (``SessionStore.check_reads``, which the command
line turns on): a full read of a session, unchecked and checked, interleaved in one process.

    .venv/bin/python bench/read_checks.py [--turns 2000] [--rounds 7]

Prints the median of each and the ratio checked / unchecked (wall clock and CPU), and the
share of a CLI command (``events --json`` of the same session, in-process) the check adds.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import tempfile
import time
from pathlib import Path

from _common import median, text_pool

import sessionstore
from sessionstore import MessageAppended
from sessionstore.cli import main


def _session(store: sessionstore.SessionStore, turns: int) -> None:
    rng = random.Random(7)
    events = []
    for turn in range(turns):
        events.append(MessageAppended(role="user", content=f"question {turn}: " + text_pool(rng, 200)))
        events.append(MessageAppended(role="assistant", content=text_pool(rng, 1_200)))
    store.create_session("bench", events=events)


def _timed(fn: object) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    url = f"sqlite:///{folder / 'bench.db'}"
    store = sessionstore.open_store(url, migrate=True, token_counter=None)
    _session(store, args.turns)
    plain: list[tuple[float, float]] = []
    checked: list[tuple[float, float]] = []
    cli: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        store.check_reads = False
        plain.append(_timed(lambda: store.read("bench")))
        store.check_reads = True
        checked.append(_timed(lambda: store.read("bench")))
        cli.append(_timed(lambda: main(["events", "bench", "--json", "--db", url], out=io.StringIO())))
    store.close()
    events = 2 * args.turns
    load = os.getloadavg()[0]
    p_wall, p_cpu = median([w for w, _ in plain]), median([c for _, c in plain])
    c_wall, c_cpu = median([w for w, _ in checked]), median([c for _, c in checked])
    e_wall = median([w for w, _ in cli])
    print(f"full read of {events:,} events, {args.rounds} rounds, load average {load:.2f}")
    print(f"  unchecked   {p_wall * 1e3:8.1f} ms  ({p_wall / events * 1e6:.1f} us/event)")
    print(f"  checked     {c_wall * 1e3:8.1f} ms  ({c_wall / events * 1e6:.1f} us/event)")
    print(f"  ratio       {c_wall / p_wall:8.2f}x  [cpu {c_cpu / p_cpu:.2f}x]")
    share = (c_wall - p_wall) / e_wall
    print(f"  events --json of the session: {e_wall * 1e3:.1f} ms; the check is {share:.0%} of it")


if __name__ == "__main__":
    main_()

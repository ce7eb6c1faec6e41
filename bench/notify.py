"""How soon a subscriber in one process sees an append committed by another: LISTEN/NOTIFY
against polling, measured in one run on PostgreSQL.

Usage::

    python bench/notify.py [--pg URL] [--events N] [--poll SECONDS]

What is measured
----------------
A writer process appends ``N`` single events to one session, one every 20-60 ms (seeded
random gaps, so appends do not line up with poll ticks), and after each COMMIT sends
``(position, time.monotonic())`` to the parent over a pipe. The parent's subscriber
(``store.subscribe``, on a thread) notes ``time.monotonic()`` when each event arrives
(CLOCK_MONOTONIC is one clock for every process on the machine). Wake-up latency is arrival
minus commit, per event. Three runs on a fresh schema each:

* ``listen``: ``subscribe(poll_interval=60)``, woken by the append's NOTIFY only;
* ``poll``: ``subscribe(listen=False, poll_interval=--poll)`` (0.2 s, the default);
* ``poll/4``: polling four times as often (each poll is a query on the server).

Printed per run: median, p95 and max latency in ms, and each run's median as a ratio of the
``listen`` median. Polling's expected median is about half its interval; LISTEN's is the
round trip of one notification.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import uuid
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import MessageAppended


def _writer(url: str, session_id: str, events: int, seed: int, pipe: Connection) -> None:
    rng = random.Random(seed)
    with sessionstore.open_store(url, token_counter=None) as store:
        pipe.recv()  # the subscriber is listening
        for n in range(events):
            time.sleep(rng.uniform(0.02, 0.06))
            result = store.append(session_id, [MessageAppended(role="user", content=f"event {n}")], "any")
            pipe.send((result.positions[-1], time.monotonic()))
    pipe.send(None)


def _run(url: str, events: int, *, listen: bool, poll: float) -> list[float]:
    """Latencies in ms of ``events`` appends from another process to this one's subscriber."""
    with sessionstore.open_store(url, migrate=True, token_counter=None) as store:
        sid = store.create_session().id
        start = store.max_position()
        arrived: dict[int, float] = {}
        stop = threading.Event()
        caught_up = threading.Event()

        def subscribe() -> None:
            caught_up.set()  # subscribe() LISTENs before its first read; a commit after this is heard
            for recorded in store.subscribe(start, stop=stop, poll_interval=poll, listen=listen):
                arrived[recorded.position] = time.monotonic()
                if len(arrived) == events:
                    stop.set()

        thread = threading.Thread(target=subscribe)
        thread.start()
        parent, child = multiprocessing.Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=_writer, args=(url, sid, events, 7, child)
        )
        process.start()
        caught_up.wait()
        time.sleep(0.2)  # let the first read and the LISTEN happen
        parent.send("go")
        committed: dict[int, float] = {}
        while (message := parent.recv()) is not None:
            position, moment = message
            committed[position] = moment
        process.join()
        thread.join(timeout=max(5.0, 3 * poll))
        stop.set()
    return [(arrived[p] - committed[p]) * 1000 for p in committed if p in arrived]


def _schema_url(base: str) -> tuple[str, str]:
    schema = f"bench_notify_{uuid.uuid4().hex[:8]}"
    resolved = sessionstore.store.resolve_url(base)
    sep = "&" if "?" in resolved else "?"
    return schema, f"{resolved}{sep}options={quote(f'-csearch_path={schema}')}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=os.environ.get("SESSIONSTORE_TEST_PG_URL"))
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--poll", type=float, default=0.2)
    args = parser.parse_args()
    if not args.pg:
        sys.exit("needs PostgreSQL: --pg URL or SESSIONSTORE_TEST_PG_URL")
    admin = create_engine(sessionstore.store.resolve_url(args.pg), isolation_level="AUTOCOMMIT")
    runs: list[tuple[str, dict[str, Any]]] = [
        ("listen", {"listen": True, "poll": 60.0}),
        ("poll", {"listen": False, "poll": args.poll}),
        ("poll/4", {"listen": False, "poll": args.poll / 4}),
    ]
    results: dict[str, list[float]] = {}
    for name, options in runs:
        schema, url = _schema_url(args.pg)
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            results[name] = _run(url, args.events, **options)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()

    reference = statistics.median(results["listen"])
    print(f"wake-up latency, writer process -> subscriber process, {args.events} appends (ms)")
    print(f"{'run':<8} {'received':>8} {'median':>8} {'p95':>8} {'max':>8} {'x listen':>9}")
    for name, latencies in results.items():
        ordered = sorted(latencies)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        median = statistics.median(ordered)
        print(
            f"{name:<8} {len(ordered):>8} {median:>8.2f} {p95:>8.2f} {ordered[-1]:>8.2f} "
            f"{median / reference:>9.1f}"
        )


if __name__ == "__main__":
    main()

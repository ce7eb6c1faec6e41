"""Async append throughput and event-loop lag: ``AsyncSessionStore`` against the sync store in threads.

Usage::

    python bench/async_append.py [--quick] [--pg URL] [--tasks N] [--sessions S] [--appends A] [--repeats R]

What is measured
----------------
An asyncio service appends: ``--tasks`` concurrent tasks (default 200) each append ``--appends``
single-event batches (default 10) to one of ``--sessions`` sessions (default 50; task ``i``
writes session ``i % S``, ``expected_seq=ANY``), while a ticker task on the same loop sleeps
1 ms at a time and records how late it wakes up: the loop's lag, i.e. how long any other
request of the service would have waited for the loop. Contenders, each on a fresh database:

* ``async``: ``await store.append(...)`` on ``open_async_store`` (aiosqlite / psycopg async).
* ``sync in threads``: the sync ``open_store`` driven from the loop the way a service without
  an async store does it, ``await asyncio.to_thread(store.append, ...)`` (the default
  executor: min(32, CPUs + 4) threads).
* ``sync on the loop``: ``store.append(...)`` called directly in the tasks, blocking the loop:
  the lag a service gets when it forgets the thread (a reference, not a way to run).

Token counting is off (``token_counter=None``): the benchmark is about the I/O path. Every run
checks that each task's events are stored exactly once (exits 1 if not). Each contender runs
``--repeats`` times, interleaved; the median run is reported. Columns: appends/s (wall clock),
the lag's p99 and max in ms, and the CPU ms per append of this process (all threads).

How to read the ratios
----------------------
* ``async / sync in threads`` throughput: > 1 means the async store appends faster.
* ``sync in threads / async`` max and p99 lag: > 1 means the async store keeps the loop more
  responsive. Both stores run the same CPU work per append (validation, hashing) on the loop
  (async) or in a thread that competes for the GIL (sync), so the lag measures what is left
  on the loop, not the database's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import ANY, MessageAppended
from sessionstore.store import resolve_url

TICK_SECONDS = 0.001


@dataclass
class Run:
    contender: str
    appends: int
    seconds: float
    cpu_seconds: float
    lags: list[float]

    @property
    def rate(self) -> float:
        return self.appends / self.seconds

    @property
    def max_lag_ms(self) -> float:
        return max(self.lags) * 1000 if self.lags else 0.0

    @property
    def p99_lag_ms(self) -> float:
        if len(self.lags) < 2:
            return self.max_lag_ms
        return statistics.quantiles(self.lags, n=100, method="inclusive")[98] * 1000


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    """Sleep TICK_SECONDS at a time; record how much later than asked the loop woke it."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TICK_SECONDS)
        lags.append(max(0.0, time.perf_counter() - started - TICK_SECONDS))


async def _drive(
    append: Callable[[str, list[MessageAppended]], Awaitable[Any]],
    sessions: list[str],
    tasks: int,
    appends: int,
) -> tuple[float, float, list[float], list[str]]:
    """Run the writers with the ticker beside them: (seconds, CPU seconds, lags, event ids written)."""
    written: list[str] = []

    async def writer(index: int) -> None:
        session_id = sessions[index % len(sessions)]
        for n in range(appends):
            event = MessageAppended(role="user", content=f"task {index} append {n}")
            await append(session_id, [event])
            written.append(str(event.event_id))

    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lags, stop))
    await asyncio.sleep(0.01)  # the ticker is running before the first append
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(tasks)))
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    stop.set()
    await ticker
    return seconds, cpu_seconds, lags, written


def _check(stored: list[str], written: list[str], contender: str) -> None:
    duplicated = [event_id for event_id, n in Counter(stored).items() if n > 1]
    lost = set(written) - set(stored)
    if lost or duplicated:
        print(f"FAIL {contender}: {len(lost)} lost, {len(duplicated)} duplicated", file=sys.stderr)
        sys.exit(1)


async def _run_async(url: str, args: argparse.Namespace) -> Run:
    store = await sessionstore.open_async_store(url, migrate=True, token_counter=None)
    try:
        sessions = [(await store.create_session()).id for _ in range(args.sessions)]

        async def append(session_id: str, events: list[MessageAppended]) -> Any:
            return await store.append(session_id, events, ANY)

        seconds, cpu, lags, written = await _drive(append, sessions, args.tasks, args.appends)
        _check([e.event_id for e in await store.read_all(0, 10 * len(written) + 10)], written, "async")
    finally:
        await store.close()
    return Run("async", len(written), seconds, cpu, lags)


async def _run_sync(url: str, args: argparse.Namespace, *, in_threads: bool) -> Run:
    name = "sync in threads" if in_threads else "sync on the loop"
    store = sessionstore.open_store(url, migrate=True, token_counter=None)
    try:
        sessions = [store.create_session().id for _ in range(args.sessions)]

        async def append(session_id: str, events: list[MessageAppended]) -> Any:
            if in_threads:
                return await asyncio.to_thread(store.append, session_id, events, ANY)
            return store.append(session_id, events, ANY)

        seconds, cpu, lags, written = await _drive(append, sessions, args.tasks, args.appends)
        _check([e.event_id for e in store.read_all(0, 10 * len(written) + 10)], written, name)
    finally:
        store.close()
    return Run(name, len(written), seconds, cpu, lags)


class _Databases:
    """A fresh database per run: a SQLite file in a temporary folder, or a PostgreSQL schema."""

    def __init__(self, pg_url: str | None) -> None:
        self.pg_url = resolve_url(pg_url) if pg_url else None
        self.folder = Path(tempfile.mkdtemp(prefix="async-append-"))
        self.schemas: list[str] = []

    def new(self) -> str:
        if self.pg_url is None:
            return f"sqlite:///{self.folder / f'{uuid.uuid4().hex}.db'}"
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE SCHEMA {schema}")
        self.schemas.append(schema)
        sep = "&" if "?" in self.pg_url else "?"
        return f"{self.pg_url}{sep}options={quote(f'-csearch_path={schema}')}"

    def _admin(self, statement: str) -> None:
        assert self.pg_url is not None
        engine = create_engine(self.pg_url)
        try:
            with engine.begin() as conn:
                conn.execute(text(statement))
        finally:
            engine.dispose()

    def drop(self) -> None:
        for schema in self.schemas:
            self._admin(f"DROP SCHEMA {schema} CASCADE")
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()


def _median(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


def _report(backend: str, results: dict[str, list[Run]]) -> None:
    print(f"\n{backend}")
    columns = ("appends/s", "lag p99 ms", "lag max ms", "cpu ms/append")
    print(f"  {'contender':<18} " + " ".join(f"{c:>{max(len(c), 10)}}" for c in columns))
    for name, runs in results.items():
        run = _median(runs)
        cpu = run.cpu_seconds / run.appends * 1000
        print(f"  {name:<18} {run.rate:>10.0f} {run.p99_lag_ms:>10.2f} {run.max_lag_ms:>10.2f} {cpu:>13.3f}")
    async_run, threads = _median(results["async"]), _median(results["sync in threads"])
    blocking = _median(results["sync on the loop"])

    def ratio(a: float, b: float) -> str:
        return f"{a / max(b, 1e-6):.2f}x"

    print(f"  throughput  async / sync in threads:        {ratio(async_run.rate, threads.rate)}")
    print(f"  loop lag    sync in threads / async (p99):  {ratio(threads.p99_lag_ms, async_run.p99_lag_ms)}")
    print(f"  loop lag    sync in threads / async (max):  {ratio(threads.max_lag_ms, async_run.max_lag_ms)}")
    print(f"  loop lag    sync on the loop / async (max): {ratio(blocking.max_lag_ms, async_run.max_lag_ms)}")


async def _bench(backend: str, pg_url: str | None, args: argparse.Namespace) -> None:
    databases = _Databases(pg_url)
    contenders: dict[str, Callable[[str], Awaitable[Run]]] = {
        "async": lambda url: _run_async(url, args),
        "sync in threads": lambda url: _run_sync(url, args, in_threads=True),
        "sync on the loop": lambda url: _run_sync(url, args, in_threads=False),
    }
    results: dict[str, list[Run]] = {name: [] for name in contenders}
    try:
        for _ in range(args.repeats):
            for name, run in contenders.items():  # interleaved: drift hits every contender alike
                results[name].append(await run(databases.new()))
    finally:
        databases.drop()
    _report(backend, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="40 tasks, 3 appends, 1 repeat")
    parser.add_argument("--pg", default=os.environ.get("SESSIONSTORE_TEST_PG_URL"), help="also PostgreSQL")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--appends", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.sessions, args.appends, args.repeats = 40, 10, 3, 1
    print(
        f"{args.tasks} tasks x {args.appends} single-event appends over {args.sessions} sessions, "
        f"median of {args.repeats}; load average {os.getloadavg()[0]:.2f}"
    )
    asyncio.run(_bench("SQLite (WAL, synchronous=FULL)", None, args))
    if args.pg:
        asyncio.run(_bench("PostgreSQL", args.pg, args))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

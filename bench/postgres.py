"""sessionstore on PostgreSQL against raw psycopg: appends, full reads, cold resume, and many
processes appending at once, measured in one run.

Usage::

    python bench/postgres.py [--quick] [--pg-url URL] [--parts append,resume,concurrent]
                             [--messages N] [--repeats R] [--sizes 2000,10000]
                             [--processes P] [--appends M] [--pause S]

The server
----------
With ``--pg-url``, that server (the test suite's ``SESSIONSTORE_TEST_PG_URL`` is not read, so
a run never loads a shared test server by accident); each part works in fresh schemas it
drops afterwards. Without it, a private cluster is started for the run the way the tests
start theirs (``tests/_private_pg.py``: ``initdb`` in a folder under /tmp, a free loopback
port) but with the server's default durability (``fsync=on``, ``full_page_writes=on``,
``synchronous_commit=on``: an acknowledged COMMIT survives a power loss, like SQLite's
``synchronous=FULL`` in bench/append.py), and removed at the end. The settings are read back
from a live connection and printed; the data folder is on the machine's disk, so a COMMIT
pays a real fsync.

Parts
-----
``append``: bench/append.py's workload and contenders on this server: the same seeded
messages (user and assistant text, ``tool_use``, ``tool_result`` of 0.5-200 KB), appended
one per transaction and 100 per transaction to one session, then read back in full.

* ``raw psycopg``, the floor: an equivalent table (session_id, seq, event_id unique, type,
  payload text, created_at; UNIQUE(session_id, seq)), ``executemany`` of the rows, COMMIT.
* ``sessionstore``, counting off and on (the default ``TiktokenCounter``, audited as in
  bench/append.py: each event tokenized once, the stored counts its results).

Ratios: msg/s of the store over the floor (CPU-time ratio of this client in brackets), and a
full read (``store.read``; the floor fetches every column of every row) over the floor's.

``resume``: bench/projection.py's conversation (turns of a prompt, 1-3 API rounds with
thinking, text and tool calls, usage) at each ``--sizes`` history, appended to the server in
batches of 500 with counting off, and written as a Claude Code JSONL transcript. Then, as in
projection.py's table (b), cold resume to the request bytes (median of ``--repeats``, each
on a freshly opened store, opening not timed, bytes checked identical):

* ``snapshot``: ``Session(store, sid).request_bytes()`` after ``session.snapshot()``;
* ``rebuild``: the same with ``use_snapshots=False`` (the full fold of the log);
* ``JSONL``: parsing the transcript file instead (projection.py's ``jsonl_resume``);
* ``raw log``, a floor for the rebuild: raw psycopg fetching every row of the session
  and ``json.loads`` of each payload (decompressed first where the store compressed it).

``concurrent``: ``--processes`` worker processes (default 16) each append ``--appends``
messages (default 100; bench/append.py's generator, seeded per worker), one per transaction,
all starting together (a barrier), in these layouts:

* ``P sessions``: each worker appends to a session of its own (``expected_seq`` tracked);
* ``1 session, ANY``: every worker appends to the same session with ``expected_seq=ANY``:
  writers race for the same head and hash chain, and the store serializes them;
* ``1 session, optimistic``: the same with the exact ``expected_seq``, the way a caller
  who must not interleave writes: on ``ConcurrencyError`` it takes the error's actual
  head and tries again (the retries are counted, and included in the latency).

The floor, ``raw psycopg``, is the least a correct per-session append does without the
store: ``pg_advisory_xact_lock`` on the session, INSERT with ``max(seq) + 1``, COMMIT (gap-free
seqs per session, no global order across sessions, no hash chain). The store's appends also
take ``LOCK TABLE events IN EXCLUSIVE MODE`` (docs/storage.md: positions in commit order),
which serializes appends to different sessions too: the ``P sessions`` rows show what that
costs. Per layout: msgs/s over the burst (all messages / first start to last end), append
latency p50, p99 and max (every append of every worker), the workers' CPU in cores (their
summed CPU time over the burst's wall time; the machine's core count is printed), the load
average around the burst, and the store's msgs/s over the floor's. Each burst is checked:
every session holds exactly the appended events, seqs gap-free, the hash chain verifies.

Each contender runs ``--repeats`` times, interleaved, medians reported; ``--pause`` seconds
between concurrent bursts give the machine back to its other users. ``--quick``: 200
messages, one 200-turn history, 4 processes of 10 appends, one repeat (about a minute).
Exit status 1 if a check fails (token counts, request bytes, a burst's events).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path

import append as append_bench  # bench/append.py: the append workload and its contenders
import projection as projection_bench  # bench/projection.py: the resume workload and its contenders
from _common import median, print_table

import sessionstore
from sessionstore import ANY, ConcurrencyError, Session
from sessionstore.store import TiktokenCounter
from sessionstore.store._codec import unpack_payload

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests._private_pg import find_bindir, remove_cluster, start_cluster  # noqa: E402

PARTS = ("append", "resume", "concurrent")
FULL_SIZES = (2_000, 10_000)
QUICK_SIZES = (200,)
#: Seconds a worker waits at the starting barrier before giving up (its peers' setup included).
BARRIER_TIMEOUT = 600


# --- the server ------------------------------------------------------------------------------


@contextmanager
def server(url: str | None) -> Iterator[str]:
    """The URL to measure: ``url``, or a private durable cluster started now and removed after."""
    if url:
        yield url
        return
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: pass --pg-url URL")
    print(f"starting a private PostgreSQL cluster ({bindir}) ...", file=sys.stderr)
    cluster = start_cluster(bindir, durable=True)
    try:
        yield cluster.url
    finally:
        remove_cluster(cluster)


_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
)


def describe_server(url: str) -> str:
    """The server's version and the settings that decide what a COMMIT costs, read back."""
    import psycopg

    with psycopg.connect(append_bench.plain_pg_url(url), autocommit=True) as conn:
        values = [f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}" for name in _SETTINGS]  # type: ignore[index]
        try:
            where = conn.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
        except psycopg.Error:  # only a superuser (or pg_read_all_settings) may see it
            where = "(not shown to this user)"
    return f"PostgreSQL: {' '.join(values)}\n  data directory: {where}"


def print_load(when: str) -> None:
    one, five, _ = os.getloadavg()
    print(f"load average ({when}): {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores", flush=True)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "FAILED"


# --- part 1: appends and full reads (bench/append.py's contenders) ---------------------------


def append_contenders(url: str) -> list[append_bench.Contender]:
    batch = append_bench.BATCH
    return [
        append_bench.Contender("raw-1", "raw psycopg", "server", 1, append_bench.raw_psycopg(url, batch=1)),
        append_bench.Contender(
            "raw-100", "raw psycopg", "server", batch, append_bench.raw_psycopg(url, batch=batch)
        ),
        append_bench.Contender(
            "off-1", "sessionstore, counting off", "server", 1, append_bench.sessionstore_pg(url, batch=1)
        ),
        append_bench.Contender(
            "off-100",
            "sessionstore, counting off",
            "server",
            batch,
            append_bench.sessionstore_pg(url, batch=batch),
        ),
        append_bench.Contender(
            "on-1",
            "sessionstore, counting on",
            "server",
            1,
            append_bench.sessionstore_pg(url, batch=1, counting=True),
        ),
        append_bench.Contender(
            "on-100",
            "sessionstore, counting on",
            "server",
            batch,
            append_bench.sessionstore_pg(url, batch=batch, counting=True),
        ),
    ]


def run_append_part(url: str, messages: list[append_bench.Message], repeats: int, workdir: Path) -> list[str]:
    """Appends and full reads against raw psycopg; returns the token-counting problems."""
    print(f"\n== appends and full reads: {append_bench.describe_workload(messages)}")
    print(f"{repeats} run(s) per contender, interleaved, median reported")
    print_load("start")
    contenders = append_contenders(url)
    problems = append_bench.run_all(contenders, messages, repeats, workdir)
    print_load("end")
    append_bench.print_table(contenders, len(messages), append_bench.payload_bytes(messages))
    by_key = {c.key: c for c in contenders if c.runs}
    count = len(messages)
    print("\nRatios (wall-clock medians, same messages, same run; this client's CPU-time ratio in brackets):")
    for batch in (1, append_bench.BATCH):
        raw = by_key.get(f"raw-{batch}")
        for counting in ("off", "on"):
            ours = by_key.get(f"{counting}-{batch}")
            if raw is None or ours is None:
                continue
            print(
                f"  batch {batch:>3}: sessionstore({counting}) / raw psycopg = "
                f"{ours.rate(count) / raw.rate(count):.2f} msg/s "
                f"[cpu {raw.cpu_ms(count) / ours.cpu_ms(count):.2f}]   "
                f"full read: {ours.read_ms() / raw.read_ms():.2f}x raw psycopg's time"
            )
    return problems


# --- part 2: cold resume (bench/projection.py's contenders) ----------------------------------


def raw_log_read_ms(url: str, schema: str, session_id: str, repeats: int) -> float:
    """Median ms of raw psycopg fetching every row of the session and ``json.loads`` of each payload
    (decompressed first where the store keeps it compressed, ``payload_packed``)."""
    import psycopg

    times = []
    for _ in range(repeats):
        with psycopg.connect(append_bench.plain_pg_url(url), options=f"-csearch_path={schema}") as conn:
            gc.collect()
            start = time.perf_counter_ns()
            rows = conn.execute("SELECT * FROM events WHERE session_id = %s ORDER BY seq", (session_id,))
            names = [column.name for column in rows.description or ()]
            text_at = names.index("payload")
            packed_at = names.index("payload_packed") if "payload_packed" in names else None
            decoded = [
                json.loads(
                    row[text_at]
                    if packed_at is None or row[packed_at] is None
                    else unpack_payload(bytes(row[packed_at]))
                )
                for row in rows.fetchall()
            ]
            times.append(time.perf_counter_ns() - start)
            del decoded
    return statistics.median(times) / 1e6


@dataclass
class ResumeResult:
    row: projection_bench.ResumeRow
    raw_ms: float


def resume_at(url: str, size: int, repeats: int, workdir: Path) -> ResumeResult:
    """Build a ``size``-turn history on the server, snapshot it, and time each way to resume."""
    jsonl = workdir / f"history-{size}.jsonl"
    with append_bench.pg_schema(url) as (schema_url, schema):
        sid, writer = projection_bench.build_history(schema_url, jsonl, projection_bench.Workload(), size)
        writer.close()
        store = projection_bench._open(schema_url)
        try:
            session = Session(store, sid)  # full fold: no snapshot for the counting tokenizer yet
            start = time.perf_counter_ns()
            session.snapshot()
            snap_write_ns = time.perf_counter_ns() - start
            expected = session.request_bytes()
            events = session.last_seq
            del session
        finally:
            store.close()
        gc.collect()
        row = projection_bench.measure_resume(
            schema_url, jsonl, sid, expected, size, events, snap_write_ns, repeats
        )
        raw_ms = raw_log_read_ms(url, schema, sid, repeats)
    jsonl.unlink()
    return ResumeResult(row, raw_ms)


def run_resume_part(url: str, sizes: tuple[int, ...], repeats: int, workdir: Path) -> None:
    print(f"\n== cold resume to the request bytes: histories of {', '.join(f'{s:,}' for s in sizes)} turns")
    print_load("start")
    results = []
    for size in sizes:
        started = time.perf_counter()
        results.append(resume_at(url, size, repeats, workdir))
        print(f"  {size:>6,} turns: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print_load("end")
    columns = [
        ("history", "turns", 8),
        ("events", "", 7),
        ("snapshot", "ms", 9),
        ("rebuild", "ms", 9),
        ("JSONL", "ms", 9),
        ("raw log", "ms", 9),
        ("JSONL/", "snapshot", 9),
        ("rebuild/", "snapshot", 9),
        ("rebuild/", "raw log", 9),
        ("snapshot/", "raw log", 9),
        ("snap MB", "", 8),
        ("JSONL MB", "", 9),
        ("snap write", "ms", 10),
    ]
    rows = []
    for result in results:
        r = result.row
        rows.append(
            [
                f"{r.turns:,}",
                f"{r.events:,}",
                f"{r.snapshot_ms:.1f}",
                f"{r.rebuild_ms:.1f}",
                f"{r.jsonl_ms:.1f}",
                f"{result.raw_ms:.1f}",
                f"{r.jsonl_ms / r.snapshot_ms:.1f}x",
                f"{r.rebuild_ms / r.snapshot_ms:.1f}x",
                f"{r.rebuild_ms / result.raw_ms:.1f}x",
                f"{r.snapshot_ms / result.raw_ms:.2f}x",
                f"{r.snap_mb:.1f}",
                f"{r.jsonl_mb:.1f}",
                f"{r.snap_write_ms:.1f}",
            ]
        )
    print(f"median of {repeats}, each on a freshly opened store (opening not timed)")
    print_table(columns, rows)
    print(f"  opening the store (not included above): ~{median([r.row.open_ms for r in results]):.0f} ms")


# --- part 3: concurrent appenders --------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """One concurrent burst: who appends, where, and how ``expected_seq`` is chosen."""

    key: str
    label: str
    raw: bool  # raw psycopg, else the store
    one_session: bool  # every worker appends to the same session
    expected: str  # "track" (own session), "any" or "optimistic" (exact, retried on conflict)
    counting: bool = False


LAYOUTS = (
    Layout("raw-own", "raw psycopg", raw=True, one_session=False, expected="track"),
    Layout("off-own", "sessionstore, counting off", raw=False, one_session=False, expected="track"),
    Layout(
        "on-own", "sessionstore, counting on", raw=False, one_session=False, expected="track", counting=True
    ),
    Layout("raw-one", "raw psycopg", raw=True, one_session=True, expected="track"),
    Layout("off-one-any", "sessionstore, counting off, ANY", raw=False, one_session=True, expected="any"),
    Layout(
        "on-one-any",
        "sessionstore, counting on, ANY",
        raw=False,
        one_session=True,
        expected="any",
        counting=True,
    ),
    Layout(
        "off-one-opt",
        "sessionstore, counting off, optimistic",
        raw=False,
        one_session=True,
        expected="optimistic",
    ),
)


@dataclass(frozen=True)
class Task:
    """What the parent asks of every worker for one burst."""

    layout: Layout
    url: str  # the burst's schema, selected by the URL (SQLAlchemy form)
    schema: str
    session_ids: tuple[str, ...]  # one per worker (the same id for every worker on one session)
    appends: int


@dataclass
class WorkerResult:
    start: float  # time.monotonic(): one clock for every process of the machine
    end: float
    cpu_seconds: float
    latencies_ns: list[int]
    retries: int


_RAW_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"
_RAW_NEXT_INSERT = (
    "INSERT INTO events (session_id, seq, event_id, type, payload, created_at) "
    "SELECT %s, coalesce(max(seq), 0) + 1, %s, %s, %s, %s FROM events WHERE session_id = %s"
)


class RawAppender:
    """The floor: lock the session (advisory, for this transaction), insert at max(seq) + 1, commit."""

    def __init__(self, task: Task, session_id: str) -> None:
        import psycopg

        self.session_id = session_id
        self.conn = psycopg.connect(
            append_bench.plain_pg_url(task.url), options=f"-csearch_path={task.schema}"
        )
        self.conn.execute("SELECT 1").fetchone()
        self.conn.commit()

    def append(self, message: append_bench.Message) -> int:
        sid, _seq, event_id, kind, payload, created_at = append_bench._raw_row(self.session_id, 0, message)
        self.conn.execute(_RAW_LOCK, (sid,))
        self.conn.execute(_RAW_NEXT_INSERT, (sid, event_id, kind, payload, created_at, sid))
        self.conn.commit()
        return 0

    def close(self) -> None:
        self.conn.close()


class StoreAppender:
    """``SessionStore.append`` of one event per call, ``expected_seq`` as the layout says."""

    def __init__(self, task: Task, session_id: str) -> None:
        counter = TiktokenCounter() if task.layout.counting else None
        if counter is not None:
            counter.count_text("warm up the tokenizer")
        self.store = sessionstore.open_store(task.url, token_counter=counter)
        self.session_id = session_id
        self.expected = task.layout.expected
        self.seq = self.store.last_seq(session_id)  # also opens the pool's connection

    def append(self, message: append_bench.Message) -> int:
        """Append; return how many times it was refused first (optimistic layout only)."""
        event = append_bench.to_event(message)
        if self.expected == "any":
            self.store.append(self.session_id, [event], expected_seq=ANY)
            return 0
        retries = 0
        while True:
            try:
                self.seq = self.store.append(self.session_id, [event], expected_seq=self.seq).last_seq
                return retries
            except ConcurrencyError as e:  # another worker appended first: take its head, try again
                if self.expected != "optimistic":
                    raise
                retries += 1
                self.seq = e.actual

    def close(self) -> None:
        self.store.close()


def _run_task(index: int, task: Task, messages: list[append_bench.Message], barrier: Barrier) -> WorkerResult:
    session_id = task.session_ids[index]
    appender = RawAppender(task, session_id) if task.layout.raw else StoreAppender(task, session_id)
    try:
        mine = messages[: task.appends]
        latencies: list[int] = []
        retries = 0
        gc.collect()
        barrier.wait(BARRIER_TIMEOUT)
        start, cpu = time.monotonic(), time.process_time()
        for message in mine:
            began = time.perf_counter_ns()
            retries += appender.append(message)
            latencies.append(time.perf_counter_ns() - began)
        return WorkerResult(start, time.monotonic(), time.process_time() - cpu, latencies, retries)
    finally:
        appender.close()


def worker_main(index: int, appends_each: int, pipe: Connection, barrier: Barrier) -> None:
    """A worker process: generate its messages once, then run the parent's tasks until ``None``."""
    messages = append_bench.make_messages(appends_each, seed=append_bench.SEED + 1 + index)
    pipe.send("ready")
    while (task := pipe.recv()) is not None:
        try:
            pipe.send(_run_task(index, task, messages, barrier))
        except BaseException:
            barrier.abort()  # release the others rather than leave them at the barrier
            pipe.send(traceback.format_exc(limit=4))


@dataclass
class Burst:
    """One layout's results over the repeats."""

    layout: Layout
    rates: list[float] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    cores: list[float] = field(default_factory=list)
    retries: int = 0
    loads: list[tuple[float, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class WorkerPool:
    """``processes`` spawned workers that start each burst together at a barrier."""

    def __init__(self, processes: int, appends_each: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.barrier = context.Barrier(processes + 1)
        self.pipes: list[Connection] = []
        self.processes = []
        for index in range(processes):
            parent, child = context.Pipe()
            process = context.Process(
                target=worker_main, args=(index, appends_each, child, self.barrier), daemon=True
            )
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)
        for pipe in self.pipes:
            if pipe.recv() != "ready":
                raise RuntimeError("a worker did not start")

    def run(self, task: Task) -> list[WorkerResult] | str:
        """Every worker's result, or the first failure's traceback."""
        self.barrier.reset()
        for pipe in self.pipes:
            pipe.send(task)
        # Every worker is set up: the burst starts now. A broken barrier: a worker failed, and
        # its traceback is its answer.
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(BARRIER_TIMEOUT)
        answers = [pipe.recv() for pipe in self.pipes]
        failures = [a for a in answers if isinstance(a, str)]
        if failures:
            return failures[0]
        return answers

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for process in self.processes:
            process.join(30)


def _check_store(url: str, session_ids: tuple[str, ...], expected_events: int) -> list[str]:
    problems = []
    with sessionstore.open_store(url, token_counter=None) as store:
        for sid in sorted(set(session_ids)):
            seqs = [r.seq for r in store.read(sid)]
            if seqs != list(range(1, expected_events + 1)):
                problems.append(f"session {sid}: {len(seqs)} events, expected seqs 1..{expected_events}")
            if not store.verify(sid).ok:
                problems.append(f"session {sid}: the hash chain does not verify")
    return problems


def _check_raw(url: str, schema: str, session_ids: tuple[str, ...], expected_events: int) -> list[str]:
    import psycopg

    with psycopg.connect(append_bench.plain_pg_url(url), options=f"-csearch_path={schema}") as conn:
        found = conn.execute(
            "SELECT session_id, count(*), min(seq), max(seq) FROM events GROUP BY session_id"
        ).fetchall()
    want = {sid: (expected_events, 1, expected_events) for sid in set(session_ids)}
    got = {sid: (n, low, high) for sid, n, low, high in found}
    return [] if got == want else [f"raw rows per session {got}, expected {want}"]


def run_burst(pool: WorkerPool, url: str, layout: Layout, processes: int, appends_each: int) -> Burst:
    """One burst of ``layout`` on fresh tables; its rate, latencies and checks in a ``Burst``."""
    burst = Burst(layout)
    with append_bench.pg_schema(url) as (schema_url, schema):
        sessions_needed = 1 if layout.one_session else processes
        if layout.raw:
            import psycopg

            with psycopg.connect(append_bench.plain_pg_url(url), options=f"-csearch_path={schema}") as conn:
                conn.execute(append_bench._RAW_PG_DDL)
            made = [f"s{n}" for n in range(sessions_needed)]
        else:
            with sessionstore.open_store(schema_url, migrate=True, token_counter=None) as store:
                made = [store.create_session().id for _ in range(sessions_needed)]
        session_ids = tuple(made[0] if layout.one_session else made[n] for n in range(processes))
        task = Task(layout, schema_url, schema, session_ids, appends_each)
        before = os.getloadavg()[0]
        results = pool.run(task)
        burst.loads.append((before, os.getloadavg()[0]))
        if isinstance(results, str):
            burst.problems.append(results)
            return burst
        per_session = appends_each * (processes if layout.one_session else 1)
        if layout.raw:
            burst.problems += _check_raw(url, schema, session_ids, per_session)
        else:
            burst.problems += _check_store(schema_url, session_ids, per_session)
    wall = max(r.end for r in results) - min(r.start for r in results)
    burst.rates.append(processes * appends_each / wall)
    burst.cores.append(sum(r.cpu_seconds for r in results) / wall)
    burst.latencies_ns = [ns for r in results for ns in r.latencies_ns]
    burst.retries = sum(r.retries for r in results)
    return burst


def _percentile(values: list[int], fraction: float) -> float:
    """The nearest-rank percentile (values in ns), in ms."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))] / 1e6


def run_concurrent_part(url: str, processes: int, appends_each: int, repeats: int, pause: float) -> list[str]:
    print(
        f"\n== {processes} processes appending at once, {appends_each} messages each, one per transaction "
        f"(bench/append.py's generator, seeded per process)"
    )
    print(f"starting {processes} worker processes ...", file=sys.stderr, flush=True)
    pool = WorkerPool(processes, appends_each)
    bursts = {layout.key: Burst(layout) for layout in LAYOUTS}
    try:
        for repeat in range(repeats):
            for layout in LAYOUTS:
                time.sleep(pause)
                one = run_burst(pool, url, layout, processes, appends_each)
                kept = bursts[layout.key]
                kept.rates += one.rates
                kept.cores += one.cores
                kept.latencies_ns += one.latencies_ns
                kept.retries += one.retries
                kept.loads += one.loads
                kept.problems += one.problems
                rate = f"{one.rates[0]:8.0f} msg/s" if one.rates else "FAILED"
                print(f"  {layout.key:<12} run {repeat + 1}/{repeats}: {rate}", file=sys.stderr, flush=True)
    finally:
        pool.close()
    print_concurrent(list(bursts.values()), processes, appends_each, repeats)
    return [f"{b.layout.key}: {p}" for b in bursts.values() for p in b.problems]


def print_concurrent(bursts: list[Burst], processes: int, appends_each: int, repeats: int) -> None:
    floors = {b.layout.one_session: b for b in bursts if b.layout.raw and b.rates}
    columns = [
        ("layout", "", 12),
        ("contender", "", 40),
        ("msg/s", "", 7),
        ("x raw", "", 6),
        ("p50", "ms", 7),
        ("p99", "ms", 8),
        ("max", "ms", 8),
        ("retries", "/append", 8),
        ("client", "cores", 7),
        ("load", "before-after", 13),
    ]
    rows = []
    for b in bursts:
        where = "1 session" if b.layout.one_session else f"{processes} sessions"
        if not b.rates:
            rows.append([where, b.layout.label, "failed", "", "", "", "", "", "", ""])
            continue
        rate = statistics.median(b.rates)
        floor = floors.get(b.layout.one_session)
        versus = f"{rate / statistics.median(floor.rates):.2f}" if floor is not None else "-"
        loads = f"{min(x for x, _ in b.loads):.1f}-{max(y for _, y in b.loads):.1f}"
        rows.append(
            [
                where,
                b.layout.label,
                f"{rate:.0f}",
                versus,
                f"{_percentile(b.latencies_ns, 0.50):.1f}",
                f"{_percentile(b.latencies_ns, 0.99):.1f}",
                f"{max(b.latencies_ns) / 1e6:.0f}",
                f"{b.retries / len(b.latencies_ns):.2f}",
                f"{statistics.median(b.cores):.2f}",
                loads,
            ]
        )
    print(
        f"msg/s: all {processes * appends_each} messages over the burst's wall time, median of {repeats}; "
        f"latency: every append of every run"
    )
    print_table(columns, rows)
    print(
        "  (x raw: over raw psycopg's msg/s in the same layout; client cores: the workers' CPU time over "
        f"the burst's wall time, of {os.cpu_count()}; the server's CPU is not included)"
    )


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run of every part (about a minute)")
    parser.add_argument(
        "--pg-url",
        "--pg",
        metavar="URL",
        help="the server to measure (default: a private cluster started now)",
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument(
        "--messages", type=int, help="messages of the append part (default 2000, --quick 200)"
    )
    parser.add_argument("--repeats", type=int, help="runs per contender, medians (default 3, --quick 1)")
    parser.add_argument("--sizes", help="resume: comma-separated history sizes in turns (default 2000,10000)")
    parser.add_argument("--processes", type=int, help="concurrent: worker processes (default 16, --quick 4)")
    parser.add_argument(
        "--appends", type=int, help="concurrent: messages per process (default 100, --quick 10)"
    )
    parser.add_argument("--pause", type=float, default=2.0, help="concurrent: seconds between bursts (2)")
    args = parser.parse_args(argv)
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    args.messages = args.messages or (200 if args.quick else 2000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.sizes:
        args.sizes = tuple(int(s) for s in args.sizes.split(","))
    else:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    args.processes = args.processes or (4 if args.quick else 16)
    args.appends = args.appends or (10 if args.quick else 100)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"sessionstore {sessionstore.__version__} PostgreSQL benchmark; Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; parts: {', '.join(args.parts)}"
    )
    problems: list[str] = []
    started = time.perf_counter()
    with server(args.pg_url) as url, tempfile.TemporaryDirectory(prefix="sessionstore-pg-bench-") as tmp:
        print(describe_server(url))
        workdir = Path(tmp)
        if "append" in args.parts:
            messages = append_bench.make_messages(args.messages)
            problems += [f"append part: {p}" for p in run_append_part(url, messages, args.repeats, workdir)]
        if "resume" in args.parts:
            run_resume_part(url, args.sizes, args.repeats, workdir)
        if "concurrent" in args.parts:
            problems += run_concurrent_part(url, args.processes, args.appends, args.repeats, args.pause)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    print_load("end")
    if problems:
        print("\nCHECKS FAILED:\n  " + "\n  ".join(problems))
        return 1
    checked = {
        "append": "each event tokenized once and its count stored",
        "resume": "the request bytes identical on every resume path",
        "concurrent": "every burst's sessions complete, gap-free and verified",
    }
    print("\nChecks passed: " + "; ".join(checked[part] for part in PARTS if part in args.parts) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())

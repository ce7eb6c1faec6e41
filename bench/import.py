"""Import throughput of Claude Code transcripts, against a bare ``json.loads`` of the same bytes.

Usage::

    python bench/import.py [--quick] [--turns N] [--repeats R] [--pg URL] [--profile]

Workloads
---------
* ``corpus``: the real transcripts in ``shared/corpus/claude-code/*.jsonl`` (beside the
  repository, read-only; skipped with a note when absent), imported as one folder: 4 main
  sessions and 2 sub-agents.
* ``generated``: one Claude Code transcript of 10,000 turns (``--quick``: 1,000) written by
  ``bench/projection.py``'s seeded generator (``Workload`` + ``TranscriptWriter``): per turn a
  ``file-history-snapshot`` line, the prompt, one line per assistant content block (thinking
  with signature, text, ``tool_use``), one line per tool result with its ``toolUseResult``
  duplicate, and a ``system/turn_duration`` line. ~28 KB a turn: ~280 MB at 10,000 turns.

Contenders, each timed over exactly the same files in the same run:

* ``json.loads`` (the floor): read each file and ``json.loads`` every non-blank line, nothing
  else. Any importer has to do at least this.
* ``sqlite``: ``sessionstore.import_claude_code(store, paths)`` into a fresh SQLite file
  (WAL, ``synchronous=FULL``: ``open_store(path, migrate=True)``), token counting on (the
  default, what ``sessionstore import`` does; the tokenizer is loaded before timing).
* ``sqlite, tokens off``: the same with ``token_counter=None``: what the importer itself costs.
* ``postgres`` (with ``--pg URL``): as ``sqlite``, in a fresh schema dropped afterwards.

Opening and migrating the database is not timed; the timer covers the one import call:
reading, parsing, converting and writing (each session in one transaction). Every store import
is checked to write the same events as the others. Columns (medians of the runs): wall and
CPU seconds (this process only: for PostgreSQL, the client side), MB/s (file bytes per wall
second), msg/s (``user``/``assistant`` lines imported as messages, per wall second), ``x floor``
(import wall time / ``json.loads`` wall time) and ``cpu x`` (the same in CPU time, steadier
when other processes share the machine: the load average is printed at both ends). An import
that raises shows its error in place of its numbers, and the exit status is 1.

``--profile`` adds a cProfile of the ``sqlite`` import of the generated file, grouped by cost
(tokenizer, SQLite, JSON, event ids, pydantic, hashing, the importer's own code).

The full run takes about two minutes on 2 cores (a minute more with ``--pg``, another with
``--profile``); ``--quick`` about fifteen seconds (thirty with ``--pg``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import sessionstore

sys.path.insert(0, str(Path(__file__).resolve().parent))
import projection as generator  # bench/projection.py: the seeded transcript writer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "claude-code"
FULL_TURNS = 10_000
QUICK_TURNS = 1_000
SESSION_ID = "5e551045-0000-4000-8000-000000000001"


@dataclass
class Workload:
    name: str
    paths: list[Path]  # what import_claude_code is given
    files: list[Path]  # every transcript file read (the floor parses these)
    bytes: int
    lines: int
    messages: int = 0  # set by the first import


@dataclass
class Row:
    contender: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # this process's CPU seconds (PG: client side)
    events: int | None = None
    error: str | None = None  # the import raised: the row shows why instead of numbers

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    events: int = 0
    messages: int = 0


# --- workloads -------------------------------------------------------------------------------


def corpus_workload() -> Workload | None:
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if not files:
        return None
    return Workload(f"corpus ({len(files)} files)", [CORPUS], files, *_size(files))


def generated_workload(folder: Path, turns: int) -> Workload:
    # Named <sessionId>.jsonl as Claude Code names it; the importer takes the id from the lines.
    path = folder / f"{SESSION_ID}.jsonl"
    writer = generator.TranscriptWriter(path, SESSION_ID)
    source = generator.Workload()
    try:
        for _ in range(turns):
            writer.turn(source.turn())
    finally:
        writer.close()
    return Workload(f"generated ({turns:,} turns)", [path], [path], *_size([path]))


def _size(files: list[Path]) -> tuple[int, int]:
    total = lines = 0
    for path in files:
        total += path.stat().st_size
        with path.open("rb") as f:
            lines += sum(1 for line in f if line.strip())
    return total, lines


# --- contenders ------------------------------------------------------------------------------


def json_floor(workload: Workload) -> Run:
    """Read every file and json.loads each non-blank line: the least an importer must do."""
    start, cpu = time.perf_counter(), time.process_time()
    for path in workload.files:
        with path.open("rb") as f:
            for line in f:
                if line.strip():
                    json.loads(line)
    return Run(time.perf_counter() - start, time.process_time() - cpu)


def timed_import(store: sessionstore.SessionStore, workload: Workload) -> Run:
    """One import into an empty store: wall and CPU seconds, events written, messages."""
    start, cpu = time.perf_counter(), time.process_time()
    report = sessionstore.import_claude_code(store, workload.paths)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Run(wall, cpu, report.written, sum(s.messages for s in report.sessions))


def _open_sqlite(path: Path, counting: bool) -> sessionstore.SessionStore:
    if not counting:
        return sessionstore.open_store(path, migrate=True, token_counter=None)
    store = sessionstore.open_store(path, migrate=True)
    store.token_counter.count_text("load the tokenizer before timing")  # type: ignore[union-attr]
    return store


@contextmanager
def pg_schema(base_url: str) -> Iterator[str]:
    """A fresh schema selected by the URL's search_path; dropped afterwards."""
    from sqlalchemy import create_engine, text

    schema = f"bench_import_{uuid.uuid4().hex[:12]}"
    url = sessionstore.store.resolve_url(base_url)
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


Runner = Callable[[Workload, Path], Run]


def sqlite_runner(counting: bool) -> Runner:
    def run(workload: Workload, folder: Path) -> Run:
        path = folder / f"import-{uuid.uuid4().hex[:8]}.db"
        store = _open_sqlite(path, counting)
        try:
            return timed_import(store, workload)
        finally:
            store.close()
            for leftover in folder.glob(path.name + "*"):  # the file and its -wal/-shm
                leftover.unlink()

    return run


def pg_runner(base_url: str) -> Runner:
    def run(workload: Workload, _folder: Path) -> Run:
        with pg_schema(base_url) as url:
            store = sessionstore.open_store(url, migrate=True)
            store.token_counter.count_text("load the tokenizer before timing")  # type: ignore[union-attr]
            try:
                return timed_import(store, workload)
            finally:
                store.close()

    return run


# --- running ---------------------------------------------------------------------------------


def measure(workload: Workload, runners: dict[str, Runner], repeats: int, folder: Path) -> list[Row]:
    """Each contender ``repeats`` times, interleaved; checks every import wrote the same events."""
    rows = {"json.loads": Row("json.loads")} | {name: Row(name) for name in runners}
    for repeat in range(repeats):
        gc.collect()
        floor = json_floor(workload)
        rows["json.loads"].seconds.append(floor.wall)
        rows["json.loads"].cpu.append(floor.cpu)
        for name, runner in runners.items():
            row = rows[name]
            if row.error is not None:
                continue
            gc.collect()
            print(f"  {workload.name}: {name} run {repeat + 1}/{repeats} ...", file=sys.stderr, flush=True)
            try:
                run = runner(workload, folder)
            except sessionstore.SessionStoreError as e:
                row.error = f"{type(e).__name__}: {e}"
                print(f"  {name} FAILED: {row.error}", file=sys.stderr, flush=True)
                continue
            if row.events is not None and row.events != run.events:
                raise SystemExit(f"{name}: wrote {run.events} events, {row.events} before: imports disagree")
            row.events = run.events
            row.seconds.append(run.wall)
            row.cpu.append(run.cpu)
            workload.messages = run.messages
    written = {row.events for row in rows.values() if row.events is not None}
    if len(written) > 1:
        raise SystemExit(f"{workload.name}: contenders wrote different event counts: {sorted(written)}")
    return list(rows.values())


def print_table(results: list[tuple[Workload, list[Row]]]) -> None:
    header = (
        f"{'workload':<26} {'contender':<20} {'wall s':>8} {'cpu s':>8} {'MB/s':>7} {'msg/s':>8} "
        f"{'x floor':>8} {'cpu x':>6}"
    )
    print(header)
    print("-" * len(header))
    for workload, rows in results:
        floor, floor_cpu = rows[0].median, rows[0].median_cpu
        mb = workload.bytes / 1e6
        for i, row in enumerate(rows):
            first = [workload.name, f"  {mb:.1f} MB", f"  {workload.messages:,} messages"][i] if i < 3 else ""
            if row.error is not None:
                print(f"{first:<26} {row.contender:<20} FAILED: {row.error[:120]}")
                continue
            print(
                f"{first:<26} {row.contender:<20} {row.median:>8.3f} {row.median_cpu:>8.3f} "
                f"{mb / row.median:>7.1f} {workload.messages / row.median:>8,.0f} "
                f"{row.median / floor:>8.1f} {row.median_cpu / floor_cpu:>6.1f}"
            )
        events = next((r.events for r in rows if r.events is not None), 0)
        print(f"{'':<26} ({workload.lines:,} lines -> {events:,} events)")


def print_load(when: str) -> None:
    load = os.getloadavg()[0]
    busy = "  (other processes are busy: wall-clock numbers are noisy; cpu s is steadier)" if load > 1 else ""
    print(f"load average ({when}): {load:.2f} on {os.cpu_count()} cores{busy}")


# --- profile ---------------------------------------------------------------------------------

#: (label, predicate on "file:function") in order; the first match takes the function's own time.
_GROUPS: list[tuple[str, Callable[[str], bool]]] = [
    ("tokenizer (tiktoken encode)", lambda k: "encode" in k and ("tiktoken" in k or "CoreBPE" in k)),
    ("SQLite (execute, commit)", lambda k: "sqlite3" in k or "Cursor" in k or "Connection" in k),
    ("json decode (the file's lines)", lambda k: "json/decoder" in k or "json/__init__" in k),
    ("event ids (uuid5 + UUID)", lambda k: "uuid.py" in k),
    ("pydantic (validate, serialize)", lambda k: "pydantic" in k),
    ("hash chain (sha256)", lambda k: "_hashing" in k or "_hashlib" in k),
    ("importer (convert, order)", lambda k: "claude_code/_import" in k),
]


def profile_import(workload: Workload, folder: Path) -> None:
    path = folder / "profile.db"
    store = _open_sqlite(path, counting=True)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        sessionstore.import_claude_code(store, workload.paths)
        profiler.disable()
    finally:
        store.close()
    stats = pstats.Stats(profiler)
    raw = stats.stats  # type: ignore[attr-defined]  # {(file, line, fn): (cc, nc, tottime, cumtime, callers)}
    total = sum(v[2] for v in raw.values())
    grouped: dict[str, float] = {}
    for (filename, _line, function), values in raw.items():
        key = f"{filename}:{function}"
        label = next((name for name, match in _GROUPS if match(key)), "other")
        grouped[label] = grouped.get(label, 0.0) + values[2]
    print(f"\ncProfile of the sqlite import of {workload.name} (own time; profiling inflates Python calls):")
    for label, seconds in sorted(grouped.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<34} {seconds:>7.2f} s  {100 * seconds / total:>5.1f}%")
    print("\nTop 12 functions by own time:")
    stats.sort_stats("tottime").print_stats(12)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS:,} generated turns (< 40 s)")
    parser.add_argument("--turns", type=int, help=f"generated turns (default {FULL_TURNS:,})")
    parser.add_argument(
        "--repeats", type=int, help="runs of each contender on the generated file (default 1, --quick 2)"
    )
    parser.add_argument("--pg", metavar="URL", help="also import into PostgreSQL (a fresh schema)")
    parser.add_argument("--profile", action="store_true", help="cProfile the generated import")
    args = parser.parse_args(argv)
    args.turns = args.turns or (QUICK_TURNS if args.quick else FULL_TURNS)
    args.repeats = args.repeats or (2 if args.quick else 1)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runners: dict[str, Runner] = {"sqlite": sqlite_runner(True), "sqlite, tokens off": sqlite_runner(False)}
    if args.pg:
        runners["postgres"] = pg_runner(args.pg)
    started = time.perf_counter()
    print(f"sessionstore {sessionstore.__version__} import benchmark; Python {sys.version.split()[0]}")
    print_load("start")
    results: list[tuple[Workload, list[Row]]] = []
    with tempfile.TemporaryDirectory(prefix="sessionstore-import-") as tmp:
        folder = Path(tmp)
        corpus = corpus_workload()
        if corpus is None:
            print(f"NOTE: corpus not found at {CORPUS}: its rows are skipped.")
        else:
            results.append((corpus, measure(corpus, runners, 3, folder)))
        t0 = time.perf_counter()
        generated = generated_workload(folder, args.turns)
        made = time.perf_counter() - t0
        results.append((generated, measure(generated, runners, args.repeats, folder)))
        print_load("end")
        print(
            f"corpus: 3 runs per contender; generated: {args.repeats}; medians; "
            f"x floor = wall time / json.loads wall time (writing the file took {made:.1f} s, not timed)\n"
        )
        print_table(results)
        if args.profile:
            profile_import(generated, folder)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"\npeak RSS {peak:,.0f} MB (the importer reads and converts every file before writing); "
        f"total {time.perf_counter() - started:.0f} s"
    )
    failed = [f"{w.name}: {r.contender}" for w, rows in results for r in rows if r.error is not None]
    if failed:
        print("\nIMPORT FAILED for: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

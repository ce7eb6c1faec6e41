"""Import throughput of Claude Code transcripts, against a bare ``json.loads`` of the same bytes.

Usage::

    python bench/import.py [--quick] [--turns N] [--repeats R] [--pg URL] [--profile]
    python bench/import.py --large MB LINE_MB [--tokens-off]

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

``--large MB LINE_MB`` runs instead the large workloads, each import in a child process so its
peak RSS (``ru_maxrss`` from ``os.wait4``) is its own: a ~MB transcript made of the corpus's main
transcripts' lines, copied with fresh uuids and API message ids until it is that large (one
conversation), and a transcript of ONE line of ~LINE_MB (a real prompt whose text is corpus text
repeated), each alone and both in one import. Each is imported by this tree's importer
(``after``) and by the importer of commit ``BEFORE`` (``before``, read from git and run on this
tree's store; skipped without git). Columns: wall and CPU seconds of the import call, MB/s per
wall and per CPU second, the child's peak RSS and that over the largest file. Then
``sessionstore context``, ``audit`` and ``served --turn 1 --as-sent`` run as child processes on the
imported ~MB session, first with the snapshot the import took, then with the snapshots deleted.
``--tokens-off`` imports with ``token_counter=None`` instead (what counting costs is the difference;
the views are left out: they count with the default tokenizer, which such a snapshot is not for).

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
from _common import source_at

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
    generator.write_transcript(path, SESSION_ID, turns)
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


# --- large transcripts: throughput and peak memory, before and after streaming ----------------
#
# ``--large``: transcripts made from the real corpus (its main transcripts' lines, repeated with
# fresh uuids and API message ids so each copy is new to the importer, chained into one long
# conversation), plus one transcript that is a single huge line (a real prompt whose text is
# real corpus text repeated). Each import runs in a child process, so its peak RSS
# (``ru_maxrss``, from ``os.wait4``) is its own: ``after`` is this tree's importer, ``before``
# the importer of commit BEFORE (loaded from git, on this tree's store), when git has it. Then
# ``context``, ``audit`` and ``served --as-sent`` run as child processes on the largest imported
# session, with and without the snapshot the import took.

BEFORE = "53a735b"  # the last importer that converted every file before writing
CORPORA = [CORPUS, CORPUS.parent / "claude-code-more"]
LARGE_SESSION = "5e551045-0000-4000-8000-00000000001a"
HUGE_SESSION = "5e551045-0000-4000-8000-00000000001b"
_NAMESPACE = uuid.UUID("0b5e1f1e-3c1a-4e55-9d1c-7a2f4b8e6c01")


def _corpus_lines() -> list[dict[str, object]]:
    """Every object of the corpus's main transcripts (sub-agent files left out), in file order."""
    found: list[dict[str, object]] = []
    for folder in CORPORA:
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            if "agent-" in path.name:
                continue
            for raw in path.read_bytes().split(b"\n"):
                try:
                    value = json.loads(raw)
                except ValueError:
                    continue  # blank, or several objects on a line: left out of the copies
                if isinstance(value, dict) and not value.get("isSidechain"):
                    found.append(value)
    return found


def _copy(line: dict[str, object], k: int, previous: str | None) -> dict[str, object]:
    """``line`` as copy ``k``: uuids and API message ids of its own; a root hangs off ``previous``."""

    def fresh(value: object) -> object:
        return str(uuid.uuid5(_NAMESPACE, f"{k}/{value}")) if isinstance(value, str) else value

    out = dict(line)
    out["sessionId"] = LARGE_SESSION
    for key in ("uuid", "parentUuid", "logicalParentUuid"):
        if key in out:
            out[key] = fresh(out[key])
    if out.get("parentUuid") is None and out.get("uuid") is not None and previous is not None:
        out["parentUuid"] = previous
    message = out.get("message")
    if isinstance(message, dict) and isinstance(message.get("id"), str):
        out["message"] = {**message, "id": f"{message['id']}_{k}"}
    return out


def large_workloads(folder: Path, many_mb: int, huge_mb: int) -> tuple[Workload, Workload] | None:
    """(one ~``many_mb`` MB transcript of copied corpus lines, one transcript of one ~``huge_mb`` MB line)."""
    lines = _corpus_lines()
    if not lines:
        return None
    many = folder / "many" / f"{LARGE_SESSION}.jsonl"
    many.parent.mkdir()
    written, k, previous = 0, 0, None
    with many.open("w", encoding="utf-8") as out:
        while written < many_mb * 1_000_000:
            for line in lines:
                copied = _copy(line, k, previous)
                text = json.dumps(copied, separators=(",", ":"), ensure_ascii=False) + "\n"
                out.write(text)
                written += len(text.encode())
                previous = copied.get("uuid") if isinstance(copied.get("uuid"), str) else previous  # type: ignore[assignment]
            k += 1
    prose = "".join(
        block.get("text", "") if isinstance(block, dict) else ""
        for line in lines
        if isinstance(line.get("message"), dict)
        for block in (line["message"].get("content") or [])  # type: ignore[union-attr]
        if isinstance(line["message"].get("content"), list)  # type: ignore[union-attr]
    )
    prompt = next(
        line for line in lines if line.get("type") == "user" and isinstance(line.get("message"), dict)
    )
    text = prose * (huge_mb * 1_000_000 // max(1, len(prose.encode())) + 1)
    huge_line = {
        **prompt,
        "sessionId": HUGE_SESSION,
        "parentUuid": None,
        "message": {"role": "user", "content": text},
    }
    huge = folder / "huge" / f"{HUGE_SESSION}.jsonl"
    huge.parent.mkdir()
    huge.write_text(json.dumps(huge_line, separators=(",", ":"), ensure_ascii=False) + "\n", encoding="utf-8")
    del text, huge_line
    return (
        Workload(f"copied corpus ({many_mb} MB)", [many], [many], *_size([many])),
        Workload(f"one {huge_mb} MB line", [huge], [huge], *_size([huge])),
    )


def _child(argv: list[str]) -> int:
    """In a child process: import ``paths`` into ``db`` with the ``before`` or ``after`` importer."""
    which, counting, db, *paths = argv
    importer = sessionstore.import_claude_code
    if which == "before":
        import importlib.util

        source = Path(db).with_suffix(".before.py")
        spec = importlib.util.spec_from_file_location("sessionstore.claude_code._import_before", source)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        importer = module.import_claude_code
    store = _open_sqlite(Path(db), counting=counting == "on")
    rss_before = round(_own_peak_mb())
    start, cpu = time.perf_counter(), time.process_time()
    report = importer(store, paths)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    store.close()
    print(json.dumps({"wall": wall, "cpu": cpu, "written": report.written, "rss_ready_mb": rss_before}))
    _report_peak()
    return 0


def _view(argv: list[str]) -> int:
    """In a child process: run the command line ``argv`` with its output discarded."""
    from sessionstore.cli import main as cli

    with open(os.devnull, "w") as sink:
        status = cli(argv, out=sink)
    _report_peak()
    return status


def _report_peak() -> None:
    """This process's own peak RSS in MB, last on stderr (see ``_run_child``)."""
    print(f"peak-rss-mb {_own_peak_mb():.1f}", file=sys.stderr)


def _own_peak_mb() -> float:
    """The peak RSS of this program: ``VmHWM``, which exec resets. ``ru_maxrss`` does not: a child
    forked from a big parent reports the parent's size until exec as its own."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class ChildRun:
    wall: float
    cpu: float
    rss_mb: float
    output: str
    status: int


def _run_child(command: list[str], folder: Path) -> ChildRun:
    """Run ``command`` (a ``--child`` or ``--view`` of this script): its wall time, its CPU time and
    the peak RSS it reports of itself. Output goes to files (a view of a long session prints
    megabytes)."""
    import subprocess

    out_path, err_path = folder / "child.out", folder / "child.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    errors = err_path.read_text()
    peaks = [float(line.split()[1]) for line in errors.splitlines() if line.startswith("peak-rss-mb ")]
    text = out_path.read_text()[-2000:] if child.returncode == 0 else errors[-400:]
    cpu = usage.ru_utime + usage.ru_stime
    return ChildRun(wall, cpu, peaks[-1] if peaks else float("nan"), text, child.returncode)


def _import_child(which: str, workloads: list[Workload], folder: Path, db: Path, counting: bool) -> ChildRun:
    paths = [str(p) for w in workloads for p in w.paths]
    command = [sys.executable, __file__, "--child", which, "on" if counting else "off", str(db), *paths]
    return _run_child(command, folder)


def _before_source(db: Path) -> bool:
    """Write the BEFORE importer beside ``db`` (where ``_child`` loads it); False without git."""
    source = source_at(BEFORE, "sessionstore/claude_code/_import.py")
    if source is None:
        return False
    db.with_suffix(".before.py").write_text(source)
    return True


VIEWS = {
    "context": ["context", "{sid}", "--json"],
    "audit": ["audit", "{sid}", "--json"],
    "served": ["served", "{sid}", "--turn", "1", "--as-sent", "--json"],
}


def _views(db: Path, session_id: str, folder: Path) -> dict[str, ChildRun]:
    cli = [sys.executable, __file__, "--view", "--db", str(db), "--no-pager"]
    return {
        name: _run_child(cli + [arg.format(sid=session_id) for arg in args], folder)
        for name, args in VIEWS.items()
    }


def _drop_snapshots(db: Path) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM snapshots")


def run_large(folder: Path, many_mb: int, huge_mb: int, counting: bool = True) -> int:
    made = large_workloads(folder, many_mb, huge_mb)
    if made is None:
        print(f"NOTE: corpus not found at {CORPUS}: the large workloads are skipped.")
        return 0
    many, huge = made
    largest = max(many.bytes, huge.bytes)
    print(
        "\nLarge transcripts made from the corpus; import in a child process each "
        f"(token counting {'on' if counting else 'off'}):"
    )
    header = (
        f"{'workload':<26} {'importer':<8} {'wall s':>8} {'cpu s':>8} {'MB/s':>7} {'MB/cpu s':>8} "
        f"{'peak RSS MB':>12} {'x largest':>10}"
    )
    print(header)
    print("-" * len(header))
    failed = False
    rows: list[tuple[str, list[Workload]]] = [
        (many.name, [many]),
        (huge.name, [huge]),
        ("both, one import", [many, huge]),
    ]
    views_db: Path | None = None
    for name, workloads in rows:
        size = sum(w.bytes for w in workloads)
        biggest = max(w.bytes for w in workloads)
        for which in ("before", "after"):
            db = folder / f"large-{which}-{uuid.uuid4().hex[:6]}.db"
            if which == "before" and not _before_source(db):
                print(f"{name:<26} {which:<8} (commit {BEFORE} not in this checkout's git: skipped)")
                continue
            run = _import_child(which, workloads, folder, db, counting)
            if run.status != 0:
                failed = True
                print(f"{name:<26} {which:<8} FAILED (exit {run.status}, {run.rss_mb:,.0f} MB): {run.output}")
                continue
            timing = json.loads(run.output.strip().splitlines()[-1])
            print(
                f"{name:<26} {which:<8} {timing['wall']:>8.1f} {timing['cpu']:>8.1f} "
                f"{size / 1e6 / timing['wall']:>7.1f} {size / 1e6 / timing['cpu']:>8.1f} "
                f"{run.rss_mb:>12,.0f} {run.rss_mb / (biggest / 2**20):>10.2f}"
            )
            if which == "after" and workloads == [many] and counting:
                views_db = db
                continue
            for leftover in folder.glob(db.name + "*"):
                leftover.unlink()
    print(f"(largest file {largest / 1e6:.0f} MB; 'x largest' = peak RSS / that row's largest file)")
    if views_db is not None:
        events = sessionstore.open_store(views_db).last_seq(LARGE_SESSION)
        print(f"\nViews of the imported {many.name} session ({events:,} events), each a child process:")
        print(f"{'command':<10} {'snapshot':<10} {'wall s':>8} {'cpu s':>8} {'peak RSS MB':>12}  status")
        with_snapshot = _views(views_db, LARGE_SESSION, folder)
        _drop_snapshots(views_db)
        without = _views(views_db, LARGE_SESSION, folder)
        for name in VIEWS:
            for label, run in (("import's", with_snapshot[name]), ("none", without[name])):
                last = run.output.strip().splitlines()[-1][:90] if run.output.strip() else ""
                status = "ok" if run.status == 0 else f"exit {run.status}: {last}"
                print(
                    f"{name:<10} {label:<10} {run.wall:>8.2f} {run.cpu:>8.2f} {run.rss_mb:>12,.0f}  {status}"
                )
    return 1 if failed else 0


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS:,} generated turns (< 40 s)")
    parser.add_argument("--turns", type=int, help=f"generated turns (default {FULL_TURNS:,})")
    parser.add_argument(
        "--repeats", type=int, help="runs of each contender on the generated file (default 1, --quick 2)"
    )
    parser.add_argument(
        "--tokens-off", action="store_true", help="--large: import with token_counter=None (no views)"
    )
    parser.add_argument("--pg", metavar="URL", help="also import into PostgreSQL (a fresh schema)")
    parser.add_argument("--profile", action="store_true", help="cProfile the generated import")
    parser.add_argument(
        "--large",
        nargs=2,
        type=int,
        metavar=("MB", "LINE_MB"),
        help="only the large workloads: a MB-sized transcript copied from the corpus and one LINE_MB line",
    )
    args = parser.parse_args(argv)
    if args.tokens_off and not args.large:
        parser.error("--tokens-off applies to the --large imports only (the generated one runs both ways)")
    args.turns = args.turns or (QUICK_TURNS if args.quick else FULL_TURNS)
    args.repeats = args.repeats or (2 if args.quick else 1)
    return args


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        return _child(sys.argv[2:])
    if argv is None and sys.argv[1:2] == ["--view"]:
        return _view(sys.argv[2:])
    args = parse_args(argv)
    if args.large:
        print(f"sessionstore {sessionstore.__version__} import benchmark (large), Python {sys.version[:6]}")
        print_load("start")
        with tempfile.TemporaryDirectory(prefix="sessionstore-import-") as tmp:
            status = run_large(Path(tmp), *args.large, counting=not args.tokens_off)
        print_load("end")
        return status
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
        f"\npeak RSS {peak:,.0f} MB (of this whole process, every contender and the generator; "
        "--large measures each import in a child of its own); "
        f"total {time.perf_counter() - started:.0f} s"
    )
    failed = [f"{w.name}: {r.contender}" for w, rows in results for r in rows if r.error is not None]
    if failed:
        print("\nIMPORT FAILED for: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

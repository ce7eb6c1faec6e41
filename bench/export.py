"""Claude Code export: time and peak memory of `sessionstore export -o` on a large imported session.

``python bench/export.py [--mb 100] [--before REV] [--repeats N]``

The workload is ``import.py --large``'s: a ~MB transcript of the corpus's main transcripts' lines,
copied with fresh uuids and API message ids until it is that large (one conversation; 100 MB is a
67,221-event session), imported once into a fresh SQLite file with token counting off. Each
contender then runs in a child process of its own, which reports its own peak RSS (``VmHWM``):

* ``copy`` (the reference): read the raw transcript a line at a time and write it to a temporary
  file beside the target, fsync, rename. Any export has to write at least this.
* ``after``: ``sessionstore export SESSION -o FILE`` of this tree (the CLI, as a user runs it).
* ``before``: the export of commit ``REV`` (default: the last one that read the whole log, four
  times), read from git and run on this tree's store, as its CLI did: every line in a list, joined,
  ``write_text``. Skipped without git.

Each output is compared with the transcript byte for byte. Columns: wall and CPU seconds of the
child, its peak RSS, that over the transcript's size, and wall and CPU time over ``copy``'s (CPU is
steadier when others share the machine: the load average is printed at both ends).

Then the corpus (``shared/corpus/claude-code*/``, main transcripts and their sub-agents) is
imported into one in-memory store and every session exported in this process
(``export_claude_code``, joined and written), against reading and writing the same files; each
export is checked to give its file back byte for byte.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
bench_import = importlib.import_module("import")

from _common import source_at  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore.claude_code import export_claude_code, import_claude_code  # noqa: E402
from sessionstore.cli import main as cli_main  # noqa: E402

#: The export before it streamed: the whole visible log read four times, every line held.
BEFORE = "ad98265"


def _child(argv: list[str]) -> int:
    """``--child copy SRC DST`` | ``--child after DB SESSION DST`` | ``--child before DB SESSION DST``."""
    which = argv[0]
    if which == "copy":
        source, target = argv[1], argv[2]
        temp = f"{target}.tmp"
        with open(source, "rb") as read, open(temp, "wb") as write:
            for line in read:
                write.write(line)
            write.flush()
            os.fsync(write.fileno())
        os.replace(temp, target)
    elif which == "after":
        status = cli_main(["export", argv[2], "-o", argv[3], "--db", argv[1]])
        if status:
            return status
    else:
        module = _load_before(Path(argv[1]).parent / "export_before.py")
        with sessionstore.open_store(argv[1]) as store:
            lines = module.export_claude_code(store, argv[2])
            Path(argv[3]).write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")
    bench_import._report_peak()
    return 0


def _load_before(path: Path) -> object:
    name = "sessionstore.claude_code._export_before"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _write_before(folder: Path, rev: str) -> bool:
    """The export module of ``rev`` beside the database; False without git (or that commit)."""
    source = source_at(rev, "sessionstore/claude_code/_export.py")
    if source is None:
        return False
    (folder / "export_before.py").write_text(source, encoding="utf-8")
    return True


def _large(args: argparse.Namespace, folder: Path) -> None:
    made = bench_import.large_workloads(folder, args.mb, 1)
    if made is None:
        print("no corpus (shared/corpus/claude-code*/): nothing to measure")
        return
    source = made[0].paths[0]
    size_mb = source.stat().st_size / 1_000_000
    db = folder / "export.db"
    with sessionstore.open_store(db, migrate=True, token_counter=None) as store:
        import_claude_code(store, [source])
        events = store.last_seq(bench_import.LARGE_SESSION)
    print(f"workload: {source.name}, {size_mb:.1f} MB, {events:,} events")
    contenders = ["copy", "after"] + (["before"] if _write_before(folder, args.before) else [])
    runs: dict[str, list[bench_import.ChildRun]] = {name: [] for name in contenders}
    same: dict[str, bool] = {}
    original = source.read_bytes()
    for _ in range(args.repeats):
        for name in contenders:
            target = folder / f"{name}.jsonl"
            target.unlink(missing_ok=True)
            extra = [str(source)] if name == "copy" else [str(db), bench_import.LARGE_SESSION]
            command = [sys.executable, __file__, "--child", name, *extra, str(target)]
            run = bench_import._run_child(command, folder)
            if run.status:
                print(f"{name}: failed: {run.output}")
                return
            runs[name].append(run)
            same[name] = target.read_bytes() == original
            target.unlink()
    del original
    copy_wall = statistics.median(r.wall for r in runs["copy"])
    copy_cpu = statistics.median(r.cpu for r in runs["copy"])
    print(
        f"\n{'contender':<10} {'wall s':>7} {'cpu s':>7} {'peak MB':>8} {'x file':>7} "
        f"{'wall x copy':>12} {'cpu x copy':>11}  identical"
    )
    for name, measured in runs.items():
        wall = statistics.median(r.wall for r in measured)
        cpu = statistics.median(r.cpu for r in measured)
        peak = max(r.rss_mb for r in measured)
        print(
            f"{name:<10} {wall:>7.2f} {cpu:>7.2f} {peak:>8.0f} {peak / size_mb:>7.2f} "
            f"{wall / copy_wall:>12.1f} {cpu / copy_cpu:>11.1f}  {'yes' if same[name] else 'NO'}"
        )


def _corpus(folder: Path) -> None:
    files = sorted(p for corpus in bench_import.CORPORA if corpus.is_dir() for p in corpus.glob("*.jsonl"))
    if not files:
        return
    size_mb = sum(p.stat().st_size for p in files) / 1_000_000
    with sessionstore.open_store(":memory:", token_counter=None) as store:
        report = import_claude_code(store, files)
        start, cpu = time.perf_counter(), time.process_time()
        for session in report.sessions:
            (folder / "copy.jsonl").write_bytes(Path(session.path).read_bytes())
        copy_wall, copy_cpu = time.perf_counter() - start, time.process_time() - cpu
        exported: dict[str, str] = {}
        start, cpu = time.perf_counter(), time.process_time()
        for session in report.sessions:
            lines = export_claude_code(store, session.session_id)
            (folder / "export.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            exported[session.path] = "".join(line + "\n" for line in lines)
        wall, used = time.perf_counter() - start, time.process_time() - cpu
    identical = sum(
        1
        for session in report.sessions
        # As the corpus tests compare: a missing final newline is added, trailing blank lines dropped.
        if exported[session.path].rstrip("\n") == Path(session.path).read_text(encoding="utf-8").rstrip("\n")
    )
    print(
        f"\ncorpus: {len(files)} main transcripts ({len(report.sessions)} sessions with sub-agents, "
        f"{size_mb:.1f} MB): export {wall:.2f} s wall, {used:.2f} s cpu; read+write the files "
        f"{copy_wall:.3f} s, {copy_cpu:.3f} s cpu "
        f"({wall / copy_wall:.0f}x wall, {used / copy_cpu:.0f}x cpu); "
        f"{identical} of {len(report.sessions)} byte for byte"
    )


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        return _child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the generated transcript (default 100)")
    parser.add_argument("--before", default=BEFORE, help=f"commit of the 'before' export (default {BEFORE})")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each contender (medians; default 1)")
    args = parser.parse_args(argv)
    bench_import.print_load("start")
    with tempfile.TemporaryDirectory(prefix="sessionstore-export-") as tmp:
        folder = Path(tmp)
        _large(args, folder)
        _corpus(folder)
    bench_import.print_load("end")
    print(json.dumps({"python": sys.version.split()[0], "sqlite": __import__("sqlite3").sqlite_version}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a poll of ``ClaudeCodeFollower`` costs when a long transcript gains one line.

Usage::

    python bench/follow.py [--turns N ...] [--polls P] [--before COMMIT] [--profile]

A transcript of N turns (default 200 and 1,000; ~28 KB a turn) is written by ``bench/projection.py``'s
seeded generator (the ``generated`` workload of ``bench/import.py``). All but its last P lines
(default 40) are written to a followed folder and polled once (the first poll: the whole file
imported); then its last P lines are appended one at a time, a poll after each. Each poll's CPU
time (this process: the follower and SQLite, ``synchronous=FULL``) is measured, and beside it, in
the same process, what a bare ``json.loads`` of that new line costs (the least any follower must
do for it). Columns, medians over the P polls: CPU ms per poll, that over ``json.loads`` of the
new line (``x loads``), that per MB of the file (what a poll that reads the whole file grows
with), that over this tree's (``x after``), and the child's peak RSS.

Each follower runs in a child process: this tree's (``after``) and, unless ``--before none``, the
package of commit ``--before`` (default: the last one whose polls converted every line again),
read from git with ``git archive`` into a temporary folder (skipped without git). Every child
writes the same events (checked: their count and the last event id).

``--profile`` prints a cProfile of this tree's last poll of the largest transcript.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BEFORE = "e42dc19"
SESSION_ID = "5e551045-0000-4000-8000-000000000001"
HERE = Path(__file__).resolve().parent


def _transcript(folder: Path, turns: int) -> Path:
    sys.path.insert(0, str(HERE))
    import projection as generator  # bench/projection.py: the seeded transcript writer

    path = folder / f"transcript-{turns}.jsonl"
    generator.write_transcript(path, SESSION_ID, turns)
    return path


def _child(source: Path, work: Path, polls: int, profile: bool) -> None:
    """Follow ``source`` growing by its last ``polls`` lines, one a poll; print the timings."""
    import sessionstore
    from sessionstore.claude_code import ClaudeCodeFollower

    lines = source.read_bytes().splitlines(keepends=True)
    live = work / "live"
    live.mkdir()
    target = live / f"{SESSION_ID}.jsonl"
    target.write_bytes(b"".join(lines[:-polls]))
    store = sessionstore.open_store(work / "follow.db", migrate=True)
    follower = ClaudeCodeFollower(store, [live])
    cpu = time.process_time()
    follower.poll()
    first = time.process_time() - cpu
    timings, loads = [], []
    for number, line in enumerate(lines[-polls:]):
        cpu = time.process_time()
        for _ in range(100):  # one is too short to time alone
            json.loads(line)
        loads.append((time.process_time() - cpu) / 100)
        with target.open("ab") as f:
            f.write(line)
        os.utime(target, ns=(time.time_ns(), time.time_ns() + number))  # a new stamp, however fast
        if profile and number == polls - 1:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
            follower.poll()
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
            continue
        cpu = time.process_time()
        follower.poll()
        timings.append(time.process_time() - cpu)
    events = store.read(SESSION_ID)
    report = follower.report()
    store.close()
    print(
        json.dumps(
            {
                "first": first,
                "polls": timings,
                "loads": loads,
                "events": len(events),
                "last": events[-1].event_id,
                "held": report.held,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def _before_package(folder: Path, commit: str) -> Path | None:
    """The ``sessionstore`` package of ``commit``, extracted under ``folder`` (None without git)."""
    target = folder / f"before-{commit}"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", commit, "sessionstore"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def _run(which: str, source: Path, folder: Path, polls: int, path: Path | None, profile: bool) -> dict:
    work = folder / f"{which}-{source.stem}"
    work.mkdir()
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    command = [sys.executable, __file__, "--child", str(source), str(work), str(polls)]
    done = subprocess.run(
        command + (["--profile"] if profile else []), env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{which} follower failed:\n{done.stderr[-2000:]}")
    if profile:
        print(done.stderr)
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(work)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--before", default=BEFORE, help="a commit to compare with, or 'none'")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        source, work, polls = args.child
        _child(Path(source), Path(work), int(polls), args.profile)
        return 0
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp:
        folder = Path(tmp)
        before = None if args.before == "none" else _before_package(folder, args.before)
        if args.before != "none" and before is None:
            print(f"(commit {args.before} not in this checkout's git: 'before' skipped)")
        header = (
            f"{'transcript':>22} {'follower':>16} {'first poll s':>12} {'poll ms':>8} {'x loads':>8} "
            f"{'ms/MB':>6} {'x after':>8} {'peak RSS MB':>11}"
        )
        print(header)
        print("-" * len(header))
        for turns in args.turns:
            source = _transcript(folder, turns)
            size = source.stat().st_size / 1e6
            lines = sum(1 for _ in source.open("rb"))
            name = f"{turns:,} turns, {size:.1f} MB"
            runs = {
                "after": _run(
                    "after", source, folder, args.polls, None, args.profile and turns == max(args.turns)
                )
            }
            if before is not None:
                runs[f"before {args.before}"] = _run("before", source, folder, args.polls, before, False)
            after = statistics.median(runs["after"]["polls"])
            for which, run in runs.items():
                if (run["events"], run["last"]) != (runs["after"]["events"], runs["after"]["last"]):
                    raise SystemExit(f"{which} wrote other events than after: {run['events']} events")
                poll = statistics.median(run["polls"])
                loads = statistics.median(run["loads"])
                print(
                    f"{name:>22} {which:>16} {run['first']:>12.2f} {poll * 1e3:>8.1f} "
                    f"{poll / loads:>8,.0f} {poll * 1e3 / size:>6.2f} {poll / after:>8.1f} "
                    f"{run['rss_mb']:>11,.0f}"
                )
            print(f"{'':>22} ({lines:,} lines, {runs['after']['events']:,} events, {args.polls} polls)")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

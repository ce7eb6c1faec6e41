"""The Claude Agent SDK's session store on sessionstore against the SDK's ``InMemorySessionStore``
and a plain JSONL file: one long session appended in the SDK's batches, then loaded.

Usage::

    python bench/agent_sdk_store.py [--entries N] [--batch B]

What is measured
----------------
One session of ``--entries`` entries (default 100,000): the lines of the Claude Code transcripts
in ``/work/shared/corpus/claude-code*/`` (``$SESSIONSTORE_CORPUS`` to read another folder), cycled,
each cycle with fresh ``uuid`` / ``parentUuid``, message and tool ids and the session's
``sessionId``. They are appended ``--batch`` at a time (default 500, as
``import_session_to_store`` batches), then the whole session is loaded with ``load`` in a new
process. Each contender runs in processes of its own:

* ``sessionstore``: ``SessionStoreClaudeStore`` over ``open_store`` on a SQLite file
  (``synchronous=FULL``: every batch is one durable transaction);
* ``InMemorySessionStore``: the SDK's reference store. It keeps nothing across processes, so its
  load runs in the process that appended (its peak RSS holds the entries it was given);
* ``jsonl``: a file, each batch written as lines and ``fsync``-ed; the load reads the file and
  ``json.loads`` every line (the least a durable store must do).

Append: entries per second and MB per second (MB of the session's JSONL, the same bytes for every
contender), wall clock of the ``append`` calls only. Load: the wall clock of ``load``, the peak
RSS of the loading process and what the load added to it. Every load is checked against what was
appended (a digest of the entries).

How to read the ratios
----------------------
``x InMemory`` and ``x jsonl`` divide sessionstore's figure by the reference's, measured in the
same run: for appends > 1 is faster, for load time and RSS < 1 is faster / smaller. The store
also imports every line into the session's events (what ``sessionstore import`` writes), keeps
the lines not settled yet in the mirror log, and hashes every event into the chain; the
references store the JSON and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

CORPUS = [Path(p) for p in os.environ.get("SESSIONSTORE_CORPUS", "").split(os.pathsep) if p] or sorted(
    Path("/work/shared/corpus").glob("claude-code*")
)
KEY = {
    "project_key": "-home-dev-projects-orders-service",
    "session_id": "b3c1a7e2-0000-4000-8000-000000000100",
}
CONTENDERS = ("sessionstore", "InMemorySessionStore", "jsonl")


# --- the session -------------------------------------------------------------------------------


def _corpus_lines() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in sorted(p for folder in CORPUS for p in folder.glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and isinstance(line.get("type"), str):
                lines.append(line)
    if not lines:
        raise SystemExit(f"no transcript lines in {[str(c) for c in CORPUS]} (set SESSIONSTORE_CORPUS)")
    return lines


def _renamed(value: Any, cycle: int) -> Any:
    """``value`` with its message and tool ids made this cycle's own."""
    if isinstance(value, dict):
        out = {k: _renamed(v, cycle) for k, v in value.items()}
        for name in ("id", "tool_use_id"):
            found = out.get(name)
            if isinstance(found, str) and found.startswith(("msg_", "toolu_")):
                out[name] = f"{found}c{cycle}"
        return out
    if isinstance(value, list):
        return [_renamed(v, cycle) for v in value]
    return value


def session_entries(count: int) -> Iterator[dict[str, Any]]:
    """The benchmark's session: the corpus lines cycled, each cycle with fresh ids (seeded)."""
    rng = random.Random(1)
    lines = _corpus_lines()
    made = 0
    cycle = 0
    while True:
        fresh: dict[str, str] = {}
        for line in lines:
            if made == count:
                return
            entry = _renamed(line, cycle)
            entry["sessionId"] = KEY["session_id"]
            for name in ("uuid", "parentUuid", "leafUuid"):
                old = entry.get(name)
                if isinstance(old, str):
                    entry[name] = fresh.setdefault(old, str(uuid.UUID(int=rng.getrandbits(128), version=4)))
            made += 1
            yield entry
        cycle += 1


def digest(entries: Iterable[Any]) -> str:
    """What a load is checked by: the entries' canonical JSON, hashed."""
    hasher = hashlib.sha256()
    for entry in entries:
        hasher.update(json.dumps(entry, sort_keys=True).encode())
    return hasher.hexdigest()


# --- the contenders, each in a child process ---------------------------------------------------


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _batches(count: int, batch: int) -> Iterator[list[dict[str, Any]]]:
    entries = session_entries(count)
    while chunk := list(itertools.islice(entries, batch)):
        yield chunk


async def _append_all(store: Any, count: int, batch: int) -> float:
    """The seconds spent in ``append`` (making the batches is not timed)."""
    seconds = 0.0
    for chunk in _batches(count, batch):
        started = time.perf_counter()
        await store.append(KEY, chunk)
        seconds += time.perf_counter() - started
    return seconds


def _write_jsonl(path: Path, count: int, batch: int) -> float:
    seconds = 0.0
    with path.open("a", encoding="utf-8") as file:
        for chunk in _batches(count, batch):
            started = time.perf_counter()
            file.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in chunk))
            file.flush()
            os.fsync(file.fileno())
            seconds += time.perf_counter() - started
    return seconds


def _read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _open(folder: Path) -> Any:
    import sessionstore
    from sessionstore.bridges.claude_agent_sdk import SessionStoreClaudeStore

    return SessionStoreClaudeStore(sessionstore.open_store(folder / "store.db", migrate=True))


async def _child(kind: str, phase: str, folder: Path, count: int, batch: int) -> dict[str, Any]:
    """One phase of one contender; what it measured."""
    result: dict[str, Any] = {}
    if phase == "append":
        if kind == "sessionstore":
            adapter = _open(folder)
            result["append_s"] = await _append_all(adapter, count, batch)
            adapter.store.close()
        elif kind == "jsonl":
            result["append_s"] = _write_jsonl(folder / "session.jsonl", count, batch)
        else:  # the in-memory store: appended and loaded in this one process
            from claude_agent_sdk import InMemorySessionStore

            memory = InMemorySessionStore()
            result["append_s"] = await _append_all(memory, count, batch)
            result.update(await _load(lambda: memory.load(KEY)))
        return result
    if kind == "sessionstore":
        adapter = _open(folder)
        result.update(await _load(lambda: adapter.load(KEY)))
        adapter.store.close()
    else:
        path = folder / "session.jsonl"

        async def read() -> list[Any]:
            return _read_jsonl(path)

        result.update(await _load(read))
    return result


async def _load(load: Any) -> dict[str, Any]:
    before = _peak_mb()
    started = time.perf_counter()
    loaded = await load()
    seconds = time.perf_counter() - started
    peak = _peak_mb()
    return {"load_s": seconds, "peak_mb": peak, "load_adds_mb": peak - before, "digest": digest(loaded or [])}


def _run_child(kind: str, phase: str, folder: Path, count: int, batch: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, phase, str(folder), "--entries", str(count)]
    done = subprocess.run([*command, "--batch", str(batch)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {phase} failed:\n{done.stderr}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


# --- the run -----------------------------------------------------------------------------------


def _measure(kind: str, folder: Path, count: int, batch: int) -> dict[str, Any]:
    work = folder / kind
    work.mkdir()
    measured = _run_child(kind, "append", work, count, batch)
    if kind != "InMemorySessionStore":
        measured.update(_run_child(kind, "load", work, count, batch))
    measured["disk_mb"] = sum(p.stat().st_size for p in work.iterdir()) / 1e6
    return measured


def _print(results: dict[str, dict[str, Any]], count: int, megabytes: float) -> None:
    print(
        f"{'contender':>22} {'append entries/s':>16} {'MB/s':>6} {'load s':>7} {'peak RSS MB':>11} "
        f"{'load adds MB':>12} {'disk MB':>8}"
    )
    for kind, r in results.items():
        print(
            f"{kind:>22} {count / r['append_s']:>16,.0f} {megabytes / r['append_s']:>6.1f} "
            f"{r['load_s']:>7.2f} {r['peak_mb']:>11,.0f} {r['load_adds_mb']:>12,.0f} {r['disk_mb']:>8.1f}"
        )
    ours = results["sessionstore"]
    for ref in CONTENDERS[1:]:
        theirs = results[ref]
        print(
            f"sessionstore x {ref}: append rate {theirs['append_s'] / ours['append_s']:.2f}x, "
            f"load time {ours['load_s'] / theirs['load_s']:.2f}x, "
            f"peak RSS {ours['peak_mb'] / theirs['peak_mb']:.2f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--entries", type=int, default=100_000, help="entries in the session (default 100,000)"
    )
    parser.add_argument("--batch", type=int, default=500, help="entries per append (default 500)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, phase, folder = args.child
        print(json.dumps(asyncio.run(_child(kind, phase, Path(folder), args.entries, args.batch))))
        return 0
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} cores")
    expected = digest(session_entries(args.entries))
    megabytes = (
        sum(len(json.dumps(e, ensure_ascii=False).encode()) + 1 for e in session_entries(args.entries)) / 1e6
    )
    print(f"session: {args.entries:,} entries, {megabytes:.1f} MB of JSONL, appended {args.batch} at a time")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-agent-sdk-") as tmp:
        for kind in CONTENDERS:
            results[kind] = _measure(kind, Path(tmp), args.entries, args.batch)
            if results[kind]["digest"] != expected:
                raise SystemExit(f"{kind} loaded other entries than were appended")
    _print(results, args.entries, megabytes)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

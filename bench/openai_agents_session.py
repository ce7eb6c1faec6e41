"""The OpenAI Agents SDK bridge against the SDK's own ``SQLiteSession``, on one SQLite machine.

Usage::

    python bench/openai_agents_session.py [--items N] [--repeats R]

What is measured
----------------
Per contender, on a fresh SQLite file in a temporary folder: ``--items`` SDK items (default 400:
a user message, a function call, its output of a few hundred characters, an assistant message,
repeating) added

* one ``add_items`` call per item (``add 1``), then, on another session,
* ``add_items`` of 10 items at a time, as the Runner adds a turn (``add 10``);

then ``get_items()`` of the whole session, 20 times, by a new session object each time (``get
cold``: what a new process or request does) and by the object that wrote them (``get warm``),
and ``get_items(limit=10)`` 20 times by a new object (``get 10``). Contenders:

* ``sessionstore async``: ``SessionStoreSession`` on ``open_async_store`` (aiosqlite).
* ``sessionstore sync``: ``SessionStoreSession`` on ``open_store`` (the calls run in worker threads).
* ``SQLiteSession``: the SDK's ``SQLiteSession(session_id, path)``.

Token counting is off for sessionstore (``token_counter=None``): SQLiteSession counts nothing.
Both sync every commit (sessionstore ``durability="full"``; SQLiteSession sets only WAL, so SQLite's
default ``synchronous=FULL``). Each contender runs ``--repeats`` times (default 3), interleaved;
the median is reported, and every run checks that the items read back equal the items added.

How to read the ratios
----------------------
``X / SQLiteSession`` of operations per second: > 1 means the bridge is faster. The bridge also
hashes each event into the session's chain and writes an event per call (pops and clears too),
which SQLiteSession does not. A cold ``get_items`` folds the whole log; ``get_items(limit)`` on
SQLiteSession reads only the newest rows, on the bridge the fold still reads every event.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import text_pool
from agents.memory import SQLiteSession

import sessionstore
from sessionstore.bridges.openai_agents import SessionStoreSession

MEASURES = ("add 1", "add 10", "get cold", "get warm", "get 10")
READS = 20


def _items(count: int) -> list[dict[str, Any]]:
    """SDK input items of a tool-using conversation (seeded, so every run adds the same)."""
    rng = random.Random(7)
    pool = text_pool(rng, 200_000)
    items: list[dict[str, Any]] = []
    for i in range(count):
        start = rng.randrange(0, len(pool) - 600)
        kind = i % 4
        if kind == 0:
            items.append({"role": "user", "content": pool[start : start + 80]})
        elif kind == 1:
            args = f'{{"command": "grep -rn {pool[start : start + 20]!r} src"}}'
            items.append({"type": "function_call", "call_id": f"call-{i}", "name": "bash", "arguments": args})
        elif kind == 2:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": f"call-{i - 1}",
                    "output": pool[start : start + 500],
                }
            )
        else:
            items.append(
                {
                    "id": f"msg-{i}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": pool[start : start + 200], "annotations": []}
                    ],
                }
            )
    return items


async def _rate(count: int, fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await fn()
    return count / (time.perf_counter() - started)


async def _drive(make: Callable[[str], Any], items: list[dict[str, Any]]) -> dict[str, float]:
    """Operations per second of each measure; exits if anything reads back wrong."""
    rates: dict[str, float] = {}
    single = make("single")
    queue = iter(items)
    rates["add 1"] = await _rate(len(items), lambda: single.add_items([next(queue)]))
    batched = make("batched")
    batches = iter([items[i : i + 10] for i in range(0, len(items), 10)])
    rates["add 10"] = 10 * await _rate(len(items) // 10, lambda: batched.add_items(next(batches)))
    rates["get cold"] = await _rate(READS, lambda: make("single").get_items())
    rates["get warm"] = await _rate(READS, single.get_items)
    rates["get 10"] = await _rate(READS, lambda: make("single").get_items(limit=10))
    for session in (single, batched):
        if await session.get_items() != items:
            raise SystemExit(f"{type(session).__name__} did not read back what was added")
    return rates


async def _run(kind: str, folder: Path, items: list[dict[str, Any]]) -> dict[str, float]:
    if kind == "SQLiteSession":
        opened: list[SQLiteSession] = []

        def make_sdk(session_id: str) -> SQLiteSession:
            opened.append(SQLiteSession(session_id, folder / "agents.db"))
            return opened[-1]

        try:
            return await _drive(make_sdk, items)
        finally:
            for session in opened:
                session.close()
    url = f"sqlite:///{folder / 'store.db'}"
    if kind == "sessionstore async":
        astore = await sessionstore.open_async_store(url, migrate=True, token_counter=None)
        try:
            return await _drive(lambda sid: SessionStoreSession(sid, astore), items)
        finally:
            await astore.close()
    store = sessionstore.open_store(url, migrate=True, token_counter=None)
    try:
        return await _drive(lambda sid: SessionStoreSession(sid, store), items)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    items = _items(args.items - args.items % 10)
    kinds = ("sessionstore async", "sessionstore sync", "SQLiteSession")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(args.repeats):
        for kind in kinds:
            with tempfile.TemporaryDirectory() as folder:
                results[kind].append(asyncio.run(_run(kind, Path(folder), items)))
    median = {kind: {m: statistics.median(r[m] for r in results[kind]) for m in MEASURES} for kind in kinds}
    print(f"{len(items)} items, median of {args.repeats} runs; operations per second (add: items per second)")
    print(f"{'contender':<20}" + "".join(f"{m:>10}" for m in MEASURES))
    for kind in kinds:
        print(f"{kind:<20}" + "".join(f"{median[kind][m]:>10.0f}" for m in MEASURES))
    for kind in kinds[:2]:
        ratios = "".join(f"{median[kind][m] / median['SQLiteSession'][m]:>10.2f}" for m in MEASURES)
        print(f"{kind + ' / SQLite':<20}{ratios}")


if __name__ == "__main__":
    main()

"""The Google ADK bridge against ADK's own ``DatabaseSessionService``, on one SQLite machine.

Usage::

    python bench/adk_session.py [--sessions S] [--events E] [--repeats R]

What is measured
----------------
What ADK's ``Runner`` does to its session service, per session: ``create_session``, then for
each of ``--events`` events (default 40) ``append_event`` (a text part and a state delta with a
session, an ``app:`` and a ``user:`` key, as an agent writing state does), then one
``get_session`` of the whole session. ``--sessions`` sessions (default 20), one after another.
Contenders, each on a fresh SQLite file in a temporary folder:

* ``sessionstore``: ``SessionStoreSessionService`` on ``open_async_store`` (aiosqlite), token
  counting on (the store's default: each event's text is counted).
* ``adk database``: ADK's ``DatabaseSessionService("sqlite+aiosqlite:///...")``.

Both stores sync every commit to disk as configured by default (sessionstore: ``durability="full"``;
ADK: SQLite's own default). Each contender runs ``--repeats`` times (default 3), interleaved;
the median run is reported: events appended per second, and the mean ms of ``get_session``.
Every run checks that each session reads back with all its events and its state.

How to read the ratios
----------------------
``sessionstore / adk database``: > 1 means the bridge appends faster (or, for ``get_session``
ms, < 1 means it reads faster). The bridge also hashes each event into the chain and writes the
``app:`` and ``user:`` changes as events of their own, which ADK's service does not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

import sessionstore
from sessionstore.bridges.adk import SessionStoreSessionService

APP = "bench"


async def _drive(service: BaseSessionService, sessions: int, events: int) -> tuple[float, float]:
    """(events appended per second, mean get_session ms); checks what reads back."""
    appended = 0
    append_seconds = 0.0
    reads: list[float] = []
    for s in range(sessions):
        session = await service.create_session(app_name=APP, user_id=f"user-{s % 5}", session_id=f"s{s}")
        started = time.perf_counter()
        for e in range(events):
            event = Event(
                invocation_id=f"inv-{e // 4}",
                author="user" if e % 2 == 0 else "assistant",
                content=types.Content(role="user", parts=[types.Part(text=f"message {e} of session {s}")]),
                actions=EventActions(state_delta={"turn": e, "app:last": s, "user:seen": e}),
            )
            await service.append_event(session, event)
            appended += 1
        append_seconds += time.perf_counter() - started
        started = time.perf_counter()
        got = await service.get_session(app_name=APP, user_id=f"user-{s % 5}", session_id=f"s{s}")
        reads.append(time.perf_counter() - started)
        if got is None or len(got.events) != events or got.state.get("turn") != events - 1:
            sys.exit(f"session s{s} did not read back whole")
    return appended / append_seconds, 1000 * statistics.mean(reads)


async def _run(kind: str, folder: Path, sessions: int, events: int) -> tuple[float, float]:
    if kind == "sessionstore":
        store = await sessionstore.open_async_store(f"sqlite:///{folder / 'store.db'}", migrate=True)
        try:
            return await _drive(SessionStoreSessionService(store), sessions, events)
        finally:
            await store.close()
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / 'adk.db'}")
    try:
        return await _drive(service, sessions, events)
    finally:
        await service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    kinds = ("sessionstore", "adk database")
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for _ in range(args.repeats):
        for kind in kinds:
            with tempfile.TemporaryDirectory() as folder:
                results[kind].append(asyncio.run(_run(kind, Path(folder), args.sessions, args.events)))
    median: dict[str, Any] = {}
    print(f"{args.sessions} sessions x {args.events} events, median of {args.repeats} runs")
    print(f"{'contender':<14} {'appends/s':>10} {'get_session ms':>15}")
    for kind in kinds:
        rate = statistics.median(r[0] for r in results[kind])
        read = statistics.median(r[1] for r in results[kind])
        median[kind] = (rate, read)
        print(f"{kind:<14} {rate:>10.0f} {read:>15.2f}")
    ours, theirs = median["sessionstore"], median["adk database"]
    print(
        f"ratio sessionstore / adk database: appends/s {ours[0] / theirs[0]:.2f}, "
        f"get_session ms {ours[1] / theirs[1]:.2f}"
    )


if __name__ == "__main__":
    main()

"""Subprocess workers for tests/test_concurrency.py.

Importable (``tests._workers``) so ``multiprocessing``'s spawn context can find
``race_worker``, and runnable (``python -m tests._workers append-forever URL SESSION_ID``)
for the crash test, which SIGKILLs the process mid-loop.

Each worker opens its own store with ``migrate=False``: the parent test migrated the
database and created the session before starting any worker.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

import sessionstore
from sessionstore import ConcurrencyError, MessageAppended

#: Outcome tuples a race worker reports for each round (picklable, no exception objects):
#:   ("won", seq, event_id) | ("conflict", expected, actual) | ("error", type name, repr)
Outcome = tuple[str, Any, Any]


def race_round(store: sessionstore.SessionStore, session_id: str, tag: str, expected_seq: int) -> Outcome:
    """Append one event expecting ``expected_seq`` and describe what happened, never raising."""
    event = MessageAppended(role="user", content=f"{tag} round {expected_seq}")
    try:
        result = store.append(session_id, [event], expected_seq=expected_seq)
    except ConcurrencyError as e:
        return ("conflict", e.expected, e.actual)
    except BaseException as e:
        return ("error", type(e).__name__, repr(e))
    if result.seqs != (expected_seq + 1,) or result.deduplicated:
        return ("error", "BadResult", repr(result))
    return ("won", result.seqs[0], str(event.event_id))


def race_worker(
    url: str,
    session_id: str,
    rounds: int,
    barrier: Any,
    results: Any,
    index: int,
    api: str = "sync",
) -> None:
    """Race the other processes for ``rounds`` rounds; put ``(index, outcomes)`` on ``results``.

    Round ``r`` expects seq ``r`` (exactly one event lands per round). Every process waits on
    ``barrier`` before each round, so all of them append at the same moment.
    """
    outcomes: list[Outcome] = []
    try:
        store = open_worker_store(url, api)
        try:
            # Check a connection out before the first round so connecting is not part of it.
            store.last_seq(session_id)
            for r in range(rounds):
                barrier.wait(timeout=60)
                outcomes.append(race_round(store, session_id, f"process {index}", r))
        finally:
            store.close()
    except BaseException as e:
        outcomes.append(("error", type(e).__name__, repr(e)))
        barrier.abort()
    results.put((index, outcomes))


def open_worker_store(url: str, api: str) -> sessionstore.SessionStore:
    """The store under test in a worker: ``open_store``, or the async store (``api="async"``)."""
    if api == "async":
        from ._async_adapter import AsyncStoreOnThread

        return AsyncStoreOnThread(url, migrate=False, token_counter=None)
    return sessionstore.open_store(url, migrate=False, token_counter=None)


def append_forever(url: str, session_id: str, seed: int, api: str = "sync") -> None:
    """Append batches of 1-3 events until killed, reporting each on stdout.

    Before each append it prints ``begin <id> [<id> ...]``; after ``append`` returned (the
    transaction committed) it prints ``ack <id> [<id> ...]``. Each line is flushed at once, so
    everything the parent read as ``ack`` was acknowledged before the process died.
    """
    rng = random.Random(seed)
    store = open_worker_store(url, api)
    expected = store.last_seq(session_id)
    out = sys.stdout
    while True:
        batch = [
            MessageAppended(role="user", content=f"crash test {expected + i + 1}")
            for i in range(rng.randint(1, 3))
        ]
        ids = " ".join(str(event.event_id) for event in batch)
        out.write(f"begin {ids}\n")
        out.flush()
        result = store.append(session_id, batch, expected_seq=expected)
        expected = result.last_seq
        out.write(f"ack {ids}\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``append-forever URL SESSION_ID [--seed N]``."""
    parser = argparse.ArgumentParser(prog="python -m tests._workers")
    commands = parser.add_subparsers(dest="command", required=True)
    forever = commands.add_parser("append-forever", help="append batches until killed")
    forever.add_argument("url")
    forever.add_argument("session_id")
    forever.add_argument("--seed", type=int, default=0)
    forever.add_argument("--api", choices=["sync", "async"], default="sync")
    args = parser.parse_args(argv)
    if args.command == "append-forever":
        append_forever(args.url, args.session_id, args.seed, args.api)
    return 0


if __name__ == "__main__":
    sys.exit(main())

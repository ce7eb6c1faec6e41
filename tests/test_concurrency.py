"""Concurrency, crash and tailing guarantees, on backends that several connections share.

Races run on ``shared_backend`` (a SQLite WAL file and PostgreSQL): threads sharing one store
(the engine's pool gives each thread its own connection) and separate processes. A round
of a race is one ``append`` per worker with the same ``expected_seq``; exactly one wins and
every other one must get a clean ``ConcurrencyError``, never a lock error.

``SESSIONSTORE_RACE_ROUNDS`` overrides the number of rounds of both races (the thread race
defaults to 200, the process race to 100).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import ANY, ConcurrencyError, MessageAppended, SessionStore

pytestmark = pytest.mark.store_contract


ROOT = Path(__file__).resolve().parent.parent
try:
    from tests import _workers
except ImportError:  # pragma: no cover - tests/ imported as rootdir-less modules
    sys.path.insert(0, str(ROOT))
    from tests import _workers

Backend = Any  # conftest.Backend: .name, .url, .open(**kwargs)
Outcome = _workers.Outcome

ROUNDS_ENV = "SESSIONSTORE_RACE_ROUNDS"


def _rounds(default: int) -> int:
    value = os.environ.get(ROUNDS_ENV)
    return int(value) if value else default


def _start(target: Callable[..., None], *args: object, name: str) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _join_all(threads: Sequence[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {timeout:.0f} s: {stuck}"


def _check_race(outcomes: dict[str, list[Outcome]], rounds: int) -> list[str]:
    """Assert one winner per round and clean conflicts; return the winners' event ids by round."""
    problems: list[str] = []
    for worker, outs in outcomes.items():
        problems += [f"{worker} round {r}: {o[1]}: {o[2]}" for r, o in enumerate(outs) if o[0] == "error"]
        if len(outs) != rounds:
            problems.append(f"{worker} reported {len(outs)} rounds, not {rounds}")
    winners: list[str] = []
    for r in range(rounds):
        this_round = {w: outs[r] for w, outs in outcomes.items() if r < len(outs)}
        won = [(w, o) for w, o in this_round.items() if o[0] == "won"]
        if len(won) != 1:
            problems.append(f"round {r}: {len(won)} winners: {this_round}")
        else:
            _, (_, seq, event_id) = won[0]
            if seq != r + 1:
                problems.append(f"round {r}: winner got seq {seq}, not {r + 1}")
            winners.append(event_id)
        problems += [
            f"round {r}: {w} lost with expected={o[1]} actual={o[2]}, not expected={r} actual={r + 1}"
            for w, o in this_round.items()
            if o[0] == "conflict" and (o[1], o[2]) != (r, r + 1)
        ]
    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:20])
    return winners


def _check_session_is(store: SessionStore, session_id: str, event_ids: Sequence[str]) -> None:
    recorded = store.read(session_id)
    assert store.last_seq(session_id) == len(event_ids)
    assert [r.seq for r in recorded] == list(range(1, len(event_ids) + 1))
    assert [r.event_id for r in recorded] == list(event_ids)
    assert store.verify(session_id).ok


# --- races -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
class TestWriterRaces:
    def test_threads_sharing_one_store_get_one_winner_and_clean_conflicts_per_round(
        self, shared_store: SessionStore
    ) -> None:
        """4 threads racing on one expected_seq: one wins, the rest get ConcurrencyError and nothing else."""
        n_threads, rounds = 4, _rounds(200)
        sid = shared_store.create_session().id
        barrier = threading.Barrier(n_threads, timeout=60)
        outcomes: dict[str, list[Outcome]] = {f"thread {i}": [] for i in range(n_threads)}

        def race(name: str) -> None:
            try:
                for r in range(rounds):
                    barrier.wait()
                    outcomes[name].append(_workers.race_round(shared_store, sid, name, r))
            except BaseException as e:  # a broken barrier: report, and release the others
                outcomes[name].append(("error", type(e).__name__, repr(e)))
                barrier.abort()

        _join_all([_start(race, name, name=name) for name in outcomes], timeout=100)

        winners = _check_race(outcomes, rounds)
        _check_session_is(shared_store, sid, winners)

    def test_processes_get_one_winner_and_clean_conflicts_per_round(
        self, shared_backend: Backend, shared_store: SessionStore
    ) -> None:
        """3 processes, each with its own store, racing on one expected_seq: same outcome as threads."""
        n_procs, rounds = 3, _rounds(100)
        sid = shared_store.create_session().id
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(n_procs)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=_workers.race_worker,
                args=(shared_backend.url, sid, rounds, barrier, results, i, shared_backend.api),
                name=f"race-{i}",
            )
            for i in range(n_procs)
        ]
        for proc in procs:
            proc.start()
        try:
            reported = dict(results.get(timeout=100) for _ in procs)
        finally:
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            results.close()
            results.join_thread()
        assert [proc.exitcode for proc in procs] == [0] * n_procs

        outcomes = {f"process {i}": reported[i] for i in sorted(reported)}
        winners = _check_race(outcomes, rounds)
        _check_session_is(shared_store, sid, winners)


# --- crash durability ------------------------------------------------------------------------


class _LineCollector:
    """Reads a pipe's complete lines in a thread; ``wait_for`` blocks until a predicate holds."""

    def __init__(self, pipe: Any) -> None:
        self.lines: list[str] = []
        self.eof = False
        self._cond = threading.Condition()
        self._pipe = pipe
        self._thread = _start(self._run, name="stdout-reader")

    def _run(self) -> None:
        for line in self._pipe:
            if not line.endswith("\n"):  # cut off by the kill: never a complete acknowledgement
                break
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.lines) or self.eof, timeout) and predicate(
                self.lines
            )

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "stdout reader did not reach EOF"


@pytest.mark.slow
@pytest.mark.timeout(120)
class TestCrashDurability:
    def test_every_acknowledged_append_survives_sigkill_and_batches_stay_whole(
        self, shared_backend: Backend, shared_store: SessionStore, tmp_path: Path
    ) -> None:
        """SIGKILL mid-loop loses no acknowledged event, keeps batches atomic and the chain valid."""
        sid = shared_store.create_session().id
        stderr_path = tmp_path / "worker.stderr"
        with stderr_path.open("w") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests._workers",
                    "append-forever",
                    shared_backend.url,
                    sid,
                    "--seed",
                    str(random.randrange(2**31)),
                    "--api",
                    shared_backend.api,
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert proc.stdout is not None
        try:
            collector = _LineCollector(proc.stdout)
            # Kill once 50 appends were acknowledged, as a batch of several events goes in flight,
            # after a random few milliseconds: the kill lands anywhere in that append (before
            # it, mid-transaction, mid-commit, or between commit and acknowledgement).
            got_enough = collector.wait_for(
                lambda lines: (
                    sum(line.startswith("ack ") for line in lines) >= 50
                    and lines[-1].startswith("begin ")
                    and len(lines[-1].split()) > 2
                ),
                timeout=60,
            )
            time.sleep(random.uniform(0, 0.01))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            collector.join(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert got_enough, f"worker acknowledged < 50 appends; stderr:\n{stderr_path.read_text()}"
        assert proc.returncode == -signal.SIGKILL

        acked: list[list[str]] = []
        in_flight: list[str] = []
        for line in collector.lines:
            kind, *ids = line.split()
            if kind == "begin":
                assert not in_flight, "a batch began before the previous one was acknowledged"
                in_flight = ids
            else:
                assert kind == "ack" and ids == in_flight, f"unexpected line {line!r}"
                acked.append(ids)
                in_flight = []
        acked_ids = [event_id for batch in acked for event_id in batch]

        reopened = shared_backend.open(migrate=False)
        try:
            stored = [r.event_id for r in reopened.read(sid)]
            # The one batch in flight at the kill may have committed (without its ack) or not,
            # but only as a whole: stored is exactly the acknowledged events, plus maybe it.
            assert stored in (acked_ids, acked_ids + in_flight), (
                f"{len(acked_ids)} acknowledged, {len(in_flight)} in flight, {len(stored)} stored; "
                f"missing acknowledged: {sorted(set(acked_ids) - set(stored))[:5]}"
            )
            assert [r.seq for r in reopened.read(sid)] == list(range(1, len(stored) + 1))
            report = reopened.verify(sid)
            assert report.ok, report
            # The store still takes appends after the crash.
            reopened.append(sid, [MessageAppended(role="user", content="after")], expected_seq=len(stored))
        finally:
            reopened.close()


# --- tailing readers -------------------------------------------------------------------------


@pytest.mark.timeout(120)
class TestTailingReader:
    """PostgreSQL takes positions at INSERT time: only writers serialized in commit order keep tails whole."""

    def test_tailing_read_all_sees_every_position_once_in_order_under_concurrent_writers(
        self, shared_backend: Backend
    ) -> None:
        """A reader polling read_all while 8 writers commit never skips or repeats a position."""
        n_writers, appends_each = 8, 40
        writer_store = shared_backend.open(token_counter=None)
        reader_store = shared_backend.open(migrate=False, token_counter=None)
        try:
            sids = [writer_store.create_session().id for _ in range(n_writers)]
            acked_positions: list[int] = []
            errors: list[str] = []
            received: list[tuple[int, str, int]] = []  # (position, session_id, seq)
            received_while_writing = 0
            writers_done = threading.Event()

            def write(sid: str, seed: int) -> None:
                rng = random.Random(seed)
                try:
                    expected = 0
                    for _ in range(appends_each):
                        batch = [
                            MessageAppended(role="assistant", content=f"{sid} {expected + k}")
                            for k in range(rng.randint(1, 3))
                        ]
                        result = writer_store.append(sid, batch, expected_seq=expected)
                        expected = result.last_seq
                        acked_positions.extend(result.positions)
                except BaseException as e:
                    errors.append(f"writer {sid}: {e!r}")

            def tail() -> None:
                nonlocal received_while_writing
                checkpoint = 0
                try:
                    while True:
                        done = writers_done.is_set()  # before the poll: a later commit is still seen
                        batch = reader_store.read_all(after_position=checkpoint, limit=100)
                        received.extend((r.position, r.session_id, r.seq) for r in batch)
                        if batch:
                            checkpoint = batch[-1].position
                            if not done:
                                received_while_writing += len(batch)
                        elif done and checkpoint >= reader_store.max_position():
                            return
                except BaseException as e:
                    errors.append(f"reader: {e!r}")

            reader = _start(tail, name="reader")
            writers = [_start(write, sid, i, name=f"writer-{i}") for i, sid in enumerate(sids)]
            _join_all(writers, timeout=90)
            writers_done.set()
            _join_all([reader], timeout=20)

            assert not errors, errors
            in_table = [r.position for r in writer_store.read_all(after_position=0, limit=10**6)]
            got = [position for position, _, _ in received]
            missed = sorted(set(in_table) - set(got))
            duplicates = len(got) - len(set(got))
            assert (len(missed), duplicates) == (0, 0), f"missed {missed[:10]}, {duplicates} duplicates"
            assert got == sorted(got), "positions arrived out of order"
            assert sorted(acked_positions) == in_table
            for sid in sids:  # per session the tail is gap-free seq order too
                seqs = [seq for _, s, seq in received if s == sid]
                assert seqs == list(range(1, len(seqs) + 1))
            # The reader really interleaved with the writers (else this proves nothing).
            assert received_while_writing > 0
        finally:
            reader_store.close()
            writer_store.close()


# --- zero-event appends ----------------------------------------------------------------------


@pytest.mark.timeout(120)
class TestZeroEventAppend:
    def test_empty_append_racing_a_writer_reports_the_current_head_and_never_conflicts_it(
        self, shared_store: SessionStore
    ) -> None:
        """append([], ANY) racing a real append returns the head before or after it and writes nothing."""
        rounds = 150
        sid = shared_store.create_session().id
        # Per round: the writer appends one event expecting seq r while two probes append
        # nothing, all released together. The head is r when the round starts and r + 1
        # when it ends, so every empty append must report r or r + 1.
        barrier = threading.Barrier(3, timeout=60)
        errors: list[str] = []
        observed: list[int] = []

        def write() -> None:
            try:
                for r in range(rounds):
                    barrier.wait()
                    result = shared_store.append(
                        sid, [MessageAppended(role="user", content=str(r))], expected_seq=r
                    )
                    if result.seqs != (r + 1,):
                        errors.append(f"writer round {r}: {result}")
            except BaseException as e:
                errors.append(f"writer: {e!r}")
                barrier.abort()

        def probe(name: str) -> None:
            try:
                for r in range(rounds):
                    barrier.wait()
                    result = shared_store.append(sid, [], expected_seq=ANY)
                    if result.last_seq not in (r, r + 1) or result.seqs or result.positions:
                        errors.append(f"{name} round {r}: empty append gave {result}")
                    observed.append(result.last_seq)
                    # Expecting the head just reported: succeeds, or conflicts only forwards.
                    try:
                        exact = shared_store.append(sid, [], expected_seq=result.last_seq)
                        if exact.last_seq != result.last_seq:
                            errors.append(f"{name} round {r}: empty append at {result.last_seq} gave {exact}")
                    except ConcurrencyError as e:
                        if (e.expected, e.actual) != (r, r + 1):
                            errors.append(f"{name} round {r}: conflict {e.expected} -> {e.actual}")
            except BaseException as e:
                errors.append(f"{name}: {e!r}")
                barrier.abort()

        threads = [
            _start(write, name="writer"),
            *(_start(probe, f"probe-{i}", name=f"probe-{i}") for i in (1, 2)),
        ]
        _join_all(threads, timeout=100)

        assert not errors, errors[:10]
        assert len(observed) == 2 * rounds
        assert shared_store.last_seq(sid) == rounds
        final = shared_store.append(sid, [], expected_seq=ANY)
        assert (final.last_seq, final.seqs, final.positions, final.deduplicated) == (rounds, (), (), False)
        # No empty append wrote anything.
        assert len(shared_store.read_all(after_position=0, limit=10**6)) == rounds
        assert [r.seq for r in shared_store.read(sid)] == list(range(1, rounds + 1))


# --- PostgreSQL locking ----------------------------------------------------------------------


def _wait_until_blocked_by(store: SessionStore, holder_pid: int, timeout: float) -> list[Any]:
    """Poll pg_stat_activity until some backend waits on a lock that ``holder_pid`` holds."""
    query = text(
        "SELECT pid, wait_event_type, wait_event, query FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND :holder = ANY(pg_blocking_pids(pid))"
    )
    deadline = time.monotonic() + timeout
    with store.engine.connect() as observer:  # type: ignore[attr-defined]
        observer.execution_options(isolation_level="AUTOCOMMIT")
        while time.monotonic() < deadline:
            # A backend can show as waiting before its query text is published (an empty
            # ``query`` was seen under load): wait for the text too.
            rows = [row for row in observer.execute(query, {"holder": holder_pid}) if row.query]
            if rows:
                return rows
            time.sleep(0.02)
    return []


@pytest.mark.postgres
@pytest.mark.timeout(60)
class TestPostgresEventsLock:
    def test_append_waits_for_a_held_events_lock_and_succeeds_after_release(
        self, pg_backend: Backend
    ) -> None:
        """An append queues behind another transaction's events lock, then commits once it is released."""
        store = pg_backend.open()
        try:
            sid = store.create_session().id
            holder = store.engine.connect()
            tx = holder.begin()
            holder.exec_driver_sql("LOCK TABLE events IN EXCLUSIVE MODE")
            holder_pid = holder.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            outcome: list[Any] = []

            def append() -> None:
                try:
                    outcome.append(store.append(sid, [MessageAppended(role="user", content="x")], 0))
                except BaseException as e:
                    outcome.append(e)

            try:
                thread = _start(append, name="waiting-append")
                waiting = _wait_until_blocked_by(store, holder_pid, timeout=5)
                assert waiting, "the append never waited on the events lock"
                assert "LOCK TABLE events" in waiting[0].query
                assert thread.is_alive() and not outcome
            finally:
                tx.rollback()  # inserted nothing
                holder.close()
            thread.join(10)

            assert not thread.is_alive()
            (result,) = outcome
            assert isinstance(result, sessionstore.store.AppendResult), result
            assert result.seqs == (1,)
            assert store.last_seq(sid) == 1
        finally:
            store.close()

    def test_readers_do_not_wait_for_a_held_events_lock(self, pg_backend: Backend) -> None:
        """read_all, read, last_seq and max_position return promptly while a writer holds the lock."""
        store = pg_backend.open()
        try:
            sid = store.create_session().id
            store.append(sid, [MessageAppended(role="user", content=str(i)) for i in range(3)], 0)
            holder = store.engine.connect()
            tx = holder.begin()
            holder.exec_driver_sql("LOCK TABLE events IN EXCLUSIVE MODE")
            reads: dict[str, Any] = {}

            def read() -> None:
                try:
                    reads["read_all"] = [r.seq for r in store.read_all(after_position=0)]
                    reads["read"] = [r.seq for r in store.read(sid)]
                    reads["last_seq"] = store.last_seq(sid)
                    reads["max_position"] = store.max_position()
                except BaseException as e:
                    reads["error"] = e

            try:
                thread = _start(read, name="reader")
                # A generous bound only so a regression fails instead of hanging: what is asserted is
                # that the reads finished while the lock was still held, not how fast they were.
                thread.join(60)
                finished_while_locked = not thread.is_alive()
            finally:
                tx.rollback()
                holder.close()
            thread.join(10)

            assert finished_while_locked, "a reader waited for the writer's lock"
            assert "error" not in reads, reads
            assert reads["read_all"] == reads["read"] == [1, 2, 3]
            assert reads["last_seq"] == 3 and reads["max_position"] > 0
        finally:
            store.close()

"""Transient faults are retried inside the store: nothing surfaces, nothing is lost or doubled.

These tests kill and restart PostgreSQL, so they run on a private cluster of their own
(``tests/_private_pg.py``), never on the shared test server.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import quote

import psycopg
import pytest

import sessionstore
from sessionstore import (
    ConcurrencyError,
    MessageAppended,
    RetryPolicy,
    SessionStore,
    StoreUnavailableError,
    ValidationError,
)
from sessionstore.errors import OperationalError

from ._private_pg import PrivateCluster, private_pg
from .conftest import Backend

pytestmark = pytest.mark.store_contract


__all__ = ["private_pg"]  # the fixture, imported to be found by pytest

#: How long each fault storm lasts: long enough for hundreds of kills, short for the suite.
STORM_SECONDS = 3.0
#: Every client connection is killed this often: a retry has a moment to get through.
KILL_EVERY_SECONDS = 0.05
#: Short pauses, so writers make progress between kills; the budget outlasts the storm.
STORM_RETRY = RetryPolicy(attempts=100, base_delay=0.01, max_delay=0.1, budget_seconds=30)
WRITERS = 4


@pytest.fixture
def fault_url(private_pg: PrivateCluster) -> Iterator[str]:
    """A fresh schema on the private cluster, migrated."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(private_pg.admin_dsn.replace("dbname=postgres", "dbname=sessionstore_test")) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{private_pg.url}?options={quote(f'-csearch_path={schema}')}"
    sessionstore.open_store(url, migrate=True, token_counter=None).close()
    yield url


def _open(api: str, url: str, **kwargs: object) -> SessionStore:
    """The store under test on ``url``: ``open_store``, or the async store (``api="async"``)."""
    return Backend("postgres", url, api).open(migrate=False, **kwargs)


@dataclass
class Writer:
    """Appends one event at a time to its own session, tracking what was acknowledged."""

    store: SessionStore
    session_id: str
    acknowledged: list[str] = field(default_factory=list)
    #: Forks created along the way: (session id, the id of its one event).
    forks: list[tuple[str, str]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        last = 0
        while not stop.is_set():
            event = MessageAppended(role="user", content=f"m{len(self.acknowledged)}")
            try:
                result = self.store.append(self.session_id, [event], expected_seq=last)
                # Read back too: reads are retried as well.
                self.store.last_seq(self.session_id)
                if result.last_seq % 10 == 0:
                    self._fork(result.last_seq)
            except Exception as e:  # any error that reaches the caller is the failure
                self.errors.append(e)
                return
            self.acknowledged.append(str(event.event_id))
            last = result.last_seq

    def _fork(self, at: int) -> None:
        """create_session is retried too (it finds its own session after a lost reply)."""
        first = MessageAppended(role="user", content=f"fork at {at}")
        fork_id = f"{self.session_id}.f{at}"
        self.store.create_session(fork_id, parent_session_id=self.session_id, fork_seq=at, events=[first])
        self.forks.append((fork_id, str(first.event_id)))


def _run_under_fault(store: SessionStore, fault: Callable[[threading.Event], None]) -> list[Writer]:
    """Writers append while ``fault`` runs; returns them once it is done and they stopped."""
    writers = [Writer(store, store.create_session().id) for _ in range(WRITERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in writers]
    for thread in threads:
        thread.start()
    try:
        fault(stop)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    return writers


def _assert_all_kept_once(store: SessionStore, writers: list[Writer]) -> None:
    for writer in writers:
        assert writer.errors == []
        stored = store.read(writer.session_id, verify=True)
        # Exactly the acknowledged events, each once, in order: nothing lost, nothing doubled.
        assert [r.event_id for r in stored] == writer.acknowledged
        assert [r.seq for r in stored] == list(range(1, len(stored) + 1))
        for fork_id, event_id in writer.forks:
            assert [r.event_id for r in store.read(fork_id, verify=True)] == [event_id]


def test_a_pg_terminate_backend_storm_surfaces_no_error_and_loses_nothing(
    private_pg: PrivateCluster, fault_url: str, store_api: str
) -> None:
    """Every client connection is killed every 50 ms while writers append, create and read."""
    kills = 0

    def storm(stop: threading.Event) -> None:
        nonlocal kills
        deadline = time.monotonic() + STORM_SECONDS
        with psycopg.connect(private_pg.admin_dsn, autocommit=True) as killer:
            while time.monotonic() < deadline:
                kills += private_pg.terminate_clients(killer)
                time.sleep(KILL_EVERY_SECONDS)

    with _open(store_api, fault_url, token_counter=None, retry=STORM_RETRY) as store:
        writers = _run_under_fault(store, storm)
        _assert_all_kept_once(store, writers)

    assert kills > 20
    assert sum(len(w.acknowledged) for w in writers) > 0


def test_a_server_restart_surfaces_no_error_and_loses_nothing(
    private_pg: PrivateCluster, fault_url: str, store_api: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``pg_ctl restart`` while writers append: they wait it out and go on; each retry is logged."""
    caplog.set_level(logging.WARNING, logger="sessionstore")

    def restart(stop: threading.Event) -> None:
        time.sleep(0.5)
        private_pg.restart()
        time.sleep(0.5)

    with _open(store_api, fault_url, token_counter=None) as store:
        writers = _run_under_fault(store, restart)
        before = [len(w.acknowledged) for w in writers]
        _assert_all_kept_once(store, writers)
        # Still usable after the restart.
        store.append(
            writers[0].session_id, [MessageAppended(role="user", content="after")], expected_seq="any"
        )

    assert all(count > 0 for count in before)
    retries = [r for r in caplog.records if getattr(r, "sessionstore_event", None) == "retry"]
    assert retries, "the restart was ridden out without a logged retry"
    writer_sessions = {w.session_id for w in writers}
    for record in retries:
        assert record.name == "sessionstore.store"
        assert record.gave_up is False  # type: ignore[attr-defined]
        assert record.attempt >= 1  # type: ignore[attr-defined]
    assert {r.session_id for r in retries if r.operation in ("append", "last_seq")} <= writer_sessions  # type: ignore[attr-defined]


def test_an_outage_longer_than_the_budget_raises_store_unavailable_then_recovers(
    private_pg: PrivateCluster, fault_url: str, store_api: str
) -> None:
    """A server that stays down ends in StoreUnavailableError; the store works once it is back."""
    policy = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.2, budget_seconds=5)
    with _open(store_api, fault_url, token_counter=None, retry=policy) as store:
        sid = store.create_session().id
        private_pg.stop()
        try:
            with pytest.raises(StoreUnavailableError) as raised:
                store.append(sid, [MessageAppended(role="user", content="lost?")], expected_seq=0)
            with pytest.raises(StoreUnavailableError):
                store.read(sid)
        finally:
            private_pg.start()
        assert raised.value.attempts == 4
        assert isinstance(raised.value, sessionstore.errors.OperationalError)
        assert store.read(sid) == []  # the failed append wrote nothing
        assert store.append(sid, [MessageAppended(role="user", content="back")], expected_seq=0).seqs == (1,)


def test_a_concurrency_error_is_never_retried(fault_url: str, store_api: str) -> None:
    """Only transient failures are retried: a conflict reaches the caller on the first try."""
    with _open(store_api, fault_url, token_counter=None) as store:
        sid = store.create_session().id
        store.append(sid, [MessageAppended(role="user", content="a")], expected_seq=0)
        with pytest.raises(ConcurrencyError):
            store.append(sid, [MessageAppended(role="user", content="b")], expected_seq=0)


@pytest.mark.parametrize(
    "arguments",
    [
        {"attempts": 0},
        {"attempts": True},
        {"base_delay": -1},
        {"max_delay": float("nan")},
        {"budget_seconds": "5"},
    ],
)
def test_a_bad_retry_policy_is_refused(arguments: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(**arguments)  # type: ignore[arg-type]


def test_pauses_grow_exponentially_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    pauses = [policy.pause(n) for n in range(1, 8)]
    assert 0.05 <= pauses[0] <= 0.1
    assert 0.2 <= pauses[2] <= 0.4
    assert all(0.5 <= p <= 1.0 for p in pauses[4:])


def test_the_time_budget_ends_retrying_before_the_attempts_do() -> None:
    """``budget_seconds`` bounds the wait whatever ``attempts`` says: 0 means no retry at all."""
    calls: list[int] = []

    def lost_connection() -> None:
        calls.append(1)
        raise OperationalError("server closed the connection unexpectedly", transient=True)

    policy = RetryPolicy(attempts=50, base_delay=0.01, max_delay=0.01, budget_seconds=0)
    with pytest.raises(StoreUnavailableError) as raised:
        policy.run(lost_connection, what="read")

    assert len(calls) == 1
    assert raised.value.operation == "read"
    assert "server closed the connection" in str(raised.value)


@pytest.mark.parametrize("seed", range(20))
def test_the_default_policy_retries_for_its_whole_30_second_budget(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default policy keeps retrying a database that stays down until 30 s (docs/storage.md,
    "Bounds") are spent, whatever the jitter draws: the budget ends retrying, not the attempts.
    A fake clock advanced only by the fake sleep counts the budget; nothing really waits."""
    now = [0.0]
    tries: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def server_down() -> None:
        tries.append(now[0])
        raise OperationalError("connection refused", transient=True)

    monkeypatch.setattr(random, "uniform", random.Random(seed).uniform)  # the jitter, replayable
    default = RetryPolicy()  # the policy open_store uses unless told otherwise
    with pytest.raises(StoreUnavailableError) as raised:
        default.run(server_down, what="append", sleep=sleep, clock=lambda: now[0])

    assert default.budget_seconds == 30
    assert default.budget_seconds - default.max_delay <= tries[-1] <= default.budget_seconds
    assert raised.value.attempts == len(tries) < default.attempts
    assert raised.value.elapsed == tries[-1]


def test_an_error_that_is_not_transient_is_raised_at_once() -> None:
    calls: list[int] = []

    def disk_full() -> None:
        calls.append(1)
        raise OperationalError("database or disk is full")

    with pytest.raises(OperationalError) as raised:
        RetryPolicy().run(disk_full, what="append")

    assert len(calls) == 1
    assert not isinstance(raised.value, StoreUnavailableError)

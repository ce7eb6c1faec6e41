"""A resilience suite for any Claude Agent SDK ``SessionStore`` adapter.

The SDK's ``run_session_store_conformance`` proves an adapter correct in one process. This suite
asks what the SDK's mirror needs of it in production: several processes writing to it at once, a
process killed in the middle of ``append``, a malformed entry, an entry claiming another session's
uuid, and the SDK's retry of a batch. Run it against your own adapter::

    from sessionstore.bridges.claude_agent_sdk.testing import run_session_store_resilience

    async def test_my_store_is_resilient() -> None:
        report = await run_session_store_resilience("my_package.stores:make_store")
        print(report)

The factory is named by an import string because the suite calls it in processes of its own
(``multiprocessing``'s spawn start method): each call, in any process, must return an adapter
over the same durable backend. The suite needs POSIX (``SIGKILL``) and imports nothing of pytest;
a failed check raises ``AssertionError`` saying what the adapter lost, duplicated or let through.
docs/bridges/claude-agent-sdk.md "The resilience suite".
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import math
import multiprocessing
import os
import queue
import re
import signal
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.synchronize import Barrier, Event
from typing import Any

__all__ = ["CHECKS", "CheckReport", "ResilienceReport", "run_session_store_resilience"]

#: The checks, in the order they run (the quick, single-process ones first).
CHECKS = ("malformed", "foreign-uuid", "retry", "writers", "kill")

#: The adapter under test: a ``claude_agent_sdk.types.SessionStore``, duck-typed (the suite
#: imports nothing of the SDK, so it runs against adapters of any version of it).
Adapter = Any
Entry = dict[str, Any]
Key = dict[str, str]

#: Entries of the writers check appended per call (many small calls: many interleavings).
_WRITER_BATCH = 10
#: Every this many entries of a writer, one without a uuid (a title, a tag: the SDK appends
#: those as they come, so only their content and order identify them).
_NO_UUID_EVERY = 4
#: Characters of text in each entry of the batch the kill check appends (a longer commit).
_TEXT_CHARS = 400
#: Entries a kill child stores before the batch it is killed in: they must survive the kill.
_BEFORE_KILL = 2
_NAMESPACE = uuid.UUID("3c1f3e9a-52d4-4b8e-9a55-0f6c2b7d1e42")


@dataclass(frozen=True)
class CheckReport:
    """What one check did.

    Attributes:
        name: one of ``CHECKS``.
        seconds: its wall-clock time, child processes included.
        appended: entries it handed to ``append`` (in every process, retries included).
        detail: what it saw, in a few words (where the kills landed, say).
    """

    name: str
    seconds: float
    appended: int
    detail: str


@dataclass(frozen=True)
class ResilienceReport:
    """Every check that ran and passed, for a test to print."""

    factory: str
    checks: tuple[CheckReport, ...]
    seconds: float

    def __str__(self) -> str:
        lines = [f"resilience of {self.factory}: {len(self.checks)} checks passed in {self.seconds:.1f} s"]
        lines += [
            f"  {c.name:<13} {c.seconds:6.2f} s {c.appended:7,} entries appended  {c.detail}"
            for c in self.checks
        ]
        return "\n".join(lines)


async def run_session_store_resilience(
    factory: str,
    *,
    entries: int = 500,
    writers: int = 2,
    kill_attempts: int = 3,
    checks: Collection[str] = CHECKS,
    timeout: float = 120.0,
) -> ResilienceReport:
    """Check that a ``SessionStore`` adapter survives what the SDK's mirror does to it.

    Every check writes to sessions of its own, under a project key new to each run (so a
    backend that already holds data can be used, and the suite run again on it):

    * ``malformed``: a batch holding one entry that cannot be JSON (a NaN, a set, a value that is
      not a dict) is refused whole with an exception whose message names the entry (its index in
      the batch or its uuid); nothing of the batch is stored, not even the entries before it, and
      its good entries can be appended afterwards.
    * ``foreign-uuid``: an entry claiming the uuid of another session's entry (in the same
      project, in another project, in a sub-agent's transcript) is stored in its own session;
      the other session is unchanged.
    * ``retry``: a batch appended again (the SDK retries a failed ``append`` with the same batch),
      right away or after other batches, or a part of it, writes nothing new.
    * ``writers``: ``writers`` processes append ``entries`` entries each, ``10`` at a time, to one
      session at once (a quarter of them without a uuid), and as many to a session of their own:
      every entry is stored exactly once and each process's entries keep their order. The
      processes start each batch together (a barrier), so every batch races the others.
    * ``kill``: a child process appends a batch of ``entries`` entries and is killed with SIGKILL
      while inside ``append`` (right after it says it entered the call, then at increasing
      delays up to the time such an append takes here, one process per attempt): ``load`` then
      holds all of the batch or none of it, whether the kill came before, during or after the
      commit, with what was stored before intact; appending the batch again completes it, each
      entry once. At least one kill must land before ``append`` returned.

    Args:
        factory: ``"module:callable"``, importable in a new process. Each call (sync, or a
            coroutine function) returns an adapter connected to the SAME durable backend,
            whichever process calls it. An adapter with an ``aclose()`` or ``close()`` method
            is closed through it when the suite is done with it.
        entries: the size of the batch the kill check appends, and of each writer's share.
        writers: processes writing at once in the writers check.
        kill_attempts: child processes killed in the kill check.
        checks: the names of the checks to run (``CHECKS``, the default, is all of them).
        timeout: seconds a child process may take for its part before the suite gives up.

    Returns:
        What ran, how many entries it appended and how long it took.

    Raises:
        AssertionError: a check failed: the message says which and what the adapter did.
        ValueError: an unknown check name, or a factory string that is not ``module:callable``.
    """
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    if entries < _WRITER_BATCH or writers < 2 or kill_attempts < 1:
        raise ValueError("entries must be >= 10, writers >= 2 and kill_attempts >= 1")
    _resolve(factory)  # fail here, not in a child process, on a factory that cannot be imported
    started = time.perf_counter()
    adapter = await open_adapter(factory)
    run = _Run(factory, adapter, f"-resilience-{uuid.uuid4().hex[:12]}", entries, writers, timeout)
    done: list[CheckReport] = []
    try:
        for name in CHECKS:
            if name in checks:
                done.append(await _timed(name, run, kill_attempts))
    finally:
        await close_adapter(adapter)
    return ResilienceReport(factory, tuple(done), time.perf_counter() - started)


# --- the factory -------------------------------------------------------------------------------


def _resolve(factory: str) -> Callable[[], Any]:
    module, _, name = factory.partition(":")
    if not module or not name:
        raise ValueError(f"factory must be 'module:callable', not {factory!r}")
    found = getattr(importlib.import_module(module), name)
    if not callable(found):
        raise ValueError(f"{factory} is not callable")
    return found  # type: ignore[no-any-return]


async def open_adapter(factory: str) -> Adapter:
    """A new adapter from ``factory`` (``module:callable``), awaited if the factory is async."""
    made = _resolve(factory)()
    return await made if inspect.isawaitable(made) else made


async def close_adapter(adapter: Adapter) -> None:
    """Close an adapter through its ``aclose()`` or ``close()``, if it has one."""
    for name in ("aclose", "close"):
        method = getattr(adapter, name, None)
        if callable(method):
            result = method()
            if inspect.isawaitable(result):
                await result
            return


# --- entries and keys --------------------------------------------------------------------------


@dataclass
class _Run:
    factory: str
    adapter: Adapter
    project: str
    entries: int
    writers: int
    timeout: float
    appended: int = 0

    def key(self, project: str | None = None, session: str | None = None, **more: str) -> Key:
        """A session key new to the run (or ``session`` again, in another project say)."""
        found = {"project_key": project or self.project, "session_id": session or str(uuid.uuid4())}
        return {**found, **more}

    async def append(self, key: Key, batch: list[Any]) -> None:
        self.appended += len(batch)
        await self.adapter.append(key, batch)

    async def load(self, key: Key) -> list[Any]:
        return list(await self.adapter.load(key) or [])


def _entry(key: Key, label: str, *, with_uuid: bool = True, text: int = 40) -> Entry:
    """A transcript entry for ``key`` that ``label`` identifies: a user message with a uuid, or
    a title line without one (the kinds of entry the SDK mirrors). The same arguments make the
    same entry in any process (its uuid derives from them), so the suite knows what a child
    appended."""
    filler = ("lorem ipsum dolor sit amet " * (1 + text // 27))[:text]
    if not with_uuid:
        return {"type": "custom-title", "customTitle": f"{label} {filler}", "sessionId": key["session_id"]}
    return {
        "type": "user",
        "uuid": str(uuid.uuid5(_NAMESPACE, "/".join([*key.values(), label]))),
        "parentUuid": None,
        "sessionId": key["session_id"],
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": f"{label}: {filler}"},
        "probe": label,
    }


def _label(entry: Any) -> str | None:
    """The label ``_entry`` gave an entry, or None for an entry not made by this suite."""
    if not isinstance(entry, dict):
        return None
    title = entry.get("customTitle")
    if entry.get("type") == "custom-title" and isinstance(title, str):
        return title.split(" ", 1)[0]
    probe = entry.get("probe")
    return probe if isinstance(probe, str) else None


def _writer_entries(key: Key, writer: int, count: int) -> list[Entry]:
    return [
        _entry(key, f"w{writer}-{n}", with_uuid=n % _NO_UUID_EVERY != _NO_UUID_EVERY - 1)
        for n in range(count)
    ]


def _reply(key: Key, label: str, question: Entry) -> Entry:
    """An assistant's answer to ``question`` (a whole response: the mirror imports it at once)."""
    answer = _entry(key, label, text=_TEXT_CHARS)
    message = {
        "id": "msg_" + answer["uuid"].replace("-", ""),
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": answer["message"]["content"]}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 96},
    }
    return {**answer, "type": "assistant", "parentUuid": question["uuid"], "message": message}


def _kill_batch(key: Key, count: int) -> list[Entry]:
    """``count`` entries of turns: a user's question, the assistant's answer."""
    batch: list[Entry] = []
    for n in range(count):
        batch.append(
            _entry(key, f"k{n}", text=_TEXT_CHARS) if n % 2 == 0 else _reply(key, f"k{n}", batch[-1])
        )
    return batch


def _uuid_counts(loaded: Sequence[Any]) -> Counter[str]:
    return Counter(e["uuid"] for e in loaded if isinstance(e, dict) and isinstance(e.get("uuid"), str))


def _expect_equal(what: str, got: list[Any], want: list[Any]) -> None:
    """Fail with what differs: how many entries, the first that differs."""
    if got == want:
        return
    first = next(
        (i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want))
    )
    raise AssertionError(
        f"{what}: load gave {len(got)} entries where {len(want)} were expected; they differ from "
        f"entry {first} on (got {_label(got[first]) if first < len(got) else 'nothing'!r}, "
        f"expected {_label(want[first]) if first < len(want) else 'nothing'!r})"
    )


async def _timed(name: str, run: _Run, kill_attempts: int) -> CheckReport:
    started = time.perf_counter()
    before = run.appended
    if name == "malformed":
        detail = await _check_malformed(run)
    elif name == "foreign-uuid":
        detail = await _check_foreign_uuid(run)
    elif name == "retry":
        detail = await _check_retry(run)
    elif name == "writers":
        detail = await _check_writers(run)
    else:
        detail = await _check_kill(run, kill_attempts)
    return CheckReport(name, time.perf_counter() - started, run.appended - before, detail)


# --- single-process checks ---------------------------------------------------------------------


def _malformed(key: Key) -> list[tuple[str, Any]]:
    """(what it is, the entry) for each kind of entry that cannot be stored as JSON."""
    nan = {**_entry(key, "nan"), "score": math.nan}
    a_set = {**_entry(key, "set"), "tags": {"a", "b"}}
    return [("a NaN", nan), ("a set", a_set), ("not a dict", "user: not a dict")]


def _names_entry(message: str, index: int, entry: Any) -> bool:
    """Whether an error message names the entry: its index in the batch (a number standing
    alone, or ``[index]``), or its uuid."""
    own = entry.get("uuid") if isinstance(entry, dict) else None
    return bool(re.search(rf"(?<![\w.]){index}(?![\w.])", message)) or (own is not None and own in message)


async def _check_malformed(run: _Run) -> str:
    key = run.key()
    first = [_entry(key, "first")]
    await run.append(key, first)
    good = [_entry(key, f"good{n}") for n in range(3)]
    for what, bad in _malformed(key):
        batch = [good[0], good[1], bad, good[2]]
        try:
            await run.append(key, batch)
        except Exception as e:  # any exception: the adapter's own type is its business
            if not _names_entry(str(e), 2, bad):
                raise AssertionError(
                    f"a batch holding {what} at index 2 was refused with {type(e).__name__}: {e!s:.300} "
                    "- the message names neither the entry's index nor its uuid"
                ) from e
        else:
            raise AssertionError(f"a batch holding {what} (index 2 of 4) was accepted: it must be refused")
        _expect_equal(f"after a batch holding {what} was refused", await run.load(key), first)
    await run.append(key, good)  # nothing of the refused batches may stand in their way
    _expect_equal("the refused batches' good entries appended afterwards", await run.load(key), first + good)
    return f"{len(_malformed(key))} bad batches refused whole"


async def _check_foreign_uuid(run: _Run) -> str:
    own = run.key()
    mine = [_entry(own, "own0"), _entry(own, "own1")]
    await run.append(own, mine)
    claimants = [
        ("a session of the same project", run.key()),
        (
            "the same session id in another project",
            run.key(project=run.project + "-other", session=own["session_id"]),
        ),
        (
            "a sub-agent of the session",
            run.key(session=own["session_id"], subpath="subagents/agent-resilience"),
        ),
    ]
    for n, (where, key) in enumerate(claimants):
        theirs = [{**_entry(key, f"claim{n}"), "uuid": mine[n % 2]["uuid"]}, _entry(key, f"after{n}")]
        await run.append(key, theirs)
        _expect_equal(f"an entry of {where} claiming another session's uuid", await run.load(key), theirs)
        _expect_equal(f"the session whose uuid {where} claimed", await run.load(own), mine)
    return f"{len(claimants)} sessions claimed another's uuid"


async def _check_retry(run: _Run) -> str:
    key = run.key()
    batch = [_entry(key, f"x{n}") for n in range(5)]
    later = [_entry(key, f"y{n}") for n in range(2)]
    await run.append(key, batch)
    await run.append(key, batch)
    _expect_equal("a batch appended twice in a row", await run.load(key), batch)
    await run.append(key, later)
    await run.append(key, batch)
    await run.append(key, batch[2:])
    _expect_equal(
        "a batch retried after a later batch, then a part of it", await run.load(key), batch + later
    )
    return "3 retries wrote nothing"


# --- child processes ---------------------------------------------------------------------------


def _context() -> SpawnContext:
    # Spawn, not fork: each child imports the factory and opens its own connections, as a
    # separate process of the SDK would (a forked child would share the parent's sockets).
    return multiprocessing.get_context("spawn")


def _report_failure(errors: multiprocessing.Queue[str], label: str) -> None:
    errors.put(f"{label}:\n{traceback.format_exc()}")


def _writer_child(
    factory: str,
    shared: Key,
    own: Key,
    writer: int,
    count: int,
    rounds: Barrier,
    timeout: float,
    errors: multiprocessing.Queue[str],
) -> None:
    """A writer process: its entries to the shared session and to its own, in small batches."""
    try:
        asyncio.run(_write(factory, shared, own, writer, count, rounds, timeout))
    except BaseException:
        _report_failure(errors, f"writer {writer}")
        raise


async def _write(
    factory: str, shared: Key, own: Key, writer: int, count: int, rounds: Barrier, timeout: float
) -> None:
    adapter = await open_adapter(factory)
    try:
        to_shared = _writer_entries(shared, writer, count)
        to_own = _writer_entries(own, writer, count)
        for first in range(0, count, _WRITER_BATCH):
            # Every writer's next batch starts together: each round is a race for the session,
            # whatever the machine's scheduling (left free, one writer may finish before another
            # starts: a SQLite writer waiting for its lock can be starved).
            rounds.wait(timeout)
            await adapter.append(shared, to_shared[first : first + _WRITER_BATCH])
            await adapter.append(own, to_own[first : first + _WRITER_BATCH])
    finally:
        await close_adapter(adapter)


@dataclass
class _KillSignals:
    """What a kill child and the suite tell each other."""

    ready: Event  # it stored the entries before the batch, and waits for ``go``
    go: Event
    inside: Event  # it is about to call ``append`` with the batch
    returned: Event  # its ``append`` returned

    @classmethod
    def make(cls, ctx: SpawnContext) -> _KillSignals:
        return cls(ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event())


def _kill_child(
    factory: str,
    key: Key,
    count: int,
    signals: _KillSignals,
    timeout: float,
    errors: multiprocessing.Queue[str],
) -> None:
    try:
        asyncio.run(_append_until_killed(factory, key, count, signals, timeout))
    except BaseException:
        _report_failure(errors, f"the child appending to {key['session_id']}")
        raise


async def _append_until_killed(
    factory: str, key: Key, count: int, signals: _KillSignals, timeout: float
) -> None:
    adapter = await open_adapter(factory)
    await adapter.append(key, [_entry(key, f"before{n}") for n in range(_BEFORE_KILL)])
    batch = _kill_batch(key, count)
    signals.ready.set()
    if not signals.go.wait(timeout):
        return
    signals.inside.set()
    await adapter.append(key, batch)
    signals.returned.set()


def _spawn(ctx: SpawnContext, target: Callable[..., None], *args: Any) -> SpawnProcess:
    process = ctx.Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _errors_of(errors: multiprocessing.Queue[str]) -> str:
    found: list[str] = []
    while True:
        try:
            found.append(errors.get(timeout=0.5) if not found else errors.get_nowait())
        except queue.Empty:
            return "\n".join(found) or "(it reported no exception)"


async def _wait_for(
    event: Event, process: SpawnProcess, what: str, run: _Run, errors: multiprocessing.Queue[str]
) -> None:
    """Wait until ``event`` is set, failing if ``process`` dies or times out first."""
    deadline = time.monotonic() + run.timeout
    while not await asyncio.to_thread(event.wait, 0.2):
        if not process.is_alive():
            raise AssertionError(
                f"a child process failed before {what} (exit code {process.exitcode}):\n{_errors_of(errors)}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"a child process did not get to {what} within {run.timeout:.0f} s")


def _stop(processes: Sequence[SpawnProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join()


# --- the writers check -------------------------------------------------------------------------


async def _join_writers(
    processes: Sequence[SpawnProcess], rounds: Barrier, run: _Run, errors: multiprocessing.Queue[str]
) -> None:
    """Wait for every writer to finish; the first that fails breaks the barrier (so the others
    stop at once rather than wait for it) and fails the check."""
    deadline = time.monotonic() + run.timeout
    while any(process.is_alive() for process in processes):
        failed = [p for p in processes if p.exitcode not in (None, 0)]
        if failed:
            rounds.abort()
            raise AssertionError(f"a writer failed (exit code {failed[0].exitcode}):\n{_errors_of(errors)}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the writers did not finish their {run.entries} entries in {run.timeout:.0f} s"
            )
        await asyncio.to_thread(processes[0].join, 0.2)
    failed = [p for p in processes if p.exitcode != 0]
    if failed:
        raise AssertionError(f"a writer failed (exit code {failed[0].exitcode}):\n{_errors_of(errors)}")


async def _check_writers(run: _Run) -> str:
    ctx = _context()
    shared = run.key()
    owns = [run.key() for _ in range(run.writers)]
    rounds, errors = ctx.Barrier(run.writers), ctx.Queue()
    processes = [
        _spawn(ctx, _writer_child, run.factory, shared, own, w, run.entries, rounds, run.timeout, errors)
        for w, own in enumerate(owns)
    ]
    try:
        await _join_writers(processes, rounds, run, errors)
    finally:
        _stop(processes)
    run.appended += 2 * run.writers * run.entries
    loaded = await run.load(shared)
    _expect_writers_interleaved(loaded, run.writers, run.entries)
    for w, own in enumerate(owns):
        _expect_equal(f"writer {w}'s own session", await run.load(own), _writer_entries(own, w, run.entries))
    # Runs of one writer's entries: 2 would mean the writers never overlapped.
    runs = 1 + sum(_writer_of(a) != _writer_of(b) for a, b in itertools.pairwise(loaded))
    return f"{run.writers} processes, {len(loaded):,} entries in {runs} runs, each once and in order"


def _writer_of(entry: Any) -> str:
    return (_label(entry) or "").partition("-")[0]


def _expect_writers_interleaved(loaded: list[Any], writers: int, count: int) -> None:
    """Every writer's entries once each, in its order, and nothing else."""
    by_writer: dict[str, list[int]] = {f"w{w}": [] for w in range(writers)}
    strangers = 0
    for entry in loaded:
        writer, _, n = (_label(entry) or "").partition("-")
        if writer in by_writer and n.isdigit():
            by_writer[writer].append(int(n))
        else:
            strangers += 1
    if strangers:
        raise AssertionError(f"the shared session holds {strangers} entries no writer appended")
    for writer, numbers in by_writer.items():
        if numbers == list(range(count)):
            continue
        seen = Counter(numbers)
        lost = [n for n in range(count) if n not in seen]
        twice = sorted(n for n, times in seen.items() if times > 1)
        raise AssertionError(
            f"two processes appending to one session at once: of writer {writer}'s {count} entries "
            f"{len(lost)} were lost (first {lost[:5]}), {len(twice)} stored more than once "
            f"(first {twice[:5]}); order kept: {numbers == sorted(numbers)}"
        )


# --- the kill check ----------------------------------------------------------------------------


@dataclass
class _KillChild:
    key: Key
    signals: _KillSignals
    process: SpawnProcess


async def _check_kill(run: _Run, attempts: int) -> str:
    ctx = _context()
    errors: multiprocessing.Queue[str] = ctx.Queue()
    children = []
    for _ in range(attempts):
        key, signals = run.key(), _KillSignals.make(ctx)
        process = _spawn(ctx, _kill_child, run.factory, key, run.entries, signals, run.timeout, errors)
        children.append(_KillChild(key, signals, process))
    try:
        for child in children:  # they start up together; then each is killed alone
            await _wait_for(child.signals.ready, child.process, "its first append", run, errors)
        run.appended += attempts * _BEFORE_KILL
        took = await _append_time(run)
        landings = []
        for n, child in enumerate(children):
            # Increasing delays: 0 (right after it entered append), up to the time it takes here.
            landings.append(await _kill_during_append(run, child, took * n / max(attempts - 1, 1), errors))
    finally:
        _stop([child.process for child in children])
    landed = Counter(landings)
    if not any(where.startswith("inside") for where in landings):
        raise AssertionError(
            f"none of {attempts} kills landed before append returned (an append of {run.entries} "
            f"entries takes {took:.3f} s here): the check proved nothing"
        )
    return f"{attempts} kills, append {took:.2f} s: " + ", ".join(
        f"{k} {v}" for k, v in sorted(landed.items())
    )


async def _append_time(run: _Run) -> float:
    """How long an append of the kill check's batch takes in this process (the kills' scale)."""
    key = run.key()
    await run.append(key, [_entry(key, f"before{n}") for n in range(_BEFORE_KILL)])
    started = time.perf_counter()
    await run.append(key, _kill_batch(key, run.entries))
    return time.perf_counter() - started


async def _kill_during_append(
    run: _Run, child: _KillChild, delay: float, errors: multiprocessing.Queue[str]
) -> str:
    """Kill the child ``delay`` seconds into its append; check all or none of its batch is
    stored, then that appending the batch again completes it. Where the kill landed."""
    child.signals.go.set()
    await _wait_for(child.signals.inside, child.process, "its big append", run, errors)
    if delay:
        await asyncio.sleep(delay)  # where the kill lands varies; the check holds for any
    os.kill(child.process.pid or 0, signal.SIGKILL)
    await asyncio.to_thread(child.process.join, run.timeout)
    returned = child.signals.returned.is_set()
    run.appended += run.entries
    before = [_entry(child.key, f"before{n}") for n in range(_BEFORE_KILL)]
    batch = _kill_batch(child.key, run.entries)
    loaded = await run.load(child.key)
    _expect_equal("the entries stored before the killed append", loaded[:_BEFORE_KILL], before)
    kept = loaded[_BEFORE_KILL:]
    if kept and kept != batch:
        raise AssertionError(
            f"a process killed with SIGKILL {delay:.3f} s into an append of {len(batch)} entries "
            f"left {len(kept)} of them stored ({'after' if returned else 'before'} the call returned): "
            "all of the batch or none of it was expected"
        )
    await run.append(child.key, batch)  # the SDK's retry of the batch
    _expect_equal("the killed batch appended again", await run.load(child.key), before + batch)
    if returned:
        return "after the call"
    return "inside, after the commit" if kept else "inside, before the commit"

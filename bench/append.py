"""Append throughput of sessionstore against hand-written references, measured in one run.

Usage::

    python bench/append.py [--quick] [--pg URL] [--messages N] [--repeats R] [--profile]

What is measured
----------------
One deterministic (seeded) conversation is generated first: user text turns, assistant text
turns, assistant ``tool_use`` messages and user ``tool_result`` messages whose content is
0.5-200 KB (log-uniform-ish, skewed small: median ~1.3 KB, mean ~17 KB). Every contender
appends exactly these messages, in order, to one session in a fresh database file in a
temporary folder, and the timer covers only the append loop, including what a caller must
do per message (building the event model or the item dict, serializing it). Setup (opening,
migrating, loading the tokenizer) is not timed.

Contenders, each one event per transaction ("single") and 100 per transaction ("batch"):

* ``sessionstore``: ``SessionStore.append`` on SQLite, ``expected_seq`` tracked, with token
  counting off (``token_counter=None``), on (the default ``TiktokenCounter``, counting each
  event when it is first read: the appends tokenize nothing, and the run then times one full
  read, which counts every event) and in the append (``defer_token_counts=False``: the count
  inside the append, under the hash chain). One more, counting off with every payload stored
  as text (the layout before revision 0006): what the store costs without compression.
* ``raw sqlite3``: the reference. An equivalent table (session_id, seq, event_id unique,
  type, payload text, created_at; UNIQUE(session_id, seq)) written with the stdlib driver,
  ``BEGIN IMMEDIATE ... COMMIT``, nothing else. It is the floor: the cost of the database.
* ``SQLiteSession``: the OpenAI Agents SDK's session (``pip install openai-agents``; the row
  is skipped with a note when it is not installed), ``add_items`` with Responses-API items.
* With ``--pg URL`` (or ``SESSIONSTORE_TEST_PG_URL``): sessionstore on PostgreSQL against
  raw psycopg on an equivalent table, each in a fresh schema that is dropped afterwards.

All SQLite contenders run in WAL mode with ``synchronous=FULL`` (read back from a live
connection and printed); a second pair of rows repeats the single-event case at NORMAL.
Each contender runs ``--repeats`` times, interleaved, and the median is reported. Columns:
wall-clock msg/s and ms/msg (what a caller sees, fsync included) and this process's CPU
ms/msg (all its threads; for PostgreSQL the client side only). CPU time is the steadier
number when other processes share the machine: the load average is printed at both ends.
A run that fails (say, a test elsewhere kills the PostgreSQL connections) is tried again
once, then its row shows the error.

How to read the ratios
----------------------
* ``raw sqlite3 / sessionstore(off)``: how many times faster the bare database is than the
  store. Target: <= 2.5 (the store's validation, hash chain, concurrency check and
  idempotency lookup cost at most 1.5x the database's own work).
* ``sessionstore(off) / SQLiteSession``: > 1 means the store is faster. Target: >= 1.
* ``sessionstore(on) / SQLiteSession``: appends with counting on (deferred); the next line
  gives the appends plus the first read that counts every event, against ``SQLiteSession``'s
  appends: what a caller pays before every count is known.
* ``sessionstore(inline) / sessionstore(off)``: the price of counting inside the append. The
  same line gives the extra CPU time of that run, how much of it was spent inside the counter
  (``added - counter`` near 0 means tokenizing is the only added cost), and the CPU time of
  the tokenizer alone over the same messages (measured separately, for scale). Every
  counting run also checks that each event was tokenized exactly once (a wrapped counter
  records calls per event id and the characters it tokenized; deferred runs: none inside the
  appends) and that the counts read back match; the script exits 1 if not.
* ``PG store / raw psycopg``: the store's rate as a fraction of the bare driver's (higher is
  better). The store also takes ``LOCK TABLE events IN EXCLUSIVE MODE`` per append (see
  store/_postgres.py), which the raw reference does not.
* ``[cpu x]`` after a ratio is the same ratio computed from CPU time.

Reads, disk and memory
----------------------
* ``read ms``: after its appends, each contender reads the whole session back, the way its
  callers do (``SessionStore.read``: records with payloads decoded on first use;
  ``SQLiteSession.get_items``: every item JSON-decoded; raw sqlite3: ``fetchall`` of every
  column, the floor). Target: sessionstore <= 1.3x raw sqlite3. Two more reads of the same
  rows: one using every payload's text (the store decompresses each packed payload, the raw
  read has its text already), and the fair one for a reader of the content: every payload
  parsed on both sides (``read()`` + ``payload_dict()`` of each record against ``fetchall`` +
  ``json.loads`` of each payload).
* ``disk/payload``: the database file after a WAL checkpoint over the messages' JSON bytes.
* Memory: two fresh processes append the first messages with counting off and on; the RSS each
  gained is printed. Target: counting on adds less than 40 MB.

``--profile`` prints a cProfile of single appends (counting off) to show where the store's
time goes beyond the database's. Every run also prints the CPU per message of each step of a
100-event batch (the caller's event model, validation, serialization, compression, hash chain)
beside ``SQLiteSession``'s item building and ``json.dumps``; the rest of each run's CPU per
message is the database, the transaction and the per-call cost.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from _common import LEVELS, WORDS

import sessionstore
from sessionstore import MessageAppended
from sessionstore.store import TiktokenCounter, _codec

BATCH = 100
SEED = 20240601
PG_ENV = "SESSIONSTORE_TEST_PG_URL"
TARGET_RAW_OVER_OURS = 2.5
TARGET_OURS_OVER_SQLITESESSION = 1.0
TARGET_READ_OVER_RAW = 1.3
TARGET_COUNTING_EXTRA_MB = 40
TARGET_DISK_OVER_PAYLOAD = 0.6

# --- the workload --------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One conversation message, in Anthropic's shape (content: text or content blocks)."""

    role: str
    kind: str  # "user_text" | "assistant_text" | "tool_use" | "tool_result"
    content: str | list[dict[str, Any]]


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:  # a log line
        day, hour, minute = rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59)
        stamp = f"2025-{rng.randint(1, 12):02d}-{day:02d}T{hour:02d}:{minute:02d}"
        mod = f"{rng.choice(WORDS)}.{rng.choice(WORDS)}"
        return f"{stamp} {rng.choice(LEVELS)} {mod}: {_words(rng, 3, 12)} id={rng.randrange(10**6)}"
    if kind < 0.7:  # a line of code
        indent = "    " * rng.randint(0, 3)
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
        return f"{indent}{name} = {rng.choice(WORDS)}({rng.choice(WORDS)}, {rng.randrange(1000)})"
    return _words(rng, 5, 20).capitalize() + "."  # prose


def _text(rng: random.Random, size: int) -> str:
    """About ``size`` characters of log, code and prose lines."""
    lines: list[str] = []
    length = 0
    while length < size:
        line = _line(rng)
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)[:size]


def _tool_result_size(rng: random.Random) -> int:
    """0.5-200 KB, log-uniform skewed towards small (median ~1.3 KB, mean ~17 KB)."""
    return int(512 * 400 ** (rng.random() ** 2.5))


def _tool_use(rng: random.Random, tool_id: str) -> Message:
    if rng.random() < 0.2:  # writing a file: a larger input
        tool_input: dict[str, Any] = {
            "path": f"src/{rng.choice(WORDS)}.py",
            "content": _text(rng, rng.randint(200, 5000)),
        }
    else:
        tool_input = {
            "command": f"{rng.choice(('grep -rn', 'cat', 'ls -la', 'pytest -q'))} {_words(rng, 1, 4)}"
        }
    block = {
        "type": "tool_use",
        "id": tool_id,
        "name": rng.choice(("bash", "edit", "read")),
        "input": tool_input,
    }
    return Message("assistant", "tool_use", [block])


def _tool_result(rng: random.Random, tool_id: str) -> Message:
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": _text(rng, _tool_result_size(rng))}
    return Message("user", "tool_result", [block])


def make_messages(count: int, seed: int = SEED) -> list[Message]:
    """Turns of: user text, 0-6 (tool_use, tool_result) pairs, assistant text; ``count`` in all."""
    rng = random.Random(seed)
    messages: list[Message] = []
    while len(messages) < count:
        messages.append(Message("user", "user_text", _text(rng, rng.randint(20, 2000))))
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4, 6))):
            tool_id = f"toolu_{rng.getrandbits(64):016x}"
            messages.append(_tool_use(rng, tool_id))
            messages.append(_tool_result(rng, tool_id))
        messages.append(Message("assistant", "assistant_text", _text(rng, rng.randint(100, 4000))))
    return messages[:count]


def to_event(message: Message) -> MessageAppended:
    return MessageAppended(role=message.role, content=message.content)  # type: ignore[arg-type]


def to_openai_item(message: Message) -> dict[str, Any]:
    """The message as an OpenAI Agents SDK input item (what SQLiteSession stores)."""
    if isinstance(message.content, str):
        return {"role": message.role, "content": message.content}
    block = message.content[0]
    if block["type"] == "tool_use":
        return {
            "type": "function_call",
            "call_id": block["id"],
            "name": block["name"],
            "arguments": json.dumps(block["input"]),
        }
    return {"type": "function_call_output", "call_id": block["tool_use_id"], "output": block["content"]}


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- an audited token counter --------------------------------------------------------------


class AuditedCounter(TiktokenCounter):
    """The default counter, recording calls per event id, the characters it tokenized and the
    CPU time spent inside ``count`` (two clock reads per event: negligible)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.results: dict[str, int | None] = {}
        self.chars = 0
        self.cpu_seconds = 0.0

    def warm_up(self) -> AuditedCounter:
        """Load the encoding now so the timed loop does not pay for it."""
        super().count_text("warm up")
        return self

    def count_text(self, text: str) -> int:
        self.chars += len(text)
        return super().count_text(text)

    def count(self, event: Any) -> int | None:
        start = time.process_time()
        result = super().count(event)
        self.cpu_seconds += time.process_time() - start
        self.calls[str(event.event_id)] += 1
        self.results[str(event.event_id)] = result
        return result


# --- contenders ----------------------------------------------------------------------------


@dataclass
class Run:
    """One timed run: wall and CPU seconds, and what it checked or read back."""

    seconds: float
    cpu_seconds: float
    problems: list[str] = field(default_factory=list)
    settings: str = ""  # durability settings read back from a live connection
    counter_cpu_seconds: float = 0.0  # CPU inside the token counter (counting-on runs)
    read_seconds: float = float("nan")  # one full read of what was appended (median of READS)
    payload_read_seconds: float = float("nan")  # the same read, every payload's text used too
    dict_read_seconds: float = float("nan")  # the same read, every payload parsed (json.loads)
    disk_bytes: int = 0  # the database file after a checkpoint (WAL emptied)
    #: Deferred counting: the appends plus the first read, which counts every event (wall seconds).
    counted_seconds: float = float("nan")


@dataclass
class Contender:
    """A named way of appending the workload; ``run(messages, folder)`` times one run."""

    key: str
    label: str
    durability: str
    batch: int
    run: Callable[[list[Message], Path], Run]
    runs: list[Run] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def rate(self, count: int) -> float:
        """Messages per second (wall clock), median over the runs."""
        return count / statistics.median(r.seconds for r in self.runs)

    def cpu_ms(self, count: int) -> float:
        """This process's CPU milliseconds per message (all its threads), median over the runs."""
        return 1000 * statistics.median(r.cpu_seconds for r in self.runs) / count

    def read_ms(self) -> float:
        """Milliseconds for one full read of the session, median over the runs."""
        return 1000 * statistics.median(r.read_seconds for r in self.runs)

    def payload_read_ms(self) -> float:
        """Milliseconds for one full read that also uses every payload's text, median over the runs."""
        return 1000 * statistics.median(r.payload_read_seconds for r in self.runs)

    def dict_read_ms(self) -> float:
        """Milliseconds for one full read that parses every payload as JSON, median over the runs."""
        return 1000 * statistics.median(r.dict_read_seconds for r in self.runs)

    def disk(self) -> int:
        """Bytes on disk after the run (every run writes the same messages: the last one's)."""
        return self.runs[-1].disk_bytes


class Stopwatch:
    """Wall-clock and this process's CPU time (all threads) since creation; collects garbage first."""

    def __init__(self) -> None:
        gc.collect()
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


#: Full reads timed per run (the median is kept).
READS = 3


def timed_read(read: Callable[[], Any]) -> float:
    """Median wall seconds of ``READS`` full reads; each must return every message."""
    times = []
    for _ in range(READS):
        gc.collect()
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def disk_bytes(path: Path) -> int:
    """The database file's size once its WAL is checkpointed into it (what the data takes)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def payload_bytes(messages: list[Message]) -> int:
    """UTF-8 bytes of the messages as JSON (role and content): the data every contender stores."""
    return sum(len(_message_json(m).encode()) for m in messages)


def _message_json(message: Message) -> str:
    return json.dumps({"role": message.role, "content": message.content}, ensure_ascii=False)


def _sqlite_pragmas(conn: sqlite3.Connection) -> str:
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return f"journal_mode={journal} synchronous={sync}"


def _store_pragmas(store: Any) -> str:
    """The settings of one of the store's SQLite connections (all are configured alike)."""
    with store.engine.connect() as conn:
        return _sqlite_pragmas(conn.connection.dbapi_connection)


def _timed_store_appends(
    store: sessionstore.SessionStore, messages: list[Message], batch: int
) -> tuple[float, float, str]:
    """(wall, CPU) seconds of appending every message to a new session, and the session's id."""
    session_id = store.create_session().id
    watch = Stopwatch()
    _append_all(store, session_id, messages, batch)
    return (*watch.read(), session_id)


def _store_read(
    store: sessionstore.SessionStore,
    session_id: str,
    count: int,
    *,
    payloads: bool = False,
    dicts: bool = False,
) -> Callable[[], Any]:
    """A full read of the session, as a caller does it: every event, decoded on first use
    (``payloads``: every payload's text is used too, so each compressed one is decompressed;
    ``dicts``: every payload is parsed, ``payload_dict()``, what a reader of the content does)."""

    def read() -> list[Any]:
        found = store.read(session_id)
        assert len(found) == count, (len(found), count)
        if payloads:
            assert all(e.payload for e in found)
        if dicts:
            assert all(e.payload_dict() for e in found)
        return found

    return read


def _append_all(
    store: sessionstore.SessionStore, session_id: str, messages: list[Message], batch: int
) -> None:
    seq = store.last_seq(session_id)
    for group in chunks(messages, batch):
        seq = store.append(session_id, [to_event(m) for m in group], expected_seq=seq).last_seq


def _audit(counter: AuditedCounter, store: sessionstore.SessionStore, messages: list[Message]) -> list[str]:
    """Every event tokenized exactly once, all its text once, and the counts stored."""
    problems = []
    if len(counter.calls) != len(messages):
        problems.append(f"counter saw {len(counter.calls)} events, expected {len(messages)}")
    twice = {eid: n for eid, n in counter.calls.items() if n != 1}
    if twice:
        problems.append(f"{len(twice)} events tokenized more than once, e.g. {next(iter(twice.items()))}")
    expected_chars = sum(len(t) for m in messages for t in to_event(m).countable_text())
    if counter.chars != expected_chars:
        problems.append(f"tokenized {counter.chars} characters, the messages have {expected_chars}")
    stored = {e.event_id: e.token_count for s in store.list_sessions() for e in store.read(s.id)}
    if any(stored.get(eid) != n for eid, n in counter.results.items()):
        problems.append("stored token_count differs from the counter's result")
    return problems


@contextmanager
def _payloads_uncompressed(uncompressed: bool) -> Iterator[None]:
    """With ``uncompressed``, every payload is stored as text, as before revision 0006 (the
    store's size threshold for compression raised past every payload; a benchmark-only switch)."""
    if not uncompressed:
        yield
        return
    threshold = _codec.PACK_MIN_BYTES
    _codec.PACK_MIN_BYTES = sys.maxsize
    try:
        yield
    finally:
        _codec.PACK_MIN_BYTES = threshold


def sessionstore_sqlite(
    *,
    counting: bool,
    durability: Literal["full", "normal"],
    batch: int,
    uncompressed: bool = False,
    defer: bool = True,
) -> Callable[[list[Message], Path], Run]:
    """The store on a SQLite file. ``defer``: counts made when first read (the default), not in
    the append; ``counted_seconds`` is then the appends plus that first read."""

    def run(messages: list[Message], folder: Path) -> Run:
        counter = AuditedCounter().warm_up() if counting else None
        store = sessionstore.open_store(
            folder / "store.db",
            migrate=True,
            token_counter=counter,
            durability=durability,
            defer_token_counts=defer,
        )
        try:
            with _payloads_uncompressed(uncompressed):
                seconds, cpu, session_id = _timed_store_appends(store, messages, batch)
            result = Run(seconds, cpu, settings=_store_pragmas(store))
            if counter is not None and defer:
                if counter.calls:
                    result.problems.append(f"the appends tokenized {len(counter.calls)} events")
                watch = Stopwatch()
                store.read(session_id)  # counts every event (outside the append)
                result.counted_seconds = seconds + watch.read()[0]
            result.read_seconds = timed_read(_store_read(store, session_id, len(messages)))
            result.payload_read_seconds = timed_read(
                _store_read(store, session_id, len(messages), payloads=True)
            )
            result.dict_read_seconds = timed_read(_store_read(store, session_id, len(messages), dicts=True))
            if counter is not None:
                result.problems = _audit(counter, store, messages)
                result.counter_cpu_seconds = counter.cpu_seconds
        finally:
            store.close()
        result.disk_bytes = disk_bytes(folder / "store.db")
        return result

    return run


_RAW_SQLITE_DDL = """
CREATE TABLE events (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (session_id, seq)
)
"""
_RAW_SELECT = (
    "SELECT position, session_id, seq, event_id, type, payload, created_at FROM events "
    "WHERE session_id = ? ORDER BY seq"
)
_RAW_INSERT = (
    "INSERT INTO events (session_id, seq, event_id, type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)"
)


def _raw_row(session_id: str, seq: int, message: Message) -> tuple[Any, ...]:
    payload = _message_json(message)
    return (session_id, seq, str(uuid.uuid4()), "message_appended", payload, datetime.now(UTC).isoformat())


def raw_sqlite(*, durability: str, batch: int) -> Callable[[list[Message], Path], Run]:
    def run(messages: list[Message], folder: Path) -> Run:
        conn = sqlite3.connect(folder / "raw.db", isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={durability.upper()}")
            conn.execute(_RAW_SQLITE_DDL)
            seq = 0
            watch = Stopwatch()
            for group in chunks(messages, batch):
                rows = [_raw_row("s1", seq + i, m) for i, m in enumerate(group, start=1)]
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_RAW_INSERT, rows)
                conn.execute("COMMIT")
                seq += len(rows)
            result = Run(*watch.read(), settings=_sqlite_pragmas(conn))

            def read() -> list[Any]:  # the floor: every column of every row, nothing decoded
                rows = conn.execute(_RAW_SELECT, ("s1",)).fetchall()
                assert len(rows) == len(messages)
                return rows

            result.read_seconds = result.payload_read_seconds = timed_read(read)

            def read_dicts() -> list[Any]:  # the floor of a reader that uses the content
                rows = conn.execute(_RAW_SELECT, ("s1",)).fetchall()
                assert len(rows) == len(messages)
                assert all(json.loads(row[5]) for row in rows)
                return rows

            result.dict_read_seconds = timed_read(read_dicts)
        finally:
            conn.close()
        result.disk_bytes = disk_bytes(folder / "raw.db")
        return result

    return run


def sqlite_session(*, batch: int) -> Callable[[list[Message], Path], Run]:
    from agents.memory import SQLiteSession

    async def append_all(session: Any, messages: list[Message]) -> tuple[float, float]:
        watch = Stopwatch()
        for group in chunks(messages, batch):
            await session.add_items([to_openai_item(m) for m in group])
        return watch.read()

    def read(session: Any, count: int) -> None:
        items = asyncio.run(session.get_items())  # its own read: every item, JSON-decoded
        assert len(items) == count

    def run(messages: list[Message], folder: Path) -> Run:
        session = SQLiteSession("s1", folder / "agents.db")
        try:
            times = asyncio.run(append_all(session, messages))
            # Its connections are configured alike (per thread); ask one of them.
            result = Run(*times, settings=_sqlite_pragmas(session._get_connection()))
            result.read_seconds = timed_read(lambda: read(session, len(messages)))
        finally:
            session.close()
        result.disk_bytes = disk_bytes(folder / "agents.db")
        return result

    return run


# --- PostgreSQL ----------------------------------------------------------------------------


@contextmanager
def pg_schema(base_url: str) -> Iterator[tuple[str, str]]:
    """A fresh schema: yields (SQLAlchemy URL selecting it, schema name); dropped afterwards."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    raw_url = plain_pg_url(base_url)
    with psycopg.connect(raw_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = sessionstore.store.resolve_url(base_url)
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}", schema
    finally:
        with psycopg.connect(raw_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def plain_pg_url(url: str) -> str:
    """The URL without SQLAlchemy's ``+psycopg`` driver suffix, for psycopg itself."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def sessionstore_pg(
    base_url: str, *, batch: int, counting: bool = False
) -> Callable[[list[Message], Path], Run]:
    def run(messages: list[Message], _folder: Path) -> Run:
        counter = AuditedCounter().warm_up() if counting else None
        with pg_schema(base_url) as (url, _schema):
            store = sessionstore.open_store(url, migrate=True, token_counter=counter)
            try:
                seconds, cpu, session_id = _timed_store_appends(store, messages, batch)
                result = Run(seconds, cpu, settings=_pg_durability(store))
                result.read_seconds = timed_read(_store_read(store, session_id, len(messages)))
                if counter is not None:
                    result.problems = _audit(counter, store, messages)
                    result.counter_cpu_seconds = counter.cpu_seconds
                return result
            finally:
                store.close()

    return run


#: The server settings that decide whether an acknowledged COMMIT survives a crash of the server.
PG_DURABILITY_SQL = "SELECT current_setting('synchronous_commit'), current_setting('fsync')"


def pg_durability_text(row: Any) -> str:
    return f"synchronous_commit={row[0]} fsync={row[1]}"


def _pg_durability(store: sessionstore.SessionStore) -> str:
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return pg_durability_text(conn.exec_driver_sql(PG_DURABILITY_SQL).one())


_RAW_PG_DDL = """
CREATE TABLE events (
    position BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    UNIQUE (session_id, seq)
)
"""


def raw_psycopg(base_url: str, *, batch: int) -> Callable[[list[Message], Path], Run]:
    import psycopg

    insert = _RAW_INSERT.replace("?", "%s")

    def run(messages: list[Message], _folder: Path) -> Run:
        with (
            pg_schema(base_url) as (_url, schema),
            psycopg.connect(plain_pg_url(base_url), options=f"-csearch_path={schema}") as conn,
        ):
            conn.execute(_RAW_PG_DDL)
            conn.commit()
            seq = 0
            watch = Stopwatch()
            for group in chunks(messages, batch):
                rows = [_raw_row("s1", seq + i, m) for i, m in enumerate(group, start=1)]
                with conn.cursor() as cur:
                    cur.executemany(insert, rows)
                conn.commit()
                seq += len(rows)
            times = watch.read()
            result = Run(*times, settings=pg_durability_text(conn.execute(PG_DURABILITY_SQL).fetchone()))
            select = _RAW_SELECT.replace("?", "%s")
            result.read_seconds = timed_read(lambda: conn.execute(select, ("s1",)).fetchall())
            return result

    return run


# --- the plan ------------------------------------------------------------------------------


def sqlite_contenders() -> tuple[list[Contender], str | None]:
    """The SQLite contenders, and a note when SQLiteSession cannot be imported."""
    contenders = [
        Contender("raw-1", "raw sqlite3", "full", 1, raw_sqlite(durability="full", batch=1)),
        Contender("raw-100", "raw sqlite3", "full", BATCH, raw_sqlite(durability="full", batch=BATCH)),
        Contender(
            "off-1",
            "sessionstore, counting off",
            "full",
            1,
            sessionstore_sqlite(counting=False, durability="full", batch=1),
        ),
        Contender(
            "off-100",
            "sessionstore, counting off",
            "full",
            BATCH,
            sessionstore_sqlite(counting=False, durability="full", batch=BATCH),
        ),
        Contender(
            "plain-1",
            "sessionstore, off, uncompressed",
            "full",
            1,
            sessionstore_sqlite(counting=False, durability="full", batch=1, uncompressed=True),
        ),
        Contender(
            "plain-100",
            "sessionstore, off, uncompressed",
            "full",
            BATCH,
            sessionstore_sqlite(counting=False, durability="full", batch=BATCH, uncompressed=True),
        ),
        Contender(
            "on-1",
            "sessionstore, counting on (when read)",
            "full",
            1,
            sessionstore_sqlite(counting=True, durability="full", batch=1),
        ),
        Contender(
            "on-100",
            "sessionstore, counting on (when read)",
            "full",
            BATCH,
            sessionstore_sqlite(counting=True, durability="full", batch=BATCH),
        ),
        Contender(
            "inline-1",
            "sessionstore, counting in the append",
            "full",
            1,
            sessionstore_sqlite(counting=True, durability="full", batch=1, defer=False),
        ),
        Contender(
            "inline-100",
            "sessionstore, counting in the append",
            "full",
            BATCH,
            sessionstore_sqlite(counting=True, durability="full", batch=BATCH, defer=False),
        ),
        Contender("raw-1-normal", "raw sqlite3", "normal", 1, raw_sqlite(durability="normal", batch=1)),
        Contender(
            "off-1-normal",
            "sessionstore, counting off",
            "normal",
            1,
            sessionstore_sqlite(counting=False, durability="normal", batch=1),
        ),
    ]
    try:
        contenders += [
            Contender("agents-1", "SQLiteSession (openai-agents)", "sdk default", 1, sqlite_session(batch=1)),
            Contender(
                "agents-100",
                "SQLiteSession (openai-agents)",
                "sdk default",
                BATCH,
                sqlite_session(batch=BATCH),
            ),
        ]
    except ImportError as e:
        return (
            contenders,
            f"SQLiteSession skipped: cannot import agents.memory ({e}); "
            "`pip install openai-agents` to include it",
        )
    return contenders, None


def pg_contenders(url: str) -> list[Contender]:
    return [
        Contender("pg-raw-1", "raw psycopg", "server", 1, raw_psycopg(url, batch=1)),
        Contender("pg-raw-100", "raw psycopg", "server", BATCH, raw_psycopg(url, batch=BATCH)),
        Contender("pg-1", "sessionstore on PostgreSQL, off", "server", 1, sessionstore_pg(url, batch=1)),
        Contender(
            "pg-100", "sessionstore on PostgreSQL, off", "server", BATCH, sessionstore_pg(url, batch=BATCH)
        ),
    ]


def run_once(c: Contender, messages: list[Message], folder: Path, attempts: int = 2) -> Run | None:
    """One run on a fresh database; a run that fails (e.g. the server dropped the connection)
    is tried again once, then recorded as a failure."""
    for attempt in range(1, attempts + 1):
        folder.mkdir()
        try:
            return c.run(messages, folder)
        except Exception as e:  # reported in the output; the other rows go on
            first_line = (str(e).strip().splitlines() or [""])[0]
            c.failures.append(f"attempt {attempt}: {type(e).__name__}: {first_line}")
            print(f"  {c.key:<14} FAILED ({c.failures[-1]})", file=sys.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return None


def run_all(contenders: list[Contender], messages: list[Message], repeats: int, workdir: Path) -> list[str]:
    """Run every contender ``repeats`` times, interleaved; return the token-counting problems."""
    problems: list[str] = []
    for repeat in range(repeats):
        for c in contenders:
            result = run_once(c, messages, workdir / f"{c.key}-{repeat}")
            if result is None:
                continue
            c.runs.append(result)
            problems += [f"{c.key}: {p}" for p in result.problems]
            rate = len(messages) / result.seconds
            print(f"  {c.key:<14} run {repeat + 1}/{repeats}: {rate:9.0f} msg/s", file=sys.stderr)
    return problems


def tokenization_seconds(messages: list[Message], repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the counter alone over all messages (events built beforehand), medians."""
    events = [to_event(m) for m in messages]
    counter = TiktokenCounter()
    counter.count_text("warm up")
    runs = []
    for _ in range(repeats):
        watch = Stopwatch()
        for event in events:
            counter.count(event)
        runs.append(watch.read())
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def _cpu_us_per_message(step: Callable[[], object], count: int, repeats: int = 5) -> float:
    """Best-of-``repeats`` CPU microseconds per message of ``step`` (which handles ``count``)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        step()
        best = min(best, time.process_time() - start)
    return 1e6 * best / count


def batch_cpu_steps(messages: list[Message]) -> list[tuple[str, float]]:
    """CPU microseconds per message of each step a 100-event append takes before the database
    (validation, serialization, compression, the hash chain), and of what
    ``SQLiteSession.add_items`` does with an item before its INSERT.

    Measured on the same messages outside any transaction, so the rest of a run's CPU per
    message is the database, the transaction and the store's fixed cost per call.
    """
    from sessionstore.events._base import encode_event, parse_event
    from sessionstore.store._driver import Prepared, chain_rows, sqlite_timestamp

    count = len(messages)
    events = [to_event(m) for m in messages]
    payloads = [encode_event(e) for e in events]
    prepared = [
        Prepared(str(e.event_id), e.type, e.SCHEMA_VERSION, payload, None)
        for e, payload in zip(events, payloads, strict=True)
    ]
    now = datetime.now(UTC)
    session_id = str(uuid.uuid4())

    def chain() -> None:
        for start in range(0, count, BATCH):
            chain_rows(session_id, start, "0" * 64, prepared[start : start + BATCH], now, sqlite_timestamp)

    items = [to_openai_item(m) for m in messages]
    return [
        (
            "caller: build MessageAppended",
            _cpu_us_per_message(lambda: [to_event(m) for m in messages], count),
        ),
        (
            "store: validate (parse_event)",
            _cpu_us_per_message(lambda: [parse_event(e) for e in events], count),
        ),
        (
            "store: serialize (encode_event)",
            _cpu_us_per_message(lambda: [encode_event(e) for e in events], count),
        ),
        (
            "store: compress (pack_payload, zstd)",
            _cpu_us_per_message(lambda: [_codec.pack_payload(p) for p in payloads], count),
        ),
        ("store: hash chain (chain_rows)", _cpu_us_per_message(chain, count)),
        (
            "SQLiteSession peer: build item",
            _cpu_us_per_message(lambda: [to_openai_item(m) for m in messages], count),
        ),
        (
            "SQLiteSession peer: json.dumps item",
            _cpu_us_per_message(lambda: [json.dumps(i) for i in items], count),
        ),
    ]


def print_batch_steps(contenders: list[Contender], count: int, steps: list[tuple[str, float]]) -> None:
    """Where a 100-event batch's CPU per message goes, against SQLiteSession.add_items'."""
    by_key = {c.key: c for c in contenders if c.runs}
    print(f"\nCPU per message of a {BATCH}-event batch, by step (best of 5, outside any transaction):")
    for name, micros in steps:
        print(f"  {name:<38} {micros:7.1f} us")
    ours = sum(micros for name, micros in steps if not name.startswith("SQLiteSession"))
    theirs = sum(micros for name, micros in steps if name.startswith("SQLiteSession"))
    for key, before in ((f"off-{BATCH}", ours), (f"agents-{BATCH}", theirs)):
        if key in by_key:
            total = 1000 * by_key[key].cpu_ms(count)
            print(
                f"  {by_key[key].label:<38} {total:7.1f} us in the run: {total - before:.1f} us "
                "database, transaction and per-call cost"
            )


# --- the report ----------------------------------------------------------------------------


def describe_workload(messages: list[Message]) -> str:
    kinds = Counter(m.kind for m in messages)
    sizes = sorted(len(m.content[0]["content"]) for m in messages if m.kind == "tool_result")  # type: ignore[index]
    total = sum(len(json.dumps(m.content)) for m in messages)
    parts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    line = f"{len(messages)} messages ({parts}); {total / 1e6:.1f} MB of content"
    if sizes:
        line += (
            f"\n  tool_result sizes: min {sizes[0] / 1024:.1f} KB, "
            f"median {sizes[len(sizes) // 2] / 1024:.1f} KB, mean {statistics.mean(sizes) / 1024:.1f} KB, "
            f"max {sizes[-1] / 1024:.1f} KB"
        )
    return line


def print_table(contenders: list[Contender], count: int, payload: int) -> None:
    header = (
        f"{'contender':<34} {'durability':<11} {'batch':>5} {'msg/s':>8} {'ms/msg':>7} {'cpu ms/msg':>10}"
        f" {'read ms':>8} {'disk/payload':>12}"
    )
    print(f"\n{header}  settings (read back)")
    print("-" * 140)
    for c in contenders:
        if not c.runs:
            print(f"{c.label:<34} {c.durability:<11} {c.batch:>5} {'failed':>8}  {c.failures[-1]}")
            continue
        rate = c.rate(count)
        settings = c.runs[-1].settings
        if c.durability in ("full", "sdk default") and "synchronous=FULL" not in settings:
            settings += "  ** NOT synchronous=FULL: not at equal durability **"
        failed = f"  ({len(c.failures)} failed attempt(s))" if c.failures else ""
        disk = f"{c.disk() / payload:.2f}" if c.disk() else "-"
        read = "-" if c.read_ms() != c.read_ms() else f"{c.read_ms():.1f}"  # NaN: not read back
        print(
            f"{c.label:<34} {c.durability:<11} {c.batch:>5} {rate:>8.0f} {1000 / rate:>7.3f} "
            f"{c.cpu_ms(count):>10.3f} {read:>8} {disk:>12}  {settings}{failed}"
        )
    print("(msg/s and ms/msg: wall clock; cpu ms/msg: this process's CPU, all threads; medians of the runs)")
    print(
        f"(read ms: one full read of the {count} messages, wall clock, median of {READS} per run and of "
        f"the runs; disk/payload: the database file after a checkpoint over the {payload / 1e6:.1f} MB of "
        "message JSON)"
    )


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def print_ratios(contenders: list[Contender], count: int, tokenizer_cpu: float) -> None:
    by_key = {c.key: c for c in contenders if c.runs}  # ratios only between rows that ran

    def rate(key: str) -> float:
        return by_key[key].rate(count)

    def cpu(key: str) -> float:
        return by_key[key].cpu_ms(count)

    print("\nRatios (wall-clock medians; same messages, same run; CPU-time ratio in brackets):")
    for batch in (1, BATCH):
        ours, raw = f"off-{batch}", f"raw-{batch}"
        if not {ours, raw} <= by_key.keys():
            continue
        ratio = rate(raw) / rate(ours)
        print(
            f"  batch {batch:>3}: sessionstore(off)/raw sqlite3 = {rate(ours) / rate(raw):.2f}   "
            f"raw/ours = {ratio:.2f} [cpu {cpu(ours) / cpu(raw):.2f}]  "
            f"(target raw/ours <= {TARGET_RAW_OVER_OURS}: {_verdict(ratio <= TARGET_RAW_OVER_OURS)})"
        )
    if {"raw-1-normal", "off-1-normal"} <= by_key.keys():
        ours, raw = "off-1-normal", "raw-1-normal"
        print(
            f"  batch   1, synchronous=NORMAL: sessionstore(off)/raw sqlite3 = {rate(ours) / rate(raw):.2f}"
            f"   raw/ours = {rate(raw) / rate(ours):.2f} [cpu {cpu(ours) / cpu(raw):.2f}]"
        )
    for counting in ("on", "inline", "off"):
        for batch in (1, BATCH):
            ours, theirs = f"{counting}-{batch}", f"agents-{batch}"
            if {ours, theirs} <= by_key.keys():
                ratio = rate(ours) / rate(theirs)
                print(
                    f"  batch {batch:>3}: sessionstore({counting})/SQLiteSession = {ratio:.2f} "
                    f"[cpu {cpu(theirs) / cpu(ours):.2f}]  (target >= {TARGET_OURS_OVER_SQLITESESSION}: "
                    f"{_verdict(ratio >= TARGET_OURS_OVER_SQLITESESSION)})"
                )
    for batch in (1, BATCH):
        ours, theirs = f"plain-{batch}", f"agents-{batch}"
        if {ours, theirs} <= by_key.keys():
            # What the store costs without compression (target 3's price): not a target of its own.
            print(
                f"  batch {batch:>3}: sessionstore(off, payloads uncompressed)/SQLiteSession = "
                f"{rate(ours) / rate(theirs):.2f} [cpu {cpu(theirs) / cpu(ours):.2f}]"
            )
    for batch in (1, BATCH):
        ours, theirs = f"on-{batch}", f"agents-{batch}"
        if {ours, theirs} <= by_key.keys():
            counted = count / statistics.median(r.counted_seconds for r in by_key[ours].runs)
            print(
                f"  batch {batch:>3}: counting on (deferred): the appends and then the first read, which "
                f"counts every event, at {counted / rate(theirs):.2f}x SQLiteSession's appends "
                f"({counted:.0f} msg/s)"
            )
    if "raw-1" in by_key:
        floor = by_key["raw-1"].read_ms()
        for key in ("off-1", "on-1", "agents-1"):
            if key in by_key:
                ratio = by_key[key].read_ms() / floor
                print(
                    f"  full read: {by_key[key].label} / raw sqlite3 = {ratio:.2f}  "
                    f"(target <= {TARGET_READ_OVER_RAW}: {_verdict(ratio <= TARGET_READ_OVER_RAW)})"
                )
        for key in ("off-1", "plain-1"):
            if key in by_key:
                ratio = by_key[key].payload_read_ms() / floor
                print(
                    f"  full read using every payload's text: {by_key[key].label} / raw sqlite3 = {ratio:.2f}"
                )
        # The fair comparison for a reader of the content: both sides parse every payload.
        floor = by_key["raw-1"].dict_read_ms()
        for key in ("off-1", "plain-1"):
            if key in by_key:
                ratio = by_key[key].dict_read_ms() / floor
                print(
                    f"  full read parsing every payload: {by_key[key].label} read() + payload_dict() / "
                    f"raw sqlite3 + json.loads = {ratio:.2f}  "
                    f"({by_key[key].dict_read_ms():.1f} ms / {floor:.1f} ms)"
                )
    print_compression(by_key, count)
    if {"pg-1", "pg-raw-1"} <= by_key.keys():
        ratio = by_key["pg-1"].read_ms() / by_key["pg-raw-1"].read_ms()
        print(f"  full read: sessionstore on PostgreSQL / raw psycopg = {ratio:.2f}")

    for batch in (1, BATCH):
        if not {f"inline-{batch}", f"off-{batch}"} <= by_key.keys():
            continue
        on, off = by_key[f"inline-{batch}"], by_key[f"off-{batch}"]
        extra_wall = count * (1 / on.rate(count) - 1 / off.rate(count))
        extra_cpu = count * (on.cpu_ms(count) - off.cpu_ms(count)) / 1000
        inside = statistics.median(r.counter_cpu_seconds for r in on.runs)
        print(
            f"  batch {batch:>3}: sessionstore(inline)/sessionstore(off) = "
            f"{on.rate(count) / off.rate(count):.2f}"
            f"   counting added {extra_wall:.2f} s wall, {extra_cpu:.2f} s cpu, of which "
            f"{inside:.2f} s cpu inside the counter (added - counter = {extra_cpu - inside:+.2f} s cpu); "
            f"tokenizer alone: {tokenizer_cpu:.2f} s cpu"
        )
    for batch in (1, BATCH):
        ours, raw = f"pg-{batch}", f"pg-raw-{batch}"
        if {ours, raw} <= by_key.keys():
            print(
                f"  batch {batch:>3}: PG store/raw psycopg = {rate(ours) / rate(raw):.2f} "
                f"[client cpu {cpu(raw) / cpu(ours):.2f}]"
            )
    print("  ([cpu x] is the same ratio computed from CPU time, oriented like the ratio before it.)")


def print_compression(by_key: dict[str, Contender], count: int) -> None:
    """What compressing payloads changes: disk, appends and reads against the same store storing
    them as text (revision 0006 against the layout before it), in the same run."""
    if not {"off-1", "plain-1"} <= by_key.keys():
        return
    packed, plain = by_key["off-1"], by_key["plain-1"]
    cpu = plain.cpu_ms(count) / packed.cpu_ms(count)
    print(
        f"  compression: disk {packed.disk() / plain.disk():.2f}x the uncompressed store's; appends "
        f"{packed.rate(count) / plain.rate(count):.2f}x its msg/s [cpu {cpu:.2f}]; "
        f"full read {packed.read_ms() / plain.read_ms():.2f}x its time, "
        f"{packed.payload_read_ms() / plain.payload_read_ms():.2f}x using every payload"
    )


def print_disk(contenders: list[Contender], payload: int) -> None:
    for c in contenders:
        if c.key in ("off-1", "plain-1", "raw-1", "agents-1") and c.runs:
            ratio = c.disk() / payload
            target = (
                f"  (target <= {TARGET_DISK_OVER_PAYLOAD}: {_verdict(ratio <= TARGET_DISK_OVER_PAYLOAD)})"
            )
            print(f"  disk / payload: {c.label} = {ratio:.2f}{target if c.key == 'off-1' else ''}")


# --- profiling -----------------------------------------------------------------------------


#: Steps of ``SqlSessionStore.append`` (store/_sql.py) shown in the profile breakdown.
_STEPS = (
    ("append", "the whole append"),
    ("_prepare", "validate, serialize (and count) the events"),
    ("_write", "connect, BEGIN IMMEDIATE, COMMIT (fsync), release"),
    ("_stored_result", "idempotency lookup: SELECT ... WHERE event_id IN"),
    ("_head", "head lookup: SELECT seq, hash ... LIMIT 1"),
    ("_insert_events", "hash chain + INSERT ... RETURNING"),
)
_DRIVER_CALLS = (
    "<method 'execute' of 'sqlite3.Cursor' objects>",
    "<method 'commit' of 'sqlite3.Connection' objects>",
)


def print_breakdown(stats: pstats.Stats, appends: int) -> None:
    """Milliseconds per append in each step, and inside the SQLite driver itself."""
    entries = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    rows = [
        (name, what, sum(v[3] for (f, _, n), v in entries.items() if n == name and f.endswith("_sql.py")))
        for name, what in _STEPS
    ]
    driver = sum(v[2] for (_, _, n), v in entries.items() if n in _DRIVER_CALLS)
    rows.append(("(in sqlite3)", "executing SQL + COMMIT in the driver, all steps", driver))
    print(f"\n  {'step of append (times inflated by the profiler)':<69} {'ms/append':>9}")
    for name, what, seconds in rows:
        print(f"  {name:<16} {what:<52} {1000 * seconds / appends:>9.3f}")


def profile_single_appends(messages: list[Message], workdir: Path) -> None:
    """cProfile of single appends (counting off): where the store's time goes."""
    store = sessionstore.open_store(workdir / "profile.db", migrate=True, token_counter=None)
    try:
        _append_all(store, store.create_session().id, messages[:50], 1)  # warm SQLAlchemy's caches
        session_id = store.create_session().id
        gc.collect()
        profiler = cProfile.Profile()
        profiler.enable()
        _append_all(store, session_id, messages, 1)
        profiler.disable()
    finally:
        store.close()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print(f"\ncProfile of {len(messages)} single appends (counting off):")
    print_breakdown(stats, len(messages))
    print("\nTop 15 functions by own time:")
    stats.sort_stats("tottime").print_stats(15)


# --- memory --------------------------------------------------------------------------------

#: Messages each memory child appends (one per transaction).
MEMORY_MESSAGES = 300


def _resident_mb() -> float:
    """This process's resident set size now, in MB (Linux: /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_child(counting: str) -> int:
    """Print how much the append path grew this fresh process's RSS (counting ``on`` or ``off``)."""
    messages = make_messages(MEMORY_MESSAGES)
    gc.collect()
    before = _resident_mb()
    with tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp:
        counter = TiktokenCounter() if counting != "off" else None
        store = sessionstore.open_store(
            Path(tmp) / "store.db",
            migrate=True,
            token_counter=counter,
            defer_token_counts=counting != "inline",
        )
        try:
            _append_all(store, store.create_session().id, messages, 1)
            gc.collect()
            print(json.dumps({"before": before, "after": _resident_mb()}))
        finally:
            store.close()
    return 0


def append_rss_growth() -> dict[str, float]:
    """RSS growth (MB) of the append path with counting off, on (deferred: the appends tokenize
    nothing) and in the append, each in a fresh process."""
    import subprocess

    growth = {}
    for counting in ("off", "on", "inline"):
        done = subprocess.run(
            [sys.executable, __file__, "--memory-child", counting], capture_output=True, text=True, check=True
        )
        numbers = json.loads(done.stdout.strip().splitlines()[-1])
        growth[counting] = numbers["after"] - numbers["before"]
    return growth


# --- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few messages, one repeat (< 30 s)")
    parser.add_argument(
        "--pg", metavar="URL", default=os.environ.get(PG_ENV), help=f"PostgreSQL URL (default: ${PG_ENV})"
    )
    parser.add_argument("--messages", type=int, help="messages per run (default 2000, --quick 300)")
    parser.add_argument(
        "--repeats", type=int, help="runs per contender, median reported (default 3, --quick 1)"
    )
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of single appends")
    parser.add_argument("--memory-child", choices=("on", "off", "inline"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.messages = args.messages or (300 if args.quick else 2000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def sqlite_session_note(by_key: dict[str, Contender], import_note: str | None) -> str:
    if import_note:
        return import_note
    runs = by_key["agents-1"].runs or by_key["agents-100"].runs
    settings = runs[-1].settings if runs else "(not read: its runs failed)"
    note = (
        "SQLiteSession (agents/memory/sqlite_session.py) sets only journal_mode=WAL; synchronous is left at "
        f"SQLite's compiled-in default, here read back as: {settings}. Each add_items runs in a worker "
        "thread (asyncio.to_thread) and commits once."
    )
    if "synchronous=FULL" not in settings:
        note += " ** Its durability DIFFERS from FULL: its rows are not at equal durability. **"
    return note


def print_load(when: str) -> None:
    load = os.getloadavg()[0]
    warning = "  (other processes are busy: expect noisy wall-clock numbers)" if load > 1.0 else ""
    print(f"load average ({when}): {load:.2f} on {os.cpu_count()} cores{warning}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        return memory_child(args.memory_child)
    messages = make_messages(args.messages)
    contenders, import_note = sqlite_contenders()
    if args.pg:
        contenders += pg_contenders(args.pg)
    by_key = {c.key: c for c in contenders}
    print(
        f"sessionstore {sessionstore.__version__} append benchmark; "
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    )
    print(f"workload (seed {SEED}): {describe_workload(messages)}")
    print(f"{args.repeats} run(s) per contender, interleaved, median reported; progress on stderr")
    print_load("start")
    with tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp:
        workdir = Path(tmp)
        problems = run_all(contenders, messages, args.repeats, workdir)
        tok_wall, tok_cpu = tokenization_seconds(messages, max(3, args.repeats))
        steps = batch_cpu_steps(messages)
        print_load("end")
        print_table(contenders, len(messages), payload_bytes(messages))
        print(f"\nNOTE: {sqlite_session_note(by_key, import_note)}")
        if not args.pg:
            print(f"NOTE: PostgreSQL rows skipped (pass --pg URL or set {PG_ENV}).")
        print(
            f"\nTokenizer alone (TiktokenCounter.count over all {len(messages)} messages): "
            f"{tok_wall:.2f} s wall, {tok_cpu:.2f} s cpu = {len(messages) / tok_wall:.0f} msg/s"
        )
        print_ratios(contenders, len(messages), tok_cpu)
        print_batch_steps(contenders, len(messages), steps)
        print_disk(contenders, payload_bytes(messages))
        growth = append_rss_growth()
        extra = growth["on"] - growth["off"]
        print(
            f"\nMemory: {MEMORY_MESSAGES} single appends in a fresh process grew its RSS by "
            f"{growth['off']:.1f} MB with counting off, {growth['on']:.1f} MB with counting on "
            f"(+{extra:.1f} MB; target < {TARGET_COUNTING_EXTRA_MB} MB: "
            f"{_verdict(extra < TARGET_COUNTING_EXTRA_MB)}), {growth['inline']:.1f} MB counting in the "
            f"append (+{growth['inline'] - growth['off']:.1f} MB: the cl100k encoder's tables, loaded "
            "once per process, where it counts)"
        )
        if args.profile:
            profile_single_appends(messages[:500], workdir)
    if problems:
        print("\nTOKEN COUNTING CHECK FAILED:\n  " + "\n  ".join(problems))
        return 1
    print(
        "\nToken counting check passed: in every counting-on run each event was tokenized exactly once, "
        "the characters tokenized equal the messages' countable text, and the stored token_count "
        "values match."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

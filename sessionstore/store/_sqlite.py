"""SQLite backend: one machine, many processes, WAL.

Concurrency: every write transaction starts with ``BEGIN IMMEDIATE``, which takes the
database's write lock up front. With the default deferred ``BEGIN`` two writers can both
read the session head and then both try to upgrade to a write lock; SQLite cannot wait for
that (it would deadlock) and fails one with SQLITE_BUSY immediately, ignoring busy_timeout.
IMMEDIATE makes the second writer wait (up to busy_timeout) instead, so a race yields a
clean ``ConcurrencyError``, never "database is locked". Reads use a deferred ``BEGIN`` and,
under WAL, never block writers. See https://sqlite.org/lang_transaction.html and
https://sqlite.org/wal.html.

Durability: ``synchronous=FULL`` by default (an acknowledged append survives power loss);
``NORMAL`` is an explicit opt-in (survives application crashes; the last commits may roll
back on power loss).

The file: connections open an existing file only (``mode=rw``; creating it is an explicit
step, see ``sessionstore.store._config``), so a file deleted while the store is open is never
silently recreated empty. Each connection remembers which file (device, inode) it opened, and
every write checks before and after COMMIT that the path still names that file: a deleted or
replaced file raises ``DatabaseFileGoneError`` instead of acknowledging writes that would be
lost with it. A file this process cannot write is opened read-only (``mode=ro``, or
``immutable=1`` when not even the -shm/-wal files can be created beside it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from sqlalchemy import Connection, Engine, Select, create_engine, event, literal_column
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import DatabaseFileGoneError, OperationalError, ValidationError
from ._driver import DriverSQL, sqlite_datetime, sqlite_timestamp
from ._sql import SqlSessionStore, translate_errors

__all__ = [
    "SQLiteDurability",
    "SQLiteSessionStore",
    "adopt_sqlite_engine",
    "configure_sqlite_engine",
    "create_async_sqlite_engine",
    "create_sqlite_engine",
    "sqlite_file",
    "writable",
]

SQLiteDurability = Literal["full", "normal"]

#: How long a writer waits for another writer's lock before failing (milliseconds).
BUSY_TIMEOUT_MS = 30_000
# RETURNING (used to learn assigned positions) arrived in SQLite 3.35.
_MIN_SQLITE = (3, 35, 0)
#: Connection-record key: the (device, inode) of the file the connection opened.
_FILE_ID = "sessionstore_file_id"


def sqlite_file(url: str) -> Path | None:
    """The database file of a plain SQLite file URL; None for in-memory or URI-style URLs."""
    parsed = make_url(url)
    database = parsed.database
    if not database or database == ":memory:" or parsed.query or database.startswith("file:"):
        return None
    return Path(database)


def writable(path: Path) -> bool:
    """True when this process can write the database: the file and the -wal/-shm files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _file_uri(path: Path, *, read_only: bool) -> str:
    """The URI that opens ``path`` without ever creating it."""
    if not read_only:
        mode = "mode=rw"
    elif os.access(path.parent, os.W_OK):
        mode = "mode=ro"
    else:
        # No -shm can be created beside it: only an immutable open reads a WAL database there.
        mode = "immutable=1"
    return f"file:{quote(str(path))}?{mode}"


def _configure_connection(dbapi_connection: sqlite3.Connection, *, synchronous: str, wal: bool) -> None:
    """sessionstore's PRAGMAs and transaction handling on one driver connection."""
    # Autocommit at the driver level: transactions begin with an explicit BEGIN (the engine's
    # "begin" listener), so the pysqlite module's own implicit BEGIN never runs.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    if wal:
        cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={synchronous}")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Deleted content is overwritten with zeros, so an erased session (and every snapshot
    # replaced before it) leaves no plaintext in free pages (docs/storage.md "Erasure").
    cursor.execute("PRAGMA secure_delete=ON")
    cursor.close()


#: Engines a host handed to ``open_store(engine=...)`` that ``adopt_sqlite_engine`` configured.
_ADOPTED: weakref.WeakSet[Engine] = weakref.WeakSet()
#: Connection-record key: sessionstore configured this (borrowed) connection.
_CONFIGURED = "sessionstore_configured"


def adopt_sqlite_engine(engine: Engine, *, durability: SQLiteDurability = "full") -> None:
    """Configure a host application's SQLite engine for sessionstore (once per engine).

    Its connections get the PRAGMAs sessionstore's own engines have (WAL, ``busy_timeout``,
    ``foreign_keys``, ``synchronous``) and real transactions: the pysqlite driver's implicit
    BEGIN is replaced by an explicit ``BEGIN`` when a transaction starts, as SQLAlchemy
    recommends for pysqlite. The host's own transactions begin deferred; sessionstore's writes
    ask for ``BEGIN IMMEDIATE`` (execution option ``sessionstore_write``), so they queue for the
    write lock instead of failing with "database is locked".

    Raises:
        ValidationError: the engine does not use the standard library's sqlite3 (pysqlite).
    """
    if engine.dialect.driver not in ("pysqlite", "aiosqlite"):
        driver = engine.dialect.driver
        msg = f"a SQLite engine for sessionstore must use sqlite3 (pysqlite, aiosqlite), not {driver}"
        raise ValidationError(msg, field="engine")
    if engine in _ADOPTED:
        return
    synchronous = _synchronous(durability)
    in_memory = sqlite_file(str(engine.url)) is None

    # Checkout rather than connect: connections the host's pool opened before are configured too.
    @event.listens_for(engine, "checkout")
    def _configure(dbapi_connection: sqlite3.Connection, record: Any, _proxy: object) -> None:
        if not record.info.get(_CONFIGURED):
            _configure_connection(dbapi_connection, synchronous=synchronous, wal=not in_memory)
            record.info[_CONFIGURED] = True

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        write = conn.get_execution_options().get("sessionstore_write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    _ADOPTED.add(engine)


def _synchronous(durability: SQLiteDurability) -> str:
    if durability not in ("full", "normal"):
        msg = f"durability must be 'full' or 'normal', not {durability!r}"
        raise ValueError(msg)
    return durability.upper()


def create_sqlite_engine(
    url: str, *, durability: SQLiteDurability = "full", read_only: bool = False
) -> Engine:
    """An engine whose every connection has sessionstore's PRAGMAs and begin modes.

    A file database must exist (see the module docstring); ``read_only`` opens it read-only.
    """
    in_memory = _check_sqlite(url, durability)
    engine = create_engine(url, **_engine_kwargs(in_memory))
    configure_sqlite_engine(engine, url, durability=durability, read_only=read_only)
    return engine


def create_async_sqlite_engine(
    url: str, *, durability: SQLiteDurability = "full", read_only: bool = False
) -> AsyncEngine:
    """``create_sqlite_engine`` on aiosqlite: the same file handling, PRAGMAs and begin modes."""
    in_memory = _check_sqlite(url, durability)
    # Imported here: ``import sessionstore`` does not load the asyncio extension.
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        make_url(url).set(drivername="sqlite+aiosqlite"), **_engine_kwargs(in_memory)
    )
    configure_sqlite_engine(engine.sync_engine, url, durability=durability, read_only=read_only)
    return engine


def _check_sqlite(url: str, durability: SQLiteDurability) -> bool:
    """Refuse an old SQLite or an unknown durability; True for an in-memory URL."""
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        msg = f"sessionstore needs SQLite >= 3.35 (RETURNING); this Python has {sqlite3.sqlite_version}"
        raise RuntimeError(msg)
    _synchronous(durability)
    return url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url


def _engine_kwargs(in_memory: bool) -> dict[str, Any]:
    if in_memory:
        # One connection shared by all threads, or every connection would get its own empty database.
        return {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    return {}


def configure_sqlite_engine(
    engine: Engine, url: str, *, durability: SQLiteDurability, read_only: bool
) -> None:
    """Give every connection of ``engine`` (a sync engine, or an async engine's ``sync_engine``)
    sessionstore's file URI, PRAGMAs and begin modes."""
    synchronous = _synchronous(durability)
    in_memory = url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url
    path = sqlite_file(url)
    if path is not None:
        uri = _file_uri(path, read_only=read_only)

        @event.listens_for(engine, "do_connect")
        def _open_existing(
            _dialect: object, _record: object, cargs: list[Any], cparams: dict[str, Any]
        ) -> None:
            cargs[:] = [uri]
            cparams["uri"] = True

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, record: Any) -> None:
        if path is not None and not read_only:
            record.info[_FILE_ID] = _file_id(path)
        _configure_connection(dbapi_connection, synchronous=synchronous, wal=not in_memory and not read_only)

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        if conn.get_execution_options().get("sessionstore_read"):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


#: Stores that may hold a writer connection, for the fork handler below.
_WRITER_STORES: weakref.WeakSet[SQLiteSessionStore] = weakref.WeakSet()
#: Writer connections a forked child inherited: never used, and never closed or collected there
#: (closing a SQLite connection in the child could checkpoint or remove the parent's WAL).
_INHERITED_WRITERS: list[Any] = []


def _forget_writers_in_child() -> None:
    """After ``fork``, in the child: every store drops its parent's writer connection and gets a
    fresh lock (the parent may have held it at the fork, and no thread of the child would ever
    release it)."""
    for store in list(_WRITER_STORES):
        if store._writer is not None:
            _INHERITED_WRITERS.append(store._writer)
        store._writer = None
        store._writer_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_writers_in_child)


class SQLiteSessionStore(SqlSessionStore):
    """The store on a SQLite file (or ``:memory:`` for throwaway use)."""

    dialect_insert = staticmethod(sqlite_insert)
    driver_sql = DriverSQL(
        mark="?",
        begin_write="BEGIN IMMEDIATE",  # see the module docstring: no SQLITE_BUSY under contention
        to_timestamp=sqlite_timestamp,
        to_datetime=sqlite_datetime,
        many_returning=False,  # sqlite3's executemany returns no rows ...
        # ... but BEGIN IMMEDIATE makes the positions of one batch consecutive.
        last_rowid="SELECT last_insert_rowid()",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The writer connection this store keeps (``_checkout_writer``), its owner process, and
        # the lock a write transaction holds while it uses it.
        self._writer: Any = None
        self._writer_pid = 0
        self._writer_lock = threading.Lock()
        _WRITER_STORES.add(self)

    def _checkout_writer(self) -> Any:
        """The store's own writer connection when it is free, else one from the pool.

        A pool checkout and its reset on return cost more CPU than the statements of a single
        append, so a store on a file it opened keeps one driver connection for its writes, out
        of the pool (``detach``). It serves one transaction at a time: a writer that finds it
        busy (another thread's append) takes a pooled connection, as every write did before, so
        threads wait for the database's write lock (``busy_timeout``), never for each other
        here. A forked child never uses its parent's connection (SQLite forbids carrying one
        across ``fork``): it opens its own. In-memory, async and borrowed engines use the pool.
        """
        if (
            self._file is None
            or self.in_greenlet
            or not self._owns_engine
            or not self._writer_lock.acquire(blocking=False)
        ):
            with self._gone_if_missing():
                return super()._checkout_writer()
        try:
            if self._writer is None or self._writer_pid != os.getpid():
                if self._writer is not None:  # a parent's: never used nor closed here
                    _INHERITED_WRITERS.append(self._writer)
                with self._gone_if_missing():
                    raw = self.engine.raw_connection()
                raw.detach()
                self._writer, self._writer_pid = raw, os.getpid()
        except BaseException:
            self._writer_lock.release()
            raise
        return self._writer

    def _release_writer(self, raw: Any) -> None:
        if raw is not self._writer:  # a pooled connection (only the lock holder has ours)
            super()._release_writer(raw)
            return
        if not raw.is_valid:  # invalidated after a failed rollback: open a fresh one next time
            self._writer = None
        self._writer_lock.release()

    def _release_connections(self) -> None:
        """Close the writer connection (after the write using it), then dispose of the pool."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
            if writer is not None and self._writer_pid == os.getpid():
                writer.close()
            elif writer is not None:  # a parent's (no fork handler ran): keep it from the collector
                _INHERITED_WRITERS.append(writer)
        super()._release_connections()

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._gone_if_missing(), super()._write() as conn:
            yield conn

    @contextlib.contextmanager
    def _gone_if_missing(self) -> Iterator[None]:
        """A write that fails while the store's file is missing: ``DatabaseFileGoneError``.

        A connection opened after the file was deleted fails with "unable to open database
        file" (files are opened ``mode=rw``, never created): the same loss as a write into the
        deleted file, reported the same way.
        """
        try:
            yield
        except (OperationalError, sa_exc.OperationalError, sqlite3.OperationalError) as e:
            path = self._file
            if isinstance(e, DatabaseFileGoneError) or path is None or _file_id(path) is not None:
                raise
            raise DatabaseFileGoneError(str(path), "deleted") from e

    @functools.cached_property
    def _file(self) -> Path | None:
        """The database file (None: in memory, or a URI), parsed once: every write checks it."""
        return sqlite_file(str(self.engine.url))

    def _check_file(self, info: Mapping[str, Any]) -> None:
        """Raise unless the path still names the file this connection writes to."""
        opened = info.get(_FILE_ID)
        if opened is None:  # in-memory, read-only, or a URI the store does not manage
            return
        path = self._file
        assert path is not None
        current = _file_id(path)
        if current != opened:
            raise DatabaseFileGoneError(str(path), "deleted" if current is None else "replaced")

    def _after_erase(self) -> None:
        """Move the erasure into the database file and empty the WAL, which still holds the
        pages as they were before it. Best effort: a reader holding an old snapshot keeps
        those pages in the WAL until it ends (the next checkpoint truncates them then)."""
        if sqlite_file(str(self.engine.url)) is None:
            return
        with self._lock, translate_errors():
            raw = self.engine.raw_connection()  # outside any transaction: a checkpoint needs that
            try:
                cursor = raw.cursor()
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                cursor.fetchall()
                cursor.close()
            finally:
                raw.close()

    def _read_snapshot(self, conn: Connection, newest: Select[Any]) -> tuple[int, bytes] | None:
        if self.in_greenlet:  # aiosqlite has no incremental blob I/O
            return super()._read_snapshot(conn, newest)
        # Incremental blob I/O copies the row's overflow pages straight into the result: a
        # SELECT assembles the value in SQLite first and copies it again (~2x slower at 100 MB).
        # Same connection and read transaction as the SELECT, so the row is the one it found.
        row = conn.execute(newest.add_columns(literal_column("rowid").label("rowid"))).first()
        if row is None:
            return None
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        with driver.blobopen(self.tables.snapshots.name, "state", int(row.rowid), readonly=True) as blob:
            return int(row.seq), blob.read()

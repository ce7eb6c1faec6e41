"""``open_store`` and ``open_async_store``: the one call that gives a ready store for a URL."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.pool import StaticPool

from ..errors import ValidationError
from ._config import (
    URL_ENV,
    create_async_engine_for_url,
    create_engine_for_url,
    is_sqlite_url,
    removed_if_open_fails,
    resolve_url,
    tables_for,
)
from ._contract import SessionStore
from ._crypto import KeyProvider, check_key_provider
from ._memory_copy import is_private_memory_url, load_migrated_copy, remember_migrated
from ._migrate import check_schema, upgrade
from ._postgres import PostgresSessionStore
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._schema import StoreTables
from ._sql import SqlSessionStore, naming_the_file
from ._sqlite import SQLiteDurability, SQLiteSessionStore, adopt_sqlite_engine
from ._tokens import TiktokenCounter, TokenCounter, check_token_counter

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ._async import AsyncSessionStore

__all__ = ["open_async_store", "open_store"]


class _Default:
    """Marker for "use the default token counter"."""


DEFAULT_COUNTER = _Default()


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    engine: Engine | None = None,
    table_prefix: str | None = None,
    schema: str | None = None,
    migrate: bool | None = None,
    token_counter: TokenCounter | _Default | None = DEFAULT_COUNTER,
    durability: SQLiteDurability = "full",
    retry: RetryPolicy = DEFAULT_RETRY,
    create: bool = True,
    encryption: KeyProvider | None = None,
    defer_token_counts: bool = True,
) -> SessionStore:
    """Open the store at ``url`` (see ``resolve_url`` for the default).

    Args:
        url: a SQLAlchemy URL, a SQLite file path, ``":memory:"``, or None for
            ``SESSIONSTORE_URL`` / the embedded default file. Its query may carry
            ``table_prefix`` and ``schema`` (below).
        engine: the host application's own SQLAlchemy ``Engine`` (psycopg 3 for PostgreSQL,
            sqlite3 for SQLite) instead of a URL: the store shares its pool and never disposes
            of it. A SQLite engine is configured as sessionstore's own are (docs/storage.md
            "Embedding"). Never migrated implicitly.
        table_prefix: put sessionstore's tables under this prefix (``agent_`` ->
            ``agent_events``, ...; its version table is ``agent_alembic_version``).
        schema: keep sessionstore's tables in this PostgreSQL schema (created by the upgrade).
        migrate: migrate the schema to this version first. None (the default) migrates
            the embedded default and in-memory databases only; a configured database
            must be migrated explicitly (``sessionstore db upgrade``) or with True.
        token_counter: counts tokens of appended events; None turns counting off.
        defer_token_counts: count an event's tokens when a read first needs them rather than
            inside its append (the default: the tokenizer costs more than the rest of an append).
            Such counts are stored outside the hash chain (docs/storage.md "Token counts");
            False counts inside the append and hashes the count with the event.
        durability: SQLite ``synchronous`` level, ``"full"`` (default) or ``"normal"``.
        retry: how transient failures (a dropped connection, a restarting PostgreSQL) are
            retried before ``StoreUnavailableError`` is raised; ``RetryPolicy(attempts=1)``
            turns retrying off.
        create: create a missing SQLite file (and its folder). False for a caller that only
            reads: a mistyped path then raises instead of leaving an empty database behind,
            and the embedded default is not migrated implicitly. A file this process cannot
            write is opened read-only whatever ``create`` says: reads and ``verify`` work,
            writes raise ``OperationalError``.
        encryption: a ``KeyProvider`` (``EnvKeyProvider``, ``FileKeyProvider``, a KMS of yours):
            every session this store creates is encrypted at rest with a data key of its own,
            wrapped by the provider's master key (docs/storage.md "Erasure and retention").

    Raises:
        ValidationError: ``retry`` is not a ``RetryPolicy``, or ``token_counter`` lacks part of
            ``TokenCounter`` (``name``, ``count``, ``count_text``); both ``url`` and ``engine``,
            an engine sessionstore cannot use, a prefix or schema that is not a plain lower-case
            name (or disagrees with the URL's), or a schema on SQLite.
        SchemaOutOfDateError: the database is not migrated and ``migrate`` is not set.
        DatabaseNotFoundError: ``create`` is False and there is no database file at ``url``.
        StoreUnavailableError: the database stayed unreachable for the whole retry policy.
    """
    if not isinstance(retry, RetryPolicy):
        msg = f"retry must be a RetryPolicy, not {type(retry).__name__}"
        raise ValidationError(msg, field="retry")
    if token_counter is not None and not isinstance(token_counter, _Default):
        check_token_counter(token_counter)
    if encryption is not None:
        check_key_provider(encryption)
    counter = TiktokenCounter() if isinstance(token_counter, _Default) else token_counter
    if engine is not None:
        if url is not None:
            msg = "open_store takes a url or an engine, not both"
            raise ValidationError(msg, field="engine")
        tables = tables_for(None, table_prefix=table_prefix, schema=schema)
        return _open_borrowed(
            engine,
            tables,
            counter,
            migrate=bool(migrate),
            durability=durability,
            retry=retry,
            encryption=encryption,
            defer_token_counts=defer_token_counts,
        )
    embedded = url is None and not os.environ.get(URL_ENV)
    resolved = resolve_url(url)
    tables = tables_for(resolved, table_prefix=table_prefix, schema=schema)
    in_memory = resolved == "sqlite://" or ":memory:" in resolved or "mode=memory" in resolved
    with removed_if_open_fails(resolved):
        own = create_engine_for_url(resolved, durability=durability, create=create)
        try:
            _prepare_schema(
                own,
                tables,
                retry,
                migrate=migrate or (migrate is None and (in_memory or (embedded and create))),
                fresh_memory=is_private_memory_url(resolved),
            )
        except BaseException:
            own.dispose()
            raise
    return _store_for(
        own,
        tables,
        counter,
        single_connection=in_memory,
        retry=retry,
        owns_engine=True,
        encryption=encryption,
        defer_token_counts=defer_token_counts,
    )


def _prepare_schema(
    engine: Engine,
    tables: StoreTables,
    retry: RetryPolicy,
    *,
    migrate: bool,
    sleep: Callable[[float], None] = time.sleep,
    fresh_memory: bool = False,
) -> None:
    """Migrate the schema (``migrate``) or check that it is current, under the retry policy.

    ``fresh_memory``: ``engine`` is a new private in-memory database, which starts as a copy of
    one migrated before in this process when there is one (store/_memory_copy.py).
    An error of a SQLite file that is not a database (or cannot be opened) names the file.
    """
    with naming_the_file(engine):
        if migrate:
            if fresh_memory and load_migrated_copy(engine, tables):
                return
            retry.run(lambda: upgrade(engine, tables=tables), what="schema upgrade", sleep=sleep)
            if fresh_memory:
                remember_migrated(engine, tables)
        else:
            retry.run(lambda: check_schema(engine, tables), what="schema check", sleep=sleep)


def _open_borrowed(
    engine: Engine,
    tables: StoreTables,
    counter: TokenCounter | None,
    *,
    migrate: bool,
    durability: SQLiteDurability,
    retry: RetryPolicy,
    encryption: KeyProvider | None,
    defer_token_counts: bool = True,
) -> SessionStore:
    """A store on the host application's engine (see ``open_store``)."""
    if not isinstance(engine, Engine):
        msg = f"engine must be a SQLAlchemy Engine, not {type(engine).__name__}"
        raise ValidationError(msg, field="engine")
    backend = engine.dialect.name
    if backend == "sqlite":
        adopt_sqlite_engine(engine, durability=durability)
    elif backend != "postgresql" or engine.dialect.driver != "psycopg":
        msg = f"sessionstore needs a sqlite3 or psycopg (3) engine, not {backend}+{engine.dialect.driver}"
        raise ValidationError(msg, field="engine")
    _prepare_schema(engine, tables, retry, migrate=migrate)
    # One shared connection (an in-memory database) must not interleave the store's transactions.
    single = isinstance(engine.pool, StaticPool)
    return _store_for(
        engine,
        tables,
        counter,
        single_connection=single,
        retry=retry,
        owns_engine=False,
        encryption=encryption,
        defer_token_counts=defer_token_counts,
    )


def _store_for(
    engine: Engine,
    tables: StoreTables,
    counter: TokenCounter | None,
    *,
    single_connection: bool,
    retry: RetryPolicy,
    owns_engine: bool,
    in_greenlet: bool = False,
    encryption: KeyProvider | None = None,
    defer_token_counts: bool = True,
) -> SqlSessionStore:
    if is_sqlite_url(str(engine.url)):
        return SQLiteSessionStore(
            engine,
            token_counter=counter,
            single_connection=single_connection,
            retry=retry,
            tables=tables,
            owns_engine=owns_engine,
            in_greenlet=in_greenlet,
            encryption=encryption,
            defer_token_counts=defer_token_counts,
        )
    return PostgresSessionStore(
        engine,
        token_counter=counter,
        retry=retry,
        tables=tables,
        owns_engine=owns_engine,
        in_greenlet=in_greenlet,
        encryption=encryption,
        defer_token_counts=defer_token_counts,
    )


async def open_async_store(
    url: str | os.PathLike[str] | None = None,
    *,
    engine: AsyncEngine | None = None,
    table_prefix: str | None = None,
    schema: str | None = None,
    migrate: bool | None = None,
    token_counter: TokenCounter | _Default | None = DEFAULT_COUNTER,
    durability: SQLiteDurability = "full",
    retry: RetryPolicy = DEFAULT_RETRY,
    create: bool = True,
    encryption: KeyProvider | None = None,
    defer_token_counts: bool = True,
) -> AsyncSessionStore:
    """``open_store`` for asyncio: the same arguments, migration rule and errors, giving an
    ``AsyncSessionStore`` on aiosqlite (SQLite) or psycopg 3's async mode (PostgreSQL).

    ``engine`` is the host application's own ``AsyncEngine`` (``sqlite+aiosqlite`` or
    ``postgresql+psycopg``), shared and never disposed of by the store.

    Raises:
        The same errors as ``open_store``; ``MissingDependencyError`` without aiosqlite (the
        ``async`` extra) for SQLite.
    """
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.util.concurrency import await_only, greenlet_spawn

    from ._async import AsyncSessionStore

    if not isinstance(retry, RetryPolicy):
        msg = f"retry must be a RetryPolicy, not {type(retry).__name__}"
        raise ValidationError(msg, field="retry")
    if token_counter is not None and not isinstance(token_counter, _Default):
        check_token_counter(token_counter)
    if encryption is not None:
        check_key_provider(encryption)
    counter = TiktokenCounter() if isinstance(token_counter, _Default) else token_counter

    def sleep(seconds: float) -> None:
        await_only(asyncio.sleep(seconds))

    if engine is not None:
        if url is not None:
            msg = "open_async_store takes a url or an engine, not both"
            raise ValidationError(msg, field="engine")
        if not isinstance(engine, AsyncEngine):
            msg = f"engine must be a SQLAlchemy AsyncEngine, not {type(engine).__name__}"
            raise ValidationError(msg, field="engine")
        tables = tables_for(None, table_prefix=table_prefix, schema=schema)
        backend, driver = engine.dialect.name, engine.dialect.driver
        if backend == "sqlite":
            adopt_sqlite_engine(engine.sync_engine, durability=durability)
        # postgresql+psycopg and postgresql+psycopg_async both give psycopg's async dialect here.
        elif backend != "postgresql" or driver not in ("psycopg", "psycopg_async"):
            msg = f"sessionstore needs an aiosqlite or psycopg (3) async engine, not {backend}+{driver}"
            raise ValidationError(msg, field="engine")
        await greenlet_spawn(
            _prepare_schema, engine.sync_engine, tables, retry, migrate=bool(migrate), sleep=sleep
        )
        single = isinstance(engine.sync_engine.pool, StaticPool)
        borrowed = _store_for(
            engine.sync_engine,
            tables,
            counter,
            single_connection=False,
            retry=retry,
            owns_engine=False,
            in_greenlet=True,
            encryption=encryption,
            defer_token_counts=defer_token_counts,
        )
        return AsyncSessionStore(engine, borrowed, single_connection=single)
    embedded = url is None and not os.environ.get(URL_ENV)
    resolved = resolve_url(url)
    tables = tables_for(resolved, table_prefix=table_prefix, schema=schema)
    in_memory = resolved == "sqlite://" or ":memory:" in resolved or "mode=memory" in resolved
    migrate_now = bool(migrate or (migrate is None and (in_memory or (embedded and create))))
    with removed_if_open_fails(resolved):
        own = create_async_engine_for_url(resolved, durability=durability, create=create)
        try:
            await greenlet_spawn(
                _prepare_schema, own.sync_engine, tables, retry, migrate=migrate_now, sleep=sleep
            )
        except BaseException:
            await own.dispose()
            raise
    store = _store_for(
        own.sync_engine,
        tables,
        counter,
        single_connection=False,
        retry=retry,
        owns_engine=True,
        in_greenlet=True,
        encryption=encryption,
        defer_token_counts=defer_token_counts,
    )
    return AsyncSessionStore(own, store, single_connection=in_memory)

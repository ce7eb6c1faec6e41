"""``open_store``: the one call that gives a ready store for a URL."""

from __future__ import annotations

import os

from sqlalchemy import Engine

from ..errors import ValidationError
from ._config import URL_ENV, create_engine_for_url, is_sqlite_url, resolve_url
from ._contract import SessionStore
from ._migrate import check_schema, upgrade
from ._postgres import PostgresSessionStore
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._sqlite import SQLiteDurability, SQLiteSessionStore
from ._tokens import TiktokenCounter, TokenCounter, check_token_counter

__all__ = ["open_store"]


class _Default:
    """Marker for "use the default token counter"."""


DEFAULT_COUNTER = _Default()


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    migrate: bool | None = None,
    token_counter: TokenCounter | _Default | None = DEFAULT_COUNTER,
    durability: SQLiteDurability = "full",
    retry: RetryPolicy = DEFAULT_RETRY,
    create: bool = True,
) -> SessionStore:
    """Open the store at ``url`` (see ``resolve_url`` for the default).

    Args:
        url: a SQLAlchemy URL, a SQLite file path, ``":memory:"``, or None for
            ``SESSIONSTORE_URL`` / the embedded default file.
        migrate: migrate the schema to this version first. None (the default) migrates
            the embedded default and in-memory databases only; a configured database
            must be migrated explicitly (``sessionstore db upgrade``) or with True.
        token_counter: counts tokens of appended events; None turns counting off.
        durability: SQLite ``synchronous`` level, ``"full"`` (default) or ``"normal"``.
        retry: how transient failures (a dropped connection, a restarting PostgreSQL) are
            retried before ``StoreUnavailableError`` is raised; ``RetryPolicy(attempts=1)``
            turns retrying off.
        create: create a missing SQLite file (and its folder). False for a caller that only
            reads: a mistyped path then raises instead of leaving an empty database behind,
            and the embedded default is not migrated implicitly. A file this process cannot
            write is opened read-only whatever ``create`` says: reads and ``verify`` work,
            writes raise ``OperationalError``.

    Raises:
        ValidationError: ``retry`` is not a ``RetryPolicy``, or ``token_counter`` lacks part of
            ``TokenCounter`` (``name``, ``count``, ``count_text``).
        SchemaOutOfDateError: the database is not migrated and ``migrate`` is not set.
        DatabaseNotFoundError: ``create`` is False and there is no database file at ``url``.
        StoreUnavailableError: the database stayed unreachable for the whole retry policy.
    """
    if not isinstance(retry, RetryPolicy):
        msg = f"retry must be a RetryPolicy, not {type(retry).__name__}"
        raise ValidationError(msg, field="retry")
    if token_counter is not None and not isinstance(token_counter, _Default):
        check_token_counter(token_counter)
    embedded = url is None and not os.environ.get(URL_ENV)
    resolved = resolve_url(url)
    engine = create_engine_for_url(resolved, durability=durability, create=create)
    in_memory = resolved == "sqlite://" or ":memory:" in resolved or "mode=memory" in resolved
    try:
        if migrate or (migrate is None and (in_memory or (embedded and create))):
            retry.run(lambda: upgrade(engine), what="schema upgrade")
        else:
            retry.run(lambda: check_schema(engine), what="schema check")
    except BaseException:
        engine.dispose()
        raise
    counter = TiktokenCounter() if isinstance(token_counter, _Default) else token_counter
    return _store_for(engine, counter, single_connection=in_memory, retry=retry)


def _store_for(
    engine: Engine, counter: TokenCounter | None, *, single_connection: bool, retry: RetryPolicy
) -> SessionStore:
    if is_sqlite_url(str(engine.url)):
        return SQLiteSessionStore(
            engine, token_counter=counter, single_connection=single_connection, retry=retry
        )
    return PostgresSessionStore(engine, token_counter=counter, retry=retry)

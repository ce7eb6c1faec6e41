"""Where the database is and how to open it.

Resolution order for the database URL: an explicit argument (``--db``), then the
``SESSIONSTORE_URL`` environment variable, then the embedded default — a SQLite file at
``$SESSIONSTORE_HOME/sessionstore.db``, where ``SESSIONSTORE_HOME`` defaults to the platform's
user data folder from ``platformdirs`` (``$XDG_DATA_HOME/sessionstore``, i.e.
``~/.local/share/sessionstore`` on Linux; ``~/Library/Application Support/sessionstore`` on
macOS; ``%LOCALAPPDATA%`` on Windows). A database already at the location earlier
versions used everywhere (``$XDG_DATA_HOME/sessionstore``, else ``~/.local/share/sessionstore``)
is kept in use while none exists at the platform's folder. A bare path is taken as a SQLite
file; ``postgresql://`` URLs use the psycopg 3 driver (the ``postgres`` extra).

Where sessionstore's tables are in that database (a table prefix; a PostgreSQL schema) can be
given in the URL's query (``?table_prefix=agent_&schema=agents``, see ``STORE_URL_OPTIONS``),
so ``SESSIONSTORE_URL`` and ``--db`` carry it; those parameters are sessionstore's and are
removed before the URL reaches the driver.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import DatabaseNotFoundError, OperationalError, ValidationError
from ._contract import check_lookup
from ._postgres import create_async_postgres_engine, create_postgres_engine
from ._schema import StoreTables, store_tables
from ._sqlite import (
    SQLiteDurability,
    create_async_sqlite_engine,
    create_sqlite_engine,
    sqlite_file,
    writable,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "STORE_URL_OPTIONS",
    "create_async_engine_for_url",
    "create_engine_for_url",
    "default_database_path",
    "is_sqlite_url",
    "resolve_url",
    "tables_for",
]

#: URL query parameters that say where sessionstore's tables are (not passed to the driver).
STORE_URL_OPTIONS = ("table_prefix", "schema")

URL_ENV = "SESSIONSTORE_URL"
HOME_ENV = "SESSIONSTORE_HOME"


_DATABASE_FILE = "sessionstore.db"


def _legacy_database_path() -> Path:
    """Where versions before platformdirs put the default database, on every platform."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "sessionstore" / _DATABASE_FILE


def default_database_path() -> Path:
    """The embedded default database file (not created by this call).

    ``$SESSIONSTORE_HOME/sessionstore.db`` when that is set; otherwise in the platform's user
    data folder, unless only the earlier default location holds a database (then that one).
    """
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser() / _DATABASE_FILE
    import platformdirs  # only the embedded default needs it

    platform = Path(platformdirs.user_data_dir("sessionstore", appauthor=False)) / _DATABASE_FILE
    legacy = _legacy_database_path()
    if legacy != platform and legacy.exists() and not platform.exists():
        return legacy
    return platform


def resolve_url(url: str | os.PathLike[str] | None) -> str:
    """The SQLAlchemy URL for ``url`` (argument, environment, or the embedded default).

    Raises:
        ValidationError: ``url`` is no str or path, or holds NUL or a lone surrogate (the OS
            refused it with TypeError or ValueError, or a file was created before the driver
            failed to encode its name); the message does not echo it (a password).
    """
    if url is not None and not isinstance(url, str | os.PathLike):
        raise ValidationError(f"url must be a str or a path, not {type(url).__name__}", field="url")
    chosen = os.environ.get(URL_ENV) if url is None else os.fspath(url)
    if chosen:  # the environment's value is checked as the argument is (it may name a path)
        chosen = check_lookup("url", chosen)
    if not chosen:
        return f"sqlite:///{default_database_path()}"
    if "://" not in chosen:
        if chosen == ":memory:":
            return "sqlite://"
        path = Path(chosen).expanduser()
        _exists(path)  # a link to nothing is refused before resolve() follows it to its target
        return f"sqlite:///{path.resolve()}"
    if chosen.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + chosen.split("://", 1)[1]
    return chosen


def _parse(url: str) -> URL:
    """``url`` parsed, or a ValidationError that does not echo a password."""
    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        scheme = url.split("://", 1)[0]
        msg = f"not a database URL: {scheme}://... (use a SQLite path or postgresql://user@host/db)"
        raise ValidationError(msg, field="url") from None


def _url_option(parsed: URL, name: str) -> str | None:
    value = parsed.query.get(name)
    if value is None or isinstance(value, str):
        return value
    msg = f"the database URL gives {name} more than once"
    raise ValidationError(msg, field=name)


def tables_for(url: str | None, *, table_prefix: str | None = None, schema: str | None = None) -> StoreTables:
    """The tables a store on ``url`` uses: the ``table_prefix`` and ``schema`` arguments, else the
    URL's query parameters of the same names, else none.

    Raises:
        ValidationError: an argument and the URL disagree, or a value is not a plain
            lower-case name (see ``store_tables``).
    """
    parsed = _parse(url) if url is not None else None
    chosen: dict[str, str | None] = {}
    for name, given in (("table_prefix", table_prefix), ("schema", schema)):
        in_url = _url_option(parsed, name) if parsed is not None else None
        if given is not None and in_url is not None and given != in_url:
            msg = f"{name} {given!r} disagrees with the database URL's {name}={in_url}"
            raise ValidationError(msg, field=name)
        chosen[name] = given if given is not None else in_url
    return store_tables(chosen["table_prefix"] or "", chosen["schema"] or None)


def _without_store_options(url: str) -> str:
    """``url`` without sessionstore's own query parameters (what the driver is given)."""
    parsed = _parse(url)
    if not any(name in parsed.query for name in STORE_URL_OPTIONS):
        return url
    return parsed.difference_update_query(STORE_URL_OPTIONS).render_as_string(hide_password=False)


def is_sqlite_url(url: str) -> bool:
    """True for any SQLite URL."""
    return _parse(url).get_backend_name() == "sqlite"


#: A path longer than this is shown shortened in messages (its start and end, and its length).
_SHOWN_PATH = 200


def shown_path(path: object) -> str:
    """``path`` for a message: as it is, or its first and last 64 characters when it is long
    (an error about a 5,000-character path does not repeat all of it)."""
    text = os.fspath(path) if isinstance(path, str | os.PathLike) else str(path)
    if len(text) <= _SHOWN_PATH:
        return text
    return f"{text[:64]}...{text[-64:]} ({len(text)} characters)"


def _create_file(path: Path) -> None:
    """An empty SQLite database file at ``path``, and its folder.

    Raises:
        OperationalError: the folder or file cannot be created (a file where a folder should
            be, no permission, a name too long ...), naming the path.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # an empty file is an empty SQLite database
    except OSError as e:
        where = e.filename or path
        shown, shown_where = shown_path(path), shown_path(where)
        at = "" if shown_where == shown else f" {shown_where}:"
        msg = f"cannot create the database {shown}:{at} {e.strerror or e}"
        raise OperationalError(msg) from e


def _exists(path: Path) -> bool:
    """True when there is a file at ``path``; a symbolic link to nothing is refused, not
    followed (SQLite would create the file it points at, somewhere else).

    Raises:
        OperationalError: a dangling link, or a path the system cannot look up (a name too long).
    """
    try:
        if path.exists():
            return True
        if path.is_symlink():
            target = os.readlink(path)
            msg = (
                f"the database path {shown_path(path)} is a symbolic link to {shown_path(target)}, "
                "which does not exist: nothing was created (point at the file itself, or create it)"
            )
            raise OperationalError(msg)
    except OSError as e:  # ENAMETOOLONG, EACCES on a folder ...
        msg = f"cannot open the database {shown_path(path)}: {e.strerror or e}"
        raise OperationalError(msg) from e
    return False


@contextlib.contextmanager
def removed_if_open_fails(url: str) -> Iterator[None]:
    """Opening a store at ``url`` leaves nothing behind when it fails: a SQLite file the block
    created (and the folders made for it) is removed again, while it still holds no table.

    A file that existed before, or that another process has put a schema in meanwhile, is kept.
    """
    path = sqlite_file(url) if is_sqlite_url(url) else None
    if path is None or os.path.lexists(path):
        yield
        return
    folders: list[Path] = []  # the folders that do not exist yet, deepest first
    folder = path.parent
    while folder != folder.parent and not os.path.lexists(folder):
        folders.append(folder)
        folder = folder.parent
    try:
        yield
    except BaseException:
        _remove_empty_database(path, folders)
        raise


def _remove_empty_database(path: Path, folders: list[Path]) -> None:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                return  # a schema: someone else's database now
    except sqlite3.Error:
        try:
            if os.path.getsize(path):
                return  # not a database the block made
        except OSError:
            return  # never made (a name too long ...), or already gone
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty: something else was put there
            folder.rmdir()


def create_engine_for_url(url: str, *, durability: SQLiteDurability = "full", create: bool = True) -> Engine:
    """An engine configured for sessionstore (PRAGMAs, begin modes, timeouts).

    A missing SQLite file (and its folder) is created only with ``create``; a file this
    process cannot write is opened read-only.

    Raises:
        DatabaseNotFoundError: the SQLite file does not exist and ``create`` is False.
        OperationalError: the SQLite file or its folder cannot be created.
        ValidationError: not a URL, or a backend sessionstore does not support.
    """
    url = _without_store_options(url)
    if _backend_of(url) == "postgresql":
        return create_postgres_engine(url)
    return create_sqlite_engine(url, durability=durability, read_only=_sqlite_read_only(url, create))


def create_async_engine_for_url(
    url: str, *, durability: SQLiteDurability = "full", create: bool = True
) -> AsyncEngine:
    """``create_engine_for_url`` for ``AsyncSessionStore``: aiosqlite, or psycopg's async mode.

    Raises:
        The same errors as ``create_engine_for_url``.
    """
    url = _without_store_options(url)
    if _backend_of(url) == "postgresql":
        return create_async_postgres_engine(url)
    return create_async_sqlite_engine(url, durability=durability, read_only=_sqlite_read_only(url, create))


def _backend_of(url: str) -> str:
    """``sqlite`` or ``postgresql``.

    Raises:
        ValidationError: not a URL, or another backend.
    """
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if backend in ("sqlite", "postgresql"):
        return backend
    msg = f"unsupported database {parsed.render_as_string(hide_password=True)}: use sqlite or postgresql"
    raise ValidationError(msg, field="url")


def _sqlite_read_only(url: str, create: bool) -> bool:
    """Create a missing SQLite file when asked; True when this process cannot write the file.

    Raises:
        DatabaseNotFoundError: the file does not exist and ``create`` is False.
        OperationalError: the file or its folder cannot be created.
    """
    path = sqlite_file(url)
    if path is None:
        return False
    if not _exists(path):
        if not create:
            raise DatabaseNotFoundError(str(path))
        _create_file(path)
    return not writable(path)

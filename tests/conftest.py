"""Shared fixtures: every storage test runs against each backend.

Backends: ``sqlite-file`` (a WAL file in tmp_path), ``sqlite-memory`` and ``postgres``
(a fresh schema per test in the server named by ``SESSIONSTORE_TEST_PG_URL``). Without that
variable the PostgreSQL cases skip, unless ``SESSIONSTORE_REQUIRE_PG=1`` (as in CI), where
they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import SessionStore

from ._templates import copy_migrated_sqlite, fill_migrated_schema, schema_is_empty
from .messages_api import MessagesAPIServer

# Hypothesis profiles, chosen with `pytest --hypothesis-profile NAME`:
# - ci: the same examples on every run (derandomized), no deadline (CI machines are slow and shared)
#   and no example database, so a run never depends on what an earlier run found. .ci/run uses it.
# - explore: ten times the examples, randomized, for a developer hunting new failures locally.
#   Every failure found becomes an explicit @example or a plain test.
# Tests that set max_examples scale it through tests.strategies.examples().
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker is given COLUMNS=80 and LINES=24 (the size of no terminal: its
    output is a pipe); the CLI's output off a terminal must be as wide there as in one process."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``SESSIONSTORE_EXPECT_INSTALLED`` (a virtualenv's folder), refuse to test any
    sessionstore but the one installed there: .ci/run tests the built wheel that way."""
    expected = os.environ.get("SESSIONSTORE_EXPECT_INSTALLED")
    if expected and not Path(sessionstore.__file__).resolve().is_relative_to(Path(expected).resolve()):
        raise pytest.UsageError(f"sessionstore was imported from {sessionstore.__file__}, not {expected}")


PG_URL = os.environ.get("SESSIONSTORE_TEST_PG_URL")
REQUIRE_PG = os.environ.get("SESSIONSTORE_REQUIRE_PG") == "1"


def _need_pg() -> str:
    if PG_URL:
        return PG_URL
    if REQUIRE_PG:
        pytest.fail("SESSIONSTORE_REQUIRE_PG=1 but SESSIONSTORE_TEST_PG_URL is not set")
    pytest.skip("PostgreSQL not configured (set SESSIONSTORE_TEST_PG_URL)")


@dataclass
class Backend:
    """A database for one test: its URL, and how to open stores on it.

    ``api`` is ``sync`` (``open_store``) or ``async``: then ``open`` returns the sync contract
    over an ``AsyncSessionStore`` (tests/_async_adapter.py), so one test body checks both.
    """

    name: str
    url: str
    api: str = "sync"
    #: Makes the empty database a copy of a migrated one (tests/_templates.py), run before the
    #: first ``open`` that would migrate it with sessionstore's default tables; True if it did.
    copy_migrated: Callable[[], bool] | None = field(default=None, repr=False)

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgres"

    @property
    def shareable(self) -> bool:
        """True when other connections and processes can open the same database."""
        return self.name != "sqlite-memory"

    def open(self, **kwargs: object) -> SessionStore:
        kwargs.setdefault("migrate", True)
        copy_migrated, self.copy_migrated = self.copy_migrated, None
        if copy_migrated is not None and kwargs["migrate"] is True and _SCHEMA_NEUTRAL.issuperset(kwargs):
            copy_migrated()
        if self.api == "async":
            from ._async_adapter import AsyncStoreOnThread

            return AsyncStoreOnThread(self.url, **kwargs)
        return sessionstore.open_store(self.url, **kwargs)  # type: ignore[arg-type]


#: ``open`` arguments that leave the tables as a plain migration makes them.
_SCHEMA_NEUTRAL = frozenset(
    {"migrate", "token_counter", "encryption", "defer_token_counts", "retry", "durability"}
)


def _pg_schema_backend(base_url: str, api: str = "sync") -> Iterator[Backend]:
    """A fresh PostgreSQL schema selected through the URL's search_path; dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(sessionstore.store.resolve_url(base_url), pool_pre_ping=True)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in base_url else "?"
    url = f"{sessionstore.store.resolve_url(base_url)}{sep}options={quote(f'-csearch_path={schema}')}"

    def copy_migrated() -> bool:
        return schema_is_empty(admin, schema) and fill_migrated_schema(admin, schema)

    try:
        yield Backend("postgres", url, api, copy_migrated)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


BACKENDS = ["sqlite-file", "sqlite-memory", pytest.param("postgres", marks=pytest.mark.postgres)]
SHARED_BACKENDS = ["sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]


def _make_backend(name: str, tmp_path: Path, api: str = "sync") -> Iterator[Backend]:
    if name == "sqlite-file":
        path = tmp_path / "store.db"

        def copy_migrated() -> bool:
            if path.exists():
                return False
            copy_migrated_sqlite(path)
            return True

        yield Backend(name, f"sqlite:///{path}", api, copy_migrated)
    elif name == "sqlite-memory":
        yield Backend(name, "sqlite://", api)
    else:
        yield from _pg_schema_backend(_need_pg(), api)


STORE_APIS = ["sync", "async"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests marked ``store_contract`` against the sync and the async store."""
    contract = metafunc.definition.get_closest_marker("store_contract")
    if "store_api" not in metafunc.fixturenames or not contract:
        return
    chosen_by_the_test = any(
        "store_api" in str(marker.args[0]) for marker in metafunc.definition.iter_markers("parametrize")
    )
    if not chosen_by_the_test:
        metafunc.parametrize("store_api", STORE_APIS, indirect=True)


@pytest.fixture
def store_api(request: pytest.FixtureRequest) -> str:
    """``sync``, or ``async`` for a ``store_contract`` test's async run."""
    return str(getattr(request, "param", "sync"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path, store_api: str) -> Iterator[Backend]:
    """Each backend in turn, with an empty, unmigrated database."""
    yield from _make_backend(request.param, tmp_path, store_api)


@pytest.fixture(params=SHARED_BACKENDS)
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path, store_api: str) -> Iterator[Backend]:
    """Backends that several connections or processes can share (no :memory:)."""
    yield from _make_backend(request.param, tmp_path, store_api)


@pytest.fixture
def pg_backend(tmp_path: Path, store_api: str) -> Iterator[Backend]:
    """PostgreSQL only."""
    yield from _make_backend("postgres", tmp_path, store_api)


@pytest.fixture
def store(backend: Backend) -> Iterator[SessionStore]:
    """A migrated store on each backend, closed after the test."""
    opened = backend.open()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def shared_store(shared_backend: Backend) -> Iterator[SessionStore]:
    """A migrated store on a shareable database (SQLite in a file, PostgreSQL), closed after the test."""
    opened = shared_backend.open()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def open_store(backend: Backend) -> Iterator[Callable[..., SessionStore]]:
    """Open more stores on the test's database; all are closed after the test."""
    opened: list[SessionStore] = []

    def _open(**kwargs: object) -> SessionStore:
        result = backend.open(**kwargs)
        opened.append(result)
        return result

    yield _open
    for item in opened:
        item.close()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's real embedded database."""
    monkeypatch.setenv("SESSIONSTORE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)


@pytest.fixture
def messages_api() -> Iterator[MessagesAPIServer]:
    """A Messages API server on loopback for the real anthropic SDK."""
    with MessagesAPIServer() as server:
        yield server

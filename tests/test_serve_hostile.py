"""Hostile requests to ``sessionstore serve``: whatever a client sends, a 4xx answer in the
documented shape (a JSON error from the API, an error page from the viewer), never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sessionstore import MessageAppended, SessionStore
from sessionstore.serve import create_app

from .serve_support import local_client


@pytest.fixture
def hostile_client(shared_store: SessionStore) -> Iterator[TestClient]:
    """A client of a server over a store (SQLite and PostgreSQL) holding one session."""
    shared_store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])
    with local_client(create_app(shared_store), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize(
    "path",
    [
        "/api/sessions/a%00b",
        "/api/sessions/%00/events",
        "/api/sessions/a%00b/turns/1",
        "/api/sessions?after=a%00b",
        "/sessions/a%00b",
        "/sessions/a%00b/turns/1",
        "/?after=%00",
    ],
)
def test_a_nul_in_an_id_or_a_cursor_is_a_client_error(hostile_client: TestClient, path: str) -> None:
    """PostgreSQL text cannot hold a NUL: a lookup with one is the caller's error (or finds
    nothing), as on SQLite, not a 500 DatabaseError."""
    response = hostile_client.get(path)

    assert response.status_code < 500, response.text
    if path.startswith("/api/") and response.status_code >= 400:
        assert response.json()["error"]["type"] in {"SessionNotFoundError", "ValidationError"}

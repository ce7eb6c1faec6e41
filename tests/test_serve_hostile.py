"""Hostile requests to ``sessionstore serve``: whatever a client sends, a 4xx answer in the
documented shape (a JSON error from the API, an error page from the viewer), never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sessionstore import MessageAppended, SessionStore, open_store
from sessionstore.serve import create_app

from .serve_support import TOKEN, local_client


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


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """A client of a read-only server over a SQLite store holding session ``s-1``."""
    with open_store(f"sqlite:///{tmp_path / 'h.db'}", migrate=True) as store:
        store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])
        with local_client(create_app(store), raise_server_exceptions=False) as test_client:
            yield test_client


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("GET", "/api/nope", 404, "NotFound"),
        ("GET", "/api/sessions/s-1/nope", 404, "NotFound"),
        ("POST", "/api/sessions/s-1/erase", 404, "NotFound"),  # read-only: no write endpoint
        ("DELETE", "/api/sessions/s-1", 405, "MethodNotAllowed"),
        ("POST", "/api/sessions", 405, "MethodNotAllowed"),
    ],
)
def test_an_unknown_path_or_method_is_an_api_error(
    client: TestClient, method: str, path: str, status: int, kind: str
) -> None:
    """The API's error shape (docs/viewer.md "Errors"), not the framework's ``{"detail": ...}``;
    a 405 names the methods the path takes."""
    response = client.request(method, path)

    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == kind
    assert path in error["message"]
    if status == 405:
        assert response.headers["allow"] == "GET"
        assert "it takes GET" in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("GET", "/nope/<script>x</script>", 404, "NotFound"),
        ("DELETE", "/sessions/s-1", 405, "MethodNotAllowed"),
        ("POST", "/sessions/s-1/context", 405, "MethodNotAllowed"),
    ],
)
def test_an_unknown_page_or_method_is_an_error_page(
    client: TestClient, method: str, path: str, status: int, kind: str
) -> None:
    """The viewer answers with its error page (escaped), as for the library's errors."""
    response = client.request(method, path)

    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert f"<h1>{kind}</h1>" in response.text
    assert "<script>x" not in response.text


def test_a_sign_in_field_over_the_size_limit_is_an_error_page(tmp_path: Path) -> None:
    """The form parser refuses a field over 1 MB (before the token is compared): a 400 page."""
    with open_store(f"sqlite:///{tmp_path / 'l.db'}", migrate=True) as store:
        client = local_client(create_app(store, token=TOKEN), raise_server_exceptions=False)
        response = client.post("/login", data={"token": "x" * 2_000_000})

    assert response.status_code == 400
    assert "<h1>BadRequest</h1>" in response.text
    assert "maximum size" in response.text


@pytest.mark.parametrize(
    "path", ["/api/sessions", "/api/sessions/s-1/events", "/", "/sessions/s-1", "/api/nope"]
)
def test_head_answers_as_get_without_the_body(client: TestClient, path: str) -> None:
    """Every GET path takes HEAD (HTTP requires it of a server): GET's status and headers."""
    got = client.get(path)
    head = client.head(path)

    assert head.status_code == got.status_code
    assert head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"]
    assert head.headers["content-type"] == got.headers["content-type"]

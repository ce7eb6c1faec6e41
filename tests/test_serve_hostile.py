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


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[TestClient]:
    """A client without the token of a server with writes on (and so a token)."""
    with open_store(f"sqlite:///{tmp_path / 'g.db'}", migrate=True) as store:
        store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])
        with local_client(create_app(store, write=True, token=TOKEN)) as test_client:
            yield test_client


def test_the_sign_in_form_takes_a_multipart_upload_from_no_one(guarded: TestClient) -> None:
    """Anyone may post to /login: a multipart body (a file part is spooled to disk whole, as
    large as the client sends) is refused before it is read."""
    response = guarded.post("/login", files={"token": ("t.bin", TOKEN.encode())})

    assert response.status_code == 415
    assert "<h1>UnsupportedMediaType</h1>" in response.text
    assert "set-cookie" not in response.headers


def test_the_sign_in_form_reads_a_bounded_body(guarded: TestClient) -> None:
    """A body past ``SIGN_IN_LIMIT`` is refused as it streams in (never held whole)."""
    chunks = (b"token=" + b"x" * 65_536 for _ in range(64))  # 4 MB, sent a chunk at a time
    response = guarded.post(
        "/login", content=chunks, headers={"content-type": "application/x-www-form-urlencoded"}
    )

    assert response.status_code == 413
    assert "<h1>PayloadTooLarge</h1>" in response.text


@pytest.mark.parametrize("body", [{"token": "not-the-token-at-all"}, {"token": ""}, {"other": TOKEN}])
def test_a_wrong_or_missing_token_is_a_failed_sign_in(guarded: TestClient, body: dict[str, str]) -> None:
    response = guarded.post("/login", data=body)

    assert response.status_code == 401
    assert 'id="login-failed"' in response.text
    assert "set-cookie" not in response.headers


def test_the_sign_in_form_sets_the_cookie(guarded: TestClient) -> None:
    """The right token (percent-encoded as a browser sends it) signs in; the cookie then reads."""
    response = guarded.post("/login", data={"token": TOKEN, "other": "é&="}, follow_redirects=False)

    assert response.status_code == 303
    assert guarded.get("/api/sessions").status_code == 200


def test_a_body_the_json_parser_gives_up_on_is_a_bad_request(guarded: TestClient) -> None:
    """JSON nested 100,000 deep: 400 in the API's error shape, not the framework's."""
    response = guarded.post(
        "/api/sessions/s-1/events",
        content=b"[" * 100_000 + b"]" * 100_000,
        headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"},
    )

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequest"


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


def test_an_error_about_the_database_file_does_not_name_its_path(tmp_path: Path) -> None:
    """The file deleted under a server with writes on: 503 saying so, without the server's path."""
    path = tmp_path / "secret-folder" / "gone.db"
    path.parent.mkdir()
    with open_store(f"sqlite:///{path}", migrate=True) as store:
        store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])
    with open_store(f"sqlite:///{path}", create=False) as store:
        client = local_client(
            create_app(store, write=True, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert client.get("/api/sessions/s-1").status_code == 200
        path.unlink()
        response = client.post(
            "/api/sessions/s-1/events",
            json={"events": [{"type": "message_appended", "role": "user", "content": "more"}]},
        )

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "DatabaseFileGoneError"
    assert error["message"].startswith("database file (path withheld) was deleted while open")
    assert "secret-folder" not in response.text


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        (
            "events",
            {"events": [{"type": "message_appended", "role": "user", "content": "x"}], "expected": True},
            "expected",
        ),
        (
            "events",
            {"events": [{"type": "message_appended", "role": "user", "content": "x"}], "expected": "2"},
            "expected",
        ),
        ("snip", {"rounds": True}, "rounds"),
        ("erase", {"reason": "test", "with_forks": 1}, "with_forks"),
        ("erase", {"reason": "test", "withforks": True}, "withforks"),
        ("revert", {"event_id": "x", "recompact": "yes"}, "recompact"),
    ],
)
def test_a_write_body_is_taken_as_written_or_refused(
    guarded: TestClient, action: str, body: dict[str, object], field: str
) -> None:
    """``true`` is no seq (the store refuses a bool), ``1`` no flag, and a misspelt field is an
    error, not left out: 422 naming the field, and nothing is written."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = guarded.get("/api/sessions/s-1/events", headers=auth).json()["events"]

    response = guarded.post(f"/api/sessions/s-1/{action}", json=body, headers=auth)

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "ValidationError"
    assert error["field"].startswith(f"body.{field}")
    assert guarded.get("/api/sessions/s-1/events", headers=auth).json()["events"] == before

"""Hostile requests to ``sessionstore serve``: whatever a client sends, a 4xx answer in the
documented shape (a JSON error from the API, an error page from the viewer), never a 500."""

from __future__ import annotations

import io
import itertools
import json
import re
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sessionstore import MessageAppended, SessionStore, open_store
from sessionstore.audit import audit
from sessionstore.cli import _commands as cli_commands
from sessionstore.cli import main
from sessionstore.serve import ServeLimits, create_app
from sessionstore.serve._safety import COOKIE
from sessionstore.store import LocalKeyProvider

from .serve_support import TOKEN, Collapsed, build_collapsed, local_client

MIB = 1024 * 1024


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


# --- Another origin on this machine (a page on another port of 127.0.0.1 is the same site) ---


@pytest.fixture
def signed_in(tmp_path: Path) -> Iterator[tuple[TestClient, SessionStore, Collapsed]]:
    """A browser-like client signed in to a server with writes on, over a collapsed session."""
    with open_store(f"sqlite:///{tmp_path / 'c.db'}", migrate=True) as store:
        collapsed = build_collapsed(store)
        with local_client(create_app(store, write=True, token=TOKEN)) as test_client:
            assert test_client.post("/login", data={"token": TOKEN}).status_code == 200
            yield test_client, store, collapsed


def _reverted(store: SessionStore, collapsed: Collapsed) -> bool:
    entry = next(
        e for e in audit(store, collapsed.session_id).entries if e.event_id == collapsed.committed_event_id
    )
    return entry.reverted_by is not None


def _form_token(client: TestClient, collapsed: Collapsed) -> str:
    page = client.get(f"/sessions/{collapsed.session_id}").text
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "the revert form carries no form token"
    return found[1]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"},
        {"Origin": "http://127.0.0.1:9999"},  # a browser without Sec-Fetch-*
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},  # a sandboxed frame
        {"Origin": "http://localhost"},  # another name of this machine, another origin
        {"Origin": "http://127.0.0.1:8443"},  # another port: not this server's
        {"Origin": "http://127.0.0.1.evil.example"},
        {"Origin": "http://127.0.0.1/path"},
    ],
)
def test_a_form_posted_from_another_origin_changes_nothing(
    signed_in: tuple[TestClient, SessionStore, Collapsed], headers: dict[str, str]
) -> None:
    """The cookie goes along with a same-site request: the origin is what is checked, even with
    the right form token."""
    client, store, collapsed = signed_in
    form = {"event_id": collapsed.committed_event_id, "csrf": _form_token(client, collapsed)}

    response = client.post(f"/sessions/{collapsed.session_id}/revert", data=form, headers=headers)

    assert response.status_code == 403
    assert "<h1>CrossOriginRefused</h1>" in response.text
    assert not _reverted(store, collapsed)


@pytest.mark.parametrize("csrf", [None, "", "0" * 64])
def test_the_revert_form_needs_the_sign_ins_form_token(
    signed_in: tuple[TestClient, SessionStore, Collapsed], csrf: str | None
) -> None:
    """A form without this sign-in's token (a page that could post but not read the viewer's
    pages) is refused, and nothing is reverted."""
    client, store, collapsed = signed_in
    form = {"event_id": collapsed.committed_event_id, **({} if csrf is None else {"csrf": csrf})}

    response = client.post(f"/sessions/{collapsed.session_id}/revert", data=form)

    assert response.status_code == 403
    assert not _reverted(store, collapsed)


def test_the_viewers_own_form_reverts(signed_in: tuple[TestClient, SessionStore, Collapsed]) -> None:
    """Same origin, with the form token the page carries: the revert is done."""
    client, store, collapsed = signed_in
    form = {"event_id": collapsed.committed_event_id, "csrf": _form_token(client, collapsed)}
    origin = {"Origin": "http://127.0.0.1", "Sec-Fetch-Site": "same-origin"}

    response = client.post(
        f"/sessions/{collapsed.session_id}/revert", data=form, headers=origin, follow_redirects=False
    )

    assert response.status_code == 303
    assert _reverted(store, collapsed)


def test_the_api_writes_take_the_bearer_token_not_the_cookie(
    signed_in: tuple[TestClient, SessionStore, Collapsed],
) -> None:
    """A page can make the browser send the cookie, never an Authorization header: the cookie
    alone writes nothing through the API."""
    client, store, collapsed = signed_in

    response = client.post(
        f"/api/sessions/{collapsed.session_id}/revert", json={"event_id": collapsed.committed_event_id}
    )

    assert response.status_code == 401
    assert client.get(f"/api/sessions/{collapsed.session_id}").status_code == 200
    assert not _reverted(store, collapsed)


# --- The Host header, parsed strictly ---


@pytest.mark.parametrize(
    "host",
    [
        "localhost:80@evil.example",
        "127.0.0.1:80@evil.example",
        "localhost:80:80",
        "localhost:99999",
        "localhost:0",
        "localhost:+80",
        "localhost: 80",
        "localhost:",
        "localhost:\u0668\u0660",  # Arabic-Indic digits: int() takes them
        "user@localhost",
        "localhost/evil.example",
        "localhost#evil.example",
        "[::1",
        "[::1]x",
        "[::1]:80@evil.example",
        "[evil.example]",
        "",
    ],
)
def test_a_host_header_that_is_not_host_and_port_is_refused(client: TestClient, host: str) -> None:
    """Without a token, only ``host[:port]`` naming the loopback is served: anything after it
    (userinfo, a second port, a path) makes it a foreign name."""
    response = client.get("/api/sessions", headers={b"Host": host.encode()})

    assert response.status_code == 421
    assert response.json()["error"]["type"] == "HostRefused"


# --- Bounded bodies, pages and turns; throttled tokens ---


def test_a_body_announced_past_the_limit_is_refused_unread(guarded: TestClient) -> None:
    """A 100 MB ``Content-Length``: 413 before any of it is read."""
    response = guarded.post(
        "/api/sessions/s-1/events",
        content=b"{}",
        headers={
            "authorization": f"Bearer {TOKEN}",
            "content-type": "application/json",
            "content-length": str(100 * MIB),
        },
    )

    assert response.status_code == 413
    assert response.json()["error"]["type"] == "PayloadTooLarge"
    assert response.headers["connection"] == "close"


def test_a_streamed_body_past_the_limit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """No ``Content-Length`` (chunked): refused once it passes the limit, nothing appended."""
    with open_store(f"sqlite:///{tmp_path / 'b.db'}", migrate=True) as store:
        store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])
        app = create_app(store, write=True, token=TOKEN, limits=ServeLimits(max_body_bytes=MIB))
        event = json.dumps({"type": "message_appended", "role": "user", "content": "x" * 1000}).encode()
        chunks = (b'{"events": [' + b",".join([event] * 100) + b"," for _ in range(20))  # 2 MB
        with local_client(app) as client:
            response = client.post(
                "/api/sessions/s-1/events",
                content=itertools.chain(chunks, [event + b"]}"]),
                headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
            )

        assert response.status_code == 413
        assert store.last_seq("s-1") == 1


def test_an_append_of_too_many_events_is_refused_whole(guarded: TestClient) -> None:
    """400,001 (empty) events fit in the body limit: refused by count (422 on ``events``)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}

    response = guarded.post("/api/sessions/s-1/events", json={"events": [{}] * 400_001}, headers=auth)

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "events"
    assert "at most 10,000 events" in error["message"]
    assert len(guarded.get("/api/sessions/s-1/events", headers=auth).json()["events"]) == 1


def test_a_page_of_large_events_is_bounded_by_bytes(shared_store: SessionStore) -> None:
    """60 asked, each event 1.2 MB: the page stops at ``page_bytes`` (4 MiB) and says where to go
    on; the server holds about the page, not the 28 MB the events hold (SQLite and PostgreSQL)."""
    big = "compressible " * 90_000  # 1.2 MB, stored packed
    shared_store.create_session("big", events=[MessageAppended(role="user", content=big) for _ in range(24)])
    with local_client(create_app(shared_store)) as client:
        client.get("/api/sessions/big/events?limit=60")  # the first read counts their tokens
        tracemalloc.start()
        try:
            first = client.get("/api/sessions/big/events?limit=60")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        page = first.json()
        rest = client.get(f"/api/sessions/big/events?limit=60&after_seq={page['next_after_seq']}").json()

    assert len(page["events"]) == 4
    assert page["next_after_seq"] == 4
    assert rest["events"][0]["seq"] == 5
    assert peak < 24 * MIB, f"peak {peak / MIB:.0f} MiB"


@pytest.mark.parametrize("turn", [10**30, 2**63 - 1, 3, 0])
def test_an_impossible_turn_is_refused_before_the_log_is_read(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, turn: int
) -> None:
    """A turn past the session's last seq (each turn is one event) is refused at once: no event
    is read (a 200,018-event session took 96 s to refuse 10**30), on the API and the page."""
    store = client.app.state.store  # type: ignore[attr-defined]
    reads: list[object] = []
    original = store.read

    def read(*args: object, **kwargs: object) -> object:
        reads.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "read", read)

    api = client.get(f"/api/sessions/s-1/turns/{turn}")
    page = client.get(f"/sessions/s-1/turns/{turn}")
    diff = client.get(f"/api/sessions/s-1/diff?from=1&to={turn}")

    assert api.status_code == page.status_code == diff.status_code == 422
    assert api.json()["error"]["field"] == "turn"
    assert reads == []


def test_the_command_refuses_an_impossible_turn_before_folding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sessionstore served --turn 10**30``: refused before the session is folded."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    with open_store(url, migrate=True) as store:
        store.create_session("s-1", events=[MessageAppended(role="user", content="hello")])

    def folded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the session was folded")

    monkeypatch.setattr(cli_commands, "Session", folded)

    status = main(["served", "--db", url, "s-1", "--turn", str(10**30)], out=io.StringIO())

    assert status == 1
    assert "turn must be" in capsys.readouterr().err


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("how", ["bearer", "cookie", "sign-in"])
def test_wrong_tokens_are_throttled_per_client(tmp_path: Path, how: str) -> None:
    """After ``auth_failures`` wrong tokens within ``auth_window`` s, 429 with Retry-After, for
    the right token too, until the window has passed."""
    clock = _Clock()
    limits = ServeLimits(auth_failures=3, auth_window=60.0)
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", migrate=True) as store:
        app = create_app(store, token=TOKEN, limits=limits, clock=clock)
        with local_client(app) as client:

            def wrong() -> int:
                if how == "bearer":
                    return client.get("/api/sessions", headers={"Authorization": "Bearer x" * 3}).status_code
                if how == "cookie":
                    client.cookies.set(COOKIE, "forged.0000")
                    status = client.get("/api/sessions").status_code
                    client.cookies.clear()
                    return status
                return client.post("/login", data={"token": "not-the-token-at-all"}).status_code

            def right() -> tuple[int, str | None]:
                answer = client.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
                return answer.status_code, answer.headers.get("retry-after")

            first = [wrong() for _ in range(3)]
            clock.now += 30
            throttled = [wrong(), right()]
            clock.now += 31
            after = right()

    assert first == [401] * 3
    assert throttled == [429, (429, "30")]
    assert after == (200, None)


def test_an_encrypted_session_without_the_key_is_locked_not_a_server_error(tmp_path: Path) -> None:
    """Served without the master key: 423 saying why, not a 500."""
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with open_store(url, migrate=True, encryption=LocalKeyProvider(bytes(range(32)))) as store:
        store.create_session("secret", events=[MessageAppended(role="user", content="hello")])
    with open_store(url, create=False) as store, local_client(create_app(store)) as client:
        api = client.get("/api/sessions/secret/events")
        page = client.get("/sessions/secret")

    assert api.status_code == page.status_code == 423
    assert api.json()["error"]["type"] == "EncryptionKeyError"
    assert "is encrypted" in api.json()["error"]["message"]
    assert "<h1>EncryptionKeyError</h1>" in page.text

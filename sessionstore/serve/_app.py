"""The ASGI app: the JSON API, the viewer, the token check and the error translation."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable

from fastapi import BackgroundTasks, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import SessionStoreError
from ..store import SessionStore
from ._api import include_api
from ._errors import error_body, http_status, withheld
from ._limits import DEFAULT_LIMITS, BodyLimit, ServeLimits
from ._safety import (
    COOKIE,
    SAFE_METHODS,
    AuthThrottle,
    cookie_session,
    cross_origin,
    csrf_token,
    loopback_host,
    token_matches,
)
from ._views import SIGN_IN_LIMIT, include_views, render

__all__ = ["create_app"]

#: Pages may load scripts, styles and images from this server only, and no one may frame them.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": under it a browser sends ``Origin: null`` with the viewer's own forms,
    # and the origin check (``cross_origin``) must see their origin. Other sites get no referrer.
    "Referrer-Policy": "same-origin",
}

#: Reachable without the token: the sign-in form and what it loads.
_OPEN_PATHS = ("/login", "/static/viewer.css")
#: How often the token counts the server's reads made are stored (``CountKeeper``).
COUNTS_EVERY_SECONDS = 30.0

#: The error ``type`` of the HTTP errors the routing itself answers (any other: ``HTTPError``).
HTTP_ERRORS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed"}
#: Headers of an answer to a request the client should not repeat at once (429).
_RETRY_AFTER = "Retry-After"

#: Under the library's logger, as each layer's is (docs/storage.md "Logging").
_LOG = logging.getLogger("sessionstore.serve")


class CountKeeper:
    """Stores the token counts the server's reads made, at most every ``every`` seconds.

    A read counts the events nobody counted yet (docs/storage.md "Token counts") and the store
    keeps those counts in memory until a write of the same session or ``close()``; a server only
    reads, so without this every other process would count the same events again, and this one
    would hold them until it stops. Run after a response is sent; one at a time. When the store
    cannot write them (a read-only database, a role not granted ``token_counts``, a write lock
    held too long) it is logged once and tried again less and less often (up to once an hour),
    until a store succeeds: then every ``every`` seconds again.
    """

    def __init__(self, store: SessionStore, every: float, *, clock: Callable[[], float] = time.monotonic):
        self._store = store
        self._clock = clock
        self._configured = self._every = every
        self._last = clock()
        self._busy = threading.Lock()
        self._failing = False

    def due(self) -> bool:
        """Whether a store is due (cheap: checked after every response)."""
        return self._clock() - self._last >= self._every

    def store(self) -> None:
        """Store the counts (skipped when another request is storing them)."""
        if not self._busy.acquire(blocking=False):
            return
        try:
            self._last = self._clock()
            self._store.store_token_counts()
        except SessionStoreError as e:  # the counts are made again by the next reader meanwhile
            self._every = min(max(self._every * 2, 60.0), 3600.0)
            if not self._failing:
                self._failing = True
                _LOG.warning("token counts not stored (tried again later; counted again when read): %s", e)
        else:
            if self._failing:
                self._failing = False
                _LOG.info("token counts stored again")
            self._every = self._configured
        finally:
            self._busy.release()


class HeadAsGet:
    """Answer ``HEAD`` as ``GET`` without the body (the framework's routes take GET only):
    the same status and headers, ``Content-Length`` included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def refusal_response(request: Request, status: int, kind: str, message: str, **headers: str) -> Response:
    """The API's error shape (``{"error": {"type", "message"}}``) or the viewer's error page."""
    if _is_api(request):
        return JSONResponse(
            {"error": {"type": kind, "message": message}}, status_code=status, headers=headers
        )
    page = render(request, "error.html", status=status, error={"type": kind, "message": message})
    page.headers.update(headers)
    return page


def _refusal(request: Request, token: str | None, throttle: AuthThrottle) -> Response | None:
    """The answer to a request the server must not serve: a change from another origin, a foreign
    ``Host`` without a token (DNS rebinding), a client throttled after wrong tokens, a missing or
    wrong token, an API write with the viewer's cookie only. None: serve it (``request.state``
    then names the viewer's signed-in session, if that is what let it in)."""
    refused = cross_origin(request.method, request.headers)
    if refused is not None:
        return refusal_response(request, 403, "CrossOriginRefused", refused)
    if token is None:
        if loopback_host(request.headers.get("host", "")):
            return None
        message = "without a token, only a loopback Host is served"
        return refusal_response(request, 421, "HostRefused", message)
    if request.url.path in _OPEN_PATHS:
        return None
    client = _client(request)
    wait = throttle.retry_after(client)
    if wait is not None:
        message = f"too many wrong tokens from {client}: try again in {wait} s"
        return refusal_response(request, 429, "TooManyRequests", message, **{_RETRY_AFTER: str(wait)})
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        if token_matches(given, token):
            return None
        throttle.failed(client)
        return _unauthorized(request)
    cookie = request.cookies.get(COOKIE)
    session = cookie_session(cookie, token)
    if session is None:
        if cookie is not None:  # a forged cookie, or one signed by an earlier token
            throttle.failed(client)
        return _unauthorized(request)
    if _is_api(request) and request.method not in SAFE_METHODS:
        message = "the API's writes take Authorization: Bearer TOKEN; the viewer's sign-in only reads them"
        return JSONResponse({"error": {"type": "Unauthorized", "message": message}}, status_code=401)
    request.state.session = session
    request.state.csrf = csrf_token(token, session)
    return None


def _unauthorized(request: Request) -> Response:
    if _is_api(request):
        body = {"error": {"type": "Unauthorized", "message": "send Authorization: Bearer TOKEN"}}
        return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
    return RedirectResponse("/login", status_code=303)


def create_app(
    store: SessionStore,
    *,
    write: bool = False,
    token: str | None = None,
    store_counts_every: float = COUNTS_EVERY_SECONDS,
    limits: ServeLimits = DEFAULT_LIMITS,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The server over ``store``: read-only unless ``write``; with ``token``, every request
    but the sign-in form must carry it; without one, only requests for a loopback host
    (``Host: 127.0.0.1:PORT``, ``localhost``, ``[::1]``) are served. A browser's request from
    another origin changes nothing (``cross_origin``). The caller keeps ``store`` open while
    the app serves and closes it after. The token counts its reads make are stored at most
    every ``store_counts_every`` seconds, after a response (``CountKeeper``). Every client is
    held to ``limits`` (the body, the page, failed tokens, timed by ``clock``).

    Binding is the caller's: ``check_bind`` says which addresses need a token; the HTTP
    server's own bounds (header timeout, connections, shutdown) are ``_server.server_config``.
    """
    app = FastAPI(
        title="sessionstore",
        summary="Sessions, their requests, the audit timeline and verify, read from the log",
        openapi_url="/api/openapi.json",
        docs_url=None,  # the interactive docs load scripts from a CDN: not from this server
        redoc_url=None,
    )
    app.state.store = store
    app.state.write = write
    app.state.token = token
    app.state.limits = limits
    throttle = app.state.throttle = AuthThrottle(limits.auth_failures, limits.auth_window, clock=clock)

    counts = CountKeeper(store, store_counts_every)

    def refuse_body(scope: Scope, status: int, kind: str, message: str) -> ASGIApp:
        return refusal_response(Request(scope), status, kind, message)

    # Inside the guard: a body is read only once the request is let in.
    app.add_middleware(BodyLimit, limits=limits, refuse=refuse_body, smaller={"/login": SIGN_IN_LIMIT})

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = _refusal(request, token, throttle) or await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        if counts.due():
            # After the response is sent: waiting for the write lock never delays a page.
            tasks = BackgroundTasks([response.background] if response.background else [])
            tasks.add_task(counts.store)
            response.background = tasks
        return response

    @app.exception_handler(SessionStoreError)
    async def library_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, SessionStoreError)
        status = http_status(error)
        body = error_body(error)
        headers = {}
        if status >= 500:
            # The client learns the kind of trouble and a request id; the log has the rest (a
            # driver's message names the database server's address and port).
            request_id = secrets.token_hex(8)
            _LOG.error(
                "request %s (%s %s): %s: %s",
                request_id,
                request.method,
                request.url.path,
                type(error).__name__,
                error,
            )
            body["error"]["request_id"] = headers["X-Request-ID"] = request_id
            if withheld(error):
                body["error"] = {
                    "type": body["error"]["type"],
                    "message": withheld(error),
                    "request_id": request_id,
                }
        if _is_api(request):
            return JSONResponse(body, status_code=status, headers=headers)
        page = render(request, "error.html", status=status, error=body["error"])
        page.headers.update(headers)
        return page

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: Exception) -> Response:
        """A malformed parameter or body: the library's ValidationError shape, naming the field."""
        assert isinstance(error, RequestValidationError)
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        body = {
            "type": "ValidationError",
            "message": f"{where}: {first.get('msg', 'invalid')}",
            "field": where,
        }
        if _is_api(request):
            return JSONResponse({"error": body}, status_code=422)
        return render(request, "error.html", status=422, error=body)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: Exception) -> Response:
        """No such path (404), a method the path does not take (405, with ``Allow``), a body the
        JSON parser gave up on (400): the same error shape as the library's errors, or a page."""
        assert isinstance(error, HTTPException)
        kind = HTTP_ERRORS.get(error.status_code, "HTTPError")
        message = str(error.detail)
        if error.status_code == 404:
            message = f"nothing is served at {request.url.path}"
        elif error.status_code == 405:
            allowed = (error.headers or {}).get("Allow", "")
            message = f"{request.url.path} does not take {request.method} (it takes {allowed})"
        body = {"type": kind, "message": message}
        if _is_api(request):
            return JSONResponse({"error": body}, status_code=error.status_code, headers=error.headers)
        page = render(request, "error.html", status=error.status_code, error=body)
        page.headers.update(error.headers or {})
        return page

    include_api(app, write=write)
    include_views(app, write=write)
    app.add_middleware(HeadAsGet)
    return app

"""What one client may make the server hold: body size, page bytes, read times, failed tokens.

docs/viewer.md "Limits" lists each with its default and the ``sessionstore serve`` option that
sets it. ``BodyLimit`` reads a request's body before the routes do, bounded in bytes and in time;
the header read timeout and the connection cap are the HTTP server's (``_server.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ValidationError

__all__ = ["DEFAULT_LIMITS", "BodyLimit", "ServeLimits"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``create_app`` and ``sessionstore serve`` hold every client to.

    Attributes:
        max_body_bytes: the largest request body (413 past it; a larger ``Content-Length`` is
            refused before any of the body is read).
        max_append_events: the most events one append may carry (422 on ``events``).
        page_bytes: a page of events stops once its payloads reach this many bytes (at least one
            event is returned; ``next_after_seq`` continues it).
        header_timeout: seconds a client has to send a request's headers (the connection is closed).
        body_timeout: seconds a client has to send a request's whole body (408).
        auth_failures: wrong tokens a client may send within ``auth_window`` seconds before it is
            answered 429 with ``Retry-After``.
        auth_window: see ``auth_failures``.
        max_connections: connections served at once (503 past them).
        shutdown_seconds: on SIGINT or SIGTERM, how long running requests may finish.
    """

    max_body_bytes: int = 16 * MIB
    max_append_events: int = 10_000
    page_bytes: int = 4 * MIB
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    auth_failures: int = 10
    auth_window: float = 60.0
    max_connections: int = 64
    shutdown_seconds: float = 3.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_append_events", "page_bytes", "auth_failures", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name} must be an int >= 1, got {value!r}", field=name)
        for name in ("header_timeout", "body_timeout", "auth_window", "shutdown_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValidationError(
                    f"{name} must be a finite number of seconds > 0, got {value!r}", field=name
                )


DEFAULT_LIMITS = ServeLimits()

#: Answers a refused request: (scope, status, error type, message) -> an ASGI app to run.
Refuse = Callable[[Scope, int, str, str], Callable[[Scope, Receive, Send], Awaitable[None]]]


class BodyLimit:
    """Reads each request's body whole before the app sees it: at most ``limits.max_body_bytes``
    (``smaller`` bounds some paths further: the sign-in form) within ``limits.body_timeout``
    seconds, then hands it on in one piece. A larger body is refused with 413 (at once when
    ``Content-Length`` announces it), a slower one with 408; the connection is then closed."""

    def __init__(self, app: ASGIApp, limits: ServeLimits, refuse: Refuse, smaller: dict[str, int]) -> None:
        self.app = app
        self.limits = limits
        self.refuse = refuse
        self.smaller = smaller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.smaller.get(scope["path"], self.limits.max_body_bytes)
        too_large = f"a request body holds at most {limit:,} bytes"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, 413, "PayloadTooLarge", too_large)
            return
        body = bytearray()
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away
                        return
                    body += message.get("body", b"")
                    if len(body) > limit:
                        await self._refuse(scope, receive, send, 413, "PayloadTooLarge", too_large)
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            slow = f"the request's body did not arrive within {self.limits.body_timeout:g} s"
            await self._refuse(scope, receive, send, 408, "RequestTimeout", slow)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str
    ) -> None:
        async def close_after(sent: Message) -> None:
            if sent["type"] == "http.response.start":  # the rest of the body is not read: close
                sent = {**sent, "headers": [*sent.get("headers", []), (b"connection", b"close")]}
            await send(sent)

        await self.refuse(scope, status, kind, message)(scope, receive, close_after)

"""The HTTP server's own bounds (uvicorn): the header read timeout, the connection cap and how
long a shutdown waits for running requests (``ServeLimits``)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._limits import ServeLimits

__all__ = ["server_config"]


def _timed_h11(header_timeout: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers do not all arrive
    within ``header_timeout`` seconds (uvicorn times out only an idle keep-alive connection: a
    client sending a byte at a time would hold its connection forever)."""

    class TimedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:  # these bytes begin a request's headers
                self._arm()
            super().data_received(data)
            if self.cycle is not cycle:  # a request's headers are complete
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.logger.warning("closed a connection: its request headers took over %g s", header_timeout)
                self.transport.close()

    return TimedH11Protocol


def server_config(app: Any, *, host: str, port: int, limits: ServeLimits) -> uvicorn.Config:
    """uvicorn's configuration of ``sessionstore serve`` under ``limits``."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=_timed_h11(limits.header_timeout),
        limit_concurrency=limits.max_connections,
        # A float works: uvicorn passes it to asyncio.wait_for.
        timeout_graceful_shutdown=limits.shutdown_seconds,  # type: ignore[arg-type]
    )

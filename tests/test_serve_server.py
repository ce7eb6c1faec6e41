"""The server's own bounds, in this process: ``server_config``'s uvicorn closes a connection
whose request headers do not arrive in time, and answers one whose headers do (the same checks
against the ``serve`` command are in tests/test_serve_hostile.py, in a process of its own)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")

import uvicorn

import sessionstore
from sessionstore.serve import DEFAULT_LIMITS, create_app, server_config


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    store = sessionstore.open_store(":memory:")
    limits = dataclasses.replace(DEFAULT_LIMITS, header_timeout=0.3)
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = server_config(create_app(store), host="127.0.0.1", port=port, limits=limits)
    served = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(served.serve()), daemon=True)
    thread.start()
    for _ in range(500):  # until it listens (started is set once the socket is bound)
        if served.started:
            break
        threading.Event().wait(0.01)
    assert served.started
    try:
        yield "127.0.0.1", port
    finally:
        served.should_exit = True
        thread.join(timeout=10)
        store.close()


def _read_all(conn: socket.socket) -> bytes:
    conn.settimeout(10)  # far past the header timeout: only a server that never closes hits it
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_connection_whose_headers_never_end_is_closed(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as conn:
        conn.sendall(b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: never ends
        assert _read_all(conn) == b""  # closed without an answer


def test_a_request_whose_headers_arrive_is_answered(server: tuple[str, int]) -> None:
    host, port = server
    with socket.create_connection(server) as conn:
        conn.sendall(
            f"GET /api/sessions HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = _read_all(conn)
    assert answer.startswith(b"HTTP/1.1 200")

"""What the server tests share: the demo database, a small collapsed session, a real server process."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.testclient import TestClient
from starlette.types import ASGIApp

from sessionstore import MessageAppended, OfflineSummarizer, Session, SessionStore, open_store
from sessionstore.cli._demo import run_demo
from sessionstore.pipeline import collapse

#: A token long enough for the server (16 characters at least).
TOKEN = "test-token-0123456789abcdef"
#: A message the collapse takes out of the request (its summary quotes it; a revert puts it back).
HIDDEN = "Because the idempotency key is not checked."
#: That message as its own block in the request printed as indented JSON: absent while collapsed.
HIDDEN_LINE = f'"text": "{HIDDEN}"'


def build_demo(url: str) -> str:
    """Play the demo session into the (migrated) database at ``url``; its session id."""
    out = io.StringIO()
    assert run_demo(url, out, as_json=True) == 0
    return str(json.loads(out.getvalue())["session_id"])


@dataclass(frozen=True)
class Collapsed:
    """A session whose middle exchange is collapsed into a summary."""

    session_id: str
    committed_event_id: str


def build_collapsed(store: SessionStore) -> Collapsed:
    """Six messages; the second exchange (holding ``HIDDEN``) collapsed with the offline summarizer."""
    session = Session.create(store, model="claude-sonnet-4-5", system="You are terse.")
    texts = [
        ("user", "Look at the payments service."),
        ("assistant", "Looking."),
        ("user", "Why does the refund handler double-charge when the webhook retries?"),
        ("assistant", HIDDEN),
        ("user", "Fix it."),
        ("assistant", "Fixed."),
    ]
    events = [MessageAppended(role=role, content=text) for role, text in texts]  # type: ignore[arg-type]
    session.append(events)
    report = collapse(session, OfflineSummarizer(), events[2].message_uuid, events[3].message_uuid)
    return Collapsed(session.id, report.event_ids[1])


def local_client(app: ASGIApp, **kwargs: Any) -> TestClient:
    """A test client that sends ``Host: 127.0.0.1``, as a browser on this machine does."""
    return TestClient(app, base_url="http://127.0.0.1", **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(url: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``sessionstore serve --db URL ARGS`` in a child process; yields its base URL once it answers."""
    with server_process(url, *args, env=env) as (_, base):
        yield base


@contextmanager
def server_process(
    url: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``running_server``, yielding the child process too (to signal it, or read its stderr)."""
    port = free_port()
    command = [sys.executable, "-m", "sessionstore", "serve", "--db", url, "--port", str(port), *args]
    process = subprocess.Popen(
        command, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                _, err = process.communicate()
                raise AssertionError(f"the server exited with {process.returncode}: {err.decode()}")
            try:
                httpx.get(f"{base}/static/viewer.css", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield process, base
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=30)  # reaps the child and closes its pipes


def migrated(url: str) -> str:
    """``url`` with sessionstore's schema in place."""
    open_store(url, migrate=True).close()
    return url

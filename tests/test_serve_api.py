"""The JSON API of ``sessionstore serve``: what each endpoint returns, its errors, and its guards.

Most tests call the ASGI app in process (FastAPI's test client, over httpx); the last ones start
the real command and talk to it over a socket, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import json
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from sessionstore import MessageAppended, Session, SessionStore, open_store
from sessionstore.audit import audit, served_request, turn_diff
from sessionstore.cli import main
from sessionstore.errors import ValidationError
from sessionstore.serve import _views as serve_views
from sessionstore.serve import check_bind, create_app
from sessionstore.serve._views import SHOWN_REPLACED

from ._private_pg import PrivateCluster, private_pg
from .conftest import Backend
from .serve_support import (
    HIDDEN_LINE,
    TOKEN,
    build_collapsed,
    build_demo,
    local_client,
    migrated,
    running_server,
    server_process,
)

__all__ = ["private_pg"]  # the fixture, imported to be found by pytest

STAGES = {
    "tool_result_persisted",
    "snip_applied",
    "microcompact_applied",
    "collapse_committed",
    "compact_boundary",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(database URL, session id) of the demo session, played once for the module."""
    url = migrated(f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}")
    return url, build_demo(url)


@pytest.fixture
def demo_store(demo: tuple[str, str]) -> Iterator[SessionStore]:
    with open_store(demo[0], create=False) as store:
        yield store


@pytest.fixture
def client(demo_store: SessionStore) -> Iterator[TestClient]:
    with local_client(create_app(demo_store)) as test_client:
        yield test_client


@pytest.fixture
def writable(tmp_path: Path, demo: tuple[str, str]) -> Iterator[tuple[TestClient, SessionStore, str]]:
    """A client with writes on (and the token), over a copy of the demo database."""
    path = tmp_path / "copy.db"
    shutil.copy(demo[0].removeprefix("sqlite:///"), path)
    with open_store(f"sqlite:///{path}", create=False) as store:
        app = create_app(store, write=True, token=TOKEN)
        with local_client(app, headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
            yield test_client, store, demo[1]


def _cli_json(*argv: str) -> object:
    out = io.StringIO()
    main([*argv, "--json"], out=out)
    return json.loads(out.getvalue())


def _content_blocks(payload: dict[str, object]) -> list[dict[str, object]]:
    content = payload.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


class TestReads:
    @pytest.mark.parametrize("every", [0.0, 3600.0])
    def test_the_counts_its_reads_make_are_stored_while_it_serves(self, tmp_path: Path, every: float) -> None:
        """A server only reads: the token counts its reads make are stored every
        ``store_counts_every`` seconds (after a response), not only when it stops."""
        db = tmp_path / "c.db"
        with open_store(f"sqlite:///{db}", migrate=True) as writer:
            sid = writer.create_session(events=[MessageAppended(role="user", content="count me " * 40)]).id
        with open_store(f"sqlite:///{db}", create=False) as store:
            client = local_client(create_app(store, store_counts_every=every))
            assert client.get(f"/api/sessions/{sid}/events").status_code == 200
            with sqlite3.connect(db) as conn:
                stored = conn.execute("SELECT seq, token_count FROM token_counts").fetchall()
            expected = [(1, store.read(sid)[0].token_count)]
        assert stored == (expected if every == 0.0 else [])

    def test_sessions_page_by_id_with_a_cursor(self, tmp_path: Path) -> None:
        """Pages of ``limit`` sessions; ``next_after`` fetches the next page; tenant filters."""
        with open_store(f"sqlite:///{tmp_path / 's.db'}", migrate=True) as store:
            ids = sorted(store.create_session(tenant="acme" if i % 2 else None).id for i in range(5))
            client = local_client(create_app(store))
            first = client.get("/api/sessions", params={"limit": 3}).json()
            second = client.get("/api/sessions", params={"limit": 3, "after": first["next_after"]}).json()
            tenant = client.get("/api/sessions", params={"tenant": "acme"}).json()

        assert [s["id"] for s in first["sessions"]] == ids[:3]
        assert [s["id"] for s in second["sessions"]] == ids[3:]
        assert second["next_after"] is None
        assert len(tenant["sessions"]) == 2
        assert {s["tenant"] for s in tenant["sessions"]} == {"acme"}

    @pytest.mark.parametrize("shown", [SHOWN_REPLACED, 1])
    def test_the_timeline_draws_the_first_messages_each_operation_replaced_and_names_the_rest(
        self, demo: tuple[str, str], monkeypatch: pytest.MonkeyPatch, shown: int
    ) -> None:
        """Each operation's replaced messages, in order, with their content, read by seq (the
        page never folds the whole transcript); past ``SHOWN_REPLACED`` only their count and range."""
        monkeypatch.setattr(serve_views, "SHOWN_REPLACED", shown)
        with open_store(demo[0], create=False) as store:
            session = Session(store, demo[1])
            listed = [e.details["replaced"] for e in audit(session).entries if e.details.get("replaced")]
            messages = {
                str(e.payload["message_uuid"]): e
                for e in session.transcript
                if e.type == "message_appended" and e.payload.get("message_uuid")
            }
            page = local_client(create_app(store)).get(f"/sessions/{demo[1]}").text

        assert max(r["count"] for r in listed) > 1  # the demo's compaction replaced several
        drawn = [messages[u] for r in listed for u in r["uuids"][:shown]]
        tags = re.findall(r'<div class="message (\w+)"><span class="tag">seq (\d+) \w+</span>', page)
        assert tags == [(m.payload["role"], str(m.seq)) for m in drawn]
        first_text = next(b["text"] for m in drawn for b in _content_blocks(m.payload) if b.get("text"))
        assert isinstance(first_text, str)
        assert html.escape(first_text, quote=False)[:80] in page
        for r in listed:
            assert f"What it replaced: {r['count']:,} message" in page
            more = f"and {r['count'] - shown:,} more, through seq {r['last_seq']}"
            assert (more in page) == (r["count"] > shown)

    def test_events_paged_and_filtered_by_type(self, client: TestClient, demo: tuple[str, str]) -> None:
        """``type`` keeps one event type; ``next_after_seq`` continues after the last seq returned."""
        sid = demo[1]
        staged = client.get(
            f"/api/sessions/{sid}/events", params={"type": "collapse_staged", "limit": 2}
        ).json()
        rest = client.get(
            f"/api/sessions/{sid}/events",
            params={"type": "collapse_staged", "after_seq": staged["next_after_seq"]},
        ).json()
        first = client.get(f"/api/sessions/{sid}/events", params={"limit": 1}).json()

        assert [e["type"] for e in staged["events"] + rest["events"]] == ["collapse_staged"] * 3
        assert staged["events"][1]["seq"] == staged["next_after_seq"] < rest["events"][0]["seq"]
        assert rest["next_after_seq"] is None
        assert first["events"][0]["seq"] == 1
        assert first["events"][0]["type"] == "session_started"

    def test_turns_give_tokens_per_request_and_every_stage(
        self, client: TestClient, demo_store: SessionStore, demo: tuple[str, str]
    ) -> None:
        """One row per served request, with the used tokens it went out with and the stages before it."""
        body = client.get(f"/api/sessions/{demo[1]}/turns").json()
        session = Session(demo_store, demo[1])
        served = [e for e in session.transcript if e.type == "context_served"]
        kinds = {stage["kind"] for turn in body["turns"] for stage in turn["stages"]}
        compaction = next(s for t in body["turns"] for s in t["stages"] if s["kind"] == "compact_boundary")

        assert [t["used"] for t in body["turns"]] == [e.payload["token_count"] for e in served]
        assert kinds >= STAGES
        assert body["window"]["effective_window"] == session.token_state().window.effective_window
        assert body["window"]["autocompact_threshold"] < body["window"]["blocking_limit"]
        assert compaction["tokens_freed"] > 0  # the view's size before minus after

    def test_a_turn_is_the_request_served_prints(self, client: TestClient, demo: tuple[str, str]) -> None:
        """``/turns/N`` is ``sessionstore served --turn N --json``, fingerprint check included."""
        url, sid = demo
        body = client.get(f"/api/sessions/{sid}/turns/30").json()

        assert body == _cli_json("served", "--db", url, sid, "--turn", "30")
        assert body["matches"] is True

    def test_diff_between_two_turns(
        self, client: TestClient, demo_store: SessionStore, demo: tuple[str, str]
    ) -> None:
        """A unified diff of the two served requests; a turn against itself is empty."""
        sid = demo[1]
        body = client.get(f"/api/sessions/{sid}/diff", params={"from": 29, "to": 30}).json()
        same = client.get(f"/api/sessions/{sid}/diff", params={"from": 30, "to": 30}).json()

        assert body["diff"] == turn_diff(Session(demo_store, sid), 29, 30)
        assert body["diff"].startswith("--- turn 29\n+++ turn 30\n")
        assert same["diff"] == ""

    def test_audit_is_the_cli_audit(self, client: TestClient, demo: tuple[str, str]) -> None:
        url, sid = demo
        body = client.get(f"/api/sessions/{sid}/audit").json()

        assert body == _cli_json("audit", "--db", url, sid)
        assert {e["kind"] for e in body["entries"]} >= STAGES

    def test_context_breaks_the_next_request_down(
        self, client: TestClient, demo_store: SessionStore, demo: tuple[str, str]
    ) -> None:
        """Every category is listed; the demo's next request holds a compaction summary."""
        body = client.get(f"/api/sessions/{demo[1]}/context").json()
        categories = {row["category"]: row for row in body["breakdown"]["rows"]}

        assert body["request"] == Session(demo_store, demo[1]).request()
        assert list(categories) == ["system", "tools", "messages", "tool results", "summaries"]
        assert categories["summaries"]["blocks"] == 1
        assert all(c["tokens"] > 0 for c in categories.values())

    def test_verify(self, client: TestClient, demo: tuple[str, str]) -> None:
        body = client.get(f"/api/sessions/{demo[1]}/verify").json()
        recounted = client.get(f"/api/sessions/{demo[1]}/verify", params={"counts": "true"}).json()

        assert body["ok"] is True
        assert body["chain_ok"] is True
        assert "token_counts" not in [p["projection"] for p in body["projections"]]
        statuses = {p["projection"]: p["status"] for p in recounted["projections"]}
        assert statuses["token_counts"] == "match"

    def test_openapi_documents_every_read_endpoint(self, client: TestClient) -> None:
        paths = client.get("/api/openapi.json").json()["paths"]

        assert set(paths) == {
            "/api/sessions",
            "/api/sessions/{session_id}",
            "/api/sessions/{session_id}/events",
            "/api/sessions/{session_id}/turns",
            "/api/sessions/{session_id}/turns/{turn}",
            "/api/sessions/{session_id}/diff",
            "/api/sessions/{session_id}/audit",
            "/api/sessions/{session_id}/context",
            "/api/sessions/{session_id}/verify",
        }


class TestErrors:
    @pytest.mark.parametrize(
        ("path", "status", "kind", "field"),
        [
            ("/api/sessions/no-such-session", 404, "SessionNotFoundError", None),
            ("/api/sessions/no-such-session/turns", 404, "SessionNotFoundError", None),
            ("/api/sessions/{sid}/turns/999", 422, "ValidationError", "turn"),
            ("/api/sessions/{sid}/turns/0", 422, "ValidationError", "turn"),
            ("/api/sessions/{sid}/turns/x", 422, "ValidationError", "path.turn"),
            ("/api/sessions?limit=0", 422, "ValidationError", "query.limit"),
            ("/api/sessions/{sid}/diff?from=1", 422, "ValidationError", "query.to"),
        ],
    )
    def test_typed_errors_as_json(
        self, client: TestClient, demo: tuple[str, str], path: str, status: int, kind: str, field: str | None
    ) -> None:
        """The library's error class, its message and its field, with the matching HTTP status."""
        response = client.get(path.format(sid=demo[1]))
        error = response.json()["error"]

        assert response.status_code == status
        assert error["type"] == kind
        assert error.get("field") == field
        assert error["message"]

    def test_a_page_shows_the_error_escaped_with_its_status(self, client: TestClient) -> None:
        """The viewer answers a library error with a page naming it, and the same HTTP status."""
        page = client.get("/sessions/<script>nope/turns/3")

        assert page.status_code == 404
        assert "SessionNotFoundError" in page.text
        assert "&lt;script&gt;nope" in page.text
        assert "<script>nope" not in page.text

    def test_an_erased_session_is_gone_and_its_audit_is_the_receipt(self, tmp_path: Path) -> None:
        with open_store(f"sqlite:///{tmp_path / 'e.db'}", migrate=True) as store:
            session = Session.create(store)
            session.append([MessageAppended(role="user", content="hello")])
            store.erase(session.id, reason="user request")
            client = local_client(create_app(store))
            turns = client.get(f"/api/sessions/{session.id}/turns")
            audited = client.get(f"/api/sessions/{session.id}/audit").json()
            page = client.get(f"/sessions/{session.id}")

        assert page.status_code == 410
        assert "user request" in page.text
        assert turns.status_code == 410
        assert turns.json()["error"]["type"] == "SessionErasedError"
        assert audited["erasure"]["reason"] == "user request"
        assert audited["entries"] == []


class TestWrites:
    def test_read_only_by_default(self, client: TestClient, demo: tuple[str, str]) -> None:
        """Without ``write`` no write endpoint exists, and the schema lists none."""
        for action in ("events", "snip", "collapse", "revert", "compact", "erase"):
            response = client.post(f"/api/sessions/{demo[1]}/{action}", json={})

            assert response.status_code in (404, 405), action

    def test_writes_need_the_token(self, writable: tuple[TestClient, SessionStore, str]) -> None:
        client, _, sid = writable
        bare = local_client(client.app)

        assert bare.post(f"/api/sessions/{sid}/snip", json={"rounds": 1}).status_code == 401
        assert bare.get("/api/sessions").status_code == 401
        assert (
            bare.get("/api/sessions", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code
            == 401
        )

    def test_append_checks_the_expected_seq(self, writable: tuple[TestClient, SessionStore, str]) -> None:
        """A stale ``expected`` is the library's ConcurrencyError as 409; nothing is written."""
        client, store, sid = writable
        last = store.last_seq(sid)
        event = {"type": "message_appended", "role": "user", "content": "one more thing"}
        stale = client.post(f"/api/sessions/{sid}/events", json={"events": [event], "expected": last - 1})
        ok = client.post(f"/api/sessions/{sid}/events", json={"events": [event], "expected": last})

        assert stale.status_code == 409
        assert stale.json()["error"]["type"] == "ConcurrencyError"
        assert ok.status_code == 200
        assert ok.json()["seqs"] == [last + 1]
        assert store.last_seq(sid) == last + 1

    def test_a_malformed_event_is_a_validation_error(
        self, writable: tuple[TestClient, SessionStore, str]
    ) -> None:
        client, store, sid = writable
        last = store.last_seq(sid)
        response = client.post(f"/api/sessions/{sid}/events", json={"events": [{"type": "message_appended"}]})

        assert response.status_code == 422
        assert response.json()["error"]["type"] == "ValidationError"
        assert store.last_seq(sid) == last

    @pytest.mark.parametrize(
        ("body", "key"),
        [
            (
                '{"events": [{"type": "message_appended", "role": "user", "content": "a", "content": "b"}]}',
                "content",
            ),
            ('{"events": [], "expected": 0, "events": [{"type": "message_appended"}]}', "events"),
        ],
        ids=["in an event", "at the top"],
    )
    def test_a_body_with_a_key_twice_is_refused_naming_the_key(
        self, writable: tuple[TestClient, SessionStore, str], body: str, key: str
    ) -> None:
        """Not the last value kept and the first dropped without a word: 422 naming the key."""
        client, store, sid = writable
        last = store.last_seq(sid)
        response = client.post(
            f"/api/sessions/{sid}/events", content=body, headers={"Content-Type": "application/json"}
        )
        error = response.json()["error"]

        assert response.status_code == 422
        assert error["type"] == "ValidationError"
        assert error["message"] == (
            f"the request body: the key {key!r} occurs twice in one JSON object (each key once)"
        )
        assert store.last_seq(sid) == last

    def test_collapse_then_revert_restores_the_request(self, tmp_path: Path) -> None:
        """Revert of a collapse puts the span's messages back in the next request."""
        with open_store(f"sqlite:///{tmp_path / 'c.db'}", migrate=True) as store:
            collapsed = build_collapsed(store)
            client = local_client(
                create_app(store, write=True, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}
            )
            before = json.dumps(
                client.get(f"/api/sessions/{collapsed.session_id}/context").json()["request"], indent=2
            )
            reverted = client.post(
                f"/api/sessions/{collapsed.session_id}/revert",
                json={"event_id": collapsed.committed_event_id},
            )
            after = json.dumps(
                client.get(f"/api/sessions/{collapsed.session_id}/context").json()["request"], indent=2
            )
            again = client.post(
                f"/api/sessions/{collapsed.session_id}/revert",
                json={"event_id": collapsed.committed_event_id},
            )

        assert HIDDEN_LINE not in before
        assert reverted.status_code == 200
        assert reverted.json()["stage"] == "revert"
        assert HIDDEN_LINE in after
        assert again.status_code == 422
        assert again.json()["error"]["type"] == "ValidationError"

    def test_a_refused_compaction_revert_is_a_conflict_and_records_nothing(
        self, writable: tuple[TestClient, SessionStore, str]
    ) -> None:
        """The demo's compaction cannot come back whole: 409 with what it would need."""
        client, store, sid = writable
        boundary = next(e for e in audit(store, sid).entries if e.kind == "compact_boundary")
        last = store.last_seq(sid)
        response = client.post(f"/api/sessions/{sid}/revert", json={"event_id": boundary.event_id})
        error = response.json()["error"]

        assert response.status_code == 409
        assert error["type"] == "CompactionRevertTooLargeError"
        assert error["needed"] >= error["limit"]
        assert store.last_seq(sid) == last

    def test_recompact_reverts_what_does_not_fit_and_compacts_again(
        self, writable: tuple[TestClient, SessionStore, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """As `revert --recompact`: the refused compaction is reverted and a new one replaces it."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the offline summarizer
        client, store, sid = writable
        boundary = next(e for e in audit(store, sid).entries if e.kind == "compact_boundary")
        refused = client.post(f"/api/sessions/{sid}/revert", json={"event_id": boundary.event_id})

        response = client.post(
            f"/api/sessions/{sid}/revert", json={"event_id": boundary.event_id, "recompact": True}
        )

        assert refused.status_code == 409
        assert "recompact" in refused.json()["error"]["message"]
        assert response.status_code == 200
        outcome = response.json()
        assert outcome["recompacted"]["ok"] is True
        assert outcome["recompacted"]["tokens_after"] < refused.json()["error"]["limit"]
        session = Session(store, sid)
        assert session.api_state.reverted[boundary.event_id] == outcome["event_ids"][0]
        assert session.api_state.compact is not None
        assert session.api_state.compact.event_id == outcome["recompacted"]["event_id"]
        assert session.token_state().used < session.token_state().window.blocking_limit

    def test_recompact_of_anything_but_a_compaction_is_refused(self, tmp_path: Path) -> None:
        """A collapse has nothing to compact again: 422, and nothing is recorded."""
        with open_store(f"sqlite:///{tmp_path / 'r.db'}", migrate=True) as store:
            collapsed = build_collapsed(store)
            last = store.last_seq(collapsed.session_id)
            app = create_app(store, write=True, token=TOKEN)
            with local_client(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                response = client.post(
                    f"/api/sessions/{collapsed.session_id}/revert",
                    json={"event_id": collapsed.committed_event_id, "recompact": True},
                )

            assert response.status_code == 422
            error = response.json()["error"]
            assert error["type"] == "ValidationError"
            assert error["field"] == "event_id"
            assert "compaction only" in error["message"]
            assert store.last_seq(collapsed.session_id) == last

    def test_snip_compact_collapse_and_erase(
        self, writable: tuple[TestClient, SessionStore, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each write endpoint runs the library's operation and records it in the audit."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the offline summarizer
        client, store, sid = writable
        snipped = client.post(f"/api/sessions/{sid}/snip", json={"rounds": 1})
        compacted = client.post(f"/api/sessions/{sid}/compact", json={"instructions": "keep file names"})
        kinds = [e.kind for e in audit(store, sid).entries]
        erased = client.post(f"/api/sessions/{sid}/erase", json={"reason": "test"})
        gone = client.get(f"/api/sessions/{sid}")

        assert snipped.status_code == 200
        assert snipped.json()["event_ids"]
        assert compacted.status_code == 200
        assert compacted.json()["ok"] is True
        assert kinds[-2:] == ["snip_applied", "compact_boundary"]
        assert erased.json()["receipts"][0]["session_id"] == sid
        assert gone.status_code == 410


class TestSafety:
    @pytest.mark.parametrize(
        ("host", "token", "write", "field"),
        [
            ("0.0.0.0", None, False, "host"),
            ("::", None, False, "host"),
            ("example.com", None, False, "host"),
            ("127.0.0.1", None, True, "token"),
            ("0.0.0.0", "short", False, "token"),
        ],
    )
    def test_refused_binds(self, host: str, token: str | None, write: bool, field: str) -> None:
        with pytest.raises(ValidationError) as refused:
            check_bind(host, token=token, write=write)

        assert refused.value.field == field

    @pytest.mark.parametrize(
        ("host", "token", "write"),
        [
            ("127.0.0.1", None, False),
            ("localhost", None, False),
            ("::1", None, False),
            ("0.0.0.0", TOKEN, True),
        ],
    )
    def test_allowed_binds(self, host: str, token: str | None, write: bool) -> None:
        check_bind(host, token=token, write=write)

    def test_the_command_refuses_all_interfaces_without_a_token(self, demo: tuple[str, str]) -> None:
        """``serve --host 0.0.0.0`` exits 1 with one line and binds nothing."""
        done = subprocess.run(
            [sys.executable, "-m", "sessionstore", "serve", "--db", demo[0], "--host", "0.0.0.0"],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        )

        assert done.returncode == 1
        assert done.stderr.startswith("sessionstore: --host 0.0.0.0 would expose every session")

    def test_html_escapes_what_the_log_holds(self, tmp_path: Path) -> None:
        """A ``<script>`` in a message or a metadata value is text on every page, never markup."""
        attack = "<script>alert('owned')</script>"
        with open_store(f"sqlite:///{tmp_path / 'x.db'}", migrate=True) as store:
            collapsed = build_collapsed(store)
            session = Session(store, collapsed.session_id)
            session.append([MessageAppended(role="user", content=attack)])
            evil = store.create_session(metadata={"name": attack})
            client = local_client(create_app(store))
            pages = [
                client.get("/").text,
                client.get(f"/sessions/{collapsed.session_id}").text,
                client.get(f"/sessions/{collapsed.session_id}/context").text,
                client.get(f"/sessions/{evil.id}").text,
            ]

        for page in pages:
            assert "<script>alert" not in page
            assert page.count("<script") == 1  # the viewer's own script tag
        assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in pages[2]

    @pytest.mark.parametrize(
        "name", ["..%2F..%2Fpyproject.toml", "%2Fetc%2Fpasswd", "viewer.css%00", "templates"]
    )
    def test_no_request_path_reaches_the_filesystem(self, client: TestClient, name: str) -> None:
        """Only the two fixed static files are served, by exact name."""
        assert client.get(f"/static/{name}").status_code == 404
        assert client.get("/static/viewer.css").status_code == 200

    @pytest.mark.parametrize(
        "host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "10.0.0.2"]
    )
    def test_without_a_token_only_a_loopback_host_is_served(self, client: TestClient, host: str) -> None:
        """A page that rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read the API."""
        refused = client.get("/api/sessions", headers={"Host": host})

        assert refused.status_code == 421
        assert refused.json()["error"]["type"] == "HostRefused"

    @pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST"])
    def test_loopback_hosts_are_served(self, client: TestClient, host: str) -> None:
        assert client.get("/api/sessions", headers={"Host": host}).status_code == 200

    def test_pages_carry_a_script_policy(self, client: TestClient) -> None:
        policy = client.get("/").headers["content-security-policy"]

        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy

    def test_the_viewer_signs_in_with_the_token(self, demo_store: SessionStore) -> None:
        client = local_client(create_app(demo_store, token=TOKEN))
        redirected = client.get("/", follow_redirects=False)
        wrong = client.post("/login", data={"token": "not-the-token-at-all"})
        right = client.post("/login", data={"token": TOKEN})

        assert redirected.status_code == 303
        assert redirected.headers["location"] == "/login"
        assert wrong.status_code == 401
        assert right.status_code == 200
        assert "Sessions" in right.text
        cookie = right.history[0].headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie


class TestRealServer:
    def test_the_command_serves_the_api_on_sqlite(self, demo: tuple[str, str]) -> None:
        """``sessionstore serve`` over a socket: the same answers as the library."""
        url, sid = demo
        with running_server(url) as base:
            turn = httpx.get(f"{base}/api/sessions/{sid}/turns/3").json()
            page = httpx.get(f"{base}/sessions/{sid}")

        with open_store(url, create=False) as store:
            expected = dataclasses.asdict(served_request(Session(store, sid), 3))
        assert turn == expected
        assert page.status_code == 200
        assert 'data-kind="compact_boundary"' in page.text

    def test_the_command_serves_postgres_and_writes_with_the_token(
        self, shared_backend: Backend, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A write through the socket lands in the database; the token comes from the environment."""
        url = migrated(shared_backend.url)
        with open_store(url) as store:
            collapsed = build_collapsed(store)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with running_server(url, "--write", env={"SESSIONSTORE_SERVE_TOKEN": TOKEN}) as base:
            listed = httpx.get(f"{base}/api/sessions", headers=auth).json()
            reverted = httpx.post(
                f"{base}/api/sessions/{collapsed.session_id}/revert",
                json={"event_id": collapsed.committed_event_id},
                headers=auth,
            )

        with open_store(url) as store:
            request = json.dumps(Session(store, collapsed.session_id).request(), indent=2)
        assert [s["id"] for s in listed["sessions"]] == [collapsed.session_id]
        assert reverted.status_code == 200
        assert HIDDEN_LINE in request


@pytest.fixture
def private_url(private_pg: PrivateCluster) -> str:
    """A fresh schema on the private cluster (one a test may stop), migrated."""
    schema = f"serve_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(private_pg.admin_dsn.replace("dbname=postgres", "dbname=sessionstore_test")) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return migrated(f"{private_pg.url}?options={quote(f'-csearch_path={schema}')}")


class TestServerUnderStress:
    """The real command when the database is down, a client is slow, or it is told to stop."""

    def test_a_database_that_is_down_is_a_prompt_503_that_names_no_address(
        self, private_pg: PrivateCluster, private_url: str
    ) -> None:
        """PostgreSQL stopped under the server: each route answers 503 "database unavailable"
        with a request id, within the command line's ~1 s of retries (not the library's 30 s
        budget), and the driver's message (address, port) goes to the server's log only."""
        with open_store(private_url, create=False) as store:
            session_id = build_collapsed(store).session_id
        paths = ["/api/sessions", f"/api/sessions/{session_id}/events", "/", f"/sessions/{session_id}"]
        with server_process(private_url) as (process, base):
            assert httpx.get(f"{base}/api/sessions/{session_id}").status_code == 200
            private_pg.stop()
            try:
                answers = []
                for path in paths:
                    started = time.monotonic()
                    answers.append((httpx.get(base + path, timeout=60), time.monotonic() - started))
            finally:
                private_pg.start()
            process.terminate()
            log = process.communicate(timeout=30)[1].decode()

        for (response, took), path in zip(answers, paths, strict=True):
            request_id = response.headers["x-request-id"]
            assert response.status_code == 503, path
            assert took < 4.0, f"{path}: {took:.1f} s"  # the library's default waits 4.6 s at least
            assert "database unavailable" in response.text, path
            assert request_id in response.text, path
            for detail in (str(private_pg.port), "127.0.0.1", "psycopg", "connection"):
                assert detail not in response.text, (path, detail)
            assert f"request {request_id} (GET {path})" in log
        assert str(private_pg.port) in log
        api = answers[0][0].json()["error"]
        assert api["type"] == "StoreUnavailableError"
        assert api["request_id"] == answers[0][0].headers["x-request-id"]

    def test_a_client_slow_to_send_its_headers_is_disconnected(self, demo: tuple[str, str]) -> None:
        """A byte at a time (or nothing at all) after ``--header-timeout``: the connection is
        closed, each of many."""
        with running_server(demo[0], "--header-timeout", "0.5") as base:
            port = int(base.rpartition(":")[2])
            slow = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
            try:
                for i, sock in enumerate(slow):
                    if i % 2:
                        sock.sendall(b"GET / HTTP/1.1\r\nHo")
                closed = [sock.recv(1024) for sock in slow]  # b"": closed (socket.timeout: held)
            finally:
                for sock in slow:
                    sock.close()
            still_served = httpx.get(f"{base}/api/sessions").status_code

        assert closed == [b""] * 20
        assert still_served == 200

    def test_a_client_slow_to_send_its_body_gets_a_408(self, demo: tuple[str, str]) -> None:
        """Headers promising 100 bytes, then 10: 408 after ``--body-timeout``, and closed."""
        with running_server(demo[0], "--body-timeout", "0.5") as base:
            port = int(base.rpartition(":")[2])
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(
                    b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/x-www-form-urlencoded\r\n"
                    b"Content-Length: 100\r\n\r\ntoken=0123"
                )
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk

        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b"RequestTimeout" in answer

    @pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
    def test_it_stops_promptly_while_a_request_waits_on_the_database(
        self, private_pg: PrivateCluster, private_url: str, sig: signal.Signals
    ) -> None:
        """A request blocked on a lock (up to PostgreSQL's 10 s lock_timeout): SIGINT or SIGTERM
        stops the server within ``--shutdown-seconds`` and a moment, not when the request ends."""
        with open_store(private_url, create=False) as store:
            build_collapsed(store)
        dsn = private_pg.admin_dsn.replace("dbname=postgres", "dbname=sessionstore_test")
        schema = unquote(private_url.rpartition("search_path%3D")[2])
        with (
            server_process(private_url, "--shutdown-seconds", "1") as (process, base),
            psycopg.connect(dsn) as locker,
            psycopg.connect(dsn, autocommit=True) as watcher,
        ):
            locker.execute(f"LOCK TABLE {schema}.sessions IN ACCESS EXCLUSIVE MODE")
            waiting = threading.Thread(target=_quiet_get, args=(f"{base}/api/sessions",), daemon=True)
            waiting.start()
            deadline = time.monotonic() + 30
            while not watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the request never waited on the lock"
                time.sleep(0.05)
            process.send_signal(sig)
            signalled = time.monotonic()
            try:
                process.wait(timeout=30)
            finally:
                took = time.monotonic() - signalled
            locker.rollback()

        assert took < 6.0, f"stopped {took:.1f} s after the signal"


def _quiet_get(url: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.get(url, timeout=60)


#: Run in a fresh interpreter: imports only what ``pip install 'sessionstore[serve]'`` installs
#: (the closure of pyproject.toml's dependencies and ``serve`` extra over the installed packages'
#: metadata); any other installed package's modules fail to import, as they would there.
_ONLY_THE_SERVE_EXTRA = r"""
import importlib.abc, importlib.metadata as md, sys, tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["serve"]]
allowed = set()
while wanted:
    req = wanted.pop()
    name = canonicalize_name(req.name)
    extras = set(req.extras)
    if name in allowed and not extras:
        continue
    allowed.add(name)
    for text in md.requires(req.name) or []:
        sub = Requirement(text)
        envs = [{"extra": e} for e in extras | {""}]
        if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
            wanted.append(sub)
blocked = {
    module for module, dists in md.packages_distributions().items()
    if not any(canonicalize_name(d) in allowed for d in dists) and module != "sessionstore"
}

class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not in the serve extra)", name=fullname)
        return None

sys.meta_path.insert(0, Uninstalled())
from sessionstore import open_store
from sessionstore.serve import DEFAULT_LIMITS, create_app
from sessionstore.serve._server import server_config

store = open_store("sqlite:///" + sys.argv[2], migrate=True)
app = create_app(store, write=True, token="t" * 16)
server_config(app, host="127.0.0.1", port=0, limits=DEFAULT_LIMITS).load()
print("served with", len(allowed), "distributions")
"""


def test_the_serve_extra_brings_what_every_route_needs(tmp_path: Path) -> None:
    """``serve --write`` on an install of the ``serve`` extra alone: FastAPI builds every route
    (the revert form needs python-multipart) and uvicorn loads, with nothing else installed."""
    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    done = subprocess.run(
        [sys.executable, "-c", _ONLY_THE_SERVE_EXTRA, str(pyproject), str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("served with")

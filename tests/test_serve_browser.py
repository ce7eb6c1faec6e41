"""The viewer of ``sessionstore serve`` in a real browser: Playwright driving the system's chromium.

Each test runs against the real command serving the demo session. The tests take the screenshots
docs/viewer.md shows: into a temporary folder, or into ``$SESSIONSTORE_VIEWER_SCREENSHOTS``
(docs/viewer/make_screenshots.sh sets it to docs/viewer/).

chromium comes from the system (Debian's ``chromium`` package, which .ci/run installs):
Playwright's own browser download needs the network. Without it the tests skip, and fail when
``SESSIONSTORE_REQUIRE_BROWSER=1`` (as in CI).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from sessionstore import MessageAppended, Session, open_store
from sessionstore.audit import audit
from sessionstore.cli import main

from .serve_support import HIDDEN_LINE, TOKEN, build_collapsed, build_demo, migrated, running_server

STAGES = (
    "tool_result_persisted",
    "snip_applied",
    "microcompact_applied",
    "collapse_committed",
    "compact_boundary",
)
#: What a transcript may carry to attack the page: each sets ``window.owned`` if it ever runs.
ATTACKS = ("<script>window.owned = 1</script>", '<img src="x" onerror="window.owned = 2">')
TURN = 30


def _chromium() -> str:
    found = (
        os.environ.get("SESSIONSTORE_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if found:
        return found
    if os.environ.get("SESSIONSTORE_REQUIRE_BROWSER") == "1":
        pytest.fail("SESSIONSTORE_REQUIRE_BROWSER=1 but no chromium is installed (apt-get install chromium)")
    pytest.skip("no chromium on PATH (apt-get install chromium, or set SESSIONSTORE_CHROMIUM)")


@dataclass(frozen=True)
class Served:
    """A database with the demo session, a collapsed session and a hostile one, and its URL."""

    url: str
    demo_id: str
    collapsed_id: str
    collapse_event_id: str
    hostile_id: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    url = migrated(f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'viewer.db'}")
    demo_id = build_demo(url)
    with open_store(url) as store:
        collapsed = build_collapsed(store)
        hostile = Session.create(store, metadata={"title": ATTACKS[0]})
        hostile.append([MessageAppended(role="user", content=text) for text in ATTACKS])
    return Served(url, demo_id, collapsed.session_id, collapsed.committed_event_id, hostile.id)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = _chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 820})
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture(scope="module")
def read_only(served: Served) -> Iterator[str]:
    with running_server(served.url) as base:
        yield base


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go."""
    folder = os.environ.get("SESSIONSTORE_VIEWER_SCREENSHOTS")
    return Path(folder) if folder else tmp_path_factory.mktemp("screenshots")


def _served_output(url: str, session_id: str, turn: int) -> str:
    """The request ``sessionstore served --turn N`` prints (before its verdict line)."""
    out = io.StringIO()
    assert main(["served", "--db", url, session_id, "--turn", str(turn)], out=out) == 0
    return out.getvalue().split("\n\nturn ", 1)[0]


def test_the_list_leads_to_the_demo_session(page: Page, read_only: str, served: Served) -> None:
    page.goto(read_only + "/")
    page.get_by_role("link", name=served.demo_id).click()

    assert page.locator("#session-id").inner_text() == served.demo_id
    assert page.locator(".badge").first.inner_text() == "read-only"
    assert page.locator("form.revert").count() == 0


def test_the_gauge_marks_every_stage(page: Page, read_only: str, served: Served, shots: Path) -> None:
    """The used-tokens line, the window's lines, and a marker (with what it freed) per stage."""
    page.goto(f"{read_only}/sessions/{served.demo_id}")
    gauge = page.locator("#gauge")
    gauge.screenshot(path=str(shots / "gauge.png"))
    lines = [
        gauge.locator(f"[data-line='{name}']") for name in ("effective window", "auto-compact", "blocking")
    ]
    with open_store(served.url, create=False) as store:
        served_turns = audit(store, served.demo_id).requests_served

    assert (gauge.locator("polyline.used").get_attribute("points") or "").count(",") == served_turns
    assert all(line.count() == 1 for line in lines)
    for kind in STAGES:
        assert gauge.locator(f"svg [data-kind='{kind}']").count() >= 1, kind
        assert "freed" in gauge.locator(f"#markers li[data-kind='{kind}']").first.inner_text(), kind


def test_a_compaction_opens_its_summary_and_the_messages_it_replaced(
    page: Page, read_only: str, served: Served, shots: Path
) -> None:
    with open_store(served.url, create=False) as store:
        entry = next(e for e in audit(store, served.demo_id).entries if e.kind == "compact_boundary")
    page.goto(f"{read_only}/sessions/{served.demo_id}")
    operation = page.locator(f"details#op-{entry.event_id}")
    operation.locator("summary").click()
    box = operation.bounding_box()  # in the viewport's coordinates: the clip is in the page's
    assert box is not None
    top = box["y"] + page.evaluate("window.scrollY")
    page.screenshot(  # its top: the summary beside the first messages it replaced
        path=str(shots / "compaction.png"),
        full_page=True,
        clip={"x": box["x"], "y": top, "width": box["width"], "height": min(box["height"], 760)},
    )
    summary = operation.locator(".summary .block")
    replaced = operation.locator(".replaced .message")

    assert summary.is_visible()
    assert summary.inner_text().strip() == entry.details["summary"].strip()
    assert replaced.count() == entry.details["replaced"]["count"] > 0
    assert replaced.first.locator(".tag").inner_text() == f"seq {entry.details['replaced']['first_seq']} user"


def test_turn_n_is_the_request_served_prints(page: Page, read_only: str, served: Served, shots: Path) -> None:
    """Follow the turn's link: the page shows the same request, its check and its diff."""
    page.goto(f"{read_only}/sessions/{served.demo_id}")
    page.locator("p.turns").get_by_role("link", name=str(TURN), exact=True).click()
    page.screenshot(path=str(shots / "turn.png"))

    assert page.locator("#request").inner_text() == _served_output(served.url, served.demo_id, TURN)
    assert "matches the recorded fingerprint" in page.locator("#verdict").inner_text()
    assert page.locator("#diff .add").count() > 0
    assert page.locator("#diff summary").inner_text() == f"Changes from turn {TURN - 1}"


def test_the_next_request_by_category(page: Page, read_only: str, served: Served, shots: Path) -> None:
    page.goto(f"{read_only}/sessions/{served.demo_id}")
    page.locator("#context-link").click()
    page.screenshot(path=str(shots / "context.png"))
    rows = page.locator("table.categories tbody tr")

    assert [rows.nth(i).get_attribute("data-category") for i in range(rows.count())] == [
        "system",
        "tools",
        "messages",
        "tool results",
        "summaries",
    ]
    assert page.locator("#request").inner_text().startswith("{")


def test_a_script_in_the_transcript_is_shown_not_run(page: Page, read_only: str, served: Served) -> None:
    """Hostile text from the log is escaped on every page: shown as text, never executed."""
    for path in ("/", f"/sessions/{served.hostile_id}", f"/sessions/{served.hostile_id}/context"):
        page.goto(read_only + path)

        assert page.evaluate("window.owned === undefined"), path
    request = page.locator("#request").inner_text()
    assert all(attack.replace('"', '\\"') in request for attack in ATTACKS)


def test_revert_a_collapse_and_the_request_is_restored(browser: Browser, served: Served, shots: Path) -> None:
    """With --write: sign in, revert the collapse from its timeline entry, see its messages back."""
    context = browser.new_context(viewport={"width": 1100, "height": 820})
    page = context.new_page()
    with running_server(served.url, "--write", "--token", TOKEN) as base:
        page.goto(f"{base}/sessions/{served.collapsed_id}/context")
        page.locator("input[name=token]").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"{base}/sessions/{served.collapsed_id}/context")
        collapsed = page.locator("#request").inner_text()
        page.goto(f"{base}/sessions/{served.collapsed_id}")
        operation = page.locator(f"details#op-{served.collapse_event_id}")
        operation.locator("summary").click()
        operation.get_by_role("button", name="Revert").click()
        page.locator(f"details#op-{served.collapse_event_id}.reverted").wait_for()
        page.screenshot(path=str(shots / "revert.png"))
        page.locator("#context-link").click()
        restored = page.locator("#request").inner_text()
    context.close()

    assert "[Collapsed: summary of earlier messages]" in collapsed
    assert HIDDEN_LINE not in collapsed
    assert HIDDEN_LINE in restored
    assert "[Collapsed: summary" not in restored


@contextmanager
def another_local_site(pages: dict[str, str]) -> Iterator[str]:
    """A web server on another port of 127.0.0.1 serving ``pages`` (path -> HTML): the same site
    as the viewer for the browser (its SameSite=Strict cookie goes along), another origin."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _attacks(base: str, session_id: str, event_id: str) -> dict[str, str]:
    """Pages that try to revert ``event_id`` through the signed-in browser; each sets its title
    once its request is answered (or refused by the browser)."""
    form_url = f"{base}/sessions/{session_id}/revert"
    api_url = f"{base}/api/sessions/{session_id}/revert"
    body = json.dumps({"event_id": event_id})

    def fetching(call: str) -> str:
        done = "() => document.title = 'answered'"
        return f"<script>{call}.then({done}, {done})</script>"

    return {
        "/form": f"<form method=post action='{form_url}'><input name=event_id value='{event_id}'></form>"
        "<script>document.forms[0].submit()</script>",
        "/no-cors": fetching(
            f"fetch('{form_url}', {{method: 'POST', mode: 'no-cors', credentials: 'include', "
            "headers: {'Content-Type': 'application/x-www-form-urlencoded'}, "
            f"body: 'event_id={event_id}'}})"
        ),
        "/api": fetching(
            f"fetch('{api_url}', {{method: 'POST', credentials: 'include', "
            f"headers: {{'Content-Type': 'text/plain'}}, body: {json.dumps(body)}}})"
        ),
    }


def _reverted(url: str, session_id: str, event_id: str) -> bool:
    with open_store(url, create=False) as store:
        entry = next(e for e in audit(store, session_id).entries if e.event_id == event_id)
    return entry.reverted_by is not None


def test_another_local_site_cannot_drive_the_viewer(browser: Browser, tmp_path: Path) -> None:
    """Signed in with --write, the browser opens pages of another port of 127.0.0.1 that post
    the revert form, and fetch the form and the API with credentials: each is refused and nothing
    is reverted; the viewer's own Revert button then works."""
    url = migrated(f"sqlite:///{tmp_path / 'csrf.db'}")
    with open_store(url) as store:
        collapsed = build_collapsed(store)
    sid, eid = collapsed.session_id, collapsed.committed_event_id
    context = browser.new_context()
    page = context.new_page()
    with running_server(url, "--write", "--token", TOKEN) as base:
        page.goto(f"{base}/login")
        page.locator("input[name=token]").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{base}/")
        with another_local_site(_attacks(base, sid, eid)) as evil:
            page.goto(f"{evil}/form")
            page.wait_for_url(f"{base}/sessions/{sid}/revert")
            form_answer = page.locator("h1").inner_text()
            after_form = _reverted(url, sid, eid)
            for attack in ("/no-cors", "/api"):
                page.goto(evil + attack)
                page.wait_for_function("document.title === 'answered'")
            after_fetches = _reverted(url, sid, eid)
        page.goto(f"{base}/sessions/{sid}")
        operation = page.locator(f"details#op-{eid}")
        operation.locator("summary").click()
        operation.get_by_role("button", name="Revert").click()
        page.locator(f"details#op-{eid}.reverted").wait_for()
    context.close()

    assert form_answer == "CrossOriginRefused"
    assert not after_form
    assert not after_fetches
    assert _reverted(url, sid, eid)

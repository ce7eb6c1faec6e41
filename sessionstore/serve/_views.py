"""The viewer: server-rendered pages over the same data as the JSON API.

Every value from the log reaches the page through Jinja2 with autoescaping on, so a transcript
holding ``<script>`` shows it as text. The pages work without JavaScript; ``/static/viewer.js``
only adds conveniences (keyboard navigation between turns).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from ..audit import (
    AuditEntry,
    AuditReport,
    audit,
    check_turn,
    context_breakdown,
    served_request,
    token_timeline,
    turn_diff,
)
from ..pipeline import revert
from ..projections import Session
from ._api import session_json, store_of
from ._gauge import gauge
from ._safety import COOKIE, csrf_matches, new_session_cookie, token_matches

__all__ = ["STATIC", "include_views", "render"]

#: Kinds of audit entry ``revert`` undoes (a revert button shows on each, with ``--write``).
REVERTIBLE = frozenset(
    {
        "tool_result_persisted",
        "snip_applied",
        "microcompact_applied",
        "collapse_committed",
        "compact_boundary",
    }
)

ENV = Environment(
    loader=PackageLoader("sessionstore.serve", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["number"] = lambda n: "-" if n is None else f"{n:,}"

#: The static files, by the only names a URL can ask for; read from the package once.
STATIC = {
    name: (resources.files("sessionstore.serve").joinpath("static", name).read_bytes(), media)
    for name, media in (("viewer.css", "text/css"), ("viewer.js", "text/javascript"))
}


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """``template`` rendered with ``context``, whether writes are on, and the signed-in session's
    form token (``csrf``, None without a sign-in)."""
    csrf = getattr(request.state, "csrf", None)
    html = ENV.get_template(template).render(write=request.app.state.write, csrf=csrf, **context)
    return HTMLResponse(html, status_code=status)


#: The most bytes the sign-in form's body may hold (it carries one token).
SIGN_IN_LIMIT = 64 * 1024

#: Messages drawn under each operation that replaced some; the rest are named by their seq range
#: and read through the events API. A compaction of a long session replaces thousands: on a
#: 67,221-event import, 16 operations replaced 16,200 messages (10 MB of HTML, drawn in full).
SHOWN_REPLACED = 50
#: Seqs this close together are read in one range (the events between are not decoded).
_READ_GAP = 16


def _blocks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as blocks (a plain string is one text block)."""
    content = payload.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _replaced(entry: AuditEntry) -> dict[str, Any]:
    return entry.details.get("replaced") or {}


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted seqs as (first, last) ranges, joining those at most ``_READ_GAP`` apart."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and seq - runs[-1][1] <= _READ_GAP:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def _drawn_messages(session: Session, report: AuditReport) -> dict[str, dict[str, Any]]:
    """The replaced messages the timeline draws (the first ``SHOWN_REPLACED`` of each operation),
    by uuid, ready to draw.

    The audit listed them from the transcript digest, which has each message's uuid and seq but
    not its content: only those seqs are read from the log, never the whole transcript. Two
    messages with one uuid (a hostile transcript): the later is drawn.
    """
    wanted = {u for entry in report.entries for u in _replaced(entry).get("uuids", [])[:SHOWN_REPLACED]}
    seq_of: dict[str, int] = {}
    for e in session.transcript_digest:
        uuid = e.payload.get("message_uuid")
        if e.type == "message_appended" and uuid and str(uuid) in wanted:
            seq_of[str(uuid)] = e.seq
    uuid_at: dict[int, str] = {seq: uuid for uuid, seq in seq_of.items()}
    drawn: dict[str, dict[str, Any]] = {}
    for first, last in _runs(sorted(uuid_at)):
        for record in session.log.read(first, last):
            if record.seq in uuid_at:
                payload = record.payload_dict()
                drawn[uuid_at[record.seq]] = {
                    "seq": record.seq,
                    "role": payload.get("role"),
                    "blocks": _blocks(payload),
                }
    return drawn


def _timeline(session: Session, report: AuditReport) -> list[dict[str, Any]]:
    """Audit entries with the messages each replaced (the first ``SHOWN_REPLACED``), ready to draw."""
    drawn = _drawn_messages(session, report)
    rows = []
    for entry in report.entries:
        replaced = _replaced(entry)
        listed = replaced.get("uuids", [])
        shown = [drawn[u] for u in listed[:SHOWN_REPLACED] if u in drawn]
        rows.append(
            {
                "entry": entry,
                "summary": entry.details.get("summary"),
                "replaced": shown,
                "replaced_count": replaced.get("count", len(listed)),
                "more": max(0, len(listed) - SHOWN_REPLACED),
                "more_after_seq": shown[-1]["seq"] if shown else None,
                "last_seq": replaced.get("last_seq"),
                "revertible": entry.kind in REVERTIBLE and entry.reverted_by is None,
            }
        )
    return rows


views = APIRouter(include_in_schema=False)


@views.get("/", response_class=HTMLResponse)
def sessions_page(request: Request, after: str | None = None) -> HTMLResponse:
    page = store_of(request).list_sessions(limit=100, after=after)
    return render(
        request,
        "sessions.html",
        sessions=[session_json(info) for info in page],
        next_after=page[-1].id if len(page) == 100 else None,
    )


@views.get("/sessions/{session_id}", response_class=HTMLResponse)
def session_page(request: Request, session_id: str) -> HTMLResponse:
    store = store_of(request)
    receipt = store.erasure(session_id)
    if receipt is not None:  # the log is gone: its receipt is what there is to see
        return render(request, "erased.html", status=410, receipt=receipt.to_dict())
    info = store.get_session(session_id)
    session = Session(store, session_id)
    report = audit(session)
    return render(
        request,
        "session.html",
        info=session_json(info),
        tokens=session.token_state(),
        gauge=gauge(token_timeline(session)),
        timeline=_timeline(session, report),
        report=report,
        breakdown=context_breakdown(session),
    )


@views.get("/sessions/{session_id}/context", response_class=HTMLResponse)
def context_page(request: Request, session_id: str) -> HTMLResponse:
    """The request the model would get next (as ``sessionstore context`` prints it), by category."""
    session = Session(store_of(request), session_id)
    return render(
        request,
        "context.html",
        session_id=session_id,
        tokens=session.token_state(),
        breakdown=context_breakdown(session),
        # The same text `sessionstore context` prints.
        request_json=json.dumps(session.request(), ensure_ascii=False, indent=2),
    )


@views.get("/sessions/{session_id}/turns/{turn}", response_class=HTMLResponse)
def turn_page(request: Request, session_id: str, turn: int) -> HTMLResponse:
    check_turn(store_of(request), session_id, turn)
    session = Session(store_of(request), session_id)
    replay = served_request(session, turn)
    served = sum(1 for e in session.transcript_digest if e.type == "context_served")
    return render(
        request,
        "turn.html",
        session_id=session_id,
        replay=replay,
        served=served,
        # The same text `sessionstore served --turn N` prints.
        request_json=json.dumps(replay.request, ensure_ascii=False, indent=2),
        diff=turn_diff(session, turn - 1, turn).splitlines() if turn > 1 else None,
    )


write_views = APIRouter(include_in_schema=False)


@write_views.post("/sessions/{session_id}/revert")
def revert_form(
    request: Request, session_id: str, event_id: str = Form(...), csrf: str | None = Form(None)
) -> Response:
    """The viewer's revert button (only mounted with ``--write``). Signed in with the cookie, the
    form must carry the session's form token (``csrf``): a page of another origin cannot read it."""
    session = getattr(request.state, "session", None)
    if session is not None and not csrf_matches(csrf, request.app.state.token, session):
        message = "the form does not carry this sign-in's form token: reload the page and submit it again"
        return _error_page(request, 403, "CrossOriginRefused", message)
    revert(Session(store_of(request), session_id), event_id)
    return RedirectResponse(f"/sessions/{session_id}#timeline", status_code=303)


@views.get("/static/{name}")
def static_file(name: str) -> Response:
    """One of the fixed files in ``STATIC``; no other name, and nothing from a path, is served."""
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    body, media = STATIC[name]
    return Response(body, media_type=media, headers={"Cache-Control": "max-age=3600"})


@views.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return render(request, "login.html", failed=False)


def _error_page(request: Request, status: int, kind: str, message: str) -> HTMLResponse:
    return render(request, "error.html", status=status, error={"type": kind, "message": message})


@views.post("/login")
async def login(request: Request) -> Response:
    """Set the token cookie when the form's ``token`` is right (HttpOnly, SameSite=Strict).

    Anyone may post here, before any token: the body is read by hand, URL-encoded only and at
    most ``SIGN_IN_LIMIT`` bytes (a multipart upload would be spooled to disk whole). After
    ``auth_failures`` wrong tokens a client is answered 429 for a while (``AuthThrottle``)."""
    client = request.client.host if request.client else "unknown"
    throttle = request.app.state.throttle
    wait = throttle.retry_after(client)
    if wait is not None:
        page = _error_page(request, 429, "TooManyRequests", f"too many wrong tokens: try again in {wait} s")
        page.headers["Retry-After"] = str(wait)
        return page
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        message = "the sign-in form is posted as application/x-www-form-urlencoded"
        return _error_page(request, 415, "UnsupportedMediaType", message)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > SIGN_IN_LIMIT:
            message = f"a sign-in form holds at most {SIGN_IN_LIMIT:,} bytes"
            return _error_page(request, 413, "PayloadTooLarge", message)
    token = parse_qs(body.decode("latin-1")).get("token", [None])[-1]
    expected = request.app.state.token
    if expected is None or token is None or not token_matches(token, expected):
        throttle.failed(client)
        return render(request, "login.html", status=401, failed=True)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, new_session_cookie(expected), httponly=True, samesite="strict")
    return response


def include_views(app: FastAPI, *, write: bool) -> None:
    """Mount the pages; the revert form only when ``write``."""
    app.include_router(views)
    if write:
        app.include_router(write_views)

"""The JSON API under ``/api``: reads always, write operations only when the app was built with
``write=True`` (docs/viewer.md lists every endpoint; ``/api/openapi.json`` describes them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, FastAPI, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from ..audit import (
    audit,
    check_turn,
    context_breakdown,
    served_request,
    token_timeline,
    turn_diff,
    verify_session,
)
from ..errors import ValidationError
from ..events import load_json
from ..pipeline import (
    StageReport,
    collapse,
    compact,
    default_summarizer,
    revert,
    revert_and_recompact,
    snip,
)
from ..projections import Session
from ..store import ANY, RecordedEvent, SessionInfo, SessionStore

__all__ = ["include_api", "session_json", "store_of"]

#: The most items one page returns.
MAX_PAGE = 500
#: How many stored events one read fetches while filtering a page of events by type.
_READ_CHUNK = 1000


def store_of(request: Request) -> SessionStore:
    """The store the app serves (set by ``create_app``)."""
    store: SessionStore = request.app.state.store
    return store


def session_json(info: SessionInfo) -> dict[str, Any]:
    """A session row as JSON."""
    return {**dataclasses.asdict(info), "created_at": info.created_at.isoformat()}


Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="items per page")]

read_router = APIRouter(prefix="/api", tags=["read"])


@read_router.get("/sessions", summary="Sessions by id, a page at a time")
def list_sessions(
    request: Request,
    limit: Limit = 100,
    after: Annotated[str | None, Query(description="the last id of the previous page")] = None,
    tenant: str | None = None,
    user: Annotated[str | None, Query(description="needs tenant")] = None,
) -> dict[str, Any]:
    """``{"sessions": [...], "next_after": id or null}``; pass ``next_after`` as ``after``."""
    page = store_of(request).list_sessions(limit=limit, after=after, tenant=tenant, user=user)
    return {
        "sessions": [session_json(info) for info in page],
        "next_after": page[-1].id if len(page) == limit else None,
    }


@read_router.get("/sessions/{session_id}", summary="A session, its token state and request count")
def get_session(request: Request, session_id: str) -> dict[str, Any]:
    """The session row, the next request's token state and how many requests were served."""
    store = store_of(request)
    info = store.get_session(session_id)
    session = Session(store, session_id)
    served = sum(1 for e in session.transcript_digest if e.type == "context_served")
    return {
        "session": session_json(info),
        "tokens": session.token_state().to_dict(),
        "requests_served": served,
    }


@read_router.get("/sessions/{session_id}/events", summary="A session's events, a page at a time")
def list_events(
    request: Request,
    session_id: str,
    after_seq: Annotated[int, Query(ge=0, description="the last seq of the previous page")] = 0,
    limit: Limit = 100,
    type: Annotated[str | None, Query(description="only events of this type")] = None,
) -> dict[str, Any]:
    """``{"events": [...], "next_after_seq": seq or null}`` in the visible (fork-aware) numbering.

    A page also ends once its payloads reach ``page_bytes`` (``ServeLimits``; one event at
    least): its ``next_after_seq`` then continues it. Stored payloads are unpacked one at a time,
    so a page of large events holds about its own bytes, not the chunk read."""
    page_bytes = request.app.state.limits.page_bytes
    log = store_of(request).visible_log(session_id)
    found: list[RecordedEvent] = []
    size, full = 0, False
    start = after_seq + 1
    while not full:
        chunk = log.read(start, start + _READ_CHUNK - 1)
        for event in chunk:
            if type is not None and event.type != type:
                continue
            found.append(event)
            size += len(event.payload)
            full = len(found) == limit or size >= page_bytes
            if full:
                break
        if len(chunk) < _READ_CHUNK:
            break
        start += _READ_CHUNK
        del chunk  # its unpacked payloads that are not on the page
    return {
        "events": [e.to_dict() for e in found],
        "next_after_seq": found[-1].seq if full else None,
    }


@read_router.get("/sessions/{session_id}/turns", summary="Token state per served request")
def list_turns(request: Request, session_id: str) -> dict[str, Any]:
    """The token gauge: the window's lines and each turn's used tokens with the stages marked at
    the first turn they shaped (``sessionstore.audit.token_timeline``)."""
    return token_timeline(store_of(request), session_id).to_dict()


@read_router.get("/sessions/{session_id}/turns/{turn}", summary="The request served at a turn, checked")
def get_turn(request: Request, session_id: str, turn: int) -> dict[str, Any]:
    """The request rebuilt from the log (as ``sessionstore served --turn N --json``) and whether its
    bytes match the fingerprint recorded when it was served. A mismatch is data, not an error."""
    check_turn(store_of(request), session_id, turn)
    return dataclasses.asdict(served_request(Session(store_of(request), session_id), turn))


@read_router.get("/sessions/{session_id}/diff", summary="How the request changed between two turns")
def get_diff(
    request: Request,
    session_id: str,
    from_turn: Annotated[int, Query(alias="from", description="a turn (1 = the first request)")],
    to_turn: Annotated[int, Query(alias="to", description="a later (or earlier) turn")],
) -> dict[str, Any]:
    """A unified diff of the two served requests as indented JSON (empty: no change)."""
    check_turn(store_of(request), session_id, from_turn)
    check_turn(store_of(request), session_id, to_turn)
    diff = turn_diff(Session(store_of(request), session_id), from_turn, to_turn)
    return {"from": from_turn, "to": to_turn, "diff": diff}


@read_router.get("/sessions/{session_id}/audit", summary="The audit timeline")
def get_audit(request: Request, session_id: str) -> dict[str, Any]:
    """Every context operation, as ``sessionstore audit --json``; an erased session's receipt."""
    return audit(store_of(request), session_id).to_dict()


@read_router.get("/sessions/{session_id}/context", summary="The next request, by category")
def get_context(request: Request, session_id: str) -> dict[str, Any]:
    """The request the model would get next, its token state and a ``/context``-style breakdown."""
    session = Session(store_of(request), session_id)
    return {
        "request": session.request(),
        "tokens": session.token_state().to_dict(),
        "breakdown": context_breakdown(session).to_dict(),
    }


@read_router.get("/sessions/{session_id}/verify", summary="Hash chain and projection snapshots")
def get_verify(
    request: Request,
    session_id: str,
    counts: Annotated[
        bool, Query(description="also recount the token counts made after COMMIT (a tokenizer pass)")
    ] = False,
) -> dict[str, Any]:
    """As ``sessionstore verify SESSION --json [--counts]``; ``ok`` false is data (HTTP 200), not
    an error."""
    return verify_session(store_of(request), session_id, counts=counts).to_dict()


class _UniqueKeysRoute(APIRoute):
    """A write whose JSON body holds a key twice in one object is refused (422, naming the key):
    the parser would keep the last value and drop the others without a word."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def unique_keys(request: Request) -> Response:
            body = await request.body()  # kept on the request: the handler reads it again
            if body:
                try:
                    load_json(body, where="the request body")
                except ValidationError:
                    raise
                except (ValueError, RecursionError):
                    pass  # not JSON: the handler's own parse says where (a 422 as before)
            return await handler(request)

        return unique_keys


write_router = APIRouter(prefix="/api", tags=["write"], route_class=_UniqueKeysRoute)


class _Body(BaseModel):
    """A write's body: its fields exactly, with the JSON types they name (no ``true`` taken for
    1 or "5" for 5, as the store refuses a bool for a seq), and no field it does not know (a
    misspelt ``with_forks`` is an error, not an erase without the forks)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class AppendBody(_Body):
    """Events to append, as ``sessionstore append`` reads them (one JSON object each)."""

    events: list[dict[str, Any]] = Field(min_length=1)
    expected: int | Literal["any"] = "any"


class SnipBody(_Body):
    rounds: int = Field(ge=1, description="how many of the oldest API rounds")


class CollapseBody(_Body):
    from_uuid: str = Field(description="message uuid of the span's first prompt")
    to_uuid: str = Field(description="message uuid of the span's last message")


class RevertBody(_Body):
    event_id: str = Field(
        description="the persisted result, snip, micro-compaction, collapse or compaction to undo"
    )
    recompact: bool = Field(
        default=False,
        description="a compaction only: revert it even when its history no longer fits, then compact "
        "again at once (as `sessionstore revert --recompact`)",
    )


class CompactBody(_Body):
    instructions: str | None = None
    up_to_uuid: str | None = None
    from_uuid: str | None = None


class EraseBody(_Body):
    reason: str = Field(min_length=1, description="recorded in the erasure receipt")
    with_forks: bool = False


def _report(report: StageReport) -> dict[str, Any]:
    return {
        "stage": report.stage,
        "tokens_freed": report.tokens_freed,
        "event_ids": list(report.event_ids),
        "note": report.note,
    }


@write_router.post("/sessions/{session_id}/events", summary="Append events")
def post_events(request: Request, session_id: str, body: AppendBody) -> dict[str, Any]:
    """Append atomically; ``expected`` is the last seq the caller saw (ConcurrencyError, 409, if not).
    At most ``max_append_events`` events (``ServeLimits``) at once."""
    most = request.app.state.limits.max_append_events
    if len(body.events) > most:
        msg = f"one append takes at most {most:,} events, not {len(body.events):,}: send them in batches"
        raise ValidationError(msg, field="events")
    expected = ANY if body.expected == "any" else body.expected
    result = store_of(request).visible_log(session_id).append(body.events, expected)
    return dataclasses.asdict(result)


@write_router.post("/sessions/{session_id}/snip", summary="Drop the oldest API rounds (revertible)")
def post_snip(request: Request, session_id: str, body: SnipBody) -> dict[str, Any]:
    return _report(snip(Session(store_of(request), session_id), body.rounds))


@write_router.post("/sessions/{session_id}/collapse", summary="Summarize a span in place (revertible)")
def post_collapse(request: Request, session_id: str, body: CollapseBody) -> dict[str, Any]:
    session = Session(store_of(request), session_id)
    """Stage and commit a collapse of the span; revert the returned ``event_id`` to undo it."""
    summarizer = default_summarizer(model=session.api_state.model)
    collapsed = collapse(session, summarizer, body.from_uuid, body.to_uuid)
    return {
        "staged_event_id": collapsed.event_ids[0],
        "event_id": collapsed.event_ids[1],
        "tokens_before": collapsed.tokens_before,
        "tokens_after": collapsed.tokens_after,
    }


@write_router.post("/sessions/{session_id}/revert", summary="Undo a context edit")
def post_revert(request: Request, session_id: str, body: RevertBody) -> dict[str, Any]:
    """The revert's report. A compaction whose history would not fit is refused (409, with
    ``needed`` and ``limit``) unless ``recompact``: then the report carries ``recompacted``, the
    new compaction (``ok`` false when it failed: the request stays over the limit until one
    succeeds). ``recompact`` on anything but a compaction in effect is a 422."""
    session = Session(store_of(request), session_id)
    if not body.recompact:
        return _report(revert(session, body.event_id))
    summarizer = default_summarizer(model=session.api_state.model)
    reverted, recompacted = revert_and_recompact(session, body.event_id, summarizer)
    return {**_report(reverted), "recompacted": dataclasses.asdict(recompacted)}


@write_router.post("/sessions/{session_id}/compact", summary="Summarize the conversation now")
def post_compact(
    request: Request, session_id: str, body: Annotated[CompactBody | None, Body()] = None
) -> dict[str, Any]:
    """A failed compaction is recorded and returned with ``ok`` false (HTTP 200)."""
    body = body or CompactBody()
    session = Session(store_of(request), session_id)
    result = compact(
        session,
        default_summarizer(model=session.api_state.model),
        custom_instructions=body.instructions,
        up_to_uuid=body.up_to_uuid,
        from_uuid=body.from_uuid,
    )
    return dataclasses.asdict(result)


@write_router.post("/sessions/{session_id}/erase", summary="Erase a session (its receipt stays)")
def post_erase(request: Request, session_id: str, body: EraseBody) -> dict[str, Any]:
    receipts = store_of(request).erase(session_id, reason=body.reason, with_forks=body.with_forks)
    return {"receipts": [r.to_dict() for r in receipts]}


def include_api(app: FastAPI, *, write: bool) -> None:
    """Mount the read endpoints, and the write endpoints when ``write``."""
    app.include_router(read_router)
    if write:
        app.include_router(write_router)

"""``sessionstore verify``: the hash chain, and every projection snapshot against a full rebuild.

The chain check (``SessionStore.verify``) proves the log was not altered. A snapshot is not
part of the chain: it is a cache a reader starts from instead of seq 1, so a snapshot that
loads but holds the wrong state would silently change what the model is sent. This module
therefore also folds every registered projection twice, from its latest snapshot (the way a
reader resumes) and from seq 1, and compares the two states. For ``api_context`` it also
compares the request bytes and ``used_tokens()`` of ``Session(store, sid)`` against
``Session(store, sid, use_snapshots=False)``: the numbers a caller actually sees.

Outcomes per projection:

* ``match``: the snapshot folded forward equals the rebuild.
* ``mismatch``: it does not. Readers would serve the snapshot's version: this fails
  verification (exit status 3), like a broken chain.
* ``unreadable``: the snapshot does not load. Every reader ignores such a snapshot and folds
  from seq 1 instead (``rebuild``), so it cannot change a result: reported, but not a failure.
* ``none``: no snapshot for this store's tokenizer and the projection's current version.
* ``error``: folding the log raised (an undecodable or unknown event, say): a failure.
* ``beyond_head``: the newest snapshot is labelled with a seq the log does not reach. Readers
  ignore it (they fold from seq 1), but it means events were removed from the end of the log or
  the row was written by something other than sessionstore: a failure.

Every blob the session's own events name is read back (``blobs``, ``_blobs.py``): blobs are
outside the chain, so one deleted or replaced behind the store is ``mismatch`` (a failure, naming
the seq and the blob); sessions that name no blob get no such entry.

With ``counts=True`` (``verify --counts``) one more check, ``token_counts``, recounts every count
deferred past COMMIT (outside the chain: ``_recount.py``): ``match``, ``mismatch`` (a failure:
the seqs, the count readers use and the text's), or ``none`` (no deferred counts, or no counter).
It is a tokenizer pass over the session's text (on a 5,000-event, 10 MB session: 1.7 s, where
everything else takes 0.2 s), so it is not run by default: ``counts_checked`` is then False and
the command line says what it skipped.

Only snapshots a reader of *this* store would use are checked: the current version of each
registered projection, keyed by this store's tokenizer. Everything here only reads, and returns
data: the command line (``sessionstore/cli/_verify.py``) prints it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from .._paths import check_path, read_regular_file
from ..errors import DataCorruptionError, SessionNotFoundError, ValidationError
from ..projections import (
    PROJECTIONS,
    ApiContextProjection,
    ApiContextState,
    Projection,
    Session,
    SessionConfig,
)
from ..projections._base import rebuild
from ..projections._session import NO_TOKENIZER
from ..store import ChainHead, SessionLog, SessionStore, VerifyReport
from ..store._contract import check_int, check_store
from ._blobs import check_blobs
from ._recount import recount_token_counts

__all__ = [
    "ProjectionCheck",
    "SessionVerification",
    "all_heads",
    "format_head",
    "missing_session",
    "read_heads",
    "verify_all",
    "verify_session",
]

#: A heads file holds one short line per session: 256 MiB is millions of sessions, and it bounds
#: what a wrong path (a huge log, /dev/zero behind a symlink) can make verify read.
MAX_HEADS_FILE_BYTES = 256 * 1024 * 1024

Status = Literal["match", "mismatch", "unreadable", "none", "error", "beyond_head"]
#: Never write a snapshot while verifying: verify reads only.
_READ_ONLY = SessionConfig(snapshot_every=0)
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: How often to re-align two live views when another writer keeps appending meanwhile.
_ALIGN_TRIES = 5


@dataclass(frozen=True)
class ProjectionCheck:
    """One projection's snapshot compared with the full rebuild.

    Attributes:
        projection: the projection's name.
        status: see the module docstring.
        snapshot_seq: seq of the snapshot checked (None: none was found).
        detail: why it failed or was ignored (empty when it matched or none exists).
    """

    projection: str
    status: Status
    snapshot_seq: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """False for a mismatch, an error or a snapshot past the head; readers ignore an unreadable one."""
        return self.status not in ("mismatch", "error", "beyond_head")

    def to_dict(self) -> dict[str, Any]:
        """The check as a JSON-ready dict."""
        return {
            "projection": self.projection,
            "status": self.status,
            "snapshot_seq": self.snapshot_seq,
            "detail": self.detail,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class SessionVerification:
    """The chain report of one session, and its projection checks up to ``checked_seq``."""

    chain: VerifyReport
    checked_seq: int
    projections: tuple[ProjectionCheck, ...] = field(default_factory=tuple)
    #: True when the deferred token counts were recounted (``counts=True``).
    counts_checked: bool = False

    @property
    def session_id(self) -> str:
        """The session verified."""
        return self.chain.session_id

    @property
    def ok(self) -> bool:
        """True when the chain verifies and no snapshot disagrees with the rebuild."""
        return self.chain.ok and all(check.ok for check in self.projections)

    def to_dict(self) -> dict[str, Any]:
        """The verification as a JSON-ready dict (the chain report's keys at the top level)."""
        chain = self.chain
        return {
            "session_id": chain.session_id,
            "events_checked": chain.events_checked,
            "first_bad_seq": chain.first_bad_seq,
            "reason": chain.reason,
            "chain_ok": chain.ok,
            "head": chain.head,
            "identity_bound": chain.identity_bound,
            "checked_seq": self.checked_seq,
            "projections": [check.to_dict() for check in self.projections],
            "erasure": None if chain.erasure is None else chain.erasure.to_dict(),
            "token_counts_checked": self.counts_checked,
            "ok": self.ok,
        }

    def summary(self) -> str:
        """One line: ``ok``, ``BROKEN at seq N``, and any snapshot that failed or was ignored."""
        chain = self.chain
        # A chain from before identities were bound: its sessions row is not protected (say so).
        unbound = "" if chain.identity_bound else ", sessions row not bound: an older chain"
        if not chain.ok:
            where = "" if chain.first_bad_seq is None else f" at seq {chain.first_bad_seq}"
            head = f"{chain.session_id}: BROKEN{where}: {chain.reason}"
        elif all(c.ok for c in self.projections):
            head = f"{chain.session_id}: ok ({chain.events_checked} events{unbound})"
        else:
            failed = [c for c in self.projections if not c.ok]
            if all(c.projection == COUNTS_CHECK for c in failed):
                failure = f"TOKEN COUNT {failed[0].status.upper()}"  # MISMATCH, or ERROR
            elif all(c.projection == BLOBS_CHECK for c in failed):
                failure = f"BLOB {failed[0].status.upper()}"
            else:
                failure = "SNAPSHOT MISMATCH"
            head = f"{chain.session_id}: {failure} ({chain.events_checked} events{unbound})"
        checked = [c for c in self.projections if c.status != "none" and c.projection not in _NOT_SNAPSHOTS]
        if checked:
            head += "; snapshots: " + ", ".join(_describe(c) for c in checked)
        for blobs in self.projections:
            if blobs.projection == BLOBS_CHECK:
                verdict = "ok" if blobs.status == "match" else blobs.status.upper()
                head += f"; blobs: {verdict} ({blobs.detail})"
        for counts in self.projections:
            if counts.projection == COUNTS_CHECK and counts.status != "none":
                verdict = "ok" if counts.status == "match" else counts.status.upper()
                head += f"; token counts: {verdict} ({counts.detail})"
        if chain.erasure is not None:  # the receipt explains what is (no longer) there
            head += f"; {chain.erasure.summary()}"
        return head


def _describe(check: ProjectionCheck) -> str:
    where = check.projection if check.snapshot_seq is None else f"{check.projection}@{check.snapshot_seq}"
    if check.status == "match":
        return f"{where} ok"
    return f"{where} {check.status.upper()} ({check.detail})"


def _decoded(dump: bytes) -> Any:
    """A JSON dump as data (None when it is not one JSON document)."""
    try:
        return json.loads(dump)
    except ValueError:
        return None


def _api_fields(state: ApiContextState) -> dict[str, Any]:
    """The state's fields as data, its messages as a plain list."""
    data = {f.name: getattr(state, f.name) for f in fields(state)}
    data["messages"] = list(state.messages)
    return data


def _first_difference(left: Any, right: Any) -> str:
    """Where two states differ: the top-level keys of an object, the first item of an array."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))
        return "state differs in " + ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
    if isinstance(left, list) and isinstance(right, list):
        at = next((i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y), None)
        if at is None:
            return f"{len(left)} items, {len(right)} rebuilt"
        return f"item {at} differs ({len(left)} items, {len(right)} rebuilt)"
    return "state differs"


def _snapshot(
    store: SessionStore, session_id: str, projection: Projection[Any], tokenizer: str, to_seq: int
) -> tuple[int | None, str | None]:
    """(seq of the snapshot a reader would start from, why it does not load), or (None, None)."""
    snapshot = store.latest_snapshot(session_id, projection.name, projection.version, tokenizer, to_seq)
    if snapshot is None:
        return None, None
    try:
        projection.load(snapshot.state)
    except Exception as e:  # rebuild() ignores a snapshot for any failure to load: so do we
        return snapshot.seq, f"{type(e).__name__}: {e}"
    return snapshot.seq, None


def _beyond_head(
    store: SessionStore, session_id: str, projection: Projection[Any], tokenizer: str, head: int
) -> ProjectionCheck | None:
    """A failed check when the projection's newest snapshot is labelled past the log's head."""
    newest = store.latest_snapshot(session_id, projection.name, projection.version, tokenizer)
    if newest is None or newest.seq <= head:
        return None
    head = SessionLog(store, session_id).last_seq()  # a writer may have appended and snapshotted meanwhile
    if newest.seq <= head:
        return None
    detail = f"snapshot seq {newest.seq} is past the log's last seq {head}: events removed from the end?"
    return ProjectionCheck(projection.name, "beyond_head", newest.seq, detail)


def _live_pair(store: SessionStore, session_id: str) -> tuple[Session, Session]:
    """A Session resumed as readers resume it, and one folded from seq 1, at the same seq."""
    scratch = Session(store, session_id, _READ_ONLY, use_snapshots=False)
    live = Session(store, session_id, _READ_ONLY)
    for _ in range(_ALIGN_TRIES):  # a writer appending meanwhile: catch both up to one seq
        if live.last_seq == scratch.last_seq:
            break
        scratch.refresh()
        live.refresh()
    return live, scratch


def _check_api_context(live: Session, scratch: Session, snapshot_seq: int) -> ProjectionCheck:
    name = ApiContextProjection.name
    problems: list[str] = []
    if live.last_seq != scratch.last_seq:
        detail = f"the session kept growing ({live.last_seq} vs {scratch.last_seq}): try again"
        return ProjectionCheck(name, "error", snapshot_seq, detail)
    if live.request_bytes() != scratch.request_bytes():
        problems.append("request bytes differ")
    used, rebuilt = live.used_tokens(), scratch.used_tokens()
    if used != rebuilt:
        problems.append(f"used_tokens {used} != {rebuilt} rebuilt")
    projection = ApiContextProjection()
    resumed, full = projection.dump(live.api_state), projection.dump(scratch.api_state)
    if resumed != full:
        problems.append(_first_difference(_api_fields(live.api_state), _api_fields(scratch.api_state)))
    if problems:
        return ProjectionCheck(name, "mismatch", snapshot_seq, "; ".join(problems))
    return ProjectionCheck(name, "match", snapshot_seq)


def _check_generic(
    store: SessionStore, session_id: str, projection: Projection[Any], tokenizer: str, to_seq: int
) -> ProjectionCheck:
    ahead = _beyond_head(store, session_id, projection, tokenizer, to_seq)
    if ahead is not None:
        return ahead
    seq, unreadable = _snapshot(store, session_id, projection, tokenizer, to_seq)
    if seq is None:
        return ProjectionCheck(projection.name, "none")
    if unreadable is not None:
        return ProjectionCheck(projection.name, "unreadable", seq, unreadable)
    read = SessionLog(store, session_id).read  # a fork's views count seqs through its parent's prefix
    resumed, _ = rebuild(store, session_id, projection, tokenizer=tokenizer, to_seq=to_seq, read=read)
    full, _ = rebuild(
        store, session_id, projection, tokenizer=tokenizer, use_snapshots=False, to_seq=to_seq, read=read
    )
    a, b = projection.dump(resumed), projection.dump(full)
    if a != b:
        return ProjectionCheck(projection.name, "mismatch", seq, _first_difference(_decoded(a), _decoded(b)))
    return ProjectionCheck(projection.name, "match", seq)


def _other_projections() -> list[Projection[Any]]:
    """One instance of every projection of the package but ``api_context`` (checked through Session)."""
    return [cls() for cls in PROJECTIONS if cls is not ApiContextProjection]


def verify_session(
    store: SessionStore, session_id: str, *, head: str | ChainHead | None = None, counts: bool = False
) -> SessionVerification:
    """Walk the session's hash chain, then check every projection snapshot against a rebuild.

    ``head``: an anchor kept outside the database the chain must still hold (``SessionStore.verify``).
    ``counts``: also recount the session's deferred token counts (a ``token_counts`` check: a
    tokenizer pass over its text).

    Raises:
        SessionNotFoundError: no such session.
    """
    chain = check_store("store", store).verify(session_id, head=head)
    try:
        log = SessionLog(store, session_id)
    except SessionNotFoundError:  # its events outlived its sessions row: nothing to fold
        return SessionVerification(chain, 0)
    except DataCorruptionError as e:  # an altered sessions row: a fork ancestry that loops
        if chain.ok:
            chain = replace(chain, reason=str(e), head=None)
        return SessionVerification(chain, 0)
    counter = store.token_counter
    tokenizer = counter.name if counter is not None else NO_TOKENIZER
    checks: list[ProjectionCheck] = []
    api_name = ApiContextProjection.name
    to_seq = log.last_seq()  # views count seqs through a fork's prefix
    try:
        api = ApiContextProjection()
        ahead = _beyond_head(store, session_id, api, tokenizer, to_seq)
        seq, unreadable = _snapshot(store, session_id, api, tokenizer, to_seq)
        if ahead is not None:
            checks.append(ahead)
        elif seq is None:
            checks.append(ProjectionCheck(api_name, "none"))
        elif unreadable is not None:  # Session skips it too (logging a warning): don't load it
            checks.append(ProjectionCheck(api_name, "unreadable", seq, unreadable))
        else:
            live, scratch = _live_pair(store, session_id)
            to_seq = scratch.last_seq
            checks.append(_check_api_context(live, scratch, seq))
    except Exception as e:  # a tampered or unknown event can make the fold itself raise
        checks.append(ProjectionCheck(api_name, "error", None, f"{type(e).__name__}: {e}"))
    for projection in _other_projections():
        try:
            checks.append(_check_generic(store, session_id, projection, tokenizer, to_seq))
        except Exception as e:
            checks.append(ProjectionCheck(projection.name, "error", None, f"{type(e).__name__}: {e}"))
    if chain.erasure is None and chain.ok:  # erased: its blobs went too; broken: reported already
        blobs = _check_blobs(store, session_id)
        if blobs is not None:
            checks.append(blobs)
    if counts:
        if chain.erasure is not None:  # its counts went with it
            checks.append(ProjectionCheck(COUNTS_CHECK, "none", None, "erased: its counts were deleted"))
        else:
            checks.append(_check_counts(store, session_id))
    return SessionVerification(chain, to_seq, tuple(checks), counts_checked=counts)


#: What the ``token_counts`` check is named in reports.
COUNTS_CHECK = "token_counts"
#: What the blob check is named in reports.
BLOBS_CHECK = "blobs"
#: Checks reported beside the snapshots that are not snapshots.
_NOT_SNAPSHOTS = (COUNTS_CHECK, BLOBS_CHECK)
#: Blobs named in a mismatch's detail; the rest are only counted.
_NAMED_BLOBS = 3


def _check_blobs(store: SessionStore, session_id: str) -> ProjectionCheck | None:
    """The ``blobs`` check: None when the session's events name no blob."""
    try:
        found = check_blobs(store, session_id)
    except Exception as e:  # an undecodable event: the chain check or a fold reports it too
        return ProjectionCheck(BLOBS_CHECK, "error", None, f"{type(e).__name__}: {e}")
    if not found.checked:
        return None
    if found.problems:
        named = "; ".join(f"seq {seq}: blob {sha} {what}" for seq, sha, what in found.problems[:_NAMED_BLOBS])
        rest = len(found.problems) - _NAMED_BLOBS
        more = f" (and {rest} more)" if rest > 0 else ""
        detail = f"{len(found.problems)} of {found.checked} blobs missing or altered: {named}{more}"
        return ProjectionCheck(BLOBS_CHECK, "mismatch", None, detail)
    plural = "s" if found.checked != 1 else ""
    return ProjectionCheck(BLOBS_CHECK, "match", None, f"{found.checked} blob{plural} read")


#: Differing counts named in a mismatch's detail; the rest are only counted.
_NAMED_COUNTS = 3


def _check_counts(store: SessionStore, session_id: str) -> ProjectionCheck:
    """The ``token_counts`` check of ``verify_session(..., counts=True)``."""
    try:
        found = recount_token_counts(store, session_id)
    except Exception as e:  # an undecodable event: the chain check or a fold reports it too
        return ProjectionCheck(COUNTS_CHECK, "error", None, f"{type(e).__name__}: {e}")
    if found.checked is None:
        return ProjectionCheck(COUNTS_CHECK, "none", None, "no token counter: counts not checked")
    if found.differing:
        named = "; ".join(
            f"seq {seq}: {used} used, the text counts {counted}"
            for seq, used, counted in found.differing[:_NAMED_COUNTS]
        )
        rest = len(found.differing) - _NAMED_COUNTS
        more = f" (and {rest} more)" if rest > 0 else ""
        detail = f"{len(found.differing)} of {found.checked} deferred counts differ: {named}{more}"
        return ProjectionCheck(COUNTS_CHECK, "mismatch", None, detail)
    if not found.checked:
        return ProjectionCheck(COUNTS_CHECK, "none", None, "no deferred counts")
    plural = "s" if found.checked != 1 else ""
    return ProjectionCheck(COUNTS_CHECK, "match", None, f"{found.checked} deferred count{plural} recounted")


def verify_all(
    store: SessionStore,
    *,
    page_size: int = 100,
    heads: Mapping[str, ChainHead] | None = None,
    counts: bool = False,
) -> Iterator[SessionVerification]:
    """``verify_session`` for every session in the store, in id order, a page at a time; then
    every id whose events have no sessions row (a failure), every purged session (its erasure
    receipt), and every anchored session that is gone without a receipt (a failure).

    ``heads``: anchors kept outside the database (``heads`` command), by session id.
    ``counts``: see ``verify_session``.
    """
    check_store("store", store)
    check_int("page_size", page_size, minimum=1)  # 0 read an empty page, then failed on it
    if heads is not None and not isinstance(heads, Mapping):
        msg = f"heads must be a mapping of session id to ChainHead, not {type(heads).__name__}"
        raise ValidationError(msg, field="heads")
    # Checked when called, not on the first next(): the walk is a generator of its own.
    return _verify_all(store, page_size, dict(heads or {}), counts)


def _verify_all(
    store: SessionStore, page_size: int, anchors: dict[str, ChainHead], counts: bool
) -> Iterator[SessionVerification]:
    for session_id, altered in _listed(store, page_size):
        if altered is not None:
            anchors.pop(session_id, None)
            yield SessionVerification(VerifyReport(session_id, 0, None, str(altered)), 0)
            continue
        yield verify_session(store, session_id, head=anchors.pop(session_id, None), counts=counts)
    for orphan in store.orphaned_sessions():
        yield verify_session(store, orphan, head=anchors.pop(orphan, None), counts=counts)
    # Purged sessions have no row left: their receipts explain them (a gap, not a failure).
    after = None
    while receipts := store.erasures(limit=page_size, after=after):
        for receipt in receipts:
            if receipt.method == "purged":
                yield verify_session(store, receipt.session_id, head=anchors.pop(receipt.session_id, None))
        after = receipts[-1].session_id
    for anchor in sorted(anchors.values(), key=lambda a: a.session_id):
        yield missing_session(anchor)


def missing_session(anchor: ChainHead) -> SessionVerification:
    """The failed verification of an anchored session that has neither a row nor events."""
    reason = f"anchored at seq {anchor.seq}, but the session and all its events are gone"
    return SessionVerification(VerifyReport(anchor.session_id, 0, None, reason), 0)


def all_heads(store: SessionStore, *, page_size: int = 100) -> Iterator[ChainHead]:
    """The head of every session, in id order (what to keep outside the database); a session
    whose ``sessions`` row was altered too (its chain's head is what an anchor is for)."""
    check_store("store", store)
    check_int("page_size", page_size, minimum=1)
    return (store.head(session_id) for session_id, _ in _listed(store, page_size))


def _listed(store: SessionStore, page_size: int) -> Iterator[tuple[str, DataCorruptionError | None]]:
    """Every session id in id order, a page at a time, each with the DataCorruptionError its
    ``sessions`` row raises when it was altered (None: it reads). A page holding an altered row
    is read again one session at a time up to it, so one row does not hide every other."""
    after: str | None = None
    size = page_size
    while True:
        try:
            page = store.list_sessions(limit=size, after=after)
        except DataCorruptionError as e:
            if e.session_id is None or (after is not None and e.session_id <= after):
                raise
            if size > 1:
                size = 1
                continue
            yield e.session_id, e
            after = e.session_id
            continue
        for info in page:
            yield info.id, None
        if len(page) < size:
            return
        after, size = page[-1].id, page_size


def format_head(head: ChainHead) -> str:
    """One line of the ``heads`` command: ``SESSION SEQ HASH``."""
    return f"{head.session_id} {head.seq} {head.hash}"


def read_heads(path: str) -> dict[str, ChainHead]:
    """Anchors from a file the ``heads`` command wrote (text or ``--json`` lines), by session.

    Raises:
        ValidationError: a line that is neither, naming the file and line.
        PathRefusedError: not a regular file (a FIFO or a device would block or never end), or
            larger than any heads file (``MAX_HEADS_FILE_BYTES``).
        OSError: the file cannot be read.
    """
    check_path("path", path)
    data = read_regular_file(path, max_bytes=MAX_HEADS_FILE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"{path}: not a heads file (not UTF-8 text at byte {e.start})"
        raise ValidationError(msg, field="heads") from e
    anchors: dict[str, ChainHead] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            anchor = _parse_head(line.strip(), f"{path}:{number}")
            anchors[anchor.session_id] = anchor
    return anchors


def _parse_head(line: str, where: str) -> ChainHead:
    try:
        if line.startswith("{"):
            data = json.loads(line)
            sid, seq, digest = data["session_id"], data["seq"], data["hash"]
        else:
            sid, seq, digest = line.split()
        anchor = ChainHead(str(sid), int(seq), str(digest))
    except (ValueError, KeyError, TypeError):
        msg = f"{where}: expected a line of `sessionstore heads` (SESSION SEQ HASH), got {line[:80]!r}"
        raise ValidationError(msg, field="heads") from None
    if anchor.seq < 0 or not _HEX64.fullmatch(anchor.hash):
        msg = f"{where}: the seq must be >= 0 and the hash 64 hex digits"
        raise ValidationError(msg, field="heads")
    return anchor

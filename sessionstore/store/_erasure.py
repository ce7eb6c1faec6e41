"""Erasure on an append-only log: crypto-shredding, the guarded purge, receipts and retention.

Two ways to erase, chosen per session:

* **shred** (the session is encrypted: it has a ``session_keys`` row): delete the wrapped data
  key and the session's snapshots. The sealed events and blobs stay, so the hash chain (which
  covers the ciphertext) still verifies; nothing can decrypt them again.
* **purge** (a plaintext session): delete its events, snapshots, sessions row and the blobs only
  it references (``blob_refs``: a blob stored by several sessions stays until the last one
  goes). The append-only triggers refuse every DELETE unless an ``erasure_guard`` row names
  the session (or blob); the purge writes those rows, deletes, and removes them inside
  one transaction, so no other transaction ever sees a guard. UPDATE stays refused.
  ``token_counts`` is guarded the same way (``counts:<id>``), for both methods.

Once its receipt is written, the database refuses every row naming an erased session
(revision 0008): its id is never reused, and nothing of it is written again.

Either way an ``erasures`` receipt (append-only) records what went, when, why, and the chain's
head and event count, and ``verify`` / ``audit`` show it.

Forks and child sessions read their parent's log (a fork's history starts with the parent's
prefix). Erasing a session that has any not yet erased is refused with their list
(``ErasureRefusedError``) unless ``with_forks``: then the whole tree is erased in the same
transaction. A descendant of a purged session is purged too (its row points at the parent's).
A session shredded before keeps its row, so a session it points at cannot be purged: that
erasure is refused (``ErasureRefusedError`` naming it).

Retention (``retention_plan``, ``purge_expired``) erases each expired tree as ``erase(root,
with_forks=True)`` does: from its root, in one transaction, so a fork encrypted while its parent
is plaintext goes with the parent (purged) instead of being shredded alone first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from sqlalchemy import Connection, delete, func, insert, or_, select

from ..errors import ErasureRefusedError, SessionErasedError, SessionNotFoundError, ValidationError
from ._codec import unpack_payload
from ._contract import SessionInfo, check_int, check_lookup, check_owner_key, check_session_id
from ._crypto import is_sealed_payload
from ._driver import DriverSQL
from ._hashing import as_utc
from ._observed import log_erase
from ._receipts import ErasureReceipt, RetentionPlan
from ._schema import StoreTables

if TYPE_CHECKING:
    from ._counts import CountBacklog

__all__ = ["ErasureMixin", "erased_error", "receipt_from_row"]

_T = TypeVar("_T")
#: A blob reference inside a payload: blobs are keyed by a 64-hex SHA-256.
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: The most hashes one LIKE filter of the events table looks for (more: every row is read).
_LIKE_TERMS = 50
#: Values bound in one IN list (SQLite's default limit is far above; PostgreSQL's 65,535).
_IN_CHUNK = 500
_MAX_REASON = 2000


def receipt_from_row(row: Any) -> ErasureReceipt:
    """The receipt a row of ``erasures`` holds."""
    return ErasureReceipt(
        session_id=row.session_id,
        method=row.method,
        reason=row.reason,
        erased_at=as_utc(row.erased_at),
        parent_session_id=row.parent_session_id,
        head_hash=row.head_hash,
        event_count=int(row.event_count),
        first_position=None if row.first_position is None else int(row.first_position),
        last_position=None if row.last_position is None else int(row.last_position),
        snapshots_dropped=int(row.snapshots_dropped),
        blobs_removed=int(row.blobs_removed),
    )


def _receipt(conn: Connection, t: StoreTables, session_id: str) -> ErasureReceipt | None:
    row = conn.execute(select(t.erasures).where(t.erasures.c.session_id == session_id)).first()
    return None if row is None else receipt_from_row(row)


def erased_error(conn: Connection, t: StoreTables, session_id: str) -> SessionErasedError | None:
    """The error for reading ``session_id`` if it was erased, else None."""
    receipt = _receipt(conn, t, session_id)
    if receipt is None:
        return None
    return SessionErasedError(session_id, method=receipt.method, erased_at=receipt.erased_at.isoformat())


def _check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError("an erasure needs a reason (a non-empty string)", field="reason")
    if len(reason) > _MAX_REASON:
        raise ValidationError(f"the reason is longer than {_MAX_REASON} characters", field="reason")
    return reason


class ErasureMixin:
    """Erasure and retention for ``SqlSessionStore`` (see the module docstring)."""

    #: True where a plain write transaction is not serialized against event writers, so an
    #: erasure first runs the append path's ``begin_write`` lock (PostgreSQL); SQLite's write
    #: transactions already are (BEGIN IMMEDIATE).
    lock_writers: ClassVar[bool] = False

    # Provided by SqlSessionStore.
    tables: StoreTables
    _write_sql: DriverSQL
    _write: Callable[[], contextlib.AbstractContextManager[Connection]]
    _read: Callable[[], contextlib.AbstractContextManager[Connection]]
    _retrying: Callable[..., Any]
    _counts: CountBacklog

    if TYPE_CHECKING:  # SessionStore's (defined here only for the type checker)

        def genesis(self, session: str | SessionInfo) -> str | None: ...

    def _after_erase(self) -> None:
        """A hook run after an erasure commits (SQLite checkpoints its WAL)."""

    # -- receipts --

    def erasure(self, session_id: str) -> ErasureReceipt | None:
        """The receipt of the session's erasure, or None if it was not erased."""
        check_lookup("session_id", session_id)

        def attempt() -> ErasureReceipt | None:
            with self._read() as conn:
                return _receipt(conn, self.tables, session_id)

        found: ErasureReceipt | None = self._retrying("erasure", attempt)
        return found

    def erasures(self, *, limit: int = 1000, after: str | None = None) -> list[ErasureReceipt]:
        """Receipts ordered by session id, ``limit`` at a time, after id ``after``."""
        erasures = self.tables.erasures
        query = select(erasures).order_by(erasures.c.session_id).limit(check_int("limit", limit, minimum=0))
        if after is not None:
            query = query.where(erasures.c.session_id > check_lookup("after", after))

        def attempt() -> list[ErasureReceipt]:
            with self._read() as conn:
                return [receipt_from_row(row) for row in conn.execute(query)]

        found: list[ErasureReceipt] = self._retrying("erasures", attempt)
        return found

    def descendants(self, session_id: str) -> list[str]:
        """Every fork and child of the session, and theirs, nearest first (erased ones included)."""
        check_lookup("session_id", session_id)

        def attempt() -> list[str]:
            with self._read() as conn:
                return _descendants(conn, self.tables, session_id)

        found: list[str] = self._retrying("descendants", attempt)
        return found

    # -- erase --

    def erase(self, session_id: str, *, reason: str, with_forks: bool = False) -> list[ErasureReceipt]:
        """Erase the session (and with ``with_forks`` its forks and children): one transaction.

        Encrypted sessions are shredded, plaintext ones purged (module docstring). Erasing an
        erased session again returns its receipt and changes nothing.

        Returns:
            The receipts written, the session's first (its descendants' follow, nearest first).

        Raises:
            SessionNotFoundError: no such session (and no receipt for it).
            ErasureRefusedError: it has forks or children not yet erased and ``with_forks`` is
                False (nothing erased; the error lists them).
            ValidationError: a bad session id or an empty reason.
        """
        check_session_id(session_id)
        reason = _check_reason(reason)
        # The genesis of an empty session is its head; it needs reads of its own, so outside.
        genesis = self._genesis_or_none(session_id)

        def attempt() -> list[ErasureReceipt]:
            with self._write() as conn:
                if self.lock_writers:
                    conn.exec_driver_sql(self._write_sql.begin_write)
                return _erase_in(conn, self.tables, session_id, reason, with_forks, genesis)

        receipts: list[ErasureReceipt] = self._retrying("erase", attempt)
        self._after_erase()
        for receipt in receipts:
            self._counts.forget(receipt.session_id)  # made before the erasure: never to be stored
        for receipt in receipts:
            fields = receipt.to_dict()
            del fields["session_id"], fields["reason"]
            log_erase(receipt.session_id, reason=receipt.reason, **fields)
        return receipts

    def _genesis_or_none(self, session_id: str) -> dict[str, str]:
        """session id -> genesis, for the session and its descendants (empty ones need it)."""
        found: dict[str, str] = {}
        try:
            for sid in (session_id, *self.descendants(session_id)):
                genesis = self.genesis(sid)
                if genesis is not None:
                    found[sid] = genesis
        except SessionNotFoundError:
            pass
        return found

    # -- retention --

    def retention_plan(
        self, older_than: timedelta, *, now: datetime | None = None, tenant: str | None = None
    ) -> RetentionPlan:
        """What ``purge_expired`` would erase: sessions whose last activity (their newest event,
        or their creation when empty) is before ``now - older_than``.

        A session is erased with its forks and children only when they are all expired (or
        erased before) too; otherwise it is kept, mapped to the active ones. ``expired`` lists
        erasure groups: each root (in id order), then its forks and children nearest first, as
        ``erase(root, with_forks=True)`` returns their receipts. A session whose purge would
        leave a fork shredded before pointing at a row that is gone (``erase`` refuses it) is
        kept too, mapped to those forks; its expired forks and children are planned on their own.
        ``tenant``: only that tenant's sessions (forks and children share their parent's).

        Raises:
            ValidationError: ``older_than`` not a positive timedelta (or reaching before year 1),
                ``now`` not a datetime with a time zone, a bad ``tenant``.
        """
        if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
            raise ValidationError("older_than must be a positive timedelta", field="older_than")
        if now is not None and not isinstance(now, datetime):
            raise ValidationError(f"now must be a datetime, not {type(now).__name__}", field="now")
        if now is not None and now.utcoffset() is None:
            # PostgreSQL would read a naive value in the server's time zone, SQLite as UTC.
            msg = "now must carry a time zone (a naive datetime names no instant): datetime.now(UTC)"
            raise ValidationError(msg, field="now")
        if tenant is not None:
            check_owner_key("tenant", tenant)
        try:
            # UTC, always: SQLite keeps timestamps as UTC text, and SQLAlchemy's SQLite DateTime
            # writes a bound value's fields without its offset, so 12:00+05:00 would compare as
            # 12:00 UTC (five hours late) against them.
            cutoff = (datetime.now(UTC) if now is None else now.astimezone(UTC)) - older_than
        except OverflowError:  # `purge --older-than 999999w`: before any date a session can have
            msg = f"older_than reaches before year 1: {older_than.days} days"
            raise ValidationError(msg, field="older_than") from None

        def attempt() -> _Forest:
            with self._read() as conn:
                return _forest(conn, self.tables, cutoff, tenant)

        forest: _Forest = self._retrying("retention_plan", attempt)
        expired, erased, parents = forest.expired, forest.erased, forest.parents
        children: dict[str, list[str]] = {}
        for sid, parent in parents.items():
            if parent is not None:
                children.setdefault(parent, []).append(sid)
        kept: dict[str, tuple[str, ...]] = {}
        for sid in sorted(expired):
            active = [d for d in _walk(children, sid) if d not in expired and d not in erased]
            if active:
                kept[sid] = tuple(active)
        chosen = expired - set(kept)
        groups: list[str] = []
        # Roots in id order, each group as erase(root, with_forks=True) takes it; a root that
        # must stay leaves its expired children to be planned as roots of their own.
        roots = sorted((sid for sid in chosen if parents.get(sid) not in chosen), reverse=True)
        while roots:
            root = roots.pop()
            below = list(_walk(children, root))
            tree = [root, *(d for d in below if d not in erased)]
            stranded = _stranded(
                _methods(tree, forest.keyed, parents), [d for d in below if d in erased], parents
            )
            if stranded:
                kept[root] = tuple(stranded)
                roots.extend(sorted((c for c in children.get(root, ()) if c in chosen), reverse=True))
            else:
                groups.extend(tree)
        return RetentionPlan(cutoff=cutoff, expired=tuple(groups), kept=dict(sorted(kept.items())))

    def purge_expired(
        self,
        older_than: timedelta,
        *,
        reason: str,
        dry_run: bool = False,
        now: datetime | None = None,
        tenant: str | None = None,
    ) -> RetentionPlan:
        """Erase what ``retention_plan`` selects, each tree in its own transaction, receipts
        recorded as for ``erase``. With ``dry_run`` nothing changes and no receipts are returned.

        Each erasure group goes as ``erase(root, reason=reason, with_forks=True)`` takes it: its
        receipts come root first, all with the same ``erased_at``, and a fork of a purged
        session is purged with it (an encrypted fork of a plaintext parent too), never shredded
        alone and left naming a parent whose row is gone.
        """
        reason = _check_reason(reason)
        plan = self.retention_plan(older_than, now=now, tenant=tenant)
        if dry_run:
            return plan
        done: list[ErasureReceipt] = []
        erased: set[str] = set()
        for sid in plan.expired:  # each group's root comes first and takes its tree with it
            if sid in erased:
                continue
            receipts = self.erase(sid, reason=reason, with_forks=True)
            erased.update(r.session_id for r in receipts)
            done.extend(receipts)
        return RetentionPlan(plan.cutoff, plan.expired, plan.kept, tuple(done))


def _walk(children: Mapping[str, Sequence[str]], root: str) -> Iterator[str]:
    """The forks and children of ``root``, and theirs, nearest first, each generation in id order
    (``_descendants``' order, which ``erase`` returns receipts in)."""
    seen = {root}
    frontier = [root]
    while frontier:
        frontier = sorted({c for sid in frontier for c in children.get(sid, ()) if c not in seen})
        seen.update(frontier)  # a tampered cycle ends here
        yield from frontier


def _methods(tree: Sequence[str], keyed: set[str], parents: Mapping[str, str | None]) -> dict[str, str]:
    """How each session of ``tree`` (a session, then its descendants nearest first) is erased.

    An encrypted session is shredded, a plaintext one purged; and a session whose parent is
    purged is purged too, whatever it is: the parent's row goes, and a fork's row names it.
    """
    methods: dict[str, str] = {}
    for sid in tree:  # nearest first: a parent is decided before its children
        parent = parents.get(sid)
        methods[sid] = "purged" if sid not in keyed or methods.get(parent or "") == "purged" else "shredded"
    return methods


def _stranded(
    methods: Mapping[str, str], erased: Iterable[str], parents: Mapping[str, str | None]
) -> list[str]:
    """The sessions of ``erased`` (erased before, rows kept: shredded) whose parent ``methods``
    purges: their rows would name a row that is gone."""
    return [sid for sid in erased if methods.get(parents.get(sid) or "") == "purged"]


def _descendants(conn: Connection, t: StoreTables, session_id: str) -> list[str]:
    sessions = t.sessions
    found: list[str] = []
    frontier = [session_id]
    seen = {session_id}
    while frontier:
        rows = conn.execute(
            select(sessions.c.id).where(sessions.c.parent_session_id.in_(frontier)).order_by(sessions.c.id)
        )
        frontier = [sid for (sid,) in rows if sid not in seen]  # a tampered cycle ends here
        seen.update(frontier)
        found.extend(frontier)
    return found


@dataclasses.dataclass(frozen=True)
class _Forest:
    """What a retention plan is made from, read in one transaction."""

    #: Sessions not erased, idle since the cutoff.
    expired: set[str]
    #: Sessions erased before whose rows stay (shredded).
    erased: set[str]
    #: Encrypted sessions (a ``session_keys`` row): shredded when erased, unless purged with a parent.
    keyed: set[str]
    #: Every session's parent.
    parents: dict[str, str | None]


def _forest(conn: Connection, t: StoreTables, cutoff: datetime, tenant: str | None) -> _Forest:
    sessions, erasures, session_keys = t.sessions, t.erasures, t.session_keys
    parents = {
        sid: parent for sid, parent in conn.execute(select(sessions.c.id, sessions.c.parent_session_id))
    }
    receipted = select(erasures.c.session_id).where(erasures.c.session_id == sessions.c.id).exists()
    erased = {sid for (sid,) in conn.execute(select(sessions.c.id).where(receipted))}
    keyed = {sid for (sid,) in conn.execute(select(session_keys.c.session_id))}
    return _Forest(_expired(conn, t, cutoff, tenant), erased, keyed, parents)


def _expired(conn: Connection, t: StoreTables, cutoff: datetime, tenant: str | None) -> set[str]:
    """Sessions, not yet erased, with no activity since ``cutoff``."""
    sessions, events, erasures = t.sessions, t.events, t.erasures
    last_event = (
        select(func.max(events.c.created_at)).where(events.c.session_id == sessions.c.id).scalar_subquery()
    )
    last_activity = func.coalesce(last_event, sessions.c.created_at)
    not_erased = ~select(erasures.c.session_id).where(erasures.c.session_id == sessions.c.id).exists()
    query = select(sessions.c.id).where(not_erased, last_activity < cutoff)
    if tenant is not None:
        query = query.where(sessions.c.tenant_id == tenant)
    return {sid for (sid,) in conn.execute(query)}


def _erase_in(
    conn: Connection, t: StoreTables, session_id: str, reason: str, with_forks: bool, genesis: dict[str, str]
) -> list[ErasureReceipt]:
    """The erasure itself, inside one serialized write transaction."""
    sessions, erasures, session_keys = t.sessions, t.erasures, t.session_keys
    existing = _receipt(conn, t, session_id)
    if existing is not None:
        return [existing]
    if conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first() is None:
        raise SessionNotFoundError(session_id)
    tree = _descendants(conn, t, session_id)
    receipted = {
        sid for (sid,) in conn.execute(select(erasures.c.session_id).where(erasures.c.session_id.in_(tree)))
    }
    pending = [sid for sid in tree if sid not in receipted]
    if pending and not with_forks:
        raise ErasureRefusedError(session_id, pending)
    targets = [session_id, *pending]
    keyed = {
        sid
        for (sid,) in conn.execute(
            select(session_keys.c.session_id).where(session_keys.c.session_id.in_(targets))
        )
    }
    parents: dict[str, str | None] = {
        sid: parent
        for sid, parent in conn.execute(
            select(sessions.c.id, sessions.c.parent_session_id).where(sessions.c.id.in_([session_id, *tree]))
        )
    }
    # A session whose parent is purged loses the row its own row points at: purge it too.
    methods = _methods(targets, keyed, parents)
    # A session shredded before keeps its row: the row it names must stay too (anywhere in the
    # tree: an encrypted root is shredded, but a plaintext fork under it is purged).
    stranded = _stranded(methods, (sid for sid in tree if sid in receipted), parents)
    if stranded:
        why = "forks or children of it were shredded before and keep rows that point at it"
        raise ErasureRefusedError(session_id, stranded, why=why)
    purged = [sid for sid in targets if methods[sid] == "purged"]
    removable = _blobs_only_in(conn, t, purged)
    # Deferred counts go either way (a shredded session's text can no longer be counted): the
    # append-only triggers of token_counts let a DELETE through under ``counts:<id>``.
    guards = (
        [f"session:{sid}" for sid in purged]
        + [f"counts:{sid}" for sid in targets]
        + [f"blob:{sha}" for sha in sorted({s for s, _ in removable})]
    )
    conn.execute(insert(t.erasure_guard), [{"target": target} for target in guards])
    now = datetime.now(UTC)
    receipts = []
    for sid in reversed(targets):  # children first: their rows point at their parents'
        receipts.append(_erase_one(conn, t, sid, methods[sid], reason, now, parents.get(sid), genesis))
    for chunk in _chunks(purged):
        conn.execute(delete(t.blob_refs).where(t.blob_refs.c.session_id.in_(chunk)))
    by_tenant: dict[str | None, list[str]] = {}
    for sha, tenant in removable:
        by_tenant.setdefault(tenant, []).append(sha)
    for tenant, shas in by_tenant.items():  # each tenant's own row, never another's
        for chunk in _chunks(shas):
            conn.execute(
                delete(t.blobs).where(
                    t.blobs.c.sha256.in_(chunk), t.blobs.c.tenant_id.is_not_distinct_from(tenant)
                )
            )
    for chunk in _chunks(guards):
        conn.execute(delete(t.erasure_guard).where(t.erasure_guard.c.target.in_(chunk)))
    receipts.reverse()
    # Blobs are counted on the receipt of the session named in the request.
    if removable:
        receipts[0] = dataclasses.replace(receipts[0], blobs_removed=len(removable))
    conn.execute(insert(erasures), [dataclasses.asdict(receipt) for receipt in receipts])
    return receipts


def _erase_one(
    conn: Connection,
    t: StoreTables,
    sid: str,
    method: str,
    reason: str,
    now: datetime,
    parent: str | None,
    genesis: dict[str, str],
) -> ErasureReceipt:
    """Erase one session's rows (its receipt is written by the caller)."""
    events, snapshots, session_keys, sessions = t.events, t.snapshots, t.session_keys, t.sessions
    count, first, last = conn.execute(
        select(func.count(), func.min(events.c.position), func.max(events.c.position)).where(
            events.c.session_id == sid
        )
    ).one()
    head_row = conn.execute(
        select(events.c.hash).where(events.c.session_id == sid).order_by(events.c.seq.desc()).limit(1)
    ).first()
    head_hash = str(head_row.hash) if head_row is not None else genesis.get(sid, "0" * 64)
    dropped = conn.execute(delete(snapshots).where(snapshots.c.session_id == sid)).rowcount
    conn.execute(delete(session_keys).where(session_keys.c.session_id == sid))
    # Counts made after COMMIT go either way: a shredded session's text can no longer be counted.
    conn.execute(delete(t.token_counts).where(t.token_counts.c.session_id == sid))
    if method == "purged":
        conn.execute(delete(events).where(events.c.session_id == sid))
        conn.execute(delete(sessions).where(sessions.c.id == sid))
    return ErasureReceipt(
        session_id=sid,
        method="purged" if method == "purged" else "shredded",
        reason=reason,
        erased_at=now,
        parent_session_id=parent,
        head_hash=head_hash,
        event_count=int(count),
        first_position=None if first is None else int(first),
        last_position=None if last is None else int(last),
        snapshots_dropped=int(dropped or 0),
        blobs_removed=0,
    )


def _chunks(values: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start : start + _IN_CHUNK]


def _blobs_only_in(conn: Connection, t: StoreTables, purged: Sequence[str]) -> list[tuple[str, str | None]]:
    """The blob rows, as (sha256, tenant_id) pairs, that only the purged sessions refer to.

    A session refers to a blob it stored (``put_blob(..., session_id=...)``: a row of
    ``blob_refs``) and to one its plaintext payloads name. A blob row the purged sessions refer
    to is removed only when no other session does either way: no ref of another session that
    exists (a ref naming a session with no ``sessions`` row, left by a failed import, keeps
    nothing) and no other session's payload naming it (a blob stored without a session is named
    only there).

    Under row-level security each tenant stores its own row of a blob (``tenant_id`` defaults to
    the connection's tenant) and erasure runs as the owner, who sees every tenant's rows: a row
    of tenant T is a candidate only when a purged session of T refers to it, and is kept by any
    other session of T. A row or session without a tenant (stored before row-level security) is
    shared by all: it is a candidate for any purged session and kept by any other one.
    """
    refs, blobs, sessions = t.blob_refs, t.blobs, t.sessions
    purged_set = set(purged)
    # sha256 -> the tenants of the purged sessions that refer to it
    named: dict[str, set[str | None]] = {}
    for chunk in _chunks(purged):
        tenant_of: dict[str, str | None] = {
            sid: tenant
            for sid, tenant in conn.execute(
                select(sessions.c.id, sessions.c.tenant_id).where(sessions.c.id.in_(chunk))
            )
        }
        for sha, session_id in conn.execute(
            select(refs.c.sha256, refs.c.session_id).where(refs.c.session_id.in_(chunk))
        ):
            named.setdefault(sha, set()).add(tenant_of.get(session_id))
        for session_id, text in _payloads(conn, t, t.events.c.session_id.in_(chunk)):
            for sha in _HEX64.findall(text):
                named.setdefault(sha, set()).add(tenant_of.get(session_id))
    candidates: set[tuple[str, str | None]] = set()
    for chunk in _chunks(sorted(named)):
        for sha, tenant in conn.execute(
            select(blobs.c.sha256, blobs.c.tenant_id).where(blobs.c.sha256.in_(chunk))
        ):
            if tenant is None or tenant in named[sha] or None in named[sha]:
                candidates.add((sha, tenant))
    if not candidates:
        return []

    def keep(sha: str, tenant: str | None) -> None:
        """Another session of ``tenant`` refers to ``sha``: keep the rows it can read."""
        for pair in [c for c in candidates if c[0] == sha]:
            if tenant is None or pair[1] is None or pair[1] == tenant:
                candidates.discard(pair)

    shas = sorted({sha for sha, _ in candidates})
    for chunk in _chunks(shas):
        query = (
            select(refs.c.sha256, refs.c.session_id, sessions.c.tenant_id)
            .join(sessions, sessions.c.id == refs.c.session_id)  # refs of sessions that exist
            .where(refs.c.sha256.in_(chunk))
        )
        for sha, session_id, tenant in conn.execute(query):
            if session_id not in purged_set:
                keep(sha, tenant)
    remaining = sorted({sha for sha, _ in candidates})
    if remaining:
        others = t.events.c.session_id.not_in(purged)
        tenants: dict[str, str | None] = {}
        for session_id, text in _payloads(conn, t, others, naming=remaining):
            found = [sha for sha in remaining if sha in text]
            if not found:
                continue
            if session_id not in tenants:
                tenants[session_id] = conn.execute(
                    select(sessions.c.tenant_id).where(sessions.c.id == session_id)
                ).scalar()
            for sha in found:
                keep(sha, tenants[session_id])
    return sorted(candidates, key=lambda pair: (pair[0], pair[1] or ""))


def _payloads(
    conn: Connection, t: StoreTables, where: Any, naming: Sequence[str] = ()
) -> Iterator[tuple[str, str]]:
    """(session id, plaintext payload) of the events ``where`` selects (packed ones decompressed);
    with ``naming`` (a few), only stored texts that contain one of those hashes, and every packed
    one."""
    events = t.events
    query = select(events.c.session_id, events.c.seq, events.c.payload, events.c.payload_packed).where(where)
    if 0 < len(naming) <= _LIKE_TERMS:
        plain_match = or_(*(events.c.payload.contains(sha) for sha in naming))
        query = query.where(or_(events.c.payload_packed.is_not(None), plain_match))
    for session_id, seq, payload, packed in conn.execute(query):
        text = payload if packed is None else unpack_payload(packed, session_id=session_id, seq=seq)
        if not is_sealed_payload(text):
            yield session_id, text

"""What PostgreSQL row-level security costs a tenant's store, measured in one run.

Usage::

    python bench/rls.py [--pg URL] [--appends N] [--others M] [--repeats R]

What is measured
----------------
Two fresh schemas on the same server hold the same data: ``M`` sessions of another tenant
(``--others``, 20 events each) and then the measured tenant's work. In the *plain* schema the
owner's store does the work with no policies; in the *rls* schema row-level security is enabled
(``sessionstore rls enable``) and the work runs on a store whose connections are a tenant role
(``options=-c role=...``), so every statement passes the policies. Per repeat, interleaved:

* ``append``: ``N`` single-event appends to one session (each its own transaction: the
  ``WITH CHECK`` policy on events runs per inserted row);
* ``read``: the whole session read back (``read``), 20 times;
* ``list``: ``list_sessions(tenant=..., user=...)`` of 50 sessions, 50 times;
* ``create``: 50 ``get_or_create_session`` calls for new keys.

The median of ``--repeats`` runs is printed per operation for both schemas, with the ratio
``rls / plain`` of the time per call (1.0 = free; the number to watch). The roles and schemas
are created for the run and dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import quote

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import sessionstore
from sessionstore import MessageAppended
from sessionstore.store import enable_row_level_security, grant_tenant_role


def _with_options(url: str, extra: str) -> str:
    parsed = make_url(url)
    given = parsed.query.get("options", "")
    given = given if isinstance(given, str) else " ".join(given)
    return parsed.update_query_dict({"options": f"{given} {extra}".strip()}).render_as_string(
        hide_password=False
    )


@contextmanager
def _schema(base: str, tag: str) -> Iterator[str]:
    admin = create_engine(base)
    name = f"bench_rls_{tag}_{uuid.uuid4().hex[:8]}"
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield _with_options(base, f"-c search_path={name}")
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()


def _fill_others(url: str, sessions: int) -> None:
    with sessionstore.open_store(url, token_counter=None) as owner:
        for n in range(sessions):
            events = [MessageAppended(role="user", content=f"other tenant {n} {i}") for i in range(20)]
            owner.create_session(f"other-{n}", tenant="other", user=f"u{n % 10}", events=events)


def _timed(operation: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    operation()
    return (time.perf_counter() - start) / calls


def _work(url: str, appends: int, run: int) -> dict[str, float]:
    """Seconds per call of each operation, on a store opened at ``url``."""
    with sessionstore.open_store(url, token_counter=None) as store:
        sid = f"acme-{run}"
        store.create_session(sid, tenant="acme", user="alice")
        for n in range(50 - 1 if run == 0 else 0):
            store.create_session(f"acme-list-{n}", tenant="acme", user="alice")

        def append() -> None:
            for i in range(appends):
                store.append(sid, [MessageAppended(role="user", content=f"message {i}")], expected_seq=i)

        def read() -> None:
            for _ in range(20):
                assert len(store.read(sid)) == appends

        def listing() -> None:
            for _ in range(50):
                store.list_sessions(tenant="acme", user="alice", limit=50)

        def create() -> None:
            for n in range(50):
                store.get_or_create_session("acme", "alice", f"chat-{run}-{n}")

        return {
            "append": _timed(append, appends),
            "read": _timed(read, 20),
            "list": _timed(listing, 50),
            "create": _timed(create, 50),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=os.environ.get("SESSIONSTORE_TEST_PG_URL"))
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--others", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not args.pg:
        print("needs PostgreSQL: --pg URL or SESSIONSTORE_TEST_PG_URL", file=sys.stderr)
        return 2
    base = sessionstore.store.resolve_url(args.pg)
    role = f"bench_tenant_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
    try:
        with _schema(base, "plain") as plain, _schema(base, "rls") as secured:
            for url in (plain, secured):
                engine = sessionstore.store.create_engine_for_url(url)
                sessionstore.store.upgrade(engine)
                engine.dispose()
                _fill_others(url, args.others)
            engine = sessionstore.store.create_engine_for_url(secured)
            enable_row_level_security(engine)
            grant_tenant_role(engine, "acme", role)
            engine.dispose()
            tenant_url = _with_options(secured, f"-c role={quote(role)}")
            results: dict[str, list[dict[str, float]]] = {"plain": [], "rls": []}
            for run in range(args.repeats):
                results["plain"].append(_work(plain, args.appends, run))
                results["rls"].append(_work(tenant_url, args.appends, run))
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()

    print(f"{args.others} other-tenant sessions present; {args.appends} appends; median of {args.repeats}")
    print(f"{'operation':<10} {'plain ms/call':>14} {'rls ms/call':>12} {'rls/plain':>10}")
    for op in ("append", "read", "list", "create"):
        plain_ms = statistics.median(r[op] for r in results["plain"]) * 1000
        rls_ms = statistics.median(r[op] for r in results["rls"]) * 1000
        print(f"{op:<10} {plain_ms:>14.3f} {rls_ms:>12.3f} {rls_ms / plain_ms:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

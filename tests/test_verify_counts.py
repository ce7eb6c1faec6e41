"""``verify --counts``: token counts made after COMMIT are outside the hash chain, so verify
recounts them on request and names every seq whose stored count the text does not give."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import sessionstore
from sessionstore import MessageAppended, SessionStarted
from sessionstore.audit import verify_all, verify_session
from sessionstore.cli import main

from .conftest import Backend


def _conversation() -> list[Any]:
    return [
        SessionStarted(model="claude-sonnet-4-5"),
        MessageAppended(role="user", content="Read a.py and explain it."),
        MessageAppended(role="assistant", content="It sets x to one, fifty times. " * 20),
        MessageAppended(role="user", content="And b.py?"),
    ]


def _execute(backend: Backend, sql: str, **params: Any) -> None:
    """Run ``sql`` on the backend's database past the store, as its owner with the append-only
    triggers of ``token_counts`` off (with them on, an edit is refused: tests/test_erasure.py):
    the tamper a verify must catch."""
    engine = create_engine(sessionstore.store.resolve_url(backend.url))
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers
                conn.execute(text(sql), params)
                return
            triggers = conn.execute(
                text(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'token_counts'"
                )
            ).all()
            for name, _ in triggers:
                conn.exec_driver_sql(f"DROP TRIGGER {name}")
            conn.execute(text(sql), params)
            for _, create in triggers:
                conn.exec_driver_sql(create)
    finally:
        engine.dispose()


def _with_stored_counts(backend: Backend) -> tuple[str, dict[int, int | None]]:
    """A session whose deferred counts are in ``token_counts``; its counts by seq."""
    store = backend.open()
    try:
        sid = store.create_session(events=_conversation()).id
        counts = {e.seq: e.token_count for e in store.read(sid) if e.token_count_deferred}
        assert store.store_token_counts() == 3
    finally:
        store.close()
    return sid, counts


def test_stored_counts_recount_equal_and_an_altered_one_is_named(shared_backend: Backend) -> None:
    sid, counts = _with_stored_counts(shared_backend)
    store = shared_backend.open()
    try:
        clean = verify_session(store, sid, counts=True)
    finally:
        store.close()
    check = {c.projection: c for c in clean.projections}["token_counts"]
    assert clean.ok
    assert (check.status, check.detail) == ("match", "3 deferred counts recounted")

    _execute(
        shared_backend, "UPDATE token_counts SET token_count = 7 WHERE session_id = :s AND seq = 3", s=sid
    )
    store = shared_backend.open()
    try:
        quick = verify_session(store, sid)
        full = verify_session(store, sid, counts=True)
        used = store.read(sid)[2].token_count
    finally:
        store.close()
    assert used == 7  # readers take the stored count: what the altered row changes
    assert quick.ok  # the chain does not cover it: only the recount finds it
    assert "token_counts" not in {c.projection for c in quick.projections}
    assert (quick.counts_checked, full.counts_checked) == (False, True)  # said in --json too
    altered = {c.projection: c for c in full.projections}["token_counts"]
    assert not full.ok
    assert altered.status == "mismatch"
    assert altered.detail == f"1 of 3 deferred counts differ: seq 3: 7 used, the text counts {counts[3]}"
    assert full.summary().startswith(f"{sid}: TOKEN COUNT MISMATCH (4 events)")


# Edits of ``token_counts`` behind the store's back, and the seqs ``--counts`` must name.
_COUNT_EDITS = {
    "a count changed": ("UPDATE token_counts SET token_count = 7 WHERE session_id = :s AND seq = 3", (3,)),
    "a count set to NULL": (
        "UPDATE token_counts SET token_count = NULL WHERE session_id = :s AND seq = 4",
        (4,),
    ),
    "every count changed": (
        "UPDATE token_counts SET token_count = token_count + 1 WHERE session_id = :s",
        (2, 3, 4),
    ),
    # Counted again by the next reader, and agreeing.
    "a count deleted": ("DELETE FROM token_counts WHERE session_id = :s AND seq = 3", ()),
    # Never read: seq 1 (session_started) waits for no count.
    "a count added for an event without one": (
        "INSERT INTO token_counts (session_id, seq, token_count) VALUES (:s, 1, 5)",
        (),
    ),
}


@pytest.mark.parametrize("case", sorted(_COUNT_EDITS))
def test_an_edited_deferred_count_passes_plain_verify_and_counts_names_its_seq(
    shared_backend: Backend, case: str
) -> None:
    """Deferred counts are outside the chain: plain verify passes whatever the table holds (and
    says nothing of counts); ``counts=True`` names every seq whose count readers get differs from
    its text's, and passes an edit no read sees."""
    sid, counts = _with_stored_counts(shared_backend)
    statement, altered = _COUNT_EDITS[case]
    _execute(shared_backend, statement, s=sid)
    store = shared_backend.open()
    try:
        quick = verify_session(store, sid)
        full = verify_session(store, sid, counts=True)
        used = {e.seq: e.token_count for e in store.read(sid) if e.token_count_deferred}
    finally:
        store.close()

    assert quick.ok
    assert quick.summary() == f"{sid}: ok (4 events)"
    check = {c.projection: c for c in full.projections}["token_counts"]
    assert full.ok is (not altered)  # ok exactly when no count readers get was altered
    assert [seq for seq in counts if used[seq] != counts[seq]] == list(altered)
    if altered:
        assert check.status == "mismatch"
        named = "; ".join(f"seq {seq}: {used[seq]} used, the text counts {counts[seq]}" for seq in altered)
        assert check.detail == f"{len(altered)} of 3 deferred counts differ: {named}"
    else:
        assert (check.status, check.detail) == ("match", "3 deferred counts recounted")


def test_a_store_without_a_counter_or_events_without_deferred_counts_check_nothing(
    shared_backend: Backend,
) -> None:
    sid, _ = _with_stored_counts(shared_backend)
    blind = shared_backend.open(token_counter=None)
    inline = shared_backend.open(defer_token_counts=False)
    try:
        unchecked = verify_session(blind, sid, counts=True)
        chained = inline.create_session(events=_conversation()).id
        in_rows = verify_session(inline, chained, counts=True)
    finally:
        blind.close()
        inline.close()
    assert unchecked.ok and in_rows.ok
    assert [(c.status, c.detail) for c in unchecked.projections if c.projection == "token_counts"] == [
        ("none", "no token counter: counts not checked")
    ]
    assert [(c.status, c.detail) for c in in_rows.projections if c.projection == "token_counts"] == [
        ("none", "no deferred counts")
    ]


def test_the_cli_recounts_with_counts_and_exits_3_naming_the_seq(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sessionstore verify` does not recount deferred counts (an altered one passes it) and says
    so on stderr; with `--counts` it names the seq and exits 3."""
    db = shared_backend.url
    store = shared_backend.open()
    sid = store.create_session("c-1", events=_conversation()).id
    store.read(sid)
    store.create_session("c-2", events=_conversation()[:2])
    store.close()  # stores the counts the read made
    _execute(shared_backend, "UPDATE token_counts SET token_count = token_count + 1 WHERE seq = 2")

    capsys.readouterr()
    out = io.StringIO()
    assert main(["verify", "--db", db], out=out) == 0
    assert out.getvalue().splitlines() == [  # the counts not recounted, one of which is altered
        "c-1: ok (4 events)",
        "c-2: ok (2 events)",
        "2 sessions verified: 2 ok, 0 failed",
    ]
    assert "token counts made after COMMIT (outside the hash chain) were not recounted" in (
        capsys.readouterr().err
    )
    out = io.StringIO()
    assert main(["verify", "--db", db, "c-1", "--json"], out=out) == 0
    assert json.loads(out.getvalue())["token_counts_checked"] is False
    assert "verify --counts" in capsys.readouterr().err

    out = io.StringIO()
    assert main(["verify", "--db", db, "--counts"], out=out) == 3
    assert "not recounted" not in capsys.readouterr().err
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        "c-1: TOKEN COUNT MISMATCH (4 events); token counts: MISMATCH (1 of 3 deferred"
    )
    assert "seq 2: " in lines[0]
    assert lines[1] == "c-2: ok (2 events); token counts: ok (1 deferred count recounted)"
    assert lines[2] == "2 sessions verified: 1 ok, 1 failed"

    out = io.StringIO()
    assert main(["verify", "--db", db, "c-1", "--counts", "--json"], out=out) == 3
    report = json.loads(out.getvalue())
    assert (report["ok"], report["chain_ok"]) == (False, True)
    assert [p["status"] for p in report["projections"] if p["projection"] == "token_counts"] == ["mismatch"]

    store = shared_backend.open()
    try:
        assert [v.ok for v in verify_all(store, counts=True)] == [False, True]
    finally:
        store.close()


def test_an_erased_session_has_no_counts_to_check(shared_backend: Backend) -> None:
    """A shredded session's counts went with it: --counts does not fail it (its chain still
    verifies against its receipt)."""
    from sessionstore.store._crypto import LocalKeyProvider

    with shared_backend.open(encryption=LocalKeyProvider(bytes(range(32)))) as store:
        sid = store.create_session(events=_conversation()).id
        store.read(sid)
        store.store_token_counts()
        store.erase(sid, reason="the user asked")
        report = verify_session(store, sid, counts=True)
    assert report.ok
    assert report.chain.erasure is not None
    assert [(c.status, c.detail) for c in report.projections if c.projection == "token_counts"] == [
        ("none", "erased: its counts were deleted")
    ]

"""Forks share their parent's log up to the fork point, without copying it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore
from sessionstore.cli import main
from sessionstore.projections._base import rebuild
from sessionstore.projections._transcript import TranscriptProjection

from .conftest import Backend

pytestmark = pytest.mark.store_contract


def _chat(session: Session, *texts: str) -> None:
    for i, text in enumerate(texts):
        session.append(
            [MessageAppended(role="user" if i % 2 == 0 else "assistant", content=text, message_uuid=text)]
        )


def test_fork_sees_the_parent_prefix_and_diverges(store: SessionStore) -> None:
    """On every backend: the fork's request is the shared prefix plus its own; the parent is untouched."""
    parent = Session.create(store, config=SessionConfig(snapshot_every=3))
    _chat(parent, "q1", "a1", "q2", "a2")
    parent_before = parent.request_bytes()

    fork = parent.fork(message_uuid="a1")
    fork.append([MessageAppended(role="user", content="q2-alternative")])
    parent.append([MessageAppended(role="user", content="q3")])

    texts = [m["content"][0]["text"] for m in fork.request()["messages"]]
    assert texts == ["q1", "a1", "q2-alternative"]
    assert fork.last_seq == 4  # seq 1 SessionStarted, 2-3 shared, 4 its own
    assert store.last_seq(fork.id) == 1  # nothing was copied
    assert parent.request_bytes() != parent_before
    assert [m["content"][0]["text"] for m in parent.request()["messages"]][-1] == "q3"
    resumed = Session(store, fork.id)
    assert resumed.request_bytes() == fork.request_bytes()
    assert Session(store, fork.id, use_snapshots=False).request_bytes() == fork.request_bytes()


def test_fork_of_a_fork_and_fork_inside_an_inherited_prefix() -> None:
    """Forks compose; a fork point inside a fork's inherited part shares just that prefix."""
    store = sessionstore.open_store(":memory:")
    root = Session.create(store)
    _chat(root, "q1", "a1", "q2", "a2")
    child = root.fork()
    _chat(child, "c1")
    grandchild = child.fork()
    grandchild.append([MessageAppended(role="assistant", content="g1")])
    early = child.fork(at_seq=2)

    assert [m["content"][0]["text"] for m in grandchild.request()["messages"]][-2:] == ["c1", "g1"]
    assert [m["content"][0]["text"] for m in early.request()["messages"]] == ["q1"]
    assert store.get_session(early.id).parent_session_id == child.id


def test_bad_fork_points_are_refused() -> None:
    """A seq beyond the head or an unknown message is a clear error."""
    store = sessionstore.open_store(":memory:")
    session = Session.create(store)

    with pytest.raises(sessionstore.ValidationError, match="cannot fork"):
        session.fork(at_seq=9)
    with pytest.raises(sessionstore.ValidationError, match="not in session"):
        session.fork(message_uuid="nope")


def test_views_built_beside_the_session_count_through_the_fork() -> None:
    """File history and the audit replay of a fork see the shared prefix in the fork's numbering."""
    store = sessionstore.open_store(":memory:")
    parent = Session.create(store)
    _chat(parent, "q1", "a1")
    parent.append([sessionstore.events.FileRead(path="src/app.py", blob_sha256=None)])
    fork = parent.fork()
    _chat(fork, "q2")
    sessionstore.Pipeline().prepare(fork)

    reads = [r.path for r in sessionstore.FileHistory(fork).state.recent_reads(None)]

    assert reads == ["src/app.py"]
    assert sessionstore.served_request(fork, 1).matches


def _cli(*argv: str) -> list[str]:
    out = io.StringIO()
    assert main(list(argv), out=out) == 0
    return out.getvalue().splitlines()


def _cli_json(*argv: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _cli(*argv)]


def _turn(session: Session, question: str, answer: str) -> None:
    """A user turn with its file checkpoint, a served request and the answer."""
    _chat(session, question)
    session.append([sessionstore.events.FileHistorySnapshot(message_uuid=question)])
    sessionstore.Pipeline().prepare(session)
    session.append([MessageAppended(role="assistant", content=answer, message_uuid=answer)])


def test_every_surface_numbers_a_fork_of_a_fork_alike(shared_backend: Backend, tmp_path: Path) -> None:
    """A fork's seqs are its visible history's (the parent's prefix, then its own), on every
    surface: `events`, `show`, `audit`, `served --turn`, `checkpoints`, `sessions`, export and
    `Session.last_seq` name each event by the same seq (the CLI needs a database it can open)."""
    backend = shared_backend
    store = backend.open()
    try:
        root = Session.create(store, session_id="root")
        _turn(root, "q1", "a1")
        child = root.fork(fork_id="child")
        _turn(child, "q2", "a2")
        sessionstore.pipeline.snip(child, 1)
        grandchild = child.fork(fork_id="grandchild")
        _turn(grandchild, "q3", "a3")
        last = grandchild.last_seq
    finally:
        store.close()
    db = ("--db", backend.url)

    events = _cli_json("events", "grandchild", "--json", *db)
    seq_of = {(e["type"], e["payload"].get("message_uuid")): e["seq"] for e in events}
    shown = _cli_json("show", "grandchild", "--json", *db)
    audited = json.loads(_cli("audit", "grandchild", "--json", *db)[0])["entries"]
    served = [e["seq"] for e in events if e["type"] == "context_served"]
    replays = [json.loads(_cli("served", "grandchild", "--turn", t, "--json", *db)[0]) for t in "123"]
    checkpoints = _cli_json("checkpoints", "grandchild", "--json", *db)
    listed = {s["id"]: s["last_seq"] for s in _cli_json("sessions", "--json", *db)}
    text_seqs = [int(line.split()[0]) for line in _cli("events", "grandchild", *db)]
    before_q3, at_q3 = seq_of["message_appended", "q3"] - 1, seq_of["message_appended", "q3"]
    diff = json.loads(_cli("diff", "grandchild", str(before_q3), str(at_q3), "--json", *db)[0])["diff"]
    rewind = _cli("rewind", "grandchild", "--to", "q2", "--conversation", "--dry-run", "--json", *db)
    exported = tmp_path / "grandchild.jsonl"
    _cli("export", "grandchild", "-o", str(exported), *db)

    assert [e["seq"] for e in events] == text_seqs == list(range(1, last + 1))
    assert listed["grandchild"] == last
    assert [(e["seq"], e["type"]) for e in shown] == [
        (e["seq"], e["type"]) for e in events if e["seq"] in {s["seq"] for s in shown}
    ]
    assert [e["seq"] for e in shown if e["type"] == "message_appended"] == [
        seq_of["message_appended", uuid] for uuid in ("q1", "a1", "q2", "a2", "q3", "a3")
    ]
    assert [e["seq"] for e in audited if e["kind"] == "snip_applied"] == [seq_of["snip_applied", None]]
    assert [r["through_seq"] for r in replays] == [seq - 1 for seq in served]
    assert all(r["matches"] for r in replays)
    assert [c["seq"] for c in checkpoints] == [seq_of["file_history_snapshot", q] for q in ("q1", "q2", "q3")]
    assert [line[1:] for line in diff.splitlines() if line.startswith("+") and '"q3"' in line]
    assert json.loads(rewind[0])["fork_seq"] == seq_of["message_appended", "q2"]
    assert json.loads(rewind[0])["events_dropped"] == last - seq_of["message_appended", "q2"]
    messages = ["q1", "a1", "q2", "a2", "q3", "a3"]
    exported_uuids = [json.loads(line).get("uuid") for line in exported.read_text().splitlines()]
    assert [u for u in exported_uuids if u in messages] == messages


def test_appends_to_a_fork_expect_its_visible_last_seq(store: SessionStore, backend: Backend) -> None:
    """`expected_seq` counts through the parent's prefix, for `Session.append` (which a
    `Conversation` appends through) and `sessionstore append --expected`; the storage
    numbering is refused, and a conflict names both seqs in the visible numbering."""
    root = Session.create(store)
    _chat(root, "q1", "a1")
    fork = root.fork(fork_id="fork")
    _chat(fork, "q2")
    visible = fork.last_seq
    own = store.last_seq("fork")

    with pytest.raises(sessionstore.ConcurrencyError) as refused:
        fork.append([MessageAppended(role="assistant", content="a2")], expected_seq=own)
    assert (refused.value.expected, refused.value.actual) == (own, visible)
    with pytest.raises(sessionstore.ConcurrencyError) as stale:
        fork.append([MessageAppended(role="assistant", content="a2")], expected_seq=visible + 1)
    assert (stale.value.expected, stale.value.actual) == (visible + 1, visible)
    appended = fork.append([MessageAppended(role="assistant", content="a2")], expected_seq=visible)
    assert appended.seqs == (visible + 1,)
    assert store.visible_log("fork").last_seq() == visible + 1 == Session(store, "fork").last_seq
    if backend.shareable:
        _cli("append", "fork", "--text", "q3", "--expected", str(visible + 1), "--db", backend.url)
        assert Session(store, "fork").last_seq == visible + 2


def test_a_fork_rebuilt_from_the_store_folds_its_visible_history(store: SessionStore) -> None:
    """Rebuilding a fork's projection from the store alone (as a resume does) folds the parent's
    prefix and the fork's own events, from a snapshot taken in the visible numbering too."""
    root = Session.create(store, config=SessionConfig(snapshot_every=2))
    _chat(root, "q1", "a1", "q2")
    fork = root.fork(fork_id="fork", config=SessionConfig(snapshot_every=2))
    _chat(fork, "f1", "f2", "f3")
    fork.snapshot()

    for use_snapshots in (True, False):
        state, seq = rebuild(
            store, "fork", TranscriptProjection(), tokenizer=fork.tokenizer, use_snapshots=use_snapshots
        )
        assert seq == fork.last_seq
        assert [e.event_id for e in state.entries] == [e.event_id for e in fork.transcript]

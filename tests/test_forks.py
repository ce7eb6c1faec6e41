"""Forks share their parent's log up to the fork point, without copying it."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore


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
    parent.append([sessionstore.FileRead(path="src/app.py", blob_sha256=None)])
    fork = parent.fork()
    _chat(fork, "q2")
    sessionstore.Pipeline().prepare(fork)

    reads = [r.path for r in sessionstore.FileHistory(fork).state.recent_reads(None)]

    assert reads == ["src/app.py"]
    assert sessionstore.served_request(fork, 1).matches

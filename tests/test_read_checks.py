"""Readers never hand out an altered event as intact (``SessionStore.check_reads``).

An event edited behind the triggers' back (its hash left as it was, or recomputed for it alone)
fails every command that reads it with exit status 3 and the session and seq named, on SQLite
and PostgreSQL, without printing the altered text. The library's plain ``read`` checks nothing
unless asked; ``verify`` walks the whole chain.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sessionstore import MessageAppended, SessionStore
from sessionstore.cli import main
from sessionstore.errors import DataCorruptionError
from sessionstore.store._hashing import event_hash

from .conftest import Backend
from .test_tamper import _tamper

READERS = [
    ["events", "s"],
    ["events", "s", "--json"],
    ["show", "s"],
    ["audit", "s"],
    ["context", "s"],
    ["export", "s", "--format", "claude-code"],
]


def _session(store: SessionStore) -> None:
    events = [
        MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"said {i}") for i in range(6)
    ]
    store.create_session("s", events=events)


def _alter_text(store: SessionStore, *, rehash: bool) -> None:
    """Seq 3's text changed; with ``rehash``, its own hash recomputed too (the next link breaks)."""
    _tamper(store, "UPDATE events SET payload = replace(payload, 'said 2', 'said X') WHERE seq = 3")
    if rehash:
        altered = store.read("s", 3, 3)[0]
        new_hash = event_hash(
            altered.prev_hash,
            altered.session_id,
            altered.seq,
            altered.event_id,
            altered.type,
            altered.schema_version,
            None if altered.token_count_deferred else altered.token_count,
            altered.created_at,
            altered.payload,
            deferred=altered.token_count_deferred,
        )
        _tamper(store, "UPDATE events SET hash = :h WHERE seq = 3", h=new_hash)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.mark.parametrize("rehash", [False, True], ids=["hash-kept", "hash-recomputed"])
@pytest.mark.parametrize("argv", READERS, ids=lambda argv: "-".join(argv[:1] + argv[2:]))
def test_a_command_that_reads_an_altered_event_exits_3_without_printing_it(
    shared_backend: Backend,
    tmp_path: Path,
    argv: list[str],
    rehash: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = shared_backend.open()
    try:
        _session(store)
        assert _cli(*argv, "--db", shared_backend.url)[0] == 0
        _alter_text(store, rehash=rehash)
        capsys.readouterr()

        code, printed = _cli(*argv, "--db", shared_backend.url)
    finally:
        store.close()

    assert code == 3
    assert "said X" not in printed
    error = capsys.readouterr().err
    assert "'s', seq" in error and "does not match its hash" in error


def test_reads_check_only_when_asked(store: SessionStore) -> None:
    """The library's ``read`` returns what is stored unless ``check_reads`` is set."""
    _session(store)
    _alter_text(store, rehash=False)

    assert "said X" in store.read("s")[2].payload
    store.check_reads = True
    try:
        with pytest.raises(
            DataCorruptionError, match="seq 3: the event read does not match its hash"
        ) as caught:
            store.read("s")
        with pytest.raises(DataCorruptionError, match="seq 3"):
            store.read_all()
    finally:
        store.check_reads = False
    assert (caught.value.session_id, caught.value.seq) == ("s", 3)


def test_intact_reads_pass_the_check(store: SessionStore) -> None:
    _session(store)
    store.check_reads = True
    try:
        assert len(store.read("s")) == 6
        assert len(store.read("s", 2, 4)) == 3
        assert len(store.read_all()) == 6
    finally:
        store.check_reads = False

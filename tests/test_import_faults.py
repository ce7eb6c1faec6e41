"""Import under faults: all of it or nothing, and concurrent imports of one folder both succeed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sessionstore import (
    MessageAppended,
    SessionNotFoundError,
    SessionStarted,
    SessionStore,
    SessionStoreError,
    ValidationError,
    import_claude_code,
)
from sessionstore.events import SubagentStarted
from sessionstore.store import SessionWrite

from ._claude_code_corpus import AGENT_FILES, PARENT_SESSION, modern_project
from .conftest import Backend

_AGENT = next(iter(AGENT_FILES))  # 1698e3ad


def _agent_file(folder: Path) -> Path:
    return folder / PARENT_SESSION / "subagents" / f"agent-{_AGENT}.jsonl"


def _children_of_links(store: SessionStore) -> list[str]:
    """The child session every stored SubagentStarted points at."""
    return [
        recorded.event.child_session_id
        for info in store.list_sessions()
        for recorded in store.read(info.id)
        if isinstance(recorded.event, SubagentStarted)
    ]


def _break_with_self_parent(folder: Path) -> None:
    """The agent's manifest names the agent itself as its parent."""
    _agent_file(folder).with_suffix(".meta.json").write_text(
        json.dumps({"agentType": "Explore", "parentAgentId": _AGENT, "toolUseId": "toolu_self"}),
        encoding="utf-8",
    )


def _break_with_unstorable_line(folder: Path) -> None:
    """The agent's last line carries a lone surrogate, which no event can store."""
    path = _agent_file(folder)
    lines = path.read_text(encoding="utf-8").splitlines()
    last = json.loads(lines[-1])
    last["message"]["content"] = [{"type": "text", "text": "\ud800"}]
    lines[-1] = json.dumps(last)  # ensure_ascii: the surrogate travels as the escape \ud800
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _break_with_unstorable_manifest(folder: Path) -> None:
    """The agent's manifest holds a NaN, which JSON cannot read back (json.dumps writes it)."""
    _agent_file(folder).with_suffix(".meta.json").write_text(
        json.dumps({"agentType": "Explore", "toolUseId": "toolu_x", "weight": float("nan")}),
        encoding="utf-8",
    )


@pytest.mark.parametrize(
    "breakage", [_break_with_self_parent, _break_with_unstorable_line, _break_with_unstorable_manifest]
)
def test_a_failing_subagent_leaves_no_main_session_behind(
    breakage: object, tmp_path: Path, store: SessionStore
) -> None:
    """The main session is written first; a sub-agent after it fails: nothing of the import stays."""
    folder = modern_project(tmp_path)
    breakage(folder)  # type: ignore[operator]

    with pytest.raises(SessionStoreError):
        import_claude_code(store, [folder])

    assert store.list_sessions() == []


def test_a_manifest_with_a_nan_is_refused_naming_the_manifest(tmp_path: Path, store: SessionStore) -> None:
    """The manifest is kept in the sub-agent's metadata: refused as the file it is, not stored as null."""
    folder = modern_project(tmp_path)
    _break_with_unstorable_manifest(folder)

    with pytest.raises(ValidationError, match=r"agent-.*\.meta\.json: unreadable sub-agent manifest: weight"):
        import_claude_code(store, [folder])

    assert store.list_sessions() == []


def test_every_link_of_an_import_points_at_a_stored_child(tmp_path: Path, store: SessionStore) -> None:
    folder = modern_project(tmp_path)
    import_claude_code(store, [folder])
    stored = {info.id for info in store.list_sessions()}
    children = _children_of_links(store)
    assert children
    assert set(children) <= stored


def _import_concurrently(backend: Backend, folder: Path) -> tuple[list[BaseException], list[int]]:
    """Two stores import ``folder`` at the same moment: (errors raised, events each wrote)."""
    stores = [backend.open(), backend.open()]
    errors: list[BaseException] = []
    written: list[int] = []
    barrier = threading.Barrier(2)

    def run(store: SessionStore) -> None:
        barrier.wait()
        try:
            report = import_claude_code(store, [folder])
        except BaseException as e:  # any error is the failure under test
            errors.append(e)
            return
        written.append(sum(s.written for s in report.sessions))

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        for store in stores:
            store.close()
    return errors, written


def test_concurrent_imports_of_one_folder_both_succeed(tmp_path: Path, shared_backend: Backend) -> None:
    """Two importers race on the same folder: one writes it, the other finds it there; no error."""
    folder = modern_project(tmp_path)

    first_errors, first_written = _import_concurrently(shared_backend, folder)
    again_errors, again_written = _import_concurrently(shared_backend, folder)

    with shared_backend.open() as store:
        events = sum(len(store.read(info.id)) for info in store.list_sessions())
        sessions = len(store.list_sessions())
    assert first_errors == []
    assert sorted(first_written) == [0, events]  # written once between them
    assert again_errors == []
    assert again_written == [0, 0]
    assert sessions == 3


def test_write_sessions_is_one_transaction(store: SessionStore) -> None:
    """The store call under the import: a failing later write keeps nothing of the earlier ones."""
    hello = MessageAppended(role="user", content="hello")
    with pytest.raises(SessionNotFoundError):
        store.write_sessions(
            [
                SessionWrite("main", [SessionStarted()], create=True),
                SessionWrite("child", [SessionStarted()], create=True, parent_session_id="missing"),
            ]
        )
    assert store.list_sessions() == []

    results = store.write_sessions(
        [
            SessionWrite("main", [SessionStarted()], create=True),
            SessionWrite("child", create=True, parent_session_id="main"),
            SessionWrite("main", [hello], expected_seq=1),
        ]
    )
    again = store.write_sessions([SessionWrite("main", [hello], expected_seq=1)])

    assert [(r.session_id, r.seqs) for r in results] == [("main", (1,)), ("child", ()), ("main", (2,))]
    assert store.get_session("child").parent_session_id == "main"
    assert again[0].deduplicated and again[0].seqs == (2,)  # idempotent by event id, like append

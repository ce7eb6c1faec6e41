"""Hostile transcripts: nothing is read or written outside the place the user named.

Names that reach the file system come from a transcript (``sessionId``, ``agentId``, a sidecar's
name); a crafted one must not make export write, or import read, anywhere else. Special files
(FIFOs, devices) must never block or fill memory: every test that could hang has a timeout.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import SessionStore, ValidationError
from sessionstore._paths import name_problem, read_regular_file
from sessionstore.claude_code import ImportReport, import_claude_code, write_claude_code
from sessionstore.cli import main
from sessionstore.errors import PathRefusedError

from .strategies import examples

SESSION = "5f0c2a8e-1b7d-4c3e-9a6f-0d2e4b8c1a7f"


@pytest.fixture
def mem_store() -> Iterator[SessionStore]:
    """An in-memory store: the file checks need no other backend."""
    opened = sessionstore.open_store(":memory:")
    yield opened
    opened.close()


def _line(
    kind: str, key: str, parent: str | None, session_id: str, text: Any, **extra: Any
) -> dict[str, Any]:
    """A user/assistant line with Claude Code's envelope."""
    if kind == "user":
        message: dict[str, Any] = {"role": "user", "content": text}
    else:
        message = {
            "model": "claude-opus-4-5-20251101",
            "id": f"msg_{key}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 3,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 5,
            },
        }
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/Users/dev/proj",
        "sessionId": session_id,
        "version": "2.0.60",
        "type": kind,
        "message": message,
        "uuid": key,
        "timestamp": "2026-01-13T08:34:23.214Z",
        **extra,
    }


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in lines), encoding="utf-8")
    return path


def _main(folder: Path, session_id: str, *extra: dict[str, Any]) -> Path:
    """``main.jsonl``: a prompt and an answer (then ``extra``) in ``session_id``."""
    lines = [
        _line("user", "u-1", None, session_id, "hi"),
        _line("assistant", "a-1", "u-1", session_id, "hello"),
    ]
    return _write(folder / "main.jsonl", [*lines, *extra])


def _agent(folder: Path, session_id: str, agent_id: str) -> Path:
    """A flat ``agent-x.jsonl`` sibling of ``session_id`` whose lines carry ``agent_id``."""
    lines = [
        _line("user", "s-1", None, session_id, "task", isSidechain=True, agentId=agent_id),
        _line("assistant", "s-2", "s-1", session_id, "done", isSidechain=True, agentId=agent_id),
    ]
    return _write(folder / "agent-x.jsonl", lines)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "agent_id"),
    [
        ("../../escaped", "a1"),  # the main file climbs out
        ("<tmp>/absolute-escape", "a1"),  # an absolute sessionId
        (SESSION, "../../../escaped"),  # a sub-agent's file climbs out
        (SESSION, ".."),
        ("..", "a1"),
    ],
)
@pytest.mark.parametrize("overwrite", [False, True])
def test_export_refuses_names_from_the_transcript_that_leave_the_folder(
    session_id: str, agent_id: str, overwrite: bool, tmp_path: Path, mem_store: SessionStore
) -> None:
    """A crafted sessionId or agentId refuses the whole export, even with overwrite; nothing is written."""
    session_id = session_id.replace("<tmp>", str(tmp_path))
    source = tmp_path / "nest" / "deeper" / "source"
    _main(source, session_id)
    _agent(source, session_id, agent_id)
    report = import_claude_code(mem_store, [source])
    before = _files(tmp_path)

    with pytest.raises(PathRefusedError, match="nothing was written") as refused:
        write_claude_code(
            mem_store, report.sessions[0].session_id, tmp_path / "nest" / "out", overwrite=overwrite
        )

    assert _files(tmp_path) == before
    assert any("not a plain file name" in why or "'..'" in why for why in refused.value.refused.values())


def test_export_refuses_a_symlink_in_the_folder_that_leads_out(
    tmp_path: Path, mem_store: SessionStore
) -> None:
    """With --force, an existing link named like a target file may not redirect the write outside."""
    _main(tmp_path / "source", SESSION)
    import_claude_code(mem_store, [tmp_path / "source"])
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    (out / f"{SESSION}.jsonl").symlink_to(victim)

    with pytest.raises(PathRefusedError, match="resolves outside the target folder"):
        write_claude_code(mem_store, SESSION, out, overwrite=True)

    assert victim.read_bytes() == b"keep me\n"


@pytest.mark.timeout(30)
def test_export_refuses_a_fifo_where_a_file_would_go(tmp_path: Path, mem_store: SessionStore) -> None:
    """A FIFO in place of the transcript would block the write forever: refused instead."""
    _main(tmp_path / "source", SESSION)
    import_claude_code(mem_store, [tmp_path / "source"])
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / f"{SESSION}.jsonl")

    with pytest.raises(PathRefusedError, match="not a regular file"):
        write_claude_code(mem_store, SESSION, out, overwrite=True)


def test_cli_export_of_a_crafted_session_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export --dir --force`` names the refused file, exits 1 and writes nothing."""
    db = str(tmp_path / "cli.db")
    _main(tmp_path / "source", "../escaped")
    imported = io.StringIO()
    assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
    assert main(["import", "--db", db, str(tmp_path / "source"), "--json"], out=imported) == 0
    session_id = json.loads(imported.getvalue())["sessions"][0]["session_id"]

    code = main(
        ["export", "--db", db, session_id, "--dir", str(tmp_path / "out"), "--force"], out=io.StringIO()
    )

    assert code == 1
    assert "'../escaped.jsonl': not a plain file name" in capsys.readouterr().err
    assert not (tmp_path / "escaped.jsonl").exists()
    assert not (tmp_path / "out").exists()


#: Names built to climb, plus arbitrary text: separators, dots, absolute paths, NUL, non-ASCII.
_hostile_names = st.one_of(
    st.lists(st.sampled_from(["..", ".", "", "/", "\\", "x", "tmp", "a.b", "\x00", "é"]), max_size=6).map(
        "/".join
    ),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30),
)


@settings(max_examples=examples(60), deadline=None)  # each example imports and exports files
@given(session_id=_hostile_names, agent_id=_hostile_names)
@example(session_id="../../x", agent_id="a1")
@example(session_id="/", agent_id="..")
def test_export_writes_only_inside_the_folder_whatever_the_names(session_id: str, agent_id: str) -> None:
    """For any sessionId and agentId: the export is refused, or every file lands inside the folder."""
    with tempfile.TemporaryDirectory() as scratch, sessionstore.open_store(":memory:") as store:
        top = Path(scratch)
        source = top / "a" / "b" / "source"
        _main(source, session_id)
        _agent(source, session_id, agent_id)
        try:
            report = import_claude_code(store, [source])
        except sessionstore.SessionStoreError:
            return  # e.g. no sessionId at all: nothing imported, nothing to export
        before = _files(top)
        out = top / "a" / "b" / "out"
        try:
            written = write_claude_code(store, report.sessions[0].session_id, out, overwrite=True)
        except PathRefusedError:
            assert _files(top) == before
            return

        assert all(os.path.realpath(f.path).startswith(os.path.realpath(out) + os.sep) for f in written)
        assert {p for p in _files(top) - before if not p.startswith("a/b/out")} == set()


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        (SESSION, True),
        ("agent-a92e91fc6ad75ef4a.meta.json", True),
        ("toolu_01GKn4jrMV8uKGRRcsX3S9C4.txt", True),
        ("..", False),
        (".", False),
        ("a/b", False),
        ("a\\b", False),
        ("x..y", False),
        ("ticket:4711", False),  # a valid store id, but ':' is not in the file-name set
        ("", False),
        ("/etc", False),
        ("a\x00b", False),
        ("x" * 256, False),
    ],
)
def test_file_names_from_a_transcript_are_plain_names(name: str, ok: bool) -> None:
    """Only 1-255 of [A-Za-z0-9._-], no '..', not '.'."""
    assert (name_problem(name) is None) is ok


# --- import: sidecars and manifests --------------------------------------------------------------


def _spilled(session_id: str, name: str) -> list[dict[str, Any]]:
    """A tool call whose result Claude Code spilled to ``<sessionId>/tool-results/<name>``."""
    stub = (
        "<persisted-output>\nOutput too large (2.1MB). Full output saved to: "
        f"/Users/dev/.claude/projects/p/{session_id}/tool-results/{name}\n</persisted-output>"
    )
    call = _line("assistant", "a-2", "a-1", session_id, "running it")
    call["message"]["content"] = [
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "x"}}
    ]
    result = _line(
        "user", "u-2", "a-2", session_id, [{"type": "tool_result", "tool_use_id": "toolu_1", "content": stub}]
    )
    return [call, result]


def _persisted(store: SessionStore, session_id: str) -> dict[str, Any]:
    return next(e.payload_dict() for e in store.read(session_id) if e.type == "tool_result_persisted")


def test_a_sidecar_beside_the_transcript_is_read(tmp_path: Path, mem_store: SessionStore) -> None:
    """The ordinary case still works: a regular file under <sessionId>/tool-results/."""
    source = tmp_path / "source"
    _main(source, SESSION, *_spilled(SESSION, "out.txt"))
    (source / SESSION / "tool-results").mkdir(parents=True)
    (source / SESSION / "tool-results" / "out.txt").write_bytes(b"the full output\n")

    report = import_claude_code(mem_store, [source / "main.jsonl"])

    assert mem_store.get_blob(_persisted(mem_store, SESSION)["blob_sha256"]) == b"the full output\n"
    assert report.skipped == ()


def test_a_sidecar_symlink_is_not_followed(tmp_path: Path, mem_store: SessionStore) -> None:
    """A sidecar linked to a file outside (the password database) is not read; the report says so."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0\n")
    source = tmp_path / "source"
    _main(source, SESSION, *_spilled(SESSION, "out.txt"))
    (source / SESSION / "tool-results").mkdir(parents=True)
    (source / SESSION / "tool-results" / "out.txt").symlink_to(secret)

    report = import_claude_code(mem_store, [source / "main.jsonl"])
    written = write_claude_code(mem_store, SESSION, tmp_path / "out")

    assert _persisted(mem_store, SESSION)["blob_sha256"] == ""
    assert [s.line for s in report.skipped] == [4]
    assert "out.txt not read: a symlink (not followed)" in report.skipped[0].reason
    assert all(b"root:x" not in f.path.read_bytes() for f in written)


def test_a_tool_results_folder_linked_outside_is_not_read(tmp_path: Path, mem_store: SessionStore) -> None:
    """A symlinked <sessionId> or tool-results folder may not lead out of the transcript's folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "out.txt").write_bytes(b"private\n")
    source = tmp_path / "source"
    _main(source, SESSION, *_spilled(SESSION, "out.txt"))
    (source / SESSION).mkdir(parents=True)
    (source / SESSION / "tool-results").symlink_to(outside)

    report = import_claude_code(mem_store, [source / "main.jsonl"])

    assert _persisted(mem_store, SESSION)["blob_sha256"] == ""
    assert "leads out of the transcript's folder" in report.skipped[0].reason


def test_a_crafted_session_id_does_not_choose_the_sidecar_folder(
    tmp_path: Path, mem_store: SessionStore
) -> None:
    """sessionId '../outside' would make <sessionId>/tool-results/ a folder beside the transcript's."""
    crafted = "../outside"
    (tmp_path / "outside" / "tool-results").mkdir(parents=True)
    (tmp_path / "outside" / "tool-results" / "out.txt").write_bytes(b"private\n")
    _main(tmp_path / "source", crafted, *_spilled(crafted, "out.txt"))

    report = import_claude_code(mem_store, [tmp_path / "source" / "main.jsonl"])

    assert _persisted(mem_store, report.sessions[0].session_id)["blob_sha256"] == ""


def test_export_refuses_a_sidecar_name_that_climbs(tmp_path: Path, mem_store: SessionStore) -> None:
    """A persisted output recorded at '.../tool-results/..' may not be written back as '..'."""
    source = tmp_path / "source"
    _main(source, SESSION, *_spilled(SESSION, ".."))
    (source / SESSION / "tool-results").mkdir(parents=True)
    (source / SESSION / "tool-results" / "toolu_1.txt").write_bytes(b"the full output\n")
    import_claude_code(mem_store, [source / "main.jsonl"])

    with pytest.raises(PathRefusedError) as refused:
        write_claude_code(mem_store, SESSION, tmp_path / "out", overwrite=True)

    assert list(refused.value.refused) == [f"{SESSION}/tool-results/.."]
    assert not (tmp_path / "out").exists()


def test_a_manifest_symlink_is_not_followed(tmp_path: Path, mem_store: SessionStore) -> None:
    """agent-x.meta.json linked to a file outside is not read; the report names it."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"agentType": "leaked"}', encoding="utf-8")
    source = tmp_path / "source"
    _main(source, SESSION)
    _agent(source, SESSION, "a1")
    (source / "agent-x.meta.json").symlink_to(secret)

    report = import_claude_code(mem_store, [source])
    child = next(s.session_id for s in report.sessions if s.parent_session_id)
    started = mem_store.read(child, 1, 1)[0].payload_dict()

    assert "meta" not in started["metadata"]
    assert [s.reason for s in report.skipped] == ["manifest not read: a symlink (not followed)"]


# --- import: special files ---------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_fifo_in_an_imported_folder_is_skipped_not_waited_on(
    tmp_path: Path, mem_store: SessionStore
) -> None:
    """A FIFO named agent-*.jsonl used to block the import forever; now it is skipped and reported."""
    source = tmp_path / "source"
    main_file = _main(source, SESSION).rename(source / f"{SESSION}.jsonl")
    os.mkfifo(source / "agent-fifo.jsonl")
    (source / SESSION / "subagents").mkdir(parents=True)
    os.mkfifo(source / SESSION / "subagents" / "agent-deep.jsonl")

    for named in (source, main_file):
        report = import_claude_code(mem_store, [named])

        assert [s.session_id for s in report.sessions] == [SESSION]
        assert sorted(Path(s.path).name for s in report.skipped) == ["agent-deep.jsonl", "agent-fifo.jsonl"]
        assert all(s.reason == "not a regular file: skipped" for s in report.skipped)


@pytest.mark.timeout(30)
def test_a_symlink_to_a_device_in_a_folder_is_skipped(tmp_path: Path, mem_store: SessionStore) -> None:
    """A link to /dev/zero used to read until MemoryError (/dev/null here: a regression fails, not OOMs)."""
    source = tmp_path / "source"
    _main(source, SESSION)
    (source / "agent-zero.jsonl").symlink_to("/dev/null")

    report = import_claude_code(mem_store, [source])

    assert [s.reason for s in report.skipped] == ["a symlink leading out of the folder: skipped"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("special", ["fifo", "/dev/null"])
def test_a_named_special_file_is_refused(special: str, tmp_path: Path, mem_store: SessionStore) -> None:
    """A transcript the user names that is not a regular file is a clear error, not a hang."""
    named = tmp_path / "main.jsonl"
    if special == "fifo":
        os.mkfifo(named)
    else:
        named.symlink_to(special)

    with pytest.raises(ValidationError, match="not a regular file"):
        import_claude_code(mem_store, [named])

    assert mem_store.list_sessions() == []


@pytest.mark.timeout(30)
def test_read_regular_file_refuses_what_is_not_one(tmp_path: Path) -> None:
    """FIFO, device, folder, symlink (when not followed), over the size bound: refused, never read.

    Devices are tried with /dev/null: the same check refuses /dev/zero, but a regression there
    would fill memory instead of failing.
    """
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 11)
    (tmp_path / "link").symlink_to(tmp_path / "big")
    cases = {
        "fifo": ({}, "a FIFO"),
        "/dev/null": ({}, "a character device"),
        ".": ({}, "a directory"),
        "link": ({"follow_symlinks": False}, "a symlink"),
        "big": ({"max_bytes": 10}, "over the limit of 10"),
    }
    for name, (options, reason) in cases.items():
        with pytest.raises(PathRefusedError, match=reason):
            read_regular_file(tmp_path / name, **options)  # type: ignore[arg-type]

    assert read_regular_file(tmp_path / "link", max_bytes=11) == b"x" * 11


# --- import: a projects root (~/.claude/projects) -----------------------------------------------

OTHER_SESSION = "0d6b1f3a-8c2e-4a5d-b7f9-3e1c0a9d2b4f"


def _skips(report: ImportReport, root: Path) -> list[tuple[str, str]]:
    return sorted((str(Path(s.path).relative_to(root)), s.reason) for s in report.skipped)


def test_a_project_folder_linked_out_of_the_root_is_skipped(tmp_path: Path, mem_store: SessionStore) -> None:
    """A project folder is read only if it resolves under the root; a link inside it is one folder."""
    root = tmp_path / "projects"
    _main(root / "-home-ada-orders", SESSION)
    _main(tmp_path / "elsewhere", OTHER_SESSION)
    (root / "-home-ada-elsewhere").symlink_to(tmp_path / "elsewhere")
    (root / "-home-ada-orders-again").symlink_to(root / "-home-ada-orders")

    report = import_claude_code(mem_store, [root])

    assert [(s.session_id, s.path) for s in report.sessions] == [
        (SESSION, str(root / "-home-ada-orders" / "main.jsonl"))
    ]
    assert _skips(report, root) == [("-home-ada-elsewhere", "a symlink leading out of the folder: skipped")]


@pytest.mark.timeout(30)
def test_special_files_in_a_root_are_skipped_not_waited_on(tmp_path: Path, mem_store: SessionStore) -> None:
    """A FIFO beside the project folders neither blocks nor hides them; those in a project are
    skipped as in a project folder imported alone."""
    root = tmp_path / "projects"
    _main(root / "-home-ada-orders", SESSION)
    os.mkfifo(root / "stray.jsonl")
    os.mkfifo(root / "-home-ada-orders" / "agent-fifo.jsonl")
    (root / "-home-ada-orders" / "agent-zero.jsonl").symlink_to("/dev/null")

    report = import_claude_code(mem_store, [root])

    assert [s.session_id for s in report.sessions] == [SESSION]
    assert _skips(report, root) == [
        ("-home-ada-orders/agent-fifo.jsonl", "not a regular file: skipped"),
        ("-home-ada-orders/agent-zero.jsonl", "a symlink leading out of the folder: skipped"),
        ("stray.jsonl", "not a regular file: skipped"),
    ]


def test_a_root_that_cannot_be_listed_is_a_validation_error(
    tmp_path: Path, mem_store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission denied on the root: an error naming it, not an OSError from deep inside."""
    root = tmp_path / "projects"
    root.mkdir()

    def denied(self: Path) -> Iterator[Path]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "iterdir", denied)

    with pytest.raises(ValidationError, match=rf"{root}: cannot list the folder: Permission denied"):
        import_claude_code(mem_store, [root])

"""Exporting to Claude Code JSONL: imported files come back byte for byte; round trips are exact."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

import sessionstore
from sessionstore import (
    MessageAppended,
    Session,
    SessionStore,
    UsageRecorded,
    ValidationError,
    validate_request,
)
from sessionstore.claude_code import export_claude_code, import_claude_code, write_claude_code
from sessionstore.cli import main
from sessionstore.events._context import CompactBoundary
from sessionstore.pipeline import revert
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._summarizers import OfflineSummarizer

from ._claude_cli import claude_binary, message_texts, project_folder, run_claude
from ._claude_code_corpus import MAIN_FILES, PARENT_SESSION, copy_main, corpus_file, flat_project
from .conftest import Backend, _make_backend
from .messages_api import text_message


@pytest.fixture
def mem_store() -> Iterator[SessionStore]:
    """An in-memory store."""
    opened = sessionstore.open_store(":memory:")
    yield opened
    opened.close()


@pytest.fixture
def second_store(backend: Backend, tmp_path: Path) -> Iterator[SessionStore]:
    """Another, empty database of the same backend as ``store`` (the re-import goes there)."""
    folder = tmp_path / "second"
    folder.mkdir()
    for other in _make_backend(backend.name, folder):
        opened = other.open()
        try:
            yield opened
        finally:
            opened.close()


def _views(store: SessionStore, session_id: str) -> tuple[bytes, list[object]]:
    session = Session(store, session_id)
    return session.request_bytes(), [(e.type, e.payload, e.event_id) for e in session.transcript]


@pytest.mark.parametrize("name", sorted(MAIN_FILES))
def test_export_gives_back_each_real_transcript_byte_for_byte(name: str, mem_store: SessionStore) -> None:
    """Every line as Claude Code wrote it, in its place (a missing final newline is added)."""
    path = corpus_file(name)
    import_claude_code(mem_store, [path])

    assert "\n".join(export_claude_code(mem_store, MAIN_FILES[name])) == path.read_text(
        encoding="utf-8"
    ).rstrip("\n")


def test_import_export_import_gives_identical_projections(
    store: SessionStore, second_store: SessionStore, tmp_path: Path
) -> None:
    """Main session and sub-agents: identical request bytes and transcript payloads after a round trip."""
    first = import_claude_code(store, [flat_project(tmp_path)])
    written = write_claude_code(store, PARENT_SESSION, tmp_path / "exported")
    second = import_claude_code(second_store, [tmp_path / "exported"])

    assert [f.path.relative_to(tmp_path / "exported").as_posix() for f in written] == [
        f"{PARENT_SESSION}.jsonl",
        f"{PARENT_SESSION}/subagents/agent-1698e3ad.jsonl",
        f"{PARENT_SESSION}/subagents/agent-a382dbae.jsonl",
    ]
    assert [s.session_id for s in second.sessions] == [s.session_id for s in first.sessions]
    for imported in first.sessions:
        assert _views(second_store, imported.session_id) == _views(store, imported.session_id)
        assert second_store.get_session(imported.session_id).parent_session_id == imported.parent_session_id


@pytest.mark.parametrize("name", sorted(MAIN_FILES))
def test_round_trip_of_each_transcript(name: str, mem_store: SessionStore, tmp_path: Path) -> None:
    """Compaction, micro-compaction, persisted output: the same views after export and re-import."""
    import_claude_code(mem_store, [corpus_file(name)])
    write_claude_code(mem_store, MAIN_FILES[name], tmp_path)
    again = sessionstore.open_store(":memory:")
    import_claude_code(again, [tmp_path / f"{MAIN_FILES[name]}.jsonl"])

    assert _views(again, MAIN_FILES[name]) == _views(mem_store, MAIN_FILES[name])
    again.close()


def test_sidecar_of_a_persisted_output_is_written_back(mem_store: SessionStore, tmp_path: Path) -> None:
    """The spilled output goes to <sessionId>/tool-results/ under its original name."""
    name = "entireio__entire-graph__13-a55a80ec0f-2-full.jsonl"
    path = copy_main(tmp_path, name)
    sidecar = path.parent / MAIN_FILES[name] / "tool-results" / "bxziswn6g.txt"
    sidecar.parent.mkdir(parents=True)
    sidecar.write_bytes(b"full output\n" * 3000)
    import_claude_code(mem_store, [path])
    write_claude_code(mem_store, MAIN_FILES[name], tmp_path / "out")

    assert (tmp_path / "out" / MAIN_FILES[name] / "tool-results" / "bxziswn6g.txt").read_bytes() == (
        sidecar.read_bytes()
    )


def test_events_appended_after_import_continue_the_chain(mem_store: SessionStore) -> None:
    """A turn added here becomes new lines after the original ones, parented on its last line."""
    name = f"rcgray__claude-code-bug-phantom-reads-17407__{PARENT_SESSION}.jsonl"
    path = corpus_file(name)
    import_claude_code(mem_store, [path])
    session = Session(mem_store, PARENT_SESSION)
    session.append(
        [
            MessageAppended(role="user", content="one more thing"),
            MessageAppended(
                role="assistant", content=[{"type": "text", "text": "sure"}], api_message_id="msg_x"
            ),
            UsageRecorded(input_tokens=10, output_tokens=2, api_message_id="msg_x", model="claude-opus-4-5"),
        ]
    )
    lines = export_claude_code(mem_store, PARENT_SESSION)
    original = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    last_uuid = next(json.loads(line)["uuid"] for line in reversed(original) if '"uuid"' in line)
    added = [json.loads(line) for line in lines[len(original) :]]

    assert lines[: len(original)] == original
    assert [a["type"] for a in added] == ["user", "assistant"]
    assert added[0]["parentUuid"] == last_uuid
    assert added[1]["parentUuid"] == added[0]["uuid"]
    assert added[0]["sessionId"] == PARENT_SESSION
    assert added[0]["cwd"] == json.loads(original[-1])["cwd"]
    assert added[1]["message"]["usage"]["input_tokens"] == 10


def test_a_native_session_exports_as_a_resumable_chain(mem_store: SessionStore, tmp_path: Path) -> None:
    """Never imported: messages, a compaction and its summary become chained lines that import back."""
    session = Session.create(mem_store, "native-1", model="claude-sonnet-4-5")
    tool = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.py"}}
    session.append(
        [
            MessageAppended(role="user", content="read a.py"),
            MessageAppended(role="assistant", content=[tool], api_message_id="msg_1"),
            MessageAppended(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"}],
            ),
            MessageAppended(role="assistant", content="it prints 1", api_message_id="msg_2"),
            CompactBoundary(
                trigger="manual",
                strategy="llm",
                summarizer="test",
                summary="We read a.py; it prints 1.",
                pre_compact_tokens=900,
                post_compact_raw_tokens=12,
                post_compact_blocks=1,
            ),
            MessageAppended(role="user", content="and b.py?"),
        ]
    )
    lines = [json.loads(line) for line in export_claude_code(mem_store, "native-1")]
    (tmp_path / "native-1.jsonl").write_text(
        "".join(line + "\n" for line in export_claude_code(mem_store, "native-1")), encoding="utf-8"
    )
    again = sessionstore.open_store(":memory:")
    import_claude_code(again, [tmp_path / "native-1.jsonl"])

    assert [(line["type"], line.get("subtype")) for line in lines] == [
        ("user", None),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
        ("system", "compact_boundary"),
        ("user", None),
        ("user", None),
    ]
    assert all(
        line["parentUuid"] == previous["uuid"]
        for previous, line in itertools.pairwise(lines)
        if line.get("subtype") != "compact_boundary"
    )
    assert lines[4]["logicalParentUuid"] == lines[3]["uuid"]
    assert lines[5]["isCompactSummary"] is True
    assert Session(again, "native-1").request() == session.request()
    validate_request(session.request())
    again.close()


def test_a_reverted_compaction_is_not_exported_and_the_history_chains_on(
    mem_store: SessionStore, tmp_path: Path
) -> None:
    """Claude Code has no line for a revert: the boundary is left out, so its resume sees the history."""
    session = Session.create(mem_store, "native-2", model="claude-sonnet-4-5")
    session.append([MessageAppended(role="user", content="read a.py")])
    session.append([MessageAppended(role="assistant", content="it prints 1", api_message_id="msg_1")])
    compacted = compact(session, OfflineSummarizer())
    session.append([MessageAppended(role="user", content="and b.py?")])
    revert(session, compacted.event_id)
    path = tmp_path / "native-2.jsonl"
    lines = export_claude_code(mem_store, "native-2")
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    again = sessionstore.open_store(":memory:")
    import_claude_code(again, [path])

    parsed = [json.loads(line) for line in lines]
    assert [line.get("subtype") for line in parsed] == [None, None, None]
    assert all(line["parentUuid"] == previous["uuid"] for previous, line in itertools.pairwise(parsed))
    assert Session(again, "native-2").request() == session.request()
    again.close()


def test_write_refuses_to_overwrite(mem_store: SessionStore, tmp_path: Path) -> None:
    """Existing files are left alone unless overwrite is asked for; nothing is half-written."""
    import_claude_code(mem_store, [flat_project(tmp_path)])
    write_claude_code(mem_store, PARENT_SESSION, tmp_path / "out")

    with pytest.raises(ValidationError, match="would overwrite"):
        write_claude_code(mem_store, PARENT_SESSION, tmp_path / "out")
    assert len(write_claude_code(mem_store, PARENT_SESSION, tmp_path / "out", overwrite=True)) == 3


def test_cli_export_to_stdout_file_and_folder(tmp_path: Path) -> None:
    """``export`` prints the lines, writes -o FILE, or lays out --dir with --json rows."""
    db = str(tmp_path / "cli.db")
    out = io.StringIO()
    assert main(["db", "upgrade", "--db", db], out=out) == 0
    assert main(["import", "--db", db, str(flat_project(tmp_path))], out=out) == 0
    stdout = io.StringIO()
    main(["export", "--db", db, PARENT_SESSION], out=stdout)
    original = (tmp_path / "flat-project" / f"{PARENT_SESSION}.jsonl").read_text(encoding="utf-8")
    rows = io.StringIO()
    code = main(["export", "--db", db, PARENT_SESSION, "--dir", str(tmp_path / "dir"), "--json"], out=rows)

    assert stdout.getvalue() == original
    assert main(["export", "--db", db, PARENT_SESSION, "-o", str(tmp_path / "one.jsonl")], out=out) == 0
    assert (tmp_path / "one.jsonl").read_text(encoding="utf-8") == original
    assert main(["export", "--db", db, PARENT_SESSION, "-o", str(tmp_path / "one.jsonl")], out=out) == 1
    assert code == 0
    assert [json.loads(r)["lines"] for r in rows.getvalue().splitlines()] == [103, 17, 1]


def test_a_fork_exports_its_whole_visible_history(store: SessionStore) -> None:
    """The shared prefix and the fork's own messages, one chain, under the fork's own sessionId."""
    parent = Session.create(store, "parent-1", model="claude-sonnet-4-5")
    turns: list[tuple[Literal["user", "assistant"], str]] = [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    for role, text in turns:
        parent.append([MessageAppended(role=role, content=text, message_uuid=f"uuid-{text}")])
    fork = parent.fork(message_uuid="uuid-a1", fork_id="fork-1")
    fork.append([MessageAppended(role="user", content="q2-alternative", message_uuid="uuid-alt")])

    lines = [json.loads(line) for line in export_claude_code(store, "fork-1")]

    assert [line["uuid"] for line in lines] == ["uuid-q1", "uuid-a1", "uuid-alt"]
    assert [line["parentUuid"] for line in lines] == [None, "uuid-q1", "uuid-a1"]
    assert {line["sessionId"] for line in lines} == {"fork-1"}
    assert [json.loads(line)["uuid"] for line in export_claude_code(store, "parent-1")][-1] == "uuid-a2"


def test_a_fork_of_an_imported_transcript_round_trips(mem_store: SessionStore, tmp_path: Path) -> None:
    """Inherited lines come back in place, under the fork's sessionId as Claude Code forks; re-import."""
    name = "entireio__cli__98-78b713483d-0-full.jsonl"
    path = corpus_file(name)
    import_claude_code(mem_store, [path])
    parent = Session(mem_store, MAIN_FILES[name])
    prompts = [e for e in parent.transcript if e.type == "message_appended" and e.payload["role"] == "user"]
    point = prompts[len(prompts) // 2]
    fork_id = "c0ffee00-0000-4000-8000-000000000001"
    fork = parent.fork(at_seq=point.seq, fork_id=fork_id)
    fork.append([MessageAppended(role="user", content="try the other way", message_uuid="fork-prompt")])

    lines = export_claude_code(mem_store, fork_id)
    write_claude_code(mem_store, fork_id, tmp_path / "out")
    write_claude_code(mem_store, parent.id, tmp_path / "out")  # beside it: no collision
    again = sessionstore.open_store(":memory:")
    import_claude_code(again, [tmp_path / "out" / f"{fork_id}.jsonl"])
    original = path.read_text(encoding="utf-8").rstrip("\n").split("\n")

    inherited = [(n, line) for n, line in enumerate(lines[:-1]) if line]
    assert len(inherited) > 20
    assert all(line == original[n].replace(MAIN_FILES[name], fork_id) for n, line in inherited)
    assert json.loads(lines[-1])["parentUuid"] == point.payload["message_uuid"]
    assert {json.loads(line).get("sessionId", fork_id) for line in lines if line} == {fork_id}
    assert Session(again, fork_id).request() == fork.request()
    again.close()


def test_numbers_come_back_as_claude_code_wrote_them(mem_store: SessionStore, tmp_path: Path) -> None:
    """Floats are written as JavaScript writes them (0.00006, not Python's 6e-05): byte for byte."""
    session = "7d1e4c2a-9b3f-4e8d-a6c5-1f2e3d4c5b6a"
    text = (
        '{"type":"user","message":{"role":"user","content":"hi"},"uuid":"u-1","parentUuid":null,'
        f'"sessionId":"{session}"}}\n'
        f'{{"type":"cost-state","sessionId":"{session}","totalCostUSD":0.00006,"small":1e-7,"tiny":1.5e-8,'
        '"edge":0.000001,"ratio":0.30000000000000004,"big":1e+21,"bigger":2.5e+22,"whole":100000000000000000000,'
        '"plain":123.456,"negative":-0.5,"nested":[{"x":0.0001}]}\n'
    )
    path = tmp_path / f"{session}.jsonl"
    path.write_text(text, encoding="utf-8")
    import_claude_code(mem_store, [path])

    assert "\n".join(export_claude_code(mem_store, session)) + "\n" == text


@pytest.mark.claude_cli
def test_claude_code_resumes_an_exported_fork_with_the_forks_history(tmp_path: Path) -> None:
    """The real CLI resumes the fork's file by its id and sends the shared prefix, then the fork's turn."""
    fixture = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"
    home = tmp_path / "home"
    claude_binary()
    store = sessionstore.open_store(":memory:")
    parent = Session(store, import_claude_code(store, [fixture]).sessions[0].session_id)
    first_answer = next(
        e for e in parent.transcript if e.type == "message_appended" and e.payload["role"] == "assistant"
    )
    fork = parent.fork(at_seq=first_answer.seq, fork_id="0b7c3a52-4f1e-4d2a-9c8b-7e6f5d4c3b2a")
    fork.append([MessageAppended(role="user", content="a question only the fork asked")])
    fork.append(
        [MessageAppended(role="assistant", content="an answer only the fork got", api_message_id="msg_f")]
    )
    write_claude_code(store, fork.id, project_folder(home))

    (sent,) = run_claude(home, [text_message("fine")], "--resume", fork.id, "next question")

    assert message_texts(sent["messages"]) == [*message_texts(fork.request()["messages"]), "next question"]
    store.close()

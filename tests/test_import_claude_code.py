"""Importing real Claude Code transcripts: nothing dropped, uuids and usage kept, views valid."""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionStore, ValidationError, validate_request
from sessionstore.claude_code import export_claude_code, import_claude_code
from sessionstore.claude_code._import import SkippedLine
from sessionstore.cli import main
from sessionstore.events import OpaqueEntry
from sessionstore.events._base import decode_event
from sessionstore.projections import CLEARED_PLACEHOLDER

from ._claude_code_corpus import (
    FIRST_FILES,
    JOINED_LINE_FILE,
    MAIN_FILES,
    PARENT_SESSION,
    SPAWNING_TOOL_USE,
    copy_main,
    corpus_file,
    entries,
    flat_project,
    modern_project,
)
from .messages_api import with_tool_definitions


@pytest.fixture
def mem_store() -> Iterator[SessionStore]:
    """An in-memory store: the per-file checks need no other backend."""
    opened = sessionstore.open_store(":memory:")
    yield opened
    opened.close()


def _payloads(store: SessionStore, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload_dict() for e in store.read(session_id) if e.type == kind]


def _expected_last_usage(path: Path) -> int:
    """The context size the last API response of the file reported (max output over its chunks)."""
    best: dict[str, dict[str, Any]] = {}
    last = None
    for _, entry in entries(path):
        if entry.get("type") != "assistant":
            continue
        message = entry["message"]
        if message.get("model") == "<synthetic>":
            continue
        usage = message["usage"]
        seen = best.get(message["id"])
        if seen is None or usage["output_tokens"] > seen["output_tokens"]:
            best[message["id"]] = usage
        last = message["id"]
    assert last is not None
    usage = best[last]
    return int(
        usage["input_tokens"]
        + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["output_tokens"]
    )


def _numbered_objects(lines: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, int]]:
    """(line number, index of the object on its line) of every object."""
    out: list[tuple[int, int]] = []
    for number, _ in lines:
        out.append((number, out[-1][1] + 1 if out and out[-1][0] == number else 0))
    return out


@pytest.mark.parametrize("name", sorted(MAIN_FILES))
class TestEachRealTranscript:
    """Every main transcript of the corpus imports completely and gives a valid request."""

    def test_every_line_is_kept_once_and_message_uuids_are_kept(
        self, name: str, mem_store: SessionStore
    ) -> None:
        """One line record per non-blank line; one message per user/assistant line, same uuid."""
        path = corpus_file(name)
        report = import_claude_code(mem_store, [path])
        session_id = MAIN_FILES[name]
        lines = entries(path)
        message_lines = [e for _, e in lines if e["type"] in ("user", "assistant")]
        recorded = _payloads(mem_store, session_id, "imported_entry") + _payloads(
            mem_store, session_id, "opaque_entry"
        )
        messages = _payloads(mem_store, session_id, "message_appended")

        assert report.sessions[0].session_id == session_id
        assert sorted((r["line"], r["object_index"]) for r in recorded) == _numbered_objects(lines)
        assert report.sessions[0].entries == len(lines)
        assert report.sessions[0].lines == len({number for number, _ in lines})
        assert len(messages) == len(message_lines) == report.sessions[0].messages
        assert [m["message_uuid"] for m in messages] == [e["uuid"] for e in message_lines]

    def test_usage_is_recorded_once_per_api_call_and_anchors_the_token_state(
        self, name: str, mem_store: SessionStore
    ) -> None:
        """One UsageRecorded per API response id; "used" starts from the last one."""
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        session = Session(mem_store, MAIN_FILES[name])
        usages = _payloads(mem_store, MAIN_FILES[name], "usage_recorded")
        api_ids = {
            e["message"]["id"]
            for _, e in entries(path)
            if e["type"] == "assistant" and e["message"].get("model") != "<synthetic>"
        }

        assert usages
        assert sorted(u["api_message_id"] for u in usages) == sorted(api_ids)
        assert session.api_state.usage_total == _expected_last_usage(path)
        assert session.used_tokens() >= session.api_state.usage_total
        assert session.token_state().used == session.used_tokens()

    def test_api_view_is_a_valid_request(self, name: str, mem_store: SessionStore) -> None:
        """The request after import passes validate_request."""
        import_claude_code(mem_store, [corpus_file(name)])
        request = Session(mem_store, MAIN_FILES[name]).request()

        assert request["messages"]
        validate_request(with_tool_definitions(request))

    def test_reimport_adds_nothing(self, name: str, mem_store: SessionStore) -> None:
        """The same file again writes no event: the last seq stays."""
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        before = mem_store.last_seq(MAIN_FILES[name])
        again = import_claude_code(mem_store, [path])

        assert again.written == 0
        assert not again.sessions[0].created
        assert mem_store.last_seq(MAIN_FILES[name]) == before


# --- small synthetic transcripts, shaped like the corpus lines (2.0.60 envelope) ----------------

_SYNTH_SESSION = "5f0c2a8e-1b7d-4c3e-9a6f-0d2e4b8c1a7f"


def _cc_line(
    kind: str, key: str, parent: str | None, message: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """A user/assistant line with Claude Code's envelope, keys in the order Claude Code writes them."""
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/Users/dev/proj",
        "sessionId": _SYNTH_SESSION,
        "version": "2.0.60",
        "gitBranch": "main",
        "type": kind,
        "message": message,
        "uuid": key,
        "timestamp": "2026-01-13T08:34:23.214Z",
        **extra,
    }


def _cc_user(
    key: str, parent: str | None, content: str | list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return _cc_line("user", key, parent, {"role": "user", "content": content}, **extra)


def _cc_assistant(key: str, parent: str | None, api_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    message = {
        "model": "claude-opus-4-5-20251101",
        "id": api_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 3,
            "cache_creation_input_tokens": 626,
            "cache_read_input_tokens": 7787,
            "output_tokens": 42,
            "service_tier": "standard",
        },
    }
    return _cc_line("assistant", key, parent, message, requestId=f"req_{key}")


def _cc_conversation() -> list[dict[str, Any]]:
    """Prompt, answer, prompt, answer: a clean four-line chain."""
    return [
        _cc_user("u-1", None, "list the files"),
        _cc_assistant("a-1", "u-1", "msg_1", [{"type": "text", "text": "Here they are."}]),
        _cc_user("u-2", "a-1", "thanks, now count them"),
        _cc_assistant("a-2", "u-2", "msg_2", [{"type": "text", "text": "There are 3."}]),
    ]


def _write_jsonl(path: Path, lines: list[dict[str, Any]], *, tail: bytes = b"\n") -> Path:
    """The lines as Claude Code writes them (compact JSON, one a line), then ``tail``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = b"\n".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() for e in lines)
    path.write_bytes(body + tail)
    return path


def _message_uuids(store: SessionStore, session_id: str) -> list[str]:
    return [m["message_uuid"] for m in _payloads(store, session_id, "message_appended")]


def _corrupt(tmp_path: Path, number: int) -> Path:
    source = copy_main(tmp_path, sorted(FIRST_FILES)[0])
    lines = source.read_bytes().split(b"\n")
    lines[number - 1] = lines[number - 1][: len(lines[number - 1]) // 2]  # a truncated write
    source.write_bytes(b"\n".join(lines))
    return source


class TestBadLines:
    """A malformed line fails the import, naming file and line, unless the user skips it."""

    def test_corrupt_line_fails_naming_file_and_line_with_nothing_written(
        self, tmp_path: Path, store: SessionStore
    ) -> None:
        """Nothing of any session is written when one line is bad."""
        path = _corrupt(tmp_path, 7)

        with pytest.raises(ValidationError, match=rf"{path}:7: malformed line: invalid JSON") as caught:
            import_claude_code(store, [path])

        assert caught.value.index == 7
        assert store.list_sessions() == []

    def test_skip_bad_lines_imports_and_reports_the_line(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """With skip_bad_lines the rest is imported and the line is reported."""
        path = _corrupt(tmp_path, 7)
        report = import_claude_code(mem_store, [path], skip_bad_lines=True)
        recorded = _payloads(mem_store, report.sessions[0].session_id, "imported_entry")

        assert [(s.path, s.line) for s in report.skipped] == [(str(path), 7)]
        assert "invalid JSON" in report.skipped[0].reason
        assert 7 not in {r["line"] for r in recorded}
        assert report.sessions[0].lines == len(entries(corpus_file(sorted(FIRST_FILES)[0]))) - 1

    def test_line_that_cannot_be_modelled_fails_or_is_kept_opaque(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """A user line whose content block has no type: an error, or (skipping) an opaque entry."""
        path = copy_main(tmp_path, sorted(FIRST_FILES)[0])
        lines = path.read_text(encoding="utf-8").splitlines()
        bad = {
            "type": "user",
            "uuid": "bad-1",
            "parentUuid": None,
            "sessionId": MAIN_FILES[sorted(FIRST_FILES)[0]],
            "message": {"role": "user", "content": [{"text": "no type"}]},
        }
        lines.append(json.dumps(bad))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

        with pytest.raises(ValidationError, match=rf":{len(lines)}: malformed 'user' line"):
            import_claude_code(mem_store, [path])
        report = import_claude_code(mem_store, [path], skip_bad_lines=True)
        opaque = _payloads(mem_store, report.sessions[0].session_id, "opaque_entry")

        assert report.skipped == (SkippedLine(str(path), len(lines), report.skipped[0].reason),)
        assert "kept opaque" in report.skipped[0].reason
        assert opaque[-1]["entry"] == bad

    @pytest.mark.parametrize(
        ("cut", "reason"),
        [
            (b'{"parentUuid":"u-2","isSidechain":false,"type":"assis', "invalid JSON"),
            ('{"type":"user","message":{"content":"caf\u00e9'.encode()[:-1], "not UTF-8"),
        ],
        ids=["mid-json", "mid-utf8-character"],
    )
    def test_truncated_last_line_fails_or_is_skipped(
        self, cut: bytes, reason: str, tmp_path: Path, store: SessionStore
    ) -> None:
        """A file cut mid-line (a crash while writing): an error at that line, or skipped and reported."""
        complete = _cc_conversation()[:3]
        path = _write_jsonl(tmp_path / f"{_SYNTH_SESSION}.jsonl", complete, tail=b"\n" + cut)

        with pytest.raises(ValidationError, match=rf"{path}:4: malformed line: {reason}") as caught:
            import_claude_code(store, [path])
        assert caught.value.index == 4
        assert store.list_sessions() == []

        report = import_claude_code(store, [path], skip_bad_lines=True)

        assert [(s.path, s.line) for s in report.skipped] == [(str(path), 4)]
        assert reason in report.skipped[0].reason
        assert report.sessions[0].lines == report.sessions[0].entries == 3
        assert _message_uuids(store, _SYNTH_SESSION) == ["u-1", "a-1", "u-2"]

    def test_complete_last_line_without_final_newline_imports_normally(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """Entire's copies end without a newline: the last line is still a line like any other."""
        lines = _cc_conversation()
        path = _write_jsonl(tmp_path / f"{_SYNTH_SESSION}.jsonl", lines, tail=b"")
        report = import_claude_code(mem_store, [path])

        assert report.skipped == ()
        assert report.sessions[0].lines == report.sessions[0].entries == 4
        assert _message_uuids(mem_store, _SYNTH_SESSION) == ["u-1", "a-1", "u-2", "a-2"]
        assert export_claude_code(mem_store, _SYNTH_SESSION) == path.read_text(encoding="utf-8").split("\n")


class TestSeveralObjectsOnOneLine:
    """An entry appended without a newline: each object is an entry; the line exports as it was."""

    def test_the_real_joined_line_imports_as_two_entries_and_exports_byte_for_byte(
        self, mem_store: SessionStore
    ) -> None:
        """The corpus file whose progress line carries a summary entry glued to it."""
        name, number = JOINED_LINE_FILE
        path = corpus_file(name)
        raw = path.read_bytes().split(b"\n")[number - 1]
        import_claude_code(mem_store, [path])
        on_the_line = [
            (r.type, r.payload_dict()["object_index"], r.payload_dict()["entry_type"])
            for r in mem_store.read(MAIN_FILES[name])
            if r.type in ("imported_entry", "opaque_entry") and r.payload_dict()["line"] == number
        ]

        assert on_the_line == [("opaque_entry", 0, "progress"), ("opaque_entry", 1, "summary")]
        assert export_claude_code(mem_store, MAIN_FILES[name])[number - 1].encode() == raw

    def test_a_message_glued_after_another_entry_is_a_message_of_its_own(
        self, tmp_path: Path, store: SessionStore
    ) -> None:
        """Both objects are modelled (own event ids); the request has the message; export is exact."""
        lines = _cc_conversation()
        dump = [json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in lines]
        summary = '{"type":"summary","summary":"Listing files","leafUuid":"a-1"}'
        text = "\n".join([dump[0], dump[1] + summary + dump[2], dump[3]]) + "\n"
        path = tmp_path / f"{_SYNTH_SESSION}.jsonl"
        path.write_text(text, encoding="utf-8")

        report = import_claude_code(store, [path])
        again = import_claude_code(store, [path])

        assert report.sessions[0].lines == 3
        assert report.sessions[0].entries == 5
        assert _message_uuids(store, _SYNTH_SESSION) == ["u-1", "a-1", "u-2", "a-2"]
        texts = [m["content"][0]["text"] for m in Session(store, _SYNTH_SESSION).request()["messages"]]
        assert texts == ["list the files", "Here they are.", "thanks, now count them", "There are 3."]
        assert "\n".join(export_claude_code(store, _SYNTH_SESSION)) + "\n" == text
        assert again.written == 0

    @pytest.mark.parametrize(
        ("tail", "reason"),
        [
            (b"garbage", "Extra data"),
            (b' {"type":"summary"}', "Extra data"),
            (b'{"type":"sum', "Unterminated string"),
        ],
        ids=["garbage", "space-then-object", "truncated-second-object"],
    )
    def test_anything_else_after_the_first_object_is_still_a_bad_line(
        self, tail: bytes, reason: str, tmp_path: Path, store: SessionStore
    ) -> None:
        """Only objects written back to back are accepted; the rest fails (or is skipped) as before."""
        path = _write_jsonl(tmp_path / f"{_SYNTH_SESSION}.jsonl", _cc_conversation()[:2], tail=b"")
        path.write_bytes(path.read_bytes() + tail + b"\n")

        with pytest.raises(ValidationError, match=rf"{path}:2: malformed line: invalid JSON.*{reason}"):
            import_claude_code(store, [path])
        assert store.list_sessions() == []
        report = import_claude_code(store, [path], skip_bad_lines=True)

        assert [(s.line, reason in s.reason) for s in report.skipped] == [(2, True)]
        assert _message_uuids(store, _SYNTH_SESSION) == ["u-1"]


class TestSubagents:
    """Sub-agent files become child sessions linked to the tool call that spawned them."""

    @pytest.mark.parametrize("layout", [flat_project, modern_project], ids=["flat", "subagents-dir"])
    def test_subagent_files_are_linked_to_the_parent_tool_call(
        self, layout: Any, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """Both layouts: child sessions, SessionStarted(subagent), SubagentStarted in the parent."""
        folder = layout(tmp_path)
        report = import_claude_code(mem_store, [folder / f"{PARENT_SESSION}.jsonl"])
        child = f"{PARENT_SESSION}.agent-1698e3ad"
        warmup = f"{PARENT_SESSION}.agent-a382dbae"
        started = _payloads(mem_store, child, "session_started")[0]
        parent_events = mem_store.read(PARENT_SESSION)
        links = [e for e in parent_events if e.type == "subagent_started"]
        spawn = next(
            i
            for i, e in enumerate(parent_events)
            if e.type == "message_appended"
            and any(
                b.get("id") == SPAWNING_TOOL_USE for b in e.payload_dict()["content"] if isinstance(b, dict)
            )
        )

        assert [s.session_id for s in report.sessions] == [PARENT_SESSION, child, warmup]
        assert mem_store.get_session(child).parent_session_id == PARENT_SESSION
        assert started["query_source"] == "subagent"
        assert started["parent_tool_use_id"] == SPAWNING_TOOL_USE
        assert [link.payload_dict()["child_session_id"] for link in links] == [child, warmup]
        assert links[0].payload_dict()["parent_tool_use_id"] == SPAWNING_TOOL_USE
        assert parent_events[spawn + 1] == links[0] or parent_events[spawn + 2] == links[0]
        assert links[1].payload_dict()["parent_tool_use_id"] is None  # a warm-up agent: no tool call
        validate_request(with_tool_definitions(Session(mem_store, child).request()))

    def test_project_folder_import_takes_every_session(self, tmp_path: Path, mem_store: SessionStore) -> None:
        """A folder: every main transcript and every sub-agent in it."""
        folder = flat_project(tmp_path)
        other = copy_main(tmp_path, sorted(FIRST_FILES)[1])
        other.rename(folder / other.name)
        report = import_claude_code(mem_store, [folder])

        assert len(report.sessions) == 4

    def test_subagent_without_its_main_session_is_refused(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """An agent file alone, its main session nowhere: a clear error, nothing written."""
        folder = flat_project(tmp_path)

        with pytest.raises(ValidationError, match="import its main transcript with it"):
            import_claude_code(mem_store, [folder / "agent-1698e3ad.jsonl"])
        assert mem_store.list_sessions() == []

    def test_subagent_imported_after_its_main_session_is_linked(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """The main session already stored: the child is created and the parent gains the link."""
        folder = flat_project(tmp_path)
        (folder / "agent-1698e3ad.jsonl").rename(tmp_path / "agent-1698e3ad.jsonl")
        import_claude_code(mem_store, [folder / f"{PARENT_SESSION}.jsonl"])
        report = import_claude_code(mem_store, [tmp_path / "agent-1698e3ad.jsonl"])

        assert report.sessions[-1].parent_session_id == PARENT_SESSION
        assert report.sessions[-1].parent_tool_use_id == SPAWNING_TOOL_USE

    @pytest.mark.parametrize("given", ["file", "folder"])
    def test_missing_subagent_file_imports_the_main_session_alone(
        self, given: str, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """A Task call names agent-<id>.jsonl, which is absent: the main session imports, no child.

        The tool result (the agent's final answer, what the model saw) stays in the main session;
        importing the agent file later links it as usual.
        """
        agent_id = "5e1f0a2b"
        spawn = {
            "type": "tool_use",
            "id": "toolu_spawn",
            "name": "Task",
            "input": {"description": "Survey", "prompt": "List the modules.", "subagent_type": "Explore"},
        }
        answer = [{"type": "text", "text": "Three modules: a, b, c."}]
        result = {"tool_use_id": "toolu_spawn", "type": "tool_result", "content": answer}
        lines = [
            _cc_user("u-1", None, "survey the code"),
            _cc_assistant("a-1", "u-1", "msg_1", [spawn]),
            _cc_user(
                "u-2",
                "a-1",
                [result],
                toolUseResult={"status": "completed", "agentId": agent_id, "content": answer},
            ),
            _cc_assistant("a-2", "u-2", "msg_2", [{"type": "text", "text": "a, b and c."}]),
        ]
        folder = tmp_path / "project"
        path = _write_jsonl(folder / f"{_SYNTH_SESSION}.jsonl", lines)
        (folder / _SYNTH_SESSION / "subagents").mkdir(parents=True)  # the 2.1+ folder, without the file
        report = import_claude_code(mem_store, [path if given == "file" else folder])
        results = [
            b
            for m in Session(mem_store, _SYNTH_SESSION).request()["messages"]
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]

        assert [s.session_id for s in report.sessions] == [_SYNTH_SESSION]
        assert report.skipped == ()
        assert report.sessions[0].entries == 4
        assert [i.id for i in mem_store.list_sessions()] == [_SYNTH_SESSION]
        assert _payloads(mem_store, _SYNTH_SESSION, "subagent_started") == []
        assert results == [result]

        agent = _cc_line(
            "assistant",
            "s-1",
            None,
            {**_cc_assistant("s-1", None, "msg_3", answer)["message"], "model": "claude-sonnet-4-5-20250929"},
            agentId=agent_id,
        )
        agent["isSidechain"] = True
        late = import_claude_code(mem_store, [_write_jsonl(tmp_path / f"agent-{agent_id}.jsonl", [agent])])
        links = _payloads(mem_store, _SYNTH_SESSION, "subagent_started")

        assert late.sessions[-1].session_id == f"{_SYNTH_SESSION}.agent-{agent_id}"
        assert late.sessions[-1].parent_tool_use_id == "toolu_spawn"
        assert [(x["parent_tool_use_id"], x["agent_type"]) for x in links] == [("toolu_spawn", "Explore")]


def _stored_events(store: SessionStore) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """Every session's events, (event id, type, payload), by session id."""
    return {
        info.id: [(e.event_id, e.type, e.payload_dict()) for e in store.read(info.id)]
        for info in store.list_sessions(limit=100)
    }


def _projects_root(tmp_path: Path) -> tuple[Path, list[Path]]:
    """``~/.claude/projects`` as Claude Code lays it out, and its project folders: one folder per
    working directory, one with a session whose sub-agents are under ``<sessionId>/subagents/``."""
    root = tmp_path / "projects"
    root.mkdir()
    with_agents = modern_project(tmp_path).rename(root / "-home-ada-orders")
    two_sessions = root / "-home-ada-billing"
    two_sessions.mkdir()
    for name in sorted(FIRST_FILES):
        if MAIN_FILES[name] != PARENT_SESSION:
            shutil.copyfile(corpus_file(name), two_sessions / f"{MAIN_FILES[name]}.jsonl")
    return root, [with_agents, two_sessions]


class TestProjectsRoot:
    """``~/.claude/projects``: every project folder in it, each as if imported alone."""

    def test_a_root_imports_every_project_as_importing_each_folder_would(
        self, tmp_path: Path, store: SessionStore
    ) -> None:
        """The same sessions, sub-agents linked to their parents, event for event."""
        root, projects = _projects_root(tmp_path)
        report = import_claude_code(store, [root])
        each = sessionstore.open_store(":memory:")
        for project in projects:
            import_claude_code(each, [project])

        assert len(report.sessions) == 6
        assert store.get_session(f"{PARENT_SESSION}.agent-1698e3ad").parent_session_id == PARENT_SESSION
        assert _stored_events(store) == _stored_events(each)
        assert report.skipped == ()
        each.close()

    def test_the_same_session_in_two_project_folders_is_refused_naming_both(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """A transcript copied into another project folder: which copy to keep is the user's call."""
        root, (orders, billing) = _projects_root(tmp_path)
        copy = shutil.copyfile(orders / f"{PARENT_SESSION}.jsonl", billing / f"{PARENT_SESSION}.jsonl")

        with pytest.raises(ValidationError) as refused:
            import_claude_code(mem_store, [root])

        assert str(orders / f"{PARENT_SESSION}.jsonl") in str(refused.value)
        assert str(copy) in str(refused.value)
        assert f"both main transcripts of session {PARENT_SESSION}: nothing imported" in str(refused.value)
        assert mem_store.list_sessions() == []

    @pytest.mark.parametrize("layout", ["empty", "empty project folders", "the folder above the root"])
    def test_a_folder_with_no_transcript_is_refused_saying_where_it_looked(
        self, layout: str, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """Never a silent import of nothing: the error names the folder and what was looked for."""
        named = tmp_path / "named"
        named.mkdir()
        if layout == "empty project folders":
            (named / "-home-ada-orders" / PARENT_SESSION / "tool-results").mkdir(parents=True)
        elif layout == "the folder above the root":  # ~/.claude: the root is one level down
            (named / "projects").mkdir()
            modern_project(tmp_path).rename(named / "projects" / "-home-ada-orders")

        with pytest.raises(ValidationError, match="no Claude Code transcripts in this folder") as refused:
            import_claude_code(mem_store, [named])

        assert str(refused.value).startswith(f"{named}: ")
        assert "nor in any folder in it (a projects root, such as ~/.claude/projects)" in str(refused.value)
        assert mem_store.list_sessions() == []


class TestWhatLinesBecome:
    """Compaction, micro-compaction, file history, persisted outputs, streaming, unknown types."""

    def test_compact_boundary_starts_the_request_with_claude_codes_summary(
        self, mem_store: SessionStore
    ) -> None:
        """The summary line's text opens the request exactly; nothing before the boundary remains."""
        name = "entireio__cli__98-78b713483d-0-full.jsonl"
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        lines = entries(path)
        boundary = next(e for _, e in lines if e.get("subtype") == "compact_boundary")
        summary = next(e for _, e in lines if e.get("isCompactSummary"))
        compact = _payloads(mem_store, MAIN_FILES[name], "compact_boundary")[0]
        messages = Session(mem_store, MAIN_FILES[name]).request()["messages"]
        first_prompt = next(e for _, e in lines if e["type"] == "user")["message"]["content"]

        assert compact["summary"] == summary["message"]["content"]
        assert compact["last_pre_compact_uuid"] == boundary["logicalParentUuid"]
        assert compact["pre_compact_tokens"] == boundary["compactMetadata"]["preTokens"]
        assert messages[0] == {
            "role": "user",
            "content": [{"type": "text", "text": summary["message"]["content"]}],
        }
        assert first_prompt not in json.dumps(messages)

    def test_microcompact_boundary_clears_the_listed_results(self, mem_store: SessionStore) -> None:
        """The compacted tool ids' results read as the cleared placeholder."""
        name = "rcgray__claude-code-bug-phantom-reads-17407__d9add9a6-f2cd-42f6-8ae9-135bf8af37ec.jsonl"
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        meta = next(e for _, e in entries(path) if e.get("subtype") == "microcompact_boundary")
        ids = meta["microcompactMetadata"]["compactedToolIds"]
        event = _payloads(mem_store, MAIN_FILES[name], "microcompact_applied")[0]
        results = {
            b["tool_use_id"]: b["content"]
            for m in Session(mem_store, MAIN_FILES[name]).request()["messages"]
            for b in m["content"]
            if b.get("type") == "tool_result"
        }

        assert event["cleared_tool_use_ids"] == ids
        assert event["tokens_freed"] > 0
        assert all(results[i] == CLEARED_PLACEHOLDER for i in ids)

    def test_file_history_lines_become_file_history_events(self, mem_store: SessionStore) -> None:
        """One FileHistoryRecorded per file-history-snapshot, tied to its prompt."""
        name = "entireio__cli__98-78b713483d-0-full.jsonl"
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        snapshots = [e for _, e in entries(path) if e["type"] == "file-history-snapshot"]
        recorded = _payloads(mem_store, MAIN_FILES[name], "file_history_recorded")

        assert [r["message_uuid"] for r in recorded] == [s["snapshot"]["messageId"] for s in snapshots]
        assert [r["is_update"] for r in recorded] == [s["isSnapshotUpdate"] for s in snapshots]

    @pytest.mark.parametrize("with_sidecar", [True, False])
    def test_persisted_output_stub_becomes_a_persisted_result(
        self, with_sidecar: bool, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """The stub stays what the model saw; the sidecar, when present, is stored as a blob."""
        name = "entireio__entire-graph__13-a55a80ec0f-2-full.jsonl"
        path = copy_main(tmp_path, name)
        sidecar = b"diff --git a/x b/x\n" * 2000
        if with_sidecar:
            (path.parent / MAIN_FILES[name] / "tool-results").mkdir(parents=True)
            (path.parent / MAIN_FILES[name] / "tool-results" / "bxziswn6g.txt").write_bytes(sidecar)
        import_claude_code(mem_store, [path])
        persisted = _payloads(mem_store, MAIN_FILES[name], "tool_result_persisted")[0]
        result = next(
            b
            for m in Session(mem_store, MAIN_FILES[name]).request()["messages"]
            for b in m["content"]
            if b.get("tool_use_id") == persisted["tool_use_id"]
        )

        assert persisted["location"].endswith("/tool-results/bxziswn6g.txt")
        assert result["content"] == persisted["preview"]
        assert persisted["preview"].startswith("<persisted-output>")
        if with_sidecar:
            assert mem_store.get_blob(persisted["blob_sha256"]) == sidecar
            assert persisted["original_chars"] == len(sidecar)
        else:
            assert persisted["blob_sha256"] == ""

    def test_streamed_chunks_of_one_api_call_form_one_assistant_message(
        self, mem_store: SessionStore
    ) -> None:
        """Chunks interleaved with tool results still form one message per API id."""
        name = "entireio__entire-graph__13-a55a80ec0f-2-full.jsonl"
        path = corpus_file(name)
        import_claude_code(mem_store, [path])
        messages = Session(mem_store, MAIN_FILES[name]).request()["messages"]
        tool_uses: dict[str, list[str]] = {}
        for _, entry in entries(path):
            if entry["type"] == "assistant":
                for block in entry["message"]["content"]:
                    if block["type"] == "tool_use":
                        tool_uses.setdefault(entry["message"]["id"], []).append(block["id"])
        holder = {
            b["id"]: i for i, m in enumerate(messages) for b in m["content"] if b.get("type") == "tool_use"
        }

        assert any(len(ids) > 1 for ids in tool_uses.values())
        assert all(len({holder[i] for i in ids}) == 1 for ids in tool_uses.values())

    def test_unknown_entry_types_are_kept_verbatim(self, tmp_path: Path, mem_store: SessionStore) -> None:
        """A type no release had yet: an OpaqueEntry with the line as written."""
        path = copy_main(tmp_path, sorted(FIRST_FILES)[0])
        future = {"type": "hologram-snapshot", "payload": {"z": [1, 2.5, None]}, "sessionId": "x"}
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n" + json.dumps(future, separators=(",", ":")) + "\n")
        import_claude_code(mem_store, [path])
        opaque = _payloads(mem_store, MAIN_FILES[sorted(FIRST_FILES)[0]], "opaque_entry")

        assert opaque[-1]["entry"] == future
        assert opaque[-1]["entry_type"] == "hologram-snapshot"

    def test_order_follows_the_parent_chain_not_file_order(self, tmp_path: Path) -> None:
        """The file's lines reversed give the same conversation and the same request bytes."""
        name = f"rcgray__claude-code-bug-phantom-reads-17407__{PARENT_SESSION}.jsonl"
        path = copy_main(tmp_path, name)
        reversed_path = tmp_path / "reversed" / path.name
        reversed_path.parent.mkdir()
        reversed_path.write_bytes(b"\n".join(reversed(path.read_bytes().rstrip(b"\n").split(b"\n"))) + b"\n")
        stores = [sessionstore.open_store(":memory:") for _ in range(2)]
        for target, source in zip(stores, (path, reversed_path), strict=True):
            import_claude_code(target, [source])
        sessions = [Session(s, PARENT_SESSION) for s in stores]
        uuids = [
            [e.payload["message_uuid"] for e in s.transcript if e.type == "message_appended"]
            for s in sessions
        ]

        assert uuids[0] == uuids[1]
        assert sessions[0].request_bytes() == sessions[1].request_bytes()
        for s in stores:
            s.close()

    def test_dangling_parent_uuids_restart_the_chain_and_nothing_is_dropped(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """A parent outside the file (a sliced copy's first line; a lost line mid-file): a root.

        The line takes its file position, keeps the parentUuid it had, and exports as it was.
        """
        lines = _cc_conversation()
        lines[0]["parentUuid"] = "before-the-slice"
        lines[2]["parentUuid"] = "lost-line"
        path = _write_jsonl(tmp_path / f"{_SYNTH_SESSION}.jsonl", lines)
        report = import_claude_code(mem_store, [path])
        messages = _payloads(mem_store, _SYNTH_SESSION, "message_appended")
        request = Session(mem_store, _SYNTH_SESSION).request()

        assert report.skipped == ()
        assert report.sessions[0].entries == report.sessions[0].messages == 4
        assert [(m["message_uuid"], m["parent_uuid"]) for m in messages] == [
            ("u-1", "before-the-slice"),
            ("a-1", "u-1"),
            ("u-2", "lost-line"),
            ("a-2", "u-2"),
        ]
        assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user", "assistant"]
        validate_request(with_tool_definitions(request))
        assert export_claude_code(mem_store, _SYNTH_SESSION) == path.read_text(encoding="utf-8").splitlines()

    def test_grown_transcript_adds_only_its_new_lines(self, tmp_path: Path, mem_store: SessionStore) -> None:
        """Claude Code appends on resume: re-importing writes the new lines only."""
        name = f"rcgray__claude-code-bug-phantom-reads-17407__{PARENT_SESSION}.jsonl"
        path = copy_main(tmp_path, name)
        full = path.read_bytes()
        path.write_bytes(b"\n".join(full.split(b"\n")[:50]) + b"\n")
        import_claude_code(mem_store, [path])
        path.write_bytes(full)
        report = import_claude_code(mem_store, [path])
        direct = sessionstore.open_store(":memory:")
        import_claude_code(direct, [path])

        assert 0 < report.written < report.sessions[0].events
        assert (
            Session(mem_store, PARENT_SESSION).request_bytes()
            == Session(direct, PARENT_SESSION).request_bytes()
        )
        direct.close()

    def test_a_session_not_imported_from_claude_code_is_never_extended(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """Same id, but a native session: refused, nothing written."""
        name = sorted(FIRST_FILES)[0]
        Session.create(mem_store, MAIN_FILES[name]).append([MessageAppended(role="user", content="mine")])

        with pytest.raises(ValidationError, match="was not imported from Claude Code"):
            import_claude_code(mem_store, [corpus_file(name)])
        assert mem_store.last_seq(MAIN_FILES[name]) == 2

    def test_progress_reports_lines_up_to_the_total(self, tmp_path: Path, mem_store: SessionStore) -> None:
        """The callback sees non-decreasing counts ending at the total."""
        seen: list[tuple[int, int]] = []
        import_claude_code(mem_store, [flat_project(tmp_path)], progress=lambda d, t: seen.append((d, t)))

        assert seen[-1][0] == seen[-1][1] > 0
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)

    def test_each_file_read_is_reported_before_anything_is_written(
        self, tmp_path: Path, mem_store: SessionStore
    ) -> None:
        """``on_file_read``: every file of the project once, with its size and lines, then ``progress``."""
        folder = flat_project(tmp_path)
        calls: list[tuple[str, Any]] = []

        report = import_claude_code(
            mem_store,
            [folder],
            progress=lambda done, total: calls.append(("progress", (done, total))),
            on_file_read=lambda path, size, lines: calls.append(("read", (path, size, lines))),
        )

        reads = [args for kind, args in calls if kind == "read"]
        assert calls[: len(reads)] == [("read", args) for args in reads]  # all reads come first
        files = sorted(folder.glob("*.jsonl"))
        assert sorted(path for path, _, _ in reads) == [str(f) for f in files]
        for path, size, lines in reads:
            assert size == Path(path).stat().st_size
            assert lines == sum(1 for line in Path(path).read_bytes().splitlines() if line.strip())
        assert sum(lines for _, _, lines in reads) == sum(item.lines for item in report.sessions)


class TestCommandLine:
    """``sessionstore import``."""

    def _run(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(list(argv), out=out), out.getvalue()

    def test_import_then_reimport_reports_nothing_written(self, tmp_path: Path) -> None:
        """Text output names each session; the second run writes nothing."""
        db = str(tmp_path / "cli.db")
        assert self._run("db", "upgrade", "--db", db)[0] == 0
        code, out = self._run("import", "--db", db, str(flat_project(tmp_path)))
        again, report = self._run("import", "--db", db, str(tmp_path / "flat-project"), "--json")

        assert code == again == 0
        assert f"{PARENT_SESSION}: 103 lines -> 94 messages" in out
        assert json.loads(report)["written"] == 0

    def test_bad_line_fails_and_skip_reports_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Exit 1 naming file:line; with --skip-bad-lines exit 0 and the line on stderr."""
        db = str(tmp_path / "cli.db")
        self._run("db", "upgrade", "--db", db)
        path = _corrupt(tmp_path, 3)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: False)

        assert self._run("import", "--db", db, str(path))[0] == 1
        assert f"{path}:3: malformed line" in capsys.readouterr().err
        assert self._run("import", "--db", db, str(path), "--skip-bad-lines", "--progress")[0] == 0
        err = capsys.readouterr().err
        assert f"skipped {path}:3: invalid JSON" in err
        assert "importing: 100%" in err

    def test_a_root_imports_and_an_empty_folder_fails_saying_why(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``import ~/.claude/projects`` takes every project; a folder with no transcript exits 1."""
        db = str(tmp_path / "cli.db")
        self._run("db", "upgrade", "--db", db)
        root, _ = _projects_root(tmp_path)
        (tmp_path / "empty").mkdir()

        code, out = self._run("import", "--db", db, str(root), "--json")
        failed = self._run("import", "--db", db, str(tmp_path / "empty"))[0]

        assert code == 0
        assert len(json.loads(out)["sessions"]) == 6
        assert failed == 1
        assert f"sessionstore: {tmp_path / 'empty'}: no Claude Code transcripts in this folder" in (
            capsys.readouterr().err
        )

    def test_counts_by_kind(self, tmp_path: Path, mem_store: SessionStore) -> None:
        """Sanity: the event mix of the compaction transcript."""
        name = "entireio__cli__98-78b713483d-0-full.jsonl"
        import_claude_code(mem_store, [corpus_file(name)])
        kinds = Counter(e.type for e in mem_store.read(MAIN_FILES[name]))

        assert kinds["compact_boundary"] == 1
        assert kinds["imported_entry"] + kinds["opaque_entry"] == len(entries(corpus_file(name)))


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_corpus_fails_in_ci_and_skips_elsewhere(
    ci: str, outcome: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI (``CI`` set) must never pass without the corpus tests; a laptop without it skips them."""
    monkeypatch.setenv("CI", ci)

    with pytest.raises(outcome, match="corpus not found"):
        corpus_file("not-in-the-corpus.jsonl")


def test_line_records_stored_before_object_index_existed_read_as_the_lines_first_object() -> None:
    """Schema version 1 of ImportedEntry/OpaqueEntry had one object per line: index 0."""
    payload = '{"source":"claude-code","entry_type":"summary","line":4,"entry":{"type":"summary"}}'

    event = decode_event("opaque_entry", 1, payload, "00000000-0000-4000-8000-000000000001")

    assert isinstance(event, OpaqueEntry)
    assert (event.line, event.object_index, event.entry) == (4, 0, {"type": "summary"})

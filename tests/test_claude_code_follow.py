"""Following Claude Code transcripts live: each line imported once, the result a whole import's.

The unit tests replay a transcript the real CLI wrote (Claude Code 2.1.332: Read, Write, Bash, then
an async sub-agent through the Agent tool; ``fixtures/claude-code-2.1.332-agent``) into a project
folder line by line, half a line at a time, with the sub-agent's file appearing when Claude Code
started it, and poll the follower in between. The ``claude_cli`` test runs the real CLI against
the local Messages API with the follower running beside it.
"""

from __future__ import annotations

import heapq
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import Session, SessionStore, audit
from sessionstore.audit import verify_session
from sessionstore.claude_code import (
    ClaudeCodeFollower,
    ImportReport,
    export_claude_code,
    follow_claude_code,
    import_claude_code,
    sent_requests,
    write_claude_code,
)
from sessionstore.cli import main
from sessionstore.errors import SessionNotFoundError, ValidationError

from ._claude_cli import (
    TOOL_FLAGS,
    claude_binary,
    claude_env,
    message_texts,
    project_folder,
    run_claude,
    work_folder,
)
from ._claude_code_corpus import MAIN_FILES, corpus_file
from .messages_api import MessagesAPIServer, Reply, prompt_too_long, text_message, tool_use_message

FIXTURE = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-agent"
SESSION = "257a4592-7adc-457b-93a7-b8b7d3494930"
AGENT_FILE = Path(SESSION) / "subagents" / "agent-aab1c5ae568a10797.jsonl"
MANIFEST = AGENT_FILE.with_name("agent-aab1c5ae568a10797.meta.json")
AGENT_SESSION = f"{SESSION}.agent-aab1c5ae568a10797"
#: The session of fixtures/claude-code-2.1.332-two-compactions.jsonl (its answers change model).
OTHER = "a29e363b-5806-4473-a441-4a2199097200"


# --- helpers -------------------------------------------------------------------------------


def _events(store: SessionStore, session_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.event_id, e.type, e.payload_dict()) for e in store.read(session_id)]


def _assert_as_imported_whole(store: SessionStore, folder: Path) -> list[str]:
    """The store holds exactly what one import of the finished files writes; its session ids."""
    fresh = sessionstore.open_store(":memory:")
    try:
        report = import_claude_code(fresh, [folder])
        ids = [item.session_id for item in report.sessions]
        assert ids, "nothing was imported"
        for session_id in ids:
            assert _events(store, session_id) == _events(fresh, session_id), session_id
        stored = {s.id for s in store.list_sessions(limit=100)}
        assert stored == set(ids)
        return ids
    finally:
        fresh.close()


def _assert_exported_byte_for_byte(store: SessionStore, session_id: str, path: Path) -> None:
    assert (
        "".join(line + "\n" for line in export_claude_code(store, session_id)).encode() == path.read_bytes()
    )


def _stored_lines(store: SessionStore, session_id: str) -> list[tuple[int, int]]:
    """(line, object) of every transcript entry stored for the session, in log order."""
    return [
        (e.payload_dict()["line"], e.payload_dict().get("object_index", 0))
        for e in store.read(session_id)
        if e.type in ("imported_entry", "opaque_entry")
    ]


def _writes(folder: Path) -> Iterator[tuple[Path, bytes]]:
    """The fixture's lines as Claude Code wrote them: (file, line), the two files interleaved.

    Each file's lines keep their order; across files the order follows the latest timestamp
    seen in each file so far (attachment lines carry slightly earlier ones).
    """

    def keyed(path: Path) -> list[tuple[str, int, Path, bytes]]:
        latest = ""
        rows = []
        for index, line in enumerate((FIXTURE / path).read_bytes().splitlines(keepends=True)):
            stamp = json.loads(line).get("timestamp")
            latest = max(latest, stamp) if isinstance(stamp, str) else latest
            rows.append((latest, index, folder / path, line))
        return rows

    agent_lines = keyed(AGENT_FILE)
    for _, index, path, line in heapq.merge(keyed(Path(f"{SESSION}.jsonl")), agent_lines):
        yield path, line
        if path.name == AGENT_FILE.name and index == len(agent_lines) - 1:
            # Claude Code writes a sub-agent's manifest when it is done.
            yield folder / MANIFEST, (FIXTURE / MANIFEST).read_bytes()


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(data)


def _write_whole(folder: Path, path: Path) -> None:
    """One fixture file at once, with the sub-agent's manifest."""
    _append(folder / path, (FIXTURE / path).read_bytes())
    if path == AGENT_FILE:
        _append(folder / MANIFEST, (FIXTURE / MANIFEST).read_bytes())


def _exists(store: SessionStore, session_id: str) -> bool:
    try:
        store.get_session(session_id)
    except SessionNotFoundError:
        return False
    return True


def _tool_use_stored(store: SessionStore, session_id: str, tool_use_id: str) -> bool:
    try:
        events = store.read(session_id)
    except SessionNotFoundError:
        return False
    return any(
        e.type == "message_appended"
        and isinstance(e.payload_dict()["content"], list)
        and any(b.get("id") == tool_use_id for b in e.payload_dict()["content"])
        for e in events
    )


# --- the follower on files written line by line -----------------------------------------------


def test_a_transcript_followed_half_a_line_at_a_time_ends_as_one_whole_import(
    store: SessionStore, tmp_path: Path
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    follower = ClaudeCodeFollower(store, [folder])
    complete: dict[Path, int] = {}
    live_before_the_end = False
    agent_call_held = False
    for path, line in _writes(folder):
        half = len(line) // 2
        _append(path, line[:half])
        follower.poll()
        _append(path, line[half:])
        follower.poll()
        complete[path] = complete.get(path, 0) + 1
        session = AGENT_SESSION if path.name.startswith("agent-") else SESSION
        if path.suffix == ".jsonl" and _exists(store, session):
            stored = _stored_lines(store, session)
            # Never half a line, never a line twice.
            assert len(stored) == len(set(stored))
            assert all(number <= complete[path] for number, _ in stored)
        live_before_the_end |= _tool_use_stored(store, SESSION, "toolu_3")
        # The async Agent call is answered at once; it waits for the sub-agent's first lines.
        launched = b'"status":"async_launched"' in line
        if launched:
            agent_call_held = not _tool_use_stored(store, SESSION, "toolu_4") and follower.held > 0
    follower.poll()

    assert live_before_the_end and agent_call_held
    assert follower.held == 0
    assert _assert_as_imported_whole(store, folder) == [SESSION, AGENT_SESSION]
    _assert_exported_byte_for_byte(store, SESSION, folder / f"{SESSION}.jsonl")
    _assert_exported_byte_for_byte(store, AGENT_SESSION, folder / AGENT_FILE)
    for session_id in (SESSION, AGENT_SESSION):
        assert verify_session(store, session_id).ok
    # The sub-agent's link sits right after the call that spawned it, as a whole import puts it.
    events = store.read(SESSION)
    link = next(i for i, e in enumerate(events) if e.type == "subagent_started")
    call = events[link - 1]
    assert call.type == "message_appended" and call.payload_dict()["content"][0]["id"] == "toolu_4"


def test_a_restarted_follower_resumes_from_the_store(store: SessionStore, tmp_path: Path) -> None:
    folder = tmp_path / "project"
    writes = list(_writes(folder))
    for path, line in writes[: len(writes) // 2]:
        _append(path, line)
    first = ClaudeCodeFollower(store, [folder])
    first.poll()
    written_first = first.written
    assert written_first > 0
    for path, line in writes[len(writes) // 2 :]:
        _append(path, line)

    second = ClaudeCodeFollower(store, [folder])  # a new process: no memory of the first
    second.poll()
    again = ClaudeCodeFollower(store, [folder])
    again.poll()

    fresh = sessionstore.open_store(":memory:")
    total = import_claude_code(fresh, [folder]).written
    fresh.close()
    assert written_first + second.written == total
    assert again.written == 0
    _assert_as_imported_whole(store, folder)


def test_a_sub_agent_file_appearing_after_its_parent_was_imported(
    store: SessionStore, tmp_path: Path
) -> None:
    """The parent finished (its Agent call resolved) before the sub-agent's file is seen at all."""
    folder = tmp_path / "project"
    _write_whole(folder, Path(f"{SESSION}.jsonl"))
    follower = ClaudeCodeFollower(store, [folder])
    follower.poll()
    assert _tool_use_stored(store, SESSION, "toolu_3")
    # The launch result names the sub-agent, which has not written anything: the call waits.
    assert not _tool_use_stored(store, SESSION, "toolu_4") and follower.held > 0

    _append(folder / AGENT_FILE, (FIXTURE / AGENT_FILE).read_bytes())
    follower.poll()
    # Its lines are all there, but the manifest, written when it is done, is not yet.
    assert not _tool_use_stored(store, SESSION, "toolu_4") and not _exists(store, AGENT_SESSION)
    _append(folder / MANIFEST, (FIXTURE / MANIFEST).read_bytes())
    follower.poll()

    assert follower.held == 0
    _assert_as_imported_whole(store, folder)


def test_a_malformed_complete_line_fails_the_poll_naming_it(store: SessionStore, tmp_path: Path) -> None:
    transcript = tmp_path / f"{SESSION}.jsonl"
    lines = (FIXTURE / f"{SESSION}.jsonl").read_bytes().splitlines(keepends=True)
    _append(transcript, b"".join(lines[:30]) + b"{not json\n")
    follower = ClaudeCodeFollower(store, [transcript])
    with pytest.raises(ValidationError, match=rf"{transcript.name}:31: malformed line"):
        follower.poll()
    with pytest.raises(ValidationError, match=rf"{transcript.name}:31: malformed line"):
        follower.poll()  # tried again, not taken as seen
    assert not _exists(store, SESSION)

    skipping = ClaudeCodeFollower(store, [transcript], skip_bad_lines=True)
    report = skipping.poll()
    assert report is not None and [bad.line for bad in report.skipped] == [31]
    assert _exists(store, SESSION)


def test_a_path_whose_folder_does_not_exist_is_refused(store: SessionStore, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="nothing to follow"):
        ClaudeCodeFollower(store, [tmp_path / "no" / "such" / "project"])


def test_follow_stops_when_idle_or_told(store: SessionStore, tmp_path: Path) -> None:
    folder = tmp_path / "project"
    for path, line in _writes(folder):
        _append(path, line)
    seen: list[ImportReport] = []
    report = follow_claude_code(
        store, [folder], until_idle=0.05, poll_interval=0.01, on_import=seen.append, tenant="acme", user="ada"
    )
    assert report.sessions == (SESSION, AGENT_SESSION) and report.held == 0
    assert report.written == sum(r.written for r in seen) > 0
    for session_id in report.sessions:  # the sub-agent inherits its parent's owner
        info = store.get_session(session_id)
        assert (info.tenant, info.user) == ("acme", "ada")

    stop = threading.Event()
    stop.set()  # a set event still polls once, then stops
    assert follow_claude_code(store, [folder], stop=stop).written == 0


def test_the_cli_follows_until_idle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "project"
    for path, line in _writes(folder):
        _append(path, line)
    db = tmp_path / "store.db"
    assert main(["db", "upgrade", "--db", str(db)]) == 0
    capsys.readouterr()

    status = main(["import", "--db", str(db), "--follow", str(folder), "--until-idle", "0.1", "--json"])

    assert status == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["follow"]["sessions"] == [SESSION, AGENT_SESSION]
    assert sum(line["written"] for line in lines[:-1]) == lines[-1]["follow"]["written"] > 0
    with sessionstore.open_store(f"sqlite:///{db}") as store:
        _assert_as_imported_whole(store, folder)


def _copy_corpus_main(name: str, folder: Path) -> str:
    """A finished corpus session written into ``folder`` at once (as Claude Code names it); its id."""
    _append(folder / f"{MAIN_FILES[name]}.jsonl", corpus_file(name).read_bytes())
    return MAIN_FILES[name]


def test_a_projects_root_followed_picks_up_project_folders_and_sessions_created_later(
    store: SessionStore, tmp_path: Path
) -> None:
    """A daemon started before the first session: it waits, then follows each new project folder."""
    root = tmp_path / "projects"
    root.mkdir()
    follower = ClaudeCodeFollower(store, [root])

    assert follower.poll() is None
    assert follower.waiting == (root,)

    orders = root / "-home-ada-orders"  # Claude Code's first session in a new working directory
    for path, line in _writes(orders):
        _append(path, line)
        follower.poll()

    assert not follower.waiting
    assert _exists(store, SESSION) and _exists(store, AGENT_SESSION)

    billing = root / "-home-ada-billing"
    first_there = _copy_corpus_main("entireio__entire-graph__13-a55a80ec0f-2-full.jsonl", billing)
    second_here = _copy_corpus_main("entireio__cli__9b-04c3d92e38-1-full.jsonl", orders)
    follower.poll()

    assert follower.held == 0
    imported = _assert_as_imported_whole(store, root)
    assert sorted(imported) == sorted([SESSION, AGENT_SESSION, first_there, second_here])


def test_the_cli_says_what_it_waits_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder with no transcript yet, or a file not written yet, is followed, and said so on
    stderr; a folder with transcripts is not."""
    empty, later, project = tmp_path / "projects", tmp_path / f"{SESSION}.jsonl", tmp_path / "project"
    empty.mkdir()
    _write_whole(project, Path(f"{SESSION}.jsonl"))
    db = tmp_path / "store.db"
    assert main(["db", "upgrade", "--db", str(db)]) == 0
    capsys.readouterr()

    argv = [str(empty), str(later), str(project), "--until-idle", "0.05", "--poll-interval", "0.01"]
    status = main(["import", "--db", str(db), "--follow", *argv])

    assert status == 0
    assert capsys.readouterr().err.splitlines() == [
        f"sessionstore: no Claude Code transcript in {empty} yet (nor in a project folder in it): "
        "waiting for it",
        f"sessionstore: {later} does not exist yet: waiting for it",
    ]


# --- the real CLI, followed while it works ---------------------------------------------------


def _scripted(work: Path) -> Any:
    """Answers by what the request holds, so the sub-agent's call may come in any order."""
    ids = iter(range(1, 100))

    def reply(body: dict[str, Any]) -> Reply:
        msg = f"msg_{next(ids):02d}"
        conversation = json.dumps(body["messages"])
        if "do the work" not in conversation:
            return text_message("out.txt says beta", msg)  # the sub-agent, started with its own prompt
        last = body["messages"][-1]["content"]
        answered = (
            [b["tool_use_id"] for b in last if b.get("type") == "tool_result"]
            if isinstance(last, list)
            else []
        )
        steps = {
            "toolu_1": tool_use_message(
                "toolu_2", "Write", {"file_path": str(work / "out.txt"), "content": "beta\n"}, msg
            ),
            "toolu_2": tool_use_message(
                "toolu_3", "Bash", {"command": "cat out.txt", "description": "show it"}, msg
            ),
            "toolu_3": tool_use_message(
                "toolu_4",
                "Agent",
                {"description": "check", "prompt": "check out.txt", "subagent_type": "general-purpose"},
                msg,
            ),
            "toolu_4": text_message("the check is running", msg),
        }
        if answered and answered[-1] in steps:
            return steps[answered[-1]]
        if "toolu_1" not in conversation:
            return tool_use_message("toolu_1", "Read", {"file_path": str(work / "notes.txt")}, msg)
        return text_message("all done", msg)

    return reply


def _without_wire_only(body: dict[str, Any]) -> dict[str, Any]:
    """A request body without what Claude Code does not record: streaming, request metadata and
    the billing header it puts first in the system prompt."""
    kept = {k: v for k, v in body.items() if k not in ("stream", "metadata")}
    kept["system"] = [b for b in kept["system"] if not b["text"].startswith("x-anthropic-billing-header:")]
    return kept


@pytest.mark.claude_cli
def test_the_real_cli_followed_live_ends_as_one_whole_import(tmp_path: Path) -> None:
    claude = claude_binary()
    home = tmp_path / "home"
    work = work_folder(home)
    (work / "notes.txt").write_text("alpha\n")
    (home / ".claude" / "projects").mkdir(parents=True)
    folder = project_folder(home)
    store = sessionstore.open_store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    stop = threading.Event()
    reports: list[Any] = []
    follower = threading.Thread(
        target=lambda: reports.append(follow_claude_code(store, [folder], stop=stop, poll_interval=0.02))
    )
    follower.start()
    try:
        with MessagesAPIServer() as server:
            server.responder = _scripted(work)
            done = subprocess.run(
                [str(claude), "-p", *TOOL_FLAGS, "--", "do the work"],
                env=claude_env(home, server),
                cwd=work,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
    finally:
        stop.set()
        follower.join(timeout=60)
    assert (work / "out.txt").read_text() == "beta\n"  # the Write call ran
    (report,) = reports

    ids = _assert_as_imported_whole(store, folder)
    main_file = next(folder.glob("*.jsonl"))
    agent_file = next(folder.glob("*/subagents/agent-*.jsonl"))
    assert len(ids) == 2 and report.held == 0
    assert report.imports > 1  # it imported while Claude Code was still working
    _assert_exported_byte_for_byte(store, ids[0], main_file)
    _assert_exported_byte_for_byte(store, ids[1], agent_file)
    assert all(verify_session(store, session_id).ok for session_id in ids)
    # What Claude Code recorded sending is what the server received, body for body.
    recorded = [r.request for session_id in ids for r in sent_requests(Session(store, session_id))]
    received = [r["body"] for r in server.requests if r["path"] == "/v1/messages"]
    assert len(recorded) == len(received)
    for body in received:
        assert _without_wire_only(body) in [_without_wire_only(r) for r in recorded]
    texts = json.dumps([e.payload_dict() for e in store.read(ids[0]) if e.type == "message_appended"])
    assert all(tool in texts for tool in ('"Read"', '"Write"', '"Bash"', '"Agent"', "1\\talpha"))
    store.close()


@pytest.mark.claude_cli
def test_claude_codes_own_compaction_followed_live_is_listed_by_audit(tmp_path: Path) -> None:
    """The server refuses the resumed prompt as too long: Claude Code compacts, then retries."""
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    folder = project_folder(home)
    store = sessionstore.open_store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    stop = threading.Event()
    reports: list[Any] = []
    follower = threading.Thread(
        target=lambda: reports.append(follow_claude_code(store, [folder], stop=stop, poll_interval=0.02))
    )
    follower.start()
    try:
        run_claude(home, [text_message("apples are red", "msg_1")], "first question about apples")
        (transcript,) = folder.glob("*.jsonl")
        compacted_then_answered = [
            prompt_too_long(250_000),
            text_message("<summary>We talked about fruit.</summary>", "msg_2"),
            text_message("pears are green", "msg_3"),
        ]
        run_claude(home, compacted_then_answered, "--resume", transcript.stem, "second question about pears")
    finally:
        stop.set()
        follower.join(timeout=60)

    (report,) = reports
    assert report.held == 0
    (session_id,) = _assert_as_imported_whole(store, folder)
    _assert_exported_byte_for_byte(store, session_id, transcript)
    assert verify_session(store, session_id).ok
    (compaction,) = [e.payload_dict() for e in store.read(session_id) if e.type == "compact_boundary"]
    assert compaction["summarizer"] == "claude-code" and "We talked about fruit." in compaction["summary"]
    listed = [e for e in audit(Session(store, session_id)).entries if e.kind == "compact_boundary"]
    assert len(listed) == 1 and "We talked about fruit." in json.dumps(listed[0].details)
    store.close()


@pytest.mark.claude_cli
def test_a_session_restored_from_the_store_resumes_in_claude_code(tmp_path: Path) -> None:
    """A tool-using session with a sub-agent, written from the store into a fresh HOME."""
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [FIXTURE])
    home = tmp_path / "fresh-home"
    write_claude_code(store, SESSION, project_folder(home))

    (sent,) = run_claude(home, [text_message("continuing", "msg_resumed")], "--resume", SESSION, "continue")

    restored = Session(store, SESSION).request()["messages"]
    ids = [
        block.get("id") or block.get("tool_use_id")
        for message in sent["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") in ("tool_use", "tool_result")
    ]
    assert ids == ["toolu_1", "toolu_1", "toolu_2", "toolu_2", "toolu_3", "toolu_3", "toolu_4", "toolu_4"]
    texts = message_texts(sent["messages"])
    assert all(
        text in texts for text in message_texts(restored) if not text.startswith("<task-notification>")
    )
    assert texts[-1] == "continue"
    store.close()


def test_two_sessions_of_a_folder_written_in_turn(store: SessionStore, tmp_path: Path) -> None:
    """Each poll reads only the files that changed; both sessions end as one whole import."""
    folder = tmp_path / "project"
    other = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-two-compactions.jsonl"
    other_lines = other.read_bytes().splitlines(keepends=True)
    ours = list(_writes(folder))
    follower = ClaudeCodeFollower(store, [folder])
    for index in range(max(len(ours), len(other_lines))):
        if index < len(ours):
            _append(*ours[index])
        if index < len(other_lines):
            _append(folder / other.name, other_lines[index])
        follower.poll()

    assert follower.held == 0
    fresh = sessionstore.open_store(":memory:")
    ids = [item.session_id for item in import_claude_code(fresh, [folder]).sessions]
    assert len(ids) == 3
    for session_id in ids:
        followed, whole = _events(store, session_id), _events(fresh, session_id)
        if session_id != OTHER:
            assert followed == whole
            continue
        # The one documented difference: this session switched models; followed, it starts with
        # the model of its first answer, imported whole with that of its last.
        models = [
            json.loads(line)["message"]["model"] for line in other_lines if b'"type":"assistant"' in line
        ]
        assert (followed[0][2]["model"], whole[0][2]["model"]) == (models[0], models[-1]) != (models[0],) * 2
        assert followed[1:] == whole[1:]
        assert {**followed[0][2], "model": None} == {**whole[0][2], "model": None}
    fresh.close()

"""Claude Code 2.1.332's recorded system prompt and forks of a compacted session.

With ``--system-prompt-snapshot on`` (the default outside ``--bare``) Claude Code records the
system prompt of a conversation's first request as ``prompt_snapshot`` attachment lines
(``systemPrompt`` parts, then ``cliPrefix``) and sends that record on every later request, even
when a later launch passes another ``--system-prompt``, until it compacts. ``--fork-session``
writes a new file that starts with copies of the parent's lines since its last compaction: the
boundary, then the summary, then the kept messages again (under the summary), and a
``SessionStart`` hook named ``SessionStart:fork`` (its input's ``source`` is ``"fork"``).

The fixture was written by the real CLI (not ``--bare``, a ``SessionStart`` hook that echoes its
input): a prompt with "Be terse.", a resumed prompt with "Be verbose." answered first with
prompt-too-long (so it compacted), then a fork with "Be loud.". The ``claude_cli`` tests write
such sessions afresh and compare with what the local Messages API received.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import Session, SessionStore, audit, validate_request
from sessionstore.claude_code import compare_all_sent, export_claude_code, import_claude_code, sent_requests

from ._claude_cli import project_folder, run_claude
from .messages_api import prompt_too_long, text_message

FIXTURE = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-fork"
MAIN = "de85129f-1467-4ca5-a63d-54c1875f6843"
FORK = "fe3ee085-dc84-4810-9693-95a2d49f5667"
PREFIX = "You are a Claude agent, built on Anthropic's Claude Agent SDK."


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _texts(blocks: object) -> list[str]:
    if isinstance(blocks, str):
        return [blocks]
    assert isinstance(blocks, list)
    return [b["text"] for b in blocks if b.get("type") == "text"]


def _check_session(store: SessionStore, path: Path) -> Session:
    """Exported byte for byte; each compaction keeps from the seq of its first kept message."""
    session_id = path.stem
    events = store.read(session_id)
    seq_of = {e.payload_dict()["message_uuid"]: e.seq for e in events if e.type == "message_appended"}
    boundaries = [line for line in _lines(path) if line.get("subtype") == "compact_boundary"]
    compactions = [e.payload_dict() for e in events if e.type == "compact_boundary"]
    session = Session(store, session_id)

    assert "\n".join(export_claude_code(store, session_id)) == path.read_text(encoding="utf-8").rstrip("\n")
    assert len(boundaries) == len(compactions) >= 1
    for line, compaction in zip(boundaries, compactions, strict=True):
        kept = line["compactMetadata"]["preservedMessages"]["uuids"]
        assert kept and all(u in seq_of for u in kept)
        assert compaction["keep_from_seq"] == seq_of[kept[0]]
    validate_request(session.request())
    return session


def _recorded_systems(session: Session) -> list[list[str] | None]:
    return [None if r.recorded_system is None else _texts(r.recorded_system) for r in sent_requests(session)]


def test_the_fork_imports_with_its_kept_messages_after_its_boundary_and_exports_byte_for_byte() -> None:
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [FIXTURE])
    _check_session(store, FIXTURE / f"{MAIN}.jsonl")
    fork = _check_session(store, FIXTURE / f"{FORK}.jsonl")
    hooks = [line["attachment"] for line in _lines(FIXTURE / f"{FORK}.jsonl") if line["type"] == "attachment"]
    started = [
        h for h in hooks if h.get("hookEvent") == "SessionStart" and h["hookName"] == "SessionStart:fork"
    ]
    request = fork.request()

    assert len(started) == 1 and json.loads(started[0]["stdout"])["source"] == "fork"
    # The copied boundary is a root: its kept message comes after it, under the summary.
    assert _texts(request["messages"][0]["content"])[1:] == ["second question about pears"]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user", "assistant"]
    (sent,) = sent_requests(fork)
    assert sent.request["messages"][-1]["content"][0]["text"] == "third question about plums"
    store.close()


def test_requests_use_the_recorded_system_prompt_until_the_next_compaction() -> None:
    """Recorded with "Be terse.", kept when resumed with "Be verbose.", replaced by it after the
    compaction; the fork, launched with "Be loud.", sends the record it copied."""
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [FIXTURE])
    main, fork = Session(store, MAIN), Session(store, FORK)

    assert _recorded_systems(main) == [[PREFIX, "Be terse."], [PREFIX, "Be terse."], [PREFIX, "Be verbose."]]
    assert _recorded_systems(fork) == [[PREFIX, "Be verbose."]]
    for comparison in [*compare_all_sent(main), *compare_all_sent(fork)]:
        assert _texts(comparison.sent.request["system"]) == _texts(comparison.rebuilt["system"])
        assert not [d for d in comparison.differences if "system prompt" in d]
    store.close()


def test_a_recorded_system_prompt_other_than_the_one_sent_is_a_difference(tmp_path: Path) -> None:
    text = (FIXTURE / f"{MAIN}.jsonl").read_text(encoding="utf-8")
    copy = tmp_path / f"{MAIN}.jsonl"
    copy.write_text(
        text.replace('"systemPrompt":["Be terse."]', '"systemPrompt":["Be kind."]'), encoding="utf-8"
    )
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [copy])
    first = next(compare_all_sent(Session(store, MAIN)))

    assert first.differences[:2] == (
        "sent only: system prompt block 2: Be terse.",
        "rebuilt only: system prompt block 2: Be kind.",
    )
    assert not first.same_messages
    store.close()


@pytest.mark.parametrize("recorded", ['"systemPrompt":7', '"systemPrompt":[{"text":"Be terse."}]'])
def test_a_malformed_prompt_snapshot_records_nothing(tmp_path: Path, recorded: str) -> None:
    text = (FIXTURE / f"{MAIN}.jsonl").read_text(encoding="utf-8")
    copy = tmp_path / f"{MAIN}.jsonl"
    copy.write_text(text.replace('"systemPrompt":["Be terse."]', recorded), encoding="utf-8")
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [copy])
    session = Session(store, MAIN)

    assert _recorded_systems(session)[:2] == [None, None]
    assert "system" not in next(compare_all_sent(session)).rebuilt
    assert "\n".join(export_claude_code(store, MAIN)) == copy.read_text(encoding="utf-8").rstrip("\n")
    store.close()


# --- the real CLI ----------------------------------------------------------------------------


#: Not --bare (it skips hooks and records no system prompt), but no tools and a one-line prompt.
def _flags(prompt: str) -> tuple[str, ...]:
    return ("--tools=", "--system-prompt-snapshot", "on", "--system-prompt", prompt)


def _wire_only_removed(body: dict[str, Any]) -> dict[str, Any]:
    """A body without what Claude Code does not record: streaming, metadata, the billing header."""
    kept = {k: v for k, v in body.items() if k not in ("stream", "metadata")}
    kept["system"] = [b for b in body["system"] if not b["text"].startswith("x-anthropic-billing-header:")]
    return kept


@pytest.fixture(scope="module")
def forked_after_compaction(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A session compacted once, then forked, by the real CLI; its folder and the bodies received."""
    home = tmp_path_factory.mktemp("fork") / "home"
    (home / ".claude").mkdir(parents=True)
    hook = {"hooks": [{"type": "command", "command": "cat"}]}  # echoes its input, source included
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"SessionStart": [hook]}}))
    received = run_claude(
        home, [text_message("apples are red", "msg_1")], "first question", flags=_flags("Be terse.")
    )
    (transcript,) = project_folder(home).glob("*.jsonl")
    compacted = [
        prompt_too_long(250_000),
        text_message("<summary>Fruit.</summary>", "msg_2"),
        text_message("pears", "msg_3"),
    ]
    received += run_claude(
        home, compacted, "--resume", transcript.stem, "second question", flags=_flags("Be verbose.")
    )
    forked = [text_message("plums", "msg_4")]
    received += run_claude(
        home, forked, "--resume", transcript.stem, "--fork-session", "third", flags=_flags("Be loud.")
    )
    folder = tmp_path_factory.mktemp("copy")
    for path in project_folder(home).glob("*.jsonl"):
        shutil.copyfile(path, folder / path.name)
    return folder, received


@pytest.mark.claude_cli
def test_the_real_cli_fork_after_a_compaction_imports_and_exports_byte_for_byte(
    forked_after_compaction: tuple[Path, list[dict[str, Any]]],
) -> None:
    folder, _ = forked_after_compaction
    store = sessionstore.open_store(":memory:")
    sessions = import_claude_code(store, [folder]).sessions
    for path in folder.glob("*.jsonl"):
        _check_session(store, path)
    (fork,) = [p for p in folder.glob("*.jsonl") if '"hookName":"SessionStart:fork"' in p.read_text()]
    started = [
        json.loads(line["attachment"]["stdout"])
        for line in _lines(fork)
        if line["type"] == "attachment" and line["attachment"].get("hookName") == "SessionStart:fork"
    ]

    assert len(sessions) == 2
    assert [s["source"] for s in started] == ["fork"]
    store.close()


@pytest.mark.claude_cli
def test_the_real_cli_requests_rebuilt_are_the_ones_received_system_prompt_included(
    forked_after_compaction: tuple[Path, list[dict[str, Any]]],
) -> None:
    """Every request recorded is one the server received (the compaction's own summarizing call
    is not recorded); the log's rebuild carries the system prompt each of them sent."""
    folder, received = forked_after_compaction
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [folder])
    sessions = [Session(store, path.stem) for path in folder.glob("*.jsonl")]
    recorded = [r for session in sessions for r in sent_requests(session)]
    bodies = [_wire_only_removed(body) for body in received]
    systems = [_texts(body["system"]) for body in bodies]

    assert len(recorded) == len(received) - 1
    for request in recorded:
        assert request.request in bodies
        assert request.recorded_system is not None
        assert _texts(request.recorded_system) == _texts(request.request["system"])
    assert [PREFIX, "Be terse."] in systems and [PREFIX, "Be verbose."] in systems
    assert [PREFIX, "Be loud."] not in systems  # the fork sends the record it copied
    for session in sessions:
        for comparison in compare_all_sent(session):
            assert _texts(comparison.rebuilt["system"]) == _texts(comparison.sent.request["system"])
    store.close()


@pytest.mark.claude_cli
def test_the_real_cli_compaction_audit_shows_tokens_after_and_duration(
    forked_after_compaction: tuple[Path, list[dict[str, Any]]],
) -> None:
    folder, _ = forked_after_compaction
    store = sessionstore.open_store(":memory:")
    import_claude_code(store, [folder])
    for path in folder.glob("*.jsonl"):
        (boundary,) = [
            line["compactMetadata"] for line in _lines(path) if line.get("subtype") == "compact_boundary"
        ]
        (entry,) = [e for e in audit(Session(store, path.stem)).entries if e.kind == "compact_boundary"]

        assert f"{boundary['postTokens']} tokens after; took {boundary['durationMs']} ms" in entry.what
        assert entry.details["source_metadata"] == boundary
    store.close()

"""The real Claude Code CLI through the Claude Agent SDK's ``query()``, with sessionstore as its
``session_store``: the session is mirrored as it runs, resumes from the store alone (no local
transcript, a fresh config folder), compacts, and forks through the store.

The CLI is the one the ``claude-agent-sdk`` wheel bundles, run offline against the local Messages
API (tests/messages_api.py); these tests carry the ``claude_cli`` marker (CI runs them).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, fork_session_via_store, query
from claude_agent_sdk.types import SessionKey

import sessionstore
from sessionstore.audit import audit
from sessionstore.bridges.claude_agent_sdk import SessionStoreClaudeStore
from sessionstore.claude_code import export_claude_code
from sessionstore.projections import Session

from ._claude_cli import claude_binary, claude_env, project_folder, work_folder
from .messages_api import MessagesAPIServer, prompt_too_long, text_message
from .test_claude_code_follow import _scripted

TOOLS = ["Read", "Write", "Bash", "Agent"]


def _options(adapter: SessionStoreClaudeStore, home: Path, server: MessagesAPIServer, **more: Any) -> Any:
    return ClaudeAgentOptions(
        session_store=adapter,
        cwd=str(work_folder(home)),
        # The SDK finds the CLI's transcripts (to mirror them) under the config folder it is given.
        env={**claude_env(home, server), "CLAUDE_CONFIG_DIR": str(home / ".claude")},
        tools=TOOLS,
        allowed_tools=TOOLS,
        system_prompt="Be terse.",
        extra_args={"system-prompt-snapshot": "off"},
        cli_path=str(claude_binary()),
        **more,
    )


def _ask(prompt: str, options: Any) -> ResultMessage:
    async def run() -> ResultMessage:
        results = [m async for m in query(prompt=prompt, options=options) if isinstance(m, ResultMessage)]
        assert results and not any(r.is_error for r in results), results
        # A sub-agent's notice may start a turn of its own after the first: the last is the session's.
        assert {r.session_id for r in results} == {results[-1].session_id}
        return results[-1]

    return asyncio.run(run())


def _mirrored_lines(path: Path) -> list[str]:
    """The lines of a transcript the CLI mirrors: all but its records of the requests it sent
    (``api-request``, ``api-request-shape``, ``api-request-blob``), which stay local."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [line for line in lines if not json.loads(line)["type"].startswith("api-request")]


def _tool_ids(request: dict[str, Any]) -> list[str]:
    return [
        block.get("id") or block.get("tool_use_id")
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") in ("tool_use", "tool_result")
    ]


@pytest.mark.claude_cli
@pytest.mark.parametrize("flush", ["batched", "eager"])
def test_a_session_mirrored_through_query_resumes_from_the_store_alone(flush: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = work_folder(home)
    (work / "notes.txt").write_text("alpha\n")
    store = sessionstore.open_store(tmp_path / "store.db", migrate=True)
    adapter = SessionStoreClaudeStore(store)
    with MessagesAPIServer() as server:
        server.responder = _scripted(work)
        result = _ask("do the work", _options(adapter, home, server, session_store_flush=flush))
    assert (work / "out.txt").read_text() == "beta\n"  # the Write call ran
    folder = project_folder(home)
    key: SessionKey = {"project_key": folder.name, "session_id": result.session_id}

    # The store holds what the CLI wrote, entry for entry, main transcript and sub-agent.
    main_file = folder / f"{result.session_id}.jsonl"
    assert asyncio.run(adapter.load(key)) == [json.loads(line) for line in _mirrored_lines(main_file)]
    (subpath,) = asyncio.run(adapter.list_subkeys(key))
    (agent_file,) = folder.glob(f"{result.session_id}/subagents/agent-*.jsonl")
    sub: SessionKey = {**key, "subpath": subpath}
    mirrored = asyncio.run(adapter.load(sub))
    assert mirrored is not None
    assert [e for e in mirrored if e["type"] != "agent_metadata"] == [
        json.loads(line) for line in _mirrored_lines(agent_file)
    ]
    # ... as an imported session: its lines settled, exported byte for byte.
    main_id = adapter.session_id(key)
    assert export_claude_code(store, main_id) == _mirrored_lines(main_file)
    child = adapter.session_id(sub)
    assert store.get_session(child).parent_session_id == main_id
    assert [s["session_id"] for s in asyncio.run(adapter.list_sessions(folder.name))] == [result.session_id]

    # No local transcript, a fresh config folder: the resume reads the store alone. The server
    # refuses the resumed prompt as too long: Claude Code compacts, then answers.
    shutil.rmtree(home / ".claude")
    fresh = tmp_path / "fresh-home"
    with MessagesAPIServer() as server:
        server.queue = [
            prompt_too_long(250_000),
            text_message("<summary>We did the work.</summary>", "msg_summary"),
            text_message("continuing", "msg_resumed"),
        ]
        options = _options(adapter, fresh, server, session_store_flush=flush, resume=result.session_id)
        options.cwd = str(work)  # the same project
        resumed = _ask("continue", options)
        sent = [r["body"] for r in server.requests if r["path"] == "/v1/messages"]
    assert resumed.session_id == result.session_id
    assert _tool_ids(sent[0]) == [
        "toolu_1",
        "toolu_1",
        "toolu_2",
        "toolu_2",
        "toolu_3",
        "toolu_3",
        "toolu_4",
        "toolu_4",
    ]
    # The compaction is an audited compaction of the store's session.
    compactions = [e for e in audit(Session(store, main_id)).entries if e.kind == "compact_boundary"]
    assert len(compactions) == 1 and "We did the work." in json.dumps(compactions[0].details)

    # A fork made through the store is a session of its own there.
    fork = asyncio.run(fork_session_via_store(adapter, result.session_id, directory=str(work)))
    fork_key: SessionKey = {"project_key": folder.name, "session_id": fork.session_id}
    forked: Any = asyncio.run(adapter.load(fork_key))
    assert forked is not None
    assert {e.get("sessionId") for e in forked if "sessionId" in e} == {fork.session_id}
    # Its messages are the source's, under fresh uuids.
    said = [e["message"]["content"] for e in forked if e["type"] in ("user", "assistant")]
    assert "do the work" in json.dumps(said) and "continuing" in json.dumps(said)
    assert any(e.type == "message_appended" for e in store.read(adapter.session_id(fork_key)))
    store.close()

"""The real Claude Code CLI, run offline against the local Messages API (tests/messages_api.py).

``claude-agent-sdk`` ships the CLI (``claude_agent_sdk/_bundled/claude``); it is in the ``test``
extra, and tests that need it skip when it is not installed (and fail in CI, which must run
them; they carry the ``claude_cli`` marker: ``pytest -m claude_cli`` runs them alone). Each run
gets a private ``HOME``, so the transcript lands in
``$HOME/.claude/projects/<cwd slug>/<sessionId>.jsonl``; ``--bare`` with no tools and a one-line
system prompt keeps transcripts small.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ._claude_code_corpus import in_ci
from .messages_api import MessagesAPIServer

FLAGS = ("--bare", "--tools=", "--system-prompt-snapshot", "off", "--system-prompt", "Be terse.")
#: The tools a tool-using run may call (not ``--bare``: it leaves Write out). Permission is
#: granted up front, since print mode cannot ask.
TOOL_FLAGS = (
    "--tools=Read,Write,Bash,Agent",
    "--allowedTools",
    "Read,Write,Bash,Agent",
    "--system-prompt-snapshot",
    "off",
    "--system-prompt",
    "Be terse.",
)


def claude_binary() -> Path:
    """The bundled CLI, or skip the test (fail it in CI)."""
    try:
        import claude_agent_sdk
    except ImportError:
        _missing("claude-agent-sdk (ships the Claude Code CLI) is not installed")
    binary = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    if not binary.is_file():
        _missing(f"claude-agent-sdk has no bundled CLI at {binary}")
    return binary


def _missing(reason: str) -> None:
    if in_ci():
        pytest.fail(reason + "; CI must run the Claude Code CLI tests")
    pytest.skip(reason)


def claude_env(home: Path, server: MessagesAPIServer) -> dict[str, str]:
    """The CLI's environment: a private HOME, the local server, no other traffic."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def work_folder(home: Path) -> Path:
    """The folder the CLI runs in (its cwd) under ``home``."""
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return work


def project_folder(home: Path) -> Path:
    """Where Claude Code keeps the transcripts of ``work_folder(home)``."""
    return home / ".claude" / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(work_folder(home)))


def run_claude(
    home: Path, replies: list[tuple[int, dict[str, Any]]], *args: str, flags: tuple[str, ...] = FLAGS
) -> list[dict[str, Any]]:
    """``claude -p`` offline with scripted replies (all must be used); the requests it sent."""
    claude = claude_binary()
    with MessagesAPIServer() as server:
        server.queue = list(replies)
        done = subprocess.run(
            [str(claude), "-p", *flags, *args],
            env=claude_env(home, server),
            cwd=work_folder(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert not server.queue, "the CLI did not make the calls the test scripted"
        return [r["body"] for r in server.requests if r["path"] == "/v1/messages"]


def message_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of every text block of ``messages`` (a string content counts as one)."""
    texts: list[str] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts.extend(block["text"] for block in blocks if block.get("type") == "text")
    return texts

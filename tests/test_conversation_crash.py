"""A process killed mid-turn: the next process resumes with nothing duplicated and nothing lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anthropic

import sessionstore
from sessionstore import Session
from sessionstore._conversation import Conversation

from .messages_api import text_message

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import anthropic
    import sessionstore
    from sessionstore import Session
    from sessionstore._conversation import Conversation

    db, url = sys.argv[1], sys.argv[2]
    store = sessionstore.open_store(db, migrate=True)
    session = Session.create(store, "crash-1", model="claude-opus-5-5")
    loop = Conversation(session, anthropic.Anthropic(api_key="k", base_url=url), model="claude-opus-5-5")
    loop.user("hello")
    loop.prepare()  # the request is recorded as served ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the call returns
    """
)


def test_resume_after_a_kill_mid_turn(messages_api: Any, tmp_path: Path) -> None:
    """The killed turn's user message is kept once; the resumed call is recorded once."""
    db = tmp_path / "crash.db"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), messages_api.url], capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()
    messages_api.queue.append(text_message("hi again", "msg_resume"))

    store = sessionstore.open_store(db)
    loop = Conversation(
        Session(store, "crash-1"),
        anthropic.Anthropic(api_key="k", base_url=messages_api.url),
        model="claude-opus-5-5",
    )
    loop.step()

    events = store.read("crash-1")
    kinds = [e.type for e in events]
    assert kinds.count("message_appended") == 2
    assert kinds.count("context_served") == 2  # the interrupted attempt stays in the audit trail
    assert len({e.event_id for e in events}) == len(events)
    assert store.verify("crash-1").ok
    assert [m["role"] for m in Session(store, "crash-1").request()["messages"]] == ["user", "assistant"]

"""docs/bridges/*.md run as written: each page's Python blocks, in order, in one namespace.

The Claude Code page follows a project folder: here a copy of a transcript the real CLI wrote
(with a sub-agent), at the path the page names; its database goes to a temporary folder.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs" / "bridges"
FIXTURE = Path(__file__).parent / "fixtures" / "claude-code-2.1.332-agent"
_PYTHON = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def _blocks(page: Path) -> list[str]:
    return _PYTHON.findall(page.read_text())


def test_the_claude_code_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    project = home / ".claude" / "projects" / "-home-ada-orders-service"
    shutil.copytree(FIXTURE, project)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(DOCS / "claude-code.md")
    assert blocks
    namespace: dict[str, object] = {}
    for code in blocks:
        # A quiet folder is found quiet as soon here as after the page's 2 seconds.
        exec(compile(code.replace("until_idle=2", "until_idle=0.05"), "claude-code.md", "exec"), namespace)
    assert namespace["main_session"] == "257a4592-7adc-457b-93a7-b8b7d3494930"
    assert namespace["sub_agents"] == ["257a4592-7adc-457b-93a7-b8b7d3494930.agent-aab1c5ae568a10797"]
    namespace["store"].close()  # type: ignore[attr-defined]


# google-adk 2.7 warns about its own deprecated config class and experimental features.
@pytest.mark.filterwarnings("ignore:BaseAgentConfig is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature:UserWarning")
def test_the_adk_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/bridges/adk.md: two turns through ADK's Runner, then verify and erasure, as printed."""
    pytest.importorskip("google.adk")
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(DOCS / "adk.md")
    assert len(blocks) == 2
    namespace: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, "adk.md", "exec"), namespace)
    session = namespace["session"]
    report = namespace["report"]
    receipts = namespace["receipts"]

    assert namespace["replies"] == ["You said: Still there?"]
    assert len(session.events) == 4  # type: ignore[attr-defined]
    assert session.state == {"user:plan": "pro", "last_reply": "You said: Still there?"}  # type: ignore[attr-defined]
    assert (report.ok, report.events_checked) == (True, 5)  # type: ignore[attr-defined]
    assert (receipts[0].reason, receipts[0].event_count) == ("ticket closed, customer asked", 5)  # type: ignore[index]
    assert namespace["gone"] is None


def test_the_langgraph_page_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/bridges/langgraph.md: interrupt, resume, a fork, verify and delete_thread, printing
    what its comments say."""
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(DOCS / "langgraph.md")
    assert len(blocks) == 3
    namespace: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, "langgraph.md", "exec", dont_inherit=True), namespace)
    printed = capsys.readouterr().out.splitlines()
    promised = [
        line.split("# ", 1)[1] for code in blocks for line in code.splitlines() if line.startswith("print(")
    ]

    assert printed == promised
    assert namespace["waiting"] == ("review",)


def test_the_openai_agents_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/bridges/openai-agents.md: two turns with a tool call, run_sync, a pop and its revert,
    verify and erasure, as printed."""
    pytest.importorskip("agents")
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(DOCS / "openai-agents.md")
    assert len(blocks) == 4
    namespace: dict[str, object] = {}
    # Runner.run_sync runs on the thread's default event loop and leaves it open: give it one the
    # test closes (asyncio.run in the other blocks unsets it, hence before each block).
    loop = asyncio.new_event_loop()
    try:
        for code in blocks:
            asyncio.set_event_loop(loop)
            exec(compile(code, "openai-agents.md", "exec"), namespace)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    items = namespace["items"]
    receipts = namespace["receipts"]

    assert namespace["reply"] == "You asked about the weather in Paris."
    assert [i.get("role") or i["type"] for i in items] == [  # type: ignore[attr-defined]
        "user", "function_call", "function_call_output", "assistant", "user", "assistant"
    ]
    assert namespace["result"].final_output == "Hello again."  # type: ignore[attr-defined]
    assert [(e.kind, e.reverted_by is not None) for e in namespace["timeline"]] == [  # type: ignore[attr-defined]
        ("openai_agents_item_popped", True),
        ("openai_agents_removal_reverted", False),
    ]
    assert (namespace["report"].ok, namespace["report"].events_checked) == (True, 7)  # type: ignore[attr-defined]
    assert (receipts[0].reason, receipts[0].event_count) == ("customer asked", 7)  # type: ignore[index]

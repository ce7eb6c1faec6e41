"""The real Claude Code transcripts the import/export tests run on (read-only), and helpers.

The corpus lives beside the repository (``../shared/corpus/claude-code`` from the repo root, as in
CI); tests that need it skip with a clear reason when it is absent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "claude-code"
_RCGRAY = "rcgray__claude-code-bug-phantom-reads-17407__"
#: Main transcripts: (corpus file name, Claude Code sessionId).
MAIN_FILES = {
    "entireio__cli__98-78b713483d-0-full.jsonl": "847ff7d2-4a55-44d7-a3f5-a3afd89f1ee1",
    "entireio__entire-graph__13-a55a80ec0f-2-full.jsonl": "39e938fb-d4c2-4ade-b8c8-b06db3c9d7f5",
    f"{_RCGRAY}b6240830-5041-465e-aad0-910c13cd9b6c.jsonl": "b6240830-5041-465e-aad0-910c13cd9b6c",
    f"{_RCGRAY}d9add9a6-f2cd-42f6-8ae9-135bf8af37ec.jsonl": "d9add9a6-f2cd-42f6-8ae9-135bf8af37ec",
}
#: The session with sub-agents (legacy flat layout upstream) and its agent files.
PARENT_SESSION = "b6240830-5041-465e-aad0-910c13cd9b6c"
AGENT_FILES = {"1698e3ad": f"{_RCGRAY}agent-1698e3ad.jsonl", "a382dbae": f"{_RCGRAY}agent-a382dbae.jsonl"}
#: The tool call that spawned agent 1698e3ad (its result carries toolUseResult.agentId).
SPAWNING_TOOL_USE = "toolu_01GKn4jrMV8uKGRRcsX3S9C4"


def corpus_file(name: str) -> Path:
    """A corpus file, or skip the test saying where the corpus was expected."""
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"Claude Code corpus not found at {CORPUS} (expected ../shared/corpus/claude-code)")
    return path


def entries(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, entry) of every non-blank line."""
    out = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if raw.strip():
            out.append((number, json.loads(raw)))
    return out


def flat_project(tmp_path: Path) -> Path:
    """The sub-agent session laid out as Claude Code <= 2.0 did: agent-*.jsonl beside the main file."""
    folder = tmp_path / "flat-project"
    folder.mkdir()
    shutil.copyfile(corpus_file(f"{_RCGRAY}{PARENT_SESSION}.jsonl"), folder / f"{PARENT_SESSION}.jsonl")
    for agent_id, name in AGENT_FILES.items():
        shutil.copyfile(corpus_file(name), folder / f"agent-{agent_id}.jsonl")
    return folder


def modern_project(tmp_path: Path) -> Path:
    """The same session in the 2.1+ layout: <sessionId>/subagents/agent-*.jsonl."""
    folder = tmp_path / "modern-project"
    subagents = folder / PARENT_SESSION / "subagents"
    subagents.mkdir(parents=True)
    shutil.copyfile(corpus_file(f"{_RCGRAY}{PARENT_SESSION}.jsonl"), folder / f"{PARENT_SESSION}.jsonl")
    for agent_id, name in AGENT_FILES.items():
        shutil.copyfile(corpus_file(name), subagents / f"agent-{agent_id}.jsonl")
    return folder


def copy_main(tmp_path: Path, name: str) -> Path:
    """A corpus main transcript copied to ``<sessionId>.jsonl`` in a folder of its own."""
    folder = tmp_path / f"copy-{MAIN_FILES[name][:8]}"
    folder.mkdir(exist_ok=True)
    target = folder / f"{MAIN_FILES[name]}.jsonl"
    shutil.copyfile(corpus_file(name), target)
    return target

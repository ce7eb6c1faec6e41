"""The real Claude Code transcripts the import/export tests run on (read-only), and helpers.

The corpus lives beside the repository (``../shared/corpus/`` from the repo root, as in CI), in
two folders: ``claude-code`` (with sub-agents and sidecars) and ``claude-code-more`` (20 more main
transcripts, Claude Code 2.0.64 to 2.1.218). Tests that need it skip with a clear reason when it
is absent, except in CI (``CI`` set), where a missing corpus fails them: a CI run must never pass
without having run them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CORPUS_ROOT = Path(__file__).resolve().parents[2] / "shared" / "corpus"
CORPUS = CORPUS_ROOT / "claude-code"
MORE_CORPUS = CORPUS_ROOT / "claude-code-more"
_RCGRAY = "rcgray__claude-code-bug-phantom-reads-17407__"
#: Main transcripts of ``claude-code``: (corpus file name, Claude Code sessionId).
FIRST_FILES = {
    "entireio__cli__98-78b713483d-0-full.jsonl": "847ff7d2-4a55-44d7-a3f5-a3afd89f1ee1",
    "entireio__entire-graph__13-a55a80ec0f-2-full.jsonl": "39e938fb-d4c2-4ade-b8c8-b06db3c9d7f5",
    f"{_RCGRAY}b6240830-5041-465e-aad0-910c13cd9b6c.jsonl": "b6240830-5041-465e-aad0-910c13cd9b6c",
    f"{_RCGRAY}d9add9a6-f2cd-42f6-8ae9-135bf8af37ec.jsonl": "d9add9a6-f2cd-42f6-8ae9-135bf8af37ec",
}
#: Main transcripts of ``claude-code-more`` (see its SOURCES.md).
_MORE_FILES = {
    "entireio__cli__23-73a92c6c40-0-full.jsonl": "127e9cd1-0deb-4a7c-ba1a-ba4ecd375b90",
    "entireio__cli__26-4c3fdb7e9f-0-full.jsonl": "c3afafd7-9a94-4316-80d3-ad6f8a1e4d80",
    "entireio__cli__45-b48f42ab1f-0-full.jsonl": "0822e04b-5551-4de8-a98a-5660c689e49b",
    "entireio__cli__48-b429896bcb-1-full.jsonl": "53ea1606-cf60-417b-928a-068324ecc7b3",
    "entireio__cli__48-b4b05476e5-0-full.jsonl": "1c38adc0-5071-4382-9e53-de8c30e2265f",
    "entireio__cli__5d-107d133886-0-full.jsonl": "4ded0de6-8acf-40a5-ba46-7f9bb1ad903c",
    "entireio__cli__73-7e6e3ea2ad-2-full.jsonl": "0bdbfa06-acf1-473a-b3e4-6a03313d1d0e",
    "entireio__cli__74-af160f6f80-0-full.jsonl": "ccc58457-00a5-4a2f-82a9-175e4473c60b",
    "entireio__cli__75-2941d85fa2-0-full.jsonl": "880d23f9-86b3-4345-af42-46381ab10e4d",
    "entireio__cli__81-de29e2290e-1-full.jsonl": "e75fc7f5-30dc-4288-a579-5e1c14a107f8",
    "entireio__cli__9b-04c3d92e38-1-full.jsonl": "2a80b8d9-b65a-4c2e-8bf4-0df4958640fd",
    "entireio__cli__9f-d2fc39aa5f-0-full.jsonl": "cde341db-b80a-44f5-b0f2-94db2ef7a164",
    "entireio__cli__bd-7375936c5c-0-full.jsonl": "a2b25ca9-1cbb-41d7-a3b1-89c66f8697f9",
    "entireio__cli__c7-f7b48fb868-0-full.jsonl": "163396cf-348b-4175-90f5-5ca0986ac0f1",
    "entireio__cli__ce-aea776cdb0-0-full.jsonl": "85cc202e-0e74-46ce-a485-e5fcd11f7a8c",
    "entireio__cli__d8-7ee3bab4de-0-full.jsonl": "b50aaf5c-3ef3-472b-8d5e-75bb89ac3fe1",
    "entireio__entire-graph__03-f6f6ac2f1f-1-full.jsonl": "fffff083-8032-496a-81ae-244c3c25ea0f",
    "entireio__entire-graph__76-cd2ea187ff-0-full.jsonl": "5632e712-bdd3-4fd5-baac-7af16a8f7258",
    "entireio__entire-graph__7f-6469c27a4c-5-full.jsonl": "306fb219-a8fd-4770-81df-07039d4de7fa",
    "entireio__entire-graph__b9-713a917b91-0-full.jsonl": "0f469ab8-bece-40b3-b3b8-c37e9ea7bc4b",
}
#: Every main transcript of both folders: (corpus file name, Claude Code sessionId).
MAIN_FILES = {**FIRST_FILES, **_MORE_FILES}
_FOLDER = {**dict.fromkeys(FIRST_FILES, CORPUS), **dict.fromkeys(_MORE_FILES, MORE_CORPUS)}
#: The file with two JSON objects on one line (an entry appended without a newline), and that line.
JOINED_LINE_FILE = ("entireio__cli__bd-7375936c5c-0-full.jsonl", 183)
#: The session with sub-agents (legacy flat layout upstream) and its agent files.
PARENT_SESSION = "b6240830-5041-465e-aad0-910c13cd9b6c"
AGENT_FILES = {"1698e3ad": f"{_RCGRAY}agent-1698e3ad.jsonl", "a382dbae": f"{_RCGRAY}agent-a382dbae.jsonl"}
#: The tool call that spawned agent 1698e3ad (its result carries toolUseResult.agentId).
SPAWNING_TOOL_USE = "toolu_01GKn4jrMV8uKGRRcsX3S9C4"


def in_ci() -> bool:
    """True on a CI runner (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def corpus_missing(where: Path) -> None:
    """Skip the test, or fail it in CI, saying where the corpus was expected."""
    reason = f"Claude Code corpus not found at {where} (expected ../shared/corpus beside the repository)"
    if in_ci():
        pytest.fail(reason + "; CI must run the corpus tests")
    pytest.skip(reason)


def corpus_file(name: str) -> Path:
    """A corpus file (either folder), or skip/fail the test saying where it was expected."""
    path = _FOLDER.get(name, CORPUS) / name
    if not path.is_file():
        corpus_missing(path.parent)
    return path


def corpus_paths() -> list[Path]:
    """Every main transcript of both folders (skips/fails the test when one is missing)."""
    return [corpus_file(name) for name in sorted(MAIN_FILES)]


def line_objects(raw: bytes) -> list[Any]:
    """The JSON objects on one line: one, or several written back to back."""
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    values, at = [], 0
    while text[at:].strip():
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def entries(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, entry) of every JSON object on a non-blank line (a line may hold several)."""
    out: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if raw.strip():
            out.extend((number, entry) for entry in line_objects(raw))
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

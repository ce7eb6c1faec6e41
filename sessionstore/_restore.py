"""What a compaction puts back after the summary: recently read files, skills and the plan.

Budgets (SPEC 5.5.4): up to 5 most recently read files, each at most 5,000 tokens (the head is
kept), 50,000 tokens in all, skipping files already visible in the kept messages and plan or
memory files; invoked skills newest first, 5,000 tokens each (with a truncation note), 25,000 in
all; the plan in full. Everything here is a pure function of its inputs plus a token counter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "POST_COMPACT_MAX_TOKENS_PER_FILE",
    "POST_COMPACT_MAX_TOKENS_PER_SKILL",
    "POST_COMPACT_SKILLS_TOKEN_BUDGET",
    "POST_COMPACT_TOKEN_BUDGET",
    "Candidate",
    "paths_in",
    "select_attachments",
    "truncate_head",
]

POST_COMPACT_MAX_FILES_TO_RESTORE = 5
POST_COMPACT_TOKEN_BUDGET = 50_000
POST_COMPACT_MAX_TOKENS_PER_FILE = 5_000
POST_COMPACT_MAX_TOKENS_PER_SKILL = 5_000
POST_COMPACT_SKILLS_TOKEN_BUDGET = 25_000
_SKIPPED_NAMES = ("CLAUDE.md", "MEMORY.md")
_TRUNCATED = "\n[… truncated to fit the post-compact budget]"


@dataclass(frozen=True)
class Candidate:
    """Something that may be restored: a file read, a skill invoked, or the plan."""

    kind: Literal["file", "skill", "plan"]
    name: str
    text: str


def truncate_head(text: str, limit: int, count: Callable[[str], int]) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` tokens keeping its head; and whether it was cut."""
    tokens = count(text)
    if tokens <= limit:
        return text, False
    low, high = 0, len(text)  # the longest prefix within the limit (counts are monotonic enough)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    cut = low
    newline = text.rfind("\n", 0, cut)
    if newline > cut // 2:
        cut = newline
    return text[:cut], True


def paths_in(messages: Sequence[dict[str, Any]]) -> set[str]:
    """File paths named in tool calls of ``messages`` (what the kept messages already show)."""
    found: set[str] = set()
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
                for key in ("file_path", "path", "notebook_path"):
                    value = block["input"].get(key)
                    if isinstance(value, str):
                        found.add(value)
    return found


def _is_skipped_file(name: str, visible: set[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return name in visible or base in _SKIPPED_NAMES or "/plans/" in f"/{name}" or base.endswith(".plan.md")


def select_attachments(
    files: Sequence[Candidate],
    skills: Sequence[Candidate],
    plan: Candidate | None,
    *,
    visible_paths: set[str],
    count: Callable[[str], int],
) -> list[dict[str, Any]]:
    """The attachments to restore, in order (files, skills, plan), each within its budget.

    Args:
        files: files read, most recent first.
        skills: skills invoked, newest first.
        plan: the current plan, restored in full.
        visible_paths: paths already visible in the kept messages (not restored again).
        count: raw token counter.

    Returns:
        ``{"kind", "name", "text", "tokens", "truncated"}`` dicts.
    """
    chosen: list[dict[str, Any]] = []
    total = 0
    for candidate in files:
        if len([c for c in chosen if c["kind"] == "file"]) >= POST_COMPACT_MAX_FILES_TO_RESTORE:
            break
        if _is_skipped_file(candidate.name, visible_paths):
            continue
        text, cut = truncate_head(candidate.text, POST_COMPACT_MAX_TOKENS_PER_FILE, count)
        tokens = count(text)
        if total + tokens > POST_COMPACT_TOKEN_BUDGET:
            continue
        total += tokens
        body = f"[Restored after compaction: {candidate.name}]\n{text}"
        chosen.append(
            {"kind": "file", "name": candidate.name, "text": body, "tokens": tokens, "truncated": cut}
        )
    skills_total = 0
    for candidate in skills:
        text, cut = truncate_head(candidate.text, POST_COMPACT_MAX_TOKENS_PER_SKILL, count)
        if cut:
            text += _TRUNCATED
        tokens = count(text)
        if skills_total + tokens > POST_COMPACT_SKILLS_TOKEN_BUDGET:
            continue
        skills_total += tokens
        body = f"[Skill {candidate.name}]\n{text}"
        chosen.append(
            {"kind": "skill", "name": candidate.name, "text": body, "tokens": tokens, "truncated": cut}
        )
    if plan is not None:
        body = f"[Current plan]\n{plan.text}"
        chosen.append(
            {"kind": "plan", "name": plan.name, "text": body, "tokens": count(plan.text), "truncated": False}
        )
    return chosen


def describe(attachments: Sequence[dict[str, Any]]) -> str:
    """One line per attachment, for logs and the audit."""
    return json.dumps([{k: a[k] for k in ("kind", "name", "tokens", "truncated")} for a in attachments])

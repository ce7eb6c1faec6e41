"""What a compaction puts back after the summary: recently read files, skills and the plan.

Budgets (SPEC 5.5.4): up to 5 most recently read files, each at most 5,000 tokens (the head is
kept), 50,000 tokens in all, skipping files already visible in the kept messages and plan or
memory files; invoked skills newest first, 5,000 tokens each (with a truncation note), 25,000 in
all; the plan in full. Everything here is a pure function of its inputs plus a token counter.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._paths import inside

__all__ = [
    "POST_COMPACT_MAX_FILES_TO_RESTORE",
    "POST_COMPACT_MAX_TOKENS_PER_FILE",
    "POST_COMPACT_MAX_TOKENS_PER_SKILL",
    "POST_COMPACT_SKILLS_TOKEN_BUDGET",
    "POST_COMPACT_TOKEN_BUDGET",
    "Candidate",
    "normalize_path",
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


def normalize_path(path: str, root: str | None = None) -> str:
    """``path`` in the form reads are stored in: relative to ``root`` when it lies inside it,
    POSIX, without ``.`` or empty components. A path outside the root (or any absolute path when
    no root is known) stays absolute, normalized.
    """
    text = path.replace("\\", "/")
    if os.path.isabs(text):
        text = posixpath.normpath(text)
        if root is not None:
            for base in {os.path.abspath(root), os.path.realpath(root)}:
                if inside(text, base) and text != base:
                    return posixpath.relpath(text, base)
        return text
    return posixpath.normpath(text)


def paths_in(messages: Sequence[dict[str, Any]], root: str | None = None) -> set[str]:
    """File paths named in tool calls of ``messages`` (what the kept messages already show),
    normalized as the stored reads are (see ``normalize_path``).
    """
    found: set[str] = set()
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
                for key in ("file_path", "path", "notebook_path"):
                    value = block["input"].get(key)
                    if isinstance(value, str) and value:
                        found.add(normalize_path(value, root))
    return found


def _is_visible(name: str, visible: set[str]) -> bool:
    """True when the stored (root-relative) ``name`` is among the ``visible`` paths.

    An absolute visible path whose root was not known matches a stored path it ends with,
    component by component (``/home/u/proj/src/a.py`` shows ``src/a.py``).
    """
    relative = normalize_path(name)
    return relative in visible or any(
        path.startswith("/") and path.endswith("/" + relative) for path in visible
    )


def _is_skipped_file(name: str, visible: set[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return (
        _is_visible(name, visible)
        or base in _SKIPPED_NAMES
        or "/plans/" in f"/{name}"
        or base.endswith(".plan.md")
    )


def select_attachments(
    files: Sequence[Candidate],
    skills: Sequence[Candidate],
    plan: Candidate | None,
    *,
    visible_paths: set[str],
    count: Callable[[str], int],
    max_files: int = POST_COMPACT_MAX_FILES_TO_RESTORE,
    max_tokens_per_file: int = POST_COMPACT_MAX_TOKENS_PER_FILE,
    files_budget: int = POST_COMPACT_TOKEN_BUDGET,
) -> list[dict[str, Any]]:
    """The attachments to restore, in order (files, skills, plan), each within its budget.

    Args:
        files: files read, most recent first.
        skills: skills invoked, newest first.
        plan: the current plan, restored in full.
        visible_paths: paths already visible in the kept messages (not restored again), as
            ``paths_in`` gives them.
        count: raw token counter.
        max_files / max_tokens_per_file / files_budget: the file budgets (the defaults are
            SPEC 5.5.4's; with them five files of at most 5,000 tokens can never reach the
            50,000 total, which binds only with larger per-file limits).

    Returns:
        ``{"kind", "name", "text", "tokens", "truncated"}`` dicts.
    """
    chosen: list[dict[str, Any]] = []
    total = 0
    for candidate in files:
        if len(chosen) >= max_files:  # only files are chosen so far
            break
        if _is_skipped_file(candidate.name, visible_paths):
            continue
        text, cut = truncate_head(candidate.text, max_tokens_per_file, count)
        tokens = count(text)
        if total + tokens > files_budget:
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

"""The files, errors and pending tasks named in the messages a compaction replaces, and whether
a summary still mentions each (the compaction lab's measure of what a summary kept).

What is extracted, from tool calls and results only (never from text, which a model may word
any way):

* **files**: ``file_path`` and ``notebook_path`` of any tool call, and ``path`` of a tool other
  than ``Grep``, ``Glob`` and ``LS`` (theirs name folders to search); ``edited`` when an edit
  tool (``Edit``, ``Write``, ``MultiEdit``, ``NotebookEdit``) touched it, else ``read``.
* **errors**: every ``tool_result`` with ``is_error``; named by the first line of its text
  (tags such as ``<tool_use_error>`` removed), with the call that failed (tool and its path or
  command).
* **pending tasks**: the latest ``TodoWrite`` list's items not ``completed``, and tasks made by
  ``TaskCreate`` whose last ``TaskUpdate`` status is not ``completed`` or ``deleted`` (the id from
  the result ``Task #N created``, else the order of creation).

A summary mentions a file when it holds its path, a tail of it of two or more components
(``src/app.py`` of ``/home/u/p/src/app.py``), or its file name when no other file extracted has
the same name, each standing alone (not inside a longer name). It mentions an error or a task
when it holds the error's exception name (``...Error``, ``...Exception``) if it has one, else when
it holds the text itself or at least half of its words of four letters or more (case ignored).
A mention is not understanding: the measure tells which facts a summary dropped for certain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..events import ReplacedFactKept

__all__ = ["ReplacedFact", "facts_kept", "replaced_facts"]

_FILE_KEYS = ("file_path", "notebook_path")
_FOLDER_TOOLS = frozenset({"Grep", "Glob", "LS"})
_EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
_DONE = frozenset({"completed", "deleted"})
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")
_EXCEPTION = re.compile(r"\b[A-Za-z_]\w*(?:Error|Exception)\b")
_WORD = re.compile(r"[a-z0-9_]{4,}")
_CREATED = re.compile(r"Task #(\w+) created")
#: Characters of an error's first line or a task's text that name it.
_NAME_CHARS = 200

Message = dict[str, Any]


@dataclass(frozen=True)
class ReplacedFact:
    """A file, error or pending task named in replaced messages (``_replaced_facts`` docstring)."""

    kind: Literal["file", "error", "task"]
    name: str
    detail: str = ""


def _blocks(messages: Sequence[Message]) -> Iterable[dict[str, Any]]:
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            yield from (b for b in content if isinstance(b, dict))


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content", "")
    if isinstance(inner, str):
        return inner
    if isinstance(inner, list):
        return "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
    return ""


def _first_line(text: str) -> str:
    stripped = _TAG.sub("", text)
    line = next((line.strip() for line in stripped.splitlines() if line.strip()), "")
    return line[:_NAME_CHARS]


def _call_target(block: dict[str, Any]) -> str:
    """``Tool path`` or ``Tool command`` of a tool call, for naming where an error happened."""
    raw = block.get("input")
    tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
    target = next(
        (str(tool_input[k]) for k in (*_FILE_KEYS, "path", "command") if isinstance(tool_input.get(k), str)),
        "",
    )
    return f"{block.get('name', '?')} {target[:80]}".strip()


def replaced_facts(messages: Sequence[Message]) -> list[ReplacedFact]:
    """The files, errors and pending tasks ``messages`` name (in that order, each once)."""
    files: dict[str, str] = {}
    errors: list[ReplacedFact] = []
    calls: dict[str, dict[str, Any]] = {}
    todos: list[ReplacedFact] = []
    created: dict[str, str] = {}
    status: dict[str, str] = {}
    for block in _blocks(messages):
        kind = block.get("type")
        if kind == "tool_use":
            calls[str(block.get("id"))] = block
            name = str(block.get("name", ""))
            raw = block.get("input")
            tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
            keys = _FILE_KEYS if name in _FOLDER_TOOLS else (*_FILE_KEYS, "path")
            for key in keys:
                path = tool_input.get(key)
                if isinstance(path, str) and path.strip():
                    if name in _EDIT_TOOLS or files.get(path) == "edited":
                        files[path] = "edited"
                    else:
                        files.setdefault(path, "read")
            if name == "TodoWrite" and isinstance(tool_input.get("todos"), list):
                todos = [
                    ReplacedFact("task", str(t.get("content", ""))[:_NAME_CHARS], str(t.get("status", "")))
                    for t in tool_input["todos"]
                    if isinstance(t, dict) and t.get("status") not in _DONE and t.get("content")
                ]
            elif name == "TaskUpdate" and isinstance(tool_input.get("status"), str):
                status[str(tool_input.get("taskId"))] = tool_input["status"]
        elif kind == "tool_result":
            call = calls.get(str(block.get("tool_use_id")), {})
            text = _result_text(block)
            if block.get("is_error"):
                line = _first_line(text)
                if line:
                    errors.append(ReplacedFact("error", line, _call_target(call) if call else ""))
            elif call.get("name") == "TaskCreate" and isinstance(call.get("input"), dict):
                subject = str(call["input"].get("subject") or call["input"].get("description") or "")
                match = _CREATED.search(text)
                task_id = match.group(1) if match else str(len(created) + 1)
                if subject:
                    created[task_id] = subject[:_NAME_CHARS]
    tasks = [
        ReplacedFact("task", subject, status.get(task_id, "pending"))
        for task_id, subject in created.items()
        if status.get(task_id) not in _DONE
    ]
    unique_errors = list({(e.name, e.detail): e for e in errors}.values())
    return [
        *(ReplacedFact("file", path, how) for path, how in files.items()),
        *unique_errors,
        *_unique_by_name([*todos, *tasks]),
    ]


def _unique_by_name(facts: list[ReplacedFact]) -> list[ReplacedFact]:
    return list({f.name: f for f in facts}.values())


def _holds(summary: str, term: str) -> bool:
    """True when ``term`` stands alone in ``summary``: not inside a longer name (``myapp.py``)
    nor followed by more components (``src`` of ``src/app.py``)."""
    return re.search(rf"(?<![\w.-]){re.escape(term)}(?![\w/-])", summary) is not None


def _mentions_file(summary: str, path: str, ambiguous_names: set[str]) -> bool:
    parts = [p for p in path.replace("\\", "/").split("/") if p and p != "."]
    if not parts:
        return False
    tails = ["/".join(parts[i:]) for i in range(len(parts) - 1)]
    if parts[-1] not in ambiguous_names:
        tails.append(parts[-1])
    return _holds(summary, path) or any(_holds(summary, tail) for tail in tails)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _mentions_text(summary: str, text: str) -> bool:
    exceptions = set(_EXCEPTION.findall(text))
    if exceptions:
        return any(name in summary for name in exceptions)
    squeezed = " ".join(summary.lower().split())
    if " ".join(text.lower().split()) in squeezed:
        return True
    words = _words(text)
    return bool(words) and 2 * len(words & _words(summary)) >= len(words)


def _is_restored(path: str, restored: set[str]) -> bool:
    """True when a file put back after the summary (a root-relative name) is ``path``."""
    normalized = path.replace("\\", "/")
    return any(normalized == name or normalized.endswith("/" + name) for name in restored)


def facts_kept(
    facts: Sequence[ReplacedFact], summary: str, restored_files: Iterable[str] = ()
) -> list[ReplacedFactKept]:
    """Each fact, with whether ``summary`` mentions it and (files) whether it was restored."""
    restored = set(restored_files)
    names = [f.name.replace("\\", "/").rsplit("/", 1)[-1] for f in facts if f.kind == "file"]
    ambiguous = {name for name in names if names.count(name) > 1}
    kept = []
    for fact in facts:
        if fact.kind == "file":
            in_summary = _mentions_file(summary, fact.name, ambiguous)
            back = _is_restored(fact.name, restored)
        else:
            in_summary, back = _mentions_text(summary, fact.name), False
        kept.append(
            ReplacedFactKept(
                kind=fact.kind, name=fact.name, detail=fact.detail, in_summary=in_summary, restored=back
            )
        )
    return kept

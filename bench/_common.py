"""What several benchmarks share: the seeded text they generate, the agent's system prompt and
tools, and the profiler printout. Benchmarks run as scripts, so this directory is on sys.path."""

from __future__ import annotations

import cProfile
import io
import pstats
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_VOCABULARY = (
    "the a of to and in is for on with error value function return import self config request "
    "response session token file path line data user model tool result index cache update query "
    "table json string list dict None True False async await yield class def while if else try "
    "except raise with open read write close status ok failed warning info debug test build "
    "module package server client handler timeout retry version commit branch merge diff"
)
WORDS = tuple(_VOCABULARY.split())
ACCENTED = ("café", "naïve", "→", "résumé", "✓", "\u2013")  # a little non-ASCII, as in real output
LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR")
TOOL_NAMES = ("Bash", "Read", "Edit", "Grep", "Write")
CWD = "/home/dev/projects/orders-service"

SYSTEM_PROMPT = (
    "You are an interactive CLI tool that helps users with software engineering tasks. "
    "Use the instructions below and the tools available to you to assist the user.\n\n"
    + "\n".join(
        f"# Rule {i}\n- Be concise; prefer editing existing files; run the tests after every change; "
        f"never commit unless asked; explain non-obvious commands before running them ({i})."
        for i in range(24)
    )
)
_STR = {"type": "string"}
TOOLS = [
    {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
    }
    for name, description, properties, required in (
        ("Bash", "Executes a bash command.", {"command": _STR, "description": _STR}, ["command"]),
        ("Read", "Reads a file.", {"file_path": _STR, "offset": {"type": "integer"}}, ["file_path"]),
        (
            "Edit",
            "Performs exact string replacements in files.",
            {"file_path": _STR, "old_string": _STR, "new_string": _STR},
            ["file_path", "old_string", "new_string"],
        ),
        ("Grep", "Searches file contents.", {"pattern": _STR, "path": _STR}, ["pattern"]),
        ("Write", "Writes a file.", {"file_path": _STR, "content": _STR}, ["file_path", "content"]),
    )
]


def output_line(rng: random.Random) -> str:
    """One line of tool output: a log line, a line of code, or prose."""
    kind = rng.random()
    if kind < 0.4:
        day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        stamp = f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        message = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        where = f"{rng.choice(WORDS)}.{rng.choice(WORDS)}"
        return f"{stamp} {rng.choice(LEVELS)} {where}: {message} id={rng.randrange(10**6)}"
    if kind < 0.7:
        indent = "    " * rng.randint(0, 3)
        call = f"{rng.choice(WORDS)}({rng.randrange(1000)})"
        return f"{indent}{rng.choice(WORDS)}_{rng.choice(WORDS)} = {call}"
    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
    if rng.random() < 0.1:
        words.append(rng.choice(ACCENTED))
    return " ".join(words).capitalize() + "."


def text_pool(rng: random.Random, chars: int, line: Callable[[random.Random], str] = output_line) -> str:
    """About ``chars`` characters of tool-output-like text, one ``line(rng)`` after another."""
    lines: list[str] = []
    length = 0
    while length < chars:
        text = line(rng)
        lines.append(text)
        length += len(text) + 1
    return "\n".join(lines)


class PooledText:
    """A workload's seeded strings: slices of a text pool, API-style ids and tool calls.

    Every method draws from ``rng``, so a workload seeded alike gives the same strings.
    """

    def __init__(self, rng: random.Random, pool: str) -> None:
        self.rng = rng
        self.pool = pool

    def text(self, size: int) -> str:
        start = self.rng.randrange(len(self.pool) - size - 1)
        return self.pool[start : start + size]

    def _id(self, prefix: str, bits: int = 96) -> str:
        return f"{prefix}{self.rng.getrandbits(bits):0{bits // 4}x}"

    def _tool_use(self, name: str) -> dict[str, Any]:
        """A ``tool_use`` block calling ``name`` (one of ``TOOL_NAMES``) with plausible input."""
        rng = self.rng
        path = f"{CWD}/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"
        tool_input: dict[str, Any]
        if name == "Bash":
            tool_input = {
                "command": f"pytest -q tests/test_{rng.choice(WORDS)}.py",
                "description": "Run tests",
            }
        elif name == "Edit":
            tool_input = {
                "file_path": path,
                "old_string": self.text(rng.randint(40, 600)),
                "new_string": self.text(rng.randint(40, 600)),
            }
        elif name == "Grep":
            tool_input = {"pattern": rng.choice(WORDS), "path": CWD}
        elif name == "Write":
            tool_input = {"file_path": path, "content": self.text(rng.randint(200, 4000))}
        else:
            tool_input = {"file_path": path}
        return {"type": "tool_use", "id": self._id("toolu_01"), "name": name, "input": tool_input}


def ns_to_ms(ns: float) -> float:
    return ns / 1e6


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values (a row that measured nothing prints as nan, not an error)."""
    return statistics.median(values) if values else float("nan")


class Timed:
    """Wraps a callable and accumulates the time spent in it (nanoseconds)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.total = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.total += time.perf_counter_ns() - start

    def take(self) -> int:
        """The time accumulated since the last ``take``."""
        total, self.total = self.total, 0
        return total


def print_table(columns: list[tuple[str, str, int]], rows: list[list[str]]) -> None:
    """Right-aligned columns: (header line 1, header line 2, width) and the cells."""
    print(" ".join(f"{top:>{width}}" for top, _, width in columns))
    print(" ".join(f"{unit:>{width}}" for _, unit, width in columns))
    for row in rows:
        print(" ".join(f"{cell:>{width}}" for cell, (_, _, width) in zip(row, columns, strict=True)))


def profiled(label: str, fn: Callable[[], Any], top: int = 16) -> Any:
    """Run ``fn`` under cProfile, print the top functions by own time, return its result."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = fn()
    finally:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)
    body = out.getvalue()
    start = body.find("   ncalls")
    total = stats.total_tt  # type: ignore[attr-defined]
    print(f"\n--- cProfile: {label} (total {total * 1e3:.0f} ms under the profiler; top by own time) ---")
    print(body[start:].rstrip() if start >= 0 else body.rstrip())
    return result


def source_at(rev: str, path: str) -> str | None:
    """The text of ``path`` (repository-relative) at commit ``rev``, for a benchmark that runs
    an earlier version beside this one; None without git or that commit."""
    repo = Path(__file__).resolve().parents[1]
    command = ["git", "-C", str(repo), "show", f"{rev}:{path}"]
    shown = subprocess.run(command, capture_output=True, text=True, check=False)
    return shown.stdout if shown.returncode == 0 else None

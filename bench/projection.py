"""Per-turn cost and cold-resume cost of the live ``Session``, each against the floor that matters.

Usage::

    python bench/projection.py [--quick] [--sizes 200,2000,10000] [--turns K] [--repeats R] [--profile]

The workload
------------
One deterministic (seeded) Claude-Code-like conversation. A *turn* is a user prompt, then 1-3
API rounds. Each round is one assistant message (a thinking block with a signature in 30% of
rounds, a text block, and 1-3 ``tool_use`` blocks on every round but the last, which has none
and ends the turn: 0-3 tool calls per round), a ``UsageRecorded`` for the round, and, when it
called tools, one user message with the ``tool_result`` blocks (each 200 B - 20 KB,
log-uniform: median ~2 KB, mean ~4.3 KB). About 6 events and ~14 KB of request per turn: at
10,000 turns the request is ~140 MB, far past any context window; the sizes measure how the
mechanics scale, not a conversation anyone would send. Histories of 200, 2,000 and 10,000
turns (``--quick``: 200 and 1,000), each in a fresh SQLite file in a temporary folder (WAL,
``synchronous=FULL``: the defaults of ``open_store(path, migrate=True)``). The measured turns
come from a second seeded stream, so each history size measures the very same turns.

Setup, not timed: the history is appended with ``store.append`` in batches of 500 events by a
store opened with ``token_counter=None`` (tokenizing ~140 MB would take minutes and is not
what is measured), and written to the Claude Code JSONL as it is generated. The store is then
reopened with the default token counter (tiktoken cl100k, tokenizer loaded before timing), so
every measured turn is tokenized on append as in production; the history's events simply
carry no counts. Reopening builds the first ``Session`` by a full fold (no snapshot exists for
the counting tokenizer yet); one warm-up turn follows.

(a) Per turn, at each history size, over ``--turns`` turns (default 20; medians):

* ``append``: ``session.append(turn_events)`` with the default ``SessionConfig``: validation,
  tokenizing, the hash chain, one SQLite transaction (fsync), then ``refresh()`` (read the new
  rows, decode, fold both projections). Every 1,000 events ``refresh`` also writes an automatic
  snapshot; that stall is costed in table (b) (``snap write``) and shows in ``max append``.
* ``bytes``: ``session.request_bytes()``: the request's bytes, joined from each message's
  kept canonical JSON (a message is serialized once, the first time it is sent).
* ``turn`` = ``append`` + ``bytes``: what a caller pays to record a turn and get the next
  request's bytes. ``request`` (``session.request()``, the dict) is shown for information.
* ``dumps``, the floor: ``json.dumps(request, ensure_ascii=False, separators=(",", ":"))``
  ``.encode()`` of the same request dict: the stdlib producing the very same bytes and nothing
  else. The bytes have to be produced to send the request at all.
* ``turn/dumps``: how many times the floor a turn costs. Target: <= 3 at every size.
* ``bytes/dumps``: the request's bytes alone against the floor. Target: <= 0.1 at the largest
  size (the bytes of history already sent are joined, not serialized again).
* ``refresh`` and ``fold``, in microseconds per turn: the incremental update alone, neither
  the store append nor serialization. ``refresh`` is ``Session.refresh()`` (read the tail from
  SQLite, decode, fold); ``fold`` only the ``apply`` calls of the two projections (decoding
  the events included). Target: flat as the history grows (largest size within 2x of the
  smallest).

``bytes`` and ``dumps`` each produce the whole request, so they alternate between turns
(10 samples each); the warm-up turn does both and checks that the bytes are identical.

(b) Cold resume at each size (median of ``--repeats``, default 3, contenders interleaved;
each contender ends with the request bytes, checked identical to the live session's):

* ``snapshot``: after ``session.snapshot()`` at the head (its time: ``snap write``), on a
  freshly opened store (opening is not timed; its cost is printed once),
  ``Session(store, sid)`` + ``request_bytes()``.
* ``rebuild``: the same with ``use_snapshots=False``: the full fold of the log.
* ``JSONL``: the same conversation as a Claude Code transcript: compact JSON, one object per
  line; the envelope (``parentUuid, isSidechain, userType, cwd, sessionId, version,
  gitBranch, type, uuid, timestamp``); ``message`` with ``model/id/usage/stop_reason`` on
  assistant lines, one content block per assistant line as Claude Code streams them, one line
  per tool result with the ``toolUseResult`` duplicate and ``sourceToolAssistantUUID``, plus
  the ``file-history-snapshot`` and ``system/turn_duration`` lines Claude Code also writes.
  Resuming from it: read the file, ``json.loads`` every line, walk the ``parentUuid`` chain from
  the last entry to the root, build the messages with a simple equivalent of sessionstore's
  normalization (``_normalize``: the rules this workload exercises; not the fold itself, which
  would add model construction per line to the baseline), then ``json.dumps`` the request with
  the same system prompt and tools. Only the request is built (the Session also restores its
  transcript view). The median time of each step is printed for the largest size.
* ``JSONL/snapshot``: how many times faster the snapshot resume is. Target: >= 10 at 10,000
  turns (at the largest size of the run). ``rebuild/snapshot``: what the snapshot saves.
* ``snap MB``: both snapshot rows (``(api)``: the api_context one); ``JSONL MB``: the file.
  The notes below the table give the amortized cost of automatic snapshots and the snapshot
  storage a session keeps (the store keeps the two newest snapshots of each projection).

``--profile`` prints cProfile tables (own time) for one turn, ``snapshot()`` and each resume
path at the largest size. ``--quick`` finishes in well under a minute, the full run in about
three and a half minutes on 2 cores. Exit status 1 if any of the bytes disagree; a missed
target is reported as MISS, not an error.
"""

from __future__ import annotations

import argparse
import base64
import gc
import itertools
import json
import os
import platform
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import (
    ACCENTED,
    CWD,
    LEVELS,
    SYSTEM_PROMPT,
    TOOL_NAMES,
    WORDS,
    PooledText,
    Timed,
    median,
    ns_to_ms,
    print_table,
    profiled,
    text_pool,
)

import sessionstore
from sessionstore import (
    Event,
    MessageAppended,
    Session,
    SessionConfig,
    SessionStarted,
    UsageRecorded,
    open_store,
)
from sessionstore.events import ContextConfigured
from sessionstore.projections._api_context import ApiContextProjection
from sessionstore.projections._transcript import TranscriptProjection

SEED = 20250617
FULL_SIZES = (200, 2_000, 10_000)
QUICK_SIZES = (200, 1_000)
SETUP_BATCH = 500
WARMUP_TURNS = 1
TARGET_TURN_OVER_DUMPS = 3.0
TARGET_BYTES_OVER_DUMPS = 0.1
TARGET_JSONL_OVER_SNAPSHOT = 10.0
TARGET_FOLD_GROWTH = 2.0

MODEL = "claude-sonnet-4-5-20250929"
CC_VERSION = "2.1.42"
BRANCH = "main"

# --- the workload ----------------------------------------------------------------------------


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
    }


_STR = {"type": "string"}
TOOLS = [
    _tool(
        "Bash",
        "Executes a bash command with an optional timeout.",
        {"command": _STR, "description": _STR},
        ["command"],
    ),
    _tool(
        "Read",
        "Reads a file from the local filesystem.",
        {"file_path": _STR, "offset": {"type": "integer"}},
        ["file_path"],
    ),
    _tool(
        "Edit",
        "Performs exact string replacements in files.",
        {"file_path": _STR, "old_string": _STR, "new_string": _STR, "replace_all": {"type": "boolean"}},
        ["file_path", "old_string", "new_string"],
    ),
    _tool(
        "Grep",
        "Searches file contents with ripgrep.",
        {"pattern": _STR, "path": _STR, "output_mode": _STR},
        ["pattern"],
    ),
    _tool(
        "Write",
        "Writes a file to the local filesystem.",
        {"file_path": _STR, "content": _STR},
        ["file_path", "content"],
    ),
]


@dataclass(frozen=True)
class ToolCall:
    block: dict[str, Any]  # the tool_use block
    result: dict[str, Any]  # the tool_result block
    tool_use_result: Any  # Claude Code's structured duplicate (``toolUseResult``)


@dataclass(frozen=True)
class Round:
    api_id: str
    request_id: str
    blocks: list[dict[str, Any]]  # [thinking?] text, tool_use*
    calls: list[ToolCall]
    stop_reason: str
    usage: dict[str, int]


@dataclass(frozen=True)
class Turn:
    index: int
    prompt: str
    rounds: list[Round]


def _line(rng: random.Random) -> str:
    """One line of tool output (this workload's own mix: calls take two arguments)."""
    kind = rng.random()
    if kind < 0.4:
        day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        stamp = f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        where = f"{rng.choice(WORDS)}.{rng.choice(WORDS)}"
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        return f"{stamp} {rng.choice(LEVELS)} {where}: {words} id={rng.randrange(10**6)}"
    if kind < 0.7:
        indent = "    " * rng.randint(0, 3)
        call = f"{rng.choice(WORDS)}({rng.choice(WORDS)}, {rng.randrange(1000)})"
        return f"{indent}{rng.choice(WORDS)}_{rng.choice(WORDS)} = {call}"
    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
    if rng.random() < 0.1:
        words.append(rng.choice(ACCENTED))
    return " ".join(words).capitalize() + "."


class Workload(PooledText):
    """Deterministic turns (seeded); ``turn()`` gives the next one."""

    def __init__(self, seed: int = SEED) -> None:
        rng = random.Random(seed)
        super().__init__(rng, text_pool(rng, 1_500_000, _line))
        self.turns_made = 0
        self.context_chars = len(SYSTEM_PROMPT) + len(json.dumps(TOOLS))

    def _tool_call(self) -> ToolCall:
        rng = self.rng
        name = rng.choice(TOOL_NAMES)
        tool_id = self._id("toolu_01")
        path = f"{CWD}/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"
        output = self.text(int(200 * 100 ** rng.random()))  # 200 B - 20 KB, log-uniform
        tool_input: dict[str, Any]
        structured: Any
        if name == "Bash":
            tool_input = {
                "command": f"pytest -q tests/test_{rng.choice(WORDS)}.py",
                "description": "Run the tests",
            }
            structured = {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
        elif name == "Read":
            tool_input = {"file_path": path}
            lines = output.count("\n") + 1
            structured = {
                "type": "text",
                "file": {
                    "filePath": path,
                    "content": output,
                    "numLines": lines,
                    "startLine": 1,
                    "totalLines": lines,
                },
            }
        elif name == "Edit":
            old, new = self.text(rng.randint(40, 600)), self.text(rng.randint(40, 600))
            tool_input = {"file_path": path, "old_string": old, "new_string": new}
            structured = {
                "filePath": path,
                "oldString": old,
                "newString": new,
                "originalFile": output,
                "structuredPatch": [],
                "userModified": False,
                "replaceAll": False,
            }
        elif name == "Grep":
            tool_input = {"pattern": rng.choice(WORDS), "path": CWD, "output_mode": "content"}
            structured = {
                "mode": "content",
                "filenames": [],
                "numFiles": 0,
                "content": output,
                "numLines": output.count("\n") + 1,
            }
        else:
            content = self.text(rng.randint(200, 4000))
            tool_input = {"file_path": path, "content": content}
            structured = {
                "type": "update",
                "filePath": path,
                "content": content,
                "structuredPatch": [],
                "originalFile": output,
            }
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
        result: dict[str, Any] = {"tool_use_id": tool_id, "type": "tool_result", "content": output}
        if rng.random() < 0.05:
            result["is_error"] = True
        return ToolCall(block, result, structured)

    def turn(self) -> Turn:
        rng = self.rng
        prompt = self.text(rng.randint(20, 1500))
        self.context_chars += len(prompt)
        n_rounds = rng.randint(1, 3)
        rounds: list[Round] = []
        for r in range(n_rounds):
            last = r == n_rounds - 1
            blocks: list[dict[str, Any]] = []
            if rng.random() < 0.3:
                signature = base64.b64encode(rng.randbytes(rng.randint(200, 450))).decode()
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": self.text(rng.randint(100, 2000)),
                        "signature": signature,
                    }
                )
            blocks.append(
                {"type": "text", "text": self.text(rng.randint(100, 3000) if last else rng.randint(20, 300))}
            )
            calls = [] if last else [self._tool_call() for _ in range(rng.randint(1, 3))]
            blocks.extend(call.block for call in calls)
            out_chars = sum(len(json.dumps(b)) for b in blocks)
            new_chars = sum(len(c.result["content"]) for c in calls)
            usage = {
                "input_tokens": rng.randint(3, 40),
                "cache_creation_input_tokens": out_chars // 4 + rng.randint(0, 200),
                "cache_read_input_tokens": self.context_chars // 4,
                "output_tokens": out_chars // 4 + 1,
            }
            self.context_chars += out_chars + new_chars
            rounds.append(
                Round(
                    self._id("msg_01"),
                    self._id("req_011C"),
                    blocks,
                    calls,
                    "end_turn" if last else "tool_use",
                    usage,
                )
            )
        self.turns_made += 1
        return Turn(self.turns_made - 1, prompt, rounds)


_BASE_TIME = datetime(2025, 6, 17, 9, 0, tzinfo=UTC)
_ids = itertools.count(1)


def _uuid() -> uuid.UUID:
    """Deterministic, unique event ids (a store deduplicates appends by event id)."""
    return uuid.UUID(int=(SEED << 64) | next(_ids))


def turn_events(turn: Turn) -> list[Event]:
    """The sessionstore events of one turn: prompt, then per round assistant, usage, results."""
    when = _BASE_TIME + timedelta(seconds=30 * turn.index)
    events: list[Event] = [
        MessageAppended(
            event_id=_uuid(), message_uuid=str(_uuid()), role="user", content=turn.prompt, timestamp=when
        )
    ]
    for rnd in turn.rounds:
        events.append(
            MessageAppended(
                event_id=_uuid(),
                message_uuid=str(_uuid()),
                role="assistant",
                content=rnd.blocks,
                api_message_id=rnd.api_id,
                stop_reason=rnd.stop_reason,
                timestamp=when,
            )
        )
        events.append(UsageRecorded(event_id=_uuid(), api_message_id=rnd.api_id, model=MODEL, **rnd.usage))
        if rnd.calls:
            events.append(
                MessageAppended(
                    event_id=_uuid(),
                    message_uuid=str(_uuid()),
                    role="user",
                    content=[call.result for call in rnd.calls],
                    timestamp=when,
                )
            )
    return events


# --- the Claude Code transcript (JSONL) --------------------------------------------------------


class TranscriptWriter:
    """Writes turns as Claude Code transcript lines (compact JSON, one object per line)."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.file = path.open("w", encoding="utf-8")
        self.session_id = session_id
        self.parent: str | None = None
        self.rng = random.Random(SEED + 1)

    def _envelope(self, kind: str, when: datetime) -> dict[str, Any]:
        this = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        entry = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": CWD,
            "sessionId": self.session_id,
            "version": CC_VERSION,
            "gitBranch": BRANCH,
            "type": kind,
            "uuid": this,
            "timestamp": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        self.parent = this
        return entry

    def _write(self, entry: dict[str, Any]) -> None:
        self.file.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
        self.file.write("\n")

    def turn(self, turn: Turn) -> None:
        when = _BASE_TIME + timedelta(seconds=30 * turn.index)
        stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        prompt = self._envelope("user", when)
        prompt["message"] = {"role": "user", "content": turn.prompt}
        prompt["permissionMode"] = "default"
        self._write(
            {
                "type": "file-history-snapshot",
                "messageId": prompt["uuid"],
                "snapshot": {"messageId": prompt["uuid"], "trackedFileBackups": {}, "timestamp": stamp},
                "isSnapshotUpdate": False,
            }
        )
        self._write(prompt)
        for rnd in turn.rounds:
            holder: dict[str, str] = {}
            for i, block in enumerate(rnd.blocks):
                entry = self._envelope("assistant", when)
                entry["message"] = {
                    "model": MODEL,
                    "id": rnd.api_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [block],
                    "stop_reason": rnd.stop_reason if i == len(rnd.blocks) - 1 else None,
                    "stop_sequence": None,
                    "usage": {**rnd.usage, "service_tier": "standard"},
                }
                entry["requestId"] = rnd.request_id
                if block["type"] == "tool_use":
                    holder[block["id"]] = entry["uuid"]
                self._write(entry)
            for call in rnd.calls:
                entry = self._envelope("user", when)
                entry["message"] = {"role": "user", "content": [call.result]}
                entry["toolUseResult"] = call.tool_use_result
                entry["sourceToolAssistantUUID"] = holder[call.block["id"]]
                self._write(entry)
        done = self._envelope("system", when)
        done.update({"subtype": "turn_duration", "durationMs": 12_345, "isMeta": True})
        self._write(done)

    def close(self) -> None:
        self.file.close()


JSONL_PHASES = ("read+json.loads", "chain walk", "normalize", "request bytes")


def write_transcript(path: Path, session_id: str, turns: int) -> None:
    """A Claude Code transcript of ``turns`` seeded turns at ``path`` (the same bytes every run)."""
    writer = TranscriptWriter(path, session_id)
    source = Workload()
    try:
        for _ in range(turns):
            writer.turn(source.turn())
    finally:
        writer.close()


def _normalize(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code entries to API messages, by the rules of sessionstore's fold this workload exercises.

    String content becomes a text block and blank text blocks are dropped; the one-block
    assistant lines of an API round are merged into one message; consecutive user lines are
    merged with their ``tool_result`` blocks first, and a result that answers no open tool call
    is dropped. (No interrupted tool calls occur here, so that repair is left out.)
    """
    messages: list[dict[str, Any]] = []
    open_ids: set[str] = set()
    for entry in chain:
        kind = entry["type"]
        if (kind != "user" and kind != "assistant") or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        content = entry["message"]["content"]
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}] if content.strip() else []
        else:
            blocks = [b for b in content if b.get("type") != "text" or str(b.get("text", "")).strip()]
        if not blocks:
            continue
        last = messages[-1] if messages else None
        if kind == "assistant":
            open_ids.update(b["id"] for b in blocks if b.get("type") == "tool_use")
            if last is not None and last["role"] == "assistant":
                last["content"].extend(blocks)
            else:
                messages.append({"role": "assistant", "content": blocks})
            continue
        results: list[dict[str, Any]] = []
        others: list[dict[str, Any]] = []
        for block in blocks:
            if block.get("type") != "tool_result":
                others.append(block)
            elif block.get("tool_use_id") in open_ids:
                open_ids.discard(block["tool_use_id"])
                results.append(block)
        if last is not None and last["role"] == "user":
            merged = last["content"]
            at = 0
            while at < len(merged) and merged[at].get("type") == "tool_result":
                at += 1
            merged[at:at] = results
            merged.extend(others)
        elif results or others:
            messages.append({"role": "user", "content": results + others})
    return messages


def jsonl_resume(path: Path, phases: dict[str, list[int]] | None = None) -> bytes:
    """Resume from a Claude Code transcript: parse, walk the chain, normalize, serialize.

    ``phases``, when given, collects the nanoseconds of each step under its name.
    """
    t0 = time.perf_counter_ns()
    by_uuid: dict[str, dict[str, Any]] = {}
    leaf: dict[str, Any] | None = None
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            entry = json.loads(line)
            key = entry.get("uuid")
            if key is not None:
                by_uuid[key] = entry
                leaf = entry
    t1 = time.perf_counter_ns()
    chain: list[dict[str, Any]] = []
    while leaf is not None:
        chain.append(leaf)
        parent = leaf.get("parentUuid")
        leaf = by_uuid.get(parent) if parent is not None else None
    chain.reverse()
    t2 = time.perf_counter_ns()
    messages = _normalize(chain)
    t3 = time.perf_counter_ns()
    # The system prompt and tools are not in a Claude Code transcript: the harness supplies them.
    request = {"system": SYSTEM_PROMPT, "tools": TOOLS, "messages": messages}
    data = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
    if phases is not None:
        t4 = time.perf_counter_ns()
        for name, spent in zip(JSONL_PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases.setdefault(name, []).append(spent)
    return data


# --- measuring -----------------------------------------------------------------------------------


@dataclass
class TurnRow:
    turns: int
    request_mb: float
    append_ms: float
    request_ms: float
    bytes_ms: float
    turn_ms: float
    dumps_ms: float
    ratio: float
    refresh_us: float
    fold_us: float
    max_append_ms: float
    auto_snapshots: int


@dataclass
class ResumeRow:
    turns: int
    events: int
    snapshot_ms: float
    rebuild_ms: float
    jsonl_ms: float
    snap_write_ms: float
    snap_mb: float
    snap_api_mb: float
    jsonl_mb: float
    open_ms: float
    jsonl_phases: dict[str, float]


def _open(path: Path | str, *, counting: bool = True) -> sessionstore.SessionStore:
    if counting:
        store = open_store(path, migrate=True)
        store.token_counter.count_text("warm up the tokenizer")  # type: ignore[union-attr]
        return store
    return open_store(path, migrate=True, token_counter=None)


def build_history(
    path: Path | str, jsonl: Path, workload: Workload, turns: int
) -> tuple[str, TranscriptWriter]:
    """Create the session and append ``turns`` turns in batches (counting off). Not timed.

    Every turn is also written to the Claude Code transcript at ``jsonl`` as it is generated
    (the writer stays open for the measured turns), so the conversation is never held in
    memory twice: a resuming process would not hold it either.
    """
    store = _open(path, counting=False)
    try:
        info = store.create_session(
            events=[
                SessionStarted(event_id=_uuid(), model=MODEL),
                ContextConfigured(event_id=_uuid(), system=SYSTEM_PROMPT, tools=TOOLS),
            ]
        )
        last = store.last_seq(info.id)
        writer = TranscriptWriter(jsonl, info.id)
        batch: list[Event] = []
        for _ in range(turns):
            turn = workload.turn()
            writer.turn(turn)
            batch.extend(turn_events(turn))
            if len(batch) >= SETUP_BATCH:
                last = store.append(info.id, batch, last).last_seq
                batch = []
        if batch:
            store.append(info.id, batch, last)
    finally:
        store.close()
    return info.id, writer


def measure_turns(
    session: Session, workload: Workload, turns: int, history: int, writer: TranscriptWriter
) -> TurnRow:
    """(a): append one turn + request bytes, against json.dumps of the same request.

    Every turn is appended and timed. The two ways to the request's bytes alternate between turns
    (``request_bytes`` on even turns, the json.dumps floor on odd ones) so a turn produces the
    whole request once, not twice; warm-up turns do both and check the bytes agree.
    """
    refresh = Timed(session.refresh)
    session.refresh = refresh  # type: ignore[method-assign]  # Session.append calls self.refresh()
    # Timing the fold alone means wrapping the session's (private) projection objects.
    api_apply = Timed(session._api_projection.apply)
    transcript_apply = Timed(session._transcript_projection.apply)
    session._api_projection.apply = api_apply  # type: ignore[method-assign]
    session._transcript_projection.apply = transcript_apply  # type: ignore[method-assign]
    rows: dict[str, list[int]] = {k: [] for k in ("append", "request", "bytes", "dumps", "refresh", "fold")}
    snapshots = 0
    request_size = 0
    for i in range(WARMUP_TURNS + turns):
        turn = workload.turn()
        writer.turn(turn)
        events = turn_events(turn)
        before_snapshot = session._last_snapshot_seq
        refresh.take(), api_apply.take(), transcript_apply.take()
        t0 = time.perf_counter_ns()
        session.append(events)
        t1 = time.perf_counter_ns()
        request = session.request()
        t2 = time.perf_counter_ns()
        if i < WARMUP_TURNS:
            data = session.request_bytes()
            if data != json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode():
                raise SystemExit(f"request_bytes differs from json.dumps of request() at {history} turns")
            del data, request
            continue
        if i % 2 == 0:
            request_size = len(session.request_bytes())
            rows["bytes"].append(time.perf_counter_ns() - t2)
        else:
            json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
            rows["dumps"].append(time.perf_counter_ns() - t2)
        del request
        snapshots += session._last_snapshot_seq != before_snapshot
        rows["append"].append(t1 - t0)
        rows["request"].append(t2 - t1)
        rows["refresh"].append(refresh.take())
        rows["fold"].append(api_apply.take() + transcript_apply.take())
    session.refresh = refresh.fn  # type: ignore[method-assign]
    session._api_projection.apply = api_apply.fn  # type: ignore[method-assign]
    session._transcript_projection.apply = transcript_apply.fn  # type: ignore[method-assign]
    append_ms = ns_to_ms(median(rows["append"]))
    bytes_ms = ns_to_ms(median(rows["bytes"]))
    dumps_ms = ns_to_ms(median(rows["dumps"]))
    return TurnRow(
        turns=history,
        request_mb=request_size / 1e6,
        append_ms=append_ms,
        request_ms=ns_to_ms(median(rows["request"])),
        bytes_ms=bytes_ms,
        turn_ms=append_ms + bytes_ms,
        dumps_ms=dumps_ms,
        ratio=(append_ms + bytes_ms) / dumps_ms,
        refresh_us=median(rows["refresh"]) / 1e3,
        fold_us=median(rows["fold"]) / 1e3,
        max_append_ms=ns_to_ms(max(rows["append"])),
        auto_snapshots=snapshots,
    )


def _resume_store(path: Path | str, sid: str, *, use_snapshots: bool) -> tuple[int, bytes, float]:
    t0 = time.perf_counter_ns()
    store = _open(path)
    t1 = time.perf_counter_ns()
    try:
        gc.collect()
        t2 = time.perf_counter_ns()
        session = Session(store, sid, use_snapshots=use_snapshots)
        data = session.request_bytes()
        t3 = time.perf_counter_ns()
        del session
    finally:
        store.close()
    return t3 - t2, data, ns_to_ms(t1 - t0)


def _resume_jsonl(path: Path, phases: dict[str, list[int]]) -> tuple[int, bytes]:
    gc.collect()
    t0 = time.perf_counter_ns()
    data = jsonl_resume(path, phases)
    return time.perf_counter_ns() - t0, data


def measure_resume(
    db: Path | str,
    jsonl: Path,
    sid: str,
    expected: bytes,
    history: int,
    events: int,
    snap_write_ns: int,
    repeats: int,
) -> ResumeRow:
    """(b): snapshot resume vs full rebuild vs parsing the Claude Code JSONL."""
    times: dict[str, list[int]] = {"snapshot": [], "rebuild": [], "jsonl": []}
    opens: list[float] = []
    phases: dict[str, list[int]] = {}
    for _ in range(repeats):
        for name in ("snapshot", "rebuild", "jsonl"):
            if name == "jsonl":
                elapsed, data = _resume_jsonl(jsonl, phases)
            else:
                elapsed, data, open_ms = _resume_store(db, sid, use_snapshots=name == "snapshot")
                opens.append(open_ms)
            if data != expected:
                raise SystemExit(f"{name} resume at {history} turns produced different request bytes")
            times[name].append(elapsed)
    store = _open(db, counting=False)
    try:
        tokenizer = sessionstore.store.TiktokenCounter().name
        api = store.latest_snapshot(sid, ApiContextProjection.name, ApiContextProjection.version, tokenizer)
        transcript = store.latest_snapshot(
            sid, TranscriptProjection.name, TranscriptProjection.version, tokenizer
        )
    finally:
        store.close()
    assert api is not None  # the transcript is snapshotted only once something has loaded it
    api_bytes = len(api.state)
    transcript_bytes = len(transcript.state) if transcript is not None else 0
    return ResumeRow(
        turns=history,
        events=events,
        snapshot_ms=ns_to_ms(median(times["snapshot"])),
        rebuild_ms=ns_to_ms(median(times["rebuild"])),
        jsonl_ms=ns_to_ms(median(times["jsonl"])),
        snap_write_ms=ns_to_ms(snap_write_ns),
        snap_mb=(api_bytes + transcript_bytes) / 1e6,
        snap_api_mb=api_bytes / 1e6,
        jsonl_mb=jsonl.stat().st_size / 1e6,
        open_ms=median(opens),
        jsonl_phases={name: ns_to_ms(median(spent)) for name, spent in phases.items()},
    )


def run_size(
    history: int, turns: int, repeats: int, tmp: Path, *, profile: bool
) -> tuple[TurnRow, ResumeRow, float]:
    workload = Workload()
    db = tmp / f"history-{history}.db"
    jsonl = tmp / f"history-{history}.jsonl"
    t0 = time.perf_counter()
    sid, writer = build_history(db, jsonl, workload, history)
    # The measured turns come from a stream of their own, so every history size measures the
    # very same turns (a turn's cost depends on its size, which varies a lot from turn to turn).
    measured = Workload(SEED + 1)
    measured.turns_made, measured.context_chars = workload.turns_made, workload.context_chars
    store = _open(db)
    try:
        session = Session(store, sid)  # full fold: no snapshot for the counting tokenizer yet
        setup_s = time.perf_counter() - t0
        turn_row = measure_turns(session, measured, turns, history, writer)
        if profile:
            extra = measured.turn()
            writer.turn(extra)
            extra_events = turn_events(extra)
            profiled(
                f"one turn at {history} turns: append + request_bytes",
                lambda live=session: (live.append(extra_events), live.request_bytes()),
            )
        snap_start = time.perf_counter_ns()
        session.snapshot()
        snap_write_ns = time.perf_counter_ns() - snap_start
        if profile:  # the same work again (the store keeps the first row of a key)
            profiled(f"session.snapshot() at {history} turns", session.snapshot)
        expected = session.request_bytes()
        events = session.last_seq
    finally:
        store.close()
    del session
    writer.close()
    gc.collect()
    resume_row = measure_resume(db, jsonl, sid, expected, history, events, snap_write_ns, repeats)
    if profile:
        store = _open(db)
        try:
            profiled(f"snapshot resume at {history} turns", lambda: Session(store, sid).request_bytes())
            profiled(
                f"full rebuild at {history} turns",
                lambda: Session(store, sid, use_snapshots=False).request_bytes(),
            )
        finally:
            store.close()
        profiled(f"JSONL resume at {history} turns", lambda: jsonl_resume(jsonl))
    db.unlink()
    jsonl.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return turn_row, resume_row, setup_s


# --- report --------------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_tables(turn_rows: list[TurnRow], resume_rows: list[ResumeRow], turns: int, repeats: int) -> None:
    print(f"\n(a) per turn: median of {turns} turns (after {WARMUP_TURNS} warm-up), token counting on")
    print_table(
        [
            ("history", "turns", 8),
            ("req MB", "", 7),
            ("append", "ms", 8),
            ("request", "ms", 8),
            ("bytes", "ms", 8),
            ("turn", "ms", 8),
            ("dumps", "ms", 8),
            ("turn/dumps", "", 10),
            ("bytes/dumps", "", 11),
            ("refresh", "us", 8),
            ("fold", "us", 7),
            ("max append", "ms", 10),
            ("auto-snap", "turns", 9),
        ],
        [
            [
                f"{r.turns:,}",
                f"{r.request_mb:.1f}",
                f"{r.append_ms:.2f}",
                f"{r.request_ms:.3f}",
                f"{r.bytes_ms:.2f}",
                f"{r.turn_ms:.2f}",
                f"{r.dumps_ms:.2f}",
                f"{r.ratio:.2f}x",
                f"{r.bytes_ms / r.dumps_ms:.3f}x",
                f"{r.refresh_us:.0f}",
                f"{r.fold_us:.0f}",
                f"{r.max_append_ms:.1f}",
                f"{r.auto_snapshots}",
            ]
            for r in turn_rows
        ],
    )
    print(f"\n(b) cold resume: median of {repeats}, each ending with the request bytes")
    print_table(
        [
            ("history", "turns", 8),
            ("events", "", 7),
            ("snapshot", "ms", 9),
            ("rebuild", "ms", 9),
            ("JSONL", "ms", 9),
            ("rebuild/", "snapshot", 9),
            ("JSONL/", "snapshot", 9),
            ("snap MB", "", 8),
            ("(api)", "", 7),
            ("JSONL MB", "", 9),
            ("snap/", "JSONL", 6),
            ("snap write", "ms", 10),
        ],
        [
            [
                f"{r.turns:,}",
                f"{r.events:,}",
                f"{r.snapshot_ms:.1f}",
                f"{r.rebuild_ms:.1f}",
                f"{r.jsonl_ms:.1f}",
                f"{r.rebuild_ms / r.snapshot_ms:.1f}x",
                f"{r.jsonl_ms / r.snapshot_ms:.1f}x",
                f"{r.snap_mb:.1f}",
                f"{r.snap_api_mb:.1f}",
                f"{r.jsonl_mb:.1f}",
                f"{r.snap_mb / r.jsonl_mb:.2f}",
                f"{r.snap_write_ms:.1f}",
            ]
            for r in resume_rows
        ],
    )
    print(f"  opening the store (not included above): ~{median([r.open_ms for r in resume_rows]):.0f} ms")
    last = resume_rows[-1]
    print(
        f"  JSONL resume at {last.turns:,} turns, by step: "
        + ", ".join(f"{name} {spent:.0f} ms" for name, spent in last.jsonl_phases.items())
    )
    every = SessionConfig().snapshot_every
    events_per_turn = last.events / last.turns
    print(
        f"  automatic snapshots (snapshot_every={every}, ~{events_per_turn:.1f} events/turn) happen every "
        f"~{every / events_per_turn:.0f} turns and stall that turn by 'snap write'; amortized per turn: "
        + ", ".join(
            f"{r.turns:,}: {r.snap_write_ms * r.events / r.turns / every:.1f} ms" for r in resume_rows
        )
    )
    # The store keeps the two newest snapshots per projection: the head's and one ~every events older.
    stored = [(r, r.snap_mb * (2 - every / r.events)) for r in resume_rows]
    print(
        "  snapshot storage a session keeps (two newest per projection), est.: "
        + ", ".join(f"{r.turns:,}: {mb:.0f} MB ({mb / r.jsonl_mb:.1f}x the JSONL)" for r, mb in stored)
    )

    print("\ntargets")
    worst = max(turn_rows, key=lambda r: r.ratio)
    ratios = ", ".join(f"{r.turns:,}: {r.ratio:.2f}x" for r in turn_rows)
    verdict = _verdict(worst.ratio <= TARGET_TURN_OVER_DUMPS)
    print(f"  [{verdict}] turn within {TARGET_TURN_OVER_DUMPS:.0f}x of json.dumps: {ratios}")
    largest = turn_rows[-1]
    bytes_ratio = largest.bytes_ms / largest.dumps_ms
    verdict = _verdict(bytes_ratio <= TARGET_BYTES_OVER_DUMPS)
    print(
        f"  [{verdict}] request_bytes() <= {TARGET_BYTES_OVER_DUMPS}x json.dumps of the request at "
        f"{largest.turns:,} turns: {bytes_ratio:.3f}x "
        f"({largest.bytes_ms:.1f} ms against {largest.dumps_ms:.1f} ms)"
    )
    fold_growth = turn_rows[-1].fold_us / turn_rows[0].fold_us
    refresh_growth = turn_rows[-1].refresh_us / turn_rows[0].refresh_us
    verdict = _verdict(max(fold_growth, refresh_growth) <= TARGET_FOLD_GROWTH)
    print(
        f"  [{verdict}] incremental update flat (largest/smallest history <= {TARGET_FOLD_GROWTH:.0f}x): "
        f"fold {fold_growth:.2f}x, refresh {refresh_growth:.2f}x"
    )
    speedup = last.jsonl_ms / last.snapshot_ms
    verdict = _verdict(speedup >= TARGET_JSONL_OVER_SNAPSHOT)
    print(
        f"  [{verdict}] snapshot resume >= {TARGET_JSONL_OVER_SNAPSHOT:.0f}x faster than the JSONL parse "
        f"at {last.turns:,} turns: {speedup:.1f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 turns; under a minute")
    parser.add_argument("--sizes", help="comma-separated history sizes in turns (overrides the defaults)")
    parser.add_argument("--turns", type=int, help="measured turns per size (default 20)")
    parser.add_argument("--repeats", type=int, help="cold resumes per contender (default 3)")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one turn and each resume at the largest size"
    )
    args = parser.parse_args(argv)
    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    turns = args.turns or 20
    repeats = args.repeats or 3
    load = os.getloadavg()
    print(
        f"sessionstore {sessionstore.__version__} projection bench: Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load[0]:.2f}, "
        f"{'quick' if args.quick else 'full'} run, sizes {', '.join(f'{s:,}' for s in sizes)} turns"
    )
    started = time.perf_counter()
    turn_rows: list[TurnRow] = []
    resume_rows: list[ResumeRow] = []
    with tempfile.TemporaryDirectory(prefix="ss-projection-bench-") as folder:
        for size in sizes:
            t0 = time.perf_counter()
            turn_row, resume_row, setup_s = run_size(
                size, turns, repeats, Path(folder), profile=args.profile and size == sizes[-1]
            )
            turn_rows.append(turn_row)
            resume_rows.append(resume_row)
            print(
                f"  {size:>6,} turns: setup {setup_s:.1f} s, all {time.perf_counter() - t0:.1f} s", flush=True
            )
    print_tables(turn_rows, resume_rows, turns, repeats)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

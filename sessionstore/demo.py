"""The main job: a short end-to-end session through the store, printed as its event log.

It needs no network and no API key: the conversation is scripted. It shows what the store
promises — append with optimistic concurrency, idempotent retry, the hash chain, blobs —
on the embedded default database (or ``--db``).
"""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

from ._errors import ConcurrencyError
from ._events import MessageAppended, SessionStarted, UsageRecorded
from ._open import open_store
from ._pipeline import Pipeline, revert
from ._session import Session
from ._validate import validate_request

__all__ = ["run_demo"]

# Over the 50,000-character threshold: the pipeline's budget stage persists it.
_TOOL_OUTPUT = "\n".join(f"src/module_{i}.py: def handler_{i}(event): ..." for i in range(1500))


def _conversation() -> list[MessageAppended | UsageRecorded]:
    user = MessageAppended(role="user", content="Find every event handler in src/ and list them.")
    call = MessageAppended(
        role="assistant",
        parent_uuid=user.message_uuid,
        api_message_id="msg_demo_1",
        content=[
            {"type": "text", "text": "I'll search the source tree."},
            {"type": "tool_use", "id": "toolu_demo_1", "name": "Grep", "input": {"pattern": "def handler_"}},
        ],
        stop_reason="tool_use",
    )
    result = MessageAppended(
        role="user",
        parent_uuid=call.message_uuid,
        content=[{"type": "tool_result", "tool_use_id": "toolu_demo_1", "content": _TOOL_OUTPUT}],
    )
    answer = MessageAppended(
        role="assistant",
        parent_uuid=result.message_uuid,
        api_message_id="msg_demo_2",
        content=[
            {"type": "text", "text": "There are 1,500 handlers, handler_0 to handler_1499, one per module."}
        ],
        stop_reason="end_turn",
    )
    usage = UsageRecorded(input_tokens=24_310, output_tokens=24, api_message_id="msg_demo_2")
    return [user, call, result, answer, usage]


def run_demo(url: str | os.PathLike[str] | None, out: TextIO, *, as_json: bool = False) -> int:
    """Run the scripted session against ``url`` and print what the store recorded.

    With ``as_json``, print one JSON object summarizing the run instead of the readable log.
    """
    lines: list[str] = []
    summary: dict[str, Any] = {}
    with open_store(url) as store:
        summary["database"] = store.engine.url.render_as_string(hide_password=True)  # type: ignore[attr-defined]
        lines.append(f"database: {summary['database']}")
        session = store.create_session(
            metadata={"demo": True}, events=[SessionStarted(model="claude-sonnet-5-5")]
        )
        summary["session_id"] = session.id
        lines.append(f"session:  {session.id}")

        batch = _conversation()
        first = store.append(session.id, batch[:2], expected_seq=1)
        rest = store.append(session.id, batch[2:], expected_seq=first.last_seq)
        lines.append(
            f"appended: seqs {first.seqs + rest.seqs}, global positions {first.positions + rest.positions}"
        )

        retry = store.append(session.id, batch[2:], expected_seq=first.last_seq)
        summary["retry_deduplicated"] = retry.deduplicated and retry.positions == rest.positions
        lines.append(
            f"retry of the last batch (lost acknowledgement): deduplicated={retry.deduplicated}, "
            f"same positions={retry.positions == rest.positions}"
        )
        try:
            store.append(session.id, [MessageAppended(role="user", content="stale writer")], expected_seq=1)
        except ConcurrencyError as e:
            summary["stale_writer_refused"] = {"expected": e.expected, "actual": e.actual}
            lines.append(f"stale writer refused: expected {e.expected}, actual {e.actual}")

        live = Session(store, session.id)
        before = live.request_bytes()
        prepared = Pipeline().prepare(live)
        persisted = [e for e in live.transcript if e.type == "tool_result_persisted"]
        summary["persisted_tool_results"] = [e.payload["tool_use_id"] for e in persisted]
        lines.append(
            f"pipeline: {len(persisted)} tool result persisted to the blob store "
            f"({persisted[0].payload['original_chars']} characters -> a "
            f"{len(persisted[0].payload['preview'])}-character preview), "
            f"request {len(before)} -> {len(live.request_bytes())} bytes, "
            f"served as {prepared.served_event_id[:8]}..."
        )
        validate_request(prepared.request)
        state = live.token_state()
        roles = " -> ".join(m["role"] for m in prepared.request["messages"])
        lines.append(f"next request: {len(prepared.request['messages'])} messages ({roles}), valid")
        lines.append(
            f"tokens: used {state.used} (last API usage + estimate since), "
            f"auto-compact at {state.window.autocompact_threshold}, "
            f"blocking at {state.window.blocking_limit}, {state.percent_left}% left"
        )
        summary["tokens"] = state.to_dict()
        revert(live, persisted[0].event_id)
        restored = live.request_bytes() == before
        summary["revert_restores_request"] = restored
        lines.append(f"revert of the persisted result restores the request byte for byte: {restored}")

        lines.append("\n   seq  type                    tokens  hash")
        total = 0
        for recorded in store.read(session.id, verify=True):
            total += recorded.token_count or 0
            tokens = "-" if recorded.token_count is None else str(recorded.token_count)
            lines.append(f"{recorded.seq:>6}  {recorded.type:<23} {tokens:>6}  {recorded.hash[:16]}...")
        report = store.verify(session.id)
        summary["events"] = report.events_checked
        summary["hash_chain_ok"] = report.ok
        lines.append(f"\ntokens counted at append: {total}")
        lines.append(f"hash chain: {'ok' if report.ok else 'BROKEN'} ({report.events_checked} events)")
    if as_json:
        print(json.dumps(summary), file=out)
    else:
        print("\n".join(lines), file=out)
    return 0 if report.ok else 2

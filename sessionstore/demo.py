"""The main job: a short end-to-end session through the store, printed as its event log.

It needs no network and no API key: the conversation is scripted. It shows what the store
promises — append with optimistic concurrency, idempotent retry, the hash chain, blobs —
on the embedded default database (or ``--db``).
"""

from __future__ import annotations

import os
from typing import TextIO

from ._errors import ConcurrencyError
from ._events import MessageAppended, SessionStarted, UsageRecorded
from ._open import open_store
from ._session import Session
from ._validate import validate_request

__all__ = ["run_demo"]

_TOOL_OUTPUT = "\n".join(f"src/module_{i}.py: def handler_{i}(event): ..." for i in range(200))


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
            {"type": "text", "text": "There are 200 handlers, handler_0 to handler_199, one per module."}
        ],
        stop_reason="end_turn",
    )
    usage = UsageRecorded(input_tokens=2_480, output_tokens=24, api_message_id="msg_demo_2")
    return [user, call, result, answer, usage]


def run_demo(url: str | os.PathLike[str] | None, out: TextIO) -> int:
    """Run the scripted session against ``url`` and print what the store recorded."""
    with open_store(url) as store:
        where = store.engine.url.render_as_string(hide_password=True)  # type: ignore[attr-defined]
        print(f"database: {where}", file=out)
        session = store.create_session(
            metadata={"demo": True},
            events=[SessionStarted(model="claude-sonnet-5-5")],
        )
        print(f"session:  {session.id}", file=out)

        batch = _conversation()
        first = store.append(session.id, batch[:2], expected_seq=1)
        rest = store.append(session.id, batch[2:], expected_seq=first.last_seq)
        print(
            f"appended: seqs {first.seqs + rest.seqs}, global positions {first.positions + rest.positions}",
            file=out,
        )

        retry = store.append(session.id, batch[2:], expected_seq=first.last_seq)
        print(
            f"retry of the last batch (lost acknowledgement): deduplicated={retry.deduplicated}, "
            f"same positions={retry.positions == rest.positions}",
            file=out,
        )
        try:
            store.append(session.id, [MessageAppended(role="user", content="stale writer")], expected_seq=1)
        except ConcurrencyError as e:
            print(f"stale writer refused: expected {e.expected}, actual {e.actual}", file=out)

        blob = store.put_blob(_TOOL_OUTPUT.encode())
        again = store.put_blob(_TOOL_OUTPUT.encode())
        print(f"blob:     {blob.sha256[:16]}... {blob.size} bytes (stored once: {blob == again})", file=out)

        print("\n   seq  type                 tokens  hash", file=out)
        total = 0
        for recorded in store.read(session.id, verify=True):
            total += recorded.token_count or 0
            tokens = "-" if recorded.token_count is None else str(recorded.token_count)
            print(f"{recorded.seq:>6}  {recorded.type:<20} {tokens:>6}  {recorded.hash[:16]}...", file=out)
        report = store.verify(session.id)
        print(f"\ntokens counted at append: {total}", file=out)
        print(f"hash chain: {'ok' if report.ok else 'BROKEN'} ({report.events_checked} events)", file=out)

        live = Session(store, session.id)
        request = live.request(cache_control=True)
        validate_request(request)
        state = live.token_state()
        roles = " -> ".join(m["role"] for m in request["messages"])
        print(
            f"\nnext request: {len(request['messages'])} messages ({roles}), valid, "
            f"{len(live.request_bytes())} bytes",
            file=out,
        )
        print(
            f"tokens: used {state.used} (last API usage + estimate since), "
            f"auto-compact at {state.window.autocompact_threshold}, "
            f"blocking at {state.window.blocking_limit}, {state.percent_left}% left",
            file=out,
        )
        return 0 if report.ok else 2

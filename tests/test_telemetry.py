"""OpenTelemetry spans (the ``otel`` extra): append, read, prepare and each stage, summarizer and
agent-loop model calls with the GenAI semantic-convention attributes, read back from the SDK's
in-memory exporter while the real agent loop talks to the local Messages API."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sessionstore
from sessionstore import (
    AnthropicSummarizer,
    AsyncConversation,
    Conversation,
    MessageAppended,
    RetryPolicy,
    Session,
    SessionStore,
)
from sessionstore._telemetry import _spans
from sessionstore.errors import OperationalError
from sessionstore.pipeline._compaction import compact

from .messages_api import text_message, tool_use_message

MODEL = "claude-opus-5-5"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """sessionstore's tracer, from a provider of this test's own with an in-memory exporter.

    The global provider can be set once per process; ``test_the_global_tracer_provider_...``
    checks that path in a fresh interpreter.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(_spans, "_tracer", provider.get_tracer("sessionstore"))
    yield exporter
    provider.shutdown()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _client(api: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=api.url, max_retries=0)


def test_append_and_read_spans_carry_the_batch(store: SessionStore, spans: InMemorySpanExporter) -> None:
    sid = store.create_session().id
    store.append(sid, [MessageAppended(role="user", content=f"m{i}") for i in range(2)], expected_seq=0)
    store.read(sid)

    (append,) = _named(spans, "sessionstore.append")
    assert append.kind is SpanKind.CLIENT
    attributes = _attributes(append)
    assert attributes["db.system.name"] == ("postgresql" if "postgres" in str(store.engine.url) else "sqlite")  # type: ignore[attr-defined]
    assert attributes["db.operation.name"] == "append"
    assert attributes["sessionstore.session_id"] == sid
    assert (attributes["sessionstore.event_count"], attributes["sessionstore.first_seq"]) == (2, 1)
    assert attributes["sessionstore.last_seq"] == 2
    assert attributes["sessionstore.deduplicated"] is False
    # Counted when first read (the default), not by the append.
    assert "sessionstore.tokens" not in attributes
    assert attributes["sessionstore.tokens.deferred"] == 2
    (read,) = _named(spans, "sessionstore.read")
    assert _attributes(read)["sessionstore.event_count"] == 2
    assert _attributes(read)["sessionstore.session_id"] == sid


def test_a_refused_append_is_an_error_span(store: SessionStore, spans: InMemorySpanExporter) -> None:
    sid = store.create_session().id
    with pytest.raises(sessionstore.ConcurrencyError):
        store.append(sid, [MessageAppended(role="user", content="late")], expected_seq=3)

    (append,) = _named(spans, "sessionstore.append")
    assert append.status.status_code is StatusCode.ERROR
    assert [e.name for e in append.events] == ["exception"]
    assert "sessionstore.last_seq" not in _attributes(append)


def test_a_retry_is_an_event_on_the_span_it_delays(spans: InMemorySpanExporter) -> None:
    failures = iter([True, False])

    def flaky() -> None:
        if next(failures):
            raise OperationalError("server closed the connection unexpectedly", transient=True)

    with _spans.span("caller"):
        RetryPolicy(base_delay=0.001, max_delay=0.001).run(flaky, what="append", session_id="s1")

    (caller,) = _named(spans, "caller")
    (retry,) = caller.events
    assert retry.name == "retry"
    assert dict(retry.attributes or {})["sessionstore.attempt"] == 1
    assert dict(retry.attributes or {})["sessionstore.session_id"] == "s1"


def test_the_agent_loop_traces_prepare_each_stage_and_the_model_call(
    store: SessionStore, messages_api: Any, spans: InMemorySpanExporter
) -> None:
    status, answer = text_message("Done.", "msg_1")
    answer["usage"] = {
        "input_tokens": 100,
        "output_tokens": 7,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 20,
    }
    messages_api.queue.append((status, answer))
    session = Session.create(store, model=MODEL)
    loop = Conversation(session, _client(messages_api), model=MODEL, max_tokens=500)
    loop.user("hi")
    spans.clear()

    loop.step()

    (prepare,) = _named(spans, "sessionstore.prepare")
    stage_spans = [s for s in spans.get_finished_spans() if s.name.startswith("sessionstore.stage.")]
    expected = [f"sessionstore.stage.{stage.name}" for stage in sessionstore.Pipeline().stages]
    assert [s.name for s in stage_spans] == expected
    assert prepare.context is not None
    assert all(s.parent is not None and s.parent.span_id == prepare.context.span_id for s in stage_spans)
    for stage in stage_spans:
        attributes = _attributes(stage)
        assert attributes["sessionstore.session_id"] == session.id
        assert attributes["sessionstore.tokens.freed"] == 0  # nothing to free in a two-message session
        assert attributes["sessionstore.tokens.before"] == attributes["sessionstore.tokens.after"]
    served = [e for e in session.log.read() if e.type == "context_served"][-1].payload_dict()
    assert _attributes(prepare)["sessionstore.request.fingerprint"] == served["fingerprint"]
    assert _attributes(prepare)["sessionstore.tokens.after"] == served["token_count"]

    (chat,) = _named(spans, f"chat {MODEL}")
    assert chat.kind is SpanKind.CLIENT
    attributes = _attributes(chat)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == MODEL
    assert attributes["gen_ai.request.max_tokens"] == 500
    assert attributes["gen_ai.response.id"] == "msg_1"
    assert attributes["gen_ai.response.model"] == "claude-opus-5-5"
    assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    # Every input token, cached or not (the conventions' definition); the parts as well.
    assert attributes["gen_ai.usage.input_tokens"] == 1020
    assert attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 900
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 20
    assert attributes["gen_ai.conversation.id"] == session.id
    assert attributes["sessionstore.call.purpose"] == "agent"
    assert attributes["sessionstore.request.fingerprint"] == served["fingerprint"]
    # The ContextServed append is inside prepare; the response's append follows the call.
    appends = _named(spans, "sessionstore.append")
    assert any(s.parent is not None and s.parent.span_id == prepare.context.span_id for s in appends)
    assert appends[-1].start_time is not None and chat.end_time is not None
    assert appends[-1].start_time >= chat.end_time


def test_a_stage_that_acts_reports_the_tokens_it_freed(
    store: SessionStore, spans: InMemorySpanExporter
) -> None:
    session = Session.create(store, model=MODEL, context_window=100_000, max_output_tokens=10_000)
    for n in range(30):
        session.append(
            [
                MessageAppended(role="user", content=f"step {n}"),
                MessageAppended(
                    role="assistant",
                    content=[{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {}}],
                ),
                MessageAppended(
                    role="user",
                    content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "word " * 800}],
                ),
            ]
        )
    config = sessionstore.PipelineConfig(
        snip=sessionstore.SnipConfig(enabled=True, trigger_percent=20, target_percent=10)
    )
    prepared = sessionstore.Pipeline(config).prepare(session)

    (snip_span,) = _named(spans, "sessionstore.stage.snip")
    (report,) = [r for r in prepared.reports if r.stage == "snip"]
    attributes = _attributes(snip_span)
    assert attributes["sessionstore.tokens.freed"] == report.tokens_freed > 0
    assert attributes["sessionstore.tokens.before"] > attributes["sessionstore.tokens.after"]
    assert attributes["sessionstore.stage.events"] == 1
    (prepare,) = _named(spans, "sessionstore.prepare")
    assert _attributes(prepare)["sessionstore.tokens.freed"] >= report.tokens_freed


def test_a_summarizer_call_is_a_chat_span_inside_its_compaction(
    store: SessionStore, messages_api: Any, spans: InMemorySpanExporter
) -> None:
    messages_api.queue.append(text_message("<summary>What happened.</summary>", "msg_s"))
    session = Session.create(store, model=MODEL)
    for n in range(3):
        session.append(
            [
                MessageAppended(role="user", content=f"q{n}"),
                MessageAppended(role="assistant", content=f"a{n}"),
            ]
        )
    summarizer = AnthropicSummarizer(_client(messages_api), MODEL, max_tokens=800)

    report = compact(session, summarizer)

    (compaction,) = _named(spans, "sessionstore.compaction")
    (chat,) = _named(spans, f"chat {MODEL}")
    assert compaction.context is not None and chat.parent is not None
    assert chat.parent.span_id == compaction.context.span_id
    assert _attributes(chat)["sessionstore.call.purpose"] == "summary"
    assert _attributes(chat)["gen_ai.request.max_tokens"] == 800
    assert _attributes(chat)["gen_ai.usage.input_tokens"] == 1000
    assert _attributes(chat)["gen_ai.usage.output_tokens"] == 200
    attributes = _attributes(compaction)
    assert attributes["sessionstore.compaction.ok"] is True
    assert attributes["sessionstore.tokens.before"] == report.tokens_before
    assert attributes["sessionstore.tokens.freed"] == report.tokens_before - report.tokens_after


def test_the_async_loop_traces_its_model_calls(messages_api: Any, spans: InMemorySpanExporter) -> None:
    messages_api.queue += [
        tool_use_message("toolu_1", "Read", {"file_path": "a.py"}, "msg_1"),
        text_message("Done.", "msg_2"),
    ]
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model=MODEL)
    client = anthropic.AsyncAnthropic(api_key="k", base_url=messages_api.url, max_retries=0)
    loop = AsyncConversation(session, client, model=MODEL)

    async def main() -> None:
        await loop.user("read a.py")

        async def runner(use: dict[str, Any]) -> str:
            return "print(1)"

        await loop.run(runner)

    asyncio.run(main())

    chats = _named(spans, f"chat {MODEL}")
    assert [_attributes(c)["gen_ai.response.id"] for c in chats] == ["msg_1", "msg_2"]
    assert [_attributes(c)["gen_ai.response.finish_reasons"] for c in chats] == [("tool_use",), ("end_turn",)]
    assert len(_named(spans, "sessionstore.prepare")) == 2


_GLOBAL_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import sessionstore

store = sessionstore.open_store(":memory:")   # spans before the provider is set go nowhere
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
sid = store.create_session().id
store.append(sid, [sessionstore.MessageAppended(role="user", content="hi")], expected_seq=0)
print(sorted({s.name for s in exporter.get_finished_spans()}))
"""


def test_the_global_tracer_provider_receives_the_spans() -> None:
    """No sessionstore call sets up tracing: whatever provider the host installs gets the spans,
    even one installed after the first span was (not) recorded."""
    command = [sys.executable, "-c", _GLOBAL_PROVIDER]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['sessionstore.append']"


_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import sessionstore
from sessionstore import MessageAppended, Pipeline, Session

store = sessionstore.open_store(":memory:")
session = Session.create(store, model="m")
session.append([MessageAppended(role="user", content="hi")])
prepared = Pipeline().prepare(session)
print(len(prepared.fingerprint), sys.modules["opentelemetry"])
"""


def test_without_the_otel_extra_everything_works_and_nothing_is_imported() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_OTEL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "64 None"


def test_the_async_store_reports_as_the_sync_store_does(
    shared_backend: Any, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """One implementation serves both stores: the async store's appends and reads have the same
    spans and log records (its calls run in greenlets on the loop, in the caller's context)."""
    import logging

    from sessionstore.store import open_async_store

    caplog.set_level(logging.DEBUG, logger="sessionstore")

    async def main() -> str:
        store = await open_async_store(shared_backend.url, migrate=True, token_counter=None)
        try:
            with _spans.span("request"):
                sid = (await store.create_session()).id
                await store.append(sid, [MessageAppended(role="user", content="hi")], expected_seq=0)
                await store.read(sid)
        finally:
            await store.close()
        return sid

    sid = asyncio.run(main())

    (request,) = _named(spans, "request")
    (append,) = _named(spans, "sessionstore.append")
    (read,) = _named(spans, "sessionstore.read")
    assert request.context is not None
    assert append.parent is not None and append.parent.span_id == request.context.span_id
    assert read.parent is not None and read.parent.span_id == request.context.span_id
    assert _attributes(append)["sessionstore.session_id"] == sid
    assert _attributes(append)["sessionstore.last_seq"] == 1
    (record,) = [r for r in caplog.records if getattr(r, "sessionstore_event", None) == "append"]
    assert (record.session_id, record.event_count, record.last_seq) == (sid, 1, 1)  # type: ignore[attr-defined]

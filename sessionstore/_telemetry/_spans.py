"""OpenTelemetry spans, when the ``otel`` extra (``opentelemetry-api``) is installed.

``opentelemetry`` is imported on the first span, never with ``sessionstore``; without it every
helper here is a no-op that costs a function call. Spans go to the global tracer provider: the
host application installs the SDK and an exporter (``sessionstore`` never does), and until it
does the API's no-op tracer drops them.

Model calls follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``): span name
``"{operation} {model}"``, kind CLIENT, ``gen_ai.usage.input_tokens`` counting every input
token (Anthropic reports cache reads and writes apart; the conventions add them in).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["Attribute", "SpanHandle", "add_span_event", "model_call_span", "span"]

#: What a span attribute may hold (None is dropped rather than set).
Attribute = str | bool | int | float | Sequence[str] | None

_UNRESOLVED: Any = object()
_tracer: Any = _UNRESOLVED
#: ``opentelemetry.trace``, once the first span found it installed.
_trace: Any = None


def _get_tracer() -> Any:
    """The ``sessionstore`` tracer, or None when opentelemetry-api is not installed."""
    global _tracer, _trace
    if _tracer is _UNRESOLVED:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = None
        else:
            _trace = trace
            _tracer = trace.get_tracer("sessionstore", _version())
    return _tracer


def _active_tracer() -> Any:
    """The tracer when spans can go somewhere; None without opentelemetry-api, and while no
    tracer provider is installed.

    Until the host installs one, the API's proxy tracer starts non-recording spans that carry
    the current span's context unchanged: skipping them changes nothing a host can observe, and
    saves the few microseconds each costs on every append and read.
    """
    tracer = _get_tracer()
    if (
        tracer is not None
        and type(tracer) is _trace.ProxyTracer
        and type(_trace.get_tracer_provider()) is _trace.ProxyTracerProvider
    ):
        return None
    return tracer


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sessionstore")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return None


def _clean(attributes: Mapping[str, Attribute] | None) -> dict[str, Any]:
    return {key: value for key, value in (attributes or {}).items() if value is not None}


class SpanHandle:
    """The span being recorded (or nothing, when tracing is off): set attributes as they are known."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        """True when attributes set now are kept (an SDK is installed and samples this span)."""
        return self._span is not None and bool(self._span.is_recording())

    def set(self, attributes: Mapping[str, Attribute]) -> None:
        """Set ``attributes`` on the span (None values are skipped)."""
        if self._span is not None:
            self._span.set_attributes(_clean(attributes))

    def record_response(self, response: Any) -> None:
        """The GenAI response attributes of an anthropic ``Message`` (read defensively)."""
        if self._span is None:
            return
        usage = getattr(response, "usage", None)
        plain = _int(getattr(usage, "input_tokens", None))
        read = _int(getattr(usage, "cache_read_input_tokens", None)) or 0
        written = _int(getattr(usage, "cache_creation_input_tokens", None)) or 0
        stop = getattr(response, "stop_reason", None)
        self.set(
            {
                "gen_ai.response.id": _str(getattr(response, "id", None)),
                "gen_ai.response.model": _str(getattr(response, "model", None)),
                "gen_ai.response.finish_reasons": [stop] if isinstance(stop, str) else None,
                "gen_ai.usage.input_tokens": None if plain is None else plain + read + written,
                "gen_ai.usage.output_tokens": _int(getattr(usage, "output_tokens", None)),
                "gen_ai.usage.cache_read.input_tokens": read,
                "gen_ai.usage.cache_creation.input_tokens": written,
            }
        )


_NO_SPAN = SpanHandle()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


@contextlib.contextmanager
def span(
    name: str, attributes: Mapping[str, Attribute] | None = None, *, client: bool = False
) -> Iterator[SpanHandle]:
    """A span named ``name`` around the block, current for the spans started inside it.

    An exception leaving the block is recorded on the span and sets its status to ERROR.
    ``client``: a call to another service (a database, the Messages API): kind CLIENT.
    """
    tracer = _active_tracer()
    if tracer is None:
        yield _NO_SPAN
        return
    from opentelemetry.trace import SpanKind

    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracer.start_as_current_span(name, kind=kind, attributes=_clean(attributes)) as current:
        yield SpanHandle(current)


def add_span_event(name: str, attributes: Mapping[str, Attribute]) -> None:
    """Add an event (a retry, a decision) to the current span, if one is being recorded."""
    if _active_tracer() is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(name, _clean(attributes))


@contextlib.contextmanager
def model_call_span(
    *,
    model: str,
    purpose: str,
    max_tokens: int | None = None,
    stream: bool | None = None,
    attributes: Mapping[str, Attribute] | None = None,
) -> Iterator[SpanHandle]:
    """A GenAI ``chat`` span around one Messages API call; ``record_response`` adds the usage.

    Args:
        purpose: ours, ``sessionstore.call.purpose``: "agent" (the loop's turn) or "summary".
        attributes: more attributes (the session id as ``gen_ai.conversation.id``, the request
            fingerprint ...).
    """
    base: dict[str, Attribute] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        # The conventions' earlier name for the provider, still what many backends read.
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens,
        "gen_ai.request.stream": stream,
        "sessionstore.call.purpose": purpose,
        **(attributes or {}),
    }
    with span(f"chat {model}", base, client=True) as handle:
        yield handle

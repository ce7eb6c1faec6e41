"""Logging and OpenTelemetry spans for every layer (below them all: it imports no layer).

* ``_logs``: stdlib ``logging`` under the ``sessionstore`` logger, one structured record per
  operation (fields in ``extra``), silent unless the host configures logging.
* ``_spans``: OpenTelemetry spans when the ``otel`` extra (``opentelemetry-api``) is installed,
  nothing at all (and nothing imported) when it is not.

docs/storage.md "Observability" lists every record and span with its fields.
"""

from __future__ import annotations

from ._logs import LOGGER_NAME, log_record, logger
from ._spans import Attribute, SpanHandle, add_span_event, model_call_span, span

__all__ = [
    "LOGGER_NAME",
    "Attribute",
    "SpanHandle",
    "add_span_event",
    "log_record",
    "logger",
    "model_call_span",
    "span",
]

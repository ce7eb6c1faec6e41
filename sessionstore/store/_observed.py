"""What the store reports of its writes and reads: one log record and one span per call.

The SQL core calls these around each append (``append``, a ``create_session`` with events,
each session of a ``write_sessions``) and read; the async store runs the same core, so its
calls are reported the same way. Retries are reported by ``RetryPolicy.run``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

from .._telemetry import Attribute, log_record, logger, span
from ._contract import AppendResult, ExpectedSeq
from ._driver import Prepared

__all__ = ["STORE_LOG", "log_append", "log_erase", "observe_append", "observe_read"]

STORE_LOG = logger("store")


def _tokens(prepared: Sequence[Prepared]) -> int | None:
    counts = [p.token_count for p in prepared if p.token_count is not None]
    return sum(counts) if counts else None


def _deferred(prepared: Sequence[Prepared]) -> int:
    """How many of the batch's events are counted when first read (``_counts``)."""
    return sum(1 for p in prepared if p.deferred)


def _token_note(tokens: int | None, deferred: int) -> str:
    """The tokens part of an append's log message."""
    counted = f"{tokens} tokens" if tokens is not None else ""
    later = f"{deferred} event(s) counted when read" if deferred else ""
    return ", ".join(part for part in (counted, later) if part) or "no tokens"


@contextlib.contextmanager
def observe_append(
    db_system: str,
    operation: str,
    session_id: str,
    prepared: Sequence[Prepared],
    expected_seq: ExpectedSeq | None,
) -> Iterator[Callable[[AppendResult], None]]:
    """A span around one append; call the yielded function with its result (logs the batch)."""
    tokens = _tokens(prepared)
    attributes: dict[str, Attribute] = {
        "db.system.name": db_system,
        "db.operation.name": operation,
        "sessionstore.session_id": session_id,
        "sessionstore.event_count": len(prepared),
        "sessionstore.tokens": tokens,
        "sessionstore.tokens.deferred": _deferred(prepared),
        "sessionstore.expected_seq": str(expected_seq) if expected_seq is not None else None,
    }
    with span(f"sessionstore.{operation}", attributes, client=True) as current:

        def done(result: AppendResult) -> None:
            first = result.seqs[0] if result.seqs else None
            current.set(
                {
                    "sessionstore.first_seq": first,
                    "sessionstore.last_seq": result.last_seq,
                    "sessionstore.deduplicated": result.deduplicated,
                }
            )
            log_append(operation, session_id, prepared, result, expected_seq)

        yield done


def log_append(
    operation: str,
    session_id: str,
    prepared: Sequence[Prepared],
    result: AppendResult,
    expected_seq: ExpectedSeq | None,
) -> None:
    """The record of one committed batch (DEBUG: one per append)."""
    tokens, deferred = _tokens(prepared), _deferred(prepared)
    log_record(
        STORE_LOG,
        logging.DEBUG,
        "append",
        "{operation}: session {session_id}, {event_count} event(s) at seqs {first_seq}-{last_seq}, "
        "{token_note}, deduplicated={deduplicated}",
        operation=operation,
        session_id=session_id,
        event_count=len(prepared),
        first_seq=result.seqs[0] if result.seqs else None,
        last_seq=result.last_seq,
        first_position=result.positions[0] if result.positions else None,
        last_position=result.positions[-1] if result.positions else None,
        tokens=tokens,
        tokens_deferred=deferred,
        token_note=_token_note(tokens, deferred),
        expected_seq=expected_seq,
        deduplicated=result.deduplicated,
    )


@contextlib.contextmanager
def observe_read(
    db_system: str, operation: str, **attributes: int | str | None
) -> Iterator[Callable[[int], None]]:
    """A span around one read; call the yielded function with the number of events returned."""
    named = {f"sessionstore.{key}": value for key, value in attributes.items()}
    with span(
        f"sessionstore.{operation}",
        {"db.system.name": db_system, "db.operation.name": operation, **named},
        client=True,
    ) as current:

        def done(count: int) -> None:
            current.set({"sessionstore.event_count": count})

        yield done


def log_erase(session_id: str, *, reason: str, **receipt: str | int | bool | None) -> None:
    """The record of one session erased (INFO, kind "erase"): call once per erasure receipt,
    with the receipt's numbers as fields (``event_count=``, ``head_hash=``, ``mode=`` ...)."""
    log_record(
        STORE_LOG,
        logging.INFO,
        "erase",
        "erased session {session_id}: {reason}",
        session_id=session_id,
        reason=reason,
        **receipt,
    )

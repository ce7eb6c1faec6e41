"""Retrying transient storage failures: a dropped connection, a restarting server.

Every store call that is safe to repeat runs through ``RetryPolicy.run``: reads, blob and
snapshot writes (content-addressed or keyed, so a repeat is a no-op) and appends, which are
idempotent by event id (a retry after a lost acknowledgement returns the original result).
Only errors the backend marks transient are retried (``OperationalError.transient``); a
``ConcurrencyError``, a constraint violation or a lock timeout never is. When the attempts or
the time budget run out the call raises ``StoreUnavailableError``.

Each retry is logged (WARNING, ``sessionstore.store``, kind "retry") and added as a "retry"
event to the current span; giving up is logged too, then raised.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .._telemetry import add_span_event, log_record, logger
from ..errors import OperationalError, StoreUnavailableError, ValidationError

__all__ = ["DEFAULT_RETRY", "NO_RETRY", "RetryPolicy"]

_T = TypeVar("_T")
_LOG = logger("store")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a store call is retried after a transient failure.

    The pause before retry ``n`` (1-based) is drawn between half and all of
    ``min(max_delay, base_delay * 2 ** (n - 1))`` ("equal jitter"): it grows exponentially,
    and concurrent clients spread out instead of reconnecting in lockstep.

    Attributes:
        attempts: tries in all, the first included (1 turns retrying off). The default, 40, is
            more than fit in the default budget whatever the jitter draws, so the budget ends
            retrying: a database that is back within 30 s is never reported unavailable.
        base_delay: seconds before the first retry (before jitter).
        max_delay: the longest single pause, in seconds.
        budget_seconds: no retry starts once this much time has passed since the first try.
    """

    attempts: int = 40
    base_delay: float = 0.05
    max_delay: float = 2.0
    budget_seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            msg = f"retry attempts must be an int >= 1, got {self.attempts!r}"
            raise ValidationError(msg, field="attempts")
        for name in ("base_delay", "max_delay", "budget_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                msg = f"retry {name} must be a finite number of seconds >= 0, got {value!r}"
                raise ValidationError(msg, field=name)

    def pause(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        ceiling = float(min(self.max_delay, self.base_delay * 2 ** min(retry - 1, 62)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def run(
        self,
        operation: Callable[[], _T],
        *,
        what: str,
        session_id: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> _T:
        """``operation()``, retried on transient ``OperationalError`` within the policy's bounds.

        ``what`` names the call and ``session_id`` its session (if it has one) in the log
        records and span events of each retry. ``sleep`` pauses between tries: the async store
        passes one that awaits ``asyncio.sleep`` (its calls run in a greenlet on the event loop,
        which ``time.sleep`` would block). ``clock`` measures the budget (seconds, monotonic).

        Raises:
            StoreUnavailableError: still failing after the last attempt or the time budget.
        """
        started = clock()
        attempt = 1
        while True:
            try:
                return operation()
            except OperationalError as error:
                if not error.transient:
                    raise
                elapsed = clock() - started
                pause = self.pause(attempt)
                gave_up = attempt >= self.attempts or elapsed + pause > self.budget_seconds
                _report_retry(what, session_id, attempt, elapsed, None if gave_up else pause, error)
                if gave_up:
                    raise StoreUnavailableError(what, attempt, elapsed, error) from error
                sleep(pause)
                attempt += 1


def _report_retry(
    what: str, session_id: str | None, attempt: int, elapsed: float, pause: float | None, error: Exception
) -> None:
    """One retry (``pause`` seconds from now), or the end of retrying (``pause`` None)."""
    fields = {
        "operation": what,
        "session_id": session_id,
        "attempt": attempt,
        "elapsed_seconds": round(elapsed, 3),
        "pause_seconds": None if pause is None else round(pause, 3),
        "gave_up": pause is None,
        "error": str(error),
    }
    message = (
        "{operation} failed on attempt {attempt} after {elapsed_seconds}s, giving up: {error}"
        if pause is None
        else "{operation} failed on attempt {attempt} (transient), retrying in {pause_seconds}s: {error}"
    )
    log_record(_LOG, logging.WARNING, "retry", message, **fields)
    add_span_event("retry", {f"sessionstore.{key}": value for key, value in fields.items()})


#: The policy ``open_store`` uses unless told otherwise.
DEFAULT_RETRY = RetryPolicy()
#: One attempt: every failure reaches the caller at once (still as StoreUnavailableError when transient).
NO_RETRY = RetryPolicy(attempts=1)

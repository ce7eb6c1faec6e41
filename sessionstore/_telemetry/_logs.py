"""Structured log records under the ``sessionstore`` logger.

Each record is one operation: a readable message and, in ``extra``, its fields as attributes
of the ``LogRecord`` (``record.session_id``, ``record.event_count`` ...) plus
``record.sessionstore_event`` naming the kind ("append", "stage", "compaction", "revert",
"erase", "retry"), so a JSON formatter or a log pipeline gets the numbers without parsing text.

Quiet by default: the ``sessionstore`` logger has a ``NullHandler``, so nothing is printed
(not even warnings, through logging's last-resort handler) unless the host application
configures logging. A record is built only when its level is enabled.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["LOGGER_NAME", "log_record", "logger"]

LOGGER_NAME = "sessionstore"
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())

#: LogRecord attributes a field may not shadow (``logging`` raises KeyError for most of them).
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def logger(layer: str) -> logging.Logger:
    """The logger of one layer: ``sessionstore.store``, ``sessionstore.pipeline`` ..."""
    return logging.getLogger(f"{LOGGER_NAME}.{layer}")


def log_record(log: logging.Logger, level: int, kind: str, message: str, **fields: Any) -> None:
    """Emit one record of ``kind`` if ``level`` is enabled on ``log``.

    Args:
        message: a ``str.format`` template over ``fields`` (``"appended {event_count} events"``);
            the record's message is the formatted text (no ``%`` arguments are left in it).
        fields: the record's structured fields, set as ``LogRecord`` attributes.
    """
    if not log.isEnabledFor(level):
        return
    clash = _RESERVED & fields.keys()
    if clash:  # a programming error here, not the caller's: fail loudly in tests
        msg = f"log fields shadow LogRecord attributes: {sorted(clash)}"
        raise ValueError(msg)
    # stacklevel=2: the record names the function that logged, not this helper.
    log.log(level, message.format(**fields), extra={"sessionstore_event": kind, **fields}, stacklevel=2)

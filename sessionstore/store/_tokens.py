"""Token counting at append time.

Tokens are counted once, when an event is appended, and stored with it; projections add
stored counts and never re-tokenize history. The default counter uses tiktoken's
``cl100k_base`` read from the BPE file shipped inside this package and checked against its
published hash (``_cl100k.py``): nothing is downloaded at run time. Stored counts are raw
encoding counts; cl100k undercounts Claude's tokenizer, so the token estimate applies a
calibration factor when it reads them (see docs/projections.md, "Token accounting") — changing
the factor never needs a re-count.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ValidationError
from ._cl100k import cl100k_encoding

if TYPE_CHECKING:
    from ..events import Event

__all__ = ["DEFAULT_ENCODING", "MAX_ENCODED_CHARS", "TiktokenCounter", "TokenCounter", "check_token_counter"]

#: The default counter's name: cl100k_base from the shipped file. The name is part of every
#: projection snapshot's key; it is the one snapshots were stored under from the start, so they
#: stay valid (the counts are cl100k_base's, token for token).
DEFAULT_ENCODING = "cl100k_base_offline"
#: Encoding names read from the shipped cl100k_base file rather than tiktoken's registry.
_SHIPPED_CL100K = frozenset({DEFAULT_ENCODING, "cl100k_base"})

#: The longest string handed to the encoder at once. BPE merging is quadratic in the length
#: of a piece, and a run without whitespace (base64, minified code) is one piece: a 100 MB
#: run took minutes and gigabytes. Longer text is counted in chunks cut before whitespace
#: where there is some, which changes a count by at most a token or so per cut.
MAX_ENCODED_CHARS = 4096


def _last_space_before_word(window: str) -> int:
    """Index of the last space or newline in ``window`` that a word follows, or 0 when none.

    tiktoken attaches one space to the word after it, so a cut just before that space keeps the
    word's token intact. ``str.rfind`` rather than a regex: this runs over every long text
    appended, and a backtracking ``.*\\s(?=\\S)`` made counting ordinary text 1.5x slower.
    """
    end = len(window) - 1
    while end > 0:
        space = max(window.rfind(" ", 0, end), window.rfind("\n", 0, end))
        if space <= 0:
            return 0
        if not window[space + 1].isspace():
            return space
        end = space
    return 0


def bounded_chunks(text: str, bound: int = MAX_ENCODED_CHARS) -> Iterator[str]:
    """``text`` cut into pieces of at most ``bound`` characters, preferably before a word."""
    start = 0
    while len(text) - start > bound:
        window = text[start : start + bound]
        # No space to cut at (a long run): cut at the bound itself.
        cut = _last_space_before_word(window) or bound
        yield window[:cut]
        start += cut
    yield text[start:]


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

    def count_text(self, text: str) -> int:
        """Tokens of ``text``: what the pipeline, compaction and the importer measure with."""
        ...


#: The longest ``TokenCounter.name``: the snapshots' tokenizer column holds 64 characters.
MAX_COUNTER_NAME = 64


def check_token_counter(counter: object) -> None:
    """Refuse a counter that lacks part of ``TokenCounter`` now, not at some later count.

    Raises:
        ValidationError: ``name``, ``count`` or ``count_text`` is missing (or not callable), or
            ``name`` is not a str of 1 to ``MAX_COUNTER_NAME`` characters (snapshots are keyed
            by it: a longer one failed the first snapshot, after its events were written).
    """
    missing = [] if hasattr(counter, "name") else ["name"]
    missing += [method for method in ("count", "count_text") if not callable(getattr(counter, method, None))]
    if missing:
        msg = (
            f"token_counter {type(counter).__name__} lacks {', '.join(missing)}: a TokenCounter "
            "has name, count(event) and count_text(text)"
        )
        raise ValidationError(msg, field="token_counter")
    name = counter.name  # type: ignore[attr-defined]
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_COUNTER_NAME:
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:77] + "...")
        msg = f"token_counter's name must be a str of 1 to {MAX_COUNTER_NAME} characters, not {shown}"
        raise ValidationError(msg, field="token_counter")


class TiktokenCounter:
    """Raw token counts of a tiktoken encoding.

    Args:
        encoding: ``cl100k_base`` (also under its default name ``cl100k_base_offline``), read
            from the file shipped in the package, or another tiktoken encoding name, which
            tiktoken loads (and may download) itself.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding

    @property
    def name(self) -> str:
        """The encoding's name."""
        return self.encoding_name

    @cached_property
    def _encoding(self):  # type: ignore[no-untyped-def]  # tiktoken ships no type stubs
        if self.encoding_name in _SHIPPED_CL100K:
            return cl100k_encoding(self.encoding_name)
        import tiktoken

        return tiktoken.get_encoding(self.encoding_name)

    def count_text(self, text: str) -> int:
        """Raw encoding tokens of ``text`` (special-token text is counted as ordinary text).

        Text longer than ``MAX_ENCODED_CHARS`` is counted in bounded chunks, in linear time.
        """
        encode = self._encoding.encode_ordinary
        if len(text) <= MAX_ENCODED_CHARS:
            return len(encode(text))
        return sum(len(encode(chunk)) for chunk in bounded_chunks(text))

    def count(self, event: Event) -> int | None:
        """Tokens of the event's countable text, None when it has none."""
        texts = event.countable_text()
        if texts is None:
            return None
        return sum(self.count_text(text) for text in texts if text)

"""The cl100k_base encoding from the BPE file shipped inside this package.

tiktoken itself would download ``cl100k_base.tiktoken`` on first use. The file ships in
``sessionstore/store/data/`` instead, and is checked against the SHA-256 that tiktoken's own
registry (``tiktoken_ext/openai_public.py``) publishes for it before a single rank is read:
a damaged or swapped file raises rather than silently changing every token count.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.resources
from functools import cache
from typing import Any

from ..errors import DataCorruptionError

__all__ = ["CL100K_PATTERN", "CL100K_SHA256", "CL100K_SPECIAL_TOKENS", "cl100k_encoding", "parse_bpe"]

#: The published SHA-256 of cl100k_base.tiktoken (tests/test_tokens.py holds it to tiktoken's).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
#: cl100k_base's pre-tokenizer pattern and special tokens, as tiktoken's registry defines them.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_RESOURCE = "data/cl100k_base.tiktoken"


def parse_bpe(contents: bytes, *, expected_sha256: str, source: str) -> dict[bytes, int]:
    """The mergeable ranks of a ``.tiktoken`` file (``base64-token rank`` per line).

    Raises:
        DataCorruptionError: the bytes do not hash to ``expected_sha256``, or a line is malformed.
    """
    actual = hashlib.sha256(contents).hexdigest()
    if actual != expected_sha256:
        msg = (
            f"{source}: SHA-256 {actual} is not the published {expected_sha256}: the BPE file is "
            "damaged or was replaced (reinstall sessionstore)"
        )
        raise DataCorruptionError(msg)
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(contents.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as e:
            msg = f"{source}: line {number} is not 'base64-token rank': {e}"
            raise DataCorruptionError(msg) from e
    return ranks


@cache
def cl100k_encoding(name: str) -> Any:  # tiktoken ships no type stubs
    """A ``tiktoken.Encoding`` named ``name`` with cl100k_base's ranks, from the shipped file.

    Raises:
        DataCorruptionError: the shipped file fails its hash check.
    """
    import tiktoken

    class ShippedEncoding(tiktoken.Encoding):
        """The encoding without tiktoken's Python copy of the ranks; pickled, it is rebuilt by name."""

        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return cl100k_encoding, (self.name,)

    resource = importlib.resources.files("sessionstore.store").joinpath(_RESOURCE)
    ranks = parse_bpe(resource.read_bytes(), expected_sha256=CL100K_SHA256, source=str(resource))
    encoding = ShippedEncoding(
        name=name,
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )
    # The encoder (Rust) holds its own copies of the ranks; tiktoken keeps the Python dict only
    # to pickle the encoding, which ``__reduce__`` does by name instead. Emptied, it frees ~14 MB
    # of the ~38 MB the encoding takes in every process that counts (bench/append.py, memory).
    ranks.clear()
    return encoding

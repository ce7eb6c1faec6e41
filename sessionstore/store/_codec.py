"""How payloads and blobs are compressed at rest: the codecs, and when a value is worth packing.

An event's payload is hashed as its canonical text; compression is a storage encoding under the
hash chain. A payload of ``PACK_MIN_BYTES`` or more is stored *packed*: the events row's
``payload`` column holds ``''`` and ``payload_packed`` holds one codec byte followed by the
compressed UTF-8 of the text. A smaller one, and every row written before revision 0006, keeps
its text in ``payload`` with ``payload_packed`` NULL. Reads unpack only what a caller touches
(``RecordedEvent.payload`` is filled on first use).

Blobs name their codec in the ``compression`` column (``none``, ``zlib``, ``zstd``). A snapshot's
state of ``PACK_MIN_BYTES`` or more is stored as zstd behind ``SNAPSHOT_PACKED`` (not in an
encrypted session: sealed, as its payloads); one stored before, or that does not shrink, as it is.

New values are written with zstd (the ``zstandard`` package) at level 1: on bench/append.py's
messages and on real Claude Code transcripts it packs as small as zlib at level 1 (0.401 and
0.464 of the raw bytes, against 0.410 and 0.463) for a third of the CPU (bench/codecs.py;
bench/README.md has the numbers). Every append compresses its payloads: level 3 packs 2-6%
smaller for ~25% more compression CPU, the largest single cost of a batch append with token
counting off. Decompression is as fast at either level, and any level reads back. zlib stays
readable: blobs written before zstd were zlib.
"""

from __future__ import annotations

import threading
import zlib
from typing import TYPE_CHECKING

from ..errors import DataCorruptionError

if TYPE_CHECKING:
    import zstandard

__all__ = [
    "BLOB_CODECS",
    "MAX_DECOMPRESSED_BYTES",
    "PACK_MIN_BYTES",
    "SNAPSHOT_PACKED",
    "compress_blob",
    "decompress_blob",
    "pack_payload",
    "pack_snapshot",
    "unpack_payload",
    "unpack_snapshot",
]

#: Payloads and blobs shorter than this are stored as they are. Below 256 bytes zstd saves
#: ~50 bytes a row (0.4% of the corpus's payload bytes) for a compression on every append and a
#: decompression on every read of them (bench/codecs.py prints the savings by size).
PACK_MIN_BYTES = 256
#: The most bytes one payload or blob decompresses to: a stored value that expands further was
#: altered (a few kilobytes of crafted zstd or zlib can expand to gigabytes), and reading it
#: raises DataCorruptionError instead of allocating the memory.
MAX_DECOMPRESSED_BYTES = 1 << 30
#: zstd level 1: level 3 (zstd's default) is ~25% slower to compress for 2-6% fewer bytes.
_ZSTD_LEVEL = 1

#: Leads a snapshot state stored as zstd (a projection's own state never starts with a NUL).
SNAPSHOT_PACKED = b"\x00sessionstore-zstd-snapshot:v1\x00"

#: The codec byte that leads a packed payload.
_ZLIB, _ZSTD = 1, 2
#: Blob codecs by the name the blobs table's ``compression`` column holds.
BLOB_CODECS = ("none", "zlib", "zstd")

# A zstd compression context is not safe to share between threads: one per thread.
_local = threading.local()


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """This thread's zstd compressor and decompressor (imported on first use: startup stays fast)."""
    pair: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(_local, "zstd", None)
    if pair is None:
        import zstandard

        pair = zstandard.ZstdCompressor(level=_ZSTD_LEVEL), zstandard.ZstdDecompressor()
        _local.zstd = pair
    return pair


def _compress(data: bytes) -> bytes | None:
    """zstd of ``data``, or None when that would not be smaller."""
    packed = _zstd()[0].compress(data)
    return packed if len(packed) < len(data) else None


def _decompress(codec: str, body: bytes | memoryview) -> bytes:
    """The bytes ``body`` decompresses to with ``codec`` (``zstd`` or ``zlib``).

    Raises:
        ValueError: more than MAX_DECOMPRESSED_BYTES, or data left after the end of the stream.
        zstd.ZstdError, zlib.error: bytes that do not decompress.
    """
    if codec == "zstd":
        import zstandard

        # max_output_size bounds only frames that do not state their size; zstd allocates the
        # size a frame states, so a larger one is refused before anything is allocated.
        if zstandard.frame_content_size(body) > MAX_DECOMPRESSED_BYTES:
            raise ValueError(f"decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")
        data: bytes = _zstd()[1].decompress(body, max_output_size=MAX_DECOMPRESSED_BYTES)
        if len(data) > MAX_DECOMPRESSED_BYTES:
            raise ValueError(f"decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")
        return data
    inflater = zlib.decompressobj()
    data = inflater.decompress(body, MAX_DECOMPRESSED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return data


def pack_payload(text: str) -> bytes | None:
    """The ``payload_packed`` value of a payload, or None when it is stored as text.

    Called outside any transaction (when an append prepares its events).
    """
    if len(text) < PACK_MIN_BYTES:  # characters <= UTF-8 bytes: short texts skip the encode
        return None
    data = text.encode()
    packed = _compress(data)
    return None if packed is None or len(packed) + 1 >= len(data) else bytes((_ZSTD,)) + packed


def unpack_payload(packed: object, *, session_id: str | None = None, seq: int | None = None) -> str:
    """The text of a packed payload (of the event at ``session_id`` and ``seq``, for errors).

    ``packed`` is the ``payload_packed`` value as the database returned it: bytes, bytearray or
    memoryview (psycopg). Anything else (a TEXT or INTEGER value written into the column) is an
    altered row, not something to convert: ``bytes(12345)`` would allocate 12345 bytes.

    Raises:
        DataCorruptionError: ``packed`` is not bytes.
        DataCorruptionError: an unknown codec byte, bytes that do not decompress, or that
            decompress to more than MAX_DECOMPRESSED_BYTES.
    """
    if not isinstance(packed, (bytes, bytearray, memoryview)):
        kind = type(packed).__name__
        msg = f"session {session_id!r}, seq {seq}: the stored payload is not bytes but {kind}"
        raise DataCorruptionError(msg, session_id=session_id, seq=seq)
    packed = bytes(packed)  # the same object when it is bytes
    codec, body = packed[:1], memoryview(packed)[1:]
    try:
        if codec == b"\x02":
            data = _decompress("zstd", body)
        elif codec == b"\x01":
            data = _decompress("zlib", body)
        else:
            raise ValueError(f"unknown payload codec {codec.hex() or 'none'}")
        return data.decode()
    except Exception as e:  # zstd.ZstdError, zlib.error, UnicodeDecodeError: all mean altered bytes
        msg = f"session {session_id!r}, seq {seq}: the stored payload does not decompress ({e})"
        raise DataCorruptionError(msg, session_id=session_id, seq=seq) from e


def compress_blob(data: bytes) -> tuple[bytes, str]:
    """(stored bytes, codec name) of a blob: zstd when that is smaller, else the bytes as they are."""
    if len(data) >= PACK_MIN_BYTES:
        packed = _compress(data)
        if packed is not None:
            return packed, "zstd"
    return data, "none"


def decompress_blob(stored: bytes, codec: str, sha256: str) -> bytes:
    """The bytes of a stored blob.

    Raises:
        DataCorruptionError: an unknown codec, bytes that do not decompress, or that decompress
            to more than MAX_DECOMPRESSED_BYTES.
    """
    try:
        if codec in ("zstd", "zlib"):
            return _decompress(codec, stored)
    except Exception as e:  # zstd.ZstdError, zlib.error, ValueError (over the limit)
        raise DataCorruptionError(f"blob {sha256} does not decompress ({e})") from e
    if codec == "none":
        return stored
    raise DataCorruptionError(f"blob {sha256}: unknown compression {codec!r}")


def pack_snapshot(state: bytes) -> bytes:
    """The stored form of a snapshot's state: zstd behind ``SNAPSHOT_PACKED`` when that is smaller.

    A long session's state is tens of MB of JSON that the insert copies twice over (the driver's
    binding, the row): packed, an import's end-of-import snapshot is no longer its peak.
    """
    if len(state) < PACK_MIN_BYTES:
        return state
    packed = _compress(state)
    if packed is None or len(packed) + len(SNAPSHOT_PACKED) >= len(state):
        return state
    return SNAPSHOT_PACKED + packed


def unpack_snapshot(stored: bytes) -> bytes:
    """A snapshot's state as it was put, from its stored form (``pack_snapshot``).

    A packed state that does not decompress is returned as stored: the projection's ``load``
    then refuses it, so a reader folds the log instead and ``verify`` reports the snapshot.
    """
    if not stored.startswith(SNAPSHOT_PACKED):
        return stored
    try:
        return _decompress("zstd", memoryview(stored)[len(SNAPSHOT_PACKED) :])
    except Exception:  # zstd.ZstdError, ValueError (over the limit): a damaged cache
        return stored

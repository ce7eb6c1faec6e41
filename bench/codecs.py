"""Payload compression: zlib against zstd on generated and real payloads, and the store on disk.

Usage::

    python bench/codecs.py [--messages N] [--corpus DIR]

What is measured
----------------
1. Codecs. Every payload of two workloads is compressed on its own, as the store does (one row,
   one value): bench/append.py's generated messages (seeded), and the payloads of the Claude
   Code transcripts in ``--corpus`` (default ``../shared/corpus`` beside the repository) as
   ``import`` stores them. For zlib levels 1 and 6 and zstd levels 1, 3 and 6: stored bytes
   over raw bytes with the store's rule (values under 256 bytes, and values that would not
   shrink, stay as they are), and compression and decompression speed (CPU MB/s of raw bytes).
   Then, for the codec the store uses, the saving by payload size: why small payloads are not
   worth compressing.
2. The store. The corpus is imported into a fresh SQLite store twice in the same run, payloads
   compressed (this version) and stored as text (the store's threshold raised past every
   payload: the layout before revision 0006): the database file after a checkpoint over the
   payload text it holds and over the transcripts' bytes, the import's time, and a full read of
   every session (records only, then using every payload's text).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sqlite3
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import zstandard
from append import make_messages, to_event

import sessionstore
from sessionstore.events._base import encode_event
from sessionstore.store import _codec

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus"
#: What the store uses (store/_codec.py).
CHOSEN = "zstd-1"
SIZE_EDGES = (0, 128, 256, 512, 1024, 4096, 1 << 62)

Codec = tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]


def codecs() -> dict[str, Codec]:
    found: dict[str, Codec] = {
        "zlib-1": (lambda b: zlib.compress(b, 1), zlib.decompress),
        "zlib-6": (lambda b: zlib.compress(b, 6), zlib.decompress),
    }
    for level in (1, 3, 6):
        found[f"zstd-{level}"] = (
            zstandard.ZstdCompressor(level=level).compress,
            zstandard.ZstdDecompressor().decompress,
        )
    return found


def generated_payloads(count: int) -> list[bytes]:
    return [encode_event(to_event(m), index=0).encode() for m in make_messages(count)]


@contextmanager
def payloads_uncompressed(uncompressed: bool) -> Iterator[None]:
    """With ``uncompressed``, the store keeps every payload as text (a benchmark-only switch)."""
    threshold = _codec.PACK_MIN_BYTES
    if uncompressed:
        _codec.PACK_MIN_BYTES = sys.maxsize
    try:
        yield
    finally:
        _codec.PACK_MIN_BYTES = threshold


def transcripts(corpus: Path) -> list[Path]:
    return sorted(corpus.rglob("*.jsonl"))


def imported(store: sessionstore.SessionStore) -> dict[str, int]:
    """Session id -> event count of everything in the store."""
    return {s.id: len(store.read(s.id)) for s in store.list_sessions(limit=100_000)}


def corpus_payloads(files: list[Path], workdir: Path) -> list[bytes]:
    store = sessionstore.open_store(workdir / "payloads.db", migrate=True, token_counter=None)
    try:
        sessionstore.import_claude_code(store, files, skip_bad_lines=True)
        return [e.payload.encode() for sid in imported(store) for e in store.read(sid)]
    finally:
        store.close()


def stored_size(raw: bytes, packed: bytes) -> int:
    """What the store keeps for ``raw``: the codec byte and ``packed``, or ``raw`` itself."""
    if len(raw) < _codec.PACK_MIN_BYTES or len(packed) + 1 >= len(raw):
        return len(raw)
    return len(packed) + 1


def compare_codecs(name: str, items: list[bytes]) -> None:
    raw = sum(map(len, items))
    sizes = sorted(map(len, items))
    print(f"\n{name}: {len(items)} payloads, {raw / 1e6:.1f} MB, median {sizes[len(sizes) // 2]} B")
    print(f"  {'codec':<8} {'stored/raw':>10} {'compress MB/s':>14} {'decompress MB/s':>16}")
    for label, (compress, decompress) in codecs().items():
        gc.collect()
        start = time.process_time()
        packed = [compress(b) for b in items]
        pack_cpu = time.process_time() - start
        start = time.process_time()
        for p in packed:
            decompress(p)
        unpack_cpu = time.process_time() - start
        stored = sum(stored_size(b, p) for b, p in zip(items, packed, strict=True))
        mark = "  <- the store's" if label == CHOSEN else ""
        print(
            f"  {label:<8} {stored / raw:>10.3f} {raw / 1e6 / pack_cpu:>14.0f} "
            f"{raw / 1e6 / unpack_cpu:>16.0f}{mark}"
        )
    compress = codecs()[CHOSEN][0]
    print(f"  {CHOSEN} by payload size: payloads, raw bytes, bytes saved, share of all bytes saved")
    for low, high in itertools.pairwise(SIZE_EDGES):
        chosen = [b for b in items if low <= len(b) < high]
        if not chosen:
            continue
        size = sum(map(len, chosen))
        saved = size - sum(len(compress(b)) + 1 for b in chosen)
        upper = "" if high == SIZE_EDGES[-1] else f"{high}"
        print(f"    [{low}, {upper}) B: {len(chosen):>6} {size:>11} {saved:>11} {saved / raw:>8.1%}")


def database_bytes(path: Path) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return path.stat().st_size


def timed(action: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def store_on_corpus(files: list[Path], workdir: Path) -> None:
    transcript_bytes = sum(f.stat().st_size for f in files)
    print(f"\nThe store on the corpus: {len(files)} transcripts, {transcript_bytes / 1e6:.1f} MB")
    results = {}
    for label, uncompressed in (("compressed", False), ("as text", True)):
        path = workdir / f"store-{label.replace(' ', '-')}.db"
        store = sessionstore.open_store(path, migrate=True, token_counter=None)
        try:
            with payloads_uncompressed(uncompressed):
                start = time.perf_counter()
                sessionstore.import_claude_code(store, files, skip_bad_lines=True)
                seconds = time.perf_counter() - start
            ids = list(imported(store))
            payload = sum(len(e.payload.encode()) for sid in ids for e in store.read(sid))

            def read(ids: list[str] = ids, store: sessionstore.SessionStore = store) -> None:
                for sid in ids:
                    store.read(sid)

            def read_payloads(ids: list[str] = ids, store: sessionstore.SessionStore = store) -> None:
                for sid in ids:
                    for e in store.read(sid):
                        assert e.payload

            reading, reading_payloads = timed(read), timed(read_payloads)
        finally:
            store.close()
        disk = database_bytes(path)
        results[label] = (disk, seconds, reading, reading_payloads)
        print(
            f"  payloads {label:<10}: disk {disk / 1e6:6.1f} MB = {disk / payload:.2f}x the "
            f"{payload / 1e6:.1f} MB of payload text, {disk / transcript_bytes:.2f}x the transcripts; "
            f"import {seconds:.1f} s; "
            f"full read {reading * 1000:.0f} ms, {reading_payloads * 1000:.0f} ms using every payload"
        )
    (disk, seconds, reading, payloads), (disk0, seconds0, reading0, payloads0) = results.values()
    print(
        f"  compressed / as text: disk {disk / disk0:.2f}, import time {seconds / seconds0:.2f}, "
        f"full read {reading / reading0:.2f}, using every payload {payloads / payloads0:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="generated messages (default 2000)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of .jsonl transcripts")
    args = parser.parse_args(argv)
    print(
        f"sessionstore {sessionstore.__version__}, zstandard {zstandard.__version__}, "
        f"zlib {zlib.ZLIB_VERSION}"
    )
    compare_codecs(
        f"bench/append.py's generated messages ({args.messages})", generated_payloads(args.messages)
    )
    files = transcripts(args.corpus)
    if not files:
        print(f"\nNo transcripts under {args.corpus}: the corpus rows are skipped.")
        return 0
    with tempfile.TemporaryDirectory(prefix="sessionstore-codecs-") as tmp:
        compare_codecs(f"payloads of the corpus ({args.corpus})", corpus_payloads(files, Path(tmp)))
        store_on_corpus(files, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())

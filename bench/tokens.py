"""Token counting of long runs without whitespace: bounded chunks against one encode call.

A run without whitespace (base64, minified code) is one BPE piece, and merging a piece is
superlinear in its length, so the reference (``encode_ordinary`` on the whole run, what the
counter did before it cut text into chunks) grows much faster than the size. The counter
(``TiktokenCounter.count_text``) cuts text longer than ``MAX_ENCODED_CHARS`` into chunks and
should grow linearly. The table prints, per size, both times, their ratio, the counter's time
per MB (flat when linear) and the count's difference from the reference; then the same on
ordinary generated text, where the counts must agree within 1%.

    python bench/tokens.py            # runs up to 4 MB (reference) / 64 MB (counter)
    python bench/tokens.py --quick    # smaller sizes, a few seconds
"""

from __future__ import annotations

import argparse
import random
import time

from _common import print_table, text_pool

from sessionstore.store import TiktokenCounter


def _seconds(fn: object, *args: object) -> tuple[float, int]:
    started = time.perf_counter()
    result = fn(*args)  # type: ignore[operator]
    return time.perf_counter() - started, int(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    args = parser.parse_args()
    counter = TiktokenCounter()
    encode = counter._encoding.encode_ordinary  # the reference: one call on the whole text
    counter.count_text("warm up the encoder")

    reference_sizes = [64_000, 256_000, 1_000_000] if args.quick else [256_000, 1_000_000, 4_000_000]
    counter_only = [4_000_000] if args.quick else [16_000_000, 64_000_000]
    rng = random.Random(7)
    # Letters only: tiktoken's pre-split keeps a letter run as one piece (digits and "+/" would cut it).
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    run = "".join(rng.choice(alphabet) for _ in range(max(reference_sizes + counter_only)))

    rows = []
    for size in reference_sizes + counter_only:
        text = run[:size]
        ours, counted = _seconds(counter.count_text, text)
        if size in reference_sizes:
            ref, exact = _seconds(lambda t: len(encode(t)), text)
            ratio, diff = f"{ref / ours:.1f}x", f"{(counted - exact) / exact:+.3%}"
            ref_s = f"{ref:.2f}"
        else:
            ratio, diff, ref_s = "-", "-", "(skipped)"
        rows.append([f"{size / 1e6:g} MB", ref_s, f"{ours:.2f}", f"{ours / (size / 1e6):.2f}", ratio, diff])
    print("A run of letters without whitespace or punctuation (one BPE piece):")
    print_table(
        [("size", "", 8), ("one encode s", "", 13), ("chunked s", "", 10), ("chunked s/MB", "", 13),
         ("speed-up", "", 9), ("count vs exact", "", 15)],
        rows,
    )

    prose = text_pool(random.Random(11), 2_000_000 if not args.quick else 300_000)
    ref, exact = _seconds(lambda t: len(encode(t)), prose)
    ours, counted = _seconds(counter.count_text, prose)
    print(
        f"\nOrdinary text ({len(prose) / 1e6:.1f} MB of generated tool output): one encode {ref:.2f} s, "
        f"chunked {ours:.2f} s ({ours / ref:.2f}x); {counted:,} vs {exact:,} tokens "
        f"({(counted - exact) / exact:+.4%}; the bound is 1%)"
    )


if __name__ == "__main__":
    main()

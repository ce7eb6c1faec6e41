"""The ``verify`` and ``heads`` commands: the audit layer's verification, printed.

``sessionstore.audit`` checks chains and snapshots and returns the results; this module reads
the arguments, prints one line (or JSON object) per session and turns the outcome into an exit
status.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, TextIO

from ..audit import all_heads, format_head, missing_session, read_heads, verify_all, verify_session
from ..errors import EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE, SessionNotFoundError
from ..store import ChainHead, SessionStore
from ._progress import counting

__all__ = ["run_heads", "run_verify"]


def run_heads(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """The CLI's ``heads [SESSION] [--json]``: one ``SESSION SEQ HASH`` line per session."""
    heads = [store.head(args.session_id)] if args.session_id is not None else all_heads(store)
    for head in heads:
        line = json.dumps(dataclasses.asdict(head)) if args.json else format_head(head)
        print(line, file=out, flush=True)
    return EXIT_OK


def _single_anchor(args: argparse.Namespace) -> ChainHead | str | None:
    """The anchor for ``verify SESSION``: ``--head HASH``, or the session's line of ``--heads``."""
    if args.head is not None:
        return str(args.head)
    if args.heads is not None:
        return read_heads(args.heads).get(args.session_id)
    return None


def run_verify(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """The CLI's ``verify [SESSION] [--json] [--counts] [--head HASH | --heads FILE]``: 0 when everything
    verifies, else ``EXIT_INTEGRITY``.

    With a session: its line (or JSON object). Without: one line per session and a total (with
    ``--json``, one object: ``{"sessions": [...], "total", "failed", "ok"}``).
    """
    if args.head is not None and args.session_id is None:
        print("sessionstore: verify --head needs a SESSION (use --heads FILE for all)", file=sys.stderr)
        return EXIT_USAGE
    if args.session_id is not None:
        anchor = _single_anchor(args)
        try:
            result = verify_session(store, args.session_id, head=anchor, counts=args.counts)
        except SessionNotFoundError:
            if not isinstance(anchor, ChainHead):
                raise
            result = missing_session(anchor)
        print(json.dumps(result.to_dict()) if args.json else result.summary(), file=out)
        _say_what_was_skipped(args, store)
        return EXIT_OK if result.ok else EXIT_INTEGRITY
    total = failed = 0
    rows: list[dict[str, Any]] = []
    heads = read_heads(args.heads) if args.heads is not None else None
    with counting("verifying sessions") as bar:
        for result in verify_all(store, heads=heads, counts=args.counts):
            bar.advance()
            total += 1
            failed += not result.ok
            if args.json:
                rows.append(result.to_dict())
            else:
                print(result.summary(), file=out, flush=True)  # a line as each session is done
    if args.json:
        print(json.dumps({"sessions": rows, "total": total, "failed": failed, "ok": not failed}), file=out)
    else:
        print(f"{total} sessions verified: {total - failed} ok, {failed} failed", file=out)
    _say_what_was_skipped(args, store)
    return EXIT_INTEGRITY if failed else EXIT_OK


def _say_what_was_skipped(args: argparse.Namespace, store: SessionStore) -> None:
    """Without ``--counts``, say on stderr that the deferred token counts were not recounted."""
    if not args.counts and store.token_counter is not None:
        print(
            "sessionstore: token counts made after COMMIT (outside the hash chain) were not "
            "recounted: run `verify --counts` to check them (a tokenizer pass over the text)",
            file=sys.stderr,
        )

"""The ``erase`` and ``purge`` commands: the store's erasure and retention, printed.

One line per erasure receipt (with ``--json``, one JSON object per receipt). Erasing needs no
key: destroying the key is the point.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from ..errors import EXIT_OK, ValidationError
from ._progress import spinner

if TYPE_CHECKING:  # the parser is built without the store (a fast --help)
    from ..store import ErasureReceipt, SessionStore

__all__ = ["add_commands", "parse_age", "run_erase", "run_purge"]

_AGE = re.compile(r"([1-9][0-9]{0,5})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` as a timedelta.

    Raises:
        ValidationError: anything else.
    """
    match = _AGE.fullmatch(text.strip())
    if match is None:
        msg = f"not an age: {text!r} (a number and m, h, d or w: 30d, 12h)"
        raise ValidationError(msg, field="older_than")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser], add_db: object) -> None:
    """Add ``erase`` and ``purge`` to the parser (``add_db`` adds the database options)."""
    assert callable(add_db)
    erase = commands.add_parser(
        "erase", help="erase a session (or a user's sessions) for good, with a receipt"
    )
    add_db(erase)
    erase.add_argument("session_id", nargs="?", help="the session to erase")
    erase.add_argument("--user", help="erase every session of this user (of --tenant) instead")
    erase.add_argument("--tenant", help="the user's tenant")
    erase.add_argument("--reason", required=True, help="why (kept in the receipt: no personal data)")
    erase.add_argument(
        "--with-forks", action="store_true", help="erase the session's forks and sub-agent sessions too"
    )
    erase.add_argument("--json", action="store_true", help="one JSON receipt per line")

    purge = commands.add_parser("purge", help="erase the sessions a retention policy selects")
    add_db(purge)
    purge.add_argument(
        "--older-than", required=True, metavar="AGE", help="idle for longer than this: 30d, 12h"
    )
    purge.add_argument("--tenant", help="only this tenant's sessions")
    purge.add_argument("--reason", help="the receipts' reason (default: retention: older than AGE)")
    purge.add_argument("--dry-run", action="store_true", help="list what would be erased; change nothing")
    purge.add_argument("--json", action="store_true", help="one JSON object per line")


def _print_receipts(receipts: list[ErasureReceipt], out: TextIO, *, as_json: bool) -> None:
    for receipt in receipts:
        line = json.dumps(receipt.to_dict()) if as_json else f"{receipt.session_id} {receipt.summary()}"
        print(line, file=out)


def run_erase(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """``erase SESSION | --user U --tenant T --reason TEXT [--with-forks] [--json]``."""
    if (args.session_id is None) == (args.user is None):
        raise ValidationError("erase takes a SESSION or --user USER (one of them)", field="session_id")
    if args.session_id is not None:
        receipts = store.erase(args.session_id, reason=args.reason, with_forks=args.with_forks)
        _print_receipts(receipts, out, as_json=args.json)
        return EXIT_OK
    owned: list[str] = []
    after = None
    while page := store.list_sessions(tenant=args.tenant, user=args.user, after=after, limit=500):
        owned.extend(info.id for info in page)
        after = page[-1].id
    erased: set[str] = set()
    for sid in owned:  # a user's forks are the user's too: erased with their parent
        if sid in erased:
            continue
        receipts = store.erase(sid, reason=args.reason, with_forks=True)
        erased.update(r.session_id for r in receipts)
        _print_receipts(receipts, out, as_json=args.json)
    return EXIT_OK


def run_purge(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """``purge --older-than AGE [--tenant T] [--reason TEXT] [--dry-run] [--json]``."""
    age = parse_age(args.older_than)
    reason = args.reason or f"retention: older than {args.older_than}"
    doing = "finding" if args.dry_run else "erasing"
    with spinner(f"{doing} the sessions idle for longer than {args.older_than}"):
        plan = store.purge_expired(age, reason=reason, dry_run=args.dry_run, tenant=args.tenant)
    if args.dry_run:
        for sid in plan.expired:
            line = f"{sid} would be erased"
            if args.json:
                line = json.dumps({"session_id": sid, "would_erase": True})
            print(line, file=out)
    else:
        _print_receipts(list(plan.receipts), out, as_json=args.json)
    for sid, active in plan.kept.items():
        if args.json:
            print(json.dumps({"session_id": sid, "kept_for": list(active)}), file=out)
        else:
            print(f"{sid} kept: still active {', '.join(active)}", file=out)
    return EXIT_OK

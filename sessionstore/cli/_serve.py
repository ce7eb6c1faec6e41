"""``sessionstore serve``: the JSON API and the audit viewer on a local HTTP server.

The ``serve`` extra (FastAPI, uvicorn, Jinja2), like the store, is imported only when the command
runs: building the parser stays light, and the rest of the command line works without the extra.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from ..errors import EXIT_OK, MissingDependencyError

__all__ = ["TOKEN_ENV", "add_command", "run_serve"]

#: Where the token is read from when ``--token`` is not given (keeps it out of ``ps``).
TOKEN_ENV = "SESSIONSTORE_SERVE_TOKEN"


def add_command(commands: Any, add_db: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``serve`` to the command line's subcommands."""
    serve = commands.add_parser("serve", help="the JSON API and the audit viewer on a local HTTP server")
    add_db(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    serve.add_argument(
        "--write",
        action="store_true",
        help="also serve append, snip, collapse, revert, compact and erase (needs a token)",
    )
    serve.add_argument(
        "--token",
        help=f"every request must carry it (default: ${TOKEN_ENV}); needed off localhost and with --write",
    )


def run_serve(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until interrupted; the store stays open for the server's lifetime.

    Raises:
        ValidationError: the address or ``--write`` needs a token (nothing is bound).
        MissingDependencyError: the ``serve`` extra is not installed.
    """
    try:
        import uvicorn

        from ..serve import check_bind, create_app
    except ImportError as e:
        raise MissingDependencyError("serve", "sessionstore serve", e.name or "fastapi") from e
    from ..store import MASTER_KEY_ENV, EnvKeyProvider, open_store

    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token=token, write=args.write)
    with open_store(
        args.db,
        create=False,
        table_prefix=args.table_prefix,
        schema=args.schema,
        encryption=EnvKeyProvider() if os.environ.get(MASTER_KEY_ENV) else None,
    ) as store:
        app = create_app(store, write=args.write, token=token)
        mode = "read-write" if args.write else "read-only"
        print(
            f"sessionstore serve: {mode} on http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    out.flush()
    return EXIT_OK

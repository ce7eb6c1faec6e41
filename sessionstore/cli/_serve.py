"""``sessionstore serve``: the JSON API and the audit viewer on a local HTTP server.

The ``serve`` extra (FastAPI, uvicorn, Jinja2), like the store, is imported only when the command
runs: building the parser stays light, and the rest of the command line works without the extra.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
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
    serve.add_argument("--port", type=_port, default=8765, help="port (default: 8765; 0: any free port)")
    serve.add_argument(
        "--write",
        action="store_true",
        help="also serve append, snip, collapse, revert, compact and erase (needs a token)",
    )
    serve.add_argument(
        "--token",
        help=f"every request must carry it (default: ${TOKEN_ENV}); needed off localhost and with --write",
    )


def _port(text: str) -> int:
    """``--port``: 0 to 65535 (argparse makes the error a usage error)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return port


def _listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host:port``, every address the name resolves to, as asyncio binds them.

    Bound here, before the server starts, so that a port another server holds, a name that does
    not resolve or an address of another machine is one error (uvicorn logs it and exits 3, the
    status of a failed integrity check).

    Raises:
        OSError: naming the address and why it cannot be listened on; nothing stays bound.
    """
    bound: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            if os.name == "posix":  # as asyncio: elsewhere it lets a second server share the port
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio does: the IPv4 address gets its own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(bound) > 1:  # --port 0: every address on the port the first got
                address = (address[0], bound[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except OSError as e:
        for sock in bound:
            sock.close()
        raise OSError(e.errno, e.strerror or str(e), f"cannot listen on {host}:{port}") from None
    return bound


def _where(host: str, sockets: list[socket.socket]) -> str:
    """``http://HOST:PORT/`` of the sockets (one port: ``--port 0`` binds every address to the
    port the first got); the first socket's address when ``host`` is empty (every address)."""
    address, port = sockets[0].getsockname()[:2]
    shown = host or address
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


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
        sockets = _listen(args.host, args.port)
        mode = "read-write" if args.write else "read-only"
        print(f"sessionstore serve: {mode} on {_where(args.host, sockets)} (Ctrl-C stops)", file=sys.stderr)
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops the server: a normal end
            server.run(sockets=sockets)
    out.flush()
    return EXIT_OK

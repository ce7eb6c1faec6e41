"""``sessionstore serve``: the JSON API and the audit viewer on a local HTTP server.

The ``serve`` extra (FastAPI, uvicorn, Jinja2), like the store, is imported only when the command
runs: building the parser stays light, and the rest of the command line works without the extra.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
import threading
import time
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
    limits = serve.add_argument_group('limits (docs/viewer.md "Limits")')
    for flag, kind, meaning in _LIMIT_OPTIONS:
        limits.add_argument(flag, type=kind, metavar=kind.__name__.upper(), help=meaning)


#: ``serve``'s options setting a ``ServeLimits`` field (the option's name, underscored).
_LIMIT_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("--max-body-bytes", int, "largest request body (default: 16 MiB; 413 past it)"),
    ("--max-append-events", int, "most events one append carries (default: 10,000)"),
    ("--page-bytes", int, "a page of events ends once its payloads reach this (default: 4 MiB)"),
    ("--header-timeout", float, "seconds to send a request's headers (default: 10)"),
    ("--body-timeout", float, "seconds to send a request's body (default: 30; 408 past it)"),
    ("--auth-failures", int, "wrong tokens per client per --auth-window before 429 (default: 10)"),
    ("--auth-window", float, "seconds the wrong tokens are counted over (default: 60)"),
    ("--max-connections", int, "connections served at once (default: 64; 503 past them)"),
    ("--shutdown-seconds", float, "on Ctrl-C or SIGTERM, how long running requests may finish (default: 3)"),
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

        from ..serve import ServeLimits, check_bind, create_app, server_config
    except ImportError as e:
        raise MissingDependencyError("serve", "sessionstore serve", e.name or "fastapi") from e
    from ..store import MASTER_KEY_ENV, EnvKeyProvider, RetryPolicy, open_store

    _log_to_stderr()
    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token=token, write=args.write)
    chosen = {
        flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, _, _ in _LIMIT_OPTIONS
    }
    limits = ServeLimits(**{name: value for name, value in chosen.items() if value is not None})
    with open_store(
        args.db,
        create=False,
        table_prefix=args.table_prefix,
        schema=args.schema,
        encryption=EnvKeyProvider() if os.environ.get(MASTER_KEY_ENV) else None,
        # A page is waited on: a database that is down is a 503 within about a second, as on
        # the command line, not after the library's default of up to 30 s of retries.
        retry=RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.25, budget_seconds=1.0),
    ) as store:
        app = create_app(store, write=args.write, token=token, limits=limits)
        sockets = _listen(args.host, args.port)
        mode = "read-write" if args.write else "read-only"
        print(f"sessionstore serve: {mode} on {_where(args.host, sockets)} (Ctrl-C stops)", file=sys.stderr)
        server = uvicorn.Server(server_config(app, host=args.host, port=args.port, limits=limits))
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops the server: a normal end
            server.run(sockets=sockets)
        busy = _still_running(grace=1.0)
    out.flush()
    if busy:
        # A request's worker thread is still in the database (uvicorn cancelled its task after
        # --shutdown-seconds; a thread cannot be stopped): the interpreter would wait for it at
        # exit. Nothing is half-written: a write commits whole or not at all.
        print(f"sessionstore serve: stopped with {busy} request(s) still running", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_OK)
    return EXIT_OK


def _log_to_stderr() -> None:
    """The server's log (``sessionstore.serve``: what a 5xx answer withheld, under its request id)
    on stderr; the library's loggers stay quiet unless the host configures them."""
    served = logging.getLogger("sessionstore.serve")
    if any(handler.get_name() == "sessionstore serve" for handler in served.handlers):
        return  # served before in this process
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name("sessionstore serve")
    handler.setFormatter(logging.Formatter("sessionstore serve: %(levelname)s %(message)s"))
    served.addHandler(handler)
    served.setLevel(logging.INFO)


def _still_running(*, grace: float) -> int:
    """How many threads besides this one are still running after ``grace`` seconds (the
    server's idle worker threads end as soon as it stops)."""
    deadline = time.monotonic() + grace
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(1 for t in others if t.is_alive())

"""The ``sessionstore`` command line: the parser and the one place errors become output.

Every command takes ``--db URL`` (default: ``SESSIONSTORE_URL``, else the embedded SQLite file),
before or after the command's name. Errors print one ``sessionstore: ...`` line to stderr, never
a traceback; the exit status says what happened (``EXIT_*`` in ``sessionstore.errors``): 1 an
error, 2 a malformed command line, 3 a failed integrity check, 130 interrupted, 141 the reader
closed the pipe.

Building the parser imports nothing heavy (``--help`` stays fast): a command module's
``add_commands`` only declares arguments, and what runs a command is imported by ``main`` after
parsing (``_commands.run``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from ..errors import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTEGRITY,
    EXIT_INTERRUPTED,
    DataCorruptionError,
    SessionStoreError,
    ValidationError,
)
from ._compare import add_commands as _add_compare_commands
from ._completion import add_commands as _add_completion_commands
from ._completion import run_completion
from ._erasure import add_commands as _add_erasure_commands
from ._output import PAGED_COMMANDS, page
from ._plot import add_commands as _add_plot_commands
from ._rls import add_commands as _add_rls_commands
from ._serve import add_command as _add_serve_command
from ._transcripts import add_commands as _add_interchange_commands

__all__ = ["main"]

_DESCRIPTION = "The durable, event-sourced session store for agents: its databases, sessions and audits."
_EPILOG = (
    "Options --db, --table-prefix and --schema go before or after the command. "
    "`sessionstore COMMAND --help` shows a command's options; docs/cli.md has examples."
)


def _add_db(parser: argparse.ArgumentParser, *, default: object = argparse.SUPPRESS) -> None:
    """The database options, on the top-level parser and on every command.

    On a command they default to ``SUPPRESS`` (absent from the namespace), so ``--db`` given before
    the command is not reset by the command's parser; given after, it wins.
    """
    parser.add_argument(
        "--db",
        metavar="URL",
        default=default,
        help="database URL or SQLite path (default: $SESSIONSTORE_URL, else the embedded SQLite file)",
    )
    parser.add_argument(
        "--table-prefix",
        metavar="PREFIX",
        default=default,
        help="sessionstore's tables carry this prefix (default: none, or the URL's table_prefix=)",
    )
    parser.add_argument(
        "--schema",
        metavar="NAME",
        default=default,
        help="PostgreSQL schema of sessionstore's tables (default: the connection's, or the URL's schema=)",
    )
    parser.add_argument(
        "--no-pager",
        action="store_true",
        default=default if default is argparse.SUPPRESS else False,
        help="never page long output (default: page on a terminal when it is longer than the screen)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionstore", description=_DESCRIPTION, epilog=_EPILOG)
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    _add_db(parser, default=None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = commands.add_parser("db", help="schema migrations")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for name, help_text in (
        ("upgrade", "migrate the database to this version's schema"),
        ("downgrade", "migrate down (to 'base' removes every sessionstore table)"),
        ("current", "print the database's schema revision"),
    ):
        sub = db_commands.add_parser(name, help=help_text)
        _add_db(sub)
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        if name == "upgrade":
            sub.add_argument("revision", nargs="?", default="head")
        elif name == "downgrade":
            sub.add_argument("revision")
            sub.add_argument(
                "--yes", action="store_true", help="confirm dropping stored events (a downgrade to 'base')"
            )

    _add_rls_commands(commands, _add_db)

    demo = commands.add_parser("demo", help="drive a generated agent session through every context stage")
    _add_db(demo)
    demo.add_argument("--json", action="store_true", help="print a summary object instead")

    sessions = commands.add_parser("sessions", help="list sessions")
    _add_db(sessions)
    sessions.add_argument("--limit", type=int, default=100)
    sessions.add_argument("--after", help="start after this session id (the last id of the previous page)")
    sessions.add_argument("--tenant", help="only this tenant's sessions")
    sessions.add_argument("--user", help="only this user's sessions (needs --tenant)")

    new = commands.add_parser("new", help="create a session and print its id")
    _add_db(new)
    new.add_argument("--id", dest="session_id")
    new.add_argument("--metadata", type=_json, default=None, help="JSON object")
    new.add_argument("--tenant", help="the tenant the session belongs to")
    new.add_argument("--user", help="the user it belongs to (needs --tenant)")
    new.add_argument(
        "--external-id",
        help="your key for it (needs --tenant and --user): print the session it names, creating it if none",
    )

    append = commands.add_parser("append", help="append events (JSON lines on stdin) or one --text message")
    _add_db(append)
    append.add_argument("session_id")
    append.add_argument(
        "--expected", type=_expected, default="any", help="expected last seq, or 'any' (default)"
    )
    append.add_argument("--text", help="append one message with this text instead of reading stdin")
    append.add_argument("--role", choices=("user", "assistant"), default="user")

    events = commands.add_parser("events", help="print a session's events")
    _add_db(events)
    events.add_argument("session_id")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument(
        "--type", action="append", dest="types", metavar="TYPE", help="only events of this type (repeatable)"
    )
    events.add_argument("--tail", type=_count, metavar="N", help="only the last N (after --type)")
    events.add_argument("--since", type=_count, metavar="SEQ", help="only events after seq SEQ")

    verify = commands.add_parser(
        "verify", help="check hash chains and projection snapshots (one session, or all)"
    )
    _add_db(verify)
    verify.add_argument("session_id", nargs="?", help="the session (default: every session)")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--counts",
        action="store_true",
        help="also recount every token count made after COMMIT (outside the hash chain): a tokenizer pass",
    )
    anchors = verify.add_mutually_exclusive_group()
    anchors.add_argument(
        "--head", metavar="HASH", help="a head hash kept elsewhere the SESSION's chain must hold"
    )
    anchors.add_argument(
        "--heads",
        metavar="FILE",
        help="heads kept elsewhere (the output of `heads`): each must still be there",
    )

    _add_erasure_commands(commands, _add_db)

    heads = commands.add_parser(
        "heads", help="print each session's chain head (last seq and hash) to keep outside the database"
    )
    _add_db(heads)
    heads.add_argument("session_id", nargs="?", help="the session (default: every session)")
    heads.add_argument("--json", action="store_true", help="one JSON object per line")

    context = commands.add_parser("context", help="the request the model would get next, and its token state")
    _add_db(context)
    context.add_argument("session_id")
    context.add_argument("--json", action="store_true", help='print {"request": ..., "tokens": ...}')
    context.add_argument("--cache-control", action="store_true", help="add prompt-cache breakpoints")
    context.add_argument(
        "--breakdown", action="store_true", help="a /context table instead: tokens by category, free space"
    )

    show = commands.add_parser("show", help="a readable transcript of everything in the session")
    _add_db(show)
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true", help="one JSON object per entry")

    snip_cmd = commands.add_parser("snip", help="drop the oldest API rounds from the request (revertible)")
    _add_db(snip_cmd)
    snip_cmd.add_argument("session_id")
    snip_cmd.add_argument("--rounds", type=int, required=True, help="how many of the oldest API rounds")
    snip_cmd.add_argument("--json", action="store_true")

    mc = commands.add_parser("microcompact", help="clear old tool results' content (revertible)")
    _add_db(mc)
    mc.add_argument("session_id")
    mc.add_argument("--keep", type=int, default=5, help="newest compactable results to keep (at least 1)")
    mc.add_argument("--tool-use-id", action="append", dest="tool_use_ids", help="clear exactly this result")
    mc.add_argument("--json", action="store_true")

    collapse_cmd = commands.add_parser("collapse", help="summarize a span of turns in place (revertible)")
    _add_db(collapse_cmd)
    collapse_cmd.add_argument("session_id")
    collapse_cmd.add_argument(
        "--from", dest="from_uuid", required=True, help="message uuid of the first prompt"
    )
    collapse_cmd.add_argument(
        "--to", dest="to_uuid", required=True, help="message uuid of the span's last message"
    )
    collapse_cmd.add_argument("--json", action="store_true")

    audit_cmd = commands.add_parser("audit", help="every context operation of a session, as one timeline")
    _add_db(audit_cmd)
    audit_cmd.add_argument("session_id")
    audit_cmd.add_argument("--json", action="store_true")

    served_cmd = commands.add_parser(
        "served", help="rebuild the request the model saw at turn N and check it"
    )
    _add_db(served_cmd)
    served_cmd.add_argument("session_id")
    served_cmd.add_argument("--turn", type=int, required=True, help="1 = the first request served")
    served_cmd.add_argument(
        "--as-sent",
        action="store_true",
        help="an imported Claude Code session: the request Claude Code recorded sending at turn N, "
        "and how the log's rebuild differs",
    )
    served_cmd.add_argument("--json", action="store_true")

    diff_cmd = commands.add_parser("diff", help="how the request changed between two seqs")
    _add_db(diff_cmd)
    diff_cmd.add_argument("session_id")
    diff_cmd.add_argument("seq_a", type=int)
    diff_cmd.add_argument("seq_b", type=int)
    diff_cmd.add_argument("--json", action="store_true")

    compact_cmd = commands.add_parser("compact", help="summarize the conversation now (recorded, auditable)")
    _add_db(compact_cmd)
    compact_cmd.add_argument("session_id")
    compact_cmd.add_argument("--instructions", help="extra instructions for the summary")
    pivot = compact_cmd.add_mutually_exclusive_group()
    pivot.add_argument("--up-to", dest="up_to_uuid", help="summarize up to this message, keep the rest")
    pivot.add_argument(
        "--from", dest="from_uuid", help="summarize from this prompt on, keep what precedes it"
    )
    compact_cmd.add_argument(
        "--dry-run", action="store_true", help="show what the compaction would record, recording nothing"
    )
    compact_cmd.add_argument(
        "--summarizer",
        choices=("auto", "offline", "anthropic"),
        default="auto",
        help="auto: the model when ANTHROPIC_API_KEY is set, else offline",
    )
    compact_cmd.add_argument("--json", action="store_true")

    revert_cmd = commands.add_parser(
        "revert", help="undo a persisted result, snip, micro-compaction, collapse or compaction"
    )
    _add_db(revert_cmd)
    revert_cmd.add_argument("session_id")
    revert_cmd.add_argument("event_id")
    revert_cmd.add_argument(
        "--recompact",
        action="store_true",
        help="a compaction whose history no longer fits: revert it and compact again at once",
    )
    revert_cmd.add_argument("--json", action="store_true")

    _add_compare_commands(commands, _add_db)  # compare (sessionstore/cli/_compare.py)
    _add_interchange_commands(commands, _add_db)  # import, export (sessionstore/cli/_transcripts.py)
    _add_serve_command(commands, _add_db)  # serve: the JSON API and the viewer (sessionstore/cli/_serve.py)
    _add_plot_commands(commands, _add_db)  # plot (sessionstore/cli/_plot.py)
    _add_completion_commands(commands, _add_db)  # completion (sessionstore/cli/_completion.py)

    checkpoints = commands.add_parser("checkpoints", help="file checkpoints and what each turn changed")
    _add_db(checkpoints)
    checkpoints.add_argument("session_id")
    checkpoints.add_argument("--root", help="project root: the latest turn's changes are read from its files")
    checkpoints.add_argument("--json", action="store_true", help="one JSON object per checkpoint")

    rewind = commands.add_parser("rewind", help="restore files and/or fork the conversation at a message")
    _add_db(rewind)
    rewind.add_argument("session_id")
    rewind.add_argument("--to", dest="message_uuid", required=True, help="uuid of the user message")
    rewind.add_argument("--files", action="store_true", help="restore files (default: both)")
    rewind.add_argument("--conversation", action="store_true", help="fork the conversation at the message")
    rewind.add_argument("--dry-run", action="store_true", help="show the diff; change nothing")
    rewind.add_argument(
        "--root",
        help="project root (default: the current directory; refused when the checkpoint recorded another)",
    )
    rewind.add_argument("--fork-id", help="id for the conversation fork (default: a new uuid)")
    rewind.add_argument("--json", action="store_true")

    sessions.add_argument("--json", action="store_true", help="one JSON object per session")
    new.add_argument("--json", action="store_true", help="print the session as JSON")
    append.add_argument("--json", action="store_true", help="print the result as JSON")
    _describe_commands(parser)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import version

        print(f"{parser.prog} {version('sessionstore')}")
        parser.exit()


def _describe_commands(parser: argparse.ArgumentParser) -> None:
    """Give each command's own ``--help`` the one-line description the command list shows."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None:
                    sub.description = helps.get(name)
                _describe_commands(sub)


def _count(value: str) -> int:
    """``--tail N``, ``--since SEQ``: a non-negative integer (argparse makes the error a usage error)."""
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {value!r}")
    return int(value)


def _json(value: str) -> object:
    """``--metadata``: JSON text (argparse makes the error a usage error)."""
    from ..events import load_json  # here: --help does not pay for pydantic

    try:
        return load_json(value, where="--metadata")
    except ValidationError as e:  # a key twice in one object
        raise argparse.ArgumentTypeError(str(e)) from None
    except RecursionError:
        raise argparse.ArgumentTypeError("JSON nested too deeply") from None
    except ValueError as e:  # invalid JSON, or an integer past 4,300 digits
        raise argparse.ArgumentTypeError(f"invalid JSON: {str(e).partition(';')[0]}") from None


def _expected(value: str) -> int | str:
    """``--expected``: a seq or ``any`` (argparse turns the error into a usage error)."""
    if value == "any":
        return value  # sessionstore.store.ANY
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'any', not {value!r}") from None


def _fail(message: str, status: int) -> int:
    """Print ``message`` as one ``sessionstore: ...`` line (a path or text may hold newlines)."""
    print(f"sessionstore: {' '.join(message.splitlines())}", file=sys.stderr)
    return status


def _file_problem(error: OSError) -> str:
    """``PATH: what is wrong`` for a file the command could not read or write."""
    if error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return str(error) or type(error).__name__


def _reader_gone(out: TextIO) -> int:
    """Stop quietly when the reader closed the pipe (``sessionstore context SID | head``).

    stdout is pointed at /dev/null first, or the interpreter's final flush would report the same
    broken pipe again on the way out.
    """
    if out is sys.stdout:
        with contextlib.suppress(OSError, ValueError):  # no real file descriptor (captured output)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit status (``EXIT_*`` in ``sessionstore.errors``).

    The one place where errors become output: a sessionstore error or a file the command cannot
    read or write prints one ``sessionstore: ...`` line on stderr; a failed integrity check
    exits with ``EXIT_INTEGRITY``; Ctrl-C prints one line and exits with ``EXIT_INTERRUPTED``.
    Usage errors are argparse's (``EXIT_USAGE``).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    paged = None
    if out is None and args.command in PAGED_COMMANDS and not args.no_pager and sys.stdout.isatty():
        paged = out = io.StringIO()  # shown once complete: through the pager if longer than the screen
    out = out or sys.stdout
    try:
        if args.command == "completion":  # made from the parser: no database, nothing else to load
            status = run_completion(parser, args.shell, out)
        else:
            from ._commands import run  # the layers load only once the command line parsed

            status = run(args, out)
        out.flush()  # a closed pipe shows up here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        return _reader_gone(out)
    except (SessionStoreError, OSError, KeyboardInterrupt) as e:
        if paged is not None:  # what the command printed before it failed comes first, then why
            page(paged.getvalue(), no_pager=False)
            paged = None
        return _fail(*_failure(e))
    finally:
        if paged is not None:
            page(paged.getvalue(), no_pager=False)


def _failure(error: BaseException) -> tuple[str, int]:
    """The line and exit status for an error a command ended with."""
    if isinstance(error, DataCorruptionError):
        return str(error), EXIT_INTEGRITY
    if isinstance(error, SessionStoreError):
        return str(error), EXIT_ERROR
    if isinstance(error, OSError):
        return _file_problem(error), EXIT_ERROR
    return "interrupted", EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover - exercised through the console script
    raise SystemExit(main())

"""The CLI's ``import`` and ``export`` commands: argument parsing and output.

The work is in ``sessionstore.claude_code``; this module holds the two commands' arguments and
printing, so the CLI's main module only registers and dispatches them.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import SessionStoreError, ValidationError
from ._progress import ImportBars, on_terminal, spinner

if TYPE_CHECKING:  # the parser is built without them (a fast --help); the commands import them
    from pathlib import Path

    from ..claude_code import ImportReport
    from ..store import SessionStore

__all__ = ["add_commands", "run_command"]

FORMATS = ("claude-code",)


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_db: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``import`` and ``export`` on the CLI's sub-command parser."""
    imp = commands.add_parser(
        "import", help="import Claude Code transcripts (files, project folders, ~/.claude/projects)"
    )
    add_db(imp)
    imp.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="transcript .jsonl files, project folders, or ~/.claude/projects (all its projects)",
    )
    imp.add_argument("--format", choices=FORMATS, default="claude-code")
    imp.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip malformed lines (each is reported) instead of importing nothing",
    )
    imp.add_argument("--progress", action="store_true", help="show progress on stderr even when not a TTY")
    imp.add_argument("--tenant", help="the tenant the imported sessions belong to")
    imp.add_argument("--user", help="the user they belong to (needs --tenant)")
    imp.add_argument(
        "--follow",
        action="store_true",
        help="keep importing what Claude Code appends (each settled line once) until Ctrl-C",
    )
    imp.add_argument(
        "--until-idle",
        type=_seconds,
        metavar="SECONDS",
        help="with --follow: stop once no transcript changed for this long",
    )
    imp.add_argument(
        "--poll-interval",
        type=_seconds,
        default=0.25,
        metavar="SECONDS",
        help="with --follow: how often to look at the transcripts (default 0.25)",
    )
    imp.add_argument("--json", action="store_true", help="print the report as one JSON object")

    exp = commands.add_parser("export", help="write a session as Claude Code JSONL (resumable)")
    add_db(exp)
    exp.add_argument("session_id")
    exp.add_argument("--format", choices=FORMATS, default="claude-code")
    where = exp.add_mutually_exclusive_group()
    where.add_argument(
        "-o", "--output", metavar="FILE", help="write the session's lines here (default: stdout)"
    )
    where.add_argument(
        "--dir",
        metavar="DIR",
        help="write a project folder: <sessionId>.jsonl, sub-agents and tool-results sidecars",
    )
    exp.add_argument("--force", action="store_true", help="overwrite existing files")
    exp.add_argument("--json", action="store_true", help="print what was written as JSON")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


class _StderrProgress:
    """One self-rewriting stderr line: ``importing: 42% (1234/2938 lines)``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = -1
        self.open_line = False

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // total if total else 100
        if percent == self.shown:
            return  # redraw only when the number changes: a big import has many callbacks
        self.shown = percent
        self.open_line = done < total
        end = "" if self.open_line else "\n"
        self.stream.write(f"\rimporting: {percent:3d}% ({done}/{total} lines){end}")
        self.stream.flush()

    def end_line(self) -> None:
        """Finish a line the import left unfinished (it failed or was interrupted)."""
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False


def _run_import(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    if args.follow:
        return _run_follow(args, store, out)
    if args.until_idle is not None:
        raise ValidationError("--until-idle needs --follow", field="until_idle")
    from ..claude_code import import_claude_code

    # On a terminal, rich's bars (files and bytes read, then lines written); `--progress` off a
    # terminal (a log file), one plain percentage line.
    bars = ImportBars(args.paths) if on_terminal() else None
    plain = _StderrProgress(sys.stderr) if args.progress and bars is None else None
    try:
        with bars or contextlib.nullcontext():
            report = import_claude_code(
                store,
                args.paths,
                skip_bad_lines=args.skip_bad_lines,
                progress=bars or plain,
                tenant=args.tenant,
                user=args.user,
                on_file_read=None if bars is None else bars.file_read,
            )
    finally:
        if plain is not None:
            plain.end_line()  # an error or Ctrl-C then prints on a line of its own
    _print_report(report, args.json, out)
    return 0


def _print_report(report: ImportReport, as_json: bool, out: TextIO, *, only_written: bool = False) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False), file=out)
        return
    for bad in report.skipped:
        print(f"skipped {bad}", file=sys.stderr)
    for item in report.sessions:
        if only_written and not item.written:
            continue
        parent = f" (sub-agent of {item.parent_session_id})" if item.parent_session_id else ""
        outcome = f"{item.written} events written" if item.written else "already imported: nothing written"
        print(
            f"{item.session_id}{parent}: {item.lines} lines -> {item.messages} messages, "
            f"{item.opaque} opaque entries; {outcome}",
            file=out,
        )
    out.flush()


def _run_follow(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """``import --follow``: one report per poll that wrote (a JSON line each), then a summary."""
    from ..claude_code import ImportReport, follow_claude_code

    reported: set[str] = set()

    def show(report: ImportReport) -> None:
        # A skipped line is met again at every poll: report it once.
        fresh = tuple(bad for bad in report.skipped if str(bad) not in reported)
        reported.update(str(bad) for bad in fresh)
        _print_report(ImportReport(report.sessions, fresh), args.json, out, only_written=True)

    summary = follow_claude_code(
        store,
        args.paths,
        until_idle=args.until_idle,
        poll_interval=args.poll_interval,
        skip_bad_lines=args.skip_bad_lines,
        tenant=args.tenant,
        user=args.user,
        on_import=show,
        on_waiting=_say_waiting,
    )
    if args.json:
        print(json.dumps({"follow": summary.to_dict()}, ensure_ascii=False), file=out)
    else:
        held = f"; {summary.held} lines held back (not settled yet)" if summary.held else ""
        print(
            f"followed: {summary.written} events written to {len(summary.sessions)} sessions "
            f"in {summary.imports} imports{held}",
            file=out,
        )
    return 0


def _say_waiting(path: Path) -> None:
    """Say on stderr that ``path`` names no transcript yet: following it is no silent no-op."""
    if path.is_dir():
        what = f"no Claude Code transcript in {path} yet (nor in a project folder in it)"
    else:
        what = f"{path} does not exist yet"
    print(f"sessionstore: {what}: waiting for it", file=sys.stderr, flush=True)


def _run_export(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    with spinner(f"exporting {args.session_id}"):
        return _export(args, store, out)


def _export(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    from ..claude_code import iter_claude_code, write_claude_code, write_claude_code_file

    if args.dir is not None:
        files = write_claude_code(store, args.session_id, args.dir, overwrite=args.force)
        rows: list[dict[str, Any]] = [
            {"path": str(f.path), "session_id": f.session_id, "lines": f.lines} for f in files
        ]
        for row in rows:
            if args.json:
                print(json.dumps(row, ensure_ascii=False), file=out)
            else:
                what = f"{row['lines']} lines of {row['session_id']}" if row["session_id"] else "sidecar"
                print(f"{row['path']}: {what}", file=out)
        return 0
    if args.output is None:
        written = 0
        try:
            for line in iter_claude_code(store, args.session_id):
                out.write(line + "\n")
                written += 1
        except SessionStoreError:
            if written:  # streamed: what came before the error is out already
                print(
                    f"sessionstore: standard output holds only the first {written} lines "
                    "(-o FILE writes all of them or nothing)",
                    file=sys.stderr,
                )
            raise
        return 0
    from pathlib import Path

    target = Path(args.output)
    # Only a regular file is overwritten with --force: a folder, a FIFO or a symlink is refused
    # below either way, so --force is not offered for it.
    if target.is_file() and not target.is_symlink() and not args.force:
        raise FileExistsError(errno.EEXIST, "exists (use --force to overwrite)", str(target))
    # Streamed from the log to a temporary file beside the target, renamed over it when whole.
    exported = write_claude_code_file(store, args.session_id, target, overwrite=True)
    if args.json:
        row = {"path": str(target), "session_id": args.session_id, "lines": exported.lines}
        print(json.dumps(row), file=out)
    return 0


def run_command(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    """Run ``import`` or ``export``; returns the exit status."""
    if args.command == "import":
        return _run_import(args, store, out)
    return _run_export(args, store, out)

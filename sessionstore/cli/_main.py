"""The ``sessionstore`` command line.

Every command takes ``--db URL`` (default: ``SESSIONSTORE_URL``, else the embedded SQLite
file). Errors print one ``sessionstore: ...`` line to stderr, never a traceback; the exit
status says what happened (``EXIT_*`` in ``sessionstore.errors``): 1 an error, 2 a malformed
command line, 3 a failed integrity check, 130 interrupted, 141 the reader closed the pipe.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..audit import audit, served_request, view_diff
from ..checkpoints import FileHistory, RewindResult
from ..claude_code import compare_all_sent, compare_sent
from ..errors import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTEGRITY,
    EXIT_INTERRUPTED,
    EXIT_OK,
    DataCorruptionError,
    SessionStoreError,
    ValidationError,
)
from ..events import MessageAppended
from ..pipeline import collapse, compact, default_summarizer, microcompact, revert, snip
from ..projections import Session, SessionConfig, WindowConfig
from ..store import (
    ANY,
    MASTER_KEY_ENV,
    EnvKeyProvider,
    ExpectedSeq,
    SessionInfo,
    SessionStore,
    create_engine_for_url,
    current_revision,
    downgrade,
    open_store,
    resolve_url,
    tables_for,
    upgrade,
)
from ._demo import run_demo
from ._erasure import add_commands as _add_erasure_commands
from ._erasure import run_erase, run_purge
from ._render import render_audit
from ._rls import add_commands as _add_rls_commands
from ._rls import run_command as _run_rls
from ._transcripts import add_commands as _add_interchange_commands
from ._transcripts import run_command as _run_interchange
from ._verify import run_heads, run_verify

__all__ = ["main"]

#: Commands that may create a missing database (with ``db upgrade`` and ``demo``); every other
#: command only opens an existing one, so a mistyped ``--db`` is an error, not a new empty file.
_CREATING_COMMANDS = frozenset({"new", "append", "import"})


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="URL",
        help="database URL or SQLite path (default: $SESSIONSTORE_URL, else the embedded SQLite file)",
    )
    parser.add_argument(
        "--table-prefix",
        metavar="PREFIX",
        help="sessionstore's tables carry this prefix (default: none, or the URL's table_prefix=)",
    )
    parser.add_argument(
        "--schema",
        metavar="NAME",
        help="PostgreSQL schema of sessionstore's tables (default: the connection's, or the URL's schema=)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionstore", description=__doc__.splitlines()[0])
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
    new.add_argument("--metadata", type=json.loads, default=None, help="JSON object")
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
        "--expected", type=_expected, default=ANY, help="expected last seq, or 'any' (default)"
    )
    append.add_argument("--text", help="append one message with this text instead of reading stdin")
    append.add_argument("--role", choices=("user", "assistant"), default="user")

    events = commands.add_parser("events", help="print a session's events")
    _add_db(events)
    events.add_argument("session_id")
    events.add_argument("--json", action="store_true", help="one JSON object per line")

    verify = commands.add_parser(
        "verify", help="check hash chains and projection snapshots (one session, or all)"
    )
    _add_db(verify)
    verify.add_argument("session_id", nargs="?", help="the session (default: every session)")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
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
    compact_cmd.add_argument("--json", action="store_true")

    revert_cmd = commands.add_parser(
        "revert", help="undo a persisted result, snip, micro-compaction or collapse"
    )
    _add_db(revert_cmd)
    revert_cmd.add_argument("session_id")
    revert_cmd.add_argument("event_id")
    revert_cmd.add_argument("--json", action="store_true")

    _add_interchange_commands(commands, _add_db)  # import, export (sessionstore/cli/_transcripts.py)

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
    return parser


def _expected(value: str) -> ExpectedSeq:
    """``--expected``: a seq or ``any`` (argparse turns the error into a usage error)."""
    if value == "any":
        return ANY
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'any', not {value!r}") from None


def _read_json_lines(stream: TextIO) -> list[dict[str, Any]]:
    """The events on ``stream``, one JSON value a line (blank lines skipped).

    Raises:
        ValidationError: a line is not valid UTF-8 or not JSON; names the line.
    """
    batch: list[dict[str, Any]] = []
    number = 0
    try:
        for line in stream:
            number += 1
            if line.strip():
                batch.append(_json_line(line, number))
    except UnicodeDecodeError as e:  # decoded a chunk ahead: the line number is approximate
        msg = f"stdin is not UTF-8 after line {number}: {e.reason}"
        raise ValidationError(msg, field="stdin", index=number + 1) from None
    return batch


def _json_line(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        msg = f"stdin line {number}: invalid JSON: {e.msg}"
        raise ValidationError(msg, field="stdin", index=number) from None
    except RecursionError:
        msg = f"stdin line {number}: JSON nested too deeply"
        raise ValidationError(msg, field="stdin", index=number) from None


def _run_db(args: argparse.Namespace, out: TextIO) -> int:
    url = resolve_url(args.db)
    tables = tables_for(url, table_prefix=args.table_prefix, schema=args.schema)
    engine = create_engine_for_url(url, create=args.db_command == "upgrade")
    where = engine.url.render_as_string(hide_password=True)
    try:
        if args.db_command == "upgrade":
            upgrade(engine, args.revision, tables=tables)
        elif args.db_command == "downgrade":
            downgrade(engine, args.revision, drop_events=args.yes, tables=tables)
        with engine.connect().execution_options(sessionstore_read=True) as conn:
            current = current_revision(conn, tables)
    finally:
        engine.dispose()
    if args.json:
        _print_json(out, {"database": where, "revision": current})
    elif args.db_command == "current":
        print(current or "none", file=out)
    else:
        print(f"{where}: at {current or 'base'}", file=out)
    return 0


#: Set (to anything but "" or "0") to disable all compaction, as ``WindowConfig(disable_compaction=True)``
#: does for a program: ``sessionstore compact`` then refuses and records nothing.
DISABLE_COMPACTION_ENV = "SESSIONSTORE_DISABLE_COMPACTION"


def _session_config() -> SessionConfig:
    """The CLI's session config: the defaults, with the compaction switch from the environment."""
    disabled = os.environ.get(DISABLE_COMPACTION_ENV, "") not in ("", "0")
    return SessionConfig(window=WindowConfig(disable_compaction=disabled))


def _run_with_store(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    # Every seq the CLI takes or prints is in the visible numbering (a fork's count through its
    # parent's prefix), never the storage numbering of store.read/append.
    if args.command == "sessions":
        listed = store.list_sessions(limit=args.limit, after=args.after, tenant=args.tenant, user=args.user)
        for info in listed:
            last_seq = store.visible_log(info.id).last_seq()
            if args.json:
                _print_json(out, {**_session_json(info), "last_seq": last_seq})
                continue
            lineage = f" parent={info.parent_session_id}@{info.fork_seq}" if info.parent_session_id else ""
            owner = "".join(
                f" {name}={value}"
                for name, value in (
                    ("tenant", info.tenant),
                    ("user", info.user),
                    ("external_id", info.external_id),
                )
                if value is not None
            )
            print(f"{info.id}  {info.created_at.isoformat()}  last_seq={last_seq}{lineage}{owner}", file=out)
    elif args.command == "new":
        if args.external_id is not None:
            info, _ = store.get_or_create_session(
                args.tenant,
                args.user,
                args.external_id,
                metadata=args.metadata,
                session_id=args.session_id,
            )
        else:
            info = store.create_session(
                args.session_id, metadata=args.metadata, tenant=args.tenant, user=args.user
            )
        print(json.dumps(_session_json(info)) if args.json else info.id, file=out)
    elif args.command in ("context", "show"):
        return _run_views(args, store, out)
    elif args.command in ("snip", "microcompact", "revert"):
        return _run_edit(args, store, out)
    elif args.command in ("import", "export"):
        return _run_interchange(args, store, out)
    elif args.command in ("checkpoints", "rewind"):
        return _run_file_history(args, store, out)
    elif args.command == "audit":
        return _run_audit(args, store, out)
    elif args.command in ("served", "diff"):
        return _run_replay(args, Session(store, args.session_id), out)
    elif args.command == "compact":
        session = Session(store, args.session_id, _session_config())
        summarizer = default_summarizer(model=session.api_state.model)
        compacted = compact(
            session,
            summarizer,
            custom_instructions=args.instructions,
            up_to_uuid=args.up_to_uuid,
            from_uuid=args.from_uuid,
        )
        if args.json:
            _print_json(out, dataclasses.asdict(compacted))
        elif compacted.ok:
            print(
                f"compact ({compacted.strategy}, {summarizer.name}): {compacted.tokens_before} -> "
                f"{compacted.tokens_after} tokens, boundary {compacted.event_id}",
                file=out,
            )
        else:
            print(f"compact failed ({compacted.reason}); recorded as {compacted.event_id}", file=out)
        return 0 if compacted.ok else 1
    elif args.command == "collapse":
        session = Session(store, args.session_id)
        collapsed = collapse(
            session, default_summarizer(model=session.api_state.model), args.from_uuid, args.to_uuid
        )
        outcome = {
            "staged_event_id": collapsed.event_ids[0],
            "event_id": collapsed.event_ids[1],
            "tokens_before": collapsed.tokens_before,
            "tokens_after": collapsed.tokens_after,
        }
        if args.json:
            _print_json(out, outcome)
        else:
            print(
                f"collapse: {collapsed.tokens_before} -> {collapsed.tokens_after} tokens; undo with "
                f"`sessionstore revert {args.session_id} {collapsed.event_ids[1]}`",
                file=out,
            )
    elif args.command == "append":
        batch: list[Any]
        if args.text is not None:
            batch = [MessageAppended(role=args.role, content=args.text)]
        else:
            batch = _read_json_lines(sys.stdin)
        result = store.visible_log(args.session_id).append(batch, args.expected)
        if args.json:
            _print_json(out, dataclasses.asdict(result))
        else:
            note = " (already stored: nothing written)" if result.deduplicated else ""
            print(f"seqs {list(result.seqs)} positions {list(result.positions)}{note}", file=out)
    elif args.command == "events":
        for recorded in store.visible_log(args.session_id).read():
            if args.json:
                line = {
                    "seq": recorded.seq,
                    "session_id": recorded.session_id,
                    "position": recorded.position,
                    "event_id": recorded.event_id,
                    "type": recorded.type,
                    "schema_version": recorded.schema_version,
                    "token_count": recorded.token_count,
                    "created_at": recorded.created_at.isoformat(),
                    "hash": recorded.hash,
                    "payload": recorded.payload_dict(),
                }
                print(json.dumps(line, ensure_ascii=False), file=out)
            else:
                tokens = "-" if recorded.token_count is None else recorded.token_count
                print(
                    f"{recorded.seq:>6}  {recorded.type:<20} tokens={tokens:<6} {recorded.payload[:80]}",
                    file=out,
                )
    elif args.command == "verify":
        return run_verify(args, store, out)  # chain + snapshots (sessionstore/cli/_verify.py)
    elif args.command == "heads":
        return run_heads(args, store, out)
    elif args.command == "erase":
        return run_erase(args, store, out)
    elif args.command == "purge":
        return run_purge(args, store, out)
    return 0


def _print_json(out: TextIO, value: object) -> None:
    print(json.dumps(value, ensure_ascii=False), file=out)


def _session_json(info: SessionInfo) -> dict[str, Any]:
    return {**dataclasses.asdict(info), "created_at": info.created_at.isoformat()}


def _describe(payload: dict[str, Any]) -> str:
    """One line for a transcript entry's payload."""
    content = payload.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                parts.append(f"[tool_use {block.get('name')} {json.dumps(block.get('input'))}]")
            elif kind == "tool_result":
                inner = block.get("content")
                size = len(inner) if isinstance(inner, str) else len(json.dumps(inner))
                parts.append(f"[tool_result {block.get('tool_use_id')}: {size} chars]")
            else:
                parts.append(f"[{kind}]")
        return " ".join(parts)
    return json.dumps({k: v for k, v in payload.items() if v not in (None, [], {})}, ensure_ascii=False)


def _run_views(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    session = Session(store, args.session_id)
    if args.command == "context":
        request = session.request(cache_control=args.cache_control)
        tokens = session.token_state().to_dict()
        if args.json:
            _print_json(out, {"request": request, "tokens": tokens})
        else:
            print(json.dumps(request, ensure_ascii=False, indent=2), file=out)
            print(
                f"\nused {tokens['used']} of {tokens['effective_window']} tokens "
                f"({tokens['percent_left']}% left before auto-compact)",
                file=out,
            )
        return 0
    for entry in session.transcript:
        if args.json:
            _print_json(
                out,
                {
                    "seq": entry.seq,
                    "type": entry.type,
                    "token_count": entry.token_count,
                    "payload": entry.payload,
                },
            )
            continue
        role = entry.payload.get("role", "")
        flags = "".join(f" ({f})" for f in ("is_meta", "is_sidechain") if entry.payload.get(f))
        line = _describe(entry.payload).replace("\n", " ")
        print(f"{entry.seq:>6}  {entry.type:<18} {role:<9}{flags} {line[:160]}", file=out)
    return 0


def _run_edit(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    session = Session(store, args.session_id)
    if args.command == "snip":
        report = snip(session, args.rounds)
    elif args.command == "microcompact":
        report = microcompact(session, keep_recent=args.keep, tool_use_ids=args.tool_use_ids)
    else:
        report = revert(session, args.event_id)
    event_id = report.event_ids[0] if report.event_ids else None
    if args.json:
        _print_json(
            out,
            {
                "stage": report.stage,
                "tokens_freed": report.tokens_freed,
                "event_id": event_id,
                "note": report.note,
            },
        )
    elif event_id is None:
        print(f"{report.stage}: {report.note}", file=out)
    elif args.command == "revert":
        print(
            f"reverted {args.event_id}: {-report.tokens_freed} tokens back in the context (event {event_id})",
            file=out,
        )
    else:
        print(
            f"{report.stage}: freed {report.tokens_freed} tokens; undo with "
            f"`sessionstore revert {args.session_id} {event_id}`",
            file=out,
        )
    return 0


def _run_file_history(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    session = Session(store, args.session_id)
    # rewind restores under --root, else the current directory: never under the root in the log.
    root = args.root if args.command == "checkpoints" else args.root or os.getcwd()
    history = FileHistory(session, root)
    if args.command == "checkpoints":
        listed = history.checkpoints()
        pending = history.pending_changes() if args.root and listed else None
        for checkpoint in listed:
            changed = pending if checkpoint is listed[-1] else checkpoint.changed
            if args.json:
                files = {p: dataclasses.asdict(v) for p, v in checkpoint.files.items()}
                row = {k: v for k, v in dataclasses.asdict(checkpoint).items() if k != "files"}
                _print_json(out, {**row, "files": files, "changed": changed})
                continue
            what = "(turn in progress: --root DIR reads it)" if changed is None else ", ".join(changed) or "-"
            print(
                f"{checkpoint.number:>4}  seq {checkpoint.seq:<6} {checkpoint.message_uuid}  "
                f"{len(checkpoint.files)} tracked  changed: {what}",
                file=out,
            )
        unfinished = history.state.unfinished_rewind
        if unfinished is not None:
            print(f"sessionstore: warning: {unfinished.describe()}", file=sys.stderr)
        return 0
    restore_files = bool(args.files or not args.conversation)
    if restore_files:
        _check_rewind_root(history, args.message_uuid, explicit=args.root is not None)
    result = history.rewind(
        args.message_uuid,
        files=restore_files,
        conversation=args.conversation or not args.files,
        dry_run=args.dry_run,
        fork_session_id=args.fork_id,
    )
    _print_rewind(result, out, as_json=args.json)
    return 0


def _check_rewind_root(history: FileHistory, message_uuid: str, *, explicit: bool) -> None:
    """Refuse to restore into the current directory when the checkpoint names another root.

    The recorded root is a free string any appender controls, so it is never used by itself;
    a different root is only used when the user names it with ``--root`` (then a note says so).
    """
    checkpoint = history.state.checkpoint(message_uuid)
    recorded = checkpoint.root if checkpoint is not None else None
    if recorded is None or os.path.realpath(recorded) == os.path.realpath(history.root):
        return
    if explicit:
        print(
            f"sessionstore: note: the checkpoint was recorded under {recorded}; "
            f"restoring under {history.root}",
            file=sys.stderr,
        )
        return
    msg = (
        f"the checkpoint of {message_uuid} was recorded under {recorded}, not the current directory "
        f"{history.root}: pass --root DIR to name the project to restore (nothing was changed)"
    )
    raise ValidationError(msg, field="root")


def _print_rewind(result: RewindResult, out: TextIO, *, as_json: bool) -> None:
    plan = result.files
    if as_json:
        files = None
        if plan is not None:
            files = {"snapshot_seq": plan.snapshot_seq, "restored": plan.restored, "deleted": plan.deleted}
            files |= {"unchanged": plan.unchanged, "diff": plan.diff() if result.dry_run else None}
        keys = ("message_uuid", "dry_run", "fork_session_id", "fork_seq", "events_dropped")
        _print_json(out, {**{k: getattr(result, k) for k in keys}, "files": files})
        return
    verb = "would " if result.dry_run else ""
    if plan is not None:
        if result.dry_run:
            out.write(plan.diff())
        print(
            f"files: {verb}restore {len(plan.restored)}, {verb}delete {len(plan.deleted)}, "
            f"{len(plan.unchanged)} unchanged (checkpoint at seq {plan.snapshot_seq})",
            file=out,
        )
    if result.fork_seq is not None:
        fork = "a fork" if result.fork_session_id is None else f"fork {result.fork_session_id}"
        print(
            f"conversation: {verb}continue in {fork}, sharing the log up to seq {result.fork_seq} "
            f"({result.events_dropped} later events left behind)",
            file=out,
        )


def _run_replay(args: argparse.Namespace, session: Session, out: TextIO) -> int:
    if args.command == "served" and args.as_sent:
        comparison = compare_sent(session, args.turn)
        if args.json:
            _print_json(out, comparison.to_dict())
            return 0
        print(json.dumps(comparison.sent.request, ensure_ascii=False, indent=2), file=out)
        sent = comparison.sent
        print(f"\nturn {sent.turn}: request {sent.request_id} (line {sent.line}, seq {sent.seq})", file=out)
        if comparison.same_messages:
            print("the log rebuilds the same messages", file=out)
        else:
            print("the log's rebuild differs (what the transcript alone does not carry):", file=out)
            for difference in comparison.differences:
                print(f"  {difference}", file=out)
        return 0
    if args.command == "served":
        replay = served_request(session, args.turn)
        if args.json:
            _print_json(out, dataclasses.asdict(replay))
        else:
            print(json.dumps(replay.request, ensure_ascii=False, indent=2), file=out)
            verdict = "matches" if replay.matches else "DOES NOT MATCH"
            print(
                f"\nturn {replay.turn} (through seq {replay.through_seq}): {verdict} the recorded fingerprint",  # noqa: E501
                file=out,
            )
        return EXIT_OK if replay.matches else EXIT_INTEGRITY
    if args.command == "diff":
        diff = view_diff(session, args.seq_a, args.seq_b)
        if args.json:
            _print_json(out, {"from_seq": args.seq_a, "to_seq": args.seq_b, "diff": diff})
        else:
            print(diff or "(no change)", file=out)
        return 0
    raise AssertionError(args.command)


def _run_audit(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    # An erased session cannot be opened: its audit is its receipt, with no requests to rebuild.
    erased = store.erasure(args.session_id) is not None
    session = None if erased else Session(store, args.session_id)
    report = audit(store, args.session_id) if session is None else audit(session)
    recorded = []
    try:
        if session is not None:
            recorded = _sent_summary(session)
    except ValidationError as e:  # a malformed api-request line: the audit itself still stands
        print(f"sessionstore: requests Claude Code recorded cannot be rebuilt: {e}", file=sys.stderr)
    if args.json:
        _print_json(out, {**report.to_dict(), **({"claude_code_requests": recorded} if recorded else {})})
        return 0
    render_audit(report, out)
    if recorded:
        differing = [turn for turn in recorded if turn["differences"]]
        blocks = sum(len(turn["differences"]) for turn in recorded)
        print(
            f"Claude Code recorded {len(recorded)} requests; at {len(differing)} of them the log's rebuild "
            f"differs ({blocks} blocks the transcript alone does not carry, or carries otherwise): "
            "`served --turn N --as-sent` shows one",
            file=out,
        )
    return 0


def _sent_summary(session: Session) -> list[dict[str, Any]]:
    """Each request Claude Code recorded sending, with how the log's rebuild differs (none: [])."""
    return [
        {
            "turn": c.sent.turn,
            "request_id": c.sent.request_id,
            "seq": c.sent.seq,
            "differences": list(c.differences),
        }
        for c in compare_all_sent(session)
    ]


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "db":
        return _run_db(args, out)
    if args.command == "rls":
        return _run_rls(args, out)
    if args.command == "demo":
        return run_demo(args.db, out, as_json=args.json, table_prefix=args.table_prefix, schema=args.schema)
    with open_store(
        args.db,
        create=args.command in _CREATING_COMMANDS,
        table_prefix=args.table_prefix,
        schema=args.schema,
        # Encrypted sessions are read (and created) with the master key in the environment.
        encryption=EnvKeyProvider() if os.environ.get(MASTER_KEY_ENV) else None,
    ) as store:
        return _run_with_store(args, store, out)


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
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        status = _run(args, out)
        out.flush()  # a closed pipe shows up here, not in the interpreter's exit
        return status
    except DataCorruptionError as e:
        return _fail(str(e), EXIT_INTEGRITY)
    except SessionStoreError as e:
        return _fail(str(e), EXIT_ERROR)
    except BrokenPipeError:
        return _reader_gone(out)
    except OSError as e:
        return _fail(_file_problem(e), EXIT_ERROR)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover - exercised through the console script
    raise SystemExit(main())

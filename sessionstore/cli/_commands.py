"""What each command does, once its arguments are parsed.

Imported by ``main`` only after parsing, so ``sessionstore --help`` and a usage error never load
SQLAlchemy, Pydantic or the SDK; this module and the ``run_*`` functions of the command modules
import the layers they need.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, TextIO

from ..audit import audit, check_turn, context_breakdown, served_request, view_diff
from ..checkpoints import FileHistory, RewindResult
from ..claude_code import compare_all_sent, compare_sent
from ..errors import (
    EXIT_INTEGRITY,
    EXIT_OK,
    ValidationError,
)
from ..events import MessageAppended, load_json
from ..pipeline import collapse, compact, default_summarizer, microcompact, snip
from ..projections import Session, SessionConfig, WindowConfig
from ..store import (
    MASTER_KEY_ENV,
    EnvKeyProvider,
    RecordedEvent,
    RetryPolicy,
    SessionInfo,
    SessionStore,
    create_engine_for_url,
    database_revision,
    downgrade,
    open_store,
    resolve_url,
    tables_for,
    upgrade,
)
from ._compaction import print_preview, run_revert, summarizer_for
from ._compare import run_compare
from ._demo import run_demo
from ._erasure import run_erase, run_purge
from ._output import style, terminal_width, use_color
from ._plot import run_plot
from ._render import render_audit, render_breakdown
from ._rls import run_command as _run_rls
from ._serve import run_serve
from ._transcripts import run_command as _run_interchange
from ._verify import run_heads, run_verify

__all__ = ["run"]

#: How a one-shot command retries a PostgreSQL server it cannot reach: a refused or dropped
#: connection is tried again for about a second, then the command fails with one line (a host
#: that never answers still takes the connection's connect timeout). The library's default
#: (ten tries over up to 30 s, to ride out a restart) made a mistyped host or port, or a server
#: that is down, wait seven seconds and more for its error. ``import --follow`` and ``serve``,
#: which run for hours, keep the default.
CLI_RETRY = RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.25, budget_seconds=1.0)

#: Commands that may create a missing database (with ``db upgrade`` and ``demo``); every other
#: command only opens an existing one, so a mistyped ``--db`` is an error, not a new empty file.
_CREATING_COMMANDS = frozenset({"new", "append", "import"})


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
        return load_json(line, where=f"stdin line {number}")
    except ValidationError as e:  # a key twice in one object: the message names the key and line
        e.index = number
        raise
    except json.JSONDecodeError as e:
        msg = f"stdin line {number}: invalid JSON: {e.msg}"
        raise ValidationError(msg, field="stdin", index=number) from None
    except ValueError as e:  # an integer past Python's 4,300 digits (its advice is for Python code)
        msg = f"stdin line {number}: invalid JSON: {str(e).partition(';')[0]}"
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
        current = database_revision(engine, tables)
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
            lineage = ""
            if info.parent_session_id:  # a sub-agent's session forks at no seq
                at = "" if info.fork_seq is None else f"@{info.fork_seq}"
                lineage = f" parent={info.parent_session_id}{at}"
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
        if args.command == "served":  # an impossible turn is refused before the session is folded
            check_turn(store, args.session_id, args.turn)
        return _run_replay(args, Session(store, args.session_id), out)
    elif args.command == "compact":
        session = Session(store, args.session_id, _session_config())
        summarizer = summarizer_for(args.summarizer, session)
        if args.dry_run:
            return print_preview(args, session, summarizer, out)
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
                f"{compacted.tokens_after} tokens, boundary {compacted.event_id}; undo with "
                f"`sessionstore revert {args.session_id} {compacted.event_id}`",
                file=out,
            )
        else:
            print(f"compact failed ({compacted.reason}); recorded as {compacted.event_id}", file=out)
        return 0 if compacted.ok else 1
    elif args.command == "compare":
        return run_compare(args, Session(store, args.session_id, _session_config()), out)
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
        elif sys.stdin is None:  # started with standard input closed (`<&-`)
            msg = "no standard input to read the events from: pipe JSON lines in, or pass --text"
            raise ValidationError(msg, field="stdin")
        else:
            batch = _read_json_lines(sys.stdin)
        result = store.visible_log(args.session_id).append(batch, args.expected)
        if args.json:
            _print_json(out, dataclasses.asdict(result))
        else:
            note = " (already stored: nothing written)" if result.deduplicated else ""
            print(f"seqs {list(result.seqs)} positions {list(result.positions)}{note}", file=out)
    elif args.command == "events":
        _print_events(args, store, out)
    elif args.command == "plot":
        return run_plot(args, store, out, width=terminal_width())
    elif args.command == "verify":
        return run_verify(args, store, out)  # chain + snapshots (sessionstore/cli/_verify.py)
    elif args.command == "heads":
        return run_heads(args, store, out)
    elif args.command == "erase":
        return run_erase(args, store, out)
    elif args.command == "purge":
        return run_purge(args, store, out)
    return 0


def _selected_events(args: argparse.Namespace, store: SessionStore) -> list[RecordedEvent]:
    """``events``' selection: after ``--since``, of the ``--type``s, the last ``--tail``."""
    log = store.visible_log(args.session_id)
    start = (args.since or 0) + 1
    if args.tail is not None and not args.types:  # read only the tail
        start = max(start, log.last_seq() - args.tail + 1)
    events = log.read(start)
    if args.types:
        events = [e for e in events if e.type in args.types]
    if args.tail is not None:
        events = events[len(events) - args.tail :] if args.tail else []
    return events


def _print_events(args: argparse.Namespace, store: SessionStore, out: TextIO) -> None:
    color = use_color()
    width = terminal_width()
    for recorded in _selected_events(args, store):
        if args.json:
            print(json.dumps(recorded.to_dict(), ensure_ascii=False), file=out)
            continue
        tokens = "-" if recorded.token_count is None else recorded.token_count
        head = f"{recorded.seq:>6}  {recorded.type:<20} tokens={tokens:<6} "
        payload = recorded.payload[: max(0, width - len(head))]  # one line, as wide as the terminal
        print(style(head[:width], "36", color=color) + payload, file=out)


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
    if args.command == "context" and args.breakdown:
        breakdown = context_breakdown(session)
        if args.json:
            _print_json(out, breakdown.to_dict())
        else:
            render_breakdown(breakdown, out)
        return 0
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
    width = terminal_width()
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
        head = f"{entry.seq:>6}  {entry.type:<18} {role:<9}{flags} "
        print((head + line)[:width], file=out)
    return 0


def _run_edit(args: argparse.Namespace, store: SessionStore, out: TextIO) -> int:
    session = Session(store, args.session_id)
    if args.command == "snip":
        report = snip(session, args.rounds)
    elif args.command == "microcompact":
        report = microcompact(session, keep_recent=args.keep, tool_use_ids=args.tool_use_ids)
    else:
        return run_revert(args, session, out)
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


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed command; returns the exit status (errors propagate to ``main``)."""
    if args.command == "db":
        return _run_db(args, out)
    if args.command == "rls":
        return _run_rls(args, out)
    if args.command == "serve":  # opens its own store, for the server's lifetime
        return run_serve(args, out)
    if args.command == "demo":
        return run_demo(
            args.db,
            out,
            as_json=args.json,
            table_prefix=args.table_prefix,
            schema=args.schema,
            retry=CLI_RETRY,
        )
    # An export only copies events out: it does not tokenize the ones nobody counted yet.
    options: dict[str, Any] = {"token_counter": None} if args.command == "export" else {}
    if not (args.command == "import" and args.follow):  # following runs for hours: the default
        options["retry"] = CLI_RETRY
    with open_store(
        args.db,
        create=args.command in _CREATING_COMMANDS,
        table_prefix=args.table_prefix,
        schema=args.schema,
        # Encrypted sessions are read (and created) with the master key in the environment.
        encryption=EnvKeyProvider() if os.environ.get(MASTER_KEY_ENV) else None,
        **options,
    ) as store:
        store.check_reads = True  # docs/cli.md: a command that read an altered event exits 3
        return _run_with_store(args, store, out)

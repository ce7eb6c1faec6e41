"""``sessionstore compare``: re-run a compaction at a past point with other summarizers, prompts or
models, and show what each kept, as a table or ``--json``.

The tries are recorded in a fork of the session (``compare_compactions``), never in the session.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ..errors import EXIT_OK, ValidationError

if TYPE_CHECKING:  # the parser is built without them (a fast --help)
    from ..events import CompactionExperiment
    from ..pipeline import CompactionComparison, CompactionVariant
    from ..projections import Session

__all__ = ["SUMMARIZER_NAMES", "add_commands", "run_compare", "variants_for"]

#: What ``--summarizers`` takes, each optionally ``:MODEL`` (anthropic and auto).
SUMMARIZER_NAMES = ("auto", "offline", "anthropic", "memory")


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_db: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``compare`` on the CLI's sub-command parser."""
    compare = commands.add_parser(
        "compare",
        help="re-run a past compaction with other summarizers, prompts or models; recorded in a fork",
    )
    add_db(compare)
    compare.add_argument("session_id")
    compare.add_argument(
        "--at",
        required=True,
        metavar="EVENT",
        help="a compaction's event id (re-run it), or any event id or seq to compact right after",
    )
    compare.add_argument(
        "--summarizers",
        default="offline",
        metavar="LIST",
        help="comma-separated: offline, anthropic, anthropic:MODEL, auto, memory (the session memory) "
        "(default: offline)",
    )
    compare.add_argument(
        "--instructions",
        action="append",
        metavar="TEXT",
        help="custom instructions; repeat to try several (each with every summarizer; default: "
        "the compaction's own)",
    )
    compare.add_argument("--fork-id", help="id of the fork that records the tries (default: a new uuid)")
    compare.add_argument("--summaries", action="store_true", help="print each summary after the tables")
    compare.add_argument("--json", action="store_true", help="print the comparison as one JSON object")


def variants_for(names: str, instructions: list[str] | None, session: Session) -> list[CompactionVariant]:
    """The variants ``--summarizers`` and ``--instructions`` name: every summarizer with each text.

    Raises:
        ValidationError: an unknown summarizer, a model given to offline or memory, an empty
            list, or anthropic without a model or ``ANTHROPIC_API_KEY``.
    """
    from ..pipeline import CompactionVariant
    from ._compaction import summarizer_for

    specs = [spec.strip() for spec in names.split(",") if spec.strip()]
    if not specs:
        raise ValidationError("--summarizers names no summarizer", field="summarizers")
    texts: list[str | None] = list(instructions) if instructions else [None]
    variants = []
    for spec in specs:
        choice, _, model = spec.partition(":")
        if choice not in SUMMARIZER_NAMES:
            msg = f"--summarizers: unknown summarizer {choice!r} (one of {', '.join(SUMMARIZER_NAMES)})"
            raise ValidationError(msg, field="summarizers")
        if model and choice in ("offline", "memory"):
            msg = f"--summarizers: {choice} asks no model, so {spec!r} names one for nothing"
            raise ValidationError(msg, field="summarizers")
        if choice == "memory":  # the memory is the summary: no prompt to vary
            variants.append(CompactionVariant(None, label=spec))
            continue
        summarizer = summarizer_for(choice, session, model or None)
        variants += [
            CompactionVariant(summarizer, model=model or None, instructions=text, label=_label(spec, text))
            for text in texts
        ]
    return variants


def _label(spec: str, instructions: str | None) -> str:
    if not instructions:
        return spec
    short = " ".join(instructions.split())
    return f"{spec} ({short[:24]}{'…' if len(short) > 24 else ''})"


def run_compare(args: argparse.Namespace, session: Session, out: TextIO) -> int:
    """``compare SESSION --at EVENT [--summarizers LIST] [--instructions TEXT]... [--json]``."""
    from ..pipeline import compare_compactions

    variants = variants_for(args.summarizers, args.instructions, session)
    comparison = compare_compactions(session, args.at, variants, fork_id=args.fork_id)
    if args.json:
        print(json.dumps(comparison.to_dict(), ensure_ascii=False), file=out)
        return EXIT_OK
    render_comparison(comparison, out, summaries=args.summaries)
    return EXIT_OK


def _kept(trial: CompactionExperiment, kind: str) -> str:
    facts = [f for f in trial.facts if f.kind == kind]
    return f"{sum(f.kept for f in facts)}/{len(facts)}" if trial.ok else "-"


def _usage(trial: CompactionExperiment) -> str:
    if not trial.usage:
        return "-"
    return f"{trial.usage.get('input_tokens', 0):,} / {trial.usage.get('output_tokens', 0):,}"


def _elapsed(ms: int) -> str:
    if not ms:
        return "-"
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _mark(trial: CompactionExperiment, kind: str, name: str) -> str:
    fact = next((f for f in trial.facts if f.kind == kind and f.name == name), None)
    if not trial.ok:
        return ""
    if fact is None:
        return "verbatim"  # this try kept the message that names it
    if fact.in_summary:
        return "yes"
    return "restored" if fact.restored else "NO"


def render_comparison(comparison: CompactionComparison, out: TextIO, *, summaries: bool = False) -> None:
    """The tries side by side, then each file, error and task and whether each try kept it."""
    from rich.table import Table

    from ._output import console

    trials = comparison.trials
    where = f"seq {comparison.at_seq}"
    if comparison.at_event_id:
        where = f"compaction {comparison.at_event_id} (after seq {comparison.at_seq})"
    sizes = Table(title=f"compactions of {comparison.session_id} at {where}")
    for column, justify in (
        ("try", "left"),
        ("result", "left"),
        ("tokens before", "right"),
        ("after", "right"),
        ("summary", "right"),
        ("files", "right"),
        ("errors", "right"),
        ("tasks", "right"),
        ("model in / out", "right"),
        ("time", "right"),
    ):
        sizes.add_column(column, justify=justify)  # type: ignore[arg-type]
    for trial in trials:
        result = (trial.strategy or "ok") if trial.ok else f"failed: {trial.error}"
        sizes.add_row(
            trial.label,
            result,
            f"{trial.tokens_before:,}" if trial.ok else "-",
            f"{trial.tokens_after:,}" if trial.ok else "-",
            f"{trial.summary_tokens:,}" if trial.ok else "-",
            _kept(trial, "file"),
            _kept(trial, "error"),
            _kept(trial, "task"),
            _usage(trial),
            _elapsed(trial.elapsed_ms),
        )
    shown = console(out)
    shown.print(sizes)
    named = list(dict.fromkeys((f.kind, f.name, f.detail) for t in trials for f in t.facts))
    if named:
        facts = Table(title="files, errors and pending tasks in the replaced messages: kept?")
        facts.add_column("kind")
        facts.add_column("named", overflow="fold")
        for trial in trials:
            facts.add_column(trial.label)
        for kind, name, detail in named:
            label = f"{name} ({detail})" if detail else name
            facts.add_row(kind, label, *(_mark(t, kind, name) for t in trials))
        shown.print(facts)
    else:
        shown.print("The replaced messages name no file, error or pending task.")
    if summaries:
        for trial in trials:
            if trial.ok:
                shown.print(f"\n--- {trial.label} ---", markup=False, highlight=False)
                shown.print(trial.summary, markup=False, highlight=False)
    shown.print(
        f"Recorded in fork {comparison.fork_id}: "
        f"sessionstore events {comparison.fork_id} --type compaction_experiment --json",
        markup=False,
        highlight=False,
    )

"""``sessionstore plot``: the token gauge over turns, as a text sparkline or an image file.

The data is ``sessionstore.audit.token_timeline``; the image needs matplotlib (the ``plot``
extra), the sparkline needs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import MissingDependencyError, ValidationError

if TYPE_CHECKING:  # the parser is built without them (a fast --help)
    from ..audit import StageMarker, TokenTimeline, TurnTokens
    from ..store import SessionStore

__all__ = ["IMAGE_FORMATS", "STAGE_LETTERS", "add_commands", "run_plot", "sparkline"]

#: What ``-o FILE`` may end with.
IMAGE_FORMATS = (".png", ".svg", ".pdf")
#: One letter per stage under the sparkline (the legend prints the ones that occur).
STAGE_LETTERS = {
    "tool_result_persisted": ("p", "tool result persisted"),
    "snip_applied": ("s", "snip"),
    "microcompact_applied": ("m", "micro-compact"),
    "server_edits_applied": ("e", "server edits"),
    "collapse_staged": ("l", "collapse staged"),
    "collapse_committed": ("L", "collapse"),
    "context_edit_reverted": ("r", "revert"),
    "session_memory_updated": ("n", "session memory"),
    "compact_boundary": ("C", "compaction"),
    "compact_failed": ("x", "compaction failed"),
}
_BARS = "▁▂▃▄▅▆▇█"


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_db: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``plot`` on the CLI's sub-command parser."""
    plot = commands.add_parser(
        "plot", help="the token gauge over turns with stage markers (text, or -o FILE)"
    )
    add_db(plot)
    plot.add_argument("session_id")
    plot.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write an image (.png, .svg or .pdf; needs matplotlib: pip install 'sessionstore[plot]')",
    )
    plot.add_argument("--json", action="store_true", help="print the timeline as JSON instead")


def run_plot(args: argparse.Namespace, store: SessionStore, out: TextIO, *, width: int) -> int:
    """``plot SESSION [-o FILE] [--json]``."""
    from ..audit import token_timeline

    if args.output is not None and Path(args.output).suffix.lower() not in IMAGE_FORMATS:
        msg = f"{args.output}: the image is written as .png, .svg or .pdf (by its name's ending)"
        raise ValidationError(msg, field="output")
    timeline = token_timeline(store, args.session_id)
    if args.json:
        print(json.dumps(timeline.to_dict(), ensure_ascii=False), file=out)
    elif args.output is not None:
        write_image(timeline, Path(args.output))
        print(f"{args.output}: {len(timeline.turns)} turns of {timeline.session_id}", file=out)
    else:
        for line in sparkline(timeline, width=width):
            print(line, file=out)
    return 0


def _buckets(turns: list[TurnTokens], columns: int) -> list[list[TurnTokens]]:
    """The turns in at most ``columns`` consecutive groups (one column each)."""
    count = max(1, -(-len(turns) // columns))  # ceiling: turns per column
    return [turns[i : i + count] for i in range(0, len(turns), count)]


def sparkline(timeline: TokenTimeline, *, width: int = 80) -> list[str]:
    """The timeline as text lines: a bar per turn (the highest of each group when the turns are
    more than the width), a line of stage letters under it, the legend and the latest numbers."""
    window = timeline.window
    if not timeline.turns:
        return [f"{timeline.session_id}: no turns yet (no served request, no API usage recorded)"]
    label = f"{window.effective_window:,} "
    columns = max(4, width - len(label) - 1)
    groups = _buckets(timeline.turns, columns)
    bars = ""
    marks = ""
    seen: dict[str, str] = {}
    for group in groups:
        used = max(turn.used for turn in group)
        level = min(len(_BARS) - 1, used * len(_BARS) // max(1, window.effective_window))
        bars += _BARS[level]
        stages: list[StageMarker] = [m for turn in group for m in turn.stages]
        letters = [STAGE_LETTERS.get(m.kind, ("?", m.kind)) for m in stages]
        seen.update((letter, name) for letter, name in letters)
        # The strongest stage of the column: a compaction over a collapse over the rest.
        marks += max((letter for letter, _ in letters), key=_rank, default=" ")
    per = len(groups[0])
    last = timeline.turns[-1]
    threshold = (
        f"auto-compact at {window.autocompact_threshold:,}"
        if window.auto_compact_enabled
        else "auto-compact off"
    )
    lines = [
        f"{timeline.session_id}: tokens used in turns 1-{last.turn} "
        f"(of {window.effective_window:,}; {threshold})",
        f"{label}{bars}",
        f"{' ' * len(label)}{marks}".rstrip(),
    ]
    if per > 1:
        lines.append(f"one column per {per} turns (the highest of them)")
    if seen:
        lines.append(
            "stages: "
            + ", ".join(
                f"{letter} {name}" for letter, name in sorted(seen.items(), key=lambda i: _rank(i[0]))
            )
        )
    lines.append(
        f"turn {last.turn}: {last.used:,} tokens used, {last.percent_left}% left before auto-compact"
    )
    if timeline.pending:
        lines.append(
            f"{len(timeline.pending)} stage(s) since the last turn: "
            + ", ".join(m.kind for m in timeline.pending)
        )
    return lines


def _rank(letter: str) -> int:
    order = "Cx" + "Ll" + "smepnr"
    return len(order) - order.index(letter) if letter in order else 0


def write_image(timeline: TokenTimeline, path: Path) -> None:
    """Draw the timeline with matplotlib into ``path`` (its ending picks the format), whole or not
    at all (a temp file beside it, renamed over it).

    Raises:
        MissingDependencyError: matplotlib is not installed (the ``plot`` extra).
    """
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError(
            "plot", "plot -o (an image; without -o a sparkline)", "matplotlib"
        ) from None
    matplotlib.use("Agg")  # files only: never a window, never a display
    from matplotlib import pyplot

    window = timeline.window
    turns = [turn.turn for turn in timeline.turns]
    figure, axes = pyplot.subplots(figsize=(11, 4.5))
    try:
        axes.plot(
            turns, [turn.used for turn in timeline.turns], color="tab:blue", linewidth=1.5, label="used"
        )
        axes.axhline(window.effective_window, color="black", linewidth=0.8, label="effective window")
        if window.auto_compact_enabled:
            axes.axhline(
                window.autocompact_threshold,
                color="tab:red",
                linestyle="--",
                linewidth=0.8,
                label="auto-compact",
            )
        labelled: set[str] = set()
        for turn in timeline.turns:
            for marker in turn.stages:
                name = STAGE_LETTERS.get(marker.kind, ("?", marker.kind))[1]
                axes.axvline(
                    turn.turn,
                    color=_colour(marker.kind),
                    alpha=0.5,
                    linewidth=1,
                    label=None if name in labelled else name,
                )
                labelled.add(name)
        axes.set_xlabel("turn")
        axes.set_ylabel("tokens used")
        axes.set_ylim(0, window.window)
        axes.set_title(f"{timeline.session_id}: tokens per turn")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        figure.tight_layout()
        image = io.BytesIO()
        figure.savefig(image, format=path.suffix.lower().lstrip("."))
    finally:
        pyplot.close(figure)
    _write_whole(path, image.getvalue())


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` into ``path``, whole or not at all: a fsynced temp file beside it, renamed over
    it. A full disk leaves the file as it was, with no temp beside it, and names ``path``."""
    temp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(6)}.plot-tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 through the umask
    except OSError as e:  # a missing or read-only folder: say so of the target, not of the temp
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        # Unbuffered: a write cut short (a full disk) must fail here, naming the file, not in
        # the close, whose error would replace the named one.
        with os.fdopen(fd, "wb", buffering=0) as f:
            try:
                unwritten = memoryview(data)
                while unwritten:
                    unwritten = unwritten[f.write(unwritten) :]
                os.fsync(f.fileno())
            except OSError as e:
                raise type(e)(e.errno, e.strerror, str(path)) from None
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _colour(kind: str) -> str:
    if kind.startswith("compact"):
        return "tab:red"
    if kind.startswith("collapse"):
        return "tab:purple"
    if kind in ("snip_applied", "microcompact_applied", "server_edits_applied"):
        return "tab:orange"
    return "tab:gray"

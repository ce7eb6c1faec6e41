"""Progress of long commands on stderr, with rich's progress bars, when stderr is a terminal.

``import``, ``verify`` (every session), ``export`` and ``purge`` show what they are doing while
they work; stdout keeps only the results, so piping them stays clean. Not on a terminal, nothing
is drawn (``import --progress`` prints its plain percentage line instead).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["ImportBars", "counting", "on_terminal", "spinner"]


def on_terminal() -> bool:
    """Whether stderr is a terminal (and TERM is not ``dumb``): progress is drawn only there."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def _progress(*columns: object) -> Progress:
    from rich.console import Console
    from rich.progress import Progress

    return Progress(*columns, console=Console(stderr=True), transient=False)  # type: ignore[arg-type]


def _files(paths: Sequence[str]) -> list[Path]:
    """The transcripts an import of ``paths`` reads: the files, and each folder's ``.jsonl`` files."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*.jsonl")) if p.is_file())
        elif path.is_file():
            found.append(path)
    return found


class ImportBars:
    """``import``'s bars: the files and bytes being read, then the lines written.

    Called as the import's ``progress(done, total)``: the import counts every line twice, once
    read and once written, so the first half is reading and the second the write phase.
    """

    def __init__(self, paths: Sequence[str]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

        files = _files(paths)
        size = sum(f.stat().st_size for f in files)
        self.progress = _progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        self.reading: TaskID = self.progress.add_task(
            f"reading {len(files)} file{'s' if len(files) != 1 else ''} ({_size(size)}), lines", total=None
        )
        self.writing: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        half = total // 2
        self.progress.update(self.reading, total=half, completed=min(done, half))
        if done >= half and self.writing is None:
            self.writing = self.progress.add_task("writing events, lines", total=half)
        if self.writing is not None:
            self.progress.update(self.writing, completed=max(0, done - half))

    def __enter__(self) -> ImportBars:
        self.progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.progress.stop()


def _size(count: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover - the loop returns


@contextlib.contextmanager
def counting(description: str, total: int | None = None) -> Iterator[_Counter]:
    """A bar counting items (``advance()`` after each); draws nothing off a terminal."""
    if not on_terminal():
        yield _Counter(None, None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = _progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with progress:
        yield _Counter(progress, progress.add_task(description, total=total))


class _Counter:
    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self.progress = progress
        self.task = task

    def advance(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)


@contextlib.contextmanager
def spinner(description: str) -> Iterator[None]:
    """A spinner with ``description`` while the block runs (one call with no steps to count)."""
    if not on_terminal():
        yield
        return
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = _progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with progress:
        task = progress.add_task(description, total=1)
        yield
        progress.update(task, completed=1)

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

    ``file_read`` (the import's ``on_file_read``) advances the reading bar by each file's bytes
    and names the file; ``__call__`` (the import's ``progress(done, total)``) counts every line
    twice, once read and once written: its second half is the write phase, a bar of its own.
    """

    def __init__(self, paths: Sequence[str]) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        files = _files(paths)
        self.files = len(files)
        self.files_read = 0
        self.lines_read = 0
        size = sum(f.stat().st_size for f in files)
        def described() -> tuple[object, ...]:  # columns hold state: each bar gets its own
            return SpinnerColumn(), TextColumn("{task.description}"), BarColumn()

        self.reading_progress = _progress(*described(), DownloadColumn(), TimeElapsedColumn())
        self.writing_progress = _progress(*described(), MofNCompleteColumn(), TimeElapsedColumn())
        from rich.console import Group
        from rich.live import Live

        # One live display for both bars: two Progress objects cannot both be live at once.
        bars = Group(self.reading_progress, self.writing_progress)
        self.live = Live(bars, console=self.reading_progress.console)
        self.reading: TaskID = self.reading_progress.add_task(self._reading(""), total=size or None)
        self.writing: TaskID | None = None

    def _reading(self, name: str) -> str:
        plural = "s" if self.files != 1 else ""
        now = f": {name}" if name else ""
        return f"reading {self.files_read} of {self.files} file{plural}, {self.lines_read} lines{now}"

    def file_read(self, path: str, size: int, lines: int) -> None:
        """One file was read: its bytes and lines join the reading bar."""
        self.files_read += 1
        self.lines_read += lines
        self.reading_progress.update(self.reading, advance=size, description=self._reading(Path(path).name))

    def __call__(self, done: int, total: int) -> None:
        half = total // 2
        if done >= half and self.writing is None:
            task = self.reading_progress.tasks[0]
            self.reading_progress.update(self.reading, completed=task.total or task.completed)
            self.writing = self.writing_progress.add_task("writing events, lines", total=half)
        if self.writing is not None:
            self.writing_progress.update(self.writing, completed=max(0, done - half))

    def __enter__(self) -> ImportBars:
        self.live.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.live.stop()


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

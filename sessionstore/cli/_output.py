"""How the command line writes to a terminal: width, colour and the pager.

Like git: colour only when stdout is a terminal and ``NO_COLOR`` is unset (https://no-color.org);
tables as wide as the terminal (``COLUMNS`` wins; 160 when stdout is not a terminal, so piped
output keeps whole lines); long output of a reading command goes through a pager, only on a
terminal and only when it is longer than the screen, unless ``--no-pager`` or ``PAGER=cat``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "PAGED_COMMANDS",
    "console",
    "page",
    "pager_command",
    "style",
    "terminal_width",
    "use_color",
]

#: Commands whose output is paged on a terminal: they read and print, possibly a lot.
PAGED_COMMANDS = frozenset(
    {
        "sessions",
        "events",
        "show",
        "context",
        "audit",
        "served",
        "diff",
        "heads",
        "checkpoints",
        "plot",
        "verify",
    }
)
#: Width for output that does not go to a terminal (files, pipes), unless COLUMNS says otherwise.
PIPE_WIDTH = 160
#: less options when LESS is unset, as git sets them: quit if one screen (F), keep colours (R),
#: leave the screen as it is (X).
LESS_DEFAULT = "FRX"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real file
        return False


def use_color(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (default stdout): a terminal, NO_COLOR unset (or
    empty) and TERM not ``dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    return _is_terminal(sys.stdout if stream is None else stream)


def terminal_width(environ: Mapping[str, str] | None = None) -> int:
    """Columns to fit output into: COLUMNS, else the terminal's width, else ``PIPE_WIDTH``."""
    env = os.environ if environ is None else environ
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if _is_terminal(sys.stdout):
        return shutil.get_terminal_size().columns
    return PIPE_WIDTH


def style(text: str, code: str, *, color: bool) -> str:
    """``text`` in an ANSI SGR style (``"1"`` bold, ``"2"`` dim, ``"36"`` cyan) when colouring."""
    return f"\033[{code}m{text}\033[0m" if color else text


def console(out: TextIO) -> Console:
    """A rich console writing to ``out``: the terminal's width, colour by :func:`use_color`.

    A reader that closed the pipe (``sessionstore audit SID | head``) raises ``BrokenPipeError``
    for ``main`` to end with the broken pipe's status, as every other output does (rich's own
    handler exits 1, the status of an error, saying nothing).
    """
    from rich.console import Console  # imported here: only the table views need rich

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more to write: the reader is gone
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    color = use_color()
    return _Console(
        file=out,
        width=terminal_width(),
        no_color=not color,
        force_terminal=color,  # out may be the pager's buffer: colour what the terminal will show
        color_system="auto" if color else None,
        highlight=False,
    )


def pager_command(
    lines: int,
    *,
    is_terminal: bool,
    no_pager: bool,
    rows: int,
    environ: Mapping[str, str],
) -> str | None:
    """The pager to show ``lines`` lines through, or None to write them straight out.

    None when stdout is not a terminal, ``--no-pager`` was given, the text fits the screen
    (``rows`` less the prompt's line), or the pager is ``cat`` or empty. Else
    ``SESSIONSTORE_PAGER``, then ``PAGER``, then ``less``.
    """
    if no_pager or not is_terminal or lines < rows:
        return None
    chosen = environ.get("SESSIONSTORE_PAGER", environ.get("PAGER", "less")).strip()
    if chosen in ("", "cat"):
        return None
    return chosen


def page(text: str, *, no_pager: bool) -> None:
    """Write ``text`` to stdout, through the pager when :func:`pager_command` says so."""
    size = shutil.get_terminal_size()
    command = pager_command(
        text.count("\n"),
        is_terminal=_is_terminal(sys.stdout),
        no_pager=no_pager,
        rows=size.lines,
        environ=os.environ,
    )
    if command is None:
        sys.stdout.write(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", LESS_DEFAULT)
    sys.stdout.flush()
    try:
        # A shell runs it, as git runs $PAGER: it may carry options (`less -S`).
        subprocess.run(command, shell=True, input=text, text=True, env=env, check=False)
    except OSError:  # no shell, or it cannot start: the text is still owed to the reader
        sys.stdout.write(text)

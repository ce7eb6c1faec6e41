"""Reading tracked files from disk for a capture: regular files only, a missing file is None."""

from __future__ import annotations

import os
import stat

from .._paths import file_kind, read_regular_file

__all__: list[str] = []


def _read_file(target: str) -> bytes | None:
    """The file's bytes, or None if nothing is there (a dangling link counts as nothing).

    Raises:
        PathRefusedError: something other than a regular file is there (a FIFO would block
            the read forever, a device never ends); ``_resolve`` refuses these first.
    """
    try:
        return read_regular_file(target)
    except FileNotFoundError:
        return None


def _not_a_file(target: str) -> str | None:
    """Why what is at ``target`` cannot be read or replaced as a file, or None (a file, or nothing)."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return None
    return None if stat.S_ISREG(mode) else f"is {file_kind(mode)}, not a regular file"

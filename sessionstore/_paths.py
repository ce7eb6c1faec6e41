"""Path safety for file history: paths are stored relative to a project root, and no read or
restore ever leaves that root.

Two gates, both applied before anything is read or written:

* ``lexical_problem`` — the stored form: a non-empty relative POSIX path of normal components
  (no absolute path, drive, ``..``, ``.``, empty component, backslash or NUL).
* ``resolve_in_root`` — the file system: the parent directory, resolved with
  ``os.path.realpath``, must lie inside the real root, and a symlink at the path must point
  inside it too. This catches a symlinked directory or file that leads out of the project.

Files that others wrote (transcripts, sidecars, export targets) pass two more gates:

* ``name_problem`` — a single file name built from a value read from a transcript or the log
  (a session id, an agent id, a sidecar's name): ``[A-Za-z0-9._-]``, no separator, no ``..``.
* ``read_regular_file`` — only a regular file is read: it is opened with ``O_NONBLOCK`` (a FIFO
  cannot block the open) and checked with ``fstat`` before any read (a FIFO, a socket or a device
  such as ``/dev/zero`` cannot block the read or fill memory); optionally without following a
  symlink and with a size bound.

Files written for others (a rewind's restored files, an export) are written whole or not at all:
``write_beside`` streams to a fsynced temp file beside the target, which the caller renames over
it (``os.replace`` is atomic) and then makes durable with ``fsync_directories``.

The check and the later write are separate system calls: a process that swaps a directory for a
symlink in between is outside this module's threat model (it could write there itself).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path, PureWindowsPath
from typing import BinaryIO

from .errors import PathRefusedError, ValidationError

__all__ = [
    "check_path",
    "check_paths",
    "file_kind",
    "fsync_directories",
    "inside",
    "lexical_problem",
    "name_problem",
    "open_regular_file",
    "read_regular_file",
    "resolve_in_root",
    "to_relative",
    "write_beside",
]

#: A file name built from a value that came from a file or the log.
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")


def check_path(name: str, value: object) -> Path:
    """``value`` as a ``Path``, if it is a str or an ``os.PathLike`` of one, without NUL.

    Raises:
        ValidationError: otherwise, naming the argument (``open`` raised TypeError or
            "embedded null byte" ValueError).
    """
    if not isinstance(value, str | os.PathLike):
        raise ValidationError(f"{name} must be a str or a Path, not {type(value).__name__}", field=name)
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ValidationError(f"{name} must be a str or a Path, not {type(text).__name__}", field=name)
    if "\x00" in text:
        raise ValidationError(f"{name} {text!r} holds a NUL character", field=name)
    try:
        os.fsencode(text)  # a lone surrogate that is no escaped byte of a file name
    except UnicodeEncodeError as e:
        msg = f"{name} is not valid Unicode (a lone surrogate): {text[e.start : e.end]!r}"
        raise ValidationError(msg, field=name) from None
    return Path(text)


def check_paths(name: str, values: object) -> list[Path]:
    """``values`` as a list of ``Path``, if it is a sequence of what ``check_path`` takes.

    Raises:
        ValidationError: one path given bare (a str is not iterated as its characters, each a
            path), or not a sequence, or an item that ``check_path`` refuses.
    """
    if isinstance(values, str | bytes | os.PathLike) or not isinstance(values, Iterable):
        kind = type(values).__name__
        msg = f"{name} must be a list of paths (wrap a single path in a list), not {kind}"
        raise ValidationError(msg, field=name)
    return [check_path(name, value) for value in values]


def lexical_problem(path: str) -> str | None:
    """Why ``path`` is not a safe stored path (relative, POSIX, normal form), or None if it is."""
    if not path:
        return "empty path"
    if "\x00" in path:
        return "contains a NUL byte"
    if "\\" in path:
        # A backslash is a separator on Windows: `a\..\..\x` would climb there.
        return "contains a backslash (paths are stored in POSIX form)"
    if path.startswith("/") or PureWindowsPath(path).drive:
        return "absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "'..' component"
    if any(part in ("", ".") for part in parts):
        return "not in normal form (empty or '.' component)"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` may not be used as one file name, or None if it may.

    A name built from imported data (``sessionId``, ``agentId``, a sidecar's name) must be 1-255
    of ``[A-Za-z0-9._-]`` with no ``..``, and not ``.``: it can then neither climb, nor name a
    folder, nor be absolute.
    """
    if not _SAFE_NAME.fullmatch(name):
        return "not a plain file name (1-255 of letters, digits, '.', '_', '-'; no separator)"
    if ".." in name or name == ".":
        return "contains '..' or is '.'"
    return None


def file_kind(mode: int) -> str:
    """What a non-regular file is, from its ``st_mode``: "a FIFO", "a directory", ..."""
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "an unknown kind of file"


def open_regular_file(path: str | os.PathLike[str]) -> BinaryIO:
    """The regular file at ``path``, open for reading in binary; anything else is refused before
    it is read (as ``read_regular_file`` refuses it), for a file read a part at a time.

    Raises:
        PathRefusedError: ``path`` is not a regular file.
        FileNotFoundError, OSError: as ``open``.
    """
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PathRefusedError({name: f"{file_kind(info.st_mode)}, not a regular file"})
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(
    path: str | os.PathLike[str], *, follow_symlinks: bool = True, max_bytes: int | None = None
) -> bytes:
    """The bytes of the regular file at ``path``; anything else is refused before it is read.

    Args:
        follow_symlinks: False opens with ``O_NOFOLLOW``: a symlink at ``path`` is refused.
        max_bytes: refuse a file larger than this.

    Raises:
        PathRefusedError: ``path`` is not a regular file (a FIFO, a device, a socket, a
            directory), is a symlink and ``follow_symlinks`` is False, or is over ``max_bytes``.
        FileNotFoundError: nothing is there (or a dangling symlink).
        OSError: the file cannot be opened or read (permissions, I/O).
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(name, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise PathRefusedError({name: "a symlink (not followed)"}) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PathRefusedError({name: f"{file_kind(info.st_mode)}, not a regular file"})
        if max_bytes is not None and info.st_size > max_bytes:
            raise PathRefusedError({name: f"{info.st_size} bytes, over the limit of {max_bytes}"})
        return _read_all(fd, name, max_bytes)
    finally:
        os.close(fd)


def _read_all(fd: int, name: str, max_bytes: int | None) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:  # it grew since fstat
            raise PathRefusedError({name: f"over the limit of {max_bytes} bytes"})
        chunks.append(chunk)
    return b"".join(chunks)


def inside(path: str, root: str) -> bool:
    """True when the absolute ``path`` is ``root`` or below it (both already resolved)."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives (Windows)
        return False


def to_relative(root: str, path: str | os.PathLike[str]) -> str:
    """The stored form of a path a caller names: relative to ``root``, POSIX, normal.

    Accepts a relative path (``./`` and doubled slashes are normalized) or an absolute one
    inside ``root`` (by its plain or its resolved spelling).

    Raises:
        PathRefusedError: the path is outside the root, climbs with ``..``, or is malformed.
    """
    given = os.fspath(path)
    text = given
    if os.path.isabs(given):
        normal = os.path.normpath(given)
        for base in (os.path.abspath(root), os.path.realpath(root)):
            if inside(normal, base) and normal != base:
                text = os.path.relpath(normal, base)
                break
        else:
            raise PathRefusedError({given: "absolute path outside the project root"})
    if os.sep != "/":  # pragma: no cover - POSIX test hosts
        text = text.replace(os.sep, "/")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    relative = "/".join(parts)
    problem = lexical_problem(relative)
    if problem is not None:
        raise PathRefusedError({given: problem})
    return relative


def resolve_in_root(real_root: str, relative: str) -> tuple[str | None, str | None]:
    """Where to act on the stored path ``relative`` under ``real_root`` (already realpath'd).

    Returns:
        ``(target, None)`` with the absolute path to read, replace or delete — the symlink's
        destination when the path is a symlink that stays inside the root — or
        ``(None, reason)`` when the path is refused.
    """
    problem = lexical_problem(relative)
    if problem is not None:
        return None, problem
    candidate = os.path.join(real_root, *relative.split("/"))
    parent = os.path.realpath(os.path.dirname(candidate))
    if not inside(parent, real_root):
        return None, "its directory resolves outside the project root (symlink)"
    target = os.path.join(parent, os.path.basename(candidate))
    if os.path.islink(target):
        destination = os.path.realpath(target)
        if not inside(destination, real_root) or destination == real_root:
            return None, "symlink pointing outside the project root"
        # Restore through the link (as an editor would), keeping the link itself.
        target = destination
    return target, None


def write_beside(target: str, chunks: Iterable[bytes], tag: str) -> str:
    """Write ``chunks`` to a new temp file beside ``target`` (``.<name>.<random>.<tag>``), fsynced,
    with ``target``'s mode when it exists; returns the temp's path for the caller to rename.

    The folder must exist. On any error (a chunk that fails to come, a full disk) the temp is
    removed and the error raised (an ``OSError`` of the writing names ``target``): the target is
    untouched.
    """
    directory, name = os.path.split(target)
    # Cut: a name near the 255-byte limit must not make its temp's too long to create.
    temp = os.path.join(directory, f".{name[:200]}.{secrets.token_hex(6)}.{tag}")
    # 0o666 through the umask, like any new file; an existing file's mode is copied below.
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:  # a missing or read-only folder: say so of the target, not of the temp
        raise type(e)(e.errno, e.strerror, target) from None
    writing = False  # an OSError while writing is the target's (a full disk): say so of it
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                writing = True
                f.write(chunk)
                writing = False
            writing = True
            f.flush()
            os.fsync(f.fileno())
        writing = False
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
    except BaseException as e:
        os.unlink(temp)
        if writing and isinstance(e, OSError) and e.filename is None:
            raise type(e)(e.errno, e.strerror, target) from None
        raise
    return temp


def fsync_directories(paths: Iterable[str]) -> None:
    """Make renames and unlinks of these paths durable (POSIX needs their folders fsynced)."""
    for directory in sorted({os.path.dirname(p) for p in paths}):
        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError:  # pragma: no cover - a platform that cannot open directories
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

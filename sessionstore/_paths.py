"""Path safety for file history: paths are stored relative to a project root, and no read or
restore ever leaves that root.

Two gates, both applied before anything is read or written:

* ``lexical_problem`` — the stored form: a non-empty relative POSIX path of normal components
  (no absolute path, drive, ``..``, ``.``, empty component, backslash or NUL).
* ``resolve_in_root`` — the file system: the parent directory, resolved with
  ``os.path.realpath``, must lie inside the real root, and a symlink at the path must point
  inside it too. This catches a symlinked directory or file that leads out of the project.

The check and the later write are separate system calls: a process that swaps a directory for a
symlink in between is outside this module's threat model (it could write there itself).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PureWindowsPath

from ._errors import ValidationError

__all__ = ["PathRefusedError", "inside", "lexical_problem", "resolve_in_root", "to_relative"]


class PathRefusedError(ValidationError):
    """Paths that may not be read or restored; nothing was read, written or recorded.

    Raised with *every* refused path at once, so a caller fixes them all in one go.

    Attributes:
        refused: each refused path (as stored or given), mapped to the reason.
    """

    def __init__(self, refused: Mapping[str, str]) -> None:
        self.refused = dict(sorted(refused.items()))
        reasons = "; ".join(f"{path!r}: {why}" for path, why in self.refused.items())
        super().__init__(f"refused {len(self.refused)} path(s), nothing was written: {reasons}", field="path")


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

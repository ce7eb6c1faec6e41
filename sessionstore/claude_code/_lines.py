"""The lines of a Claude Code transcript, read in two passes so a file never has to fit in memory.

The first pass (``scan_lines``) reads the file a line at a time, parses and checks every line
(a bad one fails the import there, naming file and line, before anything is written) and keeps
only each object's *head*: the few small fields that order the log and link its parts (uuids,
type, compaction metadata, the API response's id, model and usage), with where the line sits in
the file and a CRC of its bytes. The second pass (``LineReader``) reads a line again, by
offset, when it is converted; the CRC proves it is the line the first pass checked, so a file
rewritten in between fails the import instead of importing something never validated.

Lines given as bytes already in memory (the follower's settled prefix, an exported session)
keep their parsed objects: their head is the object itself.
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .._paths import open_regular_file
from ..errors import ValidationError
from ..events._base import MAX_JSON_DEPTH, json_problem

__all__ = ["BadLineError", "Line", "LineReader", "line_objects", "scan_lines"]


class BadLineError(Exception):
    """A line that cannot be read or modelled (the message says why)."""


#: The events that keep a line nest it a few levels deeper than the line itself.
_MAX_LINE_DEPTH = MAX_JSON_DEPTH - 10
#: Top-level fields the import reads before conversion (all small); the rest is read again later.
_HEAD_KEYS = (
    "type",
    "subtype",
    "uuid",
    "parentUuid",
    "logicalParentUuid",
    "sessionId",
    "agentId",
    "isSidechain",
    "isCompactSummary",
    "compactMetadata",
)
#: Fields of ``message`` read before conversion: which API response, its model and usage.
_MESSAGE_HEAD_KEYS = ("id", "model", "usage")


class Line:
    """One JSON object of a transcript: its line number, place on the line, head and bytes' place."""

    __slots__ = ("_entry", "at", "crc", "head", "number", "object_index", "size")

    def __init__(
        self,
        number: int,
        head: dict[str, Any],
        object_index: int = 0,
        *,
        entry: dict[str, Any] | None = None,
        at: int = 0,
        size: int = 0,
        crc: int = 0,
    ) -> None:
        self.number = number
        #: The small fields of the object (the object itself when it is kept whole).
        self.head = head
        #: The object's place on its line (>0: appended to the line without a newline).
        self.object_index = object_index
        self._entry = entry
        #: Where the line's bytes are in its file, and their CRC-32 (a streamed line).
        self.at, self.size, self.crc = at, size, crc

    @property
    def entry(self) -> dict[str, Any]:
        """The whole object, for a line read from bytes in memory (a streamed one: ``LineReader``)."""
        if self._entry is None:  # pragma: no cover - a programming error, not an input error
            msg = f"line {self.number} was streamed: read it through a LineReader"
            raise AssertionError(msg)
        return self._entry

    @property
    def kept(self) -> bool:
        """True when the whole object is in memory."""
        return self._entry is not None


def _head(entry: dict[str, Any]) -> dict[str, Any]:
    head = {key: entry[key] for key in _HEAD_KEYS if key in entry}
    message = entry.get("message")
    if isinstance(message, dict):
        head["message"] = {key: message[key] for key in _MESSAGE_HEAD_KEYS if key in message}
    return head


def _check_entry(entry: object, unstorable: bool) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise BadLineError(f"not a JSON object but {type(entry).__name__}")
    if not isinstance(entry.get("type"), str):
        raise BadLineError("has no string 'type'")
    for key in ("uuid", "parentUuid", "logicalParentUuid", "sessionId", "agentId"):
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            raise BadLineError(f"'{key}' must be a string or null, not {type(value).__name__}")
    if unstorable:
        problem = json_problem(entry, max_depth=_MAX_LINE_DEPTH)
        if problem is not None:  # a lone surrogate, deep nesting ...: it would not be exported as read
            raise BadLineError(problem)
    return entry


def _may_be_unstorable(raw: bytes) -> bool:
    """Whether the parsed line needs ``json_problem``'s walk (a quarter of a large import's time).

    From UTF-8 JSON text (NaN, infinities and numbers too large for a float, such as ``1e999``,
    are refused while parsing, over-long integers by the decoder), only two problems can come: a
    lone surrogate, which only a ``\\uD8xx``-``\\uDFxx`` escape can spell, and nesting deeper than
    the limit, which takes at least that many brackets. A line with neither pattern is storable
    as read.
    """
    if raw.count(b"{") + raw.count(b"[") >= _MAX_LINE_DEPTH:
        return True
    return b"\\ud" in raw or b"\\uD" in raw


def _refuse_constant(name: str) -> object:
    raise BadLineError(f"{name} is not JSON that reads back equal")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: valid JSON, but a float of it is infinite
        raise BadLineError(f"{text}: {value} (JSON has no NaN or infinity)")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def line_objects(text: str) -> list[object]:
    """The JSON values on one line: one, or several written back to back.

    Claude Code sometimes appends an entry without a newline (typically a ``summary``), so a
    line can hold ``{...}{...}``. Anything else after a value (garbage, a truncated object)
    raises ``json.JSONDecodeError`` as ``json.loads`` would: the line stays a bad line.
    """
    values: list[object] = []
    at = len(text) - len(text.lstrip(" \t\r\n"))  # JSON's whitespace, as json.loads skips it
    while True:
        value, end = _DECODER.raw_decode(text, at)
        values.append(value)
        if not text[end:].strip():
            return values
        if not text.startswith("{", end):
            raise json.JSONDecodeError("Extra data", text, end)
        at = end


def _text(raw: bytes) -> str:
    """A line's text without its newline (decoded in place: the bytes are not copied first)."""
    return str(memoryview(raw)[:-1] if raw.endswith(b"\n") else raw, "utf-8")


def reason(error: Exception) -> str:
    """Why a line is bad, for the error or the skip report."""
    if isinstance(error, json.JSONDecodeError):
        return f"invalid JSON: {error.msg} at column {error.colno}"
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8: {error.reason} at byte {error.start}"
    if isinstance(error, RecursionError):
        return "JSON nested too deeply"
    if isinstance(error, ValueError):  # the decoder's int/str limit
        return f"an integer longer than {sys.get_int_max_str_digits()} digits"
    return str(error)


#: ``skip(number, reason)``: a bad line; raises to fail the import, returns to skip the line.
BadLine = Callable[[int, str], None]
#: ``visit(line, entry)``: each object read, whole, before the first pass lets it go.
Visit = Callable[[Line, dict[str, Any]], None]


def _raw_lines(path: Path, data: bytes | None) -> Iterator[tuple[int, list[bytes]]]:
    """(offset, [bytes]) of each line: split on ``\n`` only (JSON strings never hold a raw one).

    The bytes come in a list the caller empties: a long line is then let go as soon as it was
    decoded, not held here until the next one is read.
    """
    if data is not None:
        at = 0
        for raw in data.split(b"\n"):
            yield at, [raw]
            at += len(raw) + 1
        return
    with open_regular_file(path) as handle:
        at = 0
        for raw in handle:  # a line at a time, however long: never the whole file
            size, box = len(raw), [raw]
            del raw
            yield at, box
            at += size


def scan_lines(
    path: Path, bad_line: BadLine, visit: Visit, data: bytes | None = None, *, first: int = 1
) -> list[Line]:
    """The first pass: every object of ``path`` (or of ``data``, its bytes as already read).

    Each object is checked, shown whole to ``visit``, and kept as its head only (unless
    ``data`` is given: then it is kept whole). A bad line goes to ``bad_line``. ``first`` is
    the number of the first line (``data`` that follows lines read before).

    Raises:
        OSError, PathRefusedError: the file cannot be read, or is not a regular file.
    """
    keep = data is not None
    lines: list[Line] = []
    for number, (at, box) in enumerate(_raw_lines(path, data), start=first):
        raw = box.pop()
        if not raw or raw.isspace():  # blank (no copy of a long line, as strip() would make)
            continue
        size, crc, unstorable = len(raw), (0 if keep else zlib.crc32(raw)), _may_be_unstorable(raw)
        try:
            text = _text(raw)
            del raw
            entries = [_check_entry(value, unstorable) for value in line_objects(text)]
        except (ValueError, RecursionError, BadLineError) as e:  # ValueError: JSON, UTF-8, int digits
            bad_line(number, reason(e))
            continue
        finally:
            text = ""
        for index, entry in enumerate(entries):
            line = (
                Line(number, entry, index, entry=entry)
                if keep
                else Line(number, _head(entry), index, at=at, size=size, crc=crc)
            )
            visit(line, entry)
            lines.append(line)
        del entries
    return lines


class LineReader:
    """The second pass: a streamed line's objects, read again by offset when they are converted.

    The last line read is kept, so the objects of one line (and a line asked for twice in a
    row) are parsed once. Close it (or use it as a context manager) to close the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None
        self._number = 0
        self._objects: list[object] = []

    def entry(self, line: Line) -> dict[str, Any]:
        """The whole object of ``line``.

        Raises:
            ValidationError: the line's bytes are not those the first pass checked (the file
                was rewritten meanwhile), or it cannot be read any more.
        """
        if line.kept:
            return line.entry
        if self._number != line.number:
            self._objects = []  # let the previous line go before the next is read
            self._objects = self._read(line)
            self._number = line.number
        entry = self._objects[line.object_index]
        assert isinstance(entry, dict)  # checked by the first pass, and the bytes are the same
        return entry

    def _read(self, line: Line) -> list[object]:
        try:
            if self._handle is None:
                self._handle = open_regular_file(self.path)
            self._handle.seek(line.at)
            raw = self._handle.read(line.size)
        except OSError as e:
            msg = f"{self.path}: cannot read: {e.strerror or e}"
            raise ValidationError(msg, field="path") from e
        if len(raw) != line.size or zlib.crc32(raw) != line.crc:
            msg = (
                f"{self.path}:{line.number}: the file changed while it was being imported "
                "(nothing was imported; import it again)"
            )
            raise ValidationError(msg, field="line", index=line.number)
        text = _text(raw)
        del raw  # one copy of a long line at a time: the text, then the objects
        return line_objects(text)

    def close(self) -> None:
        """Close the file (a later ``entry`` opens it again)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._number, self._objects = 0, []

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def file_size(path: Path) -> int:
    """A file's size for progress reports (0 when it cannot be stat'ed: it was read already)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0

"""Import in bounded memory: files are read twice instead of held, events are written as they are
converted, and all of it stays one all-or-nothing write; a snapshot is taken at the end."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionstore import (
    MessageAppended,
    Session,
    SessionStarted,
    SessionStore,
    ValidationError,
    import_claude_code,
)
from sessionstore.projections import ApiContextProjection
from sessionstore.store import SessionWrite

_SESSION = "7a1e0c52-3d9b-4f6e-8c21-5b0d9e4f7a13"


def _line(kind: str, key: str, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"model": "claude-opus-4-5-20251101", "id": f"msg_{key}", "usage": {"output_tokens": 5}}
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": _SESSION,
        "type": kind,
        "message": message,
        "uuid": key,
        "timestamp": "2026-01-13T08:34:23.214Z",
        **extra,
    }


def _transcript(turns: int, output: str = "a line of output\n") -> list[dict[str, Any]]:
    """``turns`` of prompt, tool call and tool result, each result's full output (``output`` a few
    hundred times) in its ``toolUseResult``, as Claude Code keeps a tool's output beside the result."""
    lines: list[dict[str, Any]] = []
    parent = None
    for turn in range(turns):
        prompt, call, result = f"u-{turn}", f"a-{turn}", f"r-{turn}"
        tool_use = {"type": "tool_use", "id": f"toolu_{turn}", "name": "Bash", "input": {"command": "make"}}
        tool_result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": f"exit 0 ({turn})"}
        lines.append(_line("user", prompt, parent, f"question {turn}"))
        lines.append(_line("assistant", call, prompt, [tool_use]))
        lines.append(_line("user", result, call, [tool_result], toolUseResult={"stdout": output * 300}))
        parent = result
    return lines


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


class TestAllOrNothing:
    def test_a_bad_line_in_the_last_batch_leaves_nothing_written(
        self, tmp_path: Path, store: SessionStore
    ) -> None:
        """Earlier batches were inserted before the last line failed to convert: all are rolled back."""
        lines = _transcript(700)  # 2,100 lines: several write batches before the last one
        lines.append(
            {"type": "system", "subtype": "microcompact_boundary", "uuid": "m-1", "parentUuid": "r-699"}
        )
        path = _write(tmp_path / f"{_SESSION}.jsonl", lines)

        with pytest.raises(ValidationError, match=rf"{path}:2101: malformed 'system/microcompact_boundary'"):
            import_claude_code(store, [path])

        assert store.list_sessions() == []

    def test_a_file_rewritten_while_it_is_imported_fails_with_nothing_written(
        self, tmp_path: Path, store: SessionStore
    ) -> None:
        """Lines are read again when converted: bytes other than those checked are refused."""
        path = _write(tmp_path / f"{_SESSION}.jsonl", _transcript(20))

        def rewrite(_path: str, _size: int, _lines: int) -> None:  # after the checking pass
            path.write_bytes(path.read_bytes().replace(b"question 7", b"question X"))

        with pytest.raises(
            ValidationError, match=rf"{path}:22: the file changed while it was being imported"
        ):
            import_claude_code(store, [path], on_file_read=rewrite)

        assert store.list_sessions() == []


class TestBoundedMemory:
    def test_import_holds_less_than_twice_the_file(self, tmp_path: Path, store: SessionStore) -> None:
        """Python's allocations while importing a ~6 MB transcript stay under twice its size.

        Holding every parsed line (as an import that converts a whole file first does) takes
        five times the file's size here; streaming holds the lines' heads, one write batch, and
        at the end the API context the snapshot folds.
        """
        path = _write(tmp_path / f"{_SESSION}.jsonl", _transcript(1000))
        size = path.stat().st_size
        if store.token_counter is not None:
            store.token_counter.count_text("load the tokenizer first")  # its tables are not the import's

        tracemalloc.start()
        try:
            report = import_claude_code(store, [path])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

        assert report.sessions[0].messages == 3000
        assert size > 5_000_000
        assert peak < 2 * size


class TestWriteStreamed:
    def test_events_from_a_generator_are_written_in_one_transaction(self, store: SessionStore) -> None:
        drawn: list[int] = []

        def events() -> Iterator[MessageAppended]:
            for i in range(35):
                drawn.append(i)
                yield MessageAppended(role="user", content=f"message {i}")

        results = store.write_streamed(
            [SessionWrite("streamed", [SessionStarted()], create=True), SessionWrite("streamed", events())],
            batch_size=10,
        )

        assert [r.last_seq for r in results] == [1, 36]
        assert results[1].seqs == tuple(range(2, 37))
        assert len(drawn) == 35
        assert len(store.read("streamed")) == 36

    def test_a_generator_that_fails_midway_leaves_nothing(self, store: SessionStore) -> None:
        def events() -> Iterator[MessageAppended]:
            for i in range(25):
                yield MessageAppended(role="user", content=f"message {i}")
            raise ValidationError("the source broke")

        with pytest.raises(ValidationError, match="the source broke"):
            store.write_streamed([SessionWrite("streamed", events(), create=True)], batch_size=10)

        assert store.list_sessions() == []


def test_an_import_leaves_a_snapshot_that_sessions_resume_from(tmp_path: Path, store: SessionStore) -> None:
    """Views of an imported session start from the snapshot taken at the end of the import."""
    path = _write(tmp_path / f"{_SESSION}.jsonl", _transcript(400))  # 1,200 lines: over snapshot_every
    import_claude_code(store, [path])
    last = store.last_seq(_SESSION)
    tokenizer = store.token_counter.name if store.token_counter is not None else "none"

    snapshot = store.latest_snapshot(
        _SESSION, ApiContextProjection.name, ApiContextProjection.version, tokenizer
    )
    resumed = Session(store, _SESSION)
    folded = Session(store, _SESSION, use_snapshots=False)

    assert snapshot is not None
    assert snapshot.seq == last
    assert resumed.request() == folded.request()
    assert resumed.token_state() == folded.token_state()


def test_a_short_imported_session_gets_no_snapshot(tmp_path: Path, store: SessionStore) -> None:
    """Below ``snapshot_every`` events folding is cheaper than a snapshot: none is taken."""
    path = _write(tmp_path / f"{_SESSION}.jsonl", _transcript(30))
    import_claude_code(store, [path])
    tokenizer = store.token_counter.name if store.token_counter is not None else "none"

    snapshot = store.latest_snapshot(
        _SESSION, ApiContextProjection.name, ApiContextProjection.version, tokenizer
    )

    assert store.last_seq(_SESSION) < 1000
    assert snapshot is None

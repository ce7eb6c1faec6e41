"""Import in bounded memory: files are read twice instead of held, events are written as they are
converted, and all of it stays one all-or-nothing write; a snapshot is taken at the end."""

from __future__ import annotations

import hashlib
import json
import logging
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
from sessionstore.claude_code import _import as _import_module
from sessionstore.errors import SessionStoreError
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

    def test_a_bad_event_is_named_by_its_index_in_the_whole_write(self, store: SessionStore) -> None:
        """Event #25 of a write drawn in batches of 10 is #25 in the error, not #5 of its batch."""

        def events() -> Iterator[Any]:
            for i in range(30):
                yield {"type": "no_such_event"} if i == 25 else MessageAppended(role="user", content=f"m {i}")

        with pytest.raises(ValidationError, match="event #25") as caught:
            store.write_streamed([SessionWrite("streamed", events(), create=True)], batch_size=10)

        assert caught.value.index == 25
        assert store.list_sessions() == []

    def test_json_checked_events_still_refuse_a_lone_surrogate(self, store: SessionStore) -> None:
        """Values vouched for as decoded JSON skip the store's walk, not the serializer's refusal."""
        events = [SessionStarted(), MessageAppended(role="user", content="\ud800")]

        with pytest.raises(ValidationError, match="event #1 of type 'message_appended': field content"):
            store.write_streamed([SessionWrite("streamed", events, create=True)], json_checked=True)

        assert store.list_sessions() == []

    def test_a_nan_is_refused_unless_the_caller_vouched_for_its_values(self, store: SessionStore) -> None:
        """The walk ``json_checked`` skips is what refuses a NaN (the serializer would write null)."""
        event = MessageAppended(role="user", content=[{"type": "text", "text": "x", "score": float("nan")}])

        with pytest.raises(ValidationError, match="NaN"):
            store.write_streamed([SessionWrite("streamed", [SessionStarted(), event], create=True)])

        assert store.list_sessions() == []

        store.write_streamed(
            [SessionWrite("vouched", [SessionStarted(), event], create=True)], json_checked=True
        )
        written = store.read("vouched")[-1].payload_dict()
        assert [s.id for s in store.list_sessions()] == ["vouched"]
        assert written["content"][0]["text"] == "x"
        assert written["content"][0].get("score") is None  # what the serializer made of the NaN

    def test_a_lone_event_instead_of_a_sequence_is_refused_as_such(self, store: SessionStore) -> None:
        with pytest.raises(ValidationError, match="wrap a single event in a list"):
            store.write_streamed(
                [SessionWrite("streamed", MessageAppended(role="user", content="x"), create=True)]  # type: ignore[arg-type]
            )

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


def test_a_snapshot_that_fails_after_the_commit_is_logged_not_an_import_error(
    tmp_path: Path, store: SessionStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The sessions are committed; the snapshot is a cache a reader does without."""
    path = _write(tmp_path / f"{_SESSION}.jsonl", _transcript(400))  # over snapshot_every

    def fail(*_: object) -> None:
        raise SessionStoreError("the snapshot could not be written")

    monkeypatch.setattr(_import_module, "take_snapshots", fail)
    with caplog.at_level(logging.WARNING, logger="sessionstore"):
        report = import_claude_code(store, [path])

    [imported] = report.sessions
    assert imported.session_id == _SESSION and imported.written > 1000
    assert len(list(store.read(_SESSION))) == imported.events
    assert len(Session(store, _SESSION).request()["messages"]) > 0
    [record] = [r for r in caplog.records if r.name.startswith("sessionstore")]
    assert record.levelno == logging.WARNING
    assert "the snapshot could not be written" in record.getMessage()


_ODD_STUB = "<persisted-output>\nOutput too large. Full output saved to: odd.txt\n</persisted-output>"


@pytest.mark.parametrize(
    "odd",
    [
        "a string among the blocks",
        {"type": "tool_result", "content": _ODD_STUB},
        {"type": "tool_result", "tool_use_id": 7, "content": _ODD_STUB},
    ],
    ids=["not a dict", "a stub without tool_use_id", "a stub with a number for tool_use_id"],
)
def test_an_odd_block_beside_a_persisted_output_stub_is_no_traceback(
    tmp_path: Path, store: SessionStore, odd: object
) -> None:
    """Sidecars are read for the stubs the indexer found (dict blocks with a string tool_use_id),
    no other: it used to raise AttributeError or KeyError, or store the odd stub's sidecar."""
    stub = "<persisted-output>\nOutput too large. Full output saved to: out.txt\n</persisted-output>"
    lines = _transcript(1)
    lines[2]["message"]["content"] = [odd, {"type": "tool_result", "tool_use_id": "toolu_0", "content": stub}]
    path = _write(tmp_path / f"{_SESSION}.jsonl", lines)
    (tmp_path / _SESSION / "tool-results").mkdir(parents=True)
    (tmp_path / _SESSION / "tool-results" / "out.txt").write_bytes(b"the full output\n")
    (tmp_path / _SESSION / "tool-results" / "odd.txt").write_bytes(b"not this one\n")

    try:
        report = import_claude_code(store, [path])
    except ValidationError as e:  # refused as the converter refuses the line: named, no traceback
        assert f"{path}:3:" in str(e)
        assert store.list_sessions() == []
    else:
        assert [s.session_id for s in report.sessions] == [_SESSION]
        [persisted] = [e.payload_dict() for e in store.read(_SESSION) if e.type == "tool_result_persisted"]
        assert persisted["tool_use_id"] == "toolu_0"
        assert store.get_blob(persisted["blob_sha256"]) == b"the full output\n"
    with pytest.raises(KeyError):
        store.get_blob(hashlib.sha256(b"not this one\n").hexdigest())

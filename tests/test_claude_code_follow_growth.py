"""A followed transcript, however it grows between polls, is written as when each poll converted it whole.

A poll reads only the lines a file gained and converts only those, going on from where the last
poll left off: these tests write every corpus transcript (and its sub-agents), and a generated
one, a line or a random number of lines at a time, poll after each write, and compare every
poll's report and the stores with a follower that converts every settled line at each poll (as
all polls did before). A file rewritten in the middle or cut short is read and converted whole.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sessionstore
from sessionstore import SessionStore
from sessionstore.claude_code import ClaudeCodeFollower, ImportReport, import_claude_code

from ._claude_code_corpus import MAIN_FILES, copy_main, modern_project

BENCH = Path(__file__).parent.parent / "bench"


def _events(store: SessionStore, session_id: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    return [(e.event_id, e.seq, e.type, e.payload_dict()) for e in store.read(session_id)]


def _converting_whole(store: SessionStore, paths: list[Path], skip: bool = False) -> ClaudeCodeFollower:
    """A follower that converts every settled line again at each poll, dropping what is stored
    (what every poll did before polls went on from the last one): the reference."""
    follower = ClaudeCodeFollower(store, paths, skip_bad_lines=skip)
    follower._resume = _Forgetful()  # nothing to go on from: _import_files converts whole
    return follower


class _Forgetful(dict[Path, Any]):
    """Where no conversion is kept: each import of a file converts it whole."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


def _assert_same(store: SessionStore, reference: SessionStore) -> None:
    ids = {s.id for s in reference.list_sessions(limit=100)}
    assert ids
    assert {s.id for s in store.list_sessions(limit=100)} == ids
    for session_id in ids:
        assert _events(store, session_id) == _events(reference, session_id), session_id


def _follow_in_chunks(
    store: SessionStore,
    sources: dict[Path, Path],
    rng: random.Random | None,
    skip: bool = False,
) -> set[int]:
    """Write each source's lines to its target, one line (``rng`` None) or 1-40 lines at a time,
    the files in turn, polling after every write (a chunk may end mid-line), beside a follower
    that converts whole: every poll writes what it writes, and so does the last. The lines held
    back at the end. The lines reported skipped (``skip``): each by the first poll whose
    whole conversion reports it, and by no later poll."""
    pending = {target: source.read_bytes().splitlines(keepends=True) for target, source in sources.items()}
    for target in pending:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"")
    folders = sorted({t.parent for t in sources if t.parent.name != "subagents"})
    follower = ClaudeCodeFollower(store, folders, skip_bad_lines=skip)
    reference_store = sessionstore.open_store(":memory:")
    reported: set[int] = set()
    try:
        reference = _converting_whole(reference_store, folders, skip)
        while any(pending.values()):
            for target, lines in pending.items():
                if not lines:
                    continue
                take = 1 if rng is None else rng.randint(1, 40)
                chunk, pending[target] = b"".join(lines[:take]), lines[take:]
                if rng is not None and pending[target] and rng.random() < 0.3:
                    cut = rng.randint(0, len(pending[target][0]) - 1)  # half a line, finished later
                    chunk += pending[target][0][:cut]
                    pending[target][0] = pending[target][0][cut:]
                with target.open("ab") as f:
                    f.write(chunk)
                report, expected = follower.poll(), reference.poll()
                if skip:  # a line kept opaque is reported by the poll that converts it only
                    assert (report and report.sessions) == (expected and expected.sessions)
                    due = [(s.path, s.line, s.reason) for s in (expected.skipped if expected else ())]
                    due = [item for item in due if item[1] not in reported]
                    assert [(s.path, s.line, s.reason) for s in (report.skipped if report else ())] == due
                    reported.update(line for _, line, _ in due)
                else:
                    assert (report and report.to_dict()) == (expected and expected.to_dict())
        assert follower.held == reference.held
        _assert_same(store, reference_store)
    finally:
        reference_store.close()
    return reported


@pytest.mark.parametrize("name", sorted(MAIN_FILES))
def test_a_corpus_transcript_followed_in_random_chunks(
    shared_store: SessionStore, tmp_path: Path, name: str
) -> None:
    source = copy_main(tmp_path, name)
    target = tmp_path / "live" / source.name
    _follow_in_chunks(shared_store, {target: source}, random.Random(name))


@pytest.mark.parametrize("name", [n for n in sorted(MAIN_FILES) if "-full" not in n or "cli__98" in n])
def test_a_corpus_transcript_followed_line_by_line(
    shared_store: SessionStore, tmp_path: Path, name: str
) -> None:
    source = copy_main(tmp_path, name)
    target = tmp_path / "live" / source.name
    _follow_in_chunks(shared_store, {target: source}, None)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_a_session_with_sub_agents_followed_in_chunks(
    shared_store: SessionStore, tmp_path: Path, seed: int | None
) -> None:
    project = modern_project(tmp_path / "source")
    live = tmp_path / "live"
    sources = {live / path.relative_to(project): path for path in sorted(project.rglob("*.jsonl"))}
    _follow_in_chunks(shared_store, sources, None if seed is None else random.Random(seed))


def _generator(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench/_common.py
    spec = importlib.util.spec_from_file_location("bench_projection", BENCH / "projection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_generated_transcript_followed_in_random_chunks(
    shared_store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = _generator(monkeypatch)
    session_id = "5e551045-0000-4000-8000-000000000001"
    source = tmp_path / "source" / f"{session_id}.jsonl"
    source.parent.mkdir()
    writer = generator.TranscriptWriter(source, session_id)
    turns = generator.Workload()
    try:
        for _ in range(40):
            writer.turn(turns.turn())
    finally:
        writer.close()
    target = tmp_path / "live" / source.name
    _follow_in_chunks(shared_store, {target: source}, random.Random(7))


SETTLING = "entireio__cli__ce-aea776cdb0-0-full.jsonl"  # every line settles: none held at the end
SETTLING_SESSION = "85cc202e-0e74-46ce-a485-e5fcd11f7a8c"


def _replay(store: SessionStore, tmp_path: Path, versions: list[bytes]) -> list[ImportReport | None]:
    """Write the corpus transcript as each of ``versions`` in turn, polling after each, beside
    a follower that converts whole: each poll writes what it writes, and nothing is held at the
    end. The follower's reports."""
    folder = tmp_path / "live"
    folder.mkdir()
    target = folder / f"{SETTLING_SESSION}.jsonl"
    follower = ClaudeCodeFollower(store, [folder])
    reference_store = sessionstore.open_store(":memory:")
    reports: list[ImportReport | None] = []
    try:
        reference = _converting_whole(reference_store, [folder])
        for data in versions:
            target.write_bytes(data)
            report, expected = follower.poll(), reference.poll()
            assert (report and report.to_dict()) == (expected and expected.to_dict())
            reports.append(report)
        assert follower.held == reference.held == 0
        _assert_same(store, reference_store)
    finally:
        reference_store.close()
    return reports


def _lines(tmp_path: Path) -> list[bytes]:
    return copy_main(tmp_path, SETTLING).read_bytes().splitlines(keepends=True)


def _written(report: ImportReport | None) -> int:
    return report.written if report is not None else 0


def test_a_file_rewritten_in_the_middle_is_read_whole_again(
    shared_store: SessionStore, tmp_path: Path
) -> None:
    """Not a file growing: the poll reads it whole and converts it whole, as before; lines whose
    events are stored are not written again, the new ones are."""
    lines = _lines(tmp_path)
    half = len(lines) // 2
    # The same lines, an early one rewritten with other bytes of the same meaning.
    rewritten = list(lines)
    rewritten[3] = rewritten[3].replace(b'{"', b'{ "', 1)
    assert rewritten[3] != lines[3]
    versions = [b"".join(lines[:end]) for end in range(40, half, 40)]
    before = len(versions)
    versions += [b"".join(rewritten[: half + 20]), b"".join(rewritten[: half + 60]), b"".join(rewritten)]
    reports = _replay(shared_store, tmp_path, versions)
    assert all(_written(report) > 0 for report in reports[before:])


def test_a_truncated_file_then_grown_again_is_read_whole_again(
    shared_store: SessionStore, tmp_path: Path
) -> None:
    lines = _lines(tmp_path)
    half = len(lines) // 2
    versions = [b"".join(lines[:end]) for end in range(40, half, 40)]
    before = len(versions)
    versions += [b"".join(lines[:end]) for end in range(10, len(lines) + 1, 25)]
    reports = _replay(shared_store, tmp_path, [*versions, b"".join(lines)])
    # Cut short, then grown past where it was: the lines after are written.
    assert sum(_written(report) for report in reports[before:]) > 0
    assert _written(reports[-1]) > 0


def test_a_file_rewritten_longer_with_a_line_taken_out_is_converted_whole(
    shared_store: SessionStore, tmp_path: Path
) -> None:
    """Longer than before, but its earlier lines are not the ones converted: the last poll's
    conversion is not gone on with."""
    lines = _lines(tmp_path)
    reports = _replay(shared_store, tmp_path, [b"".join(lines[:120]), b"".join(lines[:60] + lines[61:])])
    assert _written(reports[-1]) > 0


def test_a_parent_appended_after_its_child_converts_the_file_whole(
    shared_store: SessionStore, tmp_path: Path
) -> None:
    """A line whose parent comes in a later poll: that poll cannot go on from the last one (the
    order of what it converted changes), so it converts the file whole, as a new follower would."""
    lines = _lines(tmp_path)
    child = 23  # its parentUuid is line 22's uuid: it is written first, its parent in the next poll
    assert json.loads(lines[child])["parentUuid"] == json.loads(lines[child - 1])["uuid"]
    swapped = [*lines[: child - 1], lines[child], lines[child - 1], *lines[child + 1 :]]
    folder = tmp_path / "live"
    folder.mkdir()
    target = folder / f"{SETTLING_SESSION}.jsonl"
    follower = ClaudeCodeFollower(shared_store, [folder])
    reference_store = sessionstore.open_store(":memory:")
    try:
        reference = _converting_whole(reference_store, [folder])
        for end, goes_on in [(child - 5, False), (child, True), (child + 20, False), (len(lines), True)]:
            kept = follower._resume.get(target)
            target.write_bytes(b"".join(swapped[:end]))
            report, expected = follower.poll(), reference.poll()
            assert (report and report.to_dict()) == (expected and expected.to_dict())
            assert follower.held == reference.held
            if kept is not None:  # the same conversion, gone on with; or a new one
                assert (follower._resume[target].converter is kept.converter) == goes_on, end
        _assert_same(shared_store, reference_store)
    finally:
        reference_store.close()


def test_a_plain_import_between_polls(shared_store: SessionStore, tmp_path: Path) -> None:
    """An ``import_claude_code`` of the followed file between two polls: the next poll reads
    what it stored and writes exactly what converting the file whole writes."""
    lines = _lines(tmp_path)
    folder = tmp_path / "live"
    folder.mkdir()
    target = folder / f"{SETTLING_SESSION}.jsonl"
    follower = ClaudeCodeFollower(shared_store, [folder])
    reference_store = sessionstore.open_store(":memory:")
    try:
        reference = _converting_whole(reference_store, [folder])
        for end in (60, 100, 101, 180, len(lines)):
            target.write_bytes(b"".join(lines[:end]))
            if end in (101, 180):  # the file as it is now, unsettled lines too, in both stores
                imported = import_claude_code(shared_store, [target])
                assert imported.written > 0
                assert import_claude_code(reference_store, [target]).to_dict() == imported.to_dict()
            report, expected = follower.poll(), reference.poll()
            assert (report and report.to_dict()) == (expected and expected.to_dict())
        assert follower.held == 0
        _assert_same(shared_store, reference_store)
    finally:
        reference_store.close()


def test_bad_lines_skipped_while_followed(shared_store: SessionStore, tmp_path: Path) -> None:
    """``skip_bad_lines``: a line that is not JSON is skipped and one that cannot be modelled is
    kept opaque, as when each poll converted every line; each is reported."""
    source = copy_main(tmp_path, SETTLING)
    lines = source.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[30])
    entry["message"] = {"role": "user", "content": 5}  # content must be a string or a list
    entry["type"] = "user"
    lines[30] = json.dumps(entry).encode() + b"\n"
    lines[50:50] = [b"{not json\n"]
    source.write_bytes(b"".join(lines))
    target = tmp_path / "live" / source.name
    skipped = _follow_in_chunks(shared_store, {target: source}, random.Random(3), True)
    assert skipped == {31, 51}
    stored = _events(shared_store, SETTLING_SESSION)
    assert any(kind == "opaque_entry" and payload["line"] == 31 for _, _, kind, payload in stored)


def test_a_removed_transcript_is_forgotten(shared_store: SessionStore, tmp_path: Path) -> None:
    """A transcript deleted or renamed does not keep its conversion for the follower's lifetime."""
    folder = tmp_path / "live"
    folder.mkdir()
    target = folder / f"{SETTLING_SESSION}.jsonl"
    target.write_bytes(b"".join(_lines(tmp_path)[:60]))
    follower = ClaudeCodeFollower(shared_store, [folder])
    assert follower.poll() is not None
    assert list(follower._resume) == [target]
    renamed = target.rename(folder / "renamed.jsonl")
    follower.poll()
    assert target not in follower._resume
    renamed.unlink()
    follower.poll()
    assert not follower._resume

"""File history: checkpoints per user turn, files and conversation rewind, path safety, crash safety.

Every test works on real files in a temporary project root.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import text

from sessionstore import (
    FileHistory,
    MessageAppended,
    Session,
    SessionConfig,
    SessionExistsError,
    SessionStore,
    ValidationError,
    audit,
)
from sessionstore._paths import lexical_problem, to_relative
from sessionstore.cli import main
from sessionstore.errors import FilesRewindError, PathRefusedError
from sessionstore.events import (
    ConversationRewound,
    FileHistorySnapshot,
    FilesRewindFailed,
    FilesRewindStarted,
    FilesRewound,
)
from sessionstore.projections import MAX_SNAPSHOTS
from sessionstore.projections._base import fold, rebuild
from sessionstore.projections._file_history import FileHistoryProjection
from sessionstore.store import BlobRef

from .conftest import Backend

REPO = Path(__file__).resolve().parent.parent
Tree = dict[str, bytes]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty project root."""
    project = tmp_path / "project"
    project.mkdir()
    return project


def _history(store: SessionStore, root: Path) -> FileHistory:
    session = Session.create(store, model="claude-sonnet-5-5", config=SessionConfig(snapshot_every=0))
    return FileHistory(session, root)


def _turn(history: FileHistory, prompt: str) -> str:
    """A user prompt opens a turn: append it, then record the turn's checkpoint."""
    message = MessageAppended(role="user", content=prompt)
    history.session.append([message])
    history.snapshot_turn(message.message_uuid)
    return message.message_uuid


def _edit(history: FileHistory, root: Path, path: str, content: bytes | None) -> None:
    """The agent edits ``path`` (None deletes it), backing it up first."""
    history.track_before_edit(path)
    target = root / path
    if content is None:
        target.unlink()
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def _tree(root: Path) -> Tree:
    """Every regular file under ``root`` (symlinks not followed), by POSIX relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _types(history: FileHistory) -> list[str]:
    return [e.type for e in history.store.read(history.session.id)]


class TestCheckpoints:
    def test_rewinding_to_each_checkpoint_restores_the_tree_byte_for_byte(
        self, store: SessionStore, root: Path
    ) -> None:
        """Edits, creations and deletions across turns are undone exactly, in any order."""
        (root / "untouched.txt").write_bytes(b"never edited\n")
        (root / "keep.py").write_bytes(b"print('v0')\n")
        (root / "doomed.txt").write_bytes(b"deleted in turn 2\n")
        history = _history(store, root)
        checkpoints: list[tuple[str, Tree]] = []

        def turn(prompt: str) -> None:
            uuid = _turn(history, prompt)
            checkpoints.append((uuid, _tree(root)))

        turn("one")
        _edit(history, root, "keep.py", b"print('v1')\n")
        _edit(history, root, "src/new.py", b"created in turn 1\n")
        turn("two")
        _edit(history, root, "doomed.txt", None)
        _edit(history, root, "keep.py", b"print('v2')\n")
        _edit(history, root, "data.bin", bytes(range(256)) * 10)
        turn("three")
        _edit(history, root, "src/new.py", None)
        _edit(history, root, "doomed.txt", b"recreated in turn 3\n")
        turn("four")
        _edit(history, root, "keep.py", b"")
        _edit(history, root, "data.bin", b"\x00\xff" * 3)
        turn("five")
        final = _tree(root)

        for index in (2, 0, 4, 1, 3, 0):
            uuid, expected = checkpoints[index]
            history.rewind_files(uuid)
            assert _tree(root) == expected, f"checkpoint {index}"
        history.rewind_files(checkpoints[4][0])
        assert _tree(root) == final == checkpoints[4][1]

    def test_checkpoints_list_the_files_each_turn_changed(self, store: SessionStore, root: Path) -> None:
        """A turn's changed files are known once the next checkpoint closes it."""
        history = _history(store, root)
        _turn(history, "one")
        _edit(history, root, "a.txt", b"a")
        _edit(history, root, "b.txt", b"b")
        _turn(history, "two")
        _edit(history, root, "b.txt", b"b2")
        _turn(history, "three")
        _edit(history, root, "a.txt", b"a3")

        listed = history.checkpoints()

        assert [c.number for c in listed] == [1, 2, 3]
        assert [c.changed for c in listed] == [["a.txt", "b.txt"], ["b.txt"], None]
        assert history.pending_changes() == ["a.txt"]
        assert sorted(listed[2].files) == ["a.txt", "b.txt"]

    def test_identical_contents_are_stored_once(
        self, store: SessionStore, root: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Checkpoints name contents by hash: equal files and unchanged turns add no blobs."""
        (root / "a.txt").write_bytes(b"same bytes\n" * 100)
        (root / "b.txt").write_bytes(b"same bytes\n" * 100)
        history = _history(store, root)
        _turn(history, "one")
        history.track_before_edit("a.txt")
        history.track_before_edit("b.txt")
        puts: list[bytes] = []
        real_put = store.put_blob

        def counting_put(data: bytes) -> BlobRef:
            puts.append(data)
            return real_put(data)

        monkeypatch.setattr(store, "put_blob", counting_put)
        for n in range(5):
            _turn(history, f"unchanged {n}")

        snapshots = [e.event for e in store.read(history.session.id) if e.type == "file_history_snapshot"]
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            blob_rows = conn.execute(text("SELECT count(*) FROM blobs")).scalar_one()

        assert puts == []
        assert blob_rows == 1
        assert all(isinstance(s, FileHistorySnapshot) for s in snapshots)
        assert {blob for s in snapshots[1:] for blob in s.files.values()} == {  # type: ignore[attr-defined]
            history.state.first_backup["a.txt"]
        }

    def test_versions_grow_only_when_the_content_changes(self, store: SessionStore, root: Path) -> None:
        """A path's version counts its distinct captured contents, like Claude Code's @vN."""
        history = _history(store, root)
        _turn(history, "one")
        _edit(history, root, "f.txt", b"1")
        _turn(history, "two")
        _turn(history, "three")
        _edit(history, root, "f.txt", b"2")
        _turn(history, "four")

        versions = [c.files["f.txt"].version for c in history.checkpoints()]

        assert versions == [1, 2, 2, 3]
        assert history.checkpoints()[0].files["f.txt"].blob_sha256 is None

    def test_only_the_latest_hundred_checkpoints_stay_visible(self, store: SessionStore, root: Path) -> None:
        """Older checkpoints leave the view but stay in the log; they can no longer be rewound to."""
        history = _history(store, root)
        first = _turn(history, "turn 0")
        _edit(history, root, "f.txt", b"0")
        uuids = [first] + [_turn(history, f"turn {n}") for n in range(1, MAX_SNAPSHOTS + 5)]

        listed = history.checkpoints()

        assert MAX_SNAPSHOTS == 100
        assert len(listed) == MAX_SNAPSHOTS
        assert [c.message_uuid for c in listed] == uuids[-MAX_SNAPSHOTS:]
        assert listed[0].number == 6
        assert history.state.total_checkpoints == 105
        assert _types(history).count("file_history_snapshot") == 105
        with pytest.raises(ValidationError, match="no checkpoint for message"):
            history.rewind_files(first)
        assert (root / "f.txt").read_bytes() == b"0"

    def test_view_is_identical_rebuilt_incrementally_and_from_a_snapshot(
        self, store: SessionStore, root: Path
    ) -> None:
        """The projection is a pure fold: snapshot + tail equals a full rebuild."""
        history = _history(store, root)
        _turn(history, "one")
        _edit(history, root, "a.txt", b"a")
        history.record_read("a.txt")
        _turn(history, "two")
        history.save_snapshot()
        _edit(history, root, "b.txt", b"b")
        history.record_read("b.txt")
        _turn(history, "three")
        projection = FileHistoryProjection()
        sid = history.session.id

        full = fold(projection, store.read(sid))
        resumed, _ = rebuild(store, sid, projection, tokenizer=history.session.tokenizer)
        reopened = FileHistory(Session(store, sid), root)

        assert projection.dump(full) == projection.dump(resumed) == projection.dump(reopened.state)
        assert projection.dump(projection.load(projection.dump(full))) == projection.dump(full)
        assert projection.dump(history.state) == projection.dump(full)


class TestRewind:
    def test_dry_run_shows_the_diff_and_changes_nothing(self, store: SessionStore, root: Path) -> None:
        """A dry run plans every change with a unified diff, and writes no file and no event."""
        (root / "a.txt").write_bytes(b"one\ntwo\n")
        history = _history(store, root)
        uuid = _turn(history, "one")
        _edit(history, root, "a.txt", b"one\nTWO\n")
        _edit(history, root, "new.txt", b"brand new\n")
        _edit(history, root, "img.png", b"\x89PNG\x00\x01")
        before_tree, before_types = _tree(root), _types(history)

        result = history.rewind(uuid, dry_run=True)

        assert result.dry_run
        assert result.fork_session_id is None
        assert result.fork_seq == 2
        assert result.events_dropped == len(before_types) - 2
        assert result.files is not None
        assert result.files.restored == ["a.txt"]
        assert result.files.deleted == ["img.png", "new.txt"]
        diff = result.files.diff()
        assert "--- a/a.txt\n+++ b/a.txt\n" in diff
        assert "-TWO\n+two\n" in diff
        assert "--- a/new.txt\n+++ /dev/null\n" in diff
        assert "-brand new\n" in diff
        assert "Binary files a/img.png and /dev/null differ" in diff
        assert _tree(root) == before_tree
        assert _types(history) == before_types

    def test_files_rewind_records_what_it_did(self, store: SessionStore, root: Path) -> None:
        """FilesRewound names the checkpoint and every restored, deleted and unchanged path."""
        (root / "same.txt").write_bytes(b"same")
        (root / "a.txt").write_bytes(b"a")
        history = _history(store, root)
        uuid = _turn(history, "one")
        history.track_before_edit("same.txt")
        _edit(history, root, "a.txt", b"changed")
        _edit(history, root, "b.txt", b"created")
        snapshot_seq = history.checkpoints()[0].seq

        plan = history.rewind_files(uuid)
        recorded = history.store.read(history.session.id)[-1].event

        assert isinstance(recorded, FilesRewound)
        assert recorded.message_uuid == uuid
        assert recorded.snapshot_seq == snapshot_seq
        assert (recorded.restored, recorded.deleted, recorded.unchanged) == (
            ["a.txt"],
            ["b.txt"],
            ["same.txt"],
        )
        assert plan.restored == recorded.restored
        assert "conversation_rewound" not in _types(history)

    def test_a_rewind_failing_half_way_records_what_was_applied(
        self, store: SessionStore, root: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A delete failing after a file was restored: the log says which paths changed and which did not."""
        (root / "a.txt").write_bytes(b"a")
        history = _history(store, root)
        uuid = _turn(history, "one")
        _edit(history, root, "a.txt", b"changed")
        _edit(history, root, "b.txt", b"created")
        real_unlink = os.unlink

        def refusing_unlink(path: str) -> None:
            if str(path).endswith("b.txt"):
                raise PermissionError(13, "Permission denied", str(path))
            real_unlink(path)

        monkeypatch.setattr(os, "unlink", refusing_unlink)
        with pytest.raises(FilesRewindError, match="stopped after 1 of 2 changes") as caught:
            history.rewind_files(uuid)
        monkeypatch.undo()
        unfinished = history.state.unfinished_rewind
        started, failed = [e.event for e in history.store.read(history.session.id)[-2:]]

        assert (caught.value.applied, caught.value.not_applied) == (["a.txt"], ["b.txt"])
        assert _tree(root) == {"a.txt": b"a", "b.txt": b"created"}
        assert isinstance(started, FilesRewindStarted) and isinstance(failed, FilesRewindFailed)
        assert (started.restore, started.delete) == (["a.txt"], ["b.txt"])
        assert (failed.applied, failed.not_applied) == (["a.txt"], ["b.txt"])
        assert failed.started_event_id == str(started.event_id)
        assert unfinished is not None and unfinished.failed
        assert "failed after 1 of 2 changes: PermissionError" in unfinished.describe()
        assert "FAILED after 1 of 2 changes" in audit(history.session).entries[-1].what

        history.rewind_files(uuid)  # rewinding again finishes the job

        assert _tree(root) == {"a.txt": b"a"}
        assert history.state.unfinished_rewind is None
        assert _types(history)[-4:] == [
            "files_rewind_started",
            "files_rewind_failed",
            "files_rewind_started",
            "files_rewound",
        ]

    def test_contradictory_checkpoint_keys_are_refused_before_any_write(
        self, store: SessionStore, root: Path
    ) -> None:
        """A checkpoint holding both 'a' and 'a/b' as files cannot be restored: refused, nothing touched."""
        session = Session.create(store, model="claude-sonnet-5-5", config=SessionConfig(snapshot_every=0))
        blob = store.put_blob(b"content").sha256
        prompt = MessageAppended(role="user", content="one")
        crafted = FileHistorySnapshot(
            message_uuid=prompt.message_uuid, files={"a": blob, "a/b": blob}, root=str(root)
        )
        session.append([prompt, crafted])
        history = FileHistory(session, root)
        before = _types(history)

        with pytest.raises(PathRefusedError) as caught:
            history.rewind_files(prompt.message_uuid)

        assert caught.value.refused == {"a/b": "the checkpoint also holds 'a' as a file"}
        assert list(root.iterdir()) == []
        assert _types(history) == before

    def test_conversation_rewind_forks_at_the_message(self, store: SessionStore, root: Path) -> None:
        """The fork shares the log up to the message; the original records where it went."""
        history = _history(store, root)
        _turn(history, "one")
        uuid = _turn(history, "two")
        _edit(history, root, "a.txt", b"kept")
        history.session.append([MessageAppended(role="assistant", content="done")])
        message_seq = next(
            e.seq for e in store.read(history.session.id) if e.payload_dict().get("message_uuid") == uuid
        )

        fork_id = history.rewind_conversation(uuid, fork_session_id="the-fork")
        info = store.get_session(fork_id)
        recorded = store.read(history.session.id)[-1].event

        assert fork_id == "the-fork"
        assert (info.parent_session_id, info.fork_seq) == (history.session.id, message_seq)
        assert store.read(fork_id) == []
        assert isinstance(recorded, ConversationRewound)
        assert (recorded.message_uuid, recorded.fork_session_id, recorded.fork_seq) == (
            uuid,
            "the-fork",
            message_seq,
        )
        assert (root / "a.txt").read_bytes() == b"kept"

    def test_rewinding_both_restores_files_and_forks_in_one_record(
        self, store: SessionStore, root: Path
    ) -> None:
        """Files and conversation rewind together, both events in one append; a taken fork id
        is refused before any file changes.
        """
        history = _history(store, root)
        uuid = _turn(history, "one")
        _edit(history, root, "a.txt", b"made in turn one")
        store.create_session("taken")
        before = _types(history)

        with pytest.raises(SessionExistsError):
            history.rewind(uuid, fork_session_id="taken")
        assert (root / "a.txt").exists()
        assert _types(history) == before

        result = history.rewind(uuid)
        tail = store.read(history.session.id)[-2:]

        assert not (root / "a.txt").exists()
        assert result.fork_session_id is not None
        assert store.get_session(result.fork_session_id).parent_session_id == history.session.id
        assert [e.type for e in tail] == ["files_rewound", "conversation_rewound"]
        assert tail[0].position + 1 == tail[1].position

    def test_unknown_message_and_nothing_to_rewind_are_refused(self, store: SessionStore, root: Path) -> None:
        """Rewinding to a message without a checkpoint, or to nothing, raises and writes nothing."""
        history = _history(store, root)
        _turn(history, "one")
        before = _types(history)

        with pytest.raises(ValidationError, match="no checkpoint"):
            history.rewind_files("no-such-message")
        with pytest.raises(ValidationError, match="is not in session"):
            history.rewind_conversation("no-such-message")
        with pytest.raises(ValidationError, match="needs files=True"):
            history.rewind("x", files=False, conversation=False)

        assert _types(history) == before

    def test_a_failed_temp_write_changes_no_file(
        self, store: SessionStore, root: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If the disk refuses a temp file, every file keeps its content and no temp is left."""
        history = _history(store, root)
        uuid = _turn(history, "one")
        for name in ("a", "b", "c"):
            (root / f"{name}.txt").write_bytes(b"old")
            _edit(history, root, f"{name}.txt", b"new")
        _edit(history, root, "a.txt", b"newer")  # already tracked in this turn: no new backup
        (root / "a.txt").write_bytes(b"old")
        _turn(history, "two")
        for name in ("a", "b", "c"):
            (root / f"{name}.txt").write_bytes(b"new")
        real_open = os.open
        calls = 0

        def flaky_open(path: str, flags: int, mode: int = 0o777) -> int:
            nonlocal calls
            if str(path).endswith(".rewind-tmp"):
                calls += 1
                if calls == 3:
                    raise OSError(28, "No space left on device")
            return real_open(path, flags, mode)

        monkeypatch.setattr(os, "open", flaky_open)
        before = _types(history)

        with pytest.raises(OSError, match="No space left"):
            history.rewind_files(uuid)

        assert _tree(root) == {"a.txt": b"new", "b.txt": b"new", "c.txt": b"new"}
        assert _types(history) == before

    def test_restore_keeps_the_file_mode_and_writes_through_an_inner_symlink(
        self, store: SessionStore, root: Path
    ) -> None:
        """A restored file keeps its permissions; a symlink inside the root stays a symlink."""
        (root / "run.sh").write_bytes(b"#!/bin/sh\necho 1\n")
        (root / "run.sh").chmod(0o750)
        (root / "real.txt").write_bytes(b"real v1")
        (root / "alias.txt").symlink_to("real.txt")
        history = _history(store, root)
        uuid = _turn(history, "one")
        _edit(history, root, "run.sh", b"#!/bin/sh\necho 2\n")
        _edit(history, root, "alias.txt", b"real v2")

        history.rewind_files(uuid)

        assert (root / "run.sh").read_bytes() == b"#!/bin/sh\necho 1\n"
        assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o750
        assert (root / "alias.txt").is_symlink()
        assert (root / "real.txt").read_bytes() == b"real v1"


class TestPathSafety:
    @pytest.mark.parametrize(
        ("path", "problem"),
        [
            ("src/a.py", None),
            ("", "empty path"),
            ("../x", "'..' component"),
            ("a/../../x", "'..' component"),
            ("/etc/passwd", "absolute path"),
            ("C:/Windows/x", "absolute path"),
            ("a\\..\\..\\x", "contains a backslash (paths are stored in POSIX form)"),
            ("a//b", "not in normal form (empty or '.' component)"),
            ("./a", "not in normal form (empty or '.' component)"),
            ("a\x00b", "contains a NUL byte"),
        ],
    )
    def test_stored_paths_must_be_relative_and_normal(self, path: str, problem: str | None) -> None:
        """Only plain relative POSIX paths pass the lexical gate."""
        assert lexical_problem(path) == problem

    def test_caller_paths_are_normalized_relative_to_the_root(self, root: Path) -> None:
        """Absolute paths inside the root and ./ prefixes become the stored form."""
        assert to_relative(str(root), root / "src" / "a.py") == "src/a.py"
        assert to_relative(str(root), "./src//a.py") == "src/a.py"
        with pytest.raises(PathRefusedError, match="outside the project root"):
            to_relative(str(root), root.parent / "elsewhere.txt")
        with pytest.raises(PathRefusedError, match=r"'\.\.' component"):
            to_relative(str(root), "src/../../x")

    def test_stored_traversal_and_absolute_paths_refuse_the_whole_rewind(
        self, store: SessionStore, root: Path, tmp_path: Path
    ) -> None:
        """A checkpoint naming paths outside the root (as an import might) is refused whole:
        every bad path is reported and no file, not even a safe one, is written.
        """
        outside = tmp_path / "outside"
        outside.mkdir()
        history = _history(store, root)
        (root / "safe.txt").write_bytes(b"now")
        evil = store.put_blob(b"evil").sha256
        good = store.put_blob(b"then").sha256
        hostile = {
            "../outside/up.txt": evil,
            "a/../../outside/deep.txt": evil,
            str(outside / "abs.txt"): evil,
            "a\\..\\..\\outside\\win.txt": evil,
        }
        message = MessageAppended(role="user", content="imported")
        history.session.append(
            [
                message,
                FileHistorySnapshot(message_uuid=message.message_uuid, files={**hostile, "safe.txt": good}),
            ]
        )
        before = _types(history)

        with pytest.raises(PathRefusedError) as caught:
            history.rewind(message.message_uuid)

        assert set(caught.value.refused) == set(hostile)
        assert isinstance(caught.value, ValidationError)
        assert all(repr(path) in str(caught.value) for path in hostile)
        assert list(outside.iterdir()) == []
        assert (root / "safe.txt").read_bytes() == b"now"
        assert _types(history) == before
        assert store.list_sessions() == [store.get_session(history.session.id)]

    def test_symlinks_escaping_the_root_refuse_the_rewind(
        self, store: SessionStore, root: Path, tmp_path: Path
    ) -> None:
        """A tracked directory or file later swapped for a symlink out of the root is never written."""
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "victim.txt").write_bytes(b"victim")
        history = _history(store, root)
        uuid = _turn(history, "one")
        _edit(history, root, "sub/f.txt", b"created")
        _edit(history, root, "g.txt", b"created")
        _edit(history, root, "ok.txt", b"created")
        (root / "sub" / "f.txt").unlink()
        (root / "sub").rmdir()
        (root / "sub").symlink_to(outside)
        (root / "g.txt").unlink()
        (root / "g.txt").symlink_to(outside / "victim.txt")
        before = _types(history)

        with pytest.raises(PathRefusedError) as caught:
            history.rewind_files(uuid)

        assert caught.value.refused == {
            "g.txt": "symlink pointing outside the project root",
            "sub/f.txt": "its directory resolves outside the project root (symlink)",
        }
        assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
        assert (outside / "victim.txt").read_bytes() == b"victim"
        assert (root / "ok.txt").read_bytes() == b"created"
        assert _types(history) == before

    def test_tracking_and_reading_refuse_paths_outside_the_root(
        self, store: SessionStore, root: Path, tmp_path: Path
    ) -> None:
        """Backups and reads never leave the root either, and record nothing when refused."""
        (tmp_path / "secret.txt").write_bytes(b"secret")
        (root / "link.txt").symlink_to(tmp_path / "secret.txt")
        history = _history(store, root)
        _turn(history, "one")
        before = _types(history)

        for path in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt"):
            with pytest.raises(PathRefusedError):
                history.track_before_edit(path)
            with pytest.raises(PathRefusedError):
                history.record_read(path)
        (root / "dir").mkdir()
        with pytest.raises(PathRefusedError, match="is a directory"):
            history.track_before_edit("dir")

        assert _types(history) == before

    @pytest.mark.timeout(30)
    def test_a_fifo_at_a_tracked_path_is_refused_not_waited_on(self, store: SessionStore, root: Path) -> None:
        """A FIFO used to block snapshot_turn, the dry run and reads forever: now each is refused."""
        (root / "a.txt").write_bytes(b"one\n")
        history = _history(store, root)
        _edit(history, root, "a.txt", b"two\n")
        first = _turn(history, "one")
        (root / "a.txt").unlink()
        os.mkfifo(root / "a.txt")
        before = _types(history)
        expected = {"a.txt": "is a FIFO, not a regular file"}

        with pytest.raises(PathRefusedError) as snapshot:
            history.snapshot_turn(MessageAppended(role="user", content="two").message_uuid)
        with pytest.raises(PathRefusedError) as dry_run:
            history.rewind_files(first, dry_run=True)
        with pytest.raises(PathRefusedError) as pending:
            history.pending_changes()
        with pytest.raises(PathRefusedError) as read:
            history.record_read("a.txt")

        assert snapshot.value.refused == dry_run.value.refused == pending.value.refused == expected
        assert read.value.refused == expected
        assert _types(history) == before

    def test_rewind_never_restores_into_the_root_written_in_the_log(
        self, store: SessionStore, root: Path, tmp_path: Path
    ) -> None:
        """A checkpoint's root is a free string any appender controls: without root= nothing is restored."""
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "a.txt").write_bytes(b"precious\n")
        session = Session.create(store, model="claude-sonnet-5-5", config=SessionConfig(snapshot_every=0))
        prompt = MessageAppended(role="user", content="one")
        crafted = FileHistorySnapshot(
            message_uuid=prompt.message_uuid, files={"a.txt": None}, root=str(victim)
        )
        session.append([prompt, crafted])
        history = FileHistory(session)

        with pytest.raises(ValidationError, match="no project root"):
            history.rewind_files(prompt.message_uuid)

        assert history.recorded_root == str(victim)
        assert (victim / "a.txt").read_bytes() == b"precious\n"


class TestReadState:
    def test_reads_are_kept_newest_first_with_what_and_when(self, store: SessionStore, root: Path) -> None:
        """The read-file state holds each path's latest read: content blob, mtime, tool call, seq."""
        history = _history(store, root)
        for name in ("a", "b", "c"):
            (root / f"{name}.txt").write_bytes(name.encode() * 3)
        history.record_read("a.txt", tool_use_id="toolu_1")
        history.record_read("b.txt")
        history.record_read("c.txt")
        (root / "a.txt").write_bytes(b"a, edited")
        last = history.record_read(root / "a.txt", tool_use_id="toolu_4")
        missing = history.record_read("gone.txt")

        reads = history.state.recent_reads()

        assert [r.path for r in reads] == ["gone.txt", "a.txt", "c.txt", "b.txt"]
        assert [r.path for r in history.state.recent_reads(2)] == ["gone.txt", "a.txt"]
        assert reads[1].tool_use_id == "toolu_4"
        assert reads[1].blob_sha256 == last.blob_sha256
        assert store.get_blob(reads[1].blob_sha256 or "") == b"a, edited"
        assert reads[1].mtime_ns == (root / "a.txt").stat().st_mtime_ns
        assert reads[1].seq > reads[2].seq
        assert reads[1].read_at
        assert missing.blob_sha256 is None
        assert reads[0].size is None

    def test_the_session_keeps_its_file_history_view_current(self, store: SessionStore, root: Path) -> None:
        """``Session.file_history_state`` (what a post-compact restore reads) follows every append,
        by this session or another writer, and equals a fresh fold of the log."""
        history = _history(store, root)
        session = history.session
        (root / "a.txt").write_bytes(b"a")
        (root / "b.txt").write_bytes(b"b")
        history.record_read("a.txt")
        first = session.file_history_state
        prompt = _turn(history, "go")
        other = FileHistory(Session(store, session.id), root)  # another writer on the same session
        other.record_read("b.txt")

        assert [r.path for r in first.recent_reads()] == ["a.txt"]
        session.refresh()
        assert [r.path for r in session.file_history_state.recent_reads()] == ["b.txt", "a.txt"]
        assert session.file_history_state.checkpoint(prompt) is not None
        assert session.file_history_state.recorded_root == str(root)
        fresh = fold(FileHistoryProjection(), store.read(session.id))
        assert FileHistoryProjection().dump(session.file_history_state) == FileHistoryProjection().dump(fresh)

    def test_each_session_owns_its_view(self, store: SessionStore, root: Path) -> None:
        """Two sessions never share a view: a read in one is not in the other's."""
        (root / "a.txt").write_bytes(b"a")
        one, two = _history(store, root), _history(store, root)
        one.record_read("a.txt")

        assert [r.path for r in one.session.file_history_state.recent_reads()] == ["a.txt"]
        assert two.session.file_history_state.recent_reads() == []


def _contents(n: int, tag: str) -> bytes:
    return random.Random(f"{tag}{n}").randbytes(64_000 + n)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("phase", ["write", "replace"])
def test_a_rewind_killed_midway_leaves_every_file_old_or_new(
    shared_backend: Backend, tmp_path: Path, phase: str
) -> None:
    """SIGKILL during the temp writes or the renames: each file is whole, old or new, never cut."""
    root = tmp_path / "project"
    root.mkdir()
    names = [f"dir{n % 3}/file{n}.bin" for n in range(24)]
    store = shared_backend.open()
    try:
        history = _history(store, root)
        for n, name in enumerate(names):
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_bytes(_contents(n, "old"))
        uuid = _turn(history, "one")
        for n, name in enumerate(names):
            _edit(history, root, name, _contents(n, "new"))
        _turn(history, "two")
        sid = history.session.id
    finally:
        store.close()

    proc = subprocess.Popen(
        [sys.executable, "-m", "tests._file_history_worker", phase, shared_backend.url, sid, str(root), uuid],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        announced = [proc.stdout.readline().strip() for _ in range(10)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()

    assert announced[-1] == ("fsync 9" if phase == "write" else "replace 9"), stderr
    assert proc.returncode == -signal.SIGKILL
    states = []
    for n, name in enumerate(names):
        data = (root / name).read_bytes()
        assert data in (_contents(n, "old"), _contents(n, "new")), f"{name} is neither old nor new"
        states.append("old" if data == _contents(n, "old") else "new")
    if phase == "write":
        assert states == ["new"] * len(names)
    else:
        assert 9 <= states.count("old") < len(names)
    leftovers = {p.name for p in root.rglob("*") if p.is_file()} - {Path(n).name for n in names}
    assert all(name.endswith(".rewind-tmp") for name in leftovers)
    # The log tells: killed in the renames, a rewind started and never finished; in the temp
    # writes no file changed, so nothing was recorded.
    store = shared_backend.open()
    try:
        session = Session(store, sid)
        unfinished = FileHistory(session, root).state.unfinished_rewind
        started = [e for e in audit(session).entries if e.kind == "files_rewind_started"]
    finally:
        store.close()
    if phase == "write":
        assert unfinished is None
        assert started == []
    else:
        assert unfinished is not None and not unfinished.failed
        assert sorted(unfinished.restore) == sorted(names)
        assert "was interrupted (no outcome recorded)" in unfinished.describe()
        assert [
            e.what.endswith("INTERRUPTED (no outcome recorded): files may be mixed") for e in started
        ] == [True]


def _cli(*argv: str) -> tuple[int, str]:
    import io

    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_checkpoints_and_rewind_through_the_cli(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`checkpoints` lists turns; `rewind --dry-run` shows the diff; `rewind` restores and forks."""
    import sessionstore

    monkeypatch.chdir(root)  # the project root is the current directory by default
    db = str(tmp_path / "cli.db")
    (root / "a.txt").write_bytes(b"first\n")
    with sessionstore.open_store(db, migrate=True) as store:
        history = _history(store, root)
        one = _turn(history, "one")
        _edit(history, root, "a.txt", b"second\n")
        _turn(history, "two")
        _edit(history, root, "b.txt", b"made in two\n")
        sid = history.session.id

    code, listed = _cli("checkpoints", "--db", db, sid)
    assert code == 0
    assert listed.splitlines()[0].endswith("1 tracked  changed: a.txt")
    assert "changed: (turn in progress" in listed.splitlines()[1]
    code, rows = _cli("checkpoints", "--db", db, sid, "--root", str(root), "--json")
    parsed = [json.loads(line) for line in rows.splitlines()]
    assert code == 0
    assert [r["changed"] for r in parsed] == [["a.txt"], ["b.txt"]]
    assert parsed[1]["files"]["b.txt"] == {"blob_sha256": None, "version": 1}

    code, dry = _cli("rewind", "--db", db, sid, "--to", one, "--dry-run")
    assert code == 0
    assert "-second\n+first\n" in dry
    assert "files: would restore 1, would delete 1, 0 unchanged" in dry
    assert "conversation: would continue in a fork, sharing the log up to seq 2" in dry
    assert (root / "a.txt").read_bytes() == b"second\n"

    code, done = _cli("rewind", "--db", db, sid, "--to", one, "--files", "--json")
    result = json.loads(done)
    assert code == 0
    assert result["files"]["restored"] == ["a.txt"]
    assert result["files"]["deleted"] == ["b.txt"]
    assert result["fork_session_id"] is None
    assert _tree(root) == {"a.txt": b"first\n"}

    code, forked = _cli("rewind", "--db", db, sid, "--to", one, "--conversation", "--fork-id", "f1")
    assert code == 0
    assert "conversation: continue in fork f1, sharing the log up to seq 2" in forked

    (root / "a.txt").unlink()
    (root / "a.txt").symlink_to(tmp_path / "escape.txt")
    code, _ = _cli("rewind", "--db", db, sid, "--to", one, "--files")
    assert code == 1
    assert "'a.txt': symlink pointing outside the project root" in capsys.readouterr().err
    assert not (tmp_path / "escape.txt").exists()


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example in docs/checkpoints.md runs as written."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    doc = (REPO / "docs" / "checkpoints.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)

    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/checkpoints.md", "exec"), {})


def test_cli_rewind_refuses_a_recorded_root_other_than_the_current_directory(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --root the root is the current directory; a checkpoint naming another is refused."""
    import sessionstore

    db = str(tmp_path / "cli.db")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.txt").write_bytes(b"precious\n")
    with sessionstore.open_store(db, migrate=True) as store:
        session = Session.create(store, model="claude-sonnet-5-5", config=SessionConfig(snapshot_every=0))
        prompt = MessageAppended(role="user", content="one")
        # What any appender (CLI stdin, a shared database) can write: a snapshot naming another root.
        crafted = FileHistorySnapshot(
            message_uuid=prompt.message_uuid, files={"a.txt": None}, root=str(victim)
        )
        session.append([prompt, crafted])
        sid = session.id
    monkeypatch.chdir(root)

    for extra in ([], ["--dry-run"]):
        code, _ = _cli("rewind", "--db", db, sid, "--to", prompt.message_uuid, "--files", *extra)
        err = capsys.readouterr().err
        assert code == 1
        assert f"recorded under {victim}, not the current directory {root}" in err
        assert "--root" in err
    assert (victim / "a.txt").read_bytes() == b"precious\n"

    (root / "a.txt").write_bytes(b"made later\n")
    code, _ = _cli("rewind", "--db", db, sid, "--to", prompt.message_uuid, "--files", "--root", str(root))
    assert code == 0
    assert (
        f"note: the checkpoint was recorded under {victim}; restoring under {root}" in capsys.readouterr().err
    )
    assert not (root / "a.txt").exists()
    assert (victim / "a.txt").read_bytes() == b"precious\n"


def test_checkpoints_and_audit_show_a_rewind_that_did_not_finish(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a rewind stopped half way, `checkpoints` warns and `audit` lists the failure."""
    import sessionstore

    db = str(tmp_path / "cli.db")
    (root / "a.txt").write_bytes(b"first\n")
    with sessionstore.open_store(db, migrate=True) as store:
        history = _history(store, root)
        one = _turn(history, "one")
        _edit(history, root, "a.txt", b"second\n")
        _edit(history, root, "b.txt", b"made in one\n")
        real_unlink = os.unlink

        def failing_unlink(path: str) -> None:
            if path.endswith("b.txt"):
                raise OSError(5, "I/O error")
            real_unlink(path)

        monkeypatch.setattr(os, "unlink", failing_unlink)
        with pytest.raises(FilesRewindError):
            history.rewind_files(one)
        monkeypatch.undo()
        sid = history.session.id

    code, _ = _cli("checkpoints", "--db", db, sid)
    warning = capsys.readouterr().err
    code_audit, timeline = _cli("audit", "--db", db, sid)

    assert code == code_audit == 0
    assert f"warning: files rewind to {one} (seq " in warning
    assert "failed after 1 of 2 changes: OSError: [Errno 5] I/O error; files may be mixed" in warning
    assert "files_rewind_failed" in timeline
    assert "FAILED after 1 of 2" in " ".join(timeline.split())

"""The SQLite file itself: never created by a reader, readable when read-only, never lost silently."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sessionstore
from sessionstore import MessageAppended, SessionStore
from sessionstore.cli import main
from sessionstore.errors import DatabaseFileGoneError, DatabaseNotFoundError, OperationalError


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _filled(path: Path) -> str:
    """A database at ``path`` holding one session with two events; the session's id."""
    with sessionstore.open_store(path, migrate=True, token_counter=None) as store:
        sid = store.create_session("s1", events=[MessageAppended(role="user", content="hi")]).id
        store.append(sid, [MessageAppended(role="assistant", content="hello")], expected_seq=1)
    return sid


# --- readers never create a database ------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["sessions"],
        ["events", "s1"],
        ["context", "s1"],
        ["show", "s1"],
        ["verify"],
        ["verify", "s1"],
        ["checkpoints", "s1"],
        ["audit", "s1"],
        ["db", "current"],
        ["db", "downgrade", "base"],
    ],
)
def test_a_read_command_on_a_mistyped_path_creates_nothing(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "no-such-dir" / "sesions.db"

    code, _ = _cli(*command, "--db", str(typo))

    assert code == 1
    assert "no database at" in capsys.readouterr().err
    assert not typo.parent.exists()


@pytest.mark.parametrize("command", [["new"], ["db", "upgrade"]])
def test_creating_commands_still_create_the_database(tmp_path: Path, command: list[str]) -> None:
    fresh = tmp_path / "new-dir" / "store.db"
    if command == ["new"]:
        assert _cli("db", "upgrade", "--db", str(fresh))[0] == 0

    code, _ = _cli(*command, "--db", str(fresh))

    assert code == 0
    assert fresh.is_file()


def test_open_store_with_create_false_raises_and_leaves_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "missing" / "x.db"
    with pytest.raises(DatabaseNotFoundError) as raised:
        sessionstore.open_store(typo, create=False)
    assert raised.value.path == str(typo)
    assert isinstance(raised.value, LookupError)
    assert not typo.parent.exists()


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("given", ["a path", "a sqlite URL"])
def test_opening_a_new_path_without_migrate_leaves_nothing_behind(
    tmp_path: Path, api: str, given: str
) -> None:
    """The schema check fails (nothing to check): neither the file SQLite began (4 KB in WAL mode)
    nor the folders made for it stay behind."""
    fresh = tmp_path / "new-dir" / "deeper" / "store.db"
    url = str(fresh) if given == "a path" else f"sqlite:///{fresh}"

    with pytest.raises(sessionstore.SchemaOutOfDateError):
        if api == "sync":
            sessionstore.open_store(url, migrate=False)
        else:
            asyncio.run(sessionstore.open_async_store(url, migrate=False))

    assert os.listdir(tmp_path) == []


def test_a_failed_open_keeps_a_database_that_was_there(tmp_path: Path) -> None:
    """Only a file the failed open made is removed: one that existed (here, unmigrated) stays."""
    existing = tmp_path / "kept.db"
    with contextlib.closing(sqlite3.connect(existing)) as conn:
        conn.execute("CREATE TABLE mine (x)")

    with pytest.raises(sessionstore.SchemaOutOfDateError):
        sessionstore.open_store(existing, migrate=False)

    assert existing.is_file()


@pytest.mark.parametrize("given", ["a path", "a sqlite URL"])
def test_a_symbolic_link_to_nothing_is_refused_and_creates_nothing(tmp_path: Path, given: str) -> None:
    """SQLite would create the file the link points at, somewhere the caller did not name."""
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "elsewhere" / "target.db")
    url = str(link) if given == "a path" else f"sqlite:///{link}"

    with pytest.raises(OperationalError) as refused:
        sessionstore.open_store(url, migrate=True)

    assert "is a symbolic link to" in str(refused.value)
    assert "which does not exist: nothing was created" in str(refused.value)
    assert sorted(os.listdir(tmp_path)) == ["link.db"]


def test_a_path_too_long_for_the_system_is_one_short_error(tmp_path: Path) -> None:
    """Named, shortened (its start, its end, its length), never echoed whole, and nothing made."""
    long = tmp_path.joinpath(*["d" * 250] * 20, "x.db")

    with pytest.raises(OperationalError) as refused:
        sessionstore.open_store(long, migrate=True)

    message = str(refused.value)
    assert message.startswith(f"cannot open the database {str(long)[:64]}...")
    assert f"...{str(long)[-64:]} ({len(str(long))} characters)" in message
    assert len(message) < 300
    assert os.listdir(tmp_path) == []


def test_the_embedded_default_is_not_created_by_a_reader(tmp_path: Path) -> None:
    """With nothing configured, `sessionstore sessions` on a fresh machine does not make a file."""
    code, _ = _cli("sessions")
    assert code == 1
    assert not (tmp_path / "home").exists()


# --- a read-only database can be read and verified ----------------------------------------------


def _try_chattr(flag: str, *paths: Path) -> bool:
    try:
        done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    return done.returncode == 0


@contextlib.contextmanager
def _read_only(*paths: Path) -> Iterator[None]:
    """Make ``paths`` unwritable for this process (chmod; for root, the immutable attribute)."""
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    immutable = any(os.access(path, os.W_OK) for path in paths) and _try_chattr("+i", *paths)
    try:
        if any(os.access(path, os.W_OK) for path in paths):
            pytest.skip("cannot make a file read-only for this user here (root without chattr)")
        yield
    finally:
        if immutable:
            _try_chattr("-i", *paths)
        for path, mode in modes.items():
            path.chmod(mode)


def _backup_copy(source: Path, target: Path) -> None:
    """A copy as backup tools make it: ``VACUUM INTO`` writes a rollback-journal (not WAL) file."""
    with contextlib.closing(sqlite3.connect(source)) as conn:
        conn.execute("VACUUM INTO ?", (str(target),))


@pytest.mark.parametrize("unwritable", ["file", "file-and-folder", "backup-copy"])
def test_a_read_only_database_is_read_and_verified(tmp_path: Path, unwritable: str) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "store.db"
    sid = _filled(db)
    if unwritable == "backup-copy":
        _backup_copy(db, folder / "copy.db")
        db.unlink()
        db = folder / "copy.db"
    locked = [db, folder] if unwritable == "file-and-folder" else [db]

    with _read_only(*locked):
        with sessionstore.open_store(db, token_counter=None) as store:
            assert [r.seq for r in store.read(sid)] == [1, 2]
            assert store.verify(sid).ok
            with pytest.raises(OperationalError, match="readonly"):
                store.append(sid, [MessageAppended(role="user", content="no")], expected_seq=2)
        verified, out = _cli("verify", sid, "--db", str(db))
        listed, events = _cli("events", sid, "--db", str(db))

    assert verified == 0, out
    assert listed == 0
    assert len(events.splitlines()) == 2


# --- a deleted or replaced file is never written to silently ------------------------------------


def _append(store: SessionStore, sid: str, text: str) -> None:
    store.append(sid, [MessageAppended(role="user", content=text)], expected_seq="any")


def test_appending_after_the_file_was_deleted_raises_instead_of_losing_the_event(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    sid = _filled(db)
    with sessionstore.open_store(db, token_counter=None) as store:
        _append(store, sid, "kept")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)

        with pytest.raises(DatabaseFileGoneError, match="deleted"):
            _append(store, sid, "would be lost")
        with pytest.raises(DatabaseFileGoneError):
            store.put_blob(b"would be lost too")
        # A new connection does not silently start an empty database at the path either.
        store.engine.dispose()  # type: ignore[attr-defined]
        with pytest.raises(OperationalError):
            store.read(sid)
    assert not db.exists()


def test_appending_after_the_file_was_replaced_raises(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    sid = _filled(db)
    other = tmp_path / "other.db"
    _filled(other)
    with sessionstore.open_store(db, token_counter=None) as store:
        _append(store, sid, "kept")
        other.replace(db)

        with pytest.raises(DatabaseFileGoneError, match="replaced"):
            _append(store, sid, "would go to the old file")


def test_a_write_on_a_connection_opened_after_the_file_was_deleted_raises_file_gone(tmp_path: Path) -> None:
    """No connection the store held before the deletion: a new one cannot open the file, and the
    write says the file is gone (not a bare "unable to open database file")."""
    db = tmp_path / "store.db"
    sid = _filled(db)
    with sessionstore.open_store(db, token_counter=None) as store:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        store.engine.dispose()  # type: ignore[attr-defined]

        with pytest.raises(DatabaseFileGoneError, match="deleted"):
            _append(store, sid, "would be lost")
        with pytest.raises(DatabaseFileGoneError, match="deleted"):
            store.put_blob(b"would be lost too")
    assert not db.exists()


# --- the store's writer connection --------------------------------------------------------------


def test_appends_from_several_threads_sharing_one_store_all_land_in_one_chain(tmp_path: Path) -> None:
    """Threads appending at once through one store: every event is stored once, in one unbroken
    chain per session (writers take turns on one connection or wait on the database's lock)."""
    db = tmp_path / "store.db"
    n_threads, per_thread = 4, 25
    with sessionstore.open_store(db, migrate=True, token_counter=None) as store:
        shared = store.create_session().id
        own = [store.create_session().id for _ in range(n_threads)]
        errors: list[BaseException] = []

        def write(index: int) -> None:
            try:
                for i in range(per_thread):
                    _append(store, shared, f"thread {index} message {i}")
                    store.append(own[index], [MessageAppended(role="user", content=str(i))], expected_seq=i)
            except BaseException as e:  # reported below: a thread's exception is otherwise lost
                errors.append(e)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(n_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []

        texts = sorted(r.event.content for r in store.read(shared))  # type: ignore[attr-defined]
        expected = sorted(f"thread {t} message {i}" for t in range(n_threads) for i in range(per_thread))
        assert texts == expected
        assert store.verify(shared).ok
        for sid in own:
            assert [r.event.content for r in store.read(sid)] == [str(i) for i in range(per_thread)]  # type: ignore[attr-defined]
            assert store.verify(sid).ok


def test_a_closed_store_holds_no_connection_and_a_reopened_one_continues_the_chain(tmp_path: Path) -> None:
    """``close()`` closes every connection, the writer's too: SQLite then folds the WAL into the
    file and removes it. A store opened again reads every event and appends after them."""
    db = tmp_path / "store.db"
    store = sessionstore.open_store(db, migrate=True, token_counter=None)
    sid = store.create_session().id
    for i in range(3):
        store.append(sid, [MessageAppended(role="user", content=str(i))], expected_seq=i)
    store.close()
    assert not Path(f"{db}-wal").exists()

    with sessionstore.open_store(db, token_counter=None) as reopened:
        reopened.append(sid, [MessageAppended(role="user", content="3")], expected_seq=3)
        assert [r.event.content for r in reopened.read(sid)] == ["0", "1", "2", "3"]  # type: ignore[attr-defined]
        assert reopened.verify(sid).ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_on_its_own_connection_even_if_the_parent_was_mid_write(
    tmp_path: Path,
) -> None:
    """A child forked while the parent's writer connection was in use neither waits for it nor
    uses or closes it: it appends on a connection of its own and closes cleanly; the parent
    goes on appending; one chain holds both."""
    store = sessionstore.open_store(tmp_path / "store.db", migrate=True)
    sid = store.create_session(events=[MessageAppended(role="user", content="parent 1")]).id
    store.append(sid, [MessageAppended(role="user", content="parent 2")], expected_seq="any")
    store._writer_lock.acquire()  # type: ignore[attr-defined]  # as if a thread were mid-append
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never through pytest
        code = 1
        try:
            store.append(sid, [MessageAppended(role="user", content="child")], expected_seq="any")
            store.close()
            code = 0
        finally:
            os._exit(code)
    store._writer_lock.release()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:  # it hangs on the lock it inherited
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child did not finish within 60 s")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    store.append(sid, [MessageAppended(role="user", content="parent 3")], expected_seq="any")
    try:
        contents = [e.event.content for e in store.read(sid)]  # type: ignore[attr-defined]
        assert contents == ["parent 1", "parent 2", "child", "parent 3"]
        assert store.verify(sid).ok
    finally:
        store.close()

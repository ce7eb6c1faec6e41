"""``SessionStoreClaudeStore``: the Claude Agent SDK's ``SessionStore`` protocol on sessionstore.

The SDK's own conformance suite (``claude_agent_sdk.testing``) runs on SQLite and PostgreSQL,
over the async and the sync store. Then what the store adds: every mirrored line becomes the
events an import of it writes (checked against a one-shot import of real transcripts), a retried
batch writes nothing, a bad batch writes nothing, two writers with stale caches lose nothing, a
fresh process reads everything back, and ``delete`` erases with receipts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk.testing import run_session_store_conformance

import sessionstore
from sessionstore.bridges.claude_agent_sdk import SessionStoreClaudeStore, transcript_session_id
from sessionstore.claude_code import MirrorFamily, TranscriptMirror
from sessionstore.claude_code._export import transcript_line
from sessionstore.claude_code._import import _import_files, _Owner, _read_file
from sessionstore.errors import ValidationError
from sessionstore.store import AsyncSessionStore, SessionStore

from ._claude_code_corpus import JOINED_LINE_FILE, MAIN_FILES, corpus_file, entries
from .conftest import SHARED_BACKENDS, Backend, _make_backend, _need_pg

AnyStore = SessionStore | AsyncSessionStore
#: The SDK's SessionKey (a TypedDict); entries are its SessionStoreEntry dicts.
KEY: Any = {"project_key": "-work-app", "session_id": "3f2b9c1e-0000-4000-8000-000000000001"}


@pytest.fixture(params=SHARED_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _make_backend(request.param, tmp_path)


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def opened() -> Iterator[list[SessionStore]]:
    """Stores a test opens, closed after it."""
    stores: list[SessionStore] = []
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def store(backend: Backend, opened: list[SessionStore]) -> SessionStore:
    opened.append(backend.open())
    return opened[-1]


# --- the SDK's conformance suite ---------------------------------------------------------


async def _conformance(api: str, url: str, prefixes: Iterator[str | None]) -> None:
    """The SDK's suite, each contract on a store of its own (``prefixes``: its tables' names)."""
    opened: list[AnyStore] = []

    async def make() -> Any:  # the SDK's SessionStore protocol, duck-typed
        prefix = next(prefixes)
        store: AnyStore
        if api == "async":
            store = await sessionstore.open_async_store(url, migrate=True, table_prefix=prefix)
        else:
            store = sessionstore.open_store(url, migrate=True, table_prefix=prefix)
        opened.append(store)
        return SessionStoreClaudeStore(store)

    try:
        await run_session_store_conformance(make)
    finally:
        for store in opened:
            if isinstance(store, AsyncSessionStore):
                await store.close()
            else:
                store.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_sdks_conformance_suite_passes_on_sqlite(api: str, tmp_path: Path) -> None:
    prefixes = (f"c{n}_" for n in itertools.count())
    _run(_conformance(api, f"sqlite:///{tmp_path}/store.db", prefixes))


@pytest.mark.postgres
@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_sdks_conformance_suite_passes_on_postgres(api: str, backend_pg: Backend) -> None:
    prefixes = (f"c{n}_" for n in itertools.count())
    _run(_conformance(api, backend_pg.url, prefixes))


@pytest.fixture
def backend_pg(tmp_path: Path) -> Iterator[Backend]:
    _need_pg()
    yield from _make_backend("postgres", tmp_path)


# --- mirrored lines are imported lines ----------------------------------------------------


def _lines(name: str) -> list[dict[str, Any]]:
    return [entry for _, entry in entries(corpus_file(name))]


def _events(store: SessionStore, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(str(r.event_id), r.payload_dict()) for r in store.read(session_id)]


def _family(lines: list[dict[str, Any]]) -> MirrorFamily:
    session = next((line["sessionId"] for line in lines if isinstance(line.get("sessionId"), str)), "s")
    return MirrorFamily("proj", session, transcript_session_id("proj", session))


def _one_shot(store: SessionStore, lines: list[dict[str, Any]], family: MirrorFamily, folder: Path) -> None:
    """The lines imported whole from a file, one entry a line, under the ids the mirror gives them."""
    path = folder / "whole.jsonl"
    path.write_text("".join(transcript_line(line) + "\n" for line in lines), encoding="utf-8")
    file = _read_file(path, False, [])
    named = type(file)(
        file.path,
        file.lines,
        family.session_id,
        None,
        False,
        None,
        False,
        file.index,
        store_id=family.main_id,
        virtual=True,
    )
    _import_files(
        store, [named], [], skip_bad_lines=False, progress=None, owner=_Owner(family.tenant), snapshot=False
    )


#: Six real main transcripts (the one with two objects on a line is mirrored as two entries).
_MIRRORED = [name for name in sorted(MAIN_FILES) if name != JOINED_LINE_FILE[0]][:6]


@pytest.mark.parametrize("batch", [1, 7, 500])
@pytest.mark.parametrize("name", _MIRRORED, ids=lambda name: name[:40])
def test_mirrored_lines_become_the_events_an_import_of_them_writes(
    name: str, batch: int, tmp_path: Path, opened: list[SessionStore]
) -> None:
    """Handed over ``batch`` lines at a time, a real transcript's settled lines are written as the
    events a one-shot import of the file writes, event for event (ids included); the lines
    still held come back from ``load`` with the rest, deep-equal to what was handed over."""
    lines = _lines(name)
    family = _family(lines)
    mirrored = sessionstore.open_store(tmp_path / "mirror.db", migrate=True)
    opened.append(mirrored)
    mirror = TranscriptMirror()
    for start in range(0, len(lines), batch):
        mirror.append(mirrored, family, None, lines[start : start + batch])
    whole = sessionstore.open_store(tmp_path / "whole.db", migrate=True)
    opened.append(whole)
    _one_shot(whole, lines, family, tmp_path)

    got, want = _events(mirrored, family.main_id), _events(whole, family.main_id)
    assert got == want[: len(got)]
    assert len(got) >= len(want) - 8  # only the last turn's lines may still be held
    assert mirror.entries(mirrored, family, None) == lines
    assert TranscriptMirror().entries(mirrored, family, None) == lines  # another process


def test_a_fresh_mirror_goes_on_where_another_left_off(tmp_path: Path, opened: list[SessionStore]) -> None:
    """A mirror that never saw the family (a new process) reads it back from the store and goes
    on: the events are those one mirror would have written."""
    lines = _lines(_MIRRORED[0])
    family = _family(lines)
    store = sessionstore.open_store(tmp_path / "a.db", migrate=True)
    opened.append(store)
    half = len(lines) // 2
    TranscriptMirror().append(store, family, None, lines[:half])
    TranscriptMirror().append(store, family, None, lines[half:])
    one = sessionstore.open_store(tmp_path / "b.db", migrate=True)
    opened.append(one)
    # One mirror for both halves: nothing read back.
    single = TranscriptMirror()
    single.append(one, family, None, lines[:half])
    single.append(one, family, None, lines[half:])

    assert _events(store, family.main_id) == _events(one, family.main_id)
    assert TranscriptMirror().entries(store, family, None) == lines


# --- what a batch may hold -------------------------------------------------------------------


def _entry(uuid: str | None, n: int, **more: Any) -> Any:
    entry: dict[str, Any] = {"type": "user", "n": n, **more}
    if uuid is not None:
        entry["uuid"] = uuid
    return entry


def test_a_retried_batch_writes_nothing_and_entries_without_uuid_are_appended_again(
    store: SessionStore,
) -> None:
    adapter = SessionStoreClaudeStore(store)
    batch = [_entry("a", 1), _entry(None, 2), _entry("b", 3)]

    async def body() -> Any:
        await adapter.append(KEY, batch)
        log = store.last_seq(f"{adapter.session_id(KEY)}.mirror")
        await adapter.append(KEY, [_entry("a", 1), _entry("b", 3)])  # the retry of a batch stored
        unchanged = store.last_seq(f"{adapter.session_id(KEY)}.mirror")
        await adapter.append(KEY, batch)
        return log, unchanged, await adapter.load(KEY)

    log, unchanged, loaded = _run(body())
    assert unchanged == log
    assert loaded == [*batch, _entry(None, 2)]


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (float("nan"), "not a dict"),
        ({"n": 1}, "no 'type'"),
        ({"type": "user", "x": float("nan")}, "cannot be stored as JSON"),
        ({"type": "user", "x": "\ud800"}, "surrogate"),
        ({"type": "user", "x": {1, 2}}, "cannot be stored as JSON"),
        ({"type": "user", "uuid": "a", "n": 9}, "already earlier in this batch with other content"),
    ],
)
def test_a_batch_with_a_bad_entry_is_refused_whole(store: SessionStore, entry: Any, said: str) -> None:
    adapter = SessionStoreClaudeStore(store)

    async def body() -> Any:
        await adapter.append(KEY, [_entry("x", 0)])
        with pytest.raises(ValidationError, match=said) as raised:
            await adapter.append(KEY, [_entry("a", 1), entry, _entry("c", 3)])
        return raised.value, await adapter.load(KEY)

    error, loaded = _run(body())
    assert "entry 1" in str(error) and "nothing of the batch was stored" in str(error)
    assert loaded == [_entry("x", 0)]


def test_a_uuid_stored_before_with_other_content_refuses_the_batch(store: SessionStore) -> None:
    adapter = SessionStoreClaudeStore(store)

    async def body() -> Any:
        await adapter.append(KEY, [_entry("a", 1)])
        with pytest.raises(ValidationError, match="line 1 of this transcript"):
            await adapter.append(KEY, [_entry("b", 2), _entry("a", 99)])
        return await adapter.load(KEY)

    assert _run(body()) == [_entry("a", 1)]


def test_an_entry_claiming_another_sessions_uuid_stays_in_its_own_session(store: SessionStore) -> None:
    adapter = SessionStoreClaudeStore(store)
    other: Any = {**KEY, "session_id": "another"}

    async def body() -> Any:
        await adapter.append(KEY, [_entry("a", 1)])
        await adapter.append(other, [_entry("a", 2)])
        return await adapter.load(KEY), await adapter.load(other)

    assert _run(body()) == ([_entry("a", 1)], [_entry("a", 2)])


# --- writers, sub-agents, erasure ------------------------------------------------------------


def test_two_writers_with_their_own_caches_lose_nothing(store: SessionStore) -> None:
    """Two adapters (two processes' worth of cached state) append to one transcript in turns:
    each finds the other moved it on, reads it back, and numbers its lines after the other's."""
    first, second = SessionStoreClaudeStore(store), SessionStoreClaudeStore(store)

    async def body() -> Any:
        for n in range(6):
            writer = first if n % 2 == 0 else second
            await writer.append(KEY, [_entry(f"u{n}", n), _entry(None, n)])
        return await first.load(KEY), await second.load(KEY)

    from_first, from_second = _run(body())
    expected = [entry for n in range(6) for entry in (_entry(f"u{n}", n), _entry(None, n))]
    assert from_first == from_second == expected


def test_delete_erases_the_transcript_and_its_sub_agents_with_receipts(store: SessionStore) -> None:
    adapter = SessionStoreClaudeStore(store)
    sub: Any = {**KEY, "subpath": "subagents/agent-a1"}

    async def body() -> Any:
        await adapter.append(KEY, [_entry("m", 1)])
        await adapter.append(sub, [_entry("s", 1)])
        receipts = await adapter.erase(KEY, reason="user asked")
        return (
            receipts,
            await adapter.load(KEY),
            await adapter.load(sub),
            await adapter.list_sessions(KEY["project_key"]),
        )

    receipts, main, child, listed = _run(body())
    assert main is None and child is None and listed == []
    erased = {receipt.session_id for receipt in receipts}
    assert f"{adapter.session_id(KEY)}.mirror" in erased
    assert all(receipt.reason == "user asked" for receipt in receipts)
    assert store.erasure(f"{adapter.session_id(KEY)}.mirror") is not None


def test_the_project_is_the_tenant_of_its_sessions(store: SessionStore) -> None:
    adapter = SessionStoreClaudeStore(store)

    async def body() -> Any:
        await adapter.append(KEY, [_entry("m", 1)])
        return await adapter.list_sessions(KEY["project_key"])

    listed = _run(body())
    assert [item["session_id"] for item in listed] == [KEY["session_id"]]
    log = store.get_session(f"{adapter.session_id(KEY)}.mirror")
    assert log.tenant == KEY["project_key"]
    assert log.metadata["transcript_mirror"] == {"session_id": KEY["session_id"], "subpath": None}


@pytest.mark.parametrize(
    "key", [{"session_id": "s"}, {"project_key": "p"}, "p/s", {"project_key": "p\n", "session_id": "s"}]
)
def test_a_bad_key_is_refused(key: Any, tmp_path: Path, opened: list[SessionStore]) -> None:
    opened.append(sessionstore.open_store(tmp_path / "s.db", migrate=True))
    adapter = SessionStoreClaudeStore(opened[-1])
    with pytest.raises(ValidationError):
        _run(adapter.append(key, [_entry("a", 1)]))


def test_delete_shreds_an_encrypted_transcript(backend: Backend, opened: list[SessionStore]) -> None:
    """In an encrypting store every session of the transcript is shredded: its key destroyed."""
    from sessionstore.store import LocalKeyProvider

    opened.append(backend.open(encryption=LocalKeyProvider(bytes(range(32)))))
    adapter = SessionStoreClaudeStore(opened[-1])
    lines: Any = _lines(_MIRRORED[0])

    async def body() -> Any:
        await adapter.append(KEY, lines)
        assert await adapter.load(KEY) == lines
        return await adapter.erase(KEY)

    receipts = _run(body())
    assert {receipt.method for receipt in receipts} == {"shredded"}
    assert {receipt.session_id for receipt in receipts} >= {
        adapter.session_id(KEY),
        f"{adapter.session_id(KEY)}.mirror",
    }
    assert _run(adapter.load(KEY)) is None

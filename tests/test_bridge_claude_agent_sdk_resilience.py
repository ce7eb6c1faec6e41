"""The resilience suite (``sessionstore.bridges.claude_agent_sdk.testing``) against
``SessionStoreClaudeStore`` on SQLite and PostgreSQL, over the sync and the async store; and
against adapters that each lack one guarantee, which it must catch."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

import sessionstore
from sessionstore.bridges.claude_agent_sdk.testing import CHECKS, run_session_store_resilience

from ._agent_sdk_factory import DIR_VARIABLE, STALLS_FROM, URL_VARIABLE
from .conftest import SHARED_BACKENDS, Backend, _make_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the kill check sends SIGKILL")

#: Entries per writer and in the killed batch: small enough for CI, long enough to interleave.
ENTRIES = 200
FACTORY = "tests._agent_sdk_factory"


@pytest.fixture(params=SHARED_BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A migrated database, named to the factory's processes by the environment."""
    for found in _make_backend(request.param, tmp_path):
        sessionstore.open_store(found.url, migrate=True).close()
        monkeypatch.setenv(URL_VARIABLE, found.url)
        yield found


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the broken adapters keep their files."""
    monkeypatch.setenv(DIR_VARIABLE, str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_adapter_passes_every_check(backend: Backend, api: str) -> None:
    report = asyncio.run(run_session_store_resilience(f"{FACTORY}:{api}_adapter", entries=ENTRIES))
    print(report)

    assert [check.name for check in report.checks] == list(CHECKS)


def _fails(factory: str, check: str, entries: int = ENTRIES) -> str:
    with pytest.raises(AssertionError) as failed:
        asyncio.run(run_session_store_resilience(f"{FACTORY}:{factory}", entries=entries, checks=[check]))
    return str(failed.value)


def test_a_store_rewriting_a_file_without_a_lock_loses_a_writers_entries(folder: Path) -> None:
    said = _fails("unlocked_file_store", "writers")

    assert "were lost" in said


@pytest.mark.parametrize(
    ("check", "said"),
    [("retry", "appended twice in a row"), ("malformed", "was accepted")],
)
def test_the_sdks_in_memory_store_neither_ignores_a_retry_nor_refuses_a_bad_entry(
    folder: Path, check: str, said: str
) -> None:
    assert said in _fails("unlocked_file_store", check)


def test_a_store_appending_entry_by_entry_is_caught_part_done_by_a_kill(folder: Path) -> None:
    said = _fails("PartialAppendStore", "kill", entries=STALLS_FROM)

    assert "all of the batch or none of it" in said

"""The example of docs/storage.md's "Async" section runs as written and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).parent.parent / "docs" / "storage.md"


def _async_section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## Async\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_async_example_runs_and_prints_its_comment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", _async_section(), flags=re.DOTALL)
    assert len(blocks) == 1
    promised = re.search(r"asyncio\.run\(main\(\)\)  # (.+)", blocks[0])
    assert promised is not None

    printed = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "storage_async"}
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], f"{PAGE}, Async", "exec"), namespace)

    assert printed.getvalue().strip() == promised.group(1)
    assert (tmp_path / "sessions.db").exists()

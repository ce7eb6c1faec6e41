"""docs/storage.md "Erasure and retention" runs as written: its Python blocks in order, printing
what the text says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

STORAGE = Path(__file__).parent.parent / "docs" / "storage.md"


def _section() -> str:
    return STORAGE.read_text().split("\n## Erasure and retention\n", 1)[1].split("\n## ", 1)[0]


def _promised(block: str) -> list[str]:
    """The backquoted outputs of the ``prints ...`` sentence right after ``block``."""
    after = _section().split(block, 1)[1]
    match = re.match(r"```\n\nprints (.*?)(?:\n\n|\Z)", after, flags=re.DOTALL)
    assert match is not None, "every example says what it prints"
    return re.findall(r"`([^`]*)`", match.group(1))


def test_the_examples_print_what_the_text_says() -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {}
    for block in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(STORAGE), "exec"), namespace)
        assert printed.getvalue().splitlines() == _promised(block)

"""Examples in docstrings run as written."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path
from typing import Any

import sessionstore


def test_package_docstring_example_runs() -> None:
    """The quick start in sessionstore's docstring works."""
    result = doctest.testmod(sessionstore, verbose=False)

    assert result.attempted >= 5
    assert result.failed == 0


def test_readme_python_example_runs() -> None:
    """The README's usage example runs as written on the embedded default."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)

    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], "README.md", "exec"), namespace)
    store, session = namespace["store"], namespace["session"]
    try:
        lines = printed.getvalue().splitlines()
        # What the example promises: the retry was deduplicated (two events, not three), and the
        # verified read prints each event's seq, type and token count (none for the start event).
        assert lines[0] == "1 session_started None"
        assert re.fullmatch(r"2 message_appended [1-9]\d*", lines[1])
        assert len(lines) == 2
        assert namespace["result"].seqs == (2,)
        assert store.last_seq(session.id) == 2
    finally:
        store.close()

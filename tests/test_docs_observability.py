"""docs/storage.md "Observability" runs as written: its Python blocks in order, in a fresh
interpreter (the OpenTelemetry example installs the process's one global tracer provider),
printing what the text says they print."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

STORAGE = Path(__file__).parent.parent / "docs" / "storage.md"

_RUNNER = """
import contextlib, io, json, sys
outputs = []
namespace = {}
for block in json.loads(sys.stdin.read()):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "docs/storage.md", "exec"), namespace)
    outputs.append(printed.getvalue())
outputs.append(namespace["record"].getMessage())
print(json.dumps(outputs))
"""


def _section() -> str:
    return STORAGE.read_text().split("\n## Observability\n", 1)[1].split("\n## ", 1)[0]


def test_the_observability_examples_print_what_the_text_says() -> None:
    section = _section()
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    promised = [re.match(r"```\n\nprints `([^`]*)`", section.split(b, 1)[1]) for b in blocks]
    message = re.search(r"`record.getMessage\(\)` is\n`([^`]*)`", section)

    done = subprocess.run(
        [sys.executable, "-c", _RUNNER], input=json.dumps(blocks), capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    *outputs, logged = json.loads(done.stdout)
    assert len(blocks) == 2
    assert all(p is not None for p in promised)
    assert [o.strip() for o in outputs] == [p[1] for p in promised if p is not None]
    assert message is not None and logged == message[1]
    assert done.stderr == ""  # the examples' logging went to their handler only

"""docs/quickstart.md runs as written: its Python blocks and its `sessionstore` command lines, in order."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest

from sessionstore.cli import main

QUICKSTART = Path(__file__).parent.parent / "docs" / "quickstart.md"


def _blocks() -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in document order."""
    return re.findall(r"```(\w*)\n(.*?)```", QUICKSTART.read_text(), flags=re.DOTALL)


def test_quickstart_runs_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In an empty folder and SESSIONSTORE_HOME (conftest): every block runs; every command exits 0."""
    monkeypatch.chdir(tmp_path)
    ran_python = ran_commands = 0
    for language, body in _blocks():
        if language == "python":
            exec(compile(body, str(QUICKSTART), "exec"), {"__name__": "quickstart"})
            ran_python += 1
        elif language == "bash":
            for line in body.splitlines():
                if not line.startswith("sessionstore "):
                    continue  # the install line: the environment running this test is that install
                out = io.StringIO()
                code = main(shlex.split(line)[1:], out=out)
                assert code == 0, f"`{line}` exited {code}:\n{out.getvalue()}{capsys.readouterr().err}"
                ran_commands += 1

    assert ran_python >= 3
    assert ran_commands >= 10
    # "the export gives back the lines Claude Code wrote"
    written = (tmp_path / "0f8e9c1a-4b2d-4c3e-9f10-5a6b7c8d9e01.jsonl").read_text().splitlines()
    exported = (tmp_path / "roundtrip.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in exported] == [json.loads(line) for line in written]


def test_quickstart_outputs_are_as_described(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's claims: the budget stage persisted the result; diff 7 9 shows the preview, 9 11
    the final answer."""
    monkeypatch.chdir(tmp_path)
    python = [body for language, body in _blocks() if language == "python"]
    exec(compile(python[0], str(QUICKSTART), "exec"), {"__name__": "quickstart"})
    out = io.StringIO()

    assert main(["audit", "quickstart", "--json"], out=out) == 0
    assert "tool_result_persisted" in out.getvalue()
    out = io.StringIO()
    assert main(["diff", "quickstart", "7", "9"], out=out) == 0
    assert '+     "content": "<persisted-output>' in out.getvalue()
    out = io.StringIO()
    assert main(["diff", "quickstart", "9", "11"], out=out) == 0
    assert '+     "text": "All 2,000 tests pass."' in out.getvalue()


def test_the_install_step_activates_the_virtualenv() -> None:
    """Every later `sessionstore` line needs it on PATH: the install block activates the venv."""
    language, install = _blocks()[0]

    assert language == "bash"
    assert install.splitlines()[-1] == "source .venv/bin/activate"

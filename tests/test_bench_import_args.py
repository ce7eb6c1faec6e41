"""bench/import.py refuses an option that would be silently ignored."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parent.parent / "bench" / "import.py"


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_import", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_tokens_off_without_large_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--tokens-off`` changes only the ``--large`` imports: alone it is an error, not a run
    that measures something other than what was asked."""
    bench = _bench(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        bench.parse_args(["--tokens-off", "--quick"])
    assert exited.value.code == 2
    assert "--tokens-off applies to the --large imports only" in capsys.readouterr().err
    assert bench.parse_args(["--tokens-off", "--large", "1", "1"]).tokens_off

"""The package facade: everything public is exported, sorted, and importable."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import sessionstore

ROOT = Path(__file__).resolve().parent.parent
FACADE_LIMIT = 50


def _documented_facade() -> dict[str, list[str]]:
    """The facade drawn in docs/architecture.md ("The facade"): layer -> the names it gives."""
    section = (ROOT / "docs" / "architecture.md").read_text().split("## The facade", 1)[1]
    block = re.search(r"```\n(.*?)```", section, flags=re.DOTALL)
    assert block, "docs/architecture.md: the facade section has no list"
    layers = (line.split(":", 1) for line in block.group(1).splitlines())
    return {layer.strip(): names.split() for layer, names in layers}


def _moved_out_of_the_facade() -> list[tuple[str, str]]:
    """(name, module) rows of CHANGELOG.md's table of names that left the facade."""
    section = (ROOT / "CHANGELOG.md").read_text().split("### Removed from the facade: ", 1)[1]
    section = section.split("\n#", 1)[0]
    return re.findall(r"^\| `(\w+)` \| `(sessionstore\.\w+)` \|$", section, flags=re.MULTILINE)


def test_all_is_sorted_and_complete() -> None:
    """__all__ lists exactly the public names, in sorted order."""
    public = {
        name
        for name in dir(sessionstore)  # the facade imports its layers lazily: dir() lists them all
        if not name.startswith("_") and not isinstance(getattr(sessionstore, name), types.ModuleType)
    }
    public -= {"annotations"}  # the __future__ import

    assert sessionstore.__all__ == sorted(sessionstore.__all__)
    assert set(sessionstore.__all__) == public


def test_every_error_shares_one_root() -> None:
    """Callers can catch everything sessionstore raises with one class."""
    errors = [
        getattr(sessionstore, name) for name in sessionstore.__all__ if name.endswith(("Error", "Violation"))
    ]

    assert errors
    assert all(issubclass(error, sessionstore.SessionStoreError) for error in errors)
    assert issubclass(sessionstore.ValidationError, ValueError)
    assert issubclass(sessionstore.SessionNotFoundError, LookupError)


def test_the_facade_is_the_documented_list() -> None:
    """sessionstore.__all__ is exactly docs/architecture.md's list, each name from the layer it names."""
    documented = _documented_facade()
    names = [name for layer in documented.values() for name in layer]

    assert sorted(names) == sessionstore.__all__
    assert len(names) <= FACADE_LIMIT
    for layer, layer_names in documented.items():
        package = importlib.import_module(f"sessionstore.{layer}")
        for name in layer_names:
            assert name in package.__all__, f"{name} is not exported by sessionstore.{layer}"
            assert getattr(sessionstore, name) is getattr(package, name)


MOVED = _moved_out_of_the_facade()


def test_the_changelog_lists_the_names_that_left_the_facade() -> None:
    """The move table is there and names no facade name twice."""
    names = [name for name, _ in MOVED]

    assert len(names) == len(set(names)) > 100
    assert not set(names) & set(sessionstore.__all__)


@pytest.mark.parametrize(("name", "module"), MOVED, ids=[name for name, _ in MOVED])
def test_a_name_that_left_the_facade_is_exported_by_its_layer(name: str, module: str) -> None:
    """Code that used sessionstore.X imports X from the layer CHANGELOG.md names."""
    package = importlib.import_module(module)

    assert name in package.__all__
    assert getattr(package, name) is not None
    assert not hasattr(sessionstore, name)


LAYERS = ["agent", "audit", "checkpoints", "claude_code", "events", "pipeline", "projections", "store"]


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_package_exports_a_sorted_complete_list(layer: str) -> None:
    """A layer's __all__ is sorted, and names exactly what the package offers (every name resolves)."""
    package = importlib.import_module(f"sessionstore.{layer}")
    offered = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and value is not getattr(typing, name, None)  # typing names the package itself uses
    } - {"annotations"}

    assert package.__all__ == sorted(package.__all__)
    assert set(package.__all__) == offered


def test_an_unknown_name_is_an_attribute_error_in_a_fresh_interpreter() -> None:
    """``hasattr``/``getattr`` with a default work right after ``import sessionstore``, before any
    layer is loaded (the facade's lazy lookup once recursed until RecursionError there), and an
    old error name still resolves with its warning."""
    script = (
        "import sys, warnings, sessionstore\n"
        "assert 'sessionstore.errors' not in sys.modules\n"
        "assert not hasattr(sessionstore, 'NoSuchName')\n"
        "assert getattr(sessionstore, 'NoSuchName', 7) == 7\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    assert sessionstore.SummaryFailed is sessionstore.errors.SummaryFailedError\n"
        "assert [w.category for w in caught] == [DeprecationWarning]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("layer", [*(name for name in LAYERS if name != "audit"), "errors", "bridges"])
def test_a_layer_is_an_attribute_right_after_import_sessionstore(layer: str) -> None:
    """``import sessionstore`` then ``sessionstore.store.create_engine_for_url`` (as docs/storage.md
    writes it) or ``except sessionstore.errors.X``: the layer loads on first use, as the facade's
    names do (it was an AttributeError until something else had imported the layer; ``errors``
    failed the first time and resolved the second). ``sessionstore.audit`` stays the function."""
    script = (
        "import sys, types, sessionstore\n"
        f"assert 'sessionstore.{layer}' not in sys.modules\n"
        f"module = sessionstore.{layer}\n"
        f"assert module is sys.modules['sessionstore.{layer}'], module\n"
        "assert callable(sessionstore.audit) and not isinstance(sessionstore.audit, types.ModuleType)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr[-2000:]


def test_a_layer_whose_extra_is_missing_is_no_attribute() -> None:
    """Without the serve extra, ``hasattr(sessionstore, "serve")`` is False and ``getattr`` with
    a default returns it (ModuleNotFoundError escaped both); importing it still names the extra."""
    script = (
        "import sys\n"
        "sys.modules['fastapi'] = None  # as if the serve extra were not installed\n"
        "import sessionstore\n"
        "assert not hasattr(sessionstore, 'serve')\n"
        "assert getattr(sessionstore, 'serve', 7) == 7\n"
        "assert hasattr(sessionstore, 'store')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr[-2000:]

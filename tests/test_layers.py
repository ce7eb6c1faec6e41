"""The package's folders are its layers, and no module imports from a layer above its own.

errors <- _paths <- events <- store <- projections <- pipeline <- agent, checkpoints, claude_code,
audit <- bridges <- serve <- cli, and the facade (sessionstore/__init__.py) above them all. Sibling
layers (agent, checkpoints, claude_code, audit) do not import each other.
docs/architecture.md draws the same picture.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sessionstore"

RANK = {
    "errors": 0,
    "_paths": 1,
    "_telemetry": 1,  # logging and spans: imports nothing of the package
    "events": 2,
    "store": 3,
    "projections": 4,
    "pipeline": 5,
    "agent": 6,
    "checkpoints": 6,
    "claude_code": 6,
    "audit": 6,
    # Other frameworks' session backends; each imports its framework lazily. Above claude_code:
    # the Claude Agent SDK's store mirrors Claude Code transcripts through it.
    "bridges": 7,
    "serve": 8,  # the HTTP JSON API and viewer: a client of the layers, behind the serve extra
    "cli": 9,  # the command line, which starts the server too
    "__init__": 10,  # the facade
    "__main__": 10,  # python -m sessionstore: runs the cli
}


def _layer_of(module: str) -> str:
    """The layer of a dotted module inside the package ('sessionstore.store._sql' -> 'store')."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path) -> str:
    parts = ["sessionstore", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of a sessionstore module in ``source``."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "sessionstore" or target.startswith("sessionstore."):
                # `from .x import y` may import the submodule y: name it when it is one.
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    place = PACKAGE.parent / Path(*sub.split("."))
                    is_module = place.with_suffix(".py").exists() or (place / "__init__.py").exists()
                    found.append((node.lineno, sub if is_module else target))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("sessionstore")]
    return found


def _package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_migrations" not in p.parts)


def test_every_module_belongs_to_a_layer() -> None:
    """A new top-level module or folder must be placed in the layer order (and in the docs)."""
    homes = {_layer_of(_module_of(path)) for path in _package_files()}

    assert homes <= set(RANK), sorted(homes - set(RANK))


def _violations(source: str, module: str, is_package: bool = False) -> list[str]:
    own = _layer_of(module)
    wrong = []
    for line, target in _imports(source, module, is_package):
        layer = _layer_of(target)
        if layer != own and RANK[layer] >= RANK[own]:
            wrong.append(f"{module}:{line} imports {target} ({layer} is not below {own})")
    return wrong


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_from_a_layer_above_or_beside_it(path: Path) -> None:
    """errors <- _paths <- events <- store <- projections <- pipeline <- the siblings (agent,
    checkpoints, claude_code, audit) <- bridges <- serve <- cli."""
    assert _violations(path.read_text(), _module_of(path), path.name == "__init__.py") == []


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ("from ..pipeline import Pipeline", ["sessionstore.pipeline"]),
        ("from ..pipeline._collapse import collapse", ["sessionstore.pipeline._collapse"]),
        ("from .. import Session", ["sessionstore"]),
        ("from ..agent import Conversation", ["sessionstore.agent"]),
        ("import sessionstore.cli", ["sessionstore.cli"]),
        ("from ..events import MessageAppended\nfrom ._sql import SqlSessionStore", []),
    ],
)
def test_the_checker_reports_upward_imports(source: str, reported: list[str]) -> None:
    """A store module importing a higher layer (or the facade) is reported; a lower one is not."""
    wrong = _violations(source, "sessionstore.store._example")

    assert [entry.split(" imports ")[1].split(" (")[0] for entry in wrong] == reported


def test_sibling_layers_do_not_import_each_other() -> None:
    """audit, agent, checkpoints and claude_code sit side by side: none may import another."""
    assert _violations("from ..agent import Conversation", "sessionstore.audit._example") != []
    assert _violations("from ..checkpoints import FileHistory", "sessionstore.agent._example") != []
    assert _violations("from ..agent import Conversation", "sessionstore.checkpoints._example") != []
    assert _violations("from ..audit import audit", "sessionstore.claude_code._example") != []
    # The bridges build on claude_code (the Claude Agent SDK's store), never the other way.
    assert _violations("from ..claude_code import TranscriptMirror", "sessionstore.bridges.x._example") == []
    assert _violations("from ..bridges import x", "sessionstore.claude_code._example") != []


def _private_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports in ``source`` of a private module (``_x``) of a layer other than the module's own."""
    own = _layer_of(module)
    wrong = []
    for line, target in _imports(source, module, is_package):
        private = any(part.startswith("_") for part in target.split(".")[1:])
        if private and _layer_of(target) != own:
            wrong.append(f"{module}:{line} imports {target}")
    return wrong


@pytest.mark.parametrize(
    "path",
    sorted([*(PACKAGE / "cli").glob("*.py"), *(PACKAGE / "serve").glob("*.py")]),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_cli_uses_only_public_names(path: Path) -> None:
    """The command line and the server are clients of the library: they import the layer
    packages, never their private modules, so what they need is part of the public API."""
    assert _private_imports(path.read_text(), _module_of(path), path.name == "__init__.py") == []


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ("from ..pipeline._collapse import collapse", True),
        ("from ..store import _migrate", True),
        ("from .._paths import read_regular_file", True),
        ("import sessionstore.audit._verify", True),
        ("from ..pipeline import collapse", False),
        ("from ._render import render_audit", False),
        ("from ..errors import EXIT_OK", False),
    ],
)
def test_the_private_import_checker(source: str, reported: bool) -> None:
    """A cli module importing another layer's private module is reported; its own modules are not."""
    assert bool(_private_imports(source, "sessionstore.cli._example")) is reported


def _terminal_uses(source: str) -> list[str]:
    """Calls of print, and imports of argparse or rich, in ``source``: what only the CLI may do."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print()")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            terminal = [m for m in modules if m.split(".")[0] in ("argparse", "rich")]
            found += [f"{node.lineno}: import {m}" for m in terminal]
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in _package_files() if _layer_of(_module_of(p)) not in ("cli", "__main__")],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_library_does_not_print(path: Path) -> None:
    """Only the command line prints, parses arguments or draws tables; the layers return data."""
    assert _terminal_uses(path.read_text()) == []


def test_the_terminal_checker() -> None:
    """print(), argparse and rich are reported; a method named print or a string is not."""
    source = "import argparse\nfrom rich.table import Table\nprint('x')\nconsole.print(t)\ns = 'print(1)'"

    assert _terminal_uses(source) == ["1: import argparse", "2: import rich.table", "3: print()"]

"""The package's folders are its layers, and no module imports from a layer above its own.

errors <- _paths <- events <- store <- projections <- pipeline <- agent, checkpoints, claude_code,
audit <- bridges <- serve <- cli, and the facade (sessionstore/__init__.py) above them all. Sibling
layers (agent, checkpoints, claude_code, audit) do not import each other.
docs/architecture.md draws the same picture.
"""

from __future__ import annotations

import ast
import importlib
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


def _import_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` in ``package`` reads from."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of a sessionstore module in ``source``."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
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


def _back_doors(source: str, module: str, is_package: bool = False) -> list[tuple[int, str, str]]:
    """(line, private module, name) of every name ``source`` imports from a private module (``_x``)
    inside another layer ('from ..store._contract import check_int' -> 'store._contract', 'check_int').
    A private module imported whole is named '*'. The layers ``_paths`` and ``_telemetry`` themselves
    are not private modules of a layer: only what lies below a layer package counts."""
    own = _layer_of(module)
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str, str]] = []

    def add(line: int, target: str, name: str) -> None:
        parts = target.split(".")
        if _layer_of(target) != own and any(part.startswith("_") for part in parts[2:]):
            found.append((line, ".".join(parts[1:]), name))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
            if not target.startswith("sessionstore."):
                continue
            for alias in node.names:
                place = PACKAGE.parent / Path(*f"{target}.{alias.name}".split("."))
                if place.with_suffix(".py").exists() or (place / "__init__.py").exists():
                    add(node.lineno, f"{target}.{alias.name}", "*")
                else:
                    add(node.lineno, target, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sessionstore."):
                    add(node.lineno, alias.name, "*")
    return found


# The imports of another layer's private module that remain, by the private name and the modules
# importing it. Every one is a name its layer package does not export (yet): everything a layer
# package exports is imported from the package. Exporting a name (and importing it from the package)
# takes it off this list; a name missing here fails the test below, so no new back door opens.
BACK_DOORS: dict[str, tuple[str, ...]] = {
    # events: the JSON limits and codec the store and the Claude Code import share
    "events._base.MAX_JSON_DEPTH": ("claude_code._import", "claude_code._lines", "store._contract"),
    "events._base.decode_event": ("store._contract",),
    "events._base.encode_event": ("store._sql",),
    "events._base.json_problem": ("claude_code._import", "claude_code._lines", "store._sql"),
    "events._base.nested_deeper_than": ("store._contract", "store._sql"),
    "events._context.REVERTIBLE_TYPES": ("pipeline._revert",),
    # pipeline: what the audit and the Claude Code export recompute of a stage's decision
    "pipeline._collapse.collapsed_messages": ("audit._audit",),
    "pipeline._collapse.shown_messages": ("audit._audit",),
    "pipeline._compaction.MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES": ("audit._audit",),
    "pipeline._post_compact.kept_message_uuids": ("claude_code._export",),
    "pipeline._summarizers.parse_prompt_too_long": ("agent._conversation",),
    # projections: the view's internals the stages and the audit measure against
    "projections._api_context.COLLAPSE_PREFIX": ("audit._tokens",),
    "projections._api_context.COMPACT_SUMMARY_PREFIX": (
        "audit._tokens",
        "claude_code._export",
        "pipeline._compaction",
    ),
    "projections._api_context.collapse_span": ("pipeline._collapse",),
    "projections._api_context.collapse_span_tokens": ("pipeline._collapse",),
    "projections._api_context.committed_spans": (
        "pipeline._collapse",
        "pipeline._precompute",
        "pipeline._snip",
    ),
    "projections._api_context.freed_per_message": ("pipeline._snip",),
    "projections._api_context.leading_results": (
        "pipeline._collapse",
        "pipeline._compaction",
        "pipeline._precompute",
        "pipeline._snip",
    ),
    "projections._api_context.view_size": ("pipeline._compaction", "pipeline._precompute"),
    "projections._api_records.ViewAtChange": ("audit._audit",),
    "projections._base.read_pages": (
        "audit._blobs",
        "audit._recount",
        "claude_code._export",
        "claude_code._sent",
    ),
    "projections._base.rebuild": ("audit._verify", "checkpoints._history"),
    "projections._base.save_snapshot": ("checkpoints._history",),
    "projections._digest.AUDITED": ("audit._audit",),
    "projections._digest.CONTEXT_OPERATIONS": ("audit._tokens",),
    "projections._session.NO_TOKENIZER": ("audit._verify",),
    # projections: the wrong-object checks at the entry points
    "projections._session.check_session": (
        "agent._conversation",
        "audit._audit",
        "checkpoints._history",
        "claude_code._sent",
        "pipeline._collapse",
        "pipeline._compaction",
        "pipeline._compare",
        "pipeline._listings",
        "pipeline._microcompact",
        "pipeline._revert",
        "pipeline._snip",
        "pipeline._stage",
    ),
    "projections._session.check_source": ("audit._audit", "audit._tokens"),
    "projections._snapshots.take_snapshots": ("claude_code._import",),
    # store: the argument checks every layer's entry points share
    "store._contract.check_int": (
        "audit._audit",
        "audit._verify",
        "pipeline._compaction",
        "pipeline._microcompact",
        "pipeline._snip",
        "projections._base",
        "projections._session",
    ),
    "store._contract.check_lookup": ("pipeline._revert",),
    "store._contract.check_number": (
        "claude_code._follow",
        "pipeline._compaction",
        "pipeline._microcompact",
        "projections._session",
    ),
    "store._contract.check_owner_key": (
        "bridges.adk._service",
        "bridges.claude_agent_sdk._store",
        "bridges.openai_agents._session",
        "claude_code._import",
        "claude_code._mirror",
    ),
    "store._contract.check_session_id": (
        "checkpoints._history",
        "claude_code._import",
        "claude_code._mirror",
    ),
    "store._contract.check_store": (
        "audit._audit",
        "audit._verify",
        "claude_code._export",
        "claude_code._follow",
        "claude_code._import",
        "projections._session",
    ),
    "store._contract.check_waiting": ("claude_code._follow",),
}


def _layer_files() -> list[Path]:
    """The package's modules but the command line and the server, which import no private module of
    another layer at all (test_the_cli_uses_only_public_names)."""
    return [p for p in _package_files() if _layer_of(_module_of(p)) not in ("cli", "serve")]


def test_layers_import_other_layers_through_their_packages() -> None:
    """A layer imports another layer's names from its package (`from ..store import ANY`), never from
    a private module inside it (`from ..store._contract import ANY`), but for BACK_DOORS."""
    found: dict[str, set[str]] = {}
    for path in _layer_files():
        module = _module_of(path)
        for _, private, name in _back_doors(path.read_text(), module, path.name == "__init__.py"):
            found.setdefault(f"{private}.{name}", set()).add(module.removeprefix("sessionstore."))
    allowed = {name: set(modules) for name, modules in BACK_DOORS.items()}
    print(f"{sum(map(len, allowed.values()))} imports of {len(allowed)} private names remain allowed")

    new = {name: sorted(modules - allowed.get(name, set())) for name, modules in found.items()}
    stale = {name: sorted(modules - found.get(name, set())) for name, modules in allowed.items()}
    assert {name: modules for name, modules in new.items() if modules} == {}
    # An entry no longer needed (the name is exported now, or no longer imported) leaves the list.
    assert {name: modules for name, modules in stale.items() if modules} == {}


def test_every_allowed_back_door_is_a_name_its_package_does_not_export() -> None:
    """What a layer package exports is imported from the package: it never needs a back door."""
    exported = []
    for name in BACK_DOORS:
        layer, attribute = name.partition(".")[0], name.rpartition(".")[2]
        if attribute in importlib.import_module(f"sessionstore.{layer}").__all__:
            exported.append(name)

    assert exported == []


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        (
            "from ..store._contract import ANY, check_int",
            [("store._contract", "ANY"), ("store._contract", "check_int")],
        ),
        ("from ..store import _migrate", [("store._migrate", "*")]),
        ("import sessionstore.events._base", [("events._base", "*")]),
        ("from sessionstore.store._contract import ANY", [("store._contract", "ANY")]),
        ("def f():\n    from ..events._base import Event", [("events._base", "Event")]),
        ("from ..store import ANY, check_store", []),
        ("from ._api_context import view_size", []),
        ("from .._telemetry import span\nfrom .._paths import read_regular_file", []),
        ("from ..errors import ValidationError", []),
    ],
)
def test_the_back_door_checker(source: str, reported: list[tuple[str, str]]) -> None:
    """A pipeline module importing another layer's private module is reported, name by name
    (inside a function too); a layer package, its own modules, _paths and _telemetry are not."""
    found = _back_doors(source, "sessionstore.pipeline._example")

    assert [(private, name) for _, private, name in found] == reported

"""Every error lives in sessionstore.errors, and the tree drawn in its docstring is the real one.

A user reads the drawing to decide what to catch; a class missing from it, drawn under the wrong
parent, or defined in another module would send them to the wrong ``except``.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

import sessionstore
from sessionstore import errors

#: A drawn node: the tree glyph, the class name, optional extra bases in parentheses.
_NODE = re.compile(
    r"^(?P<indent>(?:│   |    )*)(?:├── |└── )?(?P<name>[A-Z]\w*)(?: \((?P<also>[\w, ]+)\))?(?:\s|$)"
)


@dataclass(frozen=True)
class DrawnNode:
    name: str
    parent: str | None
    also: tuple[str, ...]  # the non-sessionstore bases drawn in parentheses


def drawn_tree(docstring: str) -> list[DrawnNode]:
    """The nodes of the ``The tree::`` block, each with the node drawn above it as its parent."""
    block = docstring.split("The tree::", 1)[1].split("\n\n", 2)[1]
    nodes: list[DrawnNode] = []
    path: list[str] = []  # the ancestors of the next node, by depth
    for line in block.splitlines():
        line = line[4:]  # the literal block's indentation
        match = _NODE.match(line)
        if match is None:
            continue  # a continuation line of the previous node's description
        depth = len(match["indent"]) // 4 + (0 if line.startswith(match["name"]) else 1)
        del path[depth:]
        also = tuple(b.strip() for b in match["also"].split(",")) if match["also"] else ()
        nodes.append(DrawnNode(match["name"], path[-1] if path else None, also))
        path.append(match["name"])
    return nodes


def _error_classes_in_errors_module() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }


def _real_parent(cls: type[BaseException]) -> tuple[str | None, tuple[str, ...]]:
    """The sessionstore base a class is drawn under, and its other (builtin) bases."""
    ours = [b for b in cls.__bases__ if issubclass(b, errors.SessionStoreError)]
    others = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, errors.SessionStoreError))
    if not ours:
        return None, ()
    return ours[0].__name__, others


def test_the_parser_reads_depth_and_extra_bases() -> None:
    """The test's own reader of the drawing: nesting, '└──' last children and '(ValueError)'."""
    sample = """x

The tree::

    Root
    ├── A (ValueError)         text
    │   └── B                  text
    │                          more text
    └── C
        └── D (LookupError, KeyError)
"""

    assert drawn_tree(sample) == [
        DrawnNode("Root", None, ()),
        DrawnNode("A", "Root", ("ValueError",)),
        DrawnNode("B", "A", ()),
        DrawnNode("C", "Root", ()),
        DrawnNode("D", "C", ("LookupError", "KeyError")),
    ]


def test_every_error_is_drawn_once_under_its_real_parent() -> None:
    """Each exception class in errors.py appears exactly once, under the class it subclasses."""
    assert errors.__doc__ is not None
    nodes = drawn_tree(errors.__doc__)
    names = [node.name for node in nodes]
    classes = _error_classes_in_errors_module()

    assert sorted(names) == sorted(set(names)), "a class is drawn twice"
    assert sorted(names) == sorted(classes)
    assert {node.name: (node.parent, node.also) for node in nodes} == {
        name: _real_parent(cls) for name, cls in classes.items()
    }


def test_every_sessionstore_error_is_defined_in_errors_module() -> None:
    """No layer defines its own error class: they all live (and are drawn) in sessionstore.errors."""
    for module in pkgutil.walk_packages(sessionstore.__path__, "sessionstore."):
        if not module.name.endswith(".__main__"):  # importing it would run the command line
            importlib.import_module(module.name)

    def subclasses(cls: type[BaseException]) -> set[type[BaseException]]:
        found = set(cls.__subclasses__())
        return found.union(*(subclasses(sub) for sub in found))

    elsewhere = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in subclasses(errors.SessionStoreError)
        if cls.__module__ != errors.__name__ and cls.__module__.startswith("sessionstore")
    )

    assert elsewhere == []


@dataclass(frozen=True)
class _Stage:
    """A pipeline stage's report as ``BlockingLimitError`` reads it (``errors.StageOutcome``)."""

    stage: str
    tokens_freed: int


def _argument(annotation: object, name: str) -> object:
    """A real value of the annotated type, distinct per parameter so a swapped field shows."""
    origin, parts = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return _argument(next(part for part in parts if part is not type(None)), name)
    plain: dict[object, object] = {
        str: f"{name}-value",
        int: 7 + len(name),
        float: 1.5 + len(name),
        bool: True,
        errors.OperationalError: errors.OperationalError("connection refused", transient=True),
        BaseException: OSError("disk full"),
        errors.StageOutcome: _Stage("snip", 120),
    }
    if annotation in plain:
        return plain[annotation]
    if origin is tuple:
        return tuple(_argument(part, f"{name}{i}") for i, part in enumerate(parts))
    if origin in (list, Sequence):
        return [_argument(parts[0], f"{name}{i}") for i in range(2)]
    if origin is Mapping:
        return {_argument(parts[0], f"{name}{i}"): _argument(parts[1], f"{name}{i}") for i in range(2)}
    raise AssertionError(f"no test value for a {annotation!r} ({name}): teach _argument the type")


def _built(cls: type[BaseException]) -> BaseException:
    """``cls`` made through its real constructor, every parameter given (defaults too)."""
    hints = typing.get_type_hints(cls.__init__, vars(errors))
    positional: list[object] = []
    keywords: dict[str, object] = {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind is parameter.VAR_POSITIONAL:
            positional.append(f"{cls.__name__} went wrong")  # Exception's own *args: the message
        elif parameter.kind is parameter.KEYWORD_ONLY:
            keywords[parameter.name] = _argument(hints[parameter.name], parameter.name)
        elif parameter.kind is not parameter.VAR_KEYWORD:
            positional.append(_argument(hints[parameter.name], parameter.name))
    return cls(*positional, **keywords)


def _fields(error: BaseException) -> dict[str, object]:
    """What a caller reads of an error: its public attributes, the builtin ones included."""
    return {
        name: getattr(error, name)
        for name in dir(error)
        if not name.startswith("_") and not callable(getattr(error, name))
    }


@pytest.mark.parametrize("name", sorted(_error_classes_in_errors_module()))
def test_every_error_survives_a_pickle_round_trip(name: str) -> None:
    """A worker process (multiprocessing, Celery, Ray) hands the caller the store's own error:
    the same type, message and fields, not a TypeError from a constructor unpickling cannot call."""
    error = _built(_error_classes_in_errors_module()[name])
    error.add_note("raised in a worker")

    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert _fields(copy) == _fields(error)
    assert copy.__notes__ == ["raised in a worker"]

"""A public call given the wrong object where a ``Session`` or a ``SessionStore`` belongs (a str,
a store for a session, a session for a store, an async store for a sync one) raises
``ValidationError`` naming the argument and the type it expects, before it reads or writes.

The entry points are found, not listed: every callable of a layer package's ``__all__`` with a
parameter annotated ``Session``, ``SessionStore`` or ``Session | SessionStore``, so a new one is
covered the day it is exported. The checks run first, so the other required arguments are
sentinels (``object()``): a call that got past its check would fail on them with some other
error, or not at all, and the test would say so.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore import Session, SessionStore, ValidationError, open_async_store, open_store
from sessionstore.audit import all_heads, audit, verify_all

from .test_public_api import LAYERS

#: The packages whose ``__all__`` is searched (the facade re-exports most of their names).
PACKAGES = ["sessionstore", *(f"sessionstore.{layer}" for layer in LAYERS)]
#: The annotations of the parameters checked, and what each must be.
KINDS = {"Session": "Session", "SessionStore": "SessionStore", "Session | SessionStore": "either"}


def _entry_points() -> list[tuple[str, Any, str, str]]:
    """(qualified name, callable, parameter, kind) of every public call taking a Session or a store."""
    found: dict[int, tuple[str, Any, str, str]] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj) or id(obj) in found:
                continue
            try:
                parameters = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters
            except (TypeError, ValueError):  # a builtin without a signature
                continue
            for parameter in parameters.values():
                kind = KINDS.get(str(parameter.annotation))
                if kind is not None:
                    found[id(obj)] = (f"{module.__name__}.{name}", obj, parameter.name, kind)
                    break
    return sorted(found.values(), key=lambda entry: entry[0])


ENTRY_POINTS = _entry_points()


def _call(obj: Any, parameter: str, value: object) -> object:
    """``obj`` called with ``value`` for ``parameter`` and a sentinel for every other required one
    (awaited when it is a coroutine function)."""
    signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for name, p in signature.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        given = value if name == parameter else object()
        if name != parameter and p.default is not p.empty:
            continue
        if p.kind is p.KEYWORD_ONLY:
            kwargs[name] = given
        else:
            args.append(given)
    result = obj(*args, **kwargs)
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


@pytest.fixture
def store() -> Iterator[SessionStore]:
    """A real in-memory store holding one session, ``s1``."""
    opened = open_store(":memory:")
    opened.create_session("s1")
    yield opened
    opened.close()


def test_the_entry_points_are_found() -> None:
    """The search finds the calls it is for, sync and class alike (it is not vacuous)."""
    names = {name.rpartition(".")[2] for name, *_ in ENTRY_POINTS}

    assert {"Session", "SessionLog", "verify_all", "all_heads", "audit", "ClaudeCodeFollower"} <= names
    assert len(ENTRY_POINTS) >= 46


@pytest.mark.parametrize(("name", "obj", "parameter", "kind"), ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_a_str_is_refused_naming_the_parameter(name: str, obj: Any, parameter: str, kind: str) -> None:
    """A str where a Session or a store belongs is a ValidationError naming the argument and the type."""
    with pytest.raises(ValidationError) as caught:
        _call(obj, parameter, "s1")

    expected = {"Session": "sessionstore.Session", "SessionStore": "sessionstore.SessionStore"}
    wanted = expected.get(kind, "sessionstore.Session or a sessionstore.SessionStore")
    assert str(caught.value) == f"{parameter} must be a {wanted}, not str"
    assert caught.value.field == parameter


@pytest.mark.parametrize(
    ("name", "obj", "parameter", "kind"),
    [e for e in ENTRY_POINTS if e[3] != "either"],
    ids=[e[0] for e in ENTRY_POINTS if e[3] != "either"],
)
def test_the_other_kind_of_object_is_refused_before_anything_is_written(
    store: SessionStore, name: str, obj: Any, parameter: str, kind: str
) -> None:
    """A store where a Session belongs, or a Session where a store belongs, is refused with a hint
    saying what to pass, and the store is left as it was."""
    session = Session(store, "s1")
    wrong: object = store if kind == "Session" else session
    before = (store.max_position(), [info.id for info in store.list_sessions()])

    with pytest.raises(ValidationError) as caught:
        _call(obj, parameter, wrong)

    message = str(caught.value)
    assert caught.value.field == parameter
    if kind == "Session":
        assert message.startswith(f"{parameter} must be a sessionstore.Session, not SQLiteSessionStore")
        assert "sessionstore.Session(store, session_id)" in message
    else:
        assert message == f"{parameter} must be a sessionstore.SessionStore, not Session (pass its .store)"
    assert (store.max_position(), [info.id for info in store.list_sessions()]) == before


@pytest.mark.parametrize(
    ("name", "obj", "parameter", "kind"),
    [e for e in ENTRY_POINTS if e[3] != "Session"],
    ids=[e[0] for e in ENTRY_POINTS if e[3] != "Session"],
)
def test_an_async_store_is_refused_saying_how_to_get_a_sync_one(
    name: str, obj: Any, parameter: str, kind: str
) -> None:
    """An AsyncSessionStore where a sync store is needed says so, and names open_store and run_sync."""

    async def refused() -> str:
        async_store = await open_async_store(":memory:")
        try:
            with pytest.raises(ValidationError) as caught:
                _call(obj, parameter, async_store)
            return str(caught.value)
        finally:
            await async_store.close()

    message = asyncio.run(refused())

    assert message.startswith(f"{parameter} must be a sessionstore.SessionStore, not AsyncSessionStore: ")
    assert "sessionstore.open_store" in message
    assert "run_sync" in message


def test_the_right_objects_still_pass(store: SessionStore) -> None:
    """The checks refuse only the wrong type: a store and a Session are taken as before."""
    session = Session(store, "s1")

    assert [head.session_id for head in all_heads(store)] == ["s1"]
    assert [v.chain.session_id for v in verify_all(store)] == ["s1"]
    assert audit(session).session_id == "s1"
    assert audit(store, "s1").session_id == "s1"

"""The event and projection registries are complete without import side effects.

Reading a log must not depend on which other modules some caller happened to import first: the
events package imports its whole catalogue, and the projections verify checks are one public list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import sessionstore.projections
from sessionstore.projections import Projection

REPO = Path(__file__).resolve().parent.parent

# Run alone in a fresh interpreter: what `import sessionstore.events` registers, then every event
# class any module of the package defines (imported afterwards, so they cannot have helped).
_CATALOGUE_PROBE = """
import importlib, json, pkgutil
import sessionstore.events
from sessionstore.events._base import _EVENT_TYPES, Event
registered = dict(_EVENT_TYPES)
import sessionstore
for module in pkgutil.walk_packages(sessionstore.__path__, "sessionstore."):
    if "_migrations" not in module.name:
        importlib.import_module(module.name)
def every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from every(sub)
ours = [c for c in every(Event) if c.__module__.startswith("sessionstore.")]
defined = {c: c.model_fields["type"].default for c in ours}
print(json.dumps({
    "missing": sorted(
        f"{c.__module__}.{c.__name__}" for c, t in defined.items() if registered.get(t) is not c
    ),
    "outside_events": sorted(
        f"{c.__module__}.{c.__name__}" for c in defined if not c.__module__.startswith("sessionstore.events.")
    ),
    "count": len(defined),
}))
"""


def test_importing_the_events_package_registers_every_event_type() -> None:
    """Every event class the package defines lives in ``sessionstore.events`` and decodes after
    ``import sessionstore.events`` alone (no other module has to be imported first)."""
    done = subprocess.run(
        [sys.executable, "-c", _CATALOGUE_PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["missing"] == []
    assert found["outside_events"] == []
    assert found["count"] >= 30


def _projection_classes() -> set[type[Projection[object]]]:
    def every(cls: type) -> list[type]:
        subclasses: list[type] = cls.__subclasses__()
        return [c for sub in subclasses for c in (sub, *every(sub))]

    return {c for c in every(Projection) if c.__module__.startswith("sessionstore.projections.")}


def test_the_projection_list_names_every_projection_of_the_package_once() -> None:
    """``PROJECTIONS`` is the explicit list verify checks: each projection class of the package,
    in name order, no name twice."""
    names = [cls.name for cls in sessionstore.projections.PROJECTIONS]

    assert set(sessionstore.projections.PROJECTIONS) == _projection_classes()
    assert names == sorted(set(names))
    assert names == ["api_context", "file_history", "transcript", "transcript_digest"]

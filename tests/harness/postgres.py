"""A throwaway PostgreSQL server on loopback, as an Airflow deployment's metadata database.

Debian's ``postgresql`` binaries (``initdb``, ``pg_ctl``; found on ``PATH`` or under
``/usr/lib/postgresql/*/bin``).  The cluster lives in a fresh directory of its own, with ``trust``
authentication on 127.0.0.1 only, and is removed by :meth:`LocalPostgres.stop`.  PostgreSQL refuses
to run as root: as root the server runs as the ``postgres`` system user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["LocalPostgres", "PostgresError"]


class PostgresError(RuntimeError):
    """The local PostgreSQL server could not be set up (names the command and its output)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if not found:
        raise PostgresError(
            f"{name} not found: install Debian's postgresql package (apt-get install postgresql)"
        )
    return found


class LocalPostgres:
    """``start()`` gives :attr:`url` (SQLAlchemy, psycopg 3) of database ``airflow``; ``stop()`` ends it."""

    def __init__(self, *, max_connections: int = 300, fsync: bool = True) -> None:
        self.port = _free_port()
        self.max_connections = max_connections
        #: False: no waiting for the disk at commit (``fsync``, ``synchronous_commit`` and
        #: ``full_page_writes`` off): a throwaway cluster on a busy disk, that no crash must survive
        self.fsync = fsync
        self.data_dir: Path | None = None
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/airflow"

    def _run(self, *args: str, timeout: float = 120.0) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else list(args)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise PostgresError(
                f"`{' '.join(command)}` exited {result.returncode}: {result.stdout}{result.stderr}"
            )

    def start(self) -> str:
        self.data_dir = Path(tempfile.mkdtemp(prefix="airflow-postgres-"))
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.data_dir, user.pw_uid, user.pw_gid)
        cluster = str(self.data_dir / "cluster")
        self._run(_binary("initdb"), "-D", cluster, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = (
            f"-p {self.port} -k {self.data_dir} -c listen_addresses=127.0.0.1 "
            f"-c max_connections={self.max_connections}"
        )
        if not self.fsync:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        options += " -c log_lock_waits=on -c log_min_duration_statement=5000"  # in server.log
        log = str(self.data_dir / "server.log")
        self._run(_binary("pg_ctl"), "-D", cluster, "-o", options, "-l", log, "-w", "-t", "60", "start")
        self._run(_binary("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "airflow")
        return self.url

    def dump(self, path: Path) -> None:
        """Write database ``airflow`` as SQL (``pg_dump``) to ``path``, e.g. to keep it past :meth:`stop`
        (restore it with ``createdb`` and ``psql -f``)."""
        args = [_binary("pg_dump"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "airflow"]
        command = ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else args
        with path.open("wb") as out:  # written by this process: the server's user may not write there
            result = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=False, timeout=300.0)
        if result.returncode != 0:
            raise PostgresError(
                f"`{' '.join(command)}` exited {result.returncode}: {result.stderr.decode(errors='replace')}"
            )

    def stop(self) -> None:
        if self.data_dir is None:
            return
        cluster = str(self.data_dir / "cluster")
        try:
            self._run(_binary("pg_ctl"), "-D", cluster, "-m", "fast", "-w", "-t", "30", "stop", timeout=60.0)
        except (PostgresError, subprocess.TimeoutExpired):
            pass  # already stopped, or it did not start
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir = None

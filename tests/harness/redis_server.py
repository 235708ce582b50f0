"""A throwaway Redis server on loopback, as a CeleryExecutor's broker.

Debian's ``redis-server`` binary (on ``PATH`` or ``/usr/bin``), on a free port of its own, with no
persistence (nothing written but its log, in a fresh directory that :meth:`LocalRedis.stop` removes).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from harness.processes import free_port

__all__ = ["LocalRedis", "RedisError"]


class RedisError(RuntimeError):
    """The local Redis server could not be started (names the command and its log)."""


class LocalRedis:
    """``start()`` gives :attr:`url` (Celery broker URL, database 0); ``stop()`` ends the server."""

    def __init__(self) -> None:
        self.port = free_port()
        self.data_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = 30.0) -> str:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise RedisError("redis-server not found: install Debian's redis-server package")
        self.data_dir = Path(tempfile.mkdtemp(prefix="airflow-redis-"))
        log = self.data_dir / "redis.log"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)]
        argv += ["--save", "", "--appendonly", "no", "--logfile", str(log), "--daemonize", "no"]
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._ping():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace") if log.exists() else ""
                self.stop()
                command = " ".join(argv)
                raise RedisError(f"`{command}` did not answer PING within {timeout:.0f}s:\n{text[-3000:]}")
            time.sleep(0.1)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=timeout)
            self._proc = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

"""Run a real Airflow 3 deployment (api-server, scheduler, triggerer, dag-processor) for end-to-end tests.

Every component is a separate ``airflow`` subprocess started in its own session (process group),
configured only through ``AIRFLOW__SECTION__KEY`` environment variables and ``AIRFLOW_HOME``, with
its stdout/stderr in ``<home>/logs/<component>.log``. The metadata database is SQLite in ``<home>``;
the executor is the LocalExecutor.

Typical use::

    stack = AirflowStack(home, dags_folder, extra_env={"AIRFLOW_CONN_KAFKA_DEFAULT": "..."})
    stack.start(dag_ids=["my_dag"])
    try:
        run_id = stack.trigger_dag("my_dag")
        assert stack.wait_for_dag_run("my_dag", run_id) == "success"
    finally:
        stack.stop()

Everything that waits takes an explicit deadline and raises :class:`AirflowStackError` with the tails
of the relevant component logs when the deadline passes. Processes are only ever signalled by the
pids this class started (and their descendants), never by name.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

T = TypeVar("T")

COMPONENTS: tuple[str, ...] = ("api-server", "scheduler", "triggerer", "dag-processor")

#: Keys of ``GET /api/v2/monitor/health`` for the components that heartbeat.
_HEALTH_KEYS = {
    "scheduler": ("scheduler", "latest_scheduler_heartbeat"),
    "triggerer": ("triggerer", "latest_triggerer_heartbeat"),
    "dag-processor": ("dag_processor", "latest_dag_processor_heartbeat"),
}

#: Users of the simple auth manager: username -> role (viewer, user, op, admin).
DEFAULT_USERS: Mapping[str, str] = {"admin": "admin", "bridge": "op"}

TERMINAL_DAG_RUN_STATES = ("success", "failed")


class AirflowStackError(RuntimeError):
    """A component failed to start, died, or a wait ran past its deadline."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "<no log file>"
    return "\n".join(data.splitlines()[-lines:])


def _proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), used to detect pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])  # field 22 of proc(5)


def _descendants(root: int) -> list[tuple[int, int | None]]:
    """(pid, start time) of every live descendant of ``root`` (Linux /proc scan)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[tuple[int, int | None]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, _proc_start_time(child)))
            todo.append(child)
    return found


def _signal_pid(pid: int, start_time: int | None, sig: int) -> None:
    """Send ``sig`` to ``pid`` unless the pid now belongs to another process."""
    if start_time is not None and _proc_start_time(pid) != start_time:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive(pid: int, start_time: int | None) -> bool:
    current = _proc_start_time(pid)
    if current is None or (start_time is not None and current != start_time):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :].split()[0] != "Z"


def _airflow_executable() -> list[str]:
    script = Path(sys.executable).with_name("airflow")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "airflow"]


def _parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class _Component:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_fh: Any = None
    start_offset: int = 0  # size of the log file when the current incarnation started
    starts: int = 0
    stopped: bool = False  # stopped or killed on purpose: its exit is not a failure
    started_at: float = 0.0  # monotonic
    env: dict[str, str] = field(default_factory=dict)  # on top of the stack's environment
    started_wall: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class AirflowStack:
    """A real Airflow deployment in ``home`` whose DAGs folder is ``dags_folder``.

    ``extra_env`` is added to (and overrides) the environment of every ``airflow`` subprocess, e.g.
    ``AIRFLOW_CONN_*`` connections or further ``AIRFLOW__SECTION__KEY`` options.
    ``users`` maps simple-auth-manager usernames to roles; their passwords are ``<username>-password``
    (see :attr:`passwords`).
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        extra_env: Mapping[str, str] | None = None,
        *,
        users: Mapping[str, str] = DEFAULT_USERS,
        parallelism: int = 4,
        database: str = "sqlite",
    ) -> None:
        if database not in ("sqlite", "postgres"):
            raise ValueError(f"database must be 'sqlite' or 'postgres', got {database!r}")
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.extra_env: dict[str, str] = dict(extra_env or {})
        self.users = dict(users)
        self.passwords = {name: f"{name}-password" for name in self.users}
        self.parallelism = parallelism
        self.log_dir = self.home / "logs"
        self.db_path = self.home / "airflow.db"
        #: ``postgres``: a local PostgreSQL server of its own (tests/harness/postgres.py) holds the
        #: metadata DB, started by :meth:`migrate` and removed by :meth:`stop`
        self.database = database
        self._postgres: Any = None
        if database == "postgres":
            from harness.postgres import LocalPostgres

            self._postgres = LocalPostgres()
        self.port = free_port()
        self.worker_log_port = free_port()
        self.trigger_log_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # 64 random bytes: HS512 tokens want a key of at least 64 bytes.
        self._jwt_secret = base64.urlsafe_b64encode(os.urandom(64)).decode()
        self._secret_key = base64.urlsafe_b64encode(os.urandom(64)).decode()
        self._fernet_key = base64.urlsafe_b64encode(os.urandom(32)).decode()
        self._tokens: dict[str, str] = {}
        self._client: httpx.Client | None = None
        self._migrated = False
        self.timings: dict[str, float] = {}
        self.components: dict[str, _Component] = {
            "api-server": _Component(
                "api-server",
                ["api-server", "--host", "127.0.0.1", "--port", str(self.port)],
                self.log_dir / "api-server.log",
            ),
            "scheduler": _Component("scheduler", ["scheduler"], self.log_dir / "scheduler.log"),
            "triggerer": _Component("triggerer", ["triggerer"], self.log_dir / "triggerer.log"),
            "dag-processor": _Component(
                "dag-processor", ["dag-processor"], self.log_dir / "dag-processor.log"
            ),
        }

    # ------------------------------------------------------------------ configuration

    def airflow_config(self) -> dict[str, str]:
        """The ``AIRFLOW__SECTION__KEY`` options of this deployment (before ``extra_env``)."""
        home = self.home
        return {
            # [core]
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__FERNET_KEY": self._fernet_key,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            # [database]
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
            # psycopg 3 does both (Airflow would derive asyncpg for postgresql, not installed)
            **({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.database_url} if self._postgres else {}),
            # [api] / [api_auth]
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": self._secret_key,
            "AIRFLOW__API_AUTH__JWT_SECRET": self._jwt_secret,
            # [scheduler]
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",  # heartrate of the dag-processor job
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "15",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": "10",
            # [dag_processor]
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": "10",
            "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD": "15",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "300",
            # [triggerer]
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
            # [workers]
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__WORKERS__MISSING_DAG_RETRY_DELAY": "5",
            # [logging]
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.log_dir),
            "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(
                self.log_dir / "dag_processor"
            ),
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.worker_log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.trigger_log_port),
        }

    @property
    def passwords_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json"

    @property
    def env(self) -> dict[str, str]:
        """The full environment of every ``airflow`` subprocess of this deployment."""
        env = {
            key: value
            for key, value in os.environ.items()
            # Never inherit the caller's Airflow configuration or connections.
            if not key.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "_AIRFLOW"))
            and key != "AIRFLOW_HOME"
        }
        env["AIRFLOW_HOME"] = str(self.home)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.airflow_config())
        env.update(self.extra_env)
        return env

    def _prepare_home(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        (self.home / "plugins").mkdir(exist_ok=True)
        # Known passwords: the simple auth manager only generates passwords for users missing here.
        self.passwords_file.write_text(json.dumps(self.passwords) + "\n")

    # ------------------------------------------------------------------ CLI / migration

    def cli(self, *args: str, timeout: float = 180.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``airflow *args`` with this deployment's environment and return the completed process."""
        argv = [*_airflow_executable(), *args]
        with subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                raise AirflowStackError(
                    f"`airflow {' '.join(args)}` did not finish within {timeout:.0f}s\n"
                    f"--- stdout (tail) ---\n{_last_lines(stdout, 60)}\n"
                    f"--- stderr (tail) ---\n{_last_lines(stderr, 60)}"
                ) from None
        result = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
        if check and result.returncode != 0:
            raise AirflowStackError(
                f"`airflow {' '.join(args)}` exited with {result.returncode}\n"
                f"--- stdout (tail) ---\n{_last_lines(result.stdout, 60)}\n"
                f"--- stderr (tail) ---\n{_last_lines(result.stderr, 60)}"
            )
        return result

    @property
    def database_url(self) -> str:
        """``[database] sql_alchemy_conn`` of this deployment."""
        if self._postgres is not None:
            return str(self._postgres.url)
        return f"sqlite:///{self.db_path}"

    def migrate(self, timeout: float = 600.0) -> float:
        """Create/upgrade the metadata DB (``airflow db migrate``); return the seconds it took."""
        self._prepare_home()
        started = time.monotonic()
        if self._postgres is not None and self._postgres.data_dir is None:
            self._postgres.start()
        result = self.cli("db", "migrate", timeout=timeout)
        (self.log_dir / "db-migrate.log").write_text(result.stdout + result.stderr)
        if self.database == "sqlite":
            # WAL lets readers (api-server, harness queries) run while a component writes.
            with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
        self._migrated = True
        self.timings["migrate"] = time.monotonic() - started
        return self.timings["migrate"]

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 300.0, dag_ids: Iterable[str] = ()) -> AirflowStack:
        """Migrate (if not done yet), start all components, wait until healthy and ``dag_ids`` parsed."""
        started = time.monotonic()
        deadline = started + timeout
        _register_for_exit(self)
        try:
            if not self._migrated:
                self.migrate(timeout=max(1.0, deadline - time.monotonic()))
            for name in COMPONENTS:
                self._spawn(name)
            self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
            self.timings["start_to_healthy"] = time.monotonic() - started
            for dag_id in dag_ids:
                self.wait_dag_parsed(dag_id, timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.timings["start_total"] = time.monotonic() - started
        return self

    def add_triggerer(self, name: str, env: Mapping[str, str] | None = None) -> None:
        """Declare one more triggerer (``name``, e.g. ``triggerer-2``) with its own log-server port.

        Start it with :meth:`restart_component`; ``env`` (e.g. ``AIRFLOW__TRIGGERER__CAPACITY``)
        is added to its environment only.
        """
        if name in self.components:
            raise AirflowStackError(f"component {name} exists already")
        self.components[name] = _Component(
            name,
            ["triggerer"],
            self.log_dir / f"{name}.log",
            env={"AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()), **(env or {})},
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every running component (SIGTERM to its process group, then SIGKILL after ``timeout``)."""
        for name in [n for n in self.components if n not in COMPONENTS]:
            if self.components[name].running:
                self.stop_component(name, timeout=timeout)
        for name in reversed(COMPONENTS):
            if self.components[name].running:
                started = time.monotonic()
                self.stop_component(name, timeout=timeout)
                self.timings[f"stop_{name}"] = time.monotonic() - started
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._postgres is not None and self._postgres.data_dir is not None:
            self._postgres.stop()
            self._migrated = False  # a new start() makes a new database

    def __enter__(self) -> AirflowStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str) -> None:
        comp = self.components[name]
        if comp.running:
            raise AirflowStackError(f"{name} is already running (pid {comp.proc.pid})")  # type: ignore[union-attr]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if comp.log_fh is not None:
            comp.log_fh.close()
        comp.log_fh = comp.log_path.open("ab")
        comp.start_offset = comp.log_path.stat().st_size
        comp.starts += 1
        comp.stopped = False
        banner = (
            f"\n===== harness: starting {name} (start #{comp.starts}) at {datetime.now(timezone.utc)} =====\n"
        )
        comp.log_fh.write(banner.encode())
        comp.log_fh.flush()
        comp.started_at = time.monotonic()
        comp.started_wall = datetime.now(timezone.utc)
        comp.proc = subprocess.Popen(
            [*_airflow_executable(), *comp.argv],
            env={**self.env, **comp.env},
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=comp.log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _terminate_tree(self, comp: _Component, first_signal: int, timeout: float) -> None:
        proc = comp.proc
        if proc is None:
            return
        comp.stopped = True
        pid = proc.pid
        # Task processes put themselves into their own process groups: remember every descendant now,
        # so that the ones outside the component's group are signalled too.
        tree = _descendants(pid) if proc.poll() is None else []
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, first_signal)
        for child, start_time in tree:
            _signal_pid(child, start_time, first_signal)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(_alive(c, s) for c, s in tree):
                break
            time.sleep(0.1)
        if proc.poll() is None or any(_alive(c, s) for c, s in tree):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            for child, start_time in tree:
                _signal_pid(child, start_time, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        # Anything left in the component's process group after its leader exited.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if comp.log_fh is not None:
            comp.log_fh.write(
                f"\n===== harness: {comp.name} stopped, exit code {proc.returncode} =====\n".encode()
            )
            comp.log_fh.close()
            comp.log_fh = None

    def stop_component(self, name: str, timeout: float = 30.0) -> None:
        """Stop ``name`` gracefully: SIGTERM to its process group, SIGKILL after ``timeout`` seconds."""
        self._terminate_tree(self.components[name], signal.SIGTERM, timeout)

    def kill_component(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill ``name`` and all its descendants abruptly (default SIGKILL, like a crashed host)."""
        self._terminate_tree(self.components[name], sig, timeout=10.0)

    def restart_component(self, name: str, timeout: float = 120.0) -> None:
        """(Re)start ``name`` (stopped first if running) and wait until this new incarnation is healthy."""
        comp = self.components[name]
        if comp.running:
            self.stop_component(name)
        self._spawn(name)
        self.wait_healthy(timeout=timeout, fresh=(name,))

    def pid(self, name: str) -> int | None:
        comp = self.components[name]
        return comp.proc.pid if comp.running else None  # type: ignore[union-attr]

    # ------------------------------------------------------------------ logs / diagnostics

    def logs(self, component: str, *, current_only: bool = False) -> str:
        """Text of ``component``'s log file (all incarnations, or only the current one)."""
        comp = self.components[component]
        try:
            data = comp.log_path.read_bytes()
        except FileNotFoundError:
            return ""
        if current_only:
            data = data[comp.start_offset :]
        return data.decode("utf-8", errors="replace")

    def log_tail(self, component: str, lines: int = 40) -> str:
        return _tail(self.components[component].log_path, lines)

    def diagnostics(self, components: Sequence[str] = COMPONENTS, lines: int = 40) -> str:
        """Process state and log tails of ``components``, for failure messages."""
        parts = []
        for name in components:
            comp = self.components[name]
            if comp.proc is None:
                state = "never started"
            elif comp.proc.poll() is None:
                state = f"running, pid {comp.proc.pid}"
            elif comp.stopped:
                state = f"stopped by the harness, exit code {comp.proc.returncode}"
            else:
                state = f"EXITED with code {comp.proc.returncode}"
            parts.append(f"--- {name} ({state}), last {lines} lines of {comp.log_path} ---\n")
            parts.append(self.log_tail(name, lines) + "\n")
        return "".join(parts)

    def _task_log_path(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int) -> Path:
        path = self.log_dir / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            path = path / f"map_index={map_index}"
        return path / f"attempt={try_number}.log"

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """The task's log file written by the worker (``[logging] log_filename_template`` layout)."""
        try:
            return self._task_log_path(dag_id, run_id, task_id, try_number, map_index).read_text(
                errors="replace"
            )
        except FileNotFoundError:
            return ""

    def trigger_log_files(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[Path]:
        """Trigger log files of the try, oldest triggerer job first (see :meth:`trigger_log`)."""
        task_log = self._task_log_path(dag_id, run_id, task_id, try_number, map_index)

        def job_id(path: Path) -> int:
            part = path.name.rsplit(".", 2)[-2]
            return int(part) if part.isdigit() else 0

        return sorted(task_log.parent.glob(f"{task_log.name}.trigger.*.log"), key=job_id)

    def trigger_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """What the triggerer(s) logged for the task's triggers of that try (JSON lines).

        The triggerer writes them next to the task log as ``attempt=N.log.trigger.<triggerer job id>.log``,
        one file per triggerer job that ran the trigger (a restarted triggerer adds a file).
        """
        files = self.trigger_log_files(dag_id, run_id, task_id, try_number, map_index)
        return "".join(p.read_text(errors="replace") for p in files)

    def _fail(
        self, message: str, components: Sequence[str] = COMPONENTS, lines: int = 40
    ) -> AirflowStackError:
        return AirflowStackError(f"{message}\n{self.diagnostics(components, lines)}")

    def _check_alive(self, names: Iterable[str] = COMPONENTS) -> None:
        for name in names:
            comp = self.components[name]
            if comp.proc is not None and not comp.stopped and comp.proc.poll() is not None:
                raise self._fail(
                    f"Airflow {name} exited with code {comp.proc.returncode}", components=(name,), lines=80
                )

    def wait_for(
        self,
        condition: Callable[[], T],
        timeout: float,
        description: str,
        components: Sequence[str] = COMPONENTS,
        interval: float = 0.5,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value (returned); fail after ``timeout`` seconds.

        Components that died unexpectedly fail the wait at once. The timeout message names
        ``description`` and carries the log tails of ``components``.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise self._fail(f"Timed out after {timeout:.0f}s waiting for {description}", components)
            time.sleep(interval)

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        """``GET /api/v2/monitor/health`` (no authentication needed)."""
        response = self.client.get("/api/v2/monitor/health", timeout=10.0)
        response.raise_for_status()
        return response.json()

    def wait_healthy(self, timeout: float = 180.0, fresh: Iterable[str] = ()) -> dict[str, Any]:
        """Wait until the api-server answers and scheduler, triggerer and dag-processor report healthy.

        Components stopped or killed on purpose (:meth:`stop_component`, :meth:`kill_component`) are
        not required to be healthy.

        For the components in ``fresh`` the heartbeat must also come from their current incarnation
        (newer than their last start), so a just-killed process cannot count as healthy.
        """
        fresh = set(fresh)
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            self._check_alive(name for name in COMPONENTS if self.components[name].proc is not None)
            try:
                last = self.health()
            except (httpx.HTTPError, ValueError) as exc:
                last = repr(exc)
            else:
                if self._is_healthy(last, fresh):
                    return last
            if time.monotonic() > deadline:
                raise self._fail(f"Airflow did not become healthy within {timeout:.0f}s; last health: {last}")
            time.sleep(0.5)

    def _is_healthy(self, health: dict[str, Any], fresh: set[str]) -> bool:
        if (health.get("metadatabase") or {}).get("status") != "healthy":
            return False
        for name, (key, heartbeat_key) in _HEALTH_KEYS.items():
            if self.components[name].stopped:
                continue  # stopped or killed on purpose
            info = health.get(key) or {}
            if info.get("status") != "healthy":
                return False
            if name in fresh:
                heartbeat = _parse_ts(info.get(heartbeat_key))
                if heartbeat is None or heartbeat < self.components[name].started_wall:
                    return False
        return True

    # ------------------------------------------------------------------ REST API

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.base_url, timeout=30.0)
        return self._client

    def token(self, user: str = "admin", *, renew: bool = False) -> str:
        """A JWT for ``user`` from ``POST /auth/token`` (cached until ``renew`` or a 401)."""
        if renew or user not in self._tokens:
            response = self.client.post(
                "/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=30.0
            )
            if response.status_code != 201:
                raise self._fail(
                    f"POST /auth/token for {user!r} answered {response.status_code}: {response.text}",
                    components=("api-server",),
                )
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def api(
        self,
        method: str,
        path: str,
        *,
        user: str = "admin",
        expect: int | Iterable[int] | None = None,
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> httpx.Response:
        """Call the public REST API as ``user``; ``path`` is absolute (``/api/v2/...``) or relative to it.

        A 401 renews the token once. With ``expect``, any other status raises :class:`AirflowStackError`.
        """
        if not path.startswith("/"):
            path = f"/api/v2/{path}"
        headers = dict(kwargs.pop("headers", None) or {})
        for attempt in (0, 1):
            headers["Authorization"] = f"Bearer {self.token(user, renew=attempt > 0)}"
            response = self.client.request(method, path, headers=headers, timeout=timeout, **kwargs)
            if response.status_code != 401:
                break
        if expect is not None:
            expected = {expect} if isinstance(expect, int) else set(expect)
            if response.status_code not in expected:
                raise self._fail(
                    f"{method} {path} answered {response.status_code} (expected {sorted(expected)}): "
                    f"{response.text[:2000]}",
                    components=("api-server",),
                )
        return response

    def api_json(
        self, method: str, path: str, *, expect: int | Iterable[int] = (200, 201), **kwargs: Any
    ) -> Any:
        """:meth:`api` that requires ``expect`` and returns the decoded JSON body."""
        return self.api(method, path, expect=expect, **kwargs).json()

    # ------------------------------------------------------------------ DAGs and runs

    def import_errors(self) -> list[dict[str, Any]]:
        return self.api_json("GET", "importErrors", params={"limit": 100})["import_errors"]

    def wait_dag_parsed(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until ``GET /api/v2/dags/{dag_id}`` answers 200; return the DAG."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(("api-server", "dag-processor"))
            response = self.api("GET", f"dags/{_q(dag_id)}")
            if response.status_code == 200:
                return response.json()
            if time.monotonic() > deadline:
                try:
                    errors = json.dumps(self.import_errors(), indent=1)[:4000]
                except AirflowStackError as exc:
                    errors = str(exc)
                raise self._fail(
                    f"DAG {dag_id!r} was not parsed within {timeout:.0f}s (last answer "
                    f"{response.status_code}); DAGs folder {self.dags_folder} holds "
                    f"{sorted(p.name for p in self.dags_folder.iterdir())}; import errors: {errors}",
                    components=("dag-processor", "api-server"),
                )
            time.sleep(0.5)

    def unpause(self, dag_id: str) -> None:
        self.api_json(
            "PATCH",
            f"dags/{_q(dag_id)}",
            params={"update_mask": "is_paused"},
            json={"is_paused": False},
            expect=200,
        )

    def trigger_dag(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        *,
        user: str = "admin",
        parse_timeout: float = 120.0,
    ) -> str:
        """Wait for ``dag_id`` to be parsed, unpause it, create a manual run; return its run_id."""
        self.wait_dag_parsed(dag_id, timeout=parse_timeout)
        self.unpause(dag_id)
        body: dict[str, Any] = {"logical_date": None, "conf": dict(conf or {})}
        if run_id is not None:
            body["dag_run_id"] = run_id
        run = self.api_json("POST", f"dags/{_q(dag_id)}/dagRuns", json=body, user=user, expect=200)
        return run["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.api_json("GET", f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}", expect=200)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.api_json(
            "GET",
            f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances",
            params={"limit": 100},
            expect=200,
        )["task_instances"]

    def _run_summary(self, dag_id: str, run_id: str) -> str:
        try:
            tis = self.task_instances(dag_id, run_id)
        except (AirflowStackError, httpx.HTTPError) as exc:
            return f"<task instances unavailable: {exc}>"
        return ", ".join(f"{ti['task_id']}[{ti['map_index']}]={ti['state']}" for ti in tis) or "<none>"

    def wait_for_dag_run(
        self,
        dag_id: str,
        run_id: str,
        states: Iterable[str] = TERMINAL_DAG_RUN_STATES,
        timeout: float = 180.0,
    ) -> str:
        """Wait until the run's state is one of ``states``; return that state."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            state = self.dag_run(dag_id, run_id)["state"]
            if state in wanted:
                return state
            if time.monotonic() > deadline:
                raise self._fail(
                    f"DAG run {dag_id}/{run_id} is {state!r}, not in {sorted(wanted)} after {timeout:.0f}s; "
                    f"task instances: {self._run_summary(dag_id, run_id)}",
                    components=("scheduler", "triggerer", "dag-processor"),
                )
            time.sleep(0.5)

    def _ti_path(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        path = f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}"
        return f"{path}/{map_index}" if map_index >= 0 else path

    def task_instance(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> dict[str, Any] | None:
        """The task instance, or None while it does not exist yet."""
        response = self.api("GET", self._ti_path(dag_id, run_id, task_id, map_index))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(
                f"GET task instance answered {response.status_code}: {response.text}", ("api-server",)
            )
        return response.json()

    def wait_for_task_state(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: Iterable[str],
        map_index: int = -1,
        timeout: float = 120.0,
    ) -> str:
        """Wait until the task instance's state is one of ``states``; return that state."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            ti = self.task_instance(dag_id, run_id, task_id, map_index)
            state = ti["state"] if ti else None
            if state in wanted:
                return state
            if time.monotonic() > deadline:
                raise self._fail(
                    f"Task {dag_id}/{run_id}/{task_id}[{map_index}] is {state!r}, not in {sorted(wanted)} "
                    f"after {timeout:.0f}s; task instances: {self._run_summary(dag_id, run_id)}",
                    components=("scheduler", "triggerer"),
                )
            time.sleep(0.5)

    def task_instance_tries(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """Every try of the task instance (``.../taskInstances/{task_id}[/{map_index}]/tries``)."""
        path = f"{self._ti_path(dag_id, run_id, task_id, map_index)}/tries"
        return self.api_json("GET", path, expect=200)["task_instances"]

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        """Deserialized XCom value of a task instance."""
        path = f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/xcomEntries/{_q(key)}"
        params = {"map_index": map_index, "deserialize": True, "stringify": False}
        return self.api_json("GET", path, params=params, expect=200)["value"]

    # ------------------------------------------------------------------ metadata DB (read-only)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query on the metadata DB; rows as dicts (``?`` placeholders)."""
        if self.database == "postgres":
            import psycopg
            from psycopg.rows import dict_row

            with psycopg.connect(self.database_url.replace("+psycopg", ""), row_factory=dict_row) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())  # type: ignore[arg-type]
        with contextlib.closing(
            sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30)
        ) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql, params)]

    def state_change_log(
        self,
        dag_id: str,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: int | None = None,
        events: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of the metadata ``log`` table for ``dag_id`` (oldest first).

        Each row has ``id, dttm, dag_id, task_id, map_index, run_id, try_number, event, owner, extra``.
        The execution API writes one row per task-instance state change it handles, with ``event`` the
        new state: ``running`` (a worker started or resumed the task), ``deferred`` (the task handed
        over to a trigger), ``success``/``failed``/``up_for_retry``/``up_for_reschedule``, ...; a task
        that deferred once and resumed shows ``running, deferred, running, success``. Other rows come
        from the REST API (``trigger_dag_run``, ``patch_dag``, ...), the CLI (``cli_scheduler``, ...)
        and the scheduler (``state mismatch``, executor events); ``events`` filters by name.
        """
        clauses = ["dag_id = ?"]
        params: list[Any] = [dag_id]
        for column, value in (("run_id", run_id), ("task_id", task_id), ("map_index", map_index)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if events is not None:
            wanted = list(events)
            clauses.append(f"event IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        sql = (
            "SELECT id, dttm, dag_id, task_id, map_index, run_id, try_number, event, owner, extra "
            f"FROM log WHERE {' AND '.join(clauses)} ORDER BY id"
        )
        return self.query(sql, params)


def _q(value: str) -> str:
    """Quote one path segment of a REST URL."""
    return quote(value, safe="")


def _last_lines(text: str | None, lines: int) -> str:
    return "\n".join((text or "").splitlines()[-lines:])


_LIVE_STACKS: weakref.WeakSet[AirflowStack] = weakref.WeakSet()
_EXIT_HOOK: list[bool] = []


def _stop_live_stacks() -> None:
    for stack in list(_LIVE_STACKS):
        with contextlib.suppress(Exception):
            stack.stop(timeout=10.0)


def _register_for_exit(stack: AirflowStack) -> None:
    if not _EXIT_HOOK:
        atexit.register(_stop_live_stacks)
        _EXIT_HOOK.append(True)
    _LIVE_STACKS.add(stack)

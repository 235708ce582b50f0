"""Run a real Airflow 3 deployment (api-server, scheduler, triggerer, dag-processor) for end-to-end tests.

Every component is a separate ``airflow`` subprocess started in its own session (process group),
configured only through ``AIRFLOW__SECTION__KEY`` environment variables and ``AIRFLOW_HOME``, with
its stdout/stderr in ``<home>/logs/<component>.log``.  Two topologies (``topology=``):

* ``embedded`` (the default): SQLite in ``<home>`` and the LocalExecutor;
* ``production``: a PostgreSQL server of its own (tests/harness/postgres.py), the CeleryExecutor on a
  Redis server of its own (tests/harness/redis_server.py) with two Celery workers (``worker-1`` serving
  the queues ``default`` and ``w1``, ``worker-2`` serving ``default`` and ``w2``; a task's ``queue=``
  picks its worker) and two triggerers (``triggerer`` and ``triggerer-2``).

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
import concurrent.futures
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import httpx

from harness.airflow_logs import COMPONENTS, ComponentLogs
from harness.airflow_runs import AirflowStackError, RunsAndMetadata
from harness.processes import (
    _airflow_executable,
    _alive,
    _descendants,
    _parse_ts,
    _signal_pid,
    free_port,
)
from harness.redis_server import LocalRedis

_TESTS_DIR = Path(__file__).resolve().parents[1]

T = TypeVar("T")


#: Keys of ``GET /api/v2/monitor/health`` for the components that heartbeat.
_HEALTH_KEYS = {
    "scheduler": ("scheduler", "latest_scheduler_heartbeat"),
    "triggerer": ("triggerer", "latest_triggerer_heartbeat"),
    "dag-processor": ("dag_processor", "latest_dag_processor_heartbeat"),
}

#: Users of the simple auth manager: username -> role (viewer, user, op, admin).
DEFAULT_USERS: Mapping[str, str] = {"admin": "admin", "bridge": "op"}

TOPOLOGIES = ("embedded", "production")

#: Celery workers of the production topology: component -> (its hostname, the queue only it serves).
#: Every worker also serves ``[operators] default_queue`` (``default``).
CELERY_WORKERS: Mapping[str, tuple[str, str]] = {"worker-1": ("w1", "w1"), "worker-2": ("w2", "w2")}

#: Environment variable holding a worker's hostname (see :func:`harness.worker_hostname.hostname`).
WORKER_HOSTNAME_ENV = "AIRFLOW_E2E_WORKER_HOSTNAME"


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


class AirflowStack(ComponentLogs, RunsAndMetadata):
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
        database: str | None = None,
        topology: str = "embedded",
        worker_concurrency: int = 2,
    ) -> None:
        if topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
        database = database or ("postgres" if topology == "production" else "sqlite")
        if database not in ("sqlite", "postgres"):
            raise ValueError(f"database must be 'sqlite' or 'postgres', got {database!r}")
        if topology == "production" and database != "postgres":
            raise ValueError("the production topology runs on PostgreSQL: database must be 'postgres'")
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

            # the production topology's server does not wait for the disk at commit: on a shared CI disk
            # a commit's fsync stalled the api-server for a minute (throwaway data, no crash to survive)
            self._postgres = LocalPostgres(fsync=topology != "production")
        #: ``production``: CeleryExecutor on a Redis server of its own (started by :meth:`start`)
        self.topology = topology
        self.worker_concurrency = worker_concurrency
        self._redis: LocalRedis | None = LocalRedis() if topology == "production" else None
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
        #: components beyond :data:`COMPONENTS` that :meth:`start` starts (the topology's)
        self.topology_components: list[str] = []
        if topology == "production":
            self._declare_production_components()

    def _declare_production_components(self) -> None:
        for name, (hostname, queue) in CELERY_WORKERS.items():
            argv = ["celery", "worker", "--celery-hostname", f"{hostname}@%h", "--queues", f"default,{queue}"]
            argv += ["--concurrency", str(self.worker_concurrency)]
            env = {
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "harness.worker_hostname.hostname",
                WORKER_HOSTNAME_ENV: hostname,
            }
            self.components[name] = _Component(name, argv, self.log_dir / f"{name}.log", env=env)
            self.topology_components.append(name)
        self.add_triggerer("triggerer-2")
        self.topology_components.append("triggerer-2")

    # ------------------------------------------------------------------ configuration

    def airflow_config(self) -> dict[str, str]:
        """The ``AIRFLOW__SECTION__KEY`` options of this deployment (before ``extra_env``)."""
        home = self.home
        return {
            # [core]
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor" if self._redis else "LocalExecutor",
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
            # Not lower: a triggerer whose heartbeat is late by more than this has its triggers started on
            # the other triggerer too, and while the two copies of a watcher run side by side each of them
            # fires the records it reads (the stack's start stalled a triggerer for 8-11 s on 2 cores)
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
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
            **self._celery_config(),
        }

    def _celery_config(self) -> dict[str, str]:
        if self._redis is None:
            return {}
        return {
            "AIRFLOW__CELERY__BROKER_URL": self._redis.url,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.database_url}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_concurrency),
            "AIRFLOW__CELERY__POOL": "prefork",
            "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": "default",
            # the workers' tasks import the harness (the hostname callable) like the test process
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_TESTS_DIR), os.environ.get("PYTHONPATH")])),
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

    def dump_database(self, path: Path) -> Path:
        """A copy of the metadata DB at ``path``, which :meth:`stop` does not remove (PostgreSQL: SQL
        from ``pg_dump``; SQLite: the database file); ``path``."""
        if self._postgres is not None:
            self._postgres.dump(path)
        else:
            with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as source:
                with contextlib.closing(sqlite3.connect(path)) as copy:
                    source.backup(copy)
        return path

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
            if self._redis is not None and self._redis.data_dir is None:
                self._redis.start()
            for name in (*COMPONENTS, *self.topology_components):
                self._spawn(name)
            self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
            self.timings["start_to_healthy"] = time.monotonic() - started
            self._warm_execution_api(deadline)
            for dag_id in dag_ids:
                self.wait_dag_parsed(dag_id, timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.timings["start_total"] = time.monotonic() - started
        return self

    def _warm_execution_api(self, deadline: float) -> None:
        """The api-server builds its execution API on the first request to it, which took 55-130 s on a
        loaded machine: longer than a task's first call waits (its task then fails). Make that request."""
        started = time.monotonic()
        try:
            self.client.get("/execution/health", timeout=max(1.0, deadline - started)).raise_for_status()
        except httpx.HTTPError as exc:
            raise self._fail(f"GET /execution/health failed: {exc!r}", components=("api-server",)) from exc
        self.timings["execution_api_warm"] = time.monotonic() - started

    def enable_watcher_recheck(self, user: str = "bridge", conn_id: str = "airflow_api") -> None:
        """Let the watchers ask this deployment's api-server, as ``user``, which of their asset's events
        exist when they resume after an unclean stop (``[kafka_events] watcher_airflow_api_conn_id``)."""
        api = {"conn_type": "http", "host": self.base_url, "login": user, "password": self.passwords[user]}
        self.extra_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(api)
        self.extra_env["AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID"] = conn_id

    def add_triggerer(
        self, name: str, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
    ) -> None:
        """Declare one more triggerer (``name``, e.g. ``triggerer-2``) with its own log-server port.

        Start it with :meth:`restart_component`; ``env`` (e.g. ``AIRFLOW__TRIGGERER__CAPACITY``)
        is added to its environment only, ``args`` (e.g. ``--queues``) to its command line.
        """
        if name in self.components:
            raise AirflowStackError(f"component {name} exists already")
        self.components[name] = _Component(
            name,
            ["triggerer", *args],
            self.log_dir / f"{name}.log",
            env={"AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()), **(env or {})},
        )

    @contextlib.contextmanager
    def sole_triggerer(self, name: str = "triggerer", timeout: float = 180.0) -> Iterator[None]:
        """Within the block ``name`` is the only running triggerer of the topology (the others, e.g. the
        production topology's ``triggerer-2``, are stopped and their triggers move to ``name``), so that
        killing ``name`` stops every trigger; afterwards the others run again (healthy)."""
        others = [n for n in self.topology_components if n.startswith("triggerer") and n != name]
        others = [n for n in others if self.components[n].running]
        for other in others:
            self.stop_component(other)
        try:
            yield
        finally:
            for other in others:
                self.restart_component(other, timeout=timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every running component (SIGTERM to its process group, then SIGKILL after ``timeout``).

        In three rounds, the components of a round side by side: the topology's and added ones
        (Celery workers, further triggerers), then scheduler, triggerer and dag-processor, then the
        api-server, which the others may still call while they stop."""
        rounds = [
            [n for n in self.components if n not in COMPONENTS],
            [n for n in reversed(COMPONENTS) if n != "api-server"],
            ["api-server"],
        ]
        for names in rounds:
            running = [name for name in names if self.components[name].running]
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
                for future in [pool.submit(self._timed_stop, name, timeout) for name in running]:
                    future.result()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._redis is not None:
            self._redis.stop()
        if self._postgres is not None and self._postgres.data_dir is not None:
            self._postgres.stop()
            self._migrated = False  # a new start() makes a new database

    def _timed_stop(self, name: str, timeout: float) -> None:
        started = time.monotonic()
        self.stop_component(name, timeout=timeout)
        self.timings[f"stop_{name}"] = time.monotonic() - started

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
                f"\n===== harness: {comp.name} stopped at {datetime.now(timezone.utc)}, "
                f"exit code {proc.returncode} =====\n".encode()
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

    def component_of(self, pids: Iterable[int]) -> str | None:
        """The running component whose process is one of ``pids`` (a process and its parents, e.g.
        :func:`harness.processes.ancestors`); None: none of this stack's."""
        roots = {comp.proc.pid: name for name, comp in self.components.items() if comp.running}  # type: ignore[union-attr]
        return next((roots[pid] for pid in pids if pid in roots), None)

    def pid(self, name: str) -> int | None:
        comp = self.components[name]
        return comp.proc.pid if comp.running else None  # type: ignore[union-attr]

    def _fail(
        self, message: str, components: Sequence[str] = COMPONENTS, lines: int = 40
    ) -> AirflowStackError:
        return AirflowStackError(f"{message}\n{self.diagnostics(components, lines)}")

    def _check_alive(self, names: Iterable[str] | None = None) -> None:
        for name in self.components if names is None else names:
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
        not required to be healthy.  Running Celery workers must have logged that they are ready.

        For the components in ``fresh`` the heartbeat must also come from their current incarnation
        (newer than their last start), so a just-killed process cannot count as healthy.
        """
        fresh = set(fresh)
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            self._check_alive()
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
        if not all(self._worker_ready(name) for name in CELERY_WORKERS if name in self.components):
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

    def _worker_ready(self, name: str) -> bool:
        """A Celery worker started on purpose logged ``<hostname>@<host> ready.`` in this incarnation."""
        comp = self.components[name]
        if comp.proc is None or comp.stopped:
            return True
        text = self.logs(name, current_only=True)
        return f"{CELERY_WORKERS[name][0]}@" in text and " ready." in text

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

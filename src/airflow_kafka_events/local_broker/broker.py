"""One Kafka process (broker + KRaft controller): the single-node broker, or a node of a cluster."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, overload

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker import jars as _jars
from airflow_kafka_events.local_broker import java as _java
from airflow_kafka_events.local_broker._common import (
    BROKER_MAIN_CLASS,
    DATA_DIR,
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_PORT,
    ENV_JVM_OPTS,
    HOST,
    LOG4J_FILE,
    LOGS_DIR,
    OUT_FILE,
    PID_FILE,
    POLL_INTERVAL,
    PROPERTIES_FILE,
    STATE_FILE,
    STORAGE_TOOL_MAIN_CLASS,
    BrokerStatus,
    default_cache_dir,
    default_state_dir,
    file_lock,
    free_ports,
    heap_bytes,
    new_cluster_id,
    package_file,
    port_is_free,
    port_open,
    process_args,
    read_state_file,
    signal_pid,
    tail,
    wait_gone,
    write_atomic,
    write_state_file,
)
from airflow_kafka_events.local_broker.properties import render_server_properties
from airflow_kafka_events.local_broker.security import SecurityMaterial

log = logging.getLogger(__name__)

_FORMAT_TIMEOUT = 180.0


class _HasStateDir(Protocol):
    state_dir: Path


class StatePath:
    """A read-only attribute: the path ``parts`` below its owner's ``state_dir``.

    On the class it is the descriptor itself (so ``hasattr`` and ``mock.patch.object`` work);
    setting it on an instance raises :class:`AttributeError`, as a read-only property does.
    """

    def __init__(self, *parts: str) -> None:
        self.parts = parts
        self.name = "/".join(parts)

    def __set_name__(self, owner_type: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner_type: type | None = None) -> StatePath: ...
    @overload
    def __get__(self, instance: _HasStateDir, owner_type: type | None = None) -> Path: ...
    def __get__(self, instance: _HasStateDir | None, owner_type: type | None = None) -> Path | StatePath:
        if instance is None:
            return self
        return instance.state_dir.joinpath(*self.parts)

    def __set__(self, instance: _HasStateDir, value: object) -> None:
        raise AttributeError(
            f"{type(instance).__name__}.{self.name} is read-only: it is {'/'.join(self.parts)} below "
            "state_dir (pass another state_dir instead)"
        )


@dataclass(frozen=True)
class ClusterContext:
    """What a node of a cluster shares with the others."""

    cluster_id: str
    voters: str
    brokers: int
    security: SecurityMaterial | None = None


class LocalKafkaBroker:
    """A Kafka broker+controller process owned by one state dir.

    Alone (the default) it is a single-node PLAINTEXT cluster.  With ``cluster`` it is node
    ``node_id`` of a :class:`~airflow_kafka_events.local_broker.LocalKafkaCluster`.

    ``port``/``controller_port``: ``None`` reuses the ports recorded in the state dir; a new
    state dir takes :data:`DEFAULT_PORT`/:data:`DEFAULT_CONTROLLER_PORT` when it is the default
    state dir and those are free, and free ephemeral ports otherwise.  The chosen ports are
    recorded in the state dir on start.
    """

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        cache_dir: Path | None = None,
        heap: str = "512m",
        node_id: int = 1,
        cluster: ClusterContext | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).expanduser().absolute() if state_dir else default_state_dir()
        self.cache_dir = Path(cache_dir).expanduser().absolute() if cache_dir else default_cache_dir()
        self.version = version
        self.heap = heap
        self.node_id = node_id
        self.cluster = cluster
        self._process: subprocess.Popen[bytes] | None = None
        recorded = self._read_state()
        cluster_id = cluster.cluster_id if cluster else recorded.get("cluster_id")
        self.cluster_id: str | None = cluster_id if isinstance(cluster_id, str) and cluster_id else None
        self._port_explicit = port is not None
        self.port, self.controller_port = self._choose_ports(port, controller_port, recorded)

    # ------------------------------------------------------------------ paths
    @property
    def libs_dir(self) -> Path:
        return self.cache_dir / f"kafka-{self.version}" / "libs"

    properties_file = StatePath(PROPERTIES_FILE)
    pid_file = StatePath(PID_FILE)
    log_file = StatePath(LOGS_DIR, "server.log")
    out_file = StatePath(OUT_FILE)
    data_dir = StatePath(DATA_DIR)

    @property
    def meta_properties(self) -> Path:
        return self.data_dir / "meta.properties"

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def client_config(self) -> dict[str, str]:
        """librdkafka settings that reach this node (with the client user's credentials)."""
        security = self.cluster.security if self.cluster else None
        if security is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        return security.client_config(self.bootstrap_servers)

    # ------------------------------------------------------------------ state file
    def _read_state(self) -> dict[str, object]:
        return read_state_file(self.state_dir / STATE_FILE)

    def _write_state(self) -> None:
        state = {
            "port": self.port,
            "controller_port": self.controller_port,
            "cluster_id": self.cluster_id,
            "version": self.version,
            "node_id": self.node_id,
        }
        write_state_file(self.state_dir / STATE_FILE, state)

    def _choose_ports(
        self, port: int | None, controller_port: int | None, recorded: Mapping[str, object]
    ) -> tuple[int, int]:
        def recorded_port(key: str) -> int | None:
            value = recorded.get(key)
            return value if isinstance(value, int) and 0 < value < 65536 else None

        if port is None:
            port = recorded_port("port")
        if controller_port is None:
            controller_port = recorded_port("controller_port")
        if port is not None and controller_port is not None:
            if port == controller_port:
                raise BrokerError(f"port and controller port must differ (both {port})")
            return port, controller_port
        is_default_dir = self.state_dir == default_state_dir().absolute()
        if port is None and is_default_dir and controller_port != DEFAULT_PORT and port_is_free(DEFAULT_PORT):
            port = DEFAULT_PORT
        if (
            controller_port is None
            and is_default_dir
            and port != DEFAULT_CONTROLLER_PORT
            and port_is_free(DEFAULT_CONTROLLER_PORT)
        ):
            controller_port = DEFAULT_CONTROLLER_PORT
        free = iter(p for p in free_ports(3) if p not in (port, controller_port))
        return port or next(free), controller_port or next(free)

    # ------------------------------------------------------------------ jars
    def ensure_jars(self) -> Path:
        """Fetch the broker's jars into the cache once; return the libs dir."""
        return _jars.ensure_jars(self.libs_dir, self.version)

    # ------------------------------------------------------------------ process
    def _read_pid(self) -> int | None:
        try:
            text = self.pid_file.read_text("utf-8").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def _is_our_broker(self, pid: int) -> bool:
        args = process_args(pid)
        if not args:
            return False
        props = str(self.properties_file)
        if len(args) == 1:  # ps output without argv boundaries
            return BROKER_MAIN_CLASS in args[0] and props in args[0]
        return BROKER_MAIN_CLASS in args and props in args

    def _running_pid(self) -> int | None:
        if self._process is not None and self._process.poll() is not None:
            self._process = None  # reap our own child so it does not linger as a zombie
        pid = self._read_pid()
        if pid is not None and self._is_our_broker(pid):
            return pid
        return None

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        recorded = self._read_state()
        port = recorded.get("port", self.port)
        return BrokerStatus(
            running=pid is not None,
            pid=pid,
            bootstrap_servers=f"{HOST}:{port}" if pid is not None else None,
            state_dir=self.state_dir,
            version=str(recorded.get("version", self.version)) if pid is not None else self.version,
        )

    def _jvm_options(self) -> list[str]:
        max_heap = heap_bytes(self.heap)
        initial = self.heap if max_heap <= 256 * 1024**2 else "256m"
        opts = [
            f"-Xms{initial}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.state_dir / LOG4J_FILE}",
            f"-Dkafka.logs.dir={self.state_dir / LOGS_DIR}",
        ]
        opts += os.environ.get(ENV_JVM_OPTS, "").split()
        return opts

    def _render_properties(self) -> str:
        cluster = self.cluster
        return render_server_properties(
            state_dir=self.state_dir,
            port=self.port,
            controller_port=self.controller_port,
            node_id=self.node_id,
            voters=cluster.voters if cluster else None,
            brokers=cluster.brokers if cluster else 1,
            security=cluster.security if cluster else None,
        )

    def _prepare_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / LOGS_DIR).mkdir(exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        write_atomic(self.state_dir / LOG4J_FILE, package_file("log4j2.xml"))
        # 0600: in SASL_SSL mode it holds the broker user's password
        write_atomic(self.properties_file, self._render_properties(), mode=0o600)

    def _formatted_cluster_id(self) -> str | None:
        try:
            text = self.meta_properties.read_text("utf-8")
        except OSError:
            return None
        match = re.search(r"^cluster\.id=(\S+)\s*$", text, re.MULTILINE)
        return match.group(1) if match else None

    def _format_storage(self, java: str, libs: Path) -> None:
        formatted = self._formatted_cluster_id()
        if formatted is not None:  # warm start: keep the storage (and its cluster id)
            if self.cluster is not None and formatted != self.cluster.cluster_id:
                raise BrokerError(
                    f"{self.data_dir} belongs to cluster {formatted}, not {self.cluster.cluster_id}"
                )
            self.cluster_id = formatted
            return
        if not self.cluster_id:
            self.cluster_id = new_cluster_id()
        security = self.cluster.security if self.cluster else None
        cmd = [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.state_dir / LOG4J_FILE}",
            f"-Dkafka.logs.dir={self.state_dir / LOGS_DIR}",
            "-cp",
            str(libs / "*"),
            STORAGE_TOOL_MAIN_CLASS,
            "format",
            # "=" form: a cluster id may start with "-", which argparse would take for an option
            f"--cluster-id={self.cluster_id}",
            "-c",
            str(self.properties_file),
            "--ignore-formatted",
            *(security.scram_arguments() if security else []),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_FORMAT_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(f"formatting the broker storage in {self.data_dir} timed out") from exc
        if proc.returncode != 0:
            detail = (proc.stdout + proc.stderr).strip()
            raise BrokerError(f"formatting the broker storage in {self.data_dir} failed\n{detail}")
        log.info("formatted %s with cluster id %s", self.data_dir, self.cluster_id)

    def check_ports(self) -> None:
        for name, port in (("port", self.port), ("controller port", self.controller_port)):
            if not port_is_free(port):
                raise BrokerError(
                    f"{name} {HOST}:{port} is already in use; choose another port for {self.state_dir}"
                )

    def prepare(self, java: str, libs: Path) -> None:
        """Write the configuration, format the storage once, record the ports."""
        self._prepare_state_dir()
        self._format_storage(java, libs)
        self._write_state()

    def start(self, timeout: float = 180.0) -> BrokerStatus:
        """Start the broker and wait until it can create and delete a topic.

        Idempotent: when this state dir's broker already runs, returns its status.
        """
        deadline = time.monotonic() + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            current = self.status()
            if current.running:
                if self._port_explicit and current.bootstrap_servers != self.bootstrap_servers:
                    raise BrokerError(
                        f"the broker of {self.state_dir} already runs on {current.bootstrap_servers} "
                        f"(pid {current.pid}); stop it before starting it on port {self.port}"
                    )
                return current
            self.check_ports()
            heap_bytes(self.heap)
            java = _java.check_java()
            libs = self.ensure_jars()
            self.prepare(java, libs)
            self.launch(java, libs)
            return self._wait_ready(deadline)

    def launch(self, java: str, libs: Path) -> None:
        """Start the process without waiting (a cluster waits for all its nodes together)."""
        cmd = [
            java,
            *self._jvm_options(),
            "-cp",
            str(libs / "*"),
            BROKER_MAIN_CLASS,
            str(self.properties_file),
        ]
        with self.out_file.open("wb") as out:
            self._process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
                close_fds=True,
            )
        write_atomic(self.pid_file, f"{self._process.pid}\n")
        log.info("started Kafka %s (pid %d) on %s", self.version, self._process.pid, self.bootstrap_servers)

    def startup_failure(self, summary: str) -> BrokerError:
        parts = [f"{summary} (logs: {self.log_file}, {self.out_file})"]
        for path in (self.out_file, self.log_file):
            text = tail(path)
            if text:
                parts.append(f"--- tail of {path} ---\n{text}")
        return BrokerError("\n".join(parts))

    def process_exited(self) -> int | None:
        """Exit code of the broker process we launched, ``None`` while it runs."""
        proc = self._process
        if proc is None:
            return None if self._running_pid() is not None else -1
        return proc.poll()

    def _wait_ready(self, deadline: float) -> BrokerStatus:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin: AdminClient | None = None
        last_error: object = "the broker port never opened"
        while True:
            code = self.process_exited()
            if code is not None:
                self.pid_file.unlink(missing_ok=True)
                self._process = None
                raise self.startup_failure(f"the Kafka broker exited during start (exit code {code})")
            if time.monotonic() >= deadline:
                break
            if admin is None:
                if port_open(self.port):
                    config: dict[str, str | int | float | bool] = {**self.client_config()}
                    config.update({"socket.connection.setup.timeout.ms": 2000, "log_level": 2})
                    admin = AdminClient(config)
                else:
                    time.sleep(POLL_INTERVAL)
                    continue
            topic = f"__airflow_kafka_events_ready_{uuid.uuid4().hex[:12]}"
            remaining = max(1.0, min(10.0, deadline - time.monotonic()))
            try:
                admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=remaining)[topic].result(
                    timeout=remaining
                )
                admin.delete_topics([topic], operation_timeout=remaining)[topic].result(timeout=remaining)
            except Exception as exc:  # any failure is retried until the deadline
                last_error = exc
                time.sleep(POLL_INTERVAL)
                continue
            return self.status()
        try:
            self.stop(timeout=10.0)
        except BrokerError:
            log.warning("could not stop the broker that failed to start", exc_info=True)
        raise self.startup_failure(
            f"the Kafka broker was not ready within the deadline (last error: {last_error})"
        )

    def signal_stop(self) -> int | None:
        """Send SIGTERM to this node's process (when it is ours); return its pid."""
        pid = self._running_pid()
        if pid is None:
            stale = self._read_pid()
            if stale is not None:
                log.info("removing stale pid file %s (pid %d is not our broker)", self.pid_file, stale)
                self.pid_file.unlink(missing_ok=True)
            return None
        log.info("stopping Kafka broker pid %d", pid)
        signal_pid(pid, signal.SIGTERM, "the Kafka broker", BrokerError)
        return pid

    def finish_stop(self, pid: int, timeout: float) -> None:
        """Wait for ``pid`` to exit; SIGKILL it (when still ours) after ``timeout``."""
        if not wait_gone(pid, self._process, time.monotonic() + timeout):
            log.warning("Kafka broker pid %d did not stop within %.0fs; killing it", pid, timeout)
            if self._is_our_broker(pid):
                signal_pid(pid, signal.SIGKILL, "the Kafka broker", BrokerError)
            if not wait_gone(pid, self._process, time.monotonic() + 10.0):
                raise BrokerError(f"the Kafka broker (pid {pid}) does not stop")
        self.pid_file.unlink(missing_ok=True)
        self._process = None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop this state dir's broker by pid: SIGTERM, then SIGKILL after ``timeout``."""
        pid = self.signal_stop()
        if pid is not None:
            self.finish_stop(pid, timeout)

    def kill(self) -> int | None:
        """SIGKILL this node's process (a crash, for failover tests); return its pid."""
        pid = self._running_pid()
        if pid is None:
            return None
        signal_pid(pid, signal.SIGKILL, "the Kafka broker", BrokerError)
        if not wait_gone(pid, self._process, time.monotonic() + 10.0):
            raise BrokerError(f"the Kafka broker (pid {pid}) survives SIGKILL")
        self.pid_file.unlink(missing_ok=True)
        self._process = None
        return pid

    def __repr__(self) -> str:
        return (
            f"LocalKafkaBroker(state_dir={str(self.state_dir)!r}, port={self.port}, version={self.version!r})"
        )

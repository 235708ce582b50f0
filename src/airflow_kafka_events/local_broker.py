"""A real single-node Apache Kafka broker (KRaft mode) run from plain jars, without Docker.

The broker's runtime classpath is brought down once from Maven Central with ``mvn
dependency:copy-dependencies`` and cached under ``~/.cache/airflow-kafka-events/kafka-<version>/libs``
(``AIRFLOW_KAFKA_EVENTS_CACHE`` replaces ``~/.cache/airflow-kafka-events``).  Each broker keeps
everything it owns in one *state dir*::

    broker.json        ports, cluster id and Kafka version chosen for this state dir
    server.properties  the broker configuration (rewritten on every start)
    log4j2.xml         logging configuration (everything goes to logs/, nothing to the console)
    kafka.pid          pid of the running broker
    kafka.out          the JVM's stdout/stderr
    logs/server.log    the broker log
    data/              log.dirs (topic data and KRaft metadata, formatted once)

The broker is started in its own session and stopped by pid (SIGTERM, then SIGKILL after a
deadline), never by process name; a pid is only signalled after checking that its command line
is our ``kafka.Kafka`` process with our ``server.properties``.

This module imports no Airflow module.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airflow_kafka_events.errors import BrokerError

__all__ = [
    "DEFAULT_CONTROLLER_PORT",
    "DEFAULT_KAFKA_VERSION",
    "DEFAULT_PORT",
    "BrokerStatus",
    "LocalKafkaBroker",
    "default_cache_dir",
    "default_state_dir",
    "new_cluster_id",
    "render_pom",
    "render_server_properties",
]

log = logging.getLogger(__name__)

DEFAULT_KAFKA_VERSION = "4.4.0"
#: Ports used for the default state dir when they are free (other state dirs pick free ports).
DEFAULT_PORT = 39092
DEFAULT_CONTROLLER_PORT = 39093

SCALA_BINARY_VERSION = "2.13"
SLF4J_VERSION = "2.0.17"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
#: log4j version that arrives with each known Kafka release; the SLF4J binding must match it.
#: For other releases the version actually fetched is detected and the fetch is redone once.
KNOWN_LOG4J_VERSIONS: Mapping[str, str] = {"4.4.0": "2.25.5"}
FALLBACK_LOG4J_VERSION = "2.25.5"
MIN_JAVA_VERSION = 17

ENV_CACHE = "AIRFLOW_KAFKA_EVENTS_CACHE"
ENV_STATE = "AIRFLOW_KAFKA_EVENTS_STATE"
#: Extra JVM options appended after the defaults (so they win), e.g. ``-XX:TieredStopAtLevel=4``.
ENV_JVM_OPTS = "AIRFLOW_KAFKA_EVENTS_KAFKA_JVM_OPTS"

HOST = "127.0.0.1"
BROKER_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_MAIN_CLASS = "kafka.tools.StorageTool"

STATE_FILE = "broker.json"
PID_FILE = "kafka.pid"
PROPERTIES_FILE = "server.properties"
LOG4J_FILE = "log4j2.xml"
OUT_FILE = "kafka.out"
LOGS_DIR = "logs"
DATA_DIR = "data"
FETCH_MARKER = ".fetch-complete.json"

_POLL_INTERVAL = 0.2
_FORMAT_TIMEOUT = 180.0
_FETCH_TIMEOUT = 1800.0
_LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class BrokerStatus:
    """What is known about the broker of one state dir."""

    running: bool
    pid: int | None
    bootstrap_servers: str | None
    state_dir: Path
    version: str


# --------------------------------------------------------------------------- pure helpers
def default_state_dir() -> Path:
    """``$AIRFLOW_KAFKA_EVENTS_STATE`` or ``~/.local/state/airflow-kafka-events/kafka``."""
    env = os.environ.get(ENV_STATE)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "airflow-kafka-events" / "kafka"


def default_cache_dir() -> Path:
    """``$AIRFLOW_KAFKA_EVENTS_CACHE`` or ``~/.cache/airflow-kafka-events``."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "airflow-kafka-events"


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _package_file(name: str) -> str:
    return resources.files("airflow_kafka_events").joinpath("broker_files", name).read_text("utf-8")


def render_pom(
    version: str = DEFAULT_KAFKA_VERSION,
    *,
    log4j_version: str | None = None,
    slf4j_version: str = SLF4J_VERSION,
) -> str:
    """The POM whose runtime dependencies are the broker's classpath (plus the SLF4J binding)."""
    tokens = {
        "@kafka.version@": version,
        "@scala.binary.version@": SCALA_BINARY_VERSION,
        "@log4j.version@": log4j_version or KNOWN_LOG4J_VERSIONS.get(version, FALLBACK_LOG4J_VERSION),
        "@slf4j.version@": slf4j_version,
        "@dependency.plugin.version@": DEPENDENCY_PLUGIN_VERSION,
    }
    text = _package_file("pom.xml")
    for token, value in tokens.items():
        text = text.replace(token, value)
    return text


def render_server_properties(
    *,
    state_dir: Path,
    port: int,
    controller_port: int,
    node_id: int = 1,
    host: str = HOST,
) -> str:
    """``server.properties`` of a single-node broker+controller listening on ``host`` only."""
    data_dir = Path(state_dir) / DATA_DIR
    props: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": f"{node_id}@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": 3,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "log.retention.hours": 24,
        "log.retention.check.interval.ms": 300000,
    }
    lines = ["# Written by airflow-kafka-events on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def parse_java_version(output: str) -> int | None:
    """Major version from ``java -version`` output (``"1.8.0_x"`` -> 8, ``"17.0.15"`` -> 17)."""
    match = re.search(r'version "([^"]+)"', output)
    if not match:
        return None
    parts = re.split(r"[._+-]", match.group(1))
    try:
        major = int(parts[0])
        if major == 1 and len(parts) > 1:
            major = int(parts[1])
    except ValueError:
        return None
    return major


def _heap_bytes(heap: str) -> int:
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", heap.strip())
    if not match:
        raise BrokerError(f"invalid heap size {heap!r}: use a JVM size such as 512m or 1g")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2).lower()]
    return int(match.group(1)) * scale


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _port_is_free(port: int, host: str = HOST) -> bool:
    # SO_REUSEADDR like the JVM's server sockets, so TIME_WAIT leftovers do not count as busy.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_ports(count: int, host: str = HOST) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _port_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _process_args(pid: int) -> list[str] | None:
    """The command line of ``pid``; ``None`` when it does not exist (or is a zombie)."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        if not raw:  # zombie or kernel thread
            return None
        return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")]
    try:  # no procfs (macOS): ask ps
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return [text] if out.returncode == 0 and text else None  # one string: no argv boundaries


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _process_args(pid) is not None or not Path("/proc").is_dir()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (serialises fetches / starts across processes)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def find_java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def check_java() -> str:
    """Path of a ``java`` of version 17 or newer; :class:`BrokerError` otherwise."""
    java = find_java()
    if java is None:
        raise BrokerError(
            f"java not found: the local Kafka broker needs Java {MIN_JAVA_VERSION}+ "
            "(install a JDK/JRE 17 or newer, or set JAVA_HOME)"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BrokerError(f"cannot run {java} -version: {exc}") from exc
    major = parse_java_version(out.stderr + out.stdout)
    if major is None:
        raise BrokerError(f"cannot tell the version of {java}: {(out.stderr or out.stdout).strip()[:200]}")
    if major < MIN_JAVA_VERSION:
        raise BrokerError(
            f"{java} is Java {major}; Kafka {DEFAULT_KAFKA_VERSION.split('.')[0]}.x needs Java "
            f"{MIN_JAVA_VERSION} or newer (set JAVA_HOME to a newer JDK)"
        )
    return java


def _jar_version(libs: Path, artifact: str) -> str | None:
    for jar in libs.glob(f"{artifact}-*.jar"):
        rest = jar.name[len(artifact) + 1 : -len(".jar")]
        if re.fullmatch(r"\d[\w.\-]*", rest):
            return rest
    return None


# --------------------------------------------------------------------------- the broker
class LocalKafkaBroker:
    """A single-node Kafka broker+controller owned by one state dir.

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
    ) -> None:
        self.state_dir = Path(state_dir).expanduser().absolute() if state_dir else default_state_dir()
        self.cache_dir = Path(cache_dir).expanduser().absolute() if cache_dir else default_cache_dir()
        self.version = version
        self.heap = heap
        self._process: subprocess.Popen[bytes] | None = None
        recorded = self._read_state()
        cluster_id = recorded.get("cluster_id")
        self.cluster_id: str | None = cluster_id if isinstance(cluster_id, str) and cluster_id else None
        self._port_explicit = port is not None
        self.port, self.controller_port = self._choose_ports(port, controller_port, recorded)

    # ------------------------------------------------------------------ paths
    @property
    def libs_dir(self) -> Path:
        return self.cache_dir / f"kafka-{self.version}" / "libs"

    @property
    def properties_file(self) -> Path:
        return self.state_dir / PROPERTIES_FILE

    @property
    def pid_file(self) -> Path:
        return self.state_dir / PID_FILE

    @property
    def log_file(self) -> Path:
        return self.state_dir / LOGS_DIR / "server.log"

    @property
    def out_file(self) -> Path:
        return self.state_dir / OUT_FILE

    @property
    def data_dir(self) -> Path:
        return self.state_dir / DATA_DIR

    @property
    def meta_properties(self) -> Path:
        return self.data_dir / "meta.properties"

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    # ------------------------------------------------------------------ state file
    def _read_state(self) -> dict[str, object]:
        path = self.state_dir / STATE_FILE
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self) -> None:
        state = {
            "port": self.port,
            "controller_port": self.controller_port,
            "cluster_id": self.cluster_id,
            "version": self.version,
        }
        _write_atomic(self.state_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")

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
        if (
            port is None
            and is_default_dir
            and controller_port != DEFAULT_PORT
            and _port_is_free(DEFAULT_PORT)
        ):
            port = DEFAULT_PORT
        if (
            controller_port is None
            and is_default_dir
            and port != DEFAULT_CONTROLLER_PORT
            and _port_is_free(DEFAULT_CONTROLLER_PORT)
        ):
            controller_port = DEFAULT_CONTROLLER_PORT
        free = iter(p for p in _free_ports(3) if p not in (port, controller_port))
        return port or next(free), controller_port or next(free)

    # ------------------------------------------------------------------ jars
    def ensure_jars(self) -> Path:
        """Fetch the broker's jars into the cache once; return the libs dir."""
        version_dir = self.libs_dir.parent
        with _file_lock(version_dir / ".lock"):
            if self._jars_complete():
                return self.libs_dir
            mvn = shutil.which("mvn")
            if mvn is None:
                raise BrokerError(
                    f"the Kafka {self.version} jars are not cached in {self.libs_dir} and mvn (Apache Maven) "
                    "is not installed: install Maven, or copy a fetched cache there"
                )
            (version_dir / FETCH_MARKER).unlink(missing_ok=True)
            shutil.rmtree(self.libs_dir, ignore_errors=True)
            for leftover in version_dir.glob("libs.partial-*"):  # from an interrupted fetch
                shutil.rmtree(leftover, ignore_errors=True)
            started = time.monotonic()
            log4j_version = KNOWN_LOG4J_VERSIONS.get(self.version, FALLBACK_LOG4J_VERSION)
            for _attempt in range(2):
                tmp = version_dir / f"libs.partial-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                self._run_mvn(mvn, version_dir, tmp, log4j_version)
                core = _jar_version(tmp, "log4j-core")
                if core is None or core == log4j_version:
                    break
                log.info("Kafka %s brings log4j-core %s; fetching the matching binding", self.version, core)
                log4j_version = core
            main_jar = tmp / f"kafka_{SCALA_BINARY_VERSION}-{self.version}.jar"
            if not main_jar.is_file():
                shutil.rmtree(tmp, ignore_errors=True)
                raise BrokerError(f"the fetch of Kafka {self.version} did not bring {main_jar.name}")
            os.replace(tmp, self.libs_dir)
            jars = sorted(p.name for p in self.libs_dir.glob("*.jar"))
            marker = {"version": self.version, "log4j_version": log4j_version, "jars": jars}
            _write_atomic(version_dir / FETCH_MARKER, json.dumps(marker, indent=2) + "\n")
            log.info(
                "fetched %d jars of Kafka %s in %.1fs", len(jars), self.version, time.monotonic() - started
            )
            return self.libs_dir

    def _jars_complete(self) -> bool:
        marker = self.libs_dir.parent / FETCH_MARKER
        try:
            data = json.loads(marker.read_text("utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or data.get("version") != self.version:
            return False
        jars = data.get("jars")
        if not isinstance(jars, list) or not jars:
            return False
        return all((self.libs_dir / str(name)).is_file() for name in jars)

    def _run_mvn(self, mvn: str, version_dir: Path, output: Path, log4j_version: str) -> None:
        pom = version_dir / "pom.xml"
        _write_atomic(pom, render_pom(self.version, log4j_version=log4j_version))
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={output}",
        ]
        log.info("fetching the Kafka %s jars with Maven into %s", self.version, self.libs_dir)
        try:
            proc = subprocess.run(
                cmd, cwd=version_dir, capture_output=True, text=True, timeout=_FETCH_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"fetching the Kafka {self.version} jars took over {_FETCH_TIMEOUT:.0f}s"
            ) from exc
        except OSError as exc:
            raise BrokerError(f"cannot run {mvn}: {exc}") from exc
        if proc.returncode != 0:
            shutil.rmtree(output, ignore_errors=True)
            detail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_LOG_TAIL_LINES:])
            raise BrokerError(f"fetching the Kafka {self.version} jars with Maven failed\n{detail}")

    # ------------------------------------------------------------------ process
    def _read_pid(self) -> int | None:
        try:
            text = self.pid_file.read_text("utf-8").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def _is_our_broker(self, pid: int) -> bool:
        args = _process_args(pid)
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
        max_heap = _heap_bytes(self.heap)
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

    def _prepare_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / LOGS_DIR).mkdir(exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        _write_atomic(self.state_dir / LOG4J_FILE, _package_file("log4j2.xml"))
        _write_atomic(
            self.properties_file,
            render_server_properties(
                state_dir=self.state_dir, port=self.port, controller_port=self.controller_port
            ),
        )

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
            self.cluster_id = formatted
            return
        if not self.cluster_id:
            self.cluster_id = new_cluster_id()
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
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_FORMAT_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(f"formatting the broker storage in {self.data_dir} timed out") from exc
        if proc.returncode != 0:
            detail = (proc.stdout + proc.stderr).strip()
            raise BrokerError(f"formatting the broker storage in {self.data_dir} failed\n{detail}")
        log.info("formatted %s with cluster id %s", self.data_dir, self.cluster_id)

    def start(self, timeout: float = 180.0) -> BrokerStatus:
        """Start the broker and wait until it can create and delete a topic.

        Idempotent: when this state dir's broker already runs, returns its status.
        """
        deadline = time.monotonic() + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.state_dir / ".lock"):
            current = self.status()
            if current.running:
                if self._port_explicit and current.bootstrap_servers != self.bootstrap_servers:
                    raise BrokerError(
                        f"the broker of {self.state_dir} already runs on {current.bootstrap_servers} "
                        f"(pid {current.pid}); stop it before starting it on port {self.port}"
                    )
                return current
            for name, port in (("port", self.port), ("controller port", self.controller_port)):
                if not _port_is_free(port):
                    raise BrokerError(
                        f"{name} {HOST}:{port} is already in use; choose another port for {self.state_dir}"
                    )
            _heap_bytes(self.heap)
            java = check_java()
            libs = self.ensure_jars()
            self._prepare_state_dir()
            self._format_storage(java, libs)
            self._write_state()
            self._launch(java, libs)
            return self._wait_ready(deadline)

    def _launch(self, java: str, libs: Path) -> None:
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
        _write_atomic(self.pid_file, f"{self._process.pid}\n")
        log.info("started Kafka %s (pid %d) on %s", self.version, self._process.pid, self.bootstrap_servers)

    def _startup_failure(self, summary: str) -> BrokerError:
        parts = [f"{summary} (logs: {self.log_file}, {self.out_file})"]
        for path in (self.out_file, self.log_file):
            tail = _tail(path)
            if tail:
                parts.append(f"--- tail of {path} ---\n{tail}")
        return BrokerError("\n".join(parts))

    def _process_exited(self) -> int | None:
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
            code = self._process_exited()
            if code is not None:
                self.pid_file.unlink(missing_ok=True)
                self._process = None
                raise self._startup_failure(f"the Kafka broker exited during start (exit code {code})")
            if time.monotonic() >= deadline:
                break
            if admin is None:
                if _port_open(self.port):
                    admin = AdminClient(
                        {
                            "bootstrap.servers": self.bootstrap_servers,
                            "socket.connection.setup.timeout.ms": 2000,
                            "log_level": 2,
                        }
                    )
                else:
                    time.sleep(_POLL_INTERVAL)
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
                time.sleep(_POLL_INTERVAL)
                continue
            return self.status()
        self._terminate_after_failed_start()
        raise self._startup_failure(
            f"the Kafka broker was not ready within the deadline (last error: {last_error})"
        )

    def _terminate_after_failed_start(self) -> None:
        try:
            self.stop(timeout=10.0)
        except BrokerError:
            log.warning("could not stop the broker that failed to start", exc_info=True)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop this state dir's broker by pid: SIGTERM, then SIGKILL after ``timeout``."""
        pid = self._running_pid()
        if pid is None:
            stale = self._read_pid()
            if stale is not None:
                log.info("removing stale pid file %s (pid %d is not our broker)", self.pid_file, stale)
                self.pid_file.unlink(missing_ok=True)
            return
        log.info("stopping Kafka broker pid %d", pid)
        self._signal(pid, signal.SIGTERM)
        if not self._wait_gone(pid, time.monotonic() + timeout):
            log.warning("Kafka broker pid %d did not stop within %.0fs; killing it", pid, timeout)
            if self._is_our_broker(pid):
                self._signal(pid, signal.SIGKILL)
            if not self._wait_gone(pid, time.monotonic() + 10.0):
                raise BrokerError(f"the Kafka broker (pid {pid}) does not stop")
        self.pid_file.unlink(missing_ok=True)
        self._process = None

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise BrokerError(f"cannot signal the Kafka broker (pid {pid}): {exc}") from exc

    def _wait_gone(self, pid: int, deadline: float) -> bool:
        while True:
            proc = self._process
            if proc is not None and proc.pid == pid:
                if proc.poll() is not None:
                    return True
            elif not _pid_exists(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def __repr__(self) -> str:
        return (
            f"LocalKafkaBroker(state_dir={str(self.state_dir)!r}, port={self.port}, version={self.version!r})"
        )

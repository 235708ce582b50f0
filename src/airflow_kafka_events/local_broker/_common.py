"""Constants and small functions shared by the local broker's modules (no Kafka, no JVM)."""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import random
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from airflow_kafka_events.errors import BrokerError

DEFAULT_KAFKA_VERSION = "4.4.0"
#: Ports used for the default state dir when they are free (other state dirs pick free ports).
DEFAULT_PORT = 39092
DEFAULT_CONTROLLER_PORT = 39093

#: Cache directory of the embedded broker's jars (default ``~/.cache/airflow-kafka-events``).
ENV_CACHE = "AIRFLOW_KAFKA_EVENTS_CACHE"
#: State directory of the embedded broker (ports, cluster id, pid, logs), as ``--state-dir``.
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

POLL_INTERVAL = 0.2
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class BrokerStatus:
    """What is known about the broker of one state dir."""

    running: bool
    pid: int | None
    bootstrap_servers: str | None
    state_dir: Path
    version: str


@dataclass(frozen=True)
class NodeStatus:
    """One node of a :class:`~airflow_kafka_events.local_broker.LocalKafkaCluster`."""

    node_id: int
    running: bool
    pid: int | None
    port: int
    controller_port: int
    state_dir: Path


@dataclass(frozen=True)
class ClusterStatus:
    """What is known about the cluster of one state dir (``running``: every node runs)."""

    nodes: tuple[NodeStatus, ...]
    bootstrap_servers: str
    security: str
    state_dir: Path
    version: str
    cluster_id: str | None
    client_config: dict[str, str] = field(default_factory=dict, repr=False)
    properties_file: Path | None = None

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(n.running for n in self.nodes)

    @property
    def any_running(self) -> bool:
        return any(n.running for n in self.nodes)


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


def package_file(name: str) -> str:
    return (
        resources.files("airflow_kafka_events.local_broker")
        .joinpath("files")
        .joinpath(name)
        .read_text("utf-8")
    )


def heap_bytes(heap: str) -> int:
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", heap.strip())
    if not match:
        raise BrokerError(f"invalid heap size {heap!r}: use a JVM size such as 512m or 1g")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2).lower()]
    return int(match.group(1)) * scale


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def port_is_free(port: int, host: str = HOST) -> bool:
    # SO_REUSEADDR like the JVM's server sockets, so TIME_WAIT leftovers do not count as busy.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


#: The lowest port :func:`free_ports` picks; it picks below the kernel's ephemeral range.
FIRST_PICKED_PORT = 20000
#: Random picks :func:`free_ports` tries before it lets the kernel choose.
PORT_PICKS = 200


def ephemeral_port_start() -> int:
    """The first port of the range the kernel hands to outgoing connections (32768 if unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports free now, picked at random below the ephemeral range: a port the
    kernel chose (port 0) is one it also hands to outgoing connections, which can take it before the
    server binds it (seen with brokers started beside busy tests: "Address already in use")."""
    ports: list[int] = []
    end = ephemeral_port_start()
    if end - FIRST_PICKED_PORT >= 10 * count:
        for _ in range(PORT_PICKS):
            port = random.randrange(FIRST_PICKED_PORT, end)
            if port not in ports and port_is_free(port, host):
                ports.append(port)
                if len(ports) == count:
                    return ports
    return (
        ports + [p for p in _kernel_ports(count + len(ports), host) if p not in ports][: count - len(ports)]
    )


def _kernel_ports(count: int, host: str) -> list[int]:
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


def port_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def process_args(pid: int) -> list[str] | None:
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


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_args(pid) is not None or not Path("/proc").is_dir()


def signal_pid(pid: int, sig: int, what: str, error: type[Exception]) -> None:
    """Send ``sig`` to ``pid`` (gone already: nothing to do); any other failure raises ``error``."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise error(f"cannot signal {what} (pid {pid}): {exc}") from exc


def wait_gone(pid: int, process: subprocess.Popen[bytes] | None, deadline: float) -> bool:
    """Whether ``pid`` ended by ``deadline`` (monotonic); ``process``: its ``Popen`` when we started it."""
    while True:
        if process is not None and process.pid == pid:
            if process.poll() is not None:
                return True
        elif not pid_exists(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text``; with ``mode`` the file never exists with wider permissions."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644 if mode is None else mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    if mode is not None:
        os.chmod(tmp, mode)  # not narrowed by the umask's absence either way
    os.replace(tmp, path)


def read_state_file(path: Path) -> dict[str, object]:
    """The JSON object a state file holds (``{}`` when it is missing, unreadable or not an object)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state_file(path: Path, state: Mapping[str, object]) -> None:
    """Replace the state file ``path`` with ``state`` as indented JSON."""
    write_atomic(path, json.dumps(state, indent=2) + "\n")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (serialises fetches / starts across processes)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

"""A real Confluent-compatible schema registry (Apicurio Registry), run from its release, without Docker.

The release (``io.apicurio:apicurio-registry-app:<version>``, the ``tar.gz`` of classifier ``all``) is
brought down once with Maven, like the broker's jars, and unpacked under
``~/.cache/airflow-kafka-events/apicurio-registry-<version>/app`` (``AIRFLOW_KAFKA_EVENTS_CACHE``
replaces ``~/.cache/airflow-kafka-events``).  It is a Quarkus application, started with
``java -jar quarkus-run.jar``; it needs Java 21 or newer, found through
``AIRFLOW_KAFKA_EVENTS_REGISTRY_JAVA_HOME``, ``JAVA_HOME``, ``PATH`` and the JDKs installed under
``/usr/lib/jvm`` and ``/opt``.

:class:`LocalSchemaRegistry` owns one *state dir*::

    registry.json   the ports chosen for this state dir
    registry.pid    pid of the running registry
    registry.out    the JVM's stdout/stderr

Storage is in memory: a stopped registry forgets its schemas.  The HTTP API and Quarkus's management
interface are both bound to 127.0.0.1; the Confluent API is served at ``/apis/ccompat/v7``.  The
process is stopped by pid (SIGTERM, then SIGKILL), after checking that its command line is our
``quarkus-run.jar`` with our state dir's marker.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker._common import (
    HOST,
    POLL_INTERVAL,
    default_cache_dir,
    file_lock,
    free_ports,
    pid_exists,
    port_is_free,
    process_args,
    read_state_file,
    signal_pid,
    tail,
    wait_gone,
    write_atomic,
    write_state_file,
)
from airflow_kafka_events.local_broker.broker import StatePath
from airflow_kafka_events.local_broker.jars import FETCH_MARKER, clear_for_fetch, run_mvn
from airflow_kafka_events.local_broker.java import parse_java_version

log = logging.getLogger(__name__)

DEFAULT_REGISTRY_VERSION = "3.3.3"
MIN_REGISTRY_JAVA_VERSION = 21
REGISTRY_ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: Path of the Confluent-compatible API under the registry's base URL.
CCOMPAT_PATH = "/apis/ccompat/v7"
#: A JDK (its home) for the registry when the ``java`` of ``JAVA_HOME``/``PATH`` is older than 21.
ENV_REGISTRY_JAVA_HOME = "AIRFLOW_KAFKA_EVENTS_REGISTRY_JAVA_HOME"

STATE_FILE = "registry.json"
PID_FILE = "registry.pid"
OUT_FILE = "registry.out"
_JDK_GLOBS = ("/usr/lib/jvm/*/bin/java", "/opt/*/bin/java", "/opt/*/*/bin/java")


class RegistryRuntimeError(BrokerError):
    """The local schema registry could not be fetched, started or stopped (or no Java 21+ was found)."""


@dataclass(frozen=True)
class RegistryStatus:
    running: bool
    pid: int | None
    url: str | None
    state_dir: Path
    version: str


def registry_app_dir(cache_dir: Path | None = None, version: str = DEFAULT_REGISTRY_VERSION) -> Path:
    return (cache_dir or default_cache_dir()) / f"apicurio-registry-{version}" / "app"


def registry_complete(app_dir: Path, version: str) -> bool:
    data = read_state_file(app_dir.parent / FETCH_MARKER)
    return data.get("version") == version and (app_dir / "quarkus-run.jar").is_file()


def ensure_registry(cache_dir: Path | None = None, version: str = DEFAULT_REGISTRY_VERSION) -> Path:
    """Fetch and unpack Apicurio Registry ``version`` once (under a lock); return its app dir."""
    app_dir = registry_app_dir(cache_dir, version)
    version_dir = app_dir.parent
    with file_lock(version_dir / ".lock"):
        if registry_complete(app_dir, version):
            return app_dir
        mvn = clear_for_fetch(version_dir, app_dir, f"Apicurio Registry {version}", RegistryRuntimeError)
        started = time.monotonic()
        download = version_dir / f"download.partial-{os.getpid()}"
        unpacked = version_dir / f"app.partial-{os.getpid()}"
        try:
            args = [f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={REGISTRY_ARTIFACT.format(version=version)}"]
            args.append(f"-DoutputDirectory={download}")
            run_mvn(mvn, args, version_dir, download, f"Apicurio Registry {version}", RegistryRuntimeError)
            archives = sorted(download.glob("*.tar.gz"))
            if not archives:
                raise RegistryRuntimeError(f"the fetch of Apicurio Registry {version} brought no tar.gz")
            artifact = archives[0].name
            unpacked.mkdir()
            with tarfile.open(archives[0], "r:gz") as archive:
                if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
                    archive.extractall(unpacked, filter="data")
                else:  # pragma: no cover - the archive is Maven Central's, checked by its checksum
                    archive.extractall(unpacked)
            if not (unpacked / "quarkus-run.jar").is_file():
                raise RegistryRuntimeError(
                    f"the Apicurio Registry {version} archive {archives[0].name} has no quarkus-run.jar"
                )
            os.replace(unpacked, app_dir)
        finally:
            shutil.rmtree(download, ignore_errors=True)
            shutil.rmtree(unpacked, ignore_errors=True)
        write_state_file(version_dir / FETCH_MARKER, {"version": version, "artifact": artifact})
        log.info("fetched Apicurio Registry %s in %.1fs", version, time.monotonic() - started)
        return app_dir


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_java_version(out.stderr + out.stdout)


def java_candidates() -> list[str]:
    """Every ``java`` to try, in order: the registry's JDK, ``JAVA_HOME``, ``PATH``, installed JDKs."""
    found: list[str] = []
    for env in (ENV_REGISTRY_JAVA_HOME, "JAVA_HOME"):
        home = os.environ.get(env)
        if home:
            found.append(str(Path(home) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        found.append(on_path)
    for pattern in _JDK_GLOBS:
        found.extend(sorted(glob.glob(pattern), reverse=True))
    unique: list[str] = []
    for java in found:
        if java not in unique and os.path.isfile(java) and os.access(java, os.X_OK):
            unique.append(java)
    return unique


def find_registry_java(minimum: int = MIN_REGISTRY_JAVA_VERSION) -> str:
    """The first :func:`java_candidates` entry of version ``minimum`` or newer."""
    seen: list[str] = []
    for java in java_candidates():
        major = _java_major(java)
        if major is not None and major >= minimum:
            return java
        seen.append(f"{java} (Java {major if major is not None else '?'})")
    tried = ", ".join(seen) or "no java at all"
    raise RegistryRuntimeError(
        f"the local schema registry (Apicurio Registry) needs Java {minimum} or newer; found {tried}. "
        f"Install a JDK {minimum}+ (e.g. apt-get install openjdk-21-jre-headless, or Temurin) and set "
        f"{ENV_REGISTRY_JAVA_HOME} (or JAVA_HOME) to its home"
    )


class LocalSchemaRegistry:
    """One Apicurio Registry process for one state dir, on 127.0.0.1."""

    def __init__(
        self,
        state_dir: Path,
        *,
        port: int | None = None,
        cache_dir: Path | None = None,
        version: str = DEFAULT_REGISTRY_VERSION,
        heap: str = "384m",
    ) -> None:
        self.state_dir = Path(state_dir)
        self.cache_dir = cache_dir
        self.version = version
        self.heap = heap
        self._requested_port = port
        self._process: subprocess.Popen[bytes] | None = None
        state = read_state_file(self.state_dir / STATE_FILE)
        self.port = int(str(state.get("port") or port or 0))
        self.management_port = int(str(state.get("management_port") or 0))

    pid_file = StatePath(PID_FILE)
    out_file = StatePath(OUT_FILE)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API's URL (what ``SchemaRegistryClient`` takes)."""
        return self.base_url + CCOMPAT_PATH

    def _marker(self) -> str:
        return f"-Dairflow_kafka_events.registry_state={self.state_dir.resolve()}"

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text("utf-8").strip())
        except (OSError, ValueError):
            return None

    def _is_ours(self, pid: int) -> bool:
        args = process_args(pid)
        return bool(args) and any(self._marker() in arg for arg in args or ())

    def _running_pid(self) -> int | None:
        pid = self._read_pid()
        if pid is not None and pid_exists(pid) and self._is_ours(pid):
            return pid
        return None

    def status(self) -> RegistryStatus:
        pid = self._running_pid()
        return RegistryStatus(
            running=pid is not None,
            pid=pid,
            url=self.url if self.port else None,
            state_dir=self.state_dir,
            version=self.version,
        )

    def _choose_ports(self) -> None:
        wanted = self._requested_port or self.port
        if not wanted or not port_is_free(wanted):
            wanted = free_ports(1)[0]
        management = self.management_port
        if not management or management == wanted or not port_is_free(management):
            management = next(p for p in free_ports(2) if p != wanted)
        self.port, self.management_port = wanted, management
        write_state_file(
            self.state_dir / STATE_FILE,
            {"port": self.port, "management_port": self.management_port, "version": self.version},
        )

    def start(self, timeout: float = 120.0) -> RegistryStatus:
        """Start the registry (fetching it first when needed) and wait until its API answers."""
        deadline = time.monotonic() + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            if self._running_pid() is not None:
                return self.status()
            java = find_registry_java()
            app_dir = ensure_registry(self.cache_dir, self.version)
            self._choose_ports()
            cmd = [
                java,
                f"-Xmx{self.heap}",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                self._marker(),
                f"-Dquarkus.http.host={HOST}",
                f"-Dquarkus.http.port={self.port}",
                f"-Dquarkus.management.host={HOST}",
                f"-Dquarkus.management.port={self.management_port}",
                "-Dquarkus.log.level=WARN",
                "-Dquarkus.http.access-log.enabled=false",
                "-jar",
                str(app_dir / "quarkus-run.jar"),
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
            log.info("started Apicurio Registry %s (pid %d) on %s", self.version, self._process.pid, self.url)
            return self._wait_ready(deadline)

    def _startup_failure(self, summary: str) -> RegistryRuntimeError:
        text = tail(self.out_file)
        detail = f"\n--- tail of {self.out_file} ---\n{text}" if text else ""
        return RegistryRuntimeError(f"{summary} (log: {self.out_file}){detail}")

    def _wait_ready(self, deadline: float) -> RegistryStatus:
        last_error: object = "no answer yet"
        while True:
            proc = self._process
            code = proc.poll() if proc is not None else None
            if code is not None:
                self.pid_file.unlink(missing_ok=True)
                self._process = None
                raise self._startup_failure(f"the schema registry exited during start (exit code {code})")
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=2.0) as response:
                    json.loads(response.read())
                return self.status()
            except (OSError, ValueError) as exc:  # URLError is an OSError
                last_error = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL)
        try:
            self.stop(timeout=10.0)
        except RegistryRuntimeError:
            log.warning("could not stop the schema registry that failed to start", exc_info=True)
        raise self._startup_failure(f"the schema registry was not ready in time (last error: {last_error})")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop this state dir's registry by pid: SIGTERM, then SIGKILL after ``timeout``."""
        pid = self._running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            self._process = None
            return
        signal_pid(pid, signal.SIGTERM, "the schema registry", RegistryRuntimeError)
        if not wait_gone(pid, self._process, time.monotonic() + timeout):
            log.warning("schema registry pid %d did not stop within %.0fs; killing it", pid, timeout)
            if self._is_ours(pid):
                signal_pid(pid, signal.SIGKILL, "the schema registry", RegistryRuntimeError)
            if not wait_gone(pid, self._process, time.monotonic() + 10.0):
                raise RegistryRuntimeError(f"the schema registry (pid {pid}) does not stop")
        self.pid_file.unlink(missing_ok=True)
        self._process = None

    def __repr__(self) -> str:
        return f"LocalSchemaRegistry(state_dir={str(self.state_dir)!r}, port={self.port})"

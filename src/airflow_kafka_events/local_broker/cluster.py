"""A local KRaft cluster of N nodes (N processes, an N-voter controller quorum), PLAINTEXT or SASL_SSL.

Layout of a cluster's state dir::

    cluster.json       size, security, cluster id, Kafka version and each node's ports
    node-<id>/         one :class:`LocalKafkaBroker` state dir per node (own ports, storage, logs)
    security/          CA, server certificate, SCRAM credentials (SASL_SSL only; see security.py)
    client.properties  librdkafka settings for clients (mode 0600: holds the password)

Every node is broker and controller; all of them are voters of the quorum (``controller.quorum.voters``),
so a 3-node cluster survives one node down and loses its quorum with two down.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker import java as _java
from airflow_kafka_events.local_broker._common import (
    DEFAULT_KAFKA_VERSION,
    HOST,
    POLL_INTERVAL,
    STATE_FILE,
    ClusterStatus,
    NodeStatus,
    default_cache_dir,
    default_state_dir,
    file_lock,
    free_ports,
    heap_bytes,
    new_cluster_id,
    read_state_file,
    write_atomic,
    write_state_file,
)
from airflow_kafka_events.local_broker.broker import ClusterContext, LocalKafkaBroker, StatePath
from airflow_kafka_events.local_broker.properties import replication_for
from airflow_kafka_events.local_broker.security import (
    MASK,
    SECURITY_CHOICES,
    SECURITY_DIR,
    SECURITY_PLAINTEXT,
    SECURITY_SASL_SSL,
    SecurityMaterial,
    ensure_security,
    load_security,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

CLUSTER_FILE = "cluster.json"
CLIENT_PROPERTIES = "client.properties"
MAX_BROKERS = 5
DEFAULT_CLUSTER_HEAP = "256m"


def is_cluster_dir(state_dir: Path) -> bool:
    return (Path(state_dir) / CLUSTER_FILE).is_file()


def wants_cluster(state_dir: Path | None, brokers: int | None, security: str | None) -> bool:
    """Whether a state dir and these options mean a :class:`LocalKafkaCluster` (else the single broker)."""
    sd = Path(state_dir).expanduser() if state_dir else default_state_dir()
    return is_cluster_dir(sd) or (brokers or 1) > 1 or (security or SECURITY_PLAINTEXT) != SECURITY_PLAINTEXT


class LocalKafkaCluster:
    """``brokers`` Kafka nodes on 127.0.0.1 sharing one cluster id, optionally SASL_SSL.

    ``brokers``/``security``: ``None`` keeps what the state dir records (a new one: 1 and
    ``plaintext``); a value that contradicts the recorded cluster is an error.
    """

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        brokers: int | None = None,
        security: str | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        cache_dir: Path | None = None,
        heap: str = DEFAULT_CLUSTER_HEAP,
    ) -> None:
        self.state_dir = Path(state_dir).expanduser().absolute() if state_dir else default_state_dir()
        self.cache_dir = Path(cache_dir).expanduser().absolute() if cache_dir else default_cache_dir()
        self.version = version
        self.heap = heap
        if (self.state_dir / STATE_FILE).is_file():
            raise BrokerError(
                f"{self.state_dir} holds a single-node broker; use another --state-dir for a cluster"
            )
        recorded = read_state_file(self.state_dir / CLUSTER_FILE)
        picked_brokers = self._pick("brokers", brokers, recorded.get("brokers"))
        picked_security = self._pick("security", security, recorded.get("security"))
        self.brokers: int = picked_brokers if isinstance(picked_brokers, int) else 1
        self.security: str = picked_security if isinstance(picked_security, str) else SECURITY_PLAINTEXT
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise BrokerError(f"--brokers must be between 1 and {MAX_BROKERS}, got {self.brokers}")
        if self.security not in SECURITY_CHOICES:
            raise BrokerError(
                f"unknown security {self.security!r}: choose one of {', '.join(SECURITY_CHOICES)}"
            )
        cluster_id = recorded.get("cluster_id")
        self.cluster_id = cluster_id if isinstance(cluster_id, str) and cluster_id else new_cluster_id()
        self._ports = self._choose_ports(recorded.get("nodes"))
        self.material: SecurityMaterial | None = (
            load_security(self.security_dir) if self.security == SECURITY_SASL_SSL else None
        )
        self.nodes = self._make_nodes()

    # ------------------------------------------------------------------ configuration
    def _pick(self, what: str, given: object, recorded: object) -> object:
        if recorded is not None and given is not None and given != recorded:
            raise BrokerError(
                f"{self.state_dir} holds a cluster with {what}={recorded}, not {given}; "
                "use another --state-dir (or delete this one)"
            )
        return given if given is not None else recorded

    def _choose_ports(self, recorded: object) -> list[tuple[int, int]]:
        if isinstance(recorded, list) and len(recorded) == self.brokers:
            try:
                return [(int(n["port"]), int(n["controller_port"])) for n in recorded]
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring unreadable node ports in %s", self.state_dir / CLUSTER_FILE)
        ports = free_ports(2 * self.brokers)
        return [(ports[2 * i], ports[2 * i + 1]) for i in range(self.brokers)]

    security_dir = StatePath(SECURITY_DIR)
    properties_file = StatePath(CLIENT_PROPERTIES)

    @property
    def voters(self) -> str:
        return ",".join(f"{i + 1}@{HOST}:{cp}" for i, (_p, cp) in enumerate(self._ports))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{p}" for p, _cp in self._ports)

    @property
    def replication(self) -> tuple[int, int]:
        """``(replication factor, min.insync.replicas)`` of this cluster's topics by default."""
        return replication_for(self.brokers)

    def _make_nodes(self) -> list[LocalKafkaBroker]:
        context = ClusterContext(self.cluster_id, self.voters, self.brokers, self.material)
        return [
            LocalKafkaBroker(
                state_dir=self.state_dir / f"node-{i + 1}",
                port=port,
                controller_port=controller_port,
                version=self.version,
                cache_dir=self.cache_dir,
                heap=self.heap,
                node_id=i + 1,
                cluster=context,
            )
            for i, (port, controller_port) in enumerate(self._ports)
        ]

    def node(self, node_id: int) -> LocalKafkaBroker:
        if not 1 <= node_id <= len(self.nodes):
            raise BrokerError(f"no node {node_id} in a cluster of {len(self.nodes)}")
        return self.nodes[node_id - 1]

    def _write_state(self) -> None:
        state = {
            "brokers": self.brokers,
            "security": self.security,
            "cluster_id": self.cluster_id,
            "version": self.version,
            "nodes": [
                {"id": i + 1, "port": p, "controller_port": cp} for i, (p, cp) in enumerate(self._ports)
            ],
        }
        write_state_file(self.state_dir / CLUSTER_FILE, state)

    # ------------------------------------------------------------------ clients
    def client_config(self, *, show_password: bool = True) -> dict[str, str]:
        """librdkafka settings that reach every node (password masked unless ``show_password``)."""
        if self.material is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        return self.material.client_config(self.bootstrap_servers, show_password=show_password)

    def airflow_connection(self, conn_id: str = "kafka_default", *, show_password: bool = False) -> str:
        """``AIRFLOW_CONN_<ID>='{...}'``: an Airflow Kafka connection, ready to paste into a shell."""
        conn = {"conn_type": "kafka", "extra": self.client_config(show_password=show_password)}
        text = json.dumps(conn)
        name = "AIRFLOW_CONN_" + "".join(c if c.isalnum() else "_" for c in conn_id).upper()
        return f"{name}='{text}'"

    def _write_client_properties(self) -> None:
        lines = [f"# librdkafka settings of the local cluster in {self.state_dir}"]
        lines += [f"{k}={v}" for k, v in self.client_config().items()]
        write_atomic(self.properties_file, "\n".join(lines) + "\n", mode=0o600)

    # ------------------------------------------------------------------ status
    def status(self) -> ClusterStatus:
        nodes = []
        for node in self.nodes:
            st = node.status()
            nodes.append(
                NodeStatus(node.node_id, st.running, st.pid, node.port, node.controller_port, node.state_dir)
            )
        return ClusterStatus(
            nodes=tuple(nodes),
            bootstrap_servers=self.bootstrap_servers,
            security=self.security,
            state_dir=self.state_dir,
            version=self.version,
            cluster_id=self.cluster_id if is_cluster_dir(self.state_dir) else None,
            client_config=self.client_config(show_password=False),
            properties_file=self.properties_file if self.properties_file.is_file() else None,
        )

    def report(self, *, conn_id: str = "kafka_default", show_password: bool = False) -> list[str]:
        """What ``airflow-kafka-events kafka status`` prints: the cluster, each node, how to connect."""
        st = self.status()
        state = "running" if st.running else "degraded" if st.any_running else "stopped"
        lines = [
            f"{state} brokers={self.brokers} security={self.security} cluster_id={st.cluster_id} "
            f"version={self.version} state_dir={self.state_dir}"
        ]
        for n in st.nodes:
            lines.append(
                f"node {n.node_id} {'running' if n.running else 'stopped'} pid={n.pid} "
                f"port={n.port} controller_port={n.controller_port} state_dir={n.state_dir}"
            )
        rf, min_isr = self.replication
        lines += [
            f"bootstrap.servers={self.bootstrap_servers}",
            f"topics default to replication.factor={rf} min.insync.replicas={min_isr}",
            f"properties={self.properties_file}  (librdkafka settings for --properties)",
            self.airflow_connection(conn_id, show_password=show_password),
        ]
        if self.material is not None and not show_password:
            lines.append(
                f"# sasl.password masked: --show-password prints it (also in {self.properties_file})"
            )
        return lines

    # ------------------------------------------------------------------ start / stop
    def start(self, timeout: float = 240.0) -> ClusterStatus:
        """Start every node that is not running and wait until the whole cluster serves requests.

        Ready means: the metadata lists every broker and a topic replicated to all of them (up to
        3) can be created and deleted.  Idempotent.
        """
        deadline = time.monotonic() + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            down = [n for n in self.nodes if not n.status().running]
            if not down:
                return self.status()
            for node in down:
                node.check_ports()
            heap_bytes(self.heap)
            java = _java.check_java()
            libs = self.nodes[0].ensure_jars()
            if self.security == SECURITY_SASL_SSL:
                self.material = ensure_security(self.security_dir)
                self.nodes = self._make_nodes()
                down = [self.node(n.node_id) for n in down]
            self._write_state()
            self._write_client_properties()
            with ThreadPoolExecutor(max_workers=len(down)) as pool:  # formats are JVM starts: overlap them
                list(pool.map(lambda n: n.prepare(java, libs), down))
            for node in down:
                node.launch(java, libs)
            try:
                self._wait_ready(deadline, down)
            except BaseException:
                self.stop(timeout=10.0)
                raise
            return self.status()

    def _admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        return AdminClient(
            {**self.client_config(), "socket.connection.setup.timeout.ms": 2000, "log_level": 2}
        )

    def _check_launched(self, launched: list[LocalKafkaBroker]) -> None:
        for node in launched:
            code = node.process_exited()
            if code is not None:
                node.pid_file.unlink(missing_ok=True)
                raise node.startup_failure(
                    f"node {node.node_id} of the Kafka cluster exited during start (exit code {code})"
                )

    def _wait_ready(self, deadline: float, launched: list[LocalKafkaBroker]) -> None:
        last_error: object = "no node answered"
        admin = self._admin()
        while True:
            self._check_launched(launched)
            if time.monotonic() >= deadline:
                break
            try:
                self._probe(admin, deadline)
                return
            except Exception as exc:  # any failure is retried until the deadline
                last_error = exc
                time.sleep(POLL_INTERVAL)
        worst = launched[0]
        raise worst.startup_failure(
            f"the Kafka cluster was not ready within the deadline (last error: {last_error})"
        )

    def _probe(self, admin: AdminClient, deadline: float) -> None:
        from confluent_kafka.admin import NewTopic

        remaining = max(1.0, min(10.0, deadline - time.monotonic()))
        brokers = admin.list_topics(timeout=remaining).brokers
        if len(brokers) < self.brokers:
            raise BrokerError(f"{len(brokers)} of {self.brokers} brokers registered")
        rf, _min_isr = self.replication
        topic = f"__airflow_kafka_events_ready_{uuid.uuid4().hex[:12]}"
        admin.create_topics([NewTopic(topic, 1, rf)], operation_timeout=remaining)[topic].result(
            timeout=remaining
        )
        admin.delete_topics([topic], operation_timeout=remaining)[topic].result(timeout=remaining)

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop every node by pid (SIGTERM to all, then SIGKILL after ``timeout``); return the pids."""
        pids = [(node, node.signal_stop()) for node in self.nodes]
        for node, pid in pids:
            if pid is not None:
                node.finish_stop(pid, timeout)
        return [pid for _node, pid in pids if pid is not None]

    # ------------------------------------------------------------------ one node (failover tests)
    def kill_node(self, node_id: int) -> int | None:
        """SIGKILL one node (after checking its pid is ours): a crash, not a clean shutdown."""
        return self.node(node_id).kill()

    def start_node(self, node_id: int, timeout: float = 120.0) -> float:
        """Restart one node and wait until the cluster metadata lists it again; return the seconds taken."""
        began = time.monotonic()
        deadline = began + timeout
        node = self.node(node_id)
        if node.status().running:
            return 0.0
        java = _java.check_java()
        libs = node.ensure_jars()
        node.check_ports()
        node.prepare(java, libs)
        node.launch(java, libs)
        admin = self._admin()
        self._wait(
            deadline, lambda: node_id in self._live_brokers(admin), [node], f"node {node_id} to rejoin"
        )
        return time.monotonic() - began

    def _live_brokers(self, admin: AdminClient) -> set[int]:
        try:
            return set(admin.list_topics(timeout=5).brokers)
        except Exception:  # no node answers yet
            return set()

    def _wait(
        self, deadline: float, condition: Callable[[], bool], launched: list[LocalKafkaBroker], what: str
    ) -> None:
        while not condition():
            self._check_launched(launched)
            if time.monotonic() >= deadline:
                raise launched[0].startup_failure(f"timed out waiting for {what}")
            time.sleep(POLL_INTERVAL)

    def __repr__(self) -> str:
        return (
            f"LocalKafkaCluster(state_dir={str(self.state_dir)!r}, brokers={self.brokers}, "
            f"security={self.security!r}, version={self.version!r})"
        )


def masked(config: dict[str, str]) -> dict[str, str]:
    """``config`` with its password masked."""
    return {k: (MASK if k == "sasl.password" else v) for k, v in config.items()}

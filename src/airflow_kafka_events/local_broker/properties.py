"""``server.properties`` of one node: single-node or one of a cluster, PLAINTEXT or SASL_SSL.

Every node runs broker and controller in one JVM (KRaft combined mode).  Listeners:

* ``CONTROLLER`` (the KRaft quorum) is always PLAINTEXT on 127.0.0.1: SCRAM cannot serve the
  controller listener (KAFKA-15513), and the quorum never leaves loopback;
* clients use ``PLAINTEXT`` or ``SASL_SSL`` (SCRAM-SHA-512 over TLS); the brokers replicate
  among themselves over the same listener as the clients, with a broker SCRAM user of their own
  in SASL_SSL mode, so no unauthenticated listener serves data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from airflow_kafka_events.local_broker._common import DATA_DIR, HOST
from airflow_kafka_events.local_broker.security import SASL_SSL_LISTENER, SecurityMaterial


def replication_for(brokers: int) -> tuple[int, int]:
    """``(replication factor, min.insync.replicas)`` for a cluster of ``brokers``.

    RF = min(3, brokers); min ISR = RF - 1 when RF >= 2 (one replica may be down and acks=all
    writes still succeed), else 1.
    """
    rf = max(1, min(3, brokers))
    return rf, (rf - 1 if rf >= 2 else 1)


def render_server_properties(
    *,
    state_dir: Path,
    port: int,
    controller_port: int,
    node_id: int = 1,
    host: str = HOST,
    voters: str | None = None,
    brokers: int = 1,
    security: SecurityMaterial | None = None,
) -> str:
    """``server.properties`` of a broker+controller listening on ``host`` only.

    ``voters``: the controller quorum (``id@host:port,...``; default: this node alone);
    ``brokers``: the cluster's size, which sets the internal topics' replication;
    ``security``: SASL_SSL material, ``None`` for PLAINTEXT.
    """
    data_dir = Path(state_dir) / DATA_DIR
    rf, min_isr = replication_for(brokers)
    client = SASL_SSL_LISTENER if security is not None else "PLAINTEXT"
    props: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters or f"{node_id}@{host}:{controller_port}",
        "listeners": f"{client}://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"{client}://{host}:{port}",
        "listener.security.protocol.map": f"{client}:{client},CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": client,
    }
    if security is not None:
        props.update(security.server_properties())
    props.update(
        {
            "log.dirs": str(data_dir),
            "num.partitions": 3,
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
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
    )
    if brokers > 1:
        props.update(_CLUSTER_TIMINGS)
    return _render(props)


#: A local cluster notices a killed node within seconds, not the production defaults' tens.
_CLUSTER_TIMINGS: Mapping[str, str | int] = {
    "broker.session.timeout.ms": 6000,
    "broker.heartbeat.interval.ms": 1000,
    "replica.lag.time.max.ms": 10000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.timeout.ms": 1000,
    "unclean.leader.election.enable": "false",
}


def _render(props: Mapping[str, str | int]) -> str:
    lines = ["# Written by airflow-kafka-events on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"

"""A real 3-node KRaft cluster: every node listed, replicated topics, kill -9 of a leader, acks=all.

One cluster for the module (``cluster3``); a test that kills a node gets it back through the
``healthy`` fixture.  Figures (failover, rejoin) are printed with ``-s``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster
from integration.cluster.support import Tail, isr_complete, partitions, read_all, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CLI = [sys.executable, "-m", "airflow_kafka_events.cli.main"]
RECORDS = 100
ISR_DEADLINE = 90.0


def _topic(cluster: LocalKafkaCluster, *, partitions: int = 3, config: dict[str, str] | None = None) -> str:
    name = f"c-{uuid.uuid4().hex[:10]}"
    ensure_topics(
        AdminClient(cluster.client_config()), [TopicSpec(name, partitions=partitions, config=config or {})]
    )
    return name


def _producer(cluster: LocalKafkaCluster, **extra: object) -> Producer:
    return Producer(
        {**cluster.client_config(), "acks": "all", "enable.idempotence": True, "linger.ms": 1, **extra}
    )


def _produce(producer: Producer, topic: str, values: list[bytes], *, timeout: float = 60.0) -> list[object]:
    errors: list[object] = []
    for value in values:
        producer.produce(
            topic, value=value, on_delivery=lambda err, _msg: errors.append(err) if err else None
        )
    assert producer.flush(timeout) == 0, "records left undelivered"
    return errors


def test_every_node_is_listed_with_its_own_ports_storage_and_one_cluster_id(
    healthy: LocalKafkaCluster,
) -> None:
    status = subprocess.run(
        [*CLI, "kafka", "status", "--state-dir", str(healthy.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert status.returncode == 0, status.stderr
    nodes = re.findall(r"^node (\d) running pid=(\d+) port=(\d+) controller_port=(\d+)", status.stdout, re.M)
    assert [n[0] for n in nodes] == ["1", "2", "3"]
    ports = [int(p) for n in nodes for p in n[2:]]
    assert len(set(ports)) == 6
    assert f"bootstrap.servers={healthy.bootstrap_servers}" in status.stdout
    assert "AIRFLOW_CONN_KAFKA_DEFAULT=" in status.stdout
    meta = {(healthy.state_dir / f"node-{i}" / "data" / "meta.properties").read_text() for i in (1, 2, 3)}
    cluster_ids = {re.search(r"cluster\.id=(\S+)", m).group(1) for m in meta}  # type: ignore[union-attr]
    assert cluster_ids == {healthy.cluster_id}
    assert len({re.search(r"node\.id=(\d+)", m).group(1) for m in meta}) == 3  # type: ignore[union-attr]
    props = (healthy.state_dir / "node-2" / "server.properties").read_text()
    for line in (
        "offsets.topic.replication.factor=3",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "min.insync.replicas=2",
        "controller.listener.names=CONTROLLER",
    ):
        assert line in props.splitlines()
    voters = re.search(r"^controller\.quorum\.voters=(.+)$", props, re.M)
    assert voters is not None and len(voters.group(1).split(",")) == 3
    assert set(AdminClient(healthy.client_config()).list_topics(timeout=10).brokers) == {1, 2, 3}


def test_ensure_topics_defaults_to_rf3_and_min_isr2(healthy: LocalKafkaCluster) -> None:
    admin = AdminClient(healthy.client_config())
    topic = _topic(healthy)

    parts = partitions(admin, topic)
    assert len(parts) == 3
    assert all(len(p.replicas) == 3 and p.leader in (1, 2, 3) for p in parts.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    config = next(iter(admin.describe_configs([resource]).values())).result(timeout=10)
    assert config["min.insync.replicas"].value == "2"


def test_kill_9_of_a_leader_keeps_produce_and_consume_whole(healthy: LocalKafkaCluster) -> None:
    admin = AdminClient(healthy.client_config())
    topic = _topic(healthy)
    producer = _producer(healthy)
    tail = Tail(healthy.client_config(), topic, 3)
    try:
        before = [f"before-{i}".encode() for i in range(RECORDS)]
        assert _produce(producer, topic, before) == []
        assert len(tail.read_until(RECORDS, timeout=60)) == RECORDS
        leader = partitions(admin, topic)[0].leader

        killed_at = time.monotonic()
        assert healthy.kill_node(leader) is not None
        first = [b"after-0"]
        assert _produce(producer, topic, first) == []  # waits out the leader election
        failover = time.monotonic() - killed_at
        after = first + [f"after-{i}".encode() for i in range(1, RECORDS)]
        assert _produce(producer, topic, after[1:]) == []
        new_leader = partitions(admin, topic)[0].leader
        assert new_leader not in (leader, -1)

        seen = tail.read_until(2 * RECORDS, timeout=60)
        assert sorted(seen) == sorted(before + after)  # every record, once
        grouped = read_all(healthy.client_config(), topic, 2 * RECORDS)  # through a group coordinator
        assert sorted(grouped) == sorted(before + after)

        rejoin = healthy.start_node(leader)
        restarted_at = time.monotonic()
        wait_until(lambda: isr_complete(admin, topic, 3), timeout=ISR_DEADLINE, what="the ISR back to 3")
        isr_back = time.monotonic() - restarted_at
        print(
            f"\nkill -9 of leader {leader}: first acks=all delivery after {failover:.2f}s (new leader "
            f"{new_leader}); back in the metadata {rejoin:.1f}s after restart, ISR 3 {isr_back:.1f}s later"
        )
    finally:
        tail.close()


def test_acks_all_is_real_min_isr_3_refuses_writes_with_a_node_down(healthy: LocalKafkaCluster) -> None:
    admin = AdminClient(healthy.client_config())
    topic = _topic(healthy, partitions=1, config={"min.insync.replicas": "3"})
    producer = _producer(healthy)
    assert _produce(producer, topic, [b"all-three"]) == []
    victim = next(n for n in (1, 2, 3) if n != partitions(admin, topic)[0].leader)

    healthy.kill_node(victim)
    wait_until(lambda: isr_complete(admin, topic, 2), timeout=ISR_DEADLINE, what="the ISR shrinking to 2")
    cb_errors: list[KafkaError] = []
    refused = _producer(healthy, **{"message.timeout.ms": 8000, "error_cb": cb_errors.append})
    began = time.monotonic()
    errors = _produce(refused, topic, [b"two-of-three"], timeout=30)
    elapsed = time.monotonic() - began

    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, KafkaError)
    assert err.code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT), str(err)
    print(f"\nmin.insync.replicas=3 with a node down: {err.name()} after {elapsed:.1f}s ({err.str()})")

    healthy.start_node(victim)
    wait_until(lambda: isr_complete(admin, topic, 3), timeout=ISR_DEADLINE, what="the ISR back to 3")
    assert _produce(_producer(healthy), topic, [b"three-again"]) == []
    assert sorted(read_all(healthy.client_config(), topic, 2)) == [b"all-three", b"three-again"]


def test_cli_stop_stops_every_node_by_pid(
    tmp_path_factory: pytest.TempPathFactory, healthy: LocalKafkaCluster
) -> None:
    pids = [n.pid for n in healthy.status().nodes]
    assert all(pids)

    stopped = subprocess.run(
        [*CLI, "kafka", "stop", "--state-dir", str(healthy.state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"stopped (pids {', '.join(map(str, pids))})"
    assert not healthy.status().any_running
    status = subprocess.run(
        [*CLI, "kafka", "status", "--state-dir", str(healthy.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 3 and status.stdout.startswith("stopped brokers=3")
    assert json.loads((healthy.state_dir / "cluster.json").read_text())["brokers"] == 3
    began = time.monotonic()
    healthy.start(timeout=240)  # a warm start of the whole cluster, same ports and storage
    print(f"\nwarm start of the 3 nodes: {time.monotonic() - began:.1f}s")
    assert healthy.status().running

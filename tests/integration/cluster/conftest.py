"""A 3-node KRaft cluster shared by the tests of a module (started once, stopped at the end)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster

START_TIMEOUT = 240.0


def start_cluster(state_dir: Path, *, brokers: int, security: str = "plaintext") -> LocalKafkaCluster:
    cluster = LocalKafkaCluster(state_dir=state_dir, brokers=brokers, security=security)
    began = time.monotonic()
    cluster.start(timeout=START_TIMEOUT)
    print(f"\n{brokers}-node {security} cluster started in {time.monotonic() - began:.1f}s")
    return cluster


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("cluster3"), brokers=3)
    try:
        yield cluster
    finally:
        cluster.stop(timeout=20.0)


@pytest.fixture
def healthy(cluster3: LocalKafkaCluster) -> Iterator[LocalKafkaCluster]:
    """The cluster with every node running before and after the test (a test may kill nodes)."""
    _restart_down_nodes(cluster3)
    yield cluster3
    _restart_down_nodes(cluster3)


def _restart_down_nodes(cluster: LocalKafkaCluster) -> None:
    for node in cluster.status().nodes:
        if not node.running:
            cluster.start_node(node.node_id)

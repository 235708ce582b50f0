"""Replication defaults of ``ensure_topics``: RF = min(3, brokers), min.insync.replicas = RF - 1."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kafka_events.kafka.topics import TopicSpec, default_replication, ensure_topics, with_replication

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("brokers", "rf"), [(0, 1), (1, 1), (2, 2), (3, 3), (7, 3)])
def test_default_replication_is_the_cluster_size_up_to_3(brokers: int, rf: int) -> None:
    assert default_replication(brokers) == rf


@pytest.mark.parametrize(
    ("spec", "brokers", "rf", "min_isr"),
    [
        (TopicSpec("t"), 1, 1, None),
        (TopicSpec("t"), 2, 2, "1"),
        (TopicSpec("t"), 3, 3, "2"),
        (TopicSpec("t"), 5, 3, "2"),
        (TopicSpec("t", replication_factor=1), 3, 1, None),
        (TopicSpec("t", replication_factor=2), 3, 2, "1"),
        (TopicSpec("t", config={"min.insync.replicas": "3"}), 3, 3, "3"),
    ],
)
def test_with_replication(spec: TopicSpec, brokers: int, rf: int, min_isr: str | None) -> None:
    settled = with_replication(spec, brokers)

    assert settled.replication_factor == rf
    assert settled.topic_config().get("min.insync.replicas") == min_isr


def test_a_spec_without_replication_asks_the_broker_default() -> None:
    assert TopicSpec("t").to_new_topic().replication_factor == -1


class FakeFuture:
    def result(self, timeout: float | None = None) -> None:
        return None


class FakeAdmin:
    """Just enough AdminClient: a cluster of ``brokers`` where created topics are ready at once."""

    def __init__(self, brokers: int) -> None:
        self.brokers = {i: object() for i in range(1, brokers + 1)}
        self.created: list[Any] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        ready = SimpleNamespace(error=None, partitions={0: SimpleNamespace(leader=1)})
        return SimpleNamespace(brokers=self.brokers, topics={t.topic: ready for t in self.created})

    def create_topics(self, topics: list[Any], operation_timeout: float = 0) -> dict[str, FakeFuture]:
        self.created += topics
        return {t.topic: FakeFuture() for t in topics}


def test_ensure_topics_reads_the_cluster_size_from_the_metadata() -> None:
    admin = FakeAdmin(brokers=3)

    ensure_topics(admin, [TopicSpec("a"), TopicSpec("b", replication_factor=1)])  # type: ignore[arg-type]

    a, b = admin.created
    assert (a.replication_factor, a.config) == (3, {"min.insync.replicas": "2"})
    assert (b.replication_factor, b.config) == (1, {})

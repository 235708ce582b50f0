"""Shared code of the cluster tests: waiting on conditions, reading topics, partition state."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(interval)


def partitions(admin: AdminClient, topic: str) -> dict[int, Any]:
    """``{partition: PartitionMetadata}`` (leader, replicas, isrs) of ``topic``; ``{}`` when unknown."""
    try:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
    except Exception:  # a node is down and the request timed out: the caller polls again
        return {}
    if meta is None or meta.error is not None:
        return {}
    return dict(meta.partitions)


def isr_complete(admin: AdminClient, topic: str, replicas: int) -> bool:
    parts = partitions(admin, topic)
    return bool(parts) and all(len(p.isrs) == replicas and p.leader >= 0 for p in parts.values())


def read_all(config: Mapping[str, Any], topic: str, expected: int, *, timeout: float = 60.0) -> list[bytes]:
    """Values of ``topic`` read in a fresh consumer group until ``expected`` arrived (or ``timeout``)."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"cluster-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is None:
                    values.append(msg.value())
                elif msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(str(msg.error()))
        # a record delivered twice would come after ``expected``: give it a moment to show up
        for msg in consumer.consume(num_messages=500, timeout=1.0):
            if msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


class Tail:
    """A consumer assigned to every partition of a topic from the start, without a group."""

    def __init__(self, config: Mapping[str, Any], topic: str, partition_count: int) -> None:
        self.consumer = Consumer(
            {**config, "group.id": f"tail-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partition_count)])
        self.values: list[bytes] = []

    def read_until(self, count: int, *, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while len(self.values) < count and time.monotonic() < deadline:
            for msg in self.consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is None:
                    self.values.append(msg.value())
        return self.values

    def close(self) -> None:
        self.consumer.close()

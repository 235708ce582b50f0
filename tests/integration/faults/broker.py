"""A broker of their own for the fault tests: stopped and restarted on the same address.

The broker shared by the whole test run serves every other test, so fault tests never stop
it.  This one lives in a temporary state dir; its ports are chosen once and recorded there, so
a restart keeps the same ``bootstrap.servers``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.broker import LocalKafkaBroker

START_TIMEOUT = 240.0


class FaultBroker:
    def __init__(self, state_dir: Path) -> None:
        self.broker = LocalKafkaBroker(state_dir=state_dir, port=None)
        status = self.broker.start(timeout=START_TIMEOUT)
        assert status.bootstrap_servers is not None
        self.bootstrap = status.bootstrap_servers

    def stop(self) -> None:
        self.broker.stop(timeout=30.0)
        assert not self.broker.status().running

    def start(self) -> None:
        status = self.broker.start(timeout=START_TIMEOUT)  # waits until it creates and deletes a topic
        assert status.bootstrap_servers == self.bootstrap, "a restart must keep the broker's address"

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """The broker is down inside the block and running again after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def topic(self, name: str, partitions: int = 1) -> str:
        ensure_topics(
            AdminClient({"bootstrap.servers": self.bootstrap}), [TopicSpec(name, partitions=partitions)]
        )
        return name


def read_values(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of every record of ``topic`` up to its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"faults-read-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        pending, assignment = set(), []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if high > low:
                pending.add(p)
                assignment.append(TopicPartition(topic, p, low))
        out: list[tuple[int, int, bytes]] = []
        if not pending:
            return out
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"reading {topic} took longer than {timeout}s"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    pending.discard(msg.partition())
                    continue
                out.append((msg.partition(), msg.offset(), msg.value()))
        return sorted(out)
    finally:
        consumer.close()


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.1)

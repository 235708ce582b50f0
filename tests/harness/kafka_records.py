"""Kafka records in tests: a consumed message without a broker (:class:`FakeMessage`); reading back
from a real broker: one record a test wrote (the emit receipt's coordinates), a partition's end offset."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass
class FakeMessage:
    """The parts of a ``confluent_kafka.Message`` the package reads."""

    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None
    _error: Any = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> Any:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> Any:
        return [("h", b"v")]


def record_at(bootstrap: str, receipt: Any, timeout: float = 15.0) -> Any:
    """The ``confluent_kafka.Message`` at ``receipt``'s topic, partition and offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-back-{uuid.uuid4().hex}"})
    try:
        consumer.assign([TopicPartition(receipt.topic, receipt.partition, receipt.offset)])
        msg = consumer.poll(timeout)
    finally:
        consumer.close()
    assert msg is not None and msg.error() is None and msg.offset() == receipt.offset, msg
    return msg


def high_watermark(bootstrap: str, topic: str, timeout: float = 15.0) -> int:
    """Records ever written to partition 0 of ``topic`` (a dead-letter topic: none means none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex[:8]}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout, cached=False)[1])
    finally:
        consumer.close()

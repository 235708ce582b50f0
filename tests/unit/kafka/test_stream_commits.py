"""Reading a stream's group-committed checkpoint: a partition's error is an error, not "nothing"."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import KafkaOperationError
from airflow_kafka_events.streams.consuming.commits import committed_checkpoint

pytestmark = pytest.mark.unit


class Committed:
    """What ``Consumer.committed`` answers per partition (its ``error`` is read-only on the real one)."""

    def __init__(self, partition: int, offset: int = -1001, error: KafkaError | None = None) -> None:
        self.topic, self.partition, self.offset = "events", partition, offset
        self.metadata, self.error = None, error


class Consumer:
    def __init__(self, answer: list[Committed]) -> None:
        self.answer = answer

    def committed(self, partitions: list, timeout: float) -> list[Committed]:
        return self.answer


def _read(answer: list[Committed]):
    return committed_checkpoint(
        Consumer(answer), "events", [0, 1], trigger_run_id="d/r/t/-1", group_id="g", timeout=1.0, where="test"
    )


def test_a_partition_error_is_raised_naming_group_and_partition():
    failed = Committed(1, error=KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))
    with pytest.raises(KafkaOperationError) as info:
        _read([Committed(0), failed])
    assert "'g'" in str(info.value) and "events[1]" in str(info.value)
    assert info.value.code == KafkaError.COORDINATOR_NOT_AVAILABLE


def test_nothing_committed_is_none():
    assert _read([Committed(0), Committed(1)]) is None

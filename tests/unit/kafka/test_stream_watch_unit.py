"""StreamWatch without Kafka: where a waiting trigger's feed starts, and when it subscribes at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import KafkaAuthenticationError, KafkaOperationError, TopicError
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming import shared_wait
from airflow_kafka_events.streams.consuming.follower import StreamFollower
from airflow_kafka_events.streams.consuming.shared_wait import StreamWatch

pytestmark = pytest.mark.unit

RUN = "run-1"


class FakeFeed:
    catching_up = False

    def __init__(self) -> None:
        self.closed = False

    async def take(self, max_records: int, timeout: float | None = None) -> tuple[list[Any], dict[Any, int]]:
        return [], {}

    async def close(self) -> None:
        self.closed = True


class FakeShared:
    """The parts of a SharedReader a StreamWatch calls; ``low``: each partition's first offset."""

    def __init__(self, *, partitions: int = 3, low: int = 5, missing: bool = False) -> None:
        self.count, self.low, self.missing = partitions, low, missing
        #: raised by the next ``topic_partitions`` (e.g. the brokers unreachable), then cleared
        self.error: Exception | None = None
        self.subscribed: list[dict[tuple[str, int], int]] = []
        self.released = 0
        self.feed = FakeFeed()

    async def topic_partitions(self) -> list[tuple[str, int]]:
        error, self.error = self.error, None
        if error is not None:
            raise error
        if self.missing:
            raise TopicError("topic 't' is not available")
        return [("t", p) for p in range(self.count)]

    async def start_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.low for tp in partitions}

    async def subscribe(self, starts: dict[tuple[str, int], int], **kwargs: Any) -> FakeFeed:
        assert kwargs["match"](RUN.encode()) and not kwargs["match"](b"other")
        self.subscribed.append(dict(starts))
        return self.feed

    async def release(self) -> None:
        self.released += 1


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> FakeShared:
    fake = FakeShared()
    monkeypatch.setattr(shared_wait, "shared_stream_reader", lambda config, topic, poll_timeout: fake)
    monkeypatch.setattr(shared_wait, "TOPIC_RETRY", 0.0)
    return fake


def fill_once(watch: StreamWatch) -> None:
    async def go() -> None:
        await watch.fill(0.0)
        await watch.close()

    asyncio.run(go())


def test_a_checkpoint_starts_at_its_partition_and_offset(shared: FakeShared):
    checkpoint = Checkpoint(next_sequence_index=2, offset=9, partition=1)
    watch = StreamWatch({}, StreamFollower("t", RUN, checkpoint=checkpoint), poll_timeout=0.1)
    fill_once(watch)
    assert shared.subscribed == [{("t", 1): 9}] and shared.feed.closed


def test_a_checkpoint_offset_gone_by_retention_starts_at_the_partitions_first_offset(shared: FakeShared):
    checkpoint = Checkpoint(next_sequence_index=2, offset=3, partition=1)
    fill_once(StreamWatch({}, StreamFollower("t", RUN, checkpoint=checkpoint), poll_timeout=0.1))
    assert shared.subscribed == [{("t", 1): shared.low}]


def test_without_a_checkpoint_the_keys_partition_from_its_start(shared: FakeShared):
    fill_once(StreamWatch({}, StreamFollower("t", RUN), poll_timeout=0.1))
    assert shared.subscribed == [{("t", partition_for_key(RUN, shared.count)): shared.low}]


def test_a_missing_topic_is_looked_for_again_and_the_reader_released(shared: FakeShared):
    shared.missing = True
    watch = StreamWatch({}, StreamFollower("t", RUN), poll_timeout=0.1)
    fill_once(watch)
    assert shared.subscribed == [] and shared.released == 1 and watch.feed is None


def test_a_checkpoint_past_the_end_subscribes_nothing(shared: FakeShared):
    checkpoint = Checkpoint(next_sequence_index=3, offset=9, partition=0, finished=True)
    watch = StreamWatch({}, StreamFollower("t", RUN, checkpoint=checkpoint), poll_timeout=0.1)
    fill_once(watch)
    assert shared.subscribed == [] and watch.tracker.ended


def test_brokers_out_of_reach_are_tried_again_and_the_reader_released(shared: FakeShared):
    shared.error = KafkaOperationError(
        "cannot read the metadata of topic 't'", kafka_error=KafkaError(KafkaError._TRANSPORT)
    )
    watch = StreamWatch({}, StreamFollower("t", RUN), poll_timeout=0.1)

    async def go() -> None:
        await watch.fill(0.0)  # refused: nothing subscribed, nothing raised
        assert shared.subscribed == [] and shared.released == 1 and watch.feed is None
        await watch.fill(0.0)  # the brokers answer again
        await watch.close()

    asyncio.run(go())
    assert shared.subscribed == [{("t", partition_for_key(RUN, shared.count)): shared.low}]


def test_refused_credentials_are_raised_and_the_reader_released(shared: FakeShared):
    shared.error = KafkaAuthenticationError("the brokers refused the credentials")
    watch = StreamWatch({}, StreamFollower("t", RUN), poll_timeout=0.1)
    with pytest.raises(KafkaAuthenticationError):
        fill_once(watch)
    assert shared.subscribed == [] and shared.released == 1

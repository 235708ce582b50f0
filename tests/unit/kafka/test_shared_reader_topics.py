"""A shared reader's looks at its topics' metadata: a topic missing once (a restarting broker) or
metadata that cannot be read (brokers down) is looked at again; a topic missing on two looks
``TOPIC_GONE_CONFIRM`` seconds apart is deleted: a ``TopicError`` naming it and the fix."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import KafkaAuthenticationError, KafkaOperationError, TopicError
from airflow_kafka_events.kafka import shared_reader
from airflow_kafka_events.kafka.shared_reader import SharedReader
from harness.shared_readers import shared_reader_of

pytestmark = pytest.mark.unit

TOPIC = "waits"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Metadata:
    """The client's side of a look: each call answers the next of ``answers`` (partitions or an error)."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def partitions(self) -> list[tuple[str, int]]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        pass


def missing() -> TopicError:
    return TopicError(f"topic {TOPIC!r} is not available on b:9092 (UNKNOWN_TOPIC_OR_PART); create it first")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(shared_reader, "time", fake)
    return fake


def reader() -> tuple[SharedReader, Metadata]:
    metadata = Metadata()
    shared = shared_reader_of(
        metadata,
        TOPIC,
        name=f"stream-waits-of-{TOPIC}",
        decode=lambda message: message,
        route=lambda decoded: None,
        whole_topics=False,
    )
    return shared, metadata


def test_a_topic_missing_once_then_back_is_no_failure(clock: Clock):
    shared, metadata = reader()
    metadata.answers = [missing(), [(TOPIC, 0)], missing()]

    async def looks() -> None:
        await shared._look_at_topics()
        clock.now += shared_reader.TOPIC_GONE_CONFIRM
        await shared._look_at_topics()  # back: a broker that was restarting
        clock.now += shared_reader.TOPIC_GONE_CONFIRM
        await shared._look_at_topics()  # missing again: the clock starts over

    asyncio.run(looks())
    assert metadata.answers == []


def test_metadata_out_of_reach_is_looked_at_again(clock: Clock):
    shared, metadata = reader()
    down = KafkaOperationError("cannot read the metadata", kafka_error=KafkaError(KafkaError._TRANSPORT))
    metadata.answers = [down, down, [(TOPIC, 0)]]

    async def looks() -> None:
        for _ in range(3):
            await shared._look_at_topics()
            clock.now += shared_reader.PARTITION_REFRESH_INTERVAL

    asyncio.run(looks())
    assert metadata.answers == []


def test_a_topic_missing_on_two_looks_far_enough_apart_is_deleted(clock: Clock):
    shared, metadata = reader()
    metadata.answers = [missing(), missing(), missing()]

    async def looks() -> None:
        await shared._look_at_topics()
        clock.now += shared_reader.TOPIC_GONE_CONFIRM / 2
        await shared._look_at_topics()  # too soon to tell
        clock.now += shared_reader.TOPIC_GONE_CONFIRM / 2
        await shared._look_at_topics()

    with pytest.raises(TopicError) as info:
        asyncio.run(looks())
    message = str(info.value)
    assert f"topic {TOPIC!r}" in message and "was deleted" in message and "recreate the topic" in message


def test_refused_credentials_on_a_look_are_raised(clock: Clock):
    shared, metadata = reader()
    metadata.answers = [KafkaAuthenticationError("the brokers refused the credentials")]
    with pytest.raises(KafkaAuthenticationError):
        asyncio.run(shared._look_at_topics())

"""Records of any size never stall a consumer: oversized records on a real broker.

The source topic accepts 4 MiB records (another producer may write them); the bridge's limits
(``max_record_bytes``, ``max_extra_bytes``) refuse them as ``too-large``, and a dead letter the
dead-letter producer (``message.max.bytes``) or topic (``max.message.bytes``) cannot carry is
written as a reference.  Each oversized record is followed by a good event that must reach
(the fake) Airflow, with the committed offset past both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.assets.admission import DEFAULT_MAX_RECORD_BYTES
from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.dead_letters.letter import REFERENCE_PREFIX_BYTES, DeadLetter
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics, topic_max_message_bytes
from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import PASSWORD, committed, make_config, running, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

ASSET = AssetRef(name="batches", uri="s3://lake/batches")
SOURCE_LIMIT = 4 * 1024 * 1024
SMALL_DLQ_LIMIT = 100_000
TWO_MB = 2 * 1000 * 1000


def big_producer(bootstrap: str) -> Any:
    """A producer allowed to write what the source topic accepts (another team's, say)."""
    settings = KafkaSettings({"bootstrap.servers": bootstrap, "message.max.bytes": SOURCE_LIMIT + 1024})
    return get_producer(settings.producer_config())


def good_event(key: str) -> AssetEventEnvelope:
    return build_envelope(
        asset=ASSET, source=EventSource(SourceKind.EXTERNAL, producer="it"), partition_key=key
    )


def dlq_records(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    try:
        wait_until(lambda: _drain(consumer, found) >= count, timeout, f"{count} dead letter(s) on {topic}")
        return found
    finally:
        consumer.close()


def _drain(consumer: Consumer, into: list[Any]) -> int:
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        into.append(msg)
    return len(into)


@pytest.fixture
def fake() -> Iterator[FakeAirflow]:
    with FakeAirflow(users={"bridge": PASSWORD}) as api:
        api.add_asset(ASSET.name, ASSET.uri)
        yield api


def _two_mb_raw(bootstrap: str, topic: str) -> bytes:
    value = bytes(range(256)) * (TWO_MB // 256)
    big_producer(bootstrap).send_and_wait(
        topic, value, key=ASSET.uri, headers=[("trace", b"t-1")], timeout=60
    )
    return value


def _two_mb_extra(bootstrap: str, topic: str) -> bytes:
    # a valid envelope (the emit side's 64 KiB check bypassed, as a producer in another language could)
    env = AssetEventEnvelope(asset=ASSET, partition_key="huge", extra={"blob": "x" * TWO_MB})
    value = ASSET_EVENT_CODEC.encode(env)
    big_producer(bootstrap).send_and_wait(
        topic, value, key=ASSET.uri, headers=[("trace", b"t-1")], timeout=60
    )
    return value


def _over_the_dlq_topic(bootstrap: str, topic: str) -> bytes:
    value = b"not an envelope; " * 12_000  # 204 KB: within the bridge's limits, over the DLQ topic's
    assert SMALL_DLQ_LIMIT < len(value) < DEFAULT_MAX_RECORD_BYTES
    big_producer(bootstrap).send_and_wait(
        topic, value, key=ASSET.uri, headers=[("trace", b"t-1")], timeout=60
    )
    return value


CASES: dict[str, tuple[Callable[[str, str], bytes], int | None, str, str]] = {
    # name: (write the bad record, DLQ topic limit, reason, error type suffix)
    "2 MB raw record": (_two_mb_raw, None, "too-large", "RecordTooLargeError"),
    "2 MB extra": (_two_mb_extra, None, "too-large", "RecordTooLargeError"),
    "over the DLQ topic's limit": (
        _over_the_dlq_topic,
        SMALL_DLQ_LIMIT,
        "undecodable",
        "UnknownFramingError",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bridge_dead_letters_oversized_records_and_the_next_event_arrives(
    case, kafka_bootstrap, new_topic, fake
):
    write_bad, dlq_limit, reason, error_type = CASES[case]
    topic = new_topic(partitions=1, prefix="big-in", config={"max.message.bytes": SOURCE_LIMIT})
    dlq = new_topic(
        partitions=1, prefix="big-dlq", config={"max.message.bytes": dlq_limit} if dlq_limit else None
    )
    bad = write_bad(kafka_bootstrap, topic)
    good = good_event("batch-after")
    publish(good, producer=big_producer(kafka_bootstrap), topic=topic, timeout=30)

    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config) as bridge:  # leaving the block asserts the bridge never failed
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 90, "offset 2")
        stats = dict(bridge.service.stats)
    assert stats == {"dead_lettered": 1, "posted": 1}
    assert [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events] == [good.event_id]

    (dead,) = dlq_records(kafka_bootstrap, dlq, 1)
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == reason and letter.error_type.endswith(error_type)
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (topic, 0, 0)
    # the reference: a bounded prefix, the original size and headers, and why it is cut
    assert letter.truncated and letter.original_value_bytes == len(bad)
    assert dead.value() == bad[:REFERENCE_PREFIX_BYTES]
    assert dead.key() == ASSET.uri.encode()
    assert ("trace", b"t-1") in dead.headers()
    assert "max.message.bytes" in (letter.truncated_cause or "")


def test_a_dead_letter_within_every_limit_stays_whole(kafka_bootstrap, new_topic, fake):
    """A too-large extra (100 KB) under the record limit: the whole record goes to the DLQ."""
    topic = new_topic(partitions=1, prefix="big-in", config={"max.message.bytes": SOURCE_LIMIT})
    dlq = new_topic(partitions=1, prefix="big-dlq")
    env = AssetEventEnvelope(asset=ASSET, partition_key="wide", extra={"blob": "x" * 100_000})
    value = ASSET_EVENT_CODEC.encode(env)
    big_producer(kafka_bootstrap).send_and_wait(topic, value, key=ASSET.uri, timeout=30)
    good = good_event("batch-after")
    publish(good, producer=big_producer(kafka_bootstrap), topic=topic, timeout=30)
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config):
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 90, "offset 2")
    assert len(fake.events) == 1
    (dead,) = dlq_records(kafka_bootstrap, dlq, 1)
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == "too-large" and letter.error_type.endswith("ExtraTooLargeError")
    assert not letter.truncated and dead.value() == value
    assert letter.event_id == env.event_id


def test_async_writer_the_watcher_uses_falls_back_to_a_reference(kafka_bootstrap, new_topic):
    """``DeadLetterWriter.awrite`` (the watcher's) against a 100 KB topic: a reference, not a retry loop."""
    dlq = new_topic(partitions=1, prefix="big-dlq", config={"max.message.bytes": SMALL_DLQ_LIMIT})
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    writer = DeadLetterWriter(producer, dlq, timeout=30)
    letter = DeadLetter(
        reason="too-large",
        error_type="E",
        error_message="m",
        source_topic="src",
        source_partition=1,
        source_offset=9,
    )
    for value in (b"v" * TWO_MB, b"w" * 300_000):
        receipt = asyncio.run(writer.awrite(letter, value=value, key=b"k", headers=[("h", b"1")]))
        assert receipt.topic == dlq
    first, second = dlq_records(kafka_bootstrap, dlq, 2)
    assert [DeadLetter.from_headers(m.headers()).original_value_bytes for m in (first, second)] == [
        TWO_MB,
        300_000,
    ]
    assert first.value() == b"v" * REFERENCE_PREFIX_BYTES and second.value() == b"w" * REFERENCE_PREFIX_BYTES
    # the producer stays usable after the broker refused a record
    assert producer.send_and_wait(dlq, b"small", timeout=30).topic == dlq


def test_ensure_topics_aligns_new_topics_with_the_clients_limit(kafka_admin):
    aligned, own = f"aligned-{uuid.uuid4().hex[:8]}", f"own-{uuid.uuid4().hex[:8]}"
    try:
        ensure_topics(
            kafka_admin,
            [TopicSpec(aligned, partitions=1), TopicSpec(own, partitions=1, max_message_bytes=SOURCE_LIMIT)],
            message_max_bytes=2_000_000,
        )
        assert topic_max_message_bytes(kafka_admin, aligned) == 2_000_000
        assert topic_max_message_bytes(kafka_admin, own) == SOURCE_LIMIT
    finally:
        for future in kafka_admin.delete_topics([aligned, own], operation_timeout=30).values():
            future.result(timeout=30)


def test_consumers_with_small_fetch_limits_still_read_a_2_mb_record(kafka_bootstrap, new_topic):
    """librdkafka returns a record batch larger than fetch.max.bytes / max.partition.fetch.bytes."""
    topic = new_topic(partitions=1, prefix="big-in", config={"max.message.bytes": SOURCE_LIMIT})
    value = _two_mb_raw(kafka_bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"small-fetch-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "message.max.bytes": 65_536,  # librdkafka wants fetch.max.bytes >= it
            "fetch.max.bytes": 100_000,
            "max.partition.fetch.bytes": 65_536,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    try:
        wait_until(lambda: _drain(consumer, found) >= 1, 60, "the 2 MB record")
    finally:
        consumer.close()
    assert found[0].value() == value

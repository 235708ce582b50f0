"""The registry wire format against a real schema registry (Apicurio) and a real Kafka broker.

Streams written by the streaming trigger and read back by the stream reader; records written by
confluent-kafka's own ``AvroSerializer`` taken by the bridge, and the project's read by its
``AvroDeserializer``; an unknown schema id dead-lettered with its reason; a registry that stops
answering mid-run (a relay in front of it is cut): nothing dead-lettered, nothing lost; a streaming
trigger's retry while the registry is down fails with the retryable error, and the next one resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.framing import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC, frame_confluent
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    SourceKind,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import SchemaRegistryUnavailableError
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.consuming.reader import StreamReader
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from harness.kafka_records import high_watermark
from harness.registry_records import confluent_serialized
from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import committed, make_config, read_all, running, wait_until
from integration.registry.tcp_relay import relay_to
from integration.triggers import sample_triggers as samples
from integration.triggers.sample_triggers import PagedTrigger, collect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PASSWORD = "bridge-it-password"
ASSET = AssetRef(name="batches", uri="s3://lake/batches")


def _settings(bootstrap: str, registry_url: str, **registry: str) -> KafkaSettings:
    config = {"bootstrap.servers": bootstrap, "schema.registry.url": registry_url}
    config.update({f"schema.registry.{k.replace('_', '.')}": v for k, v in registry.items()})
    return KafkaSettings(config)


def _raw_values(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count:
            assert time.monotonic() < deadline, f"read {len(found)} of {count} records of {topic}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found.append(msg)
        return found
    finally:
        consumer.close()


def _asset_envelope(key: str) -> AssetEventEnvelope:
    return build_envelope(
        asset=ASSET, source=EventSource(SourceKind.EXTERNAL, producer="registry-it"), partition_key=key
    )


# --------------------------------------------------------------------------- streams
def test_a_stream_is_written_and_read_in_the_registry_wire_format(
    kafka_bootstrap, schema_registry_url, new_topic, monkeypatch
):
    extra = {"bootstrap.servers": kafka_bootstrap, "schema.registry.url": schema_registry_url}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    topic = new_topic(partitions=3)
    run_id = f"dag/task/-1/run-{uuid.uuid4().hex}"
    pages = 20

    asyncio.run(collect(PagedTrigger(total=pages, trigger_run_id=run_id, topic=topic)))

    records = _raw_values(kafka_bootstrap, topic, 3, pages + 1)
    assert {m.value()[0] for m in records} == {CONFLUENT_MAGIC}  # no single-object record
    settings = KafkaSettings(extra)
    reader = StreamReader(
        settings.consumer_config(f"reader-{uuid.uuid4().hex[:8]}"),
        topic,
        run_id,
        codec=settings.codecs.trigger,
    )
    try:
        events = [e for batch in reader for e in batch.events]
    finally:
        reader.close()
    assert [e.sequence_index for e in events] == list(range(pages + 1))
    assert [e.payload for e in events[:-1]] == [samples.page_payload(i) for i in range(pages)]
    # confluent-kafka's own deserializer reads the project's records
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": schema_registry_url}))
    first = min(records, key=lambda m: m.offset())
    record = deserializer(first.value(), SerializationContext(topic, MessageField.VALUE))
    assert TriggerEventEnvelope.from_avro(record) == events[0]
    subject = f"{topic}-value"
    assert subject in SchemaRegistryClient({"url": schema_registry_url}).get_subjects()


def _stream_envelopes(
    bootstrap: str, topic: str, key: str, codec: Any
) -> list[tuple[int, TriggerEventEnvelope]]:
    """(offset, envelope) of every record of stream ``key`` in ``topic`` (3 partitions), in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    partitions = [TopicPartition(topic, p) for p in range(3)]
    ends = {
        tp.partition: consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in partitions
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    found: list[tuple[int, TriggerEventEnvelope]] = []
    read = {p: 0 for p in ends}
    deadline = time.monotonic() + 60
    try:
        while any(read[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            read[msg.partition()] = msg.offset() + 1
            if msg.key() == key.encode():
                assert msg.value()[0] == CONFLUENT_MAGIC
                found.append((msg.offset(), codec.decode(msg.value())))
        return sorted(found, key=lambda item: item[0])
    finally:
        consumer.close()


@pytest.mark.faults
def test_a_stream_outlives_a_registry_outage_and_a_retry_resumes_once_the_registry_is_back(
    kafka_bootstrap, schema_registry_url, new_topic, monkeypatch
):
    """The trigger knows its schema id from its start: pages 3-5 are written while the registry is
    down; the trigger is then stopped (a triggerer restart).  Its retry in a fresh process (a registry
    client with nothing cached: another URL here) fails with the typed, retryable error while the
    registry is down, writing nothing; the next retry resumes after page 5: every page once, in order."""
    topic, key, total = new_topic(partitions=3), f"dag/task/-1/run-{uuid.uuid4().hex}", 10
    url = urlsplit(schema_registry_url)
    assert url.hostname is not None and url.port is not None
    reader = _settings(kafka_bootstrap, schema_registry_url).codecs.trigger

    def connect(port: int) -> None:
        extra = {
            "bootstrap.servers": kafka_bootstrap,
            "schema.registry.url": urlunsplit(url._replace(netloc=f"127.0.0.1:{port}")),
            "schema.registry.timeout.ms": "2000",
        }
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))

    def written() -> list[int]:
        return [e.sequence_index for _, e in _stream_envelopes(kafka_bootstrap, topic, key, reader)]

    hold = asyncio.Event()
    samples.HOLD_BEFORE[key] = (3, hold)
    samples.PAUSE_BEFORE[key] = 6
    kwargs = {"total": total, "trigger_run_id": key, "topic": topic}
    with relay_to(url.hostname, url.port) as first_relay, relay_to(url.hostname, url.port) as retry_relay:
        connect(first_relay.port)

        async def first_run() -> None:
            task = asyncio.create_task(collect(PagedTrigger(**kwargs)))
            await samples.wait_for(lambda: written() == [0, 1, 2], timeout=60, what="pages 0-2")
            first_relay.stop()  # the registry goes away mid-stream
            hold.set()
            await samples.wait_for(lambda: written() == list(range(6)), timeout=60, what="pages 3-5")
            task.cancel()  # a triggerer restart stops the trigger
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(first_run())
        samples.PAUSE_BEFORE.pop(key)
        samples.HOLD_BEFORE.pop(key)

        connect(retry_relay.port)
        retry_relay.stop()
        with pytest.raises(SchemaRegistryUnavailableError, match="could not register"):
            asyncio.run(collect(PagedTrigger(**kwargs)))
        assert written() == list(range(6))  # the failed retry wrote nothing

        retry_relay.start()
        (event,) = asyncio.run(collect(PagedTrigger(**kwargs)))

    assert dict(samples.FETCHES[key]) == {i: 1 for i in range(total)}  # no page fetched twice
    stored = _stream_envelopes(kafka_bootstrap, topic, key, reader)
    assert [(e.attempt, e.sequence_index) for _, e in stored] == [(0, i) for i in range(total + 1)]
    assert [e.payload for _, e in stored[:-1]] == [samples.page_payload(i) for i in range(total)]
    terminal = stored[-1][1]
    assert terminal.is_last and terminal.error is None  # no page failed
    descriptor = StreamDescriptor.from_dict(event.payload)
    assert (descriptor.attempt, descriptor.count, descriptor.error) == (0, total, None)
    assert (descriptor.first_offset, descriptor.last_offset) == (stored[0][0], stored[-1][0])


# --------------------------------------------------------------------------- asset events
def test_a_project_record_is_read_by_confluent_kafkas_avro_deserializer(
    kafka_bootstrap, schema_registry_url, new_topic
):
    topic = new_topic(partitions=1)
    settings = _settings(kafka_bootstrap, schema_registry_url, subject_name_strategy="RecordNameStrategy")
    envelope = _asset_envelope("batch-1")
    publish(
        envelope,
        producer=get_producer(settings.producer_config()),
        topic=topic,
        timeout=30,
        codec=settings.codecs.asset,
    )
    (msg,) = _raw_values(kafka_bootstrap, topic, 1, 1)
    assert msg.value()[0] == CONFLUENT_MAGIC

    client = SchemaRegistryClient({"url": schema_registry_url})
    record = AvroDeserializer(client)(msg.value(), SerializationContext(topic, MessageField.VALUE))
    assert AssetEventEnvelope.from_avro(record) == envelope
    # RecordNameStrategy: the subject is the record's full name, whatever the topic
    assert f"{schemas.NAMESPACE}.AssetEventEnvelope" in client.get_subjects()


@pytest.fixture
def fake():
    with FakeAirflow(users={"bridge": PASSWORD}) as api:
        api.add_asset(ASSET.name, ASSET.uri)
        yield api


def test_the_bridge_takes_both_framings_and_dead_letters_an_unknown_schema_id(
    kafka_bootstrap, schema_registry_url, new_topic, fake
):
    topic, dlq = new_topic(partitions=1, prefix="bridge-in"), new_topic(partitions=1, prefix="bridge-dlq")
    settings = _settings(kafka_bootstrap, schema_registry_url)
    producer = get_producer(settings.producer_config())
    by_confluent, by_project, single_object = (_asset_envelope(f"batch-{i}") for i in range(3))
    producer.send_and_wait(
        topic, confluent_serialized(schema_registry_url, topic, by_confluent), key=ASSET.uri, timeout=30
    )
    publish(by_project, producer=producer, topic=topic, timeout=30, codec=settings.codecs.asset)
    publish(single_object, producer=producer, topic=topic, timeout=30, codec=ASSET_EVENT_CODEC)
    unknown_id = frame_confluent(2_000_000_000, b"\x00")
    producer.send_and_wait(topic, unknown_id, key=ASSET.uri, timeout=30)
    raw = [m.value() for m in _raw_values(kafka_bootstrap, topic, 1, 4)]
    assert [v[0] for v in raw] == [CONFLUENT_MAGIC, CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC[0], CONFLUENT_MAGIC]

    config = replace(make_config(kafka_bootstrap, fake, topic, dlq), kafka=settings)
    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [4], 90, "offset 4")
        assert dict(bridge.service.stats) == {"posted": 3, "dead_lettered": 1}
    posted = [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events]
    assert posted == [by_confluent.event_id, by_project.event_id, single_object.event_id]
    (dead,) = read_all(kafka_bootstrap, dlq, 1)
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == "unknown-schema" and letter.source_offset == 3
    assert "no schema with id 2000000000" in letter.error_message
    assert dead.value() == unknown_id


@pytest.mark.faults
def test_a_registry_that_stops_answering_holds_the_bridge_without_dead_letters_or_losses(
    kafka_bootstrap, schema_registry_url, new_topic, fake
):
    topic, dlq = new_topic(partitions=1, prefix="bridge-in"), new_topic(partitions=1, prefix="bridge-dlq")
    writer = _settings(kafka_bootstrap, schema_registry_url)
    envelopes = [_asset_envelope(f"batch-{i}") for i in range(3)]
    producer = get_producer(writer.producer_config())
    for envelope in envelopes:
        publish(envelope, producer=producer, topic=topic, timeout=30, codec=writer.codecs.asset)

    url = urlsplit(schema_registry_url)
    assert url.hostname is not None and url.port is not None
    with relay_to(url.hostname, url.port) as relay:
        relay.stop()  # the bridge's registry does not answer from the start
        behind_relay = urlunsplit(url._replace(netloc=f"127.0.0.1:{relay.port}"))
        config = replace(
            make_config(kafka_bootstrap, fake, topic, dlq), kafka=_settings(kafka_bootstrap, behind_relay)
        )
        with running(config) as bridge:
            wait_until(lambda: bridge.service.stats["registry_unavailable"] >= 2, 90, "two tries")
            assert fake.events == []
            assert committed(kafka_bootstrap, config.group_id, topic) == [-1001]
            relay.start()
            wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [3], 90, "offset 3")
            stats = dict(bridge.service.stats)
    assert stats["posted"] == 3 and "dead_lettered" not in stats
    assert [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events] == [
        e.event_id for e in envelopes
    ]
    assert high_watermark(kafka_bootstrap, dlq) == 0


def test_an_unreachable_registry_is_a_retryable_error_not_an_unknown_schema():
    settings = _settings("127.0.0.1:9", "http://127.0.0.1:9/apis/ccompat/v7", timeout_ms="2000")
    data = frame_confluent(1, b"")
    with pytest.raises(SchemaRegistryUnavailableError):
        settings.codecs.asset.decode(data)

"""Envelopes through a real 3-partition topic: round trip, per-key order, decode failures kept."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    ProducerIdentity,
    SourceKind,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import UnknownFramingError
from airflow_kafka_events.kafka.consumer import ConsumedRecord, EnvelopeConsumer
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings

pytestmark = pytest.mark.integration


def _drain(consumer: EnvelopeConsumer, expected: int, timeout: float = 60.0) -> list[ConsumedRecord]:
    records: list[ConsumedRecord] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected:
        assert time.monotonic() < deadline, f"got {len(records)} of {expected} records"
        records.extend(consumer.poll_batch(max_records=500, timeout=0.5))
    return records


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings({"bootstrap.servers": kafka_bootstrap})


def test_interleaved_streams_keep_per_key_order_on_three_partitions(settings, new_topic):
    topic = new_topic(partitions=3)
    runs = [f"dag.run.task.{i}" for i in range(6)]  # 6 keys spread over 3 partitions
    pages = 40
    producer = RecordProducer(settings.producer_config())
    sent = []
    try:
        for seq in range(pages):  # interleave: page seq of every run before page seq+1 of any
            for run in runs:
                env = TriggerEventEnvelope(
                    trigger_run_id=run,
                    sequence_index=seq,
                    is_last=seq == pages - 1,
                    payload={"run": run, "page": seq, "items": list(range(seq % 5)), "big": 2**70 + seq},
                    producer=ProducerIdentity(dag_id="d", run_id="r", task_id=run, try_number=1),
                    resume_cursor=f"cursor-{seq + 1}",
                )
                sent.append(producer.send(topic, TRIGGER_EVENT_CODEC.encode(env), key=run))
        producer.flush()
    finally:
        producer.close()
    receipts = [f.result() for f in sent]
    assert len({r.partition for r in receipts}) > 1, "keys should spread over partitions"

    with EnvelopeConsumer(settings.consumer_config("rt-" + topic), TRIGGER_EVENT_CODEC, topics=[topic]) as c:
        records = _drain(c, len(runs) * pages)
    assert all(r.ok for r in records)
    by_run: dict[str, list[TriggerEventEnvelope]] = {}
    partition_of: dict[str, set[int]] = {}
    for r in records:
        assert r.key == r.value.trigger_run_id.encode()
        by_run.setdefault(r.value.trigger_run_id, []).append(r.value)
        partition_of.setdefault(r.value.trigger_run_id, set()).add(r.partition)
    assert sorted(by_run) == sorted(runs)
    for run, envs in by_run.items():
        assert [e.sequence_index for e in envs] == list(range(pages)), run
        assert len(partition_of[run]) == 1, "one key lives in one partition"
        assert [e.is_last for e in envs] == [False] * (pages - 1) + [True]
        assert envs[7].payload == {"run": run, "page": 7, "items": [0, 1], "big": 2**70 + 7}
        assert envs[7].resume_cursor == "cursor-8"


def test_asset_envelope_and_failed_stream_round_trip(settings, new_topic):
    topic = new_topic(partitions=3)
    asset_env = AssetEventEnvelope(
        asset=AssetRef(name="batches", uri="s3://bucket/batches"),
        partition_key="batch-41",
        partition_date=datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc),
        extra={"rows": 10_000, "ok": True, "nested": {"ü": [1.5, None]}},
        idempotency_key="k-41",
        source=EventSource(SourceKind.TASK, dag_id="ingest", run_id="r1", task_id="load", try_number=2),
        causation=("e-1", "e-2"),
    )
    last = TriggerEventEnvelope(
        trigger_run_id="run-x",
        sequence_index=3,
        is_last=True,
        attempt=1,
        error=StreamFailure(type="HTTPError", message="503 from upstream"),
    )
    producer = RecordProducer(settings.producer_config())
    try:
        producer.send_and_wait(topic, ASSET_EVENT_CODEC.encode(asset_env), key="batches")
        producer.send_and_wait(topic + "", TRIGGER_EVENT_CODEC.encode(last), key="run-x")
        producer.send_and_wait(topic, b"not an envelope", key="poison")
    finally:
        producer.close()

    # One topic, one decoder per type: decode the asset record with the asset codec.
    with EnvelopeConsumer(settings.consumer_config("a-" + topic), ASSET_EVENT_CODEC, topics=[topic]) as c:
        records = _drain(c, 3)
    by_key = {r.key: r for r in records}
    assert by_key[b"batches"].value == asset_env
    # the failed stream's envelope is not an asset envelope; the poison message has no framing:
    # both come back as records carrying a typed error and their raw bytes, nothing is lost.
    assert by_key[b"run-x"].error is not None and by_key[b"run-x"].raw
    assert isinstance(by_key[b"poison"].error, UnknownFramingError)
    assert by_key[b"poison"].raw == b"not an envelope"
    assert TRIGGER_EVENT_CODEC.decode(by_key[b"run-x"].raw) == last


def test_commit_resumes_after_the_last_handled_record(settings, new_topic):
    topic = new_topic(partitions=1)
    producer = RecordProducer(settings.producer_config())
    try:
        for i in range(10):
            env = TriggerEventEnvelope(trigger_run_id="r", sequence_index=i, is_last=i == 9, payload=i)
            producer.send(topic, TRIGGER_EVENT_CODEC.encode(env), key="r")
        producer.flush()
    finally:
        producer.close()
    group = "resume-" + topic
    with EnvelopeConsumer(settings.consumer_config(group), TRIGGER_EVENT_CODEC, topics=[topic]) as c:
        records = _drain(c, 10)
        c.commit(records[:4])  # handled 0..3 only
    with EnvelopeConsumer(settings.consumer_config(group), TRIGGER_EVENT_CODEC, topics=[topic]) as c:
        again = _drain(c, 6)
    assert [r.value.sequence_index for r in again] == [4, 5, 6, 7, 8, 9]

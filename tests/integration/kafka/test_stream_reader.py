"""StreamReader against a real broker: order, epochs, end and failure, live reading, resuming."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import (
    StreamFailedError,
    StreamGapError,
    StreamNotStartedError,
    UnknownFramingError,
)
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.consuming.sequence import StreamBatch
from harness.task_state import DictStore

pytestmark = pytest.mark.integration


def page(
    run: str, seq: int, *, attempt: int = 0, last: bool = False, error: str | None = None
) -> TriggerEventEnvelope:
    return TriggerEventEnvelope(
        trigger_run_id=run,
        sequence_index=seq,
        attempt=attempt,
        is_last=last or error is not None,
        payload={"run": run, "page": seq, "attempt": attempt},
        error=None if error is None else StreamFailure(type="HTTPError", message=error),
        resume_cursor=f"cursor-{seq + 1}",
    )


def pages(run: str, n: int, *, attempt: int = 0) -> list[TriggerEventEnvelope]:
    """A complete stream of ``n`` pages; without pages a stream is its end marker alone."""
    if n == 0:
        return [TriggerEventEnvelope(trigger_run_id=run, sequence_index=0, is_last=True, attempt=attempt)]
    return [page(run, i, attempt=attempt, last=i == n - 1) for i in range(n)]


def seqs(events: list[TriggerEventEnvelope]) -> list[int]:
    return [e.sequence_index for e in events]


def events_of(batches: list[StreamBatch]) -> list[TriggerEventEnvelope]:
    return [e for b in batches for e in b.events]


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})


@pytest.fixture
def producer(settings: KafkaSettings) -> Iterator[RecordProducer]:
    p = RecordProducer(settings.producer_config())
    yield p
    p.close()


@pytest.fixture
def send(producer: RecordProducer) -> Callable[..., list[DeliveryReceipt]]:
    def send(topic: str, envelopes: list[TriggerEventEnvelope]) -> list[DeliveryReceipt]:
        futures = [
            producer.send(topic, TRIGGER_EVENT_CODEC.encode(e), key=e.trigger_run_id) for e in envelopes
        ]
        producer.flush()
        return [f.result() for f in futures]

    return send


READ_OPTIONS = {field.name for field in dataclasses.fields(ReadOptions)}


@pytest.fixture
def open_reader(settings: KafkaSettings) -> Iterator[Callable[..., StreamReader]]:
    readers: list[StreamReader] = []

    def make(topic: str, run: str, **kwargs: Any) -> StreamReader:
        kwargs.setdefault("max_wait", 0.2)
        kwargs.setdefault("poll_timeout", 0.1)
        kwargs.setdefault("start_timeout", 30.0)
        kwargs.setdefault("gap_timeout", 30.0)
        read = {k: kwargs.pop(k) for k in list(kwargs) if k in READ_OPTIONS}
        reader = StreamReader(
            settings.consumer_config(f"reader-{uuid.uuid4().hex[:8]}"),
            topic,
            run,
            options=ReadOptions(**read),
            **kwargs,
        )
        readers.append(reader)
        return reader

    yield make
    for reader in readers:
        reader.close()


@pytest.mark.parametrize("locate", ["partitioner", "scan"])
def test_interleaved_streams_on_three_partitions_are_each_read_in_order(locate, new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    runs = [f"dag/task/-1/run-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    # a sixth key on another partition than the first: random keys all land on one partition 1 time in 243
    runs.append(
        next(
            key
            for key in (f"dag/task/-1/run-5-{uuid.uuid4().hex[:6]}" for _ in range(1000))
            if partition_for_key(key, 3) != partition_for_key(runs[0], 3)
        )
    )
    n = 25
    interleaved = [page(run, seq, last=seq == n - 1) for seq in range(n) for run in runs]
    receipts = send(topic, interleaved)
    partition_of = {r.key.decode(): r.partition for r in receipts if r.key}
    assert len(set(partition_of.values())) > 1, "keys should spread over partitions"
    for run in runs:
        # "scan": as for a producer with another partitioner
        reader = open_reader(topic, run, max_events=10, scan_partitions=locate == "scan")
        batches = list(reader)
        events = events_of(batches)
        assert seqs(events) == list(range(n)), run
        assert all(e.trigger_run_id == run for e in events)
        assert events[7].payload == {"run": run, "page": 7, "attempt": 0}
        assert batches[-1].finished and not any(b.finished for b in batches[:-1])
        assert all(len(b.events) <= 10 for b in batches)
        assert reader.partition == partition_of[run]


@pytest.mark.parametrize("n", [0, 1, 250])
def test_streams_of_0_1_and_250_pages(n, new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = f"run-{n}"
    written = pages(run, n)
    send(topic, written)
    batches = list(open_reader(topic, run, max_events=100))
    assert events_of(batches) == written
    assert batches[-1].finished and batches[-1].events[-1].is_last
    assert all(len(b.events) <= 100 for b in batches)
    if n == 250:
        assert len(batches) >= 3
    if n == 0:
        assert written[0].payload is None


def test_duplicates_written_twice_are_delivered_once(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-dup"
    stream = pages(run, 8)
    order = [0, 1, 1, 0, 3, 2, 2, 4, 3, 5, 6, 5, 7]  # duplicates and an element ahead of its turn
    send(topic, [stream[i] for i in order] + stream)  # then the whole stream once more
    batches = list(open_reader(topic, run, max_events=3))
    assert events_of(batches) == stream


def test_a_failed_stream_raises_after_delivering_the_pages_before_the_failure(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-failed"
    send(topic, [page(run, i) for i in range(5)] + [page(run, 5, error="503 from upstream")])
    reader = open_reader(topic, run, max_events=2)
    delivered: list[TriggerEventEnvelope] = []
    with pytest.raises(StreamFailedError) as info:
        for batch in reader:
            delivered.extend(batch.events)
            reader.ack(batch)
    assert seqs(delivered) == [0, 1, 2, 3, 4]
    assert (info.value.type, info.value.message) == ("HTTPError", "503 from upstream")
    assert info.value.sequence_index == 5 and info.value.topic == topic and info.value.trigger_run_id == run
    checkpoint = reader.checkpoint()
    assert checkpoint is not None and checkpoint.next_sequence_index == 5 and not checkpoint.finished


def test_a_higher_attempt_supersedes_the_one_being_read(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-retry"
    send(topic, [page(run, i) for i in range(3)])  # attempt 0 stops half-way
    reader = open_reader(topic, run, max_events=10)
    first = reader.next_batch()
    assert seqs(first.events) == [0, 1, 2] and first.attempt == 0 and not first.restarted
    # the retry writes attempt 1 from 0; a late write of attempt 0 is stale
    retry = pages(run, 4, attempt=1)
    send(topic, [*retry[:2], page(run, 3), *retry[2:]])
    rest = list(reader)
    assert rest[0].restarted and all(b.attempt == 1 for b in rest)
    assert not any(b.restarted for b in rest[1:])
    assert events_of(rest) == retry


def test_a_retry_already_written_wins_over_the_failure_before_it(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-failed-then-retried"
    retry = pages(run, 3, attempt=1)
    send(topic, [page(run, 0), page(run, 1), page(run, 2, error="boom"), *retry])
    batches = list(open_reader(topic, run, max_events=10))  # no StreamFailedError
    attempt_1 = [e for e in events_of(batches) if e.attempt == 1]
    assert attempt_1 == retry and batches[-1].finished


def test_the_reader_gets_pages_while_the_producer_is_still_writing(new_topic, producer, open_reader):
    topic = new_topic(partitions=3)
    run = "run-live"
    stream = pages(run, 10)
    first_pages_read = threading.Event()
    outcome: dict[str, Any] = {}

    def write() -> None:
        try:
            for e in stream[:5]:
                producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(e), key=run)
            outcome["reader_was_first"] = first_pages_read.wait(timeout=60)
            for e in stream[5:]:
                producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(e), key=run)
        except BaseException as exc:  # reported by the test thread
            outcome["error"] = exc

    writer = threading.Thread(target=write, name="stream-writer", daemon=True)
    reader = open_reader(topic, run, max_events=100)
    writer.start()
    try:
        first = reader.next_batch()
        first_pages_read.set()  # the writer holds back the rest of the stream until now
        assert first.events and not first.finished
        assert set(seqs(first.events)) <= {0, 1, 2, 3, 4}
        rest = list(reader)
    finally:
        first_pages_read.set()
        writer.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["reader_was_first"] is True
    assert first.events + events_of(rest) == stream and rest[-1].finished


def test_resume_after_a_crash_continues_right_after_the_last_acknowledged_event(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "dag/task/-1/run-crash"
    stream = pages(run, 30)
    send(topic, stream)
    store = DictStore()

    reader = open_reader(topic, run, max_events=5)
    handled: list[TriggerEventEnvelope] = []
    for _ in range(3):
        batch = reader.next_batch()
        handled.extend(batch.events)  # "handled", then acknowledged and saved
        save_checkpoint(store, "stream", reader.ack(batch), generation=0)
    reader.next_batch()  # read but not handled: the crash comes first
    reader.close()

    checkpoint = load_checkpoint(store, "stream", generation=0)
    assert checkpoint is not None
    assert checkpoint.next_sequence_index == len(handled) and checkpoint.partition == reader.partition
    resumed = open_reader(topic, run, checkpoint=checkpoint, max_events=100)
    batches = list(resumed)
    first = batches[0]
    assert first.first_offset == checkpoint.offset  # seeked straight to the checkpoint
    assert handled + events_of(batches) == stream  # nothing twice, nothing skipped
    assert load_checkpoint(store, "stream", generation=1) is None  # a cleared task starts over


def test_resume_from_the_consumer_group_after_a_crash(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-group"
    stream = pages(run, 12)
    send(topic, stream)
    group = f"stream-{uuid.uuid4().hex[:8]}"

    reader = open_reader(topic, run, max_events=4, group_id=group)
    first, second = reader.next_batch(), reader.next_batch()
    handled = first.events + second.events
    reader.ack(second)  # acknowledges the first batch too
    reader.next_batch()  # not acknowledged
    reader.close()

    resumed = open_reader(topic, run, max_events=100, group_id=group)
    batches = list(resumed)
    assert handled + events_of(batches) == stream
    assert resumed.checkpoint() == Checkpoint(0, 8, second.checkpoint.offset, resumed.partition)
    assert resumed.ack(batches[-1]).finished


def test_checkpoint_offset_gone_reads_from_the_beginning_and_skips_handled_indexes(
    new_topic, send, open_reader, kafka_admin
):
    topic = new_topic(partitions=1)
    run = "run-retention"
    retry = pages(run, 10, attempt=1)
    send(topic, [page(run, i) for i in range(5)])  # offsets 0..4: attempt 0, superseded
    send(topic, retry)  # offsets 5..14
    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 5)], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)
    checkpoint = Checkpoint(attempt=1, next_sequence_index=6, offset=2, partition=0)  # offset 2 is gone
    batches = list(open_reader(topic, run, checkpoint=checkpoint))
    assert events_of(batches) == retry[6:]
    assert not batches[0].restarted


def test_resume_when_retention_removed_the_next_unhandled_event_is_a_gap(
    new_topic, send, open_reader, kafka_admin
):
    topic = new_topic(partitions=1)
    run = "run-retention-gap"
    send(topic, pages(run, 10))
    reader = open_reader(topic, run, max_events=5)
    checkpoint = reader.ack(reader.next_batch())
    reader.close()
    assert (checkpoint.next_sequence_index, checkpoint.offset) == (5, 5)
    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 7)], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)
    resumed = open_reader(topic, run, checkpoint=checkpoint, gap_timeout=1.0)
    with pytest.raises(StreamGapError) as info:  # 5 and 6 are gone: never skipped silently
        resumed.next_batch()
    assert info.value.missing_index == 5 and info.value.present == (7, 8, 9)


def test_a_gap_raises_after_gap_timeout_naming_the_missing_index(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    run = "run-gap"
    send(topic, [page(run, 0), page(run, 2), page(run, 3, last=True)])
    reader = open_reader(topic, run, gap_timeout=1.0)
    assert seqs(reader.next_batch().events) == [0]
    start = time.monotonic()
    with pytest.raises(StreamGapError) as info:
        reader.next_batch()
    assert time.monotonic() - start >= 1.0
    assert info.value.missing_index == 1 and info.value.present == (2, 3)
    assert "sequence_index 1" in str(info.value)


def test_a_producer_that_never_starts(new_topic, send, open_reader):
    topic = new_topic(partitions=3)
    send(topic, pages("someone-else", 3))
    reader = open_reader(topic, "run-never", start_timeout=1.5)
    start = time.monotonic()
    with pytest.raises(StreamNotStartedError) as info:
        reader.next_batch()
    assert time.monotonic() - start >= 1.5
    assert topic in str(info.value) and "run-never" in str(info.value)


def test_poison_of_the_stream_key_is_rejected_and_later_pages_still_arrive(
    new_topic, send, producer, open_reader
):
    topic = new_topic(partitions=3)
    run = "run-poison"
    stream = pages(run, 4)
    send(topic, stream[:2])
    producer.send_and_wait(topic, b"not an envelope", key=run)
    producer.send_and_wait(topic, b"someone else's poison", key="other")
    send(topic, stream[2:])
    batches = list(open_reader(topic, run))
    assert events_of(batches) == stream
    rejected = [r for b in batches for r in b.rejected]
    assert len(rejected) == 1
    assert rejected[0].raw == b"not an envelope" and rejected[0].key == run.encode()
    assert isinstance(rejected[0].error, UnknownFramingError) and rejected[0].topic == topic

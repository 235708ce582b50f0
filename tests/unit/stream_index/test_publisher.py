"""When the index writers write: the cadence, the start and end records, a missing topic."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import NotSentError
from airflow_kafka_events.kafka.delivery import DeliveryFuture
from airflow_kafka_events.streams.index.options import Cadence
from airflow_kafka_events.streams.index.publisher import ConsumerIndexWriter, StreamIndexWriter
from airflow_kafka_events.streams.index.record import ConsumerRecord, StreamRecord, stream_key

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingProducer:
    """Collects what is sent; its futures resolve at once (or fail with ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, bytes, dict]] = []
        self.error = error

    def send(self, topic, value, *, key=None, timeout=None):
        self.sent.append((topic, key, json.loads(value)))
        future = DeliveryFuture()
        future.settle(exception=self.error)
        return future


def _writer(producer, clock) -> StreamIndexWriter:
    cadence = Cadence(pages=3, seconds=5.0)
    base = StreamRecord(
        stream_id="d/t/-1/r",
        topic="events",
        partition=1,
        attempt=0,
        status="running",
        pages=0,
        updated_at=0.0,
    )
    return StreamIndexWriter(producer, "idx", base, cadence=cadence, clock=clock)


def test_the_cadence_is_every_n_pages_or_s_seconds():
    cadence = Cadence(pages=3, seconds=5.0)
    assert not cadence.due(0, 100.0)  # nothing new: never
    assert not cadence.due(2, 4.9) and cadence.due(3, 0.0) and cadence.due(1, 5.0)


def test_the_cadence_comes_from_the_kafka_events_section():
    env = {
        "AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_EVERY_PAGES": "7",
        "AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_EVERY_SECONDS": "2.5",
    }
    assert Cadence.from_config(env) == Cadence(pages=7, seconds=2.5)
    assert Cadence.from_config({"AIRFLOW_HOME": "/nonexistent"}) == Cadence(pages=100, seconds=10.0)
    from airflow_kafka_events.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="stream_index_every_pages"):
        Cadence.from_config({"AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_EVERY_PAGES": "0"})


def test_a_producer_writes_at_start_every_n_pages_and_at_the_end():
    producer, clock = RecordingProducer(), Clock()
    writer = _writer(producer, clock)
    writer.start()
    for seq in range(7):
        clock.now += 0.1
        writer.page(seq, 100 + seq)
    clock.now += 1
    writer.finished(7, 107, 100, None)
    states = [(v["status"], v["pages"]) for _, _, v in producer.sent]
    assert states == [("running", 0), ("running", 3), ("running", 6), ("finished", 7)]
    assert all(topic == "idx" and key == stream_key("d/t/-1/r") for topic, key, _ in producer.sent)
    last = producer.sent[-1][2]
    assert (last["first_offset"], last["last_offset"], last["last_sequence"], last["ended_at"]) == (
        100,
        107,
        7,
        clock.now,
    )
    assert [p for _, p in last["pages_over_time"]] == [0, 3, 6, 7]


def test_pages_acknowledged_in_batches_are_recorded_where_the_page_cadence_falls_due():
    producer, clock = RecordingProducer(), Clock()
    writer = _writer(producer, clock)
    writer.start()
    writer.pages(0, [100])
    writer.pages(1, [101, 102, 103, 104, 105, 106, 107])  # pages 1..7: due at page 2 and page 5
    writer.pages(8, [108])  # due at page 8
    states = [(v["pages"], v["last_sequence"], v["last_offset"]) for _, _, v in producer.sent]
    assert states == [(0, None, None), (3, 2, 102), (6, 5, 105), (9, 8, 108)]
    assert producer.sent[-1][2]["first_offset"] == 100


def test_a_slow_producer_writes_every_s_seconds():
    producer, clock = RecordingProducer(), Clock()
    writer = _writer(producer, clock)
    writer.start()
    clock.now += 6
    writer.page(0, 5)
    assert [v["pages"] for _, _, v in producer.sent] == [0, 1]


def test_a_failed_stream_ends_failed_with_its_error():
    producer, clock = RecordingProducer(), Clock()
    writer = _writer(producer, clock)
    writer.start()
    writer.finished(0, 3, None, "RuntimeError: boom")
    assert (producer.sent[-1][2]["status"], producer.sent[-1][2]["error"]) == ("failed", "RuntimeError: boom")


def test_a_missing_index_topic_stops_the_writer_after_one_warning(caplog):
    error = NotSentError("unknown topic", kafka_error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    producer, clock = RecordingProducer(error), Clock()
    writer = _writer(producer, clock)
    writer.start()
    for seq in range(10):
        writer.page(seq, seq)
    writer.finished(10, 10, 0, None)
    assert len(producer.sent) == 1  # nothing more once the topic is known missing
    warnings = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(warnings) == 1 and "topics ensure" in warnings[0]


def test_a_consumer_writes_its_first_position_when_due_and_its_last_at_close():
    producer, clock = RecordingProducer(), Clock()
    base = ConsumerRecord(stream_id="d/t/-1/r", consumer_id="d/c/-1/r", updated_at=0.0, task_id="c")
    writer = ConsumerIndexWriter(producer, "idx", base, cadence=Cadence(pages=5, seconds=60.0), clock=clock)
    for position in (2, 4, 7, 8):  # the first: written; 2 pages on: not due; 5 pages on: due; 1 on
        clock.now += 1
        writer.position(attempt=0, next_sequence_index=position, offset=position + 8, finished=False)
    assert [v["next_sequence_index"] for _, _, v in producer.sent] == [2, 7]
    assert writer.close() is True
    assert [v["next_sequence_index"] for _, _, v in producer.sent] == [2, 7, 8]
    assert [p for _, p in producer.sent[-1][2]["positions_over_time"]] == [2, 7, 8]
    clock.now += 1
    writer.position(attempt=1, next_sequence_index=1, offset=20, finished=False)  # a new attempt: at once
    assert producer.sent[-1][2]["attempt"] == 1 and producer.sent[-1][2]["positions_over_time"] == [
        [clock.now, 1]
    ]


def test_a_writer_that_finds_the_index_topic_missing_sends_nothing(caplog):
    class NoTopic(RecordingProducer):
        def has_topic(self, topic, timeout):
            return False

    producer, clock = NoTopic(), Clock()
    writer = _writer(producer, clock)
    assert writer.check_topic() is False
    writer.start()
    writer.page(0, 1)
    writer.finished(1, 2, 1, None)
    assert producer.sent == []
    assert len([r for r in caplog.records if "topics ensure" in r.getMessage()]) == 1


def test_a_consumer_that_finds_the_index_topic_missing_sends_nothing_and_closes_at_once(caplog):
    class NoTopic(RecordingProducer):
        def has_topic(self, topic, timeout):
            return False

    producer, clock = NoTopic(), Clock()
    base = ConsumerRecord(stream_id="d/t/-1/r", consumer_id="d/c/-1/r", updated_at=0.0, task_id="c")
    writer = ConsumerIndexWriter(producer, "idx", base, clock=clock)
    assert writer.check_topic() is False
    writer.position(attempt=0, next_sequence_index=3, offset=9, finished=True)
    assert writer.close() is False  # no record to wait for
    assert producer.sent == []
    assert len([r for r in caplog.records if "topics ensure" in r.getMessage()]) == 1

"""The stream index on a real broker: written by real trigger runs and stream readers, listed whole.

Producers are :class:`~airflow_kafka_events.streams.producing.trigger.StreamingTrigger` runs driven as the
triggerer drives them; the consumer is a streaming operator's ``resume_stream`` (a real
``StreamReader``); the index topic is compacted, as ``topics ensure`` makes it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.record import (
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    encode_record,
    stream_key,
)
from airflow_kafka_events.ui.inspection.errors import StreamIndexNotFoundError
from airflow_kafka_events.ui.inspection.index_listing import StreamFilter
from airflow_kafka_events.ui.inspection.index_reader import IndexCache, read_index
from airflow_kafka_events.ui.inspection.streams import list_streams
from integration.operators.test_stream_operators import (
    DictStore,
    PagesOperator,
    defer_and_resume,
    make_context,
    new_run_id,
)
from integration.triggers.sample_triggers import PagedTrigger, collect

pytestmark = pytest.mark.integration

COMPACTED = {"cleanup.policy": "compact"}


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


@pytest.fixture
def index_topic(new_topic, monkeypatch) -> str:
    topic = new_topic(partitions=3, prefix="stream-index", config=COMPACTED)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC", topic)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_EVERY_PAGES", "4")
    return topic


def _raw(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every record of ``topic`` as ``(key, value)``, partition by partition."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}", "enable.partition.eof": True}
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        out: list[tuple[bytes, bytes | None]] = []
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error() is not None:
                    continue
                out.append((msg.key(), msg.value()))
                if msg.offset() >= high - 1:
                    break
        return out
    finally:
        consumer.close()


def _index(kafka_bootstrap: str, topic: str):
    return read_index({"bootstrap.servers": kafka_bootstrap}, topic, timeout=20)


def test_a_trigger_run_indexes_its_stream_at_start_every_n_pages_and_at_its_end(
    kafka_bootstrap, new_topic, index_topic
):
    events = new_topic(partitions=3)
    run_id = new_run_id()
    sid = stream_id("index_dag", run_id, "write")
    identity = {"dag_id": "index_dag", "run_id": run_id, "task_id": "write", "map_index": -1, "try_number": 2}
    trigger = PagedTrigger(total=10, trigger_run_id=sid, topic=events, producer_identity=identity)
    (event,) = asyncio.run(collect(trigger))
    descriptor = event.payload

    record = _index(kafka_bootstrap, index_topic).records[stream_key(sid)]
    assert isinstance(record, StreamRecord)
    assert (record.status, record.pages, record.attempt, record.topic) == ("finished", 10, 0, events)
    assert (record.partition, record.first_offset, record.last_offset, record.last_sequence) == (
        descriptor["partition"],
        descriptor["first_offset"],
        descriptor["last_offset"],
        10,
    )
    assert (record.dag_id, record.run_id, record.task_id, record.map_index, record.try_number) == (
        "index_dag",
        run_id,
        "write",
        -1,
        2,
    )
    assert (
        record.started_at is not None and record.ended_at is not None and record.ended_at >= record.started_at
    )
    assert [p for _, p in record.pages_over_time] == [0, 4, 8, 10]

    raw = _raw(kafka_bootstrap, index_topic)  # one key per stream: compaction keeps the last
    assert {key for key, _ in raw} == {sid.encode()}
    assert [json.loads(v)["status"] for _, v in raw] == ["running", "running", "running", "finished"]


def test_a_failed_stream_is_indexed_failed_with_its_error(kafka_bootstrap, new_topic, index_topic):
    events = new_topic(partitions=1)
    sid = stream_id("index_dag", new_run_id(), "fails")
    asyncio.run(collect(PagedTrigger(total=5, fail_at=2, trigger_run_id=sid, topic=events)))
    record = _index(kafka_bootstrap, index_topic).records[stream_key(sid)]
    assert isinstance(record, StreamRecord)
    assert (record.status, record.pages) == ("failed", 2)
    assert record.error is not None and "PageFetchError" in record.error and "page 2" in record.error


def test_a_consumer_indexes_its_position_under_a_key_of_its_own(kafka_bootstrap, new_topic, index_topic):
    events = new_topic(partitions=3)
    run_id = new_run_id()
    effects: list[int] = []
    operator = PagesOperator(task_id="handle", topic=events, pages=6, effects=effects)
    defer_and_resume(operator, make_context(run_id, "handle", DictStore()))
    assert effects == list(range(6))

    sid = stream_id("dag", run_id, "handle")
    snapshot = _index(kafka_bootstrap, index_topic)
    consumer = snapshot.records[consumer_key(sid, sid)]  # the task reads the stream it wrote
    assert isinstance(consumer, ConsumerRecord)
    assert (consumer.task_id, consumer.attempt, consumer.next_sequence_index, consumer.finished) == (
        "handle",
        0,
        7,
        True,
    )
    listing = list_streams({"bootstrap.servers": kafka_bootstrap}, index_topic)
    (row,) = [s for s in listing.streams if s.trigger_run_id == sid]
    (read,) = row.consumer_rows()
    assert (read["pages_handled"], read["lag_pages"], read["finished"]) == (6, 0, True)
    assert read["lag_over_time"] and read["lag_over_time"][-1]["lag"] == 0


def test_every_stream_is_listed_whatever_their_number_and_poison_is_skipped(kafka_bootstrap, index_topic):
    config = {"bootstrap.servers": kafka_bootstrap}
    producer = RecordProducer(KafkaSettings(config).producer_config())
    count = 3000
    try:
        now = time.time()
        for i in range(count):
            sid = stream_id("many", f"run-{i % 7}", f"task_{i}")
            for status, pages in (("running", 1), ("finished" if i % 5 else "failed", 3)):
                record = StreamRecord(
                    stream_id=sid,
                    topic="events",
                    partition=i % 3,
                    attempt=0,
                    status=status,
                    pages=pages,
                    updated_at=now + i,
                    last_page_at=now + i,
                    error=None if status != "failed" else "E: x",
                )
                producer.send(index_topic, encode_record(record), key=stream_key(sid))
        producer.send(index_topic, b"\x1b]0;not an index record", key=b"poison")
        producer.send(index_topic, b'{"v": 1, "kind": "stream"}', key=b"half")
        producer.flush(60)

        cache = IndexCache()
        listing = list_streams(config, index_topic, cache=cache)
        assert len(listing.streams) == count == listing.indexed  # no window, nothing left out
        assert all(s.summary.pages == 3 for s in listing.streams)
        assert sorted(r.key for r in listing.skipped) == ["half", "poison"]
        failed = list_streams(config, index_topic, filters=StreamFilter(state="failed"), cache=cache)
        assert len(failed.streams) == count // 5
        one_run = list_streams(config, index_topic, filters=StreamFilter(dag_id="many", run_id="run-3"))
        assert len(one_run.streams) == len([i for i in range(count) if i % 7 == 3])

        late = stream_id("many", "run-late", "task_late")  # the cache reads what is new
        record = StreamRecord(
            stream_id=late, topic="events", partition=0, attempt=0, status="running", pages=1, updated_at=now
        )
        producer.send(index_topic, encode_record(record), key=stream_key(late))
        producer.send(index_topic, None, key=b"poison")  # a tombstone forgets the poison record
        producer.flush(30)
        again = list_streams(config, index_topic, cache=cache)
        assert len(again.streams) == count + 1 and [r.key for r in again.skipped] == ["half"]
    finally:
        producer.close(5.0)


def test_a_missing_index_topic_is_a_typed_error_naming_topics_ensure(kafka_bootstrap):
    with pytest.raises(StreamIndexNotFoundError, match="topics ensure"):
        list_streams({"bootstrap.servers": kafka_bootstrap}, f"no-index-{uuid.uuid4().hex}", timeout=10)


def test_a_missing_index_topic_never_holds_up_or_fails_a_stream(
    kafka_bootstrap, new_topic, monkeypatch, capsys
):
    missing = f"no-index-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC", missing)
    events = new_topic(partitions=1)
    sid = stream_id("index_dag", new_run_id(), "no_index")
    started = time.monotonic()
    (event,) = asyncio.run(collect(PagedTrigger(total=3, trigger_run_id=sid, topic=events)))
    assert event.payload["count"] == 3 and event.payload["error"] is None
    assert time.monotonic() - started < 30
    # found missing before the first record (one metadata request), not after its delivery timeout
    warned = [line for line in capsys.readouterr().out.splitlines() if missing in line]  # the trigger's log
    assert len(warned) == 1 and "does not exist" in warned[0] and "topics ensure" in warned[0], warned


def test_a_consumer_finds_a_missing_index_topic_before_its_first_record(
    kafka_bootstrap, new_topic, monkeypatch, capsys
):
    missing = f"no-index-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC", missing)
    events = new_topic(partitions=1)
    effects: list[int] = []
    operator = PagesOperator(task_id="handle", topic=events, pages=3, effects=effects)
    defer_and_resume(operator, make_context(new_run_id(), "handle", DictStore()))
    assert effects == [0, 1, 2]
    logged = capsys.readouterr().out.splitlines()  # the task's log
    consumer = [line for line in logged if "consumer " in line and "stream index" in line]
    # one metadata request found it missing: no record was queued, none failed at its delivery timeout
    assert len(consumer) == 1 and "does not exist" in consumer[0] and "topics ensure" in consumer[0], consumer

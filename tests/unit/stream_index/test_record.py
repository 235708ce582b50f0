"""The stream index's records: codec, versions, unknown fields, poison, bounded samples."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.streams.index.record import (
    MAX_SAMPLES,
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    decode_record,
    encode_record,
    sampled,
    stream_key,
)

pytestmark = pytest.mark.unit

STREAM = "dag/task/-1/manual__2026-12-02T00:00:00+00:00"


def _stream(**changes) -> StreamRecord:
    values = dict(
        stream_id=STREAM,
        topic="airflow.trigger-events",
        partition=2,
        attempt=1,
        status="running",
        pages=5,
        updated_at=1000.5,
        started_at=990.0,
        last_sequence=4,
        first_offset=10,
        last_offset=40,
        generation=0,
        dag_id="dag",
        run_id="manual__2026-12-02T00:00:00+00:00",
        task_id="task",
        map_index=-1,
        try_number=1,
        pages_over_time=((995.0, 2), (1000.5, 5)),
    )
    values.update(changes)
    return StreamRecord(**values)


def test_a_stream_record_round_trips():
    record = _stream(status="failed", error="RuntimeError: 500", ended_at=1001.0)
    assert decode_record(encode_record(record)) == record


def test_a_consumer_record_round_trips():
    record = ConsumerRecord(
        stream_id=STREAM,
        consumer_id="dag/read/-1/manual__2026-12-02T00:00:00+00:00",
        updated_at=1002.0,
        dag_id="dag",
        run_id="manual__2026-12-02T00:00:00+00:00",
        task_id="read",
        map_index=-1,
        attempt=1,
        next_sequence_index=3,
        offset=33,
        finished=False,
        positions_over_time=((1001.0, 1), (1002.0, 3)),
    )
    assert decode_record(encode_record(record)) == record


def test_unknown_fields_and_a_newer_version_are_read_as_far_as_understood():
    data = json.loads(encode_record(_stream()))
    data.update(v=7, brand_new={"x": 1}, another=[1, 2])
    record = decode_record(json.dumps(data).encode())
    assert isinstance(record, StreamRecord)
    assert record.version == 7 and record.pages == 5 and record.stream_id == STREAM


def test_an_older_record_with_fewer_fields_gets_the_defaults():
    raw = json.dumps(
        {"v": 1, "kind": "stream", "stream_id": STREAM, "topic": "t", "status": "finished", "updated_at": 5}
    ).encode()
    record = decode_record(raw)
    assert isinstance(record, StreamRecord)
    assert (record.pages, record.partition, record.last_offset, record.pages_over_time) == (0, 0, None, ())


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xff\xfe not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"kind": "stream"}', "schema version"),
        (b'{"v": 1, "kind": "watcher"}', "kind"),
        (
            b'{"v": 1, "kind": "stream", "stream_id": "s", "topic": "t", "status": "done", "updated_at": 1}',
            "status",
        ),
        (b'{"v": 1, "kind": "stream", "stream_id": "s", "topic": "t", "status": "running"}', "updated_at"),
        (
            b'{"v": 1, "kind": "stream", "stream_id": "s", "topic": "t", "status": "running", '
            b'"updated_at": 1, "pages": -3}',
            "pages",
        ),
        (
            b'{"v": 1, "kind": "stream", "stream_id": "s", "topic": "t", "status": "running", '
            b'"updated_at": 1, "pages_over_time": [[1, "x"]]}',
            "pages_over_time",
        ),
        (b'{"v": 1, "kind": "consumer", "stream_id": "s", "updated_at": 1}', "consumer_id"),
    ],
)
def test_a_poison_record_names_what_is_wrong(raw, why):
    with pytest.raises(ValidationError, match=why):
        decode_record(raw)


def test_keys_are_the_stream_id_and_a_json_array_per_consumer():
    assert stream_key(STREAM) == STREAM.encode()
    key = consumer_key(STREAM, "dag/read/-1/r")
    assert json.loads(key) == ["consumer", STREAM, "dag/read/-1/r"]
    assert not key.startswith(stream_key("dag"))  # no task's stream id starts with "["


def test_samples_keep_the_newest_and_only_go_forward():
    samples: tuple = ()
    for i in range(MAX_SAMPLES + 10):
        samples = sampled(samples, float(i), i)
    assert len(samples) == MAX_SAMPLES and samples[0] == (10.0, 10) and samples[-1] == (69.0, 69)
    back = sampled(samples, 30.0, 999)  # a clock that went back drops what is "later"
    assert back[-2:] == ((30.0, 30), (30.0, 999)) and all(t <= 30.0 for t, _ in back[:-1])
    # two writes in the same millisecond are both samples (the first was rounded up to it)
    assert sampled(((100.001, 4),), 100.0008, 8) == ((100.001, 4), (100.001, 8))
    decoded = StreamRecord.from_json({**_stream().to_json(), "pages_over_time": [[i, i] for i in range(500)]})
    assert len(decoded.pages_over_time) == MAX_SAMPLES  # a reader keeps them bounded too

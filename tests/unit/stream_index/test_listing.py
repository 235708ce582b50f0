"""Merging the index's records into listings: states, filters, consumers' lag and its history."""

from __future__ import annotations

import pytest

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.record import (
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    encode_record,
    stream_key,
)
from airflow_kafka_events.ui.inspection.index_listing import (
    StreamFilter,
    consumer_row,
    consumers_of_task,
    indexed_streams,
    lag_series,
)
from airflow_kafka_events.ui.inspection.index_reader import IndexSnapshot, apply_records

pytestmark = pytest.mark.unit

RUN = "manual__2026-12-02T00:00:00+00:00"


def _stream(
    task: str, status: str = "running", *, at: float = 100.0, map_index: int = -1, **more
) -> StreamRecord:
    sid = stream_id("dag", RUN, task, map_index)
    values = dict(
        stream_id=sid,
        topic="t",
        partition=0,
        attempt=0,
        status=status,
        pages=10,
        updated_at=at,
        last_page_at=at,
        started_at=at - 10,
        last_offset=99,
    )
    values.update(more)
    return StreamRecord(**values)


def _consumer(stream: StreamRecord, task: str, position: int, **more) -> ConsumerRecord:
    values = dict(
        stream_id=stream.stream_id,
        consumer_id=stream_id("dag", RUN, task),
        updated_at=100.0,
        dag_id="dag",
        run_id=RUN,
        task_id=task,
        map_index=-1,
        attempt=stream.attempt,
        next_sequence_index=position,
    )
    values.update(more)
    return ConsumerRecord(**values)


def test_states_follow_the_index_status_and_newest_activity_comes_first():
    rows = indexed_streams(
        [_stream("a", "finished", at=50), _stream("b", "failed", at=300, error="E: x"), _stream("c", at=200)],
        {},
    )
    assert [(r.summary.task_id, r.summary.state) for r in rows] == [
        ("b", "failed"),
        ("c", "running"),
        ("a", "complete"),
    ]
    assert rows[0].summary.error == "E: x" and rows[0].to_dict()["status"] == "failed"
    assert (
        rows[0].summary.dag_id == "dag" and rows[0].summary.run_id == RUN and rows[0].summary.map_index == -1
    )


def test_filters_select_by_dag_run_task_map_index_and_state():
    rows = indexed_streams(
        [_stream("a"), _stream("a", map_index=2), _stream("b", "finished"), _stream("c", "failed")], {}
    )

    def ids(**f):
        return sorted(
            (r.summary.task_id, r.summary.map_index) for r in rows if StreamFilter(**f).matches(r.record)
        )

    assert ids(task_id="a") == [("a", -1), ("a", 2)]
    assert ids(task_id="a", map_index=2) == [("a", 2)]
    assert ids(state="complete") == [("b", -1)]
    assert ids(dag_id="other") == [] and ids(run_id=RUN, state="failed") == [("c", -1)]
    with pytest.raises(ValidationError, match="running, complete, failed"):
        StreamFilter(state="finished-ish")
    assert StreamFilter("dag", RUN, "a").own_stream_id() == stream_id("dag", RUN, "a")
    assert StreamFilter("dag", RUN, "a", map_index=3).own_stream_id() == stream_id("dag", RUN, "a", 3)
    assert StreamFilter("dag", None, "a").own_stream_id() is None


def test_a_consumer_lag_is_the_stream_pages_minus_what_it_handled_in_the_same_attempt():
    stream = _stream("w", pages=10)
    assert consumer_row(_consumer(stream, "r", 7), stream)["lag_pages"] == 3
    done = _consumer(stream, "r", 11, finished=True)  # the end marker counted in its position
    assert (consumer_row(done, stream)["pages_handled"], consumer_row(done, stream)["lag_pages"]) == (10, 0)
    other = _consumer(stream, "r", 2, attempt=1, lag_pages=None)
    assert consumer_row(other, stream)["lag_pages"] is None  # another attempt: unknown
    assert consumer_row(_consumer(stream, "r", 2, lag_pages=4), None)["lag_pages"] == 4  # stream unknown


def test_the_lag_history_merges_both_series_step_by_step():
    stream = _stream("w", pages_over_time=((10.0, 2), (20.0, 6), (30.0, 10)))
    consumer = _consumer(stream, "r", 9, positions_over_time=((15.0, 1), (25.0, 5), (35.0, 10)))
    assert lag_series(consumer, stream) == [(15.0, 1), (20.0, 5), (25.0, 1), (30.0, 5), (35.0, 0)]
    row = consumer_row(consumer, stream)
    assert [p["lag"] for p in row["lag_over_time"]] == [1, 5, 1, 5, 0]
    assert lag_series(_consumer(stream, "r", 9, attempt=3), stream) == []


def test_the_consumers_of_a_task_instance_are_found_across_streams():
    a, b = _stream("a"), _stream("b")
    consumers = {
        a.stream_id: [_consumer(a, "r", 1)],
        b.stream_id: [_consumer(b, "r", 2), _consumer(b, "x", 1)],
    }
    found = consumers_of_task(consumers, "dag", RUN, "r", None)
    assert sorted(c.stream_id for c in found) == sorted([a.stream_id, b.stream_id])
    assert consumers_of_task(consumers, "dag", RUN, "r", 4) == []


def test_applying_records_keeps_each_key_latest_drops_tombstones_and_skips_poison():
    a, b = _stream("a"), _stream("b")
    reader = _consumer(a, "r", 3)
    snapshot = IndexSnapshot("idx")
    apply_records(
        snapshot,
        {
            stream_key(a.stream_id): encode_record(a),
            stream_key(b.stream_id): encode_record(b),
            consumer_key(a.stream_id, reader.consumer_id): encode_record(reader),
            b"junk": b"\x00not an index record",
            stream_key("dag/x/-1/r"): encode_record(a),  # a record under another stream's key
        },
    )
    assert set(snapshot.streams()) == {a.stream_id, b.stream_id}
    assert snapshot.consumers() == {a.stream_id: [reader]}
    assert sorted(s.key for s in snapshot.skipped.values()) == ["dag/x/-1/r", "junk"]
    assert "does not match" in snapshot.skipped[b"dag/x/-1/r"].reason
    newer = _stream("a", "finished", pages=12)
    apply_records(
        snapshot,
        {stream_key(a.stream_id): encode_record(newer), stream_key(b.stream_id): None, b"junk": None},
    )
    assert snapshot.streams() == {a.stream_id: newer} and b"junk" not in snapshot.skipped

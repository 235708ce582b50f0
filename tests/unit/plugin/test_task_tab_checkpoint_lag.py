"""The task-instance tab's consumers known only from their checkpoints show their lag.

A consumer that wrote no stream-index record is listed from its checkpoint in the task state store;
its lag is measured against the stream it reads when that stream is in the index.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

pytestmark = pytest.mark.unit

STREAM = "producer_dag/manual__1/produce/-1/t1"


def _checkpoint(stream: str, next_sequence_index: int, attempt: int = 0):
    from airflow_kafka_events.streams.checkpoint import Checkpoint
    from airflow_kafka_events.ui.airflow_state import ConsumerCheckpoint

    return ConsumerCheckpoint(
        trigger_run_id=stream,
        dag_id="consumer_dag",
        run_id="manual__1",
        task_id="consume",
        map_index=-1,
        generation=1,
        checkpoint=Checkpoint(attempt=attempt, next_sequence_index=next_sequence_index, offset=7),
        updated_at=datetime(2026, 12, 3, tzinfo=timezone.utc),
    )


def _listing():
    from airflow_kafka_events.streams.index.record import StreamRecord
    from airflow_kafka_events.ui.inspection.streams import StreamListing

    written = StreamRecord(
        stream_id=STREAM, topic="t", partition=0, attempt=0, status="running", pages=10, updated_at=1.0
    )
    # the listing's filter (the consumer's task) matched no stream: the stream read is in the index only
    return StreamListing(matched=[], index_topic="idx", indexed=1, records={STREAM: written})


def test_a_consumer_known_from_its_checkpoint_shows_its_lag_behind_the_indexed_stream():
    from airflow_kafka_events.ui.views.streams import _consumer_rows, _indexed_summaries

    stored = [_checkpoint(STREAM, next_sequence_index=4)]
    (row,) = _consumer_rows(stored, _indexed_summaries(_listing(), stored))
    assert (row["trigger_run_id"], row["pages_handled"], row["lag_pages"]) == (STREAM, 4, 6)


def test_the_lag_is_unknown_for_a_stream_not_in_the_index_or_another_attempt():
    from airflow_kafka_events.ui.views.streams import _consumer_rows, _indexed_summaries

    stored = [_checkpoint("other/run/t/-1/x", 4), _checkpoint(STREAM, 4, attempt=1)]
    rows = _consumer_rows(stored, _indexed_summaries(_listing(), stored))
    assert [r["lag_pages"] for r in rows] == [None, None]

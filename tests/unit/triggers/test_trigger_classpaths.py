"""Trigger class paths are stored in Airflow's trigger table: they must never move.

A deferred task waits on a row holding ``serialize()[0]``; the triggerer imports that path
to run it, and an asset watcher's identity includes it.  Each public trigger must keep
serializing to the path it always had, and that path must import the same class.
"""

from __future__ import annotations

import pytest
from airflow.sdk.module_loading import import_string

from airflow_kafka_events.http.trigger import GraphPaginationTrigger, HttpPaginationTrigger
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger, OnePageTrigger
from airflow_kafka_events.streams.producing.wrapper import StreamingWrapperTrigger
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

pytestmark = pytest.mark.unit

STREAM = {"trigger_run_id": "dag/task/-1/run", "topic": "airflow.trigger-events"}

TRIGGERS = {
    "airflow_kafka_events.http.trigger.HttpPaginationTrigger": lambda: HttpPaginationTrigger(
        endpoint="/items", **STREAM
    ),
    "airflow_kafka_events.http.trigger.GraphPaginationTrigger": lambda: GraphPaginationTrigger(
        endpoint="v1.0/users", **STREAM
    ),
    "airflow_kafka_events.streams.producing.wrapper.StreamingWrapperTrigger": lambda: StreamingWrapperTrigger(
        wrapped_classpath="airflow_kafka_events.streams.producing.demo_trigger.OnePageTrigger",
        wrapped_kwargs={"page": 0, "pages": 1},
        **STREAM,
    ),
    "airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger": lambda: CountingPagesTrigger(
        pages=2, **STREAM
    ),
    "airflow_kafka_events.streams.producing.demo_trigger.OnePageTrigger": lambda: OnePageTrigger(
        page=0, pages=1
    ),
    "airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger": lambda: StreamWaitTrigger(
        topic="airflow.trigger-events", trigger_run_id="dag/task/-1/run"
    ),
    "airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger": lambda: KafkaAssetEventTrigger(
        topics=["airflow.asset-events"], asset_uri="s3://bucket/key"
    ),
}


@pytest.mark.parametrize("classpath", sorted(TRIGGERS))
def test_serialize_keeps_the_stored_classpath(classpath):
    trigger = TRIGGERS[classpath]()
    stored, _kwargs = trigger.serialize()
    assert stored == classpath
    assert import_string(stored) is type(trigger)

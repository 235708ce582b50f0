"""B5 DAGs: the two ways a Kafka asset event becomes an Airflow AssetEvent.

* ``b5_watcher_consumer`` is scheduled on ``bench://b5/watched``, an asset with a
  ``KafkaAssetEventTrigger`` watcher (``kafka_watched_asset``) on the B5 watcher topic, through the
  ``kafka_watcher`` connection;
* ``b5_bridge_consumer`` (``PartitionedAssetTimetable``) is scheduled on ``bench://b5/bridged``,
  whose events the partition bridge posts through the REST API, one run per partition key.

Topic names carry ``$AIRFLOW_KAFKA_EVENTS_B5_RUN`` (set by ``benchmarks/asset_event_e2e_latency.py``)
so that every benchmark run has its own topics.  Without it (another benchmark's stack sharing
this DAGs folder) the file defines no DAG, so no watcher runs there.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

from airflow_kafka_events.watcher.trigger import kafka_watched_asset

RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_B5_RUN")
WATCHER_TOPIC = f"bench.b5.watcher.{RUN}"
WATCHER_DLQ = f"bench.b5.watcher-dlq.{RUN}"
START = pendulum.datetime(2026, 1, 1, tz="UTC")

if RUN:
    WATCHED = kafka_watched_asset(
        "bench://b5/watched",
        name="b5_watched",
        topics=[WATCHER_TOPIC],
        kafka_config_id="kafka_watcher",
        dlq_topic=WATCHER_DLQ,
    )
    BRIDGED = Asset(name="b5_bridged", uri="bench://b5/bridged")

    with DAG(
        dag_id="b5_watcher_consumer", schedule=[WATCHED], start_date=START, catchup=False, tags=["bench"]
    ):

        @task
        def consume_watched() -> None:
            """Nothing to do: the benchmark measures when the AssetEvent row exists."""

        consume_watched()

    with DAG(
        dag_id="b5_bridge_consumer",
        schedule=PartitionedAssetTimetable(assets=BRIDGED),
        start_date=START,
        catchup=False,
        tags=["bench"],
    ):

        @task
        def consume_bridged() -> None:
            """Nothing to do: the benchmark measures when the AssetEvent row exists."""

        consume_bridged()

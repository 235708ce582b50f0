"""Six watched assets on one topic, one connection with one ``group.id``: the setup that lost
half its events with two triggerers when watchers shared a consumer group."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from airflow_kafka_events.watcher.trigger import kafka_watched_asset

TOPIC = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_MULTI_TOPIC", "e2e.watchers.multi")
DLQ = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_MULTI_DLQ") or None  # refused records are dropped without
ASSETS = [
    kafka_watched_asset(f"e2e://multi/{i}", topics=[TOPIC], kafka_config_id="kafka_watcher", dlq_topic=DLQ)
    for i in range(6)
]

with DAG(
    dag_id="e2e_watchers_multi",
    schedule=ASSETS,  # all six: runs stay few while the watchers fire hundreds of events
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):

    @task
    def noop() -> None:
        return None

    noop()

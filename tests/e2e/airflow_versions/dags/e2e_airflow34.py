"""End-to-end DAGs of Airflow 3.4's features (defined on Airflow 3.4 only; Airflow 3.3 parses none).

* ``e2e_v34_queued`` is scheduled on ``e2e://v34/queued``, whose watcher is on the trigger queue
  ``e2e-kafka-watchers``: only a triggerer started with ``--queues e2e-kafka-watchers`` runs it;
* ``e2e_v34_per_event`` is scheduled on ``e2e://v34/per-event``, whose watcher is on no queue: any
  triggerer started without ``--queues`` runs it.

Each run returns the event ids of the watcher payloads that triggered it.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kafka_events.airflow_versions import watcher_queues_supported
from airflow_kafka_events.assets.watcher_payload import watcher_payload
from airflow_kafka_events.watcher.trigger import kafka_watched_asset

RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN", "local")
TOPIC = f"e2e.v34.events.{RUN}"
QUEUE = "e2e-kafka-watchers"
START = pendulum.datetime(2026, 1, 1, tz="UTC")


@task
def event_ids(**context: Any) -> list[str]:
    events = context["triggering_asset_events"]
    payloads = [watcher_payload(event) for asset in events for event in events[asset]]
    return [payload["event_id"] for payload in payloads if payload is not None]


def _consumer(dag_id: str, uri: str, **watcher: Any) -> DAG:
    asset = kafka_watched_asset(uri, topics=[TOPIC], kafka_config_id="kafka_watcher", **watcher)
    with DAG(dag_id, schedule=[asset], start_date=START, catchup=False) as dag:
        event_ids()
    return dag


if watcher_queues_supported():
    _consumer("e2e_v34_queued", "e2e://v34/queued", queue=QUEUE)
    _consumer("e2e_v34_per_event", "e2e://v34/per-event")

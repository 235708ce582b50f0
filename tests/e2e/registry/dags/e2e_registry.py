"""End-to-end DAGs: asset events in a schema registry's wire format (tests/e2e/registry).

They exist only when the session's stack has the ``kafka_registry`` connection (the broker, through
the session's schema registry: ``schema.registry.url`` in its extras), which tests/e2e/conftest.py
adds when a selected test uses the registry.

* ``e2e_registry_emit`` writes one asset event for each asset below with ``emit_asset_event`` on
  that connection (so in the registry's wire format) and returns their event ids;
* ``e2e_registry_watched`` is scheduled on an asset whose watcher reads through that connection;
* ``e2e_registry_bridged`` is scheduled on the asset the test's partition bridge posts to.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_kafka_events.watcher.trigger import kafka_watched_asset

CONN = "kafka_registry"
RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN", "local")
TOPIC = f"e2e.registry.events.{RUN}"
DLQ_TOPIC = f"e2e.registry.dlq.{RUN}"
START = pendulum.datetime(2026, 1, 1, tz="UTC")

if os.environ.get(f"AIRFLOW_CONN_{CONN.upper()}"):
    WATCHED = kafka_watched_asset(
        "e2e://registry/watched", topics=[TOPIC], kafka_config_id=CONN, dlq_topic=DLQ_TOPIC
    )
    BRIDGED = Asset(name="e2e_registry_bridged", uri="x-e2e://registry/bridged")

    with DAG(dag_id="e2e_registry_emit", schedule=None, start_date=START, catchup=False):

        @task(retries=0)
        def emit(**context: Any) -> dict[str, str]:
            from airflow_kafka_events.assets.emit import emit_asset_event

            conf = context["dag_run"].conf
            extra = {"tag": conf["tag"], "by": "emit_asset_event"}
            watched = emit_asset_event(WATCHED, extra=extra, topic=TOPIC, kafka_config_id=CONN)
            bridged = emit_asset_event(BRIDGED, extra=extra, topic=conf["bridge_topic"], kafka_config_id=CONN)
            return {"watched": watched.event_id, "bridged": bridged.event_id}

        emit()

    for _dag_id, _asset in (("e2e_registry_watched", WATCHED), ("e2e_registry_bridged", BRIDGED)):
        with DAG(dag_id=_dag_id, schedule=[_asset], start_date=START, catchup=False):

            @task
            def consume() -> None:
                pass

            consume()

"""Schedule on Kafka asset events with Airflow's own ``MessageQueueTrigger``.

``refresh_reports`` runs when an asset event for ``ops://reports`` arrives on the asset events
topic: its ``AssetWatcher`` is common.messaging's ``MessageQueueTrigger`` with the scheme
``kafka-events`` (needs ``airflow-kafka-events[messaging]``), which builds this package's asset
watcher -- the same trigger ``kafka_watched_asset("ops://reports", ...)`` would.  Anything may emit
the event: a task (``emit_asset_event``), a callback, or a system outside Airflow
(``airflow-kafka-events emit ops://reports ...`` or ``airflow_kafka_events.assets.publish.emit``).
See docs/message-queue-trigger.md.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_kafka_events.assets.watcher_payload import watcher_payload

REPORTS = Asset(
    "ops://reports",
    watchers=[
        AssetWatcher(
            name="reports_from_kafka",
            trigger=MessageQueueTrigger(
                scheme="kafka-events",
                uri="ops://reports",
                topics=["airflow.asset-events"],
                kafka_config_id="kafka_watcher",
                dlq_topic="airflow.kafka-events.dlq",
            ),
        )
    ],
)

with DAG(
    dag_id="refresh_reports",
    schedule=[REPORTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "asset-events"],
):

    @task
    def refresh(**context: Any) -> list[dict[str, Any]]:
        """Each triggering event's ``extra`` (several events may coalesce into one run)."""
        events = context["triggering_asset_events"]
        payloads = [p for asset in events for event in events[asset] if (p := watcher_payload(event))]
        for payload in payloads:
            print(f"refreshing reports for {payload['extra']} (event {payload['event_id']})")
        return [payload["extra"] for payload in payloads]

    refresh()

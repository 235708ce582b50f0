"""Investigate a failure in its own DAG: a failure callback emits, a watcher schedules.

``nightly_load`` does the work.  When a run fails, its DAG-level failure callback publishes an
operational event for the asset ``ops://investigate`` to Kafka and returns at once -- the
callback stays lightweight.  ``investigate_failure`` is scheduled on that asset: an
``AssetWatcher`` whose trigger (:class:`KafkaAssetEventTrigger`) consumes the topic in the
triggerer turns the event into an Airflow asset event, and the investigation runs as a normal
DAG run, with retries, logs and visibility.

Connections (librdkafka keys in the extras):

* ``kafka_default`` -- used to *publish* (``bootstrap.servers``, security settings);
* ``kafka_watcher`` -- used by the watcher to *consume*, with a ``group.id`` of its own and
  ``"enable.auto.commit": "false"``, e.g.::

      AIRFLOW_CONN_KAFKA_WATCHER='{"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka:9092",
          "group.id": "airflow-asset-watchers", "enable.auto.commit": "false",
          "auto.offset.reset": "earliest"}}'

* optionally ``asset_signing`` -- its password is the HMAC-SHA256 key events must be signed with
  (uncomment ``signing_conn_id`` below; the emit side then has to sign, see
  :func:`airflow_kafka_events.assets.authz.sign_envelope`).

Triggerer: set ``[triggerer] shared_stream_cohort_grace_period`` to a few seconds
(``AIRFLOW__TRIGGERER__SHARED_STREAM_COHORT_GRACE_PERIOD=5``) so that all watchers sharing the
consumer re-join before it hands out records after a triggerer restart.

Safety rails on the consumer side: only DAG callbacks of ``nightly_*`` DAGs may publish for this
asset (``allow``); events whose causation chain is longer than 3 are refused (an investigation
that fails and asks for an investigation of itself cannot loop forever); repeats of an
idempotency key are dropped; anything refused goes to the dead-letter topic with its reason.
Several failures that arrive before the investigation run is created coalesce into one run,
which sees all of them in ``triggering_asset_events``.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kafka_events.assets.watcher_payload import watcher_causation, watcher_payload
from airflow_kafka_events.watcher.trigger import kafka_watched_asset

TOPIC = "airflow.asset-events"
DLQ_TOPIC = "airflow.kafka-events.dlq"

INVESTIGATE = kafka_watched_asset(
    "ops://investigate",
    topics=[TOPIC],
    kafka_config_id="kafka_watcher",
    dlq_topic=DLQ_TOPIC,
    allow=[{"source_kinds": ["dag_callback"], "dag_ids": ["nightly_*"]}],
    max_causation_depth=3,
    # signing_conn_id="asset_signing",
)


def request_investigation(context: Any) -> None:
    """DAG-level failure callback: publish references (ids, reason), never logs or secrets."""
    from airflow_kafka_events.assets import emit_from_dag_callback

    emit_from_dag_callback(
        context,
        INVESTIGATE,
        extra={
            "failed_dag_id": context["dag"].dag_id,
            "failed_run_id": context["run_id"],
            "reason": context.get("reason"),
        },
        topic=TOPIC,
        # keep the causation chain when this DAG itself was started by a watched asset event
        causation=watcher_causation(context),
    )


with DAG(
    dag_id="nightly_load",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    on_failure_callback=request_investigation,
    tags=["example", "asset-events"],
):

    @task(retries=1)
    def load() -> None:
        raise RuntimeError("the upstream export is missing")

    load()


with DAG(
    dag_id="investigate_failure",
    schedule=[INVESTIGATE],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "asset-events", "operations"],
):

    @task(retries=2)
    def investigate(**context: Any) -> list[dict[str, Any]]:
        """One run may carry several failures (events coalesce): handle each, idempotently."""
        events = context["triggering_asset_events"]
        payloads = [p for asset in events for event in events[asset] if (p := watcher_payload(event))]
        for payload in payloads:
            failed = payload["extra"]
            print(
                f"investigating {failed['failed_dag_id']} run {failed['failed_run_id']}: "
                f"{failed['reason']} (event {payload['event_id']}, emitted {payload['emitted_at']})"
            )
        return payloads

    investigate()

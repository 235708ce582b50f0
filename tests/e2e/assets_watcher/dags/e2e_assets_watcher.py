"""End-to-end DAGs: asset events from Kafka become Airflow asset events through AssetWatchers.

Every watched asset below shares ONE consumer in the triggerer (same topics, connection,
consumer group and dead-letter topic), the ``kafka_watcher`` connection of the test stack.

* ``e2e_watcher_failing_job`` fails; its DAG-level failure callback emits an operational event
  for ``ops://investigate``; ``e2e_watcher_investigate`` is scheduled on that asset and returns
  the watcher payloads of its triggering events;
* ``e2e_watcher_dedupe`` / ``e2e_watcher_poison`` / ``e2e_watcher_restart_a`` /
  ``e2e_watcher_restart_b`` are plain consumers of assets the tests publish to directly;
* ``e2e_watcher_message_queue`` is scheduled on an asset whose watcher is Airflow's own
  ``MessageQueueTrigger(scheme="kafka-events", ...)`` (common.messaging), not ``kafka_watched_asset``;
* ``e2e_watcher_loop`` is a feedback loop: it is scheduled on ``e2e://watcher/loop``, fails, and
  its failure callback emits to ``e2e://watcher/loop`` again; its watcher accepts at most two
  ancestors, so the loop runs three times per seed event.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_kafka_events.assets.watcher_payload import watcher_causation, watcher_payload
from airflow_kafka_events.watcher.trigger import kafka_watched_asset

RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN", "local")
TOPIC = f"e2e.watcher.events.{RUN}"
DLQ_TOPIC = f"e2e.watcher.dlq.{RUN}"
LOOP_MAX_DEPTH = 2
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def watched(uri: str, **kwargs: Any):
    return kafka_watched_asset(
        uri, topics=[TOPIC], kafka_config_id="kafka_watcher", dlq_topic=DLQ_TOPIC, **kwargs
    )


INVESTIGATE = watched("ops://investigate")
DEDUPE = watched("e2e://watcher/dedupe")
POISON = watched("e2e://watcher/poison")
LOOP = watched("e2e://watcher/loop", max_causation_depth=LOOP_MAX_DEPTH)
RESTART_A = watched("e2e://watcher/restart-a")
RESTART_B = watched("e2e://watcher/restart-b")
MESSAGE_QUEUE = Asset(
    "e2e://watcher/message-queue",
    watchers=[
        AssetWatcher(
            name="e2e_message_queue_watcher",
            trigger=MessageQueueTrigger(
                scheme="kafka-events",
                uri="e2e://watcher/message-queue",
                topics=[TOPIC],
                kafka_config_id="kafka_watcher",
                dlq_topic=DLQ_TOPIC,
            ),
        )
    ],
)


def _payloads(context: Any) -> list[dict[str, Any]]:
    events = context["triggering_asset_events"]
    found = [watcher_payload(event) for asset in events for event in events[asset]]
    return [payload for payload in found if payload is not None]


# --------------------------------------------------------------------------- (a) investigate on failure
def _request_investigation(context: Any) -> None:
    from airflow_kafka_events.assets.emit import emit_from_dag_callback

    run_id = context["run_id"]
    emit_from_dag_callback(
        context,
        INVESTIGATE,
        extra={
            "failed_dag_id": context["dag"].dag_id,
            "failed_run_id": run_id,
            "reason": context.get("reason"),
        },
        topic=TOPIC,
        kafka_config_id="kafka_default",
        causation=watcher_causation(context),
    )


with DAG(
    dag_id="e2e_watcher_failing_job",
    schedule=None,
    start_date=START,
    catchup=False,
    on_failure_callback=_request_investigation,
):

    @task(retries=0)
    def load() -> None:
        raise RuntimeError("simulated failure of the nightly load")

    load()


with DAG(dag_id="e2e_watcher_investigate", schedule=[INVESTIGATE], start_date=START, catchup=False):

    @task
    def investigate(**context: Any) -> list[dict[str, Any]]:
        payloads = _payloads(context)
        for payload in payloads:
            print(f"investigating {payload['extra']} (event {payload['event_id']})")
        return payloads

    investigate()


# --------------------------------------------------------------------------- plain consumers
for _dag_id, _asset in (
    ("e2e_watcher_dedupe", DEDUPE),
    ("e2e_watcher_poison", POISON),
    ("e2e_watcher_restart_a", RESTART_A),
    ("e2e_watcher_restart_b", RESTART_B),
    ("e2e_watcher_message_queue", MESSAGE_QUEUE),
):
    with DAG(dag_id=_dag_id, schedule=[_asset], start_date=START, catchup=False):

        @task
        def consume(**context: Any) -> list[str]:
            return [payload["event_id"] for payload in _payloads(context)]

        consume()


# --------------------------------------------------------------------------- (d) feedback loop
def _loop_again(context: Any) -> None:
    from airflow_kafka_events.assets.emit import emit_from_dag_callback

    chain = watcher_causation(context)
    emit_from_dag_callback(
        context,
        LOOP,
        extra={"hop": len(chain)},
        # one key per hop: if the chain were ever lost, the watcher would drop the repeat
        # instead of looping forever
        idempotency_key=f"loop-{chain[0] if chain else 'seed'}-{len(chain)}",
        topic=TOPIC,
        kafka_config_id="kafka_default",
        causation=chain,
    )


with DAG(
    dag_id="e2e_watcher_loop",
    schedule=[LOOP],
    start_date=START,
    catchup=False,
    on_failure_callback=_loop_again,
):

    @task(retries=0)
    def operational_check() -> None:
        raise RuntimeError("the check fails, and the failure callback asks for another check")

    operational_check()

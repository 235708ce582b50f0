"""The demo's flows, reduced, for a SASL_SSL + TLS Kafka reached only through Airflow connections.

Every topic carries the run suffix ``$AIRFLOW_KAFKA_EVENTS_E2E_SECURED_RUN``; ``kafka_default``
(producers, stream readers, iteration results) and ``kafka_watcher`` (the asset watcher) hold the
SCRAM-SHA-512 credentials and the CA.

* ``e2e_secured_streaming``: ``fetch_pages`` defers once to a streaming trigger writing
  ``PAGES`` pages; ``handle_pages`` reads them by reference, in order, into ``<dir>/handled.jsonl``;
* ``e2e_secured_watched``: scheduled on a watched asset (an AssetWatcher whose trigger reads the
  watched topic in the triggerer); returns the watcher payloads of its triggering events;
* ``e2e_secured_partitioned``: ``PartitionedAssetTimetable`` on an asset the partition bridge
  posts to; ``e2e_secured_publish`` emits one partitioned event for it from a task;
* ``e2e_secured_iteration``: ``@task.iterable`` over ``ITEMS`` numbers writing a results stream,
  and a second iterable reading that stream while it is written.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, BaseOperator, PartitionedAssetTimetable, dag, get_current_context, task

from airflow_kafka_events.assets.emit import emit_asset_event
from airflow_kafka_events.assets.watcher_payload import watcher_payload
from airflow_kafka_events.iteration.sources import results_of
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin
from airflow_kafka_events.watcher.trigger import kafka_watched_asset

RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_SECURED_RUN", "local")
STREAM_TOPIC = f"e2e.secured.trigger-events.{RUN}"
WATCHED_TOPIC = f"e2e.secured.watched.{RUN}"
BRIDGE_TOPIC = f"e2e.secured.bridged.{RUN}"
DLQ_TOPIC = f"e2e.secured.dlq.{RUN}"
PAGES = 40
ITEMS = 60
START = pendulum.datetime(2026, 1, 1, tz="UTC")

WATCHED = kafka_watched_asset(
    "e2e-secured://watched",
    topics=[WATCHED_TOPIC],
    kafka_config_id="kafka_watcher",
    dlq_topic=DLQ_TOPIC,
    allow=[{"source_kinds": ["external"], "producers": ["e2e-secured-cli"]}],
)
BATCHES = Asset(name="e2e_secured_batches", uri="x-e2e-secured://batches")


# --------------------------------------------------------------------------- (1) streaming
class FetchPages(StreamingOperatorMixin, BaseOperator):
    """Defers once; the trigger writes every page to Kafka through ``kafka_default``."""

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES, delay=0.02, topic=STREAM_TOPIC))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        self.log.info("read back pages %d..%d", events[0].sequence_index, events[-1].sequence_index)


with DAG(dag_id="e2e_secured_streaming", schedule=None, start_date=START, catchup=False):
    FetchPages(task_id="fetch_pages")
    StreamConsumerOperator(
        task_id="handle_pages",
        stream=StreamRef("fetch_pages", topic=STREAM_TOPIC),
        handler="e2e_secured_handlers.record_pages",
        max_events=10,
        max_wait=0.2,
        start_timeout=150,
        gap_timeout=150,
    )


# --------------------------------------------------------------------------- (2) asset watcher
with DAG(dag_id="e2e_secured_watched", schedule=[WATCHED], start_date=START, catchup=False):

    @task
    def seen(**context: Any) -> list[str]:
        events = context["triggering_asset_events"]
        payloads = [p for asset in events for event in events[asset] if (p := watcher_payload(event))]
        return [payload["event_id"] for payload in payloads]

    seen()


# --------------------------------------------------------------------------- (3) partition bridge
@dag(dag_id="e2e_secured_partitioned", schedule=PartitionedAssetTimetable(assets=BATCHES), start_date=START)
def e2e_secured_partitioned() -> None:
    @task
    def process() -> dict[str, Any]:
        context = get_current_context()
        triggering = context["triggering_asset_events"]
        extras = [dict(event.extra or {}) for events in triggering.values() for event in events]
        return {"partition_key": context["dag_run"].partition_key, "extras": extras}

    process()


e2e_secured_partitioned()


@dag(dag_id="e2e_secured_publish", schedule=None, start_date=START, catchup=False)
def e2e_secured_publish() -> None:
    @task(retries=0)
    def publish() -> str:
        receipt = emit_asset_event(
            BATCHES, partition_key="batch-task", extra={"via": "task"}, topic=BRIDGE_TOPIC
        )
        return receipt.event_id

    publish()


e2e_secured_publish()


# --------------------------------------------------------------------------- (4) iteration
@task
def numbers() -> list[int]:
    return list(range(ITEMS))


@task.iterable(concurrency=8, checkpoint_every=20, results_topic=STREAM_TOPIC)
async def square(n: int) -> int:
    return n * n


@task.iterable(results_stream=False, stream_max_wait=0.1, stream_start_timeout=150)
def check(value: int) -> None:
    if value < 0:
        raise ValueError(f"a square cannot be negative: {value}")


@dag(dag_id="e2e_secured_iteration", schedule=None, start_date=START, catchup=False)
def e2e_secured_iteration() -> None:
    square.iterate(n=numbers())
    check.iterate(value=results_of("square", topic=STREAM_TOPIC))


e2e_secured_iteration()

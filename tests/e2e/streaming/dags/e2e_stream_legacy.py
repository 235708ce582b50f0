"""End-to-end DAG: backward compatibility and fetch-only streams.

* ``legacy`` -- an operator written for single events (``execute_complete(context, event)``)
  that now defers through ``defer_stream``: the shim calls it once per page, in order;
* ``fetch_only`` -- ``start_from_trigger``: the task starts in the triggerer, which writes
  the pages to Kafka and ends the task with the stream descriptor as XCom;
* ``consume_fetched`` -- ``@task.stream_consumer`` reading ``fetch_only``'s stream by reference.
"""

from __future__ import annotations

import json
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator, task

from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin, StreamingTriggerOperator

DAG_ID = "e2e_stream_legacy"
LEGACY_PAGES = 12
FETCH_PAGES = 7


class LegacyPager(StreamingOperatorMixin, BaseOperator):
    """Unchanged single-event handler; only the deferral goes through defer_stream."""

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=LEGACY_PAGES, extra={"source": "legacy"}))

    def execute_complete(self, context: Any, event: Any = None) -> int:
        directory = context["dag_run"].conf["dir"]
        with open(f"{directory}/legacy.txt", "a", encoding="utf-8") as out:
            out.write(json.dumps(event, sort_keys=True) + "\n")
        return event["page"]


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "streaming"],
):
    LegacyPager(task_id="legacy")
    StreamingTriggerOperator(
        task_id="fetch_only",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": FETCH_PAGES},
    )

    @task.stream_consumer(
        stream=StreamRef("fetch_only"), max_events=3, max_wait=0.2, start_timeout=150, gap_timeout=60
    )
    def consume_fetched(events: Any, context: Any, name: str = "decorated") -> int:
        directory = context["dag_run"].conf["dir"]
        with open(f"{directory}/{name}.txt", "a", encoding="utf-8") as out:
            out.write("".join(f"{event.payload['page']}\n" for event in events))
        return len(events)

    consume_fetched(name="decorated")

"""End-to-end DAG: a producer streams 100 pages through Kafka; a consumer beside it handles them live.

``produce`` defers ONCE to a streaming trigger that writes 100 pages to Kafka; page 50 waits
for a gate file.  ``consume`` (no dependency on ``produce``) reads the stream by reference and
creates the gate after it handled page 10, so pages are handled before the producer finished
by construction.  Files go to the ``dir`` of the run's conf.  On a CeleryExecutor with a worker per
queue (the e2e production topology) ``produce`` runs on the ``w1`` worker and ``consume`` on ``w2``.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_stream_live"
PAGES = 100
GATE_PAGE = 50


class LiveProducer(StreamingOperatorMixin, BaseOperator):
    """Defers once; on resume records the pages it reads back from Kafka, a batch at a time."""

    stream_max_events = 40

    def execute(self, context: Any) -> None:
        directory = context["dag_run"].conf["dir"]
        trigger = CountingPagesTrigger(
            pages=PAGES, gate_path=f"{directory}/gate", gate_page=GATE_PAGE, gate_timeout=150
        )
        self.defer_stream(trigger)

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        directory = context["dag_run"].conf["dir"]
        with open(f"{directory}/producer.txt", "a", encoding="utf-8") as out:
            out.write("".join(f"{event.payload['page']}\n" for event in events))


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "streaming"],
):
    LiveProducer(task_id="produce", queue="w1")
    StreamConsumerOperator(
        task_id="consume",
        queue="w2",
        stream=StreamRef("produce"),
        handler="e2e_streaming_handlers.record_and_open_gate",
        max_events=10,
        max_wait=0.2,
        gap_timeout=150,
        start_timeout=150,
        lookup_timeout=15,
    )

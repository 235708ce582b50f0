"""End-to-end DAG of the UI tests: one small stream and the consumer that reads it.

``produce`` defers once to a streaming trigger of ``PAGES`` pages; ``consume`` reads that stream by
reference (checkpointing in its task state store).  The Kafka Events view then shows the stream
(complete, ``PAGES`` pages) and the consumer's checkpoint (lag 0).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_ui_streams"
PAGES = 12


class PagingProducer(StreamingOperatorMixin, BaseOperator):
    """Defers once while its trigger writes the pages; nothing to do with them on resume."""

    stream_max_events = 100

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES, delay=0.02))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


class CountingConsumer(StreamConsumerOperator):
    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "ui"],
):
    PagingProducer(task_id="produce")
    CountingConsumer(
        task_id="consume",
        stream=StreamRef("produce"),
        max_events=5,
        max_wait=0.5,
        gap_timeout=120,
        start_timeout=180,
    )

"""Demo: a paginated source streamed through Kafka with ONE deferral, consumed live beside it.

``fetch_pages`` defers once to a streaming trigger that writes 100 pages (20 ms of simulated
latency each) to Kafka and resumes its task once.  ``handle_pages`` has no dependency on it: it
reads the same stream by reference while the producer is still paging, in order, in batches,
checkpointing after each batch.  Handled pages are appended to ``<dir>/handled.jsonl`` (the
``dir`` of the DAG run's conf), with the time each was handled.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

PAGES = 100


class FetchPages(StreamingOperatorMixin, BaseOperator):
    """Defers once; the trigger pages through the source and writes every page to Kafka."""

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES, delay=0.02))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        self.log.info("producer read back pages %d..%d", events[0].sequence_index, events[-1].sequence_index)


with DAG(
    dag_id="demo_streaming",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["demo", "streaming"],
):
    FetchPages(task_id="fetch_pages")
    StreamConsumerOperator(
        task_id="handle_pages",
        stream=StreamRef("fetch_pages"),
        handler="demo_handlers.record_pages",
        max_events=10,
        max_wait=0.2,
    )

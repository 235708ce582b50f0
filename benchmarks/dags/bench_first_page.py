"""Benchmark B7 DAG: how soon a consumer beside a streaming producer handles its pages.

``produce`` defers once to ``CountingPagesTrigger`` (``pages`` pages, ``delay`` seconds apart, from
the DAG run's conf), which writes every page to Kafka.  Each ``consume_*`` task has no dependency
on it: it reads the same stream by reference while the producer is still paging, with its own
small batch settings (``CONSUMER_SETTINGS``; task id ``consume_e<max_events>_w<max_wait in
ms>_p<poll_timeout in ms>``), and records when each page was handed to the handler in
``<dir>/<task_id>.jsonl``.  The consumers read side by side, each in its own consumer group.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.operators import StreamConsumerOperator, StreamingOperatorMixin, StreamRef
from airflow_kafka_events.triggers.testing import CountingPagesTrigger

DEFAULT_PAGES = 200
DEFAULT_DELAY = 0.05

#: (max_events, max_wait seconds, poll_timeout seconds) of each consumer task; 0.2 is the
#: operator's default poll_timeout (how long one Kafka poll waits to fill its batch).
CONSUMER_SETTINGS: list[tuple[int, float, float]] = [
    (1, 0.05, 0.2),
    (5, 0.05, 0.2),
    (5, 0.2, 0.2),
    (1, 0.05, 0.02),
]


class ProducePages(StreamingOperatorMixin, BaseOperator):
    """Defers once; the trigger pages through the source and writes every page to Kafka."""

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf or {}
        pages = int(conf.get("pages", DEFAULT_PAGES))
        delay = float(conf.get("delay", DEFAULT_DELAY))
        self.defer_stream(CountingPagesTrigger(pages=pages, delay=delay))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pass  # the consumers beside it do the handling


with DAG(
    dag_id="bench_first_page",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["benchmark"],
):
    ProducePages(task_id="produce", retries=0)
    for max_events, max_wait, poll_timeout in CONSUMER_SETTINGS:
        StreamConsumerOperator(
            task_id=f"consume_e{max_events}_w{round(max_wait * 1000)}_p{round(poll_timeout * 1000)}",
            stream=StreamRef("produce"),
            handler="bench_handlers.record_handled",
            max_events=max_events,
            max_wait=max_wait,
            poll_timeout=poll_timeout,
            retries=0,
        )

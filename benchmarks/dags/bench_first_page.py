"""Benchmark B7 DAG: how soon a consumer beside a streaming producer handles its pages.

``produce`` defers once to ``CountingPagesTrigger`` (``pages`` pages, ``delay`` seconds apart, from
the DAG run's conf), which writes every page to Kafka.  Each ``consume_*`` task has no dependency
on it: it reads the same stream by reference while the producer is still paging, with its own
small batch settings (``CONSUMER_SETTINGS``; task id ``consume_e<max_events>_w<max_wait in
ms>_p<poll_timeout in ms>``), and records when each page was handed to the handler in
``<dir>/<task_id>.jsonl``.  The consumers read side by side, each in its own consumer group.
Consumers without ``_d`` use the operator's default ``deferrable`` (Airflow's ``[operators]
default_deferrable``, off here) with ``reschedule=False``: they wait in the worker; those ending in ``_d`` are
``deferrable=True`` (give the slot back while idle).  ``produce`` has the highest
``priority_weight``, so the in-worker consumers never hold every slot before it starts.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DEFAULT_PAGES = 200
DEFAULT_DELAY = 0.05

#: (max_events, max_wait seconds, poll_timeout seconds, deferrable) of each consumer task; 0.2 is
#: the operator's default poll_timeout (how long one Kafka poll waits to fill its batch);
#: deferrable None: the operator's default.
CONSUMER_SETTINGS: list[tuple[int, float, float, bool | None]] = [
    (1, 0.05, 0.2, None),
    (5, 0.05, 0.2, None),
    (5, 0.2, 0.2, None),
    (1, 0.05, 0.02, None),
    (1, 0.05, 0.2, True),
    (100, 1.0, 0.2, True),
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
    ProducePages(task_id="produce", retries=0, priority_weight=100, weight_rule="absolute")
    for max_events, max_wait, poll_timeout, deferrable in CONSUMER_SETTINGS:
        StreamConsumerOperator(
            task_id=(
                f"consume_e{max_events}_w{round(max_wait * 1000)}_p{round(poll_timeout * 1000)}"
                + ("_d" if deferrable else "")
            ),
            deferrable=deferrable,
            reschedule=False,  # B7 measures the in-worker wait (and the deferred one)
            stream=StreamRef("produce"),
            handler="bench_handlers.record_handled",
            max_events=max_events,
            max_wait=max_wait,
            poll_timeout=poll_timeout,
            retries=0,
        )

"""Benchmark B14 DAG: what a consumer's way of waiting costs a page that comes while it waits.

``produce`` defers once to ``CountingPagesTrigger`` (``pages`` pages, ``delay`` seconds apart,
from the DAG run's conf); it runs only after ``hold`` has slept ``late`` seconds (the producer
starts late), and with ``gate_page`` set it stops before that page until the file ``<dir>/gate``
exists (the stream goes idle; the benchmark writes the file once the consumers gave their slots
back).  Three consumers read the same stream side by side, each in its own consumer group,
with the operator's defaults except how they wait (``CONSUMERS``): ``consume_reschedule`` (no
``deferrable`` argument, Airflow's ``default_deferrable`` off: it reschedules itself),
``consume_defer`` (``deferrable=True``: it defers to the triggerer) and ``consume_in_worker``
(``reschedule=False``: it waits in its worker slot).  Each records when each page was handed
to its handler in ``<dir>/<task_id>.jsonl``.  ``produce`` has the highest ``priority_weight``,
so it is queued before any consumer that wants a slot again.
"""

from __future__ import annotations

import time
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator, task

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "b14_consumer_wait"

#: task id -> the waiting arguments of its StreamConsumerOperator (everything else: defaults)
CONSUMERS: dict[str, dict[str, Any]] = {
    "consume_reschedule": {},
    "consume_defer": {"deferrable": True},
    "consume_in_worker": {"reschedule": False},
}


class ProducePages(StreamingOperatorMixin, BaseOperator):
    """Defers once; the trigger writes the pages, pausing at ``gate_page`` until ``<dir>/gate`` exists."""

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf or {}
        gate: dict[str, Any] = {}
        if conf.get("gate_page") is not None:
            gate = {
                "gate_path": f"{conf['dir']}/gate",
                "gate_page": int(conf["gate_page"]),
                "gate_timeout": 600,
            }
        self.defer_stream(CountingPagesTrigger(pages=int(conf["pages"]), delay=float(conf["delay"]), **gate))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pass  # the consumers beside it do the handling


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["benchmark"],
):

    @task(task_id="hold", priority_weight=100, weight_rule="absolute")
    def hold(dag_run: Any = None) -> None:
        time.sleep(float((dag_run.conf or {}).get("late", 0)))

    hold() >> ProducePages(task_id="produce", retries=0, priority_weight=100, weight_rule="absolute")
    for task_id, waiting in CONSUMERS.items():
        StreamConsumerOperator(
            task_id=task_id,
            stream=StreamRef("produce"),
            handler="bench_handlers.record_handled",
            retries=0,
            **waiting,
        )

"""End-to-end DAG: the defaults -- no ``deferrable`` argument, Airflow's ``default_deferrable``
(``False``) -- on 2 worker slots, the consumers queued first.

4 producer/consumer pairs like ``e2e_slots_consumers_first``, but each consumer is written as a
user would, with only ``start_timeout=120``: ``consume_0`` and ``consume_3`` are
``StreamConsumerOperator`` tasks, ``consume_1`` an ``@task.stream_consumer`` function and
``consume_2`` an ``@task.iterable`` over the stream.  Consumers have the higher
``priority_weight``, so they take both slots first; they must give them back (by a reschedule:
no deferral is on) for their producers to start.  Each ``produce_<i>`` defers once to a
streaming trigger of 60 pages, 50 ms apart.  Every consumer appends each page it handled to
``<dir>/<task_id>.txt`` (``dir`` from the run's conf).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator, task

from airflow_kafka_events.iteration.sources import from_stream
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_slots_defaults"
PAIRS = 4
PAGES = 60
FIRST = {"priority_weight": 100, "weight_rule": "absolute"}


def append(directory: str, task_id: str, pages: list[int]) -> None:
    with open(f"{directory}/{task_id}.txt", "a", encoding="utf-8") as out:
        out.write("".join(f"{page}\n" for page in pages))


class PagingProducer(StreamingOperatorMixin, BaseOperator):
    """Defers once while its trigger writes the pages; nothing to do with them on resume."""

    stream_max_events = 100

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES, delay=0.05))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


class RecordingConsumer(StreamConsumerOperator):
    def handle_trigger_events(self, events: Any, context: Any) -> None:
        append(context["dag_run"].conf["dir"], self.task_id, [e.payload["page"] for e in events])


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=16,
    tags=["e2e", "slots"],
):
    RecordingConsumer(task_id="consume_0", stream=StreamRef("produce_0"), start_timeout=120, **FIRST)

    @task.stream_consumer(task_id="consume_1", stream=StreamRef("produce_1"), start_timeout=120, **FIRST)
    def consume_1(events: Any, context: Any) -> None:
        append(context["dag_run"].conf["dir"], "consume_1", [e.payload["page"] for e in events])

    @task.iterable(task_id="consume_2", stream_start_timeout=120, show_return_value_in_logs=False, **FIRST)
    def consume_2(page: dict[str, Any], dag_run: Any = None) -> int:
        append(dag_run.conf["dir"], "consume_2", [page["page"]])
        return page["page"]

    consume_1()
    consume_2.iterate(page=from_stream("produce_2"))
    RecordingConsumer(task_id="consume_3", stream=StreamRef("produce_3"), start_timeout=120, **FIRST)
    for i in range(PAIRS):
        PagingProducer(task_id=f"produce_{i}", priority_weight=1, weight_rule="absolute")

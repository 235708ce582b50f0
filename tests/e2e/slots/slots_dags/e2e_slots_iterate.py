"""End-to-end DAGs: a deferrable iteration over a stream whose producer pauses, and a
deferrable consumer whose producer is held back by an upstream task.

``e2e_slots_iterate``: ``produce`` streams 12 pages, pausing before page 5 until the file
``<dir>/gate`` exists (the test writes it once ``handle`` has deferred).  ``handle``
(``@task.iterable``, deferrable) appends ``"<try> <page>"`` to ``<dir>/handled.txt`` per
item; page 8 fails its first try (``fail_fast``: the task fails and is retried).

``e2e_slots_start_clock``: ``produce`` runs only after ``hold`` (35 s); ``consume`` has no
edge and a ``start_timeout`` of 15 s, which must not count while ``produce`` cannot start.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator, task

from airflow_kafka_events.iteration.sources import from_stream
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

ITERATE_DAG = "e2e_slots_iterate"
START_CLOCK_DAG = "e2e_slots_start_clock"
PAGES = 12
GATE_PAGE = 5
FAIL_AT = 8
HOLD_SECONDS = 35
START_TIMEOUT = 15


def append(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(text + "\n")


class GatedProducer(StreamingOperatorMixin, BaseOperator):
    """Streams ``pages`` pages; with ``gate_page`` it pauses there until ``<dir>/gate`` exists."""

    stream_max_events = 100

    def __init__(self, *, pages: int, gate_page: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pages = pages
        self.gate_page = gate_page

    def execute(self, context: Any) -> None:
        gate = {}
        if self.gate_page is not None:
            gate = {
                "gate_path": f"{context['dag_run'].conf['dir']}/gate",
                "gate_page": self.gate_page,
                "gate_timeout": 240,
            }
        self.defer_stream(CountingPagesTrigger(pages=self.pages, delay=0.05, **gate))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


class RecordingConsumer(StreamConsumerOperator):
    def handle_trigger_events(self, events: Any, context: Any) -> None:
        directory = context["dag_run"].conf["dir"]
        append(f"{directory}/{self.task_id}.txt", "\n".join(str(e.payload["page"]) for e in events))


with DAG(
    dag_id=ITERATE_DAG,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "slots"],
):

    @task.iterable(
        deferrable=True,
        stream_idle_interval=1.0,
        stream_max_wait=0.2,
        stream_max_events=20,
        stream_resume_wait=2.0,
        stream_start_timeout=240,
        checkpoint_every=1,
        fail_fast=True,
        retries=1,
        retry_delay=timedelta(seconds=1),
        show_return_value_in_logs=False,
    )
    def handle(page: dict[str, Any], ti: Any = None, dag_run: Any = None) -> int:
        if page["page"] == FAIL_AT and ti.try_number == 1:
            raise RuntimeError(f"page {FAIL_AT} fails the first try")
        append(f"{dag_run.conf['dir']}/handled.txt", f"{ti.try_number} {page['page']}")
        return page["page"]

    handle.iterate(page=from_stream("produce"))
    GatedProducer(task_id="produce", pages=PAGES, gate_page=GATE_PAGE)


with DAG(
    dag_id=START_CLOCK_DAG,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "slots"],
):

    @task
    def hold() -> None:
        time.sleep(HOLD_SECONDS)

    RecordingConsumer(
        task_id="consume",
        stream=StreamRef("produce"),
        deferrable=True,
        max_events=20,
        max_wait=0.5,
        idle_interval=1.0,
        resume_wait=2.0,
        start_timeout=START_TIMEOUT,
        state_poll_interval=1.0,
        lookup_timeout=10,
    )
    hold() >> GatedProducer(task_id="produce", pages=10)

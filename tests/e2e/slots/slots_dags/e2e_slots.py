"""End-to-end DAG: 4 producer/consumer pairs on 2 worker slots, the consumers queued first.

Each ``produce_<i>`` defers once to a streaming trigger of 60 pages, 50 ms apart; each
``consume_<i>`` (deferrable, no dependency on its producer) reads that stream by reference.
Consumers have the higher ``priority_weight``, so the scheduler queues them first and they
take both slots: they must give them back while idle for their producers to start.
``consume_0`` fails once on the batch holding page 30 (its retry resumes at the checkpoint).
Every consumer appends each page it handled to ``<dir>/<task_id>.txt`` (``dir`` from the
run's conf).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_slots_consumers_first"
PAIRS = 4
PAGES = 60
FAIL_ONCE_AT = 30


class PagingProducer(StreamingOperatorMixin, BaseOperator):
    """Defers once while its trigger writes the pages; nothing to do with them on resume."""

    stream_max_events = 100

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES, delay=0.05))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


class RecordingConsumer(StreamConsumerOperator):
    """Appends each handled page to a file; optionally fails its first try at one page."""

    def __init__(self, *, fail_once_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_once_at = fail_once_at

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pages = [event.payload["page"] for event in events]
        if self.fail_once_at in pages and context["ti"].try_number == 1:
            raise RuntimeError(f"page {self.fail_once_at} fails the first try")
        directory = context["dag_run"].conf["dir"]
        with open(f"{directory}/{self.task_id}.txt", "a", encoding="utf-8") as out:
            out.write("".join(f"{page}\n" for page in pages))


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=16,
    tags=["e2e", "slots"],
):
    for i in range(PAIRS):
        RecordingConsumer(
            task_id=f"consume_{i}",
            stream=StreamRef(f"produce_{i}"),
            deferrable=True,
            max_events=20,
            max_wait=0.5,
            idle_interval=1.0,
            resume_wait=3.0,
            gap_timeout=120,
            start_timeout=240,
            lookup_timeout=15,
            state_poll_interval=2.0,
            priority_weight=100,
            weight_rule="absolute",
            retries=1 if i == 0 else 0,
            retry_delay=timedelta(seconds=1),
            fail_once_at=FAIL_ONCE_AT if i == 0 else None,
        )
        PagingProducer(task_id=f"produce_{i}", priority_weight=1, weight_rule="absolute")

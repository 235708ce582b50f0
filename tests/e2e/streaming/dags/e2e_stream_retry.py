"""End-to-end DAG: a batch handler fails mid-stream on try 1; try 2 resumes at the checkpoint.

The handler fails on the batch holding page ``FAIL_PAGE`` while the marker file ``failed-once``
is missing (it creates it, then raises).  The task is retried at once; the retry defers
again (the stream is complete in Kafka and is reported again, not fetched again) and
handles the pages after the last checkpointed batch.  Each batch is appended in one write.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_stream_retry"
PAGES = 30
FAIL_PAGE = 17


class FlakyBatchConsumer(StreamingOperatorMixin, BaseOperator):
    stream_max_events = 5

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=PAGES))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        directory = context["dag_run"].conf["dir"]
        pages = [event.payload["page"] for event in events]
        marker = f"{directory}/failed-once"
        if FAIL_PAGE in pages and not os.path.exists(marker):
            with open(marker, "w", encoding="utf-8") as out:
                out.write(f"try {context['ti'].try_number} failed on pages {pages}\n")
            raise RuntimeError(f"cannot handle page {FAIL_PAGE} (first try)")
        with open(f"{directory}/effects.txt", "a", encoding="utf-8") as out:
            out.write("".join(f"{page}\n" for page in pages))


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "streaming"],
):
    FlakyBatchConsumer(task_id="produce", retries=1, retry_delay=timedelta(seconds=0))

"""Benchmark B12 DAG: one stream end to end, a trigger writing pages as fast as it can.

``produce`` defers once to ``CountingPagesTrigger`` (``pages`` pages from the DAG run's conf, no
delay; every payload padded with ``"pad"`` to about ``payload_bytes`` bytes of JSON), which writes
every page to Kafka; on resume it reads the stream back and hands it to its own
``handle_trigger_events``.  ``consume`` (no DAG edge) reads the same stream by reference while it is
written, in the worker (``reschedule=False``); with ``"live": false`` in the conf it is skipped, so
the producer's resume is the only reader.  Both handlers do nothing with the pages: they append
one line per batch to ``<dir>/<task_id>.jsonl`` (``dir`` from the conf) with the time the batch was
handed over, its size and its first and last ``sequence_index``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

BATCH = 1000


def padding(pages: int, payload_bytes: int) -> str:
    """The ``"pad"`` text that makes a page's JSON payload about ``payload_bytes`` long."""
    bare = len(json.dumps({"pad": "", "page": pages, "pages": pages}))
    return "x" * max(0, payload_bytes - bare)


def stamp(events: Any, context: Any) -> None:
    """Record when a batch was handed over (the only thing the handlers do)."""
    now = time.time()
    task_id = context["task"].task_id
    line = {"at": now, "n": len(events), "first": events[0].sequence_index, "last": events[-1].sequence_index}
    out = Path((context["dag_run"].conf or {})["dir"]) / f"{task_id}.jsonl"
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class B12Producer(StreamingOperatorMixin, BaseOperator):
    """Defers once; the trigger writes every page; on resume the pages go to a no-op handler."""

    stream_max_events = BATCH

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf or {}
        pages, payload_bytes = int(conf["pages"]), int(conf["payload_bytes"])
        self.defer_stream(
            CountingPagesTrigger(pages=pages, delay=0.0, extra={"pad": padding(pages, payload_bytes)})
        )

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        stamp(events, context)


class B12Consumer(StreamConsumerOperator):
    """Reads the producer's stream while it is written; a no-op handler (skipped unless ``live``)."""

    def execute(self, context: Any) -> Any:
        if not (context["dag_run"].conf or {}).get("live", True):
            raise AirflowSkipException("live consumer off for this run")
        return super().execute(context)

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        stamp(events, context)


with DAG(
    dag_id="b12_stream_e2e",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["benchmark", "b12"],
):
    B12Producer(task_id="produce", retries=0, priority_weight=100, weight_rule="absolute")
    B12Consumer(
        task_id="consume",
        stream=StreamRef("produce"),
        reschedule=False,
        max_events=BATCH,
        max_wait=0.2,
        gap_timeout=300,
        start_timeout=600,
        retries=0,
    )

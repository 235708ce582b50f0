"""B9 DAGs: N producer/consumer pairs, consumers queued first or producers first.

``b9_<order>_<pairs>`` for ``order`` in ``consumers_first`` / ``producers_first`` and ``pairs`` in
``B9_PAIRS`` (environment, set by ``benchmarks/stream_slots.py``; unset: no DAG, so other
benchmarks' deployments do not parse them).  Each ``produce_<i>`` defers once to a
``CountingPagesTrigger`` (``pages`` / ``delay`` from the run's conf, default 60 x 50 ms) and each
``consume_<i>`` reads its stream by reference (no DAG edge), deferrable unless ``B9_DEFERRABLE=false``
(environment: operator arguments are fixed when the DAG is parsed).  The order is forced with
``priority_weight`` (absolute): the scheduler orders by priority, then date, then map index, not
by declaration.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

PAIRS = [int(n) for n in os.environ.get("B9_PAIRS", "").split(",") if n.strip()]
DEFERRABLE = os.environ.get("B9_DEFERRABLE", "true").lower() != "false"


class B9Producer(StreamingOperatorMixin, BaseOperator):
    stream_max_events = 500

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf or {}
        self.defer_stream(
            CountingPagesTrigger(pages=int(conf.get("pages", 60)), delay=float(conf.get("delay", 0.05)))
        )

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


def count_pages(events: Any, context: Any) -> None:
    return None


for _order in ("consumers_first", "producers_first"):
    for _pairs in PAIRS:
        with DAG(
            dag_id=f"b9_{_order}_{_pairs}",
            schedule=None,
            start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
            catchup=False,
            max_active_tasks=4 * _pairs,
            tags=["benchmark", "b9"],
        ):
            consumer_weight, producer_weight = (100, 1) if _order == "consumers_first" else (1, 100)
            for _i in range(_pairs):
                StreamConsumerOperator(
                    task_id=f"consume_{_i}",
                    stream=StreamRef(f"produce_{_i}"),
                    handler="b9_stream_slots.count_pages",
                    deferrable=DEFERRABLE,
                    max_events=100,
                    max_wait=1.0,
                    gap_timeout=300,
                    start_timeout=600,
                    lookup_timeout=15,
                    priority_weight=consumer_weight,
                    weight_rule="absolute",
                )
                B9Producer(task_id=f"produce_{_i}", priority_weight=producer_weight, weight_rule="absolute")

"""B13 DAGs: N concurrent streams in one triggerer, each read by a deferred consumer.

``b13_streams_<pairs>`` for ``pairs`` in ``B13_PAIRS`` (environment, set by
``benchmarks/many_streams.py``; unset: no DAG, so other benchmarks' deployments do not parse them).
Each ``produce_<i>`` is a :class:`StreamingTriggerOperator` started in the triggerer
(``start_from_trigger``: a deferred producer that never takes a worker slot) running
``CountingPagesTrigger``: ``B13_PAGES`` pages ``B13_DELAY`` seconds apart, page 1 waiting for the
gate file ``<B13_DIR>/gate-<pairs>`` (so every stream is open in the triggerer at once before the
pages flow).  Each ``consume_<i>`` reads its stream by reference (no DAG edge), deferrable: it
defers while no page is ready.  Its handler appends every page it handled (sequence index and the
page number of the payload) to ``<B13_DIR>/<pairs>/consume_<i>.txt``, so the benchmark can check
that each page was handled once and in order.  Trigger and operator arguments are fixed when
the DAG is parsed, so they come from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_kafka_events.streams.consuming.consumption import StreamEvent
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

PAIRS = [int(n) for n in os.environ.get("B13_PAIRS", "").split(",") if n.strip()]
PAGES = int(os.environ.get("B13_PAGES", "50"))
DELAY = float(os.environ.get("B13_DELAY", "0.2"))
RECORDS = Path(os.environ.get("B13_DIR", "/nonexistent"))
#: seconds the streams wait at their gate, and the consumers for a page, at most
WAIT = float(os.environ.get("B13_WAIT", "1800"))


class B13Consumer(StreamConsumerOperator):
    """A deferrable stream consumer that appends ``<sequence_index> <page>`` per handled page to a file."""

    def handle_trigger_events(self, events: Sequence[StreamEvent], context: Any) -> None:
        path = RECORDS / self.dag_id.rsplit("_", 1)[1] / f"{self.task_id}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{e.sequence_index} {e.payload['page']}\n" for e in events)
        with path.open("a") as out:  # one write per batch
            out.write(lines)


for _pairs in PAIRS:
    with DAG(
        dag_id=f"b13_streams_{_pairs}",
        schedule=None,
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        catchup=False,
        max_active_tasks=4 * _pairs,
        tags=["benchmark", "b13"],
    ):
        for _i in range(_pairs):
            StreamingTriggerOperator(
                task_id=f"produce_{_i}",
                trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
                trigger_kwargs={
                    "pages": PAGES,
                    "delay": DELAY,
                    "gate_path": str(RECORDS / f"gate-{_pairs}"),
                    "gate_page": 1,
                    "gate_timeout": WAIT,
                },
            )
            B13Consumer(
                task_id=f"consume_{_i}",
                stream=StreamRef(f"produce_{_i}"),
                deferrable=True,
                max_events=PAGES,
                max_wait=1.0,
                gap_timeout=WAIT,
                start_timeout=WAIT,
                lookup_timeout=30,
            )

"""An iteration over a stream with the defaults against a real broker: it gives its slot back
by a reschedule while its stream has not started or is idle, with its checkpoint saved and its
results stream left open, and each rerun goes on from there.

Driven like Airflow drives it, without Airflow services: ``execute`` raises
``AirflowRescheduleException`` and the rerun is a new operator instance (a new process) whose
``execute`` gets a context of the same try with the same task state store.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException

from airflow_kafka_events.iteration.operator import IterableOperator
from airflow_kafka_events.iteration.sources import from_stream
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from integration.iteration.test_iteration_deferral import ROWS, Gate, results_so_far
from integration.iteration.test_iteration_kafka import DAG_ID, PageWriter
from unit.operators.fakes import context

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")


def iterating(fn: Any, topic: str) -> IterableOperator:
    """An iteration with the defaults but for short waits (no ``deferrable``, no ``reschedule``)."""
    return IterableOperator(
        task_id="work",
        python_callable=fn,
        iterate_kwargs={"row": from_stream("produce", items_path="rows", topic=topic)},
        stream_idle_interval=1.0,
        stream_max_events=5,
        stream_max_wait=0.1,
        checkpoint_every=3,
        results_topic=topic,
    )


def test_an_iteration_started_before_its_producer_reschedules_and_goes_on_in_order_each_item_once(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=3)
    handled: list[int] = []
    lock = threading.Lock()

    def handle(row: int) -> int:
        with lock:
            handled.append(row)
        return row * 10

    store = DictStore()
    ctx = context(dag_id=DAG_ID, task_id="work", store=store)
    with pytest.raises(AirflowRescheduleException):  # nothing written yet: the slot is given back at once
        iterating(handle, topic).execute(ctx)
    assert handled == []
    gate = Gate()
    writer = PageWriter(
        kafka_bootstrap,
        topic,
        stream_id(DAG_ID, "manual__1", "produce"),
        pages=12,
        rows_per_page=ROWS,
        gate=gate,
        gate_page=6,
    )
    writer.start()
    reruns, idle_at, summary = 0, [], None
    deadline = time.monotonic() + 120
    while summary is None and time.monotonic() < deadline:
        try:
            summary = iterating(handle, topic).execute(ctx)  # a new process per rerun
        except AirflowRescheduleException:
            reruns += 1
            if len(handled) == 6 * ROWS and not gate.is_set():  # idle at the producer's pause
                idle_at.append(len(handled))
                ordinals, ended = results_so_far(kafka_bootstrap, topic)
                assert sorted(ordinals) == list(range(6 * ROWS)) and not ended  # flushed, left open
                gate.set()
    gate.set()
    writer.join(timeout=60)
    assert summary is not None, f"still rescheduling after {reruns} reruns"
    assert writer.error is None
    assert idle_at == [6 * ROWS]
    assert handled == list(range(12 * ROWS))  # strict order, no item twice, none skipped
    assert summary["succeeded"] == summary["items"] == 12 * ROWS and summary["skipped"] == 0
    assert summary["reschedules"] == reruns + 1 and "deferrals" not in summary
    assert summary["results"]["complete"] and summary["results"]["results"] == 12 * ROWS
    ordinals, ended = results_so_far(kafka_bootstrap, topic)
    assert sorted(ordinals) == list(range(12 * ROWS)) and ended

"""A StreamConsumerOperator with the defaults against a real broker: it gives its slot back by a
reschedule while its stream has not started or is idle, and each rerun reads on from its
checkpoint.

Driven like Airflow drives it, without Airflow services: ``execute`` raises
``AirflowRescheduleException``, and the rerun is a new operator instance (a new process) whose
``execute`` gets a context of the same try with the same task state store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException

from airflow_kafka_events.errors import StreamNotStartedError
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.consuming.slot_release import RescheduleNote, note_key
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from harness.task_state import DictStore
from integration.operators.test_deferred_consumer import Consumer, start_producer
from integration.operators.test_stream_operators import DAG_ID, make_context, new_run_id

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")


def consumer(topic: str, effects: list[int], **kwargs: Any) -> Consumer:
    """A consumer with the defaults but for short waits (no ``deferrable``, no ``reschedule``)."""
    options: dict[str, Any] = {"max_events": 10, "max_wait": 0.2, "idle_interval": 1.0}
    options.update(kwargs)
    return Consumer(task_id="consume", stream=StreamRef("produce", topic=topic), effects=effects, **options)


def rerun_to_end(
    run_id: str, store: DictStore, make: Any, on_reschedule: Any = None, timeout: float = 90.0
) -> tuple[Any, int]:
    """``execute`` a new operator per run until one returns: ``(result, runs that rescheduled)``."""
    deadline = time.monotonic() + timeout
    rescheduled = 0
    while time.monotonic() < deadline:
        try:
            return make().execute(make_context(run_id, "consume", store)), rescheduled
        except AirflowRescheduleException:
            rescheduled += 1
            if on_reschedule is not None:
                on_reschedule()
    raise AssertionError(f"still rescheduling after {timeout}s ({rescheduled} reruns)")


def test_a_consumer_started_before_its_producer_reschedules_and_handles_every_page_once_in_order(
    new_topic, tmp_path: Path
):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    effects: list[int] = []
    with pytest.raises(AirflowRescheduleException):  # nothing written yet: the slot is given back at once
        consumer(topic, effects).execute(make_context(run_id, "consume", store))
    note = RescheduleNote.load(
        store, note_key(stream_id(DAG_ID, run_id, "produce")), generation=0, try_number=1
    )
    assert note is not None and note.resume is None  # the rerun looks the stream up again
    gate = tmp_path / "gate"
    producer = start_producer(
        CountingPagesTrigger(
            pages=40,
            delay=0.02,
            topic=topic,
            trigger_run_id=stream_id(DAG_ID, run_id, "produce"),
            gate_path=str(gate),
            gate_page=20,
            gate_timeout=60,
        )
    )
    idle_at: list[int] = []

    def open_gate_once_idle() -> None:  # the producer pauses at page 20: the consumer went idle
        if len(effects) == 20 and not gate.exists():
            idle_at.append(len(effects))
            gate.write_text("open")

    try:
        result, rescheduled = rerun_to_end(
            run_id, store, lambda: consumer(topic, effects), open_gate_once_idle
        )
    finally:
        gate.write_text("open")
        producer.join(timeout=60)
    assert idle_at == [20]  # it gave its slot back while idle, with pages 0..19 handled
    assert effects == list(range(40))  # strict order, each page once, across reruns
    assert result["pages"] == 40 and result["finished"] and result["pages_this_try"] == 40
    assert result["reschedules"] == rescheduled + 1, (result, rescheduled)


def test_the_start_timeout_holds_across_reruns(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    started = time.monotonic()
    with pytest.raises(StreamNotStartedError, match=r"did not start within 3s.*Is task 'produce'"):
        rerun_to_end(run_id, store, lambda: consumer(topic, [], start_timeout=3.0))
    assert time.monotonic() - started >= 3.0  # counted from the first run, not reset by reruns

"""A deferrable iteration over a stream against a real broker: it gives its slot back while
the producer pauses, with its checkpoint saved and its results stream left open, and goes on
from there when its StreamWaitTrigger wakes it.

Driven like Airflow drives it, without Airflow services: ``execute`` raises ``TaskDeferred``,
the trigger runs in an asyncio loop (as in the triggerer), and the method named by the
deferral is called with the trigger's event and the deferral's kwargs, both through JSON as
Airflow stores them; a "retry" is a new operator instance with the same task state store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_kafka_events.errors import StreamNotStartedError
from airflow_kafka_events.iteration.checkpoints import DEFAULT_CHECKPOINT_KEY, IterationCheckpoint
from airflow_kafka_events.iteration.errors import IterationFailedError
from airflow_kafka_events.iteration.operator import IterableOperator
from airflow_kafka_events.iteration.sources import from_stream
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from integration.iteration.test_iteration_kafka import DAG_ID, PageWriter, settings_of
from unit.operators.fakes import context

pytestmark = pytest.mark.integration

ROWS = 4  # items per page


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


class Gate(threading.Event):
    """The producer's pause: ``reached`` once every page before it was written (acknowledged)."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.reached.set()
        return super().wait(timeout)


def iterating(fn: Callable[..., Any], topic: str, **kwargs: Any) -> IterableOperator:
    options: dict[str, Any] = {
        "deferrable": True,
        "stream_idle_interval": 0.5,
        "stream_max_events": 5,
        "stream_max_wait": 0.1,
        "stream_resume_wait": 2.0,
        "stream_gap_timeout": 60.0,
        "stream_start_timeout": 60.0,
        "checkpoint_every": 3,
        "results_topic": topic,
    }
    options.update(kwargs)
    return IterableOperator(
        task_id="work",
        python_callable=fn,
        iterate_kwargs={"row": from_stream("produce", items_path="rows", topic=topic)},
        **options,
    )


async def _first_event(trigger: Any) -> Any:
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger ended without an event")


def wait_in_triggerer(deferred: TaskDeferred) -> tuple[dict[str, Any], dict[str, Any]]:
    """The deferral's trigger run as the triggerer runs it: ``(event payload, resume kwargs)``."""
    assert isinstance(deferred.trigger, StreamWaitTrigger) and deferred.timeout is None
    assert deferred.method_name == "resume_iterating"
    _, kwargs = deferred.trigger.serialize()
    trigger = StreamWaitTrigger(**json.loads(json.dumps(kwargs)))
    event = asyncio.run(_first_event(trigger))
    return event.payload, json.loads(json.dumps(deferred.kwargs or {}))


def resume(op: IterableOperator, ctx: dict[str, Any], deferred: TaskDeferred) -> dict[str, Any]:
    """Every deferral's trigger and resumption until the task ends; its XCom."""
    while True:
        event, kwargs = wait_in_triggerer(deferred)
        try:
            return op.resume_iterating(ctx, event=event, **kwargs)
        except TaskDeferred as info:
            deferred = info


def results_so_far(bootstrap: str, topic: str) -> tuple[list[int], bool]:
    """The ordinals in the results stream of ``work`` and whether it ended (no waiting for more)."""
    run = stream_id(DAG_ID, "manual__1", "work")
    reader = StreamReader(
        settings_of(bootstrap).consumer_config(f"check-{time.monotonic_ns()}"),
        topic,
        run,
        options=ReadOptions(max_wait=0.05, gap_timeout=2.0, start_timeout=5.0),
    )
    ordinals: list[int] = []
    with reader:
        try:
            for batch in reader:
                ordinals.extend(e.payload["ordinal"] for e in batch.events if not e.is_last)
                if batch.finished:
                    return ordinals, True
        except (TimeoutError, StreamNotStartedError):  # nothing more: the stream is open
            return ordinals, False
    return ordinals, False


def test_an_idle_stream_defers_with_everything_flushed_and_goes_on_in_order_each_item_once(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=3)
    gate = Gate()
    writer = PageWriter(
        kafka_bootstrap,
        topic,
        stream_id(DAG_ID, "manual__1", "produce"),
        pages=20,
        rows_per_page=ROWS,
        gate=gate,
        gate_page=8,
    )
    writer.start()
    assert gate.reached.wait(60), writer.error
    handled: list[int] = []
    lock = threading.Lock()

    def handle(row: int) -> int:
        with lock:
            handled.append(row)
        return row * 10

    store = DictStore()
    ctx = context(dag_id=DAG_ID, task_id="work", store=store)
    op = iterating(handle, topic)
    with pytest.raises(TaskDeferred) as info:  # 8 pages, then the producer pauses: idle
        op.execute(ctx)
    first = 8 * ROWS
    assert handled == list(range(first))
    # before deferring: the checkpoint covers every item handled, every result is in Kafka,
    # and the results stream is NOT ended (the iteration goes on after the deferral)
    saved = IterationCheckpoint.from_json(store.get(DEFAULT_CHECKPOINT_KEY))
    assert saved.completed.watermark == first and not saved.completed.ranges
    ordinals, ended = results_so_far(kafka_bootstrap, topic)
    assert sorted(ordinals) == list(range(first)) and not ended
    resumption = info.value.kwargs
    assert resumption["ordinal"] == first and resumption["position"]["next_sequence_index"] == 8

    gate.set()
    summary = resume(op, ctx, info.value)
    writer.join(timeout=60)
    assert writer.error is None
    assert handled == list(range(20 * ROWS))  # strict order, no item twice, none skipped
    assert summary["succeeded"] == summary["succeeded_this_try"] == summary["items"] == 20 * ROWS
    assert summary["skipped"] == 0 and summary["failed"] == 0 and summary["deferrals"] >= 1
    assert summary["results"]["complete"] and summary["results"]["results"] == 20 * ROWS
    ordinals, ended = results_so_far(kafka_bootstrap, topic)
    assert sorted(ordinals) == list(range(20 * ROWS)) and ended
    print(f"\n{summary['deferrals']} deferral(s); {summary['checkpoints_saved']} checkpoint(s)")


def test_a_retry_after_a_deferral_resumes_at_the_checkpoint(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    gate = Gate()
    writer = PageWriter(
        kafka_bootstrap,
        topic,
        stream_id(DAG_ID, "manual__1", "produce"),
        pages=10,
        rows_per_page=ROWS,
        gate=gate,
        gate_page=3,
    )
    writer.start()
    calls: list[tuple[int, int]] = []
    fail_at = 5 * ROWS + 1  # an item after the deferral

    def handle(row: int, ti: Any) -> None:
        calls.append((ti.try_number, row))
        if row == fail_at and ti.try_number == 1:
            raise RuntimeError(f"row {row} fails the first try")

    store = DictStore()
    ctx = context(dag_id=DAG_ID, task_id="work", store=store)
    op = iterating(handle, topic, fail_fast=True, retries=1)
    with pytest.raises(TaskDeferred) as info:
        op.execute(ctx)
    gate.set()
    with pytest.raises(IterationFailedError, match="fail_fast"):
        resume(op, ctx, info.value)
    writer.join(timeout=60)
    first_try = [row for n, row in calls if n == 1]
    assert first_try == list(range(fail_at + 1))

    retry_ctx = context(dag_id=DAG_ID, task_id="work", store=store, try_number=2)
    retry = iterating(handle, topic, fail_fast=True, retries=1)
    summary = retry.execute(retry_ctx)  # the stream has ended: no deferral
    second_try = [row for n, row in calls if n == 2]
    assert second_try == list(range(fail_at, 10 * ROWS))  # only what the checkpoint did not have
    assert summary["resumed"] and summary["skipped"] == fail_at and summary["succeeded"] == 10 * ROWS


def test_the_start_timeout_of_a_deferred_iteration_ends_as_stream_not_started(new_topic):
    topic = new_topic(partitions=3)
    op = iterating(lambda row: None, topic, stream_start_timeout=3.0)
    ctx = context(dag_id=DAG_ID, task_id="work", store=DictStore())
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as info:  # nothing written: it defers at once
        op.execute(ctx)
    where = info.value.trigger.checkpoint  # at the stream's partition, not a scan from offset 0
    assert where is not None and where["partition"] is not None and where["offset"] is not None
    assert info.value.kwargs["ordinal"] == 0 and info.value.kwargs["deferrals"] == 1
    event, kwargs = wait_in_triggerer(info.value)
    assert event["status"] == "not_started"
    with pytest.raises(StreamNotStartedError, match="did not start within 3s"):
        op.resume_iterating(ctx, event=event, **kwargs)
    assert 3.0 <= time.monotonic() - started < 20.0

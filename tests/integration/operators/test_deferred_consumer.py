"""A deferrable StreamConsumerOperator against a real broker: it defers while idle, its
StreamWaitTrigger wakes it for a batch, and the timeouts end as the in-worker read's typed errors.

Driven like Airflow drives it, without Airflow services: ``execute`` raises ``TaskDeferred``, the
trigger runs in an asyncio loop (as in the triggerer), and the method named by the deferral is
called with the trigger's event and the deferral's kwargs; a "retry" is a new operator instance
with the same task state store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_kafka_events.errors import StreamGapError, StreamNotStartedError
from airflow_kafka_events.streams.checkpoint import load_checkpoint
from airflow_kafka_events.streams.consuming.consumption import checkpoint_key
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from harness.task_state import DictStore
from integration.operators.test_stream_operators import DAG_ID, make_context, new_run_id

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


class Consumer(StreamConsumerOperator):
    """Applies each batch atomically to ``effects``; fails on a batch holding ``fail_at``."""

    def __init__(self, *, effects: list[int], fail_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.effects = effects
        self.fail_at = fail_at

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pages = [e.payload["page"] for e in events]
        if self.fail_at in pages:
            raise RuntimeError(f"page {self.fail_at} cannot be handled")
        self.effects.extend(pages)


def consumer(topic: str, effects: list[int], **kwargs: Any) -> Consumer:
    defaults = {
        "max_events": 10,
        "max_wait": 0.2,
        "gap_timeout": 60.0,
        "start_timeout": 60.0,
        "lookup_timeout": 10.0,
        "poll_timeout": 0.1,
        "deferrable": True,
        "idle_interval": 0.5,
        "resume_wait": 2.0,
    }
    defaults.update(kwargs)
    return Consumer(task_id="consume", stream=StreamRef("produce", topic=topic), effects=effects, **defaults)


async def _first_event(trigger: Any) -> Any:
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger ended without an event")


def run_to_end(
    op: Consumer, context: dict[str, Any], deferred: TaskDeferred | None = None
) -> tuple[Any, list[Any]]:
    """``execute`` (or the given deferral), then every deferral's trigger and resumption until
    the task ends; ``(result, trigger events)``."""
    events: list[Any] = []
    while True:
        if deferred is None:
            try:
                return op.execute(context), events
            except TaskDeferred as info:
                deferred = info
        assert isinstance(deferred.trigger, StreamWaitTrigger)
        assert deferred.timeout is None  # the trigger runs the start and gap timeouts itself
        classpath, kwargs = deferred.trigger.serialize()
        assert classpath == "airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger"
        event = asyncio.run(_first_event(StreamWaitTrigger(**json.loads(json.dumps(kwargs)))))
        events.append(event.payload)
        method = getattr(op, deferred.method_name)
        resume_kwargs = json.loads(json.dumps(deferred.kwargs or {}))  # as Airflow stores them
        try:
            return method(context, event=event.payload, **resume_kwargs), events
        except TaskDeferred as info:
            deferred = info


def start_producer(trigger: CountingPagesTrigger) -> threading.Thread:
    async def produce() -> None:
        async for _ in trigger.run():
            pass

    thread = threading.Thread(target=lambda: asyncio.run(produce()), daemon=True)
    thread.start()
    return thread


def test_a_consumer_started_before_its_producer_defers_and_handles_every_page_once_in_order(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    effects: list[int] = []
    op = consumer(topic, effects, max_events=10)
    context = make_context(run_id, "consume", store)
    with pytest.raises(TaskDeferred) as info:  # nothing written yet: the slot is given back at once
        op.execute(context)
    assert info.value.method_name == "resume_reading"
    # the wait starts at the stream's partition, at the DAG run's first offset (no scan from 0)
    where = info.value.trigger.checkpoint
    assert where is not None and where["offset"] is not None and where["partition"] is not None
    producer = start_producer(
        CountingPagesTrigger(
            pages=60, delay=0.05, topic=topic, trigger_run_id=stream_id(DAG_ID, run_id, "produce")
        )
    )
    started = time.monotonic()
    result, events = run_to_end(op, context, info.value)
    producer.join(timeout=60)
    assert effects == list(range(60))  # strict order, each page once
    assert result["pages"] == 60 and result["finished"] and result["pages_this_try"] == 60
    assert all(e["status"] == "ready" for e in events)
    # woken for batches, not pages: 60 pages of 50 ms with max_events=10 -> a handful of cycles
    assert 1 <= result["deferrals"] <= 8, (result, events)
    print(
        f"\n60 pages x 50 ms: {result['deferrals']} deferral(s), {time.monotonic() - started:.1f}s, {events}"
    )


def test_a_retry_after_a_deferral_resumes_at_the_checkpoint(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    producer_stream = stream_id(DAG_ID, run_id, "produce")
    store = DictStore()
    effects: list[int] = []
    first = consumer(topic, effects, fail_at=25, max_events=5)
    context = make_context(run_id, "consume", store)
    with pytest.raises(TaskDeferred) as info:
        first.execute(context)
    producer = start_producer(
        CountingPagesTrigger(pages=40, delay=0.03, topic=topic, trigger_run_id=producer_stream)
    )
    with pytest.raises(RuntimeError, match="page 25 cannot be handled"):
        run_to_end(first, context, info.value)
    # the batches before the failing one were handled and checkpointed; where that batch starts
    # depends on how the pages arrived (a batch of at most max_events=5 is cut early at max_wait)
    handled = len(effects)
    assert 21 <= handled <= 25 and effects == list(range(handled)), effects
    saved = load_checkpoint(store, checkpoint_key(producer_stream), 0)
    assert saved is not None and saved.next_sequence_index == handled
    producer.join(timeout=60)
    result, _ = run_to_end(
        consumer(topic, effects, max_events=5), make_context(run_id, "consume", store, try_number=2)
    )
    assert effects == list(range(40)) and result["pages"] == 40 and result["pages_this_try"] == 40 - handled


def test_the_trigger_runs_the_start_timeout_and_the_task_fails_with_stream_not_started(new_topic):
    topic = new_topic(partitions=3)
    op = consumer(topic, [], start_timeout=3.0, lookup_timeout=2.0)
    started = time.monotonic()
    with pytest.raises(StreamNotStartedError) as info:
        run_to_end(op, make_context(new_run_id(), "consume", DictStore()))
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "did not start within 3s" in message and "Is task 'produce' of this DAG run" in message
    assert 3.0 <= elapsed < 15.0


def test_the_trigger_runs_the_gap_timeout_and_the_task_fails_with_stream_gap(new_topic, tmp_path: Path):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    gate = tmp_path / "gate"
    producer = start_producer(
        CountingPagesTrigger(
            pages=10,
            topic=topic,
            trigger_run_id=stream_id(DAG_ID, run_id, "produce"),
            gate_path=str(gate),
            gate_page=4,
            gate_timeout=60,
        )
    )
    effects: list[int] = []
    op = consumer(topic, effects, gap_timeout=3.0, max_events=2)
    try:
        with pytest.raises(StreamGapError) as info:
            run_to_end(op, make_context(run_id, "consume", DictStore()))
    finally:
        gate.write_text("open")
        producer.join(timeout=60)
    assert effects == [0, 1, 2, 3]
    assert info.value.missing_index == 4 and info.value.attempt == 0
    assert "waited 3s" in str(info.value)


def test_in_worker_mode_never_defers(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    effects: list[int] = []
    producer = start_producer(
        CountingPagesTrigger(
            pages=10, delay=0.3, topic=topic, trigger_run_id=stream_id(DAG_ID, run_id, "produce")
        )
    )
    in_worker = consumer(topic, effects, deferrable=False, reschedule=False)
    result = in_worker.execute(make_context(run_id, "consume", DictStore()))
    producer.join(timeout=60)
    assert effects == list(range(10)) and "deferrals" not in result and "reschedules" not in result

"""Streaming operators against a real Kafka broker, driven like Airflow drives them, without Airflow services.

The context is a fake with a dict-backed ``task_state_store`` (it keeps JSON values, as
Airflow's does) and a DAG run with a ``run_after`` (fixed per run id); a "retry" is a new
operator instance run with the same store, a "clear" the same with the DAG run's
``clear_number`` raised.  Triggers run in an asyncio loop, the way the
triggerer runs them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent, TriggerEvent
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.errors import StreamFailedError, StreamNotStartedError
from airflow_kafka_events.streams.checkpoint import load_checkpoint
from airflow_kafka_events.streams.consuming.consumption import checkpoint_key
from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.descriptor import StreamDescriptor, stream_id
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin, StreamingTriggerOperator
from harness.task_state import DictStore
from integration.triggers.sample_triggers import read_topic, wait_for

pytestmark = pytest.mark.integration

DAG_ID = "dag"


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    """The default Airflow Kafka connection, from the environment (no metadata DB)."""
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


RUN_AFTER: dict[str, datetime] = {}


def make_context(
    run_id: str, task_id: str, store: DictStore, *, clear_number: int = 0, try_number: int = 1
) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id=DAG_ID, run_id=run_id, task_id=task_id, map_index=-1, try_number=try_number)
    run_after = RUN_AFTER.setdefault(run_id, datetime.now(timezone.utc))  # a clear does not move it
    return {
        "ti": ti,
        "dag_run": SimpleNamespace(clear_number=clear_number, conf={}, run_after=run_after),
        "task_state_store": store,
    }


def new_run_id() -> str:
    return f"manual__{uuid.uuid4().hex[:10]}"


async def _collect(trigger: Any) -> list[TriggerEvent]:
    events = [event async for event in trigger.run()]
    await trigger.cleanup()
    return events


def run_trigger(trigger: Any) -> TriggerEvent:
    (event,) = asyncio.run(_collect(trigger))
    return event


def deferral(operator: Any, context: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        operator.execute(context)
    return info.value


def defer_and_resume(operator: Any, context: dict[str, Any]) -> Any:
    """``execute`` (defers), the trigger run, then ``resume_stream`` with the trigger's event."""
    deferred = deferral(operator, context)
    event = run_trigger(deferred.trigger)
    return getattr(operator, deferred.method_name)(context, event=event.payload, **(deferred.kwargs or {}))


# --------------------------------------------------------------------------- operators under test
class PagesOperator(StreamingOperatorMixin, BaseOperator):
    """Classic single-event handler; records each page it handled in ``effects``."""

    def __init__(
        self, *, topic: str, pages: int, effects: list[int], fail_at: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.pages = pages
        self.effects = effects
        self.fail_at = fail_at

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=self.pages, topic=self.topic), context=context)

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        if event["page"] == self.fail_at:
            raise RuntimeError(f"page {self.fail_at} cannot be handled")
        self.effects.append(event["page"])
        return event["page"]


class BatchPagesOperator(PagesOperator):
    """Batch handler: applies a batch atomically (checks everything before recording)."""

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pages = [e.payload["page"] for e in events]
        if self.fail_at in pages:
            raise RuntimeError(f"page {self.fail_at} cannot be handled")
        self.effects.extend((e.attempt, e.payload["page"]) for e in events)  # type: ignore[misc]


class RecordingConsumer(StreamConsumerOperator):
    """Applies each batch atomically to ``effects``; fails on a batch holding ``fail_at``."""

    def __init__(
        self, *, effects: list[int], fail_at: int | None = None, on_page: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.effects = effects
        self.fail_at = fail_at
        self.on_page = on_page
        self.batch_sizes: list[int] = []

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        pages = [e.payload["page"] for e in events]
        if self.fail_at in pages:
            raise RuntimeError(f"page {self.fail_at} cannot be handled")
        self.effects.extend(pages)
        self.batch_sizes.append(len(pages))
        if self.on_page is not None:
            self.on_page(pages[-1])


def consumer(topic: str, effects: list[int], **kwargs: Any) -> RecordingConsumer:
    kwargs.setdefault("max_events", 5)
    kwargs.setdefault("max_wait", 0.2)
    kwargs.setdefault("gap_timeout", 60.0)
    kwargs.setdefault("start_timeout", 60.0)
    kwargs.setdefault("lookup_timeout", 10.0)
    kwargs.setdefault("poll_timeout", 0.1)
    kwargs.setdefault("reschedule", False)  # read in the worker: nothing here reruns a reschedule
    return RecordingConsumer(
        task_id="consume", stream=StreamRef("produce", topic=topic), effects=effects, **kwargs
    )


# --------------------------------------------------------------------------- consumer by reference
def test_consumer_retry_resumes_at_the_checkpoint_and_each_page_takes_effect_once(new_topic, kafka_bootstrap):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    producer_stream = stream_id(DAG_ID, run_id, "produce")
    descriptor = StreamDescriptor.from_dict(
        run_trigger(CountingPagesTrigger(pages=30, topic=topic, trigger_run_id=producer_stream)).payload
    )
    assert descriptor.count == 30 and not descriptor.failed

    store = DictStore()
    effects: list[int] = []
    with pytest.raises(RuntimeError, match="page 12 cannot be handled"):
        consumer(topic, effects, fail_at=12).execute(make_context(run_id, "consume", store))
    assert effects == list(range(10))  # batches of 5: the batch holding page 12 took no effect
    saved = load_checkpoint(store, checkpoint_key(producer_stream), 0)
    assert saved is not None and saved.next_sequence_index == 10 and not saved.finished

    retry = consumer(topic, effects)
    summary = retry.execute(make_context(run_id, "consume", store, try_number=2))
    assert effects == list(range(30))  # in order, each page once
    assert summary == {
        "trigger_run_id": producer_stream,
        "topic": topic,
        "attempt": 0,
        "pages": 30,
        "pages_this_try": 20,
        "batches_this_try": 4,
        "restarted": False,
        "finished": True,
    }
    # the position was also committed to the consuming task's own group, checkpoint in the metadata
    group = f"airflow-kafka-events.{DAG_ID}.consume"
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (committed,) = probe.committed([TopicPartition(topic, descriptor.partition)], timeout=10)
    finally:
        probe.close()
    assert committed.offset == descriptor.last_offset + 1
    metadata = json.loads(committed.metadata)
    assert metadata["trigger_run_id"] == producer_stream and metadata["checkpoint"]["finished"] is True


def test_consumer_handles_pages_while_the_producer_is_still_writing(new_topic, tmp_path: Path):
    """Ordering by construction: page 20 is not written before the consumer handled page 5."""
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    gate = tmp_path / "consumer-handled-page-5"
    trigger = CountingPagesTrigger(
        pages=40,
        topic=topic,
        trigger_run_id=stream_id(DAG_ID, run_id, "produce"),
        gate_path=str(gate),
        gate_page=20,
        gate_timeout=60,
    )
    produced: list[TriggerEvent] = []
    producer = threading.Thread(target=lambda: produced.append(run_trigger(trigger)), daemon=True)

    def open_gate(last_page: int) -> None:
        if last_page >= 5 and not gate.exists():
            gate.write_text(str(last_page))

    effects: list[int] = []
    reader = consumer(topic, effects, on_page=open_gate, max_events=3)
    producer.start()  # the consumer was scheduled beside its producer: no dependency between them
    summary = reader.execute(make_context(run_id, "consume", DictStore()))
    producer.join(timeout=60)
    assert effects == list(range(40)) and summary["pages"] == 40
    assert int(gate.read_text()) < 20  # the gate opened before page 20 existed
    (event,) = produced
    assert not StreamDescriptor.from_dict(event.payload).failed


def test_consumer_fails_with_the_producer_error_after_the_pages_before_it(new_topic, tmp_path: Path):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    trigger = CountingPagesTrigger(
        pages=10,
        topic=topic,
        trigger_run_id=stream_id(DAG_ID, run_id, "produce"),
        gate_path=str(tmp_path / "never"),
        gate_page=4,
        gate_timeout=0.3,
    )
    assert StreamDescriptor.from_dict(run_trigger(trigger).payload).failed
    effects: list[int] = []
    with pytest.raises(StreamFailedError) as info:
        consumer(topic, effects).execute(make_context(run_id, "consume", DictStore()))
    assert effects == [0, 1, 2, 3]
    assert info.value.type.endswith(".GateTimeoutError") and "did not appear" in info.value.message


def test_consumer_of_a_producer_that_never_starts_fails_with_a_clear_message(new_topic):
    topic = new_topic(partitions=3)
    with pytest.raises(StreamNotStartedError) as info:
        consumer(topic, [], start_timeout=2.0, lookup_timeout=2.0).execute(
            make_context(new_run_id(), "consume", DictStore())
        )
    message = str(info.value)
    assert "did not start within 2s" in message and "Is task 'produce' of this DAG run" in message


# --------------------------------------------------------------------------- producer-side mixin
def test_single_event_shim_retry_resumes_after_the_last_handled_page(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    effects: list[int] = []
    first = PagesOperator(task_id="produce", topic=topic, pages=25, effects=effects, fail_at=7)
    with pytest.raises(RuntimeError, match="page 7 cannot be handled"):
        defer_and_resume(first, make_context(run_id, "produce", store))
    assert effects == list(range(7))

    retry = PagesOperator(task_id="produce", topic=topic, pages=25, effects=effects)
    context = make_context(run_id, "produce", store, try_number=2)
    deferred = deferral(retry, context)
    assert deferred.trigger.generation == 0  # a retry: the same generation, the stream resumes
    event = run_trigger(deferred.trigger)
    assert StreamDescriptor.from_dict(event.payload).attempt == 0  # reported again, not rewritten
    result = retry.resume_stream(context, event=event.payload, **deferred.kwargs)
    assert result == 24  # what the last execute_complete returned
    assert effects == list(range(25))


def test_a_cleared_task_writes_a_new_attempt_and_handles_it_from_the_start(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    effects: list[tuple[int, int]] = []
    summary = defer_and_resume(
        BatchPagesOperator(task_id="produce", topic=topic, pages=12, effects=effects),  # type: ignore[arg-type]
        make_context(run_id, "produce", store),
    )
    assert summary["attempt"] == 0 and summary["pages"] == 12 and summary["finished"]
    assert effects == [(0, p) for p in range(12)]

    effects.clear()
    context = make_context(run_id, "produce", store, clear_number=1)
    cleared = BatchPagesOperator(task_id="produce", topic=topic, pages=12, effects=effects)  # type: ignore[arg-type]
    deferred = deferral(cleared, context)
    assert deferred.trigger.generation == 1
    assert deferred.trigger.not_before is not None
    event = run_trigger(deferred.trigger)
    summary = cleared.resume_stream(context, event=event.payload, **deferred.kwargs)
    assert summary["attempt"] == 1 and summary["pages"] == 12 and summary["pages_this_try"] == 12
    assert effects == [(1, p) for p in range(12)]


def test_a_cleared_task_whose_trigger_is_run_again_resumes_its_new_attempt(
    new_topic, kafka_bootstrap, tmp_path: Path
):
    """A triggerer restart during the first deferral after a clear: the pages are fetched once."""
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    store = DictStore()
    effects: list[tuple[int, int]] = []
    defer_and_resume(
        BatchPagesOperator(task_id="produce", topic=topic, pages=10, effects=effects),  # type: ignore[arg-type]
        make_context(run_id, "produce", store),
    )
    effects.clear()

    gate = tmp_path / "gate"

    class Gated(BatchPagesOperator):
        def execute(self, context: Any) -> None:
            trigger = CountingPagesTrigger(
                pages=10, topic=topic, gate_path=str(gate), gate_page=6, gate_timeout=120
            )
            self.defer_stream(trigger, context=context)

    context = make_context(run_id, "produce", store, clear_number=1)
    cleared = Gated(task_id="produce", topic=topic, pages=10, effects=effects)  # type: ignore[arg-type]
    deferred = deferral(cleared, context)
    key = stream_id(DAG_ID, run_id, "produce")

    def written(attempt: int) -> list[int]:
        return [
            s.envelope.sequence_index
            for s in read_topic(kafka_bootstrap, topic, key)
            if s.envelope.attempt == attempt
        ]

    async def triggerer_restarts() -> TriggerEvent:
        task = asyncio.create_task(_collect(deferred.trigger))
        await wait_for(lambda: written(1) == list(range(6)), what="pages 0..5 of attempt 1")
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        gate.write_text("open")
        from airflow.sdk.module_loading import import_string

        classpath, kwargs = deferred.trigger.serialize()  # what the triggerer stored
        (event,) = await _collect(import_string(classpath)(**kwargs))
        return event

    event = asyncio.run(triggerer_restarts())
    descriptor = StreamDescriptor.from_dict(event.payload)
    assert (descriptor.attempt, descriptor.count) == (1, 10)
    assert written(1) == list(range(11))  # each page of attempt 1 written once, then the end marker
    assert written(2) == []
    summary = cleared.resume_stream(context, event=event.payload, **deferred.kwargs)
    assert summary["attempt"] == 1 and summary["pages"] == 10 and summary["pages_this_try"] == 10
    assert effects == [(1, p) for p in range(10)]


def test_a_failed_stream_fails_the_resumed_task_with_the_producer_error(new_topic, tmp_path: Path):
    topic = new_topic(partitions=3)

    class Gated(PagesOperator):
        def execute(self, context: Any) -> None:
            trigger = CountingPagesTrigger(
                pages=5, topic=topic, gate_path=str(tmp_path / "never"), gate_page=2, gate_timeout=0.3
            )
            self.defer_stream(trigger, context=context)

    effects: list[int] = []
    with pytest.raises(StreamFailedError) as info:
        defer_and_resume(
            Gated(task_id="produce", topic=topic, pages=5, effects=effects),
            make_context(new_run_id(), "produce", DictStore()),
        )
    assert info.value.type.endswith(".GateTimeoutError") and effects == []


def test_a_fetch_only_task_ends_in_the_trigger_and_a_decorated_consumer_reads_its_stream(new_topic):
    topic = new_topic(partitions=3)
    run_id = new_run_id()
    fetch = StreamingTriggerOperator(
        task_id="produce",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": 8, "topic": topic},
    )
    args = fetch.start_trigger_args
    assert fetch.start_from_trigger and args is not None
    # what the triggerer does for a start_from_trigger task: build the trigger, attach the TI
    from airflow.sdk.module_loading import import_string

    trigger = import_string(args.trigger_cls)(**(args.trigger_kwargs or {}))
    trigger.task_instance = SimpleNamespace(
        dag_id=DAG_ID, run_id=run_id, task_id="produce", map_index=-1, try_number=1
    )
    event = run_trigger(trigger)
    assert isinstance(event, TaskSuccessEvent)
    descriptor = StreamDescriptor.from_dict(event.xcoms["return_value"])
    assert descriptor.trigger_run_id == stream_id(DAG_ID, run_id, "produce") and descriptor.count == 8

    seen: list[int] = []

    def handle(events: Any, context: Any, offset: int = 0) -> None:
        seen.extend(e.payload["page"] + offset for e in events)

    decorated = stream_consumer_task(stream=StreamRef("produce", topic=topic), max_events=3, max_wait=0.1)
    operator = decorated(handle)(offset=100).operator
    summary = operator.execute(make_context(run_id, "consume", DictStore()))
    assert seen == [100 + p for p in range(8)] and summary["pages"] == 8

"""StreamingOperatorMixin without Kafka: the resume shim, batches, checkpoints, generation and bound."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import TaskDeferred

from airflow_kafka_events.errors import (
    ConfigurationError,
    StreamFailedError,
    TriggerSerializationError,
    ValidationError,
)
from airflow_kafka_events.streams.checkpoint import Checkpoint, load_checkpoint
from airflow_kafka_events.streams.consuming.consumption import StreamEvent, checkpoint_key, page_events
from airflow_kafka_events.streams.descriptor import (
    DEFAULT_NOT_BEFORE_MARGIN,
    generation_of,
    not_before_of,
    stream_id,
)
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import (
    RESUME_METHOD,
    StreamingOperatorMixin,
    StreamingTriggerOperator,
)
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger
from harness.task_state import DictStore
from unit.operators.fakes import FakeReader, context, descriptor, stream

pytestmark = pytest.mark.unit

RUN = stream_id("dag", "manual__1", "produce")


class LegacyOperator(StreamingOperatorMixin, BaseOperator):
    """A classic deferrable operator: one ``execute_complete(context, event)`` per event."""

    def __init__(self, *, fail_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_at = fail_at
        self.calls: list[Any] = []

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=3), context=context)

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        if event["page"] == self.fail_at:
            raise RuntimeError(f"cannot handle page {self.fail_at}")
        self.calls.append(event)
        return f"handled {event['page']}"


class BatchOperator(StreamingOperatorMixin, BaseOperator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches: list[list[StreamEvent]] = []

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=3), context=context)

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        self.batches.append(list(events))


def _attach(operator: Any, envelopes: list, max_events: int = 3) -> list[FakeReader]:
    readers: list[FakeReader] = []

    def open_stream_reader(topic, trigger_run_id, *, kafka_config_id, checkpoint, partition=None):
        assert trigger_run_id == RUN and partition == 0 and kafka_config_id == "kafka_default"
        reader = FakeReader(envelopes, checkpoint=checkpoint, max_events=max_events)
        readers.append(reader)
        return reader

    operator.open_stream_reader = open_stream_reader
    return readers


# --------------------------------------------------------------------------- the shim
def test_the_shim_calls_the_single_event_method_once_per_page_in_order():
    op = LegacyOperator(task_id="produce")
    store = DictStore()
    readers = _attach(op, stream(RUN, 7))
    result = op.resume_stream(context(store=store), event=descriptor(RUN, 7))
    assert [e["page"] for e in op.calls] == list(range(7))
    assert result == "handled 6"  # what the last call returned
    assert readers[0].closed
    # a checkpoint after every call (the batch's last call is covered by the batch checkpoint)
    positions = [v["checkpoint"]["next_sequence_index"] for k, v in store.writes if k == checkpoint_key(RUN)]
    assert positions == [1, 2, 3, 4, 5, 6, 8]  # batches [0,1,2] [3,4,5] [6,end]
    final = load_checkpoint(store, checkpoint_key(RUN), 0)
    assert final is not None and final.finished


def test_a_failing_single_event_call_stops_the_stream_and_the_retry_resumes_after_it():
    store = DictStore()
    envelopes = stream(RUN, 7)
    first = LegacyOperator(task_id="produce", fail_at=4)
    _attach(first, envelopes)
    with pytest.raises(RuntimeError, match="cannot handle page 4"):
        first.resume_stream(context(store=store), event=descriptor(RUN, 7))
    assert [e["page"] for e in first.calls] == [0, 1, 2, 3]  # nothing after the failure
    saved = load_checkpoint(store, checkpoint_key(RUN), 0)
    assert saved is not None and saved.next_sequence_index == 4 and not saved.finished

    retry = LegacyOperator(task_id="produce")  # a new try: a new operator, the same store
    _attach(retry, envelopes)
    assert retry.resume_stream(context(store=store), event=descriptor(RUN, 7)) == "handled 6"
    assert [e["page"] for e in retry.calls] == [4, 5, 6]
    assert [e["page"] for e in first.calls + retry.calls] == list(range(7))  # each effect once


def test_a_cleared_task_reads_its_stream_from_the_start():
    store = DictStore()
    envelopes = stream(RUN, 4)
    op = LegacyOperator(task_id="produce")
    _attach(op, envelopes)
    op.resume_stream(context(store=store, clear_number=0), event=descriptor(RUN, 4))
    again = LegacyOperator(task_id="produce")
    _attach(again, envelopes)
    again.resume_stream(context(store=store, clear_number=1), event=descriptor(RUN, 4))
    assert [e["page"] for e in again.calls] == [0, 1, 2, 3]


def test_a_fully_handled_stream_is_not_read_again():
    store = DictStore()
    op = LegacyOperator(task_id="produce")
    _attach(op, stream(RUN, 2))
    op.resume_stream(context(store=store), event=descriptor(RUN, 2))
    again = LegacyOperator(task_id="produce")
    readers = _attach(again, stream(RUN, 2))
    assert again.resume_stream(context(store=store), event=descriptor(RUN, 2)) is None
    assert again.calls == [] and readers == []


def test_a_checkpoint_of_an_older_attempt_is_not_used_for_a_newer_one():
    store = DictStore()
    from airflow_kafka_events.streams.checkpoint import save_checkpoint

    save_checkpoint(store, checkpoint_key(RUN), Checkpoint(attempt=0, next_sequence_index=2), 0)
    op = LegacyOperator(task_id="produce")
    _attach(op, stream(RUN, 3, attempt=1))
    op.resume_stream(context(store=store), event=descriptor(RUN, 3, attempt=1))
    assert [(e["page"], e["attempt"]) for e in op.calls] == [(0, 1), (1, 1), (2, 1)]


def test_an_empty_stream_calls_nothing_and_returns_none():
    op = LegacyOperator(task_id="produce")
    _attach(op, stream(RUN, 0))
    assert op.resume_stream(context(store=DictStore()), event=descriptor(RUN, 0)) is None
    assert op.calls == []


def test_a_missing_single_event_method_is_a_configuration_error():
    op = LegacyOperator(task_id="produce")
    _attach(op, stream(RUN, 1))
    with pytest.raises(ConfigurationError, match="no method 'on_page'"):
        op.resume_stream(context(store=DictStore()), event=descriptor(RUN, 1), handler_method="on_page")


# --------------------------------------------------------------------------- batches
def test_batches_go_to_handle_trigger_events_as_stream_events_and_the_task_returns_a_summary():
    op = BatchOperator(task_id="produce")
    store = DictStore()
    _attach(op, stream(RUN, 7), max_events=3)
    summary = op.resume_stream(context(store=store), event=descriptor(RUN, 7))
    assert [[e.sequence_index for e in b] for b in op.batches] == [[0, 1, 2], [3, 4, 5], [6]]
    first = op.batches[0][0]
    assert first == StreamEvent(
        payload={"page": 0, "attempt": 0}, sequence_index=0, attempt=0, trigger_run_id=RUN
    )
    assert summary == {
        "trigger_run_id": RUN,
        "topic": "airflow.trigger-events",
        "attempt": 0,
        "pages": 7,
        "pages_this_try": 7,
        "batches_this_try": 3,
        "restarted": False,
        "finished": True,
    }
    # one checkpoint per batch
    positions = [v["checkpoint"]["next_sequence_index"] for k, v in store.writes if k == checkpoint_key(RUN)]
    assert positions == [3, 6, 8]


def test_a_failed_stream_fails_the_task_with_the_producer_error_before_any_page_is_handled():
    op = LegacyOperator(task_id="produce")
    readers = _attach(op, stream(RUN, 3, error="503 upstream"))
    with pytest.raises(StreamFailedError) as info:
        op.resume_stream(context(store=DictStore()), event=descriptor(RUN, 3, error="503 upstream"))
    assert (info.value.type, info.value.message) == ("HTTPError", "503 upstream")
    assert info.value.trigger_run_id == RUN and "503 upstream" in str(info.value)
    assert op.calls == [] and readers == []


def test_an_event_that_is_not_a_descriptor_is_rejected():
    op = LegacyOperator(task_id="produce")
    with pytest.raises(ValidationError, match="not a stream descriptor"):
        op.resume_stream(context(store=DictStore()), event={"status": "success"})
    with pytest.raises(ValidationError, match="resumed with"):
        op.resume_stream(context(store=DictStore()), event="done")


def test_page_events_drop_only_the_payload_less_end_marker():
    envelopes = stream(RUN, 2)
    assert [e.sequence_index for e in page_events(envelopes)] == [0, 1]


# --------------------------------------------------------------------------- deferring
def _deferred(op: Any, ctx: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        op.execute(ctx)
    return info.value


def test_defer_stream_names_the_stream_and_resumes_in_the_mixin():
    store = DictStore()
    deferred = _deferred(LegacyOperator(task_id="produce"), context(store=store))
    trigger = deferred.trigger
    assert isinstance(trigger, CountingPagesTrigger)
    assert trigger.trigger_run_id == RUN and trigger.generation == 0 and trigger.pages_total == 3
    assert trigger.not_before is None  # the context's DAG run has no run_after
    assert deferred.method_name == RESUME_METHOD
    assert deferred.kwargs == {"handler_method": "execute_complete", "kafka_config_id": "kafka_default"}
    assert store.writes == []  # the restart decision lives in the trigger's kwargs, not in the store


def test_a_retry_passes_the_same_generation_and_a_clear_the_new_one():
    store = DictStore()
    first = _deferred(LegacyOperator(task_id="produce"), context(store=store, clear_number=0))
    retry = _deferred(LegacyOperator(task_id="produce"), context(store=store, clear_number=0, try_number=2))
    cleared = _deferred(LegacyOperator(task_id="produce"), context(store=store, clear_number=1))
    retry_after_clear = _deferred(
        LegacyOperator(task_id="produce"), context(store=store, clear_number=1, try_number=2)
    )
    deferrals = (first, retry, cleared, retry_after_clear)
    assert [d.trigger.generation for d in deferrals] == [0, 0, 1, 1]
    # the generation is a plain kwarg: a triggerer rebuilding the trigger gets the same one
    assert [d.trigger.serialize()[1]["generation"] for d in deferrals] == [0, 0, 1, 1]
    assert store.writes == []


def test_not_before_is_the_run_after_of_the_dag_run_minus_the_margin():
    run_after = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    deferred = _deferred(LegacyOperator(task_id="produce"), context(store=DictStore(), run_after=run_after))
    assert DEFAULT_NOT_BEFORE_MARGIN == timedelta(minutes=10)
    assert deferred.trigger.not_before == "2030-01-02T02:54:05+00:00"
    assert deferred.trigger.not_before_ms == int((run_after - timedelta(minutes=10)).timestamp() * 1000)
    # the same bound for a retry and after a clear: run_after does not move when a run is cleared
    cleared = _deferred(
        LegacyOperator(task_id="produce"), context(store=DictStore(), run_after=run_after, clear_number=3)
    )
    assert cleared.trigger.not_before == deferred.trigger.not_before

    class Skewed(LegacyOperator):
        stream_not_before_margin = timedelta(hours=1)

    skewed = _deferred(Skewed(task_id="produce"), context(store=DictStore(), run_after=run_after))
    assert skewed.trigger.not_before == "2030-01-02T02:04:05+00:00"


def test_not_before_of_needs_a_timezone_aware_run_after():
    run_after = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert not_before_of(context(run_after=run_after)) == run_after - timedelta(minutes=10)
    assert not_before_of(context(run_after=run_after), timedelta(0)) == run_after
    assert not_before_of(context(run_after=datetime(2030, 1, 2))) is None  # naive
    assert not_before_of(context()) is None
    assert not_before_of({"ti": object()}) is None


def test_a_generation_or_bound_given_to_the_trigger_is_kept():
    class Explicit(LegacyOperator):
        def execute(self, context: Any) -> None:
            self.defer_stream(
                CountingPagesTrigger(pages=1, generation=9, not_before="2020-01-01T00:00:00+00:00"),
                context=context,
            )

    run_after = datetime(2030, 1, 2, tzinfo=timezone.utc)
    deferred = _deferred(
        Explicit(task_id="produce"), context(store=DictStore(), clear_number=1, run_after=run_after)
    )
    assert (deferred.trigger.generation, deferred.trigger.not_before) == (9, "2020-01-01T00:00:00+00:00")


def test_mapped_task_instances_get_their_own_stream():
    deferred = _deferred(LegacyOperator(task_id="produce"), context(store=DictStore(), map_index=4))
    assert deferred.trigger.trigger_run_id == stream_id("dag", "manual__1", "produce", 4)


def test_generation_is_the_dag_run_clear_number():
    assert generation_of(context(clear_number=5)) == 5
    assert generation_of({"ti": object()}) == 0


class ClosureTrigger(StreamingTrigger):
    """Its kwargs hold a callable: it cannot be stored for a triggerer."""

    def __init__(self, *, transform: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.transform = transform

    def trigger_kwargs(self) -> dict[str, Any]:
        return {"transform": self.transform}

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        yield Page(payload=1)


class ClosureOperator(StreamingOperatorMixin, BaseOperator):
    def execute(self, context: Any) -> None:
        self.defer_stream(ClosureTrigger(transform={"step": lambda page: page}), context=context)


def test_an_unserializable_trigger_argument_is_refused_at_defer_time_naming_it():
    store = DictStore()
    with pytest.raises(TriggerSerializationError) as info:
        ClosureOperator(task_id="produce").execute(context(store=store))
    assert info.value.argument == "transform['step']"
    assert "a lambda" in str(info.value) and "ClosureOperator(task_id='produce')" in str(info.value)
    assert store.writes == []


def test_defer_stream_needs_a_streaming_trigger():
    from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

    class Plain(StreamingOperatorMixin, BaseOperator):
        def execute(self, context: Any) -> None:
            from datetime import timedelta

            self.defer_stream(TimeDeltaTrigger(timedelta(seconds=1)), context=context)  # type: ignore[arg-type]

    with pytest.raises(ConfigurationError, match="needs a StreamingTrigger"):
        Plain(task_id="p").execute(context(store=DictStore()))


# --------------------------------------------------------------------------- fetch-only operator
def test_streaming_trigger_operator_starts_from_the_trigger_and_finishes_the_task_there():
    op = StreamingTriggerOperator(
        task_id="fetch",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": 4, "topic": "t"},
    )
    assert op.start_from_trigger is True
    args = op.start_trigger_args
    assert args is not None and args.trigger_cls.endswith("CountingPagesTrigger")
    assert args.trigger_kwargs == {"pages": 4, "topic": "t", "finish_task": True}
    assert args.next_method == RESUME_METHOD


def test_streaming_trigger_operator_defers_from_execute_without_start_from_trigger():
    op = StreamingTriggerOperator(
        task_id="produce",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": 2},
        start_from_trigger=False,
    )
    run_after = datetime(2030, 1, 2, tzinfo=timezone.utc)
    deferred = _deferred(op, context(store=DictStore(), clear_number=2, run_after=run_after))
    assert deferred.trigger.finish_task is True and deferred.trigger.trigger_run_id == RUN
    assert deferred.trigger.generation == 2  # deferring from execute(): a clear starts over
    assert deferred.trigger.not_before == "2030-01-01T23:50:00+00:00"


def test_a_fetch_only_task_started_from_the_trigger_has_no_generation():
    op = StreamingTriggerOperator(
        task_id="fetch",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": 4},
    )
    assert op.start_trigger_args is not None
    trigger = CountingPagesTrigger(**op.start_trigger_args.trigger_kwargs)
    assert trigger.generation is None and trigger.not_before is None


def test_a_failed_triggers_cause_reaches_the_tasks_error():
    """Airflow raises TaskDeferralError("Trigger failure"); the producer's carries the cause."""
    from airflow.sdk import BaseOperator
    from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

    from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

    class Producer(StreamingOperatorMixin, BaseOperator):
        pass

    op = Producer(task_id="produce")
    traceback = [
        "Traceback (most recent call last):\n",
        '  File "streaming.py", line 1, in run\n',
        "airflow_kafka_events.errors.StreamProgressError: topic 'orders' is not available "
        "[UNKNOWN_TOPIC_OR_PART]; create it: airflow-kafka-events topics ensure\n",
    ]
    with pytest.raises(TaskDeferralError) as raised:
        op.resume_execution("__fail__", {"error": "Trigger failure", "traceback": traceback}, {})
    assert str(raised.value).startswith("Trigger failure: airflow_kafka_events.errors.StreamProgressError")
    assert "'orders'" in str(raised.value) and "topics ensure" in str(raised.value)
    # a timeout stays Airflow's own
    with pytest.raises(TaskDeferralTimeout):
        op.resume_execution("__fail__", {"error": "Trigger timeout", "traceback": traceback}, {})
    # no traceback: Airflow's error as it is
    with pytest.raises(TaskDeferralError, match=r"^Trigger failure$"):
        op.resume_execution("__fail__", {"error": "Trigger failure"}, {})

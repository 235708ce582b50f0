"""StreamRef, StreamConsumerOperator and @task.stream_consumer without Kafka."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, task

from airflow_kafka_events.errors import ConfigurationError, StreamNotStartedError, TriggerSerializationError
from airflow_kafka_events.provider import get_provider_info
from airflow_kafka_events.streams.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from airflow_kafka_events.streams.consuming.consumption import checkpoint_key
from airflow_kafka_events.streams.consuming.decorator import (
    _StreamConsumerDecoratedOperator,
    stream_consumer_task,
)
from airflow_kafka_events.streams.consuming.operator import (
    StreamConsumerOperator,
    StreamRef,
    consumer_group_id,
)
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from unit.operators.fakes import FakeReader, context, stream

pytestmark = pytest.mark.unit

PRODUCER_RUN = stream_id("dag", "manual__1", "produce")
RECORDED: list[list[int]] = []


def record(events: Any, context: Any) -> None:
    RECORDED.append([e.sequence_index for e in events])


# --------------------------------------------------------------------------- StreamRef
def test_stream_ref_resolves_to_the_producer_stream_of_the_same_dag_run():
    ref = StreamRef("produce")
    ctx = context(task_id="consume")
    assert ref.resolve(ctx) == PRODUCER_RUN == "dag/produce/-1/manual__1"
    assert StreamRef("produce", map_index=2).resolve(ctx) == stream_id("dag", "manual__1", "produce", 2)
    assert ref.trigger_run_id("other", "scheduled__2024") == "other/produce/-1/scheduled__2024"
    assert (ref.topic, ref.kafka_config_id) == ("airflow.trigger-events", "kafka_default")
    assert ref.to_dict() == {
        "producer_task_id": "produce",
        "map_index": -1,
        "topic": "airflow.trigger-events",
        "kafka_config_id": "kafka_default",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"producer_task_id": ""},
        {"producer_task_id": "a/b"},
        {"producer_task_id": "p", "map_index": -2},
        {"producer_task_id": "p", "map_index": True},
        {"producer_task_id": "p", "topic": ""},
        {"producer_task_id": "p", "kafka_config_id": ""},
    ],
)
def test_stream_ref_rejects_bad_values(kwargs):
    with pytest.raises(ConfigurationError):
        StreamRef(**kwargs)


def test_stream_ref_options_are_keyword_only():
    with pytest.raises(TypeError):
        StreamRef("produce", 3)  # type: ignore[misc]


def test_consumer_group_is_dedicated_to_the_consuming_task():
    assert consumer_group_id("dag", "consume") == "airflow-kafka-events.dag.consume"
    assert consumer_group_id("dag", "consume", 3) == "airflow-kafka-events.dag.consume.3"


# --------------------------------------------------------------------------- operator arguments
def test_the_consumer_needs_a_handler_or_an_override():
    with pytest.raises(ConfigurationError, match="handler"):
        StreamConsumerOperator(task_id="c", stream=StreamRef("p"))


def test_a_callable_handler_is_refused_at_parse_time_naming_the_argument():
    with pytest.raises(TriggerSerializationError) as info:
        StreamConsumerOperator(task_id="c", stream=StreamRef("p"), handler=lambda e, c: None)  # type: ignore[arg-type]
    assert info.value.argument == "handler"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"handler": "nodots"},
        {"handler": "mod.f", "max_events": 0},
        {"handler": "mod.f", "max_wait": -1},
        {"handler": "mod.f", "gap_timeout": 0},
        {"handler": "mod.f", "start_timeout": -5},
        {"handler": "mod.f", "kafka_config_id": ""},
    ],
)
def test_bad_consumer_arguments_fail_at_parse_time(kwargs):
    with pytest.raises(ConfigurationError):
        StreamConsumerOperator(task_id="c", stream=StreamRef("p"), **kwargs)


def test_stream_must_be_a_stream_ref():
    with pytest.raises(ConfigurationError, match="StreamRef"):
        StreamConsumerOperator(task_id="c", stream="produce", handler="m.f")  # type: ignore[arg-type]


def test_kafka_config_id_defaults_to_the_stream_refs():
    op = StreamConsumerOperator(task_id="c", stream=StreamRef("p", kafka_config_id="kafka_x"), handler="m.f")
    assert op.kafka_config_id == "kafka_x"


# --------------------------------------------------------------------------- execute with a fake reader
class _Consumer(StreamConsumerOperator):
    def __init__(self, *, envelopes: list, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.envelopes = envelopes
        self.opened: list[tuple[Checkpoint | None, str]] = []

    def get_settings(self):
        return None

    def starting_point(self, settings, trigger_run_id, not_before=None):
        self.not_before = not_before
        return Checkpoint()

    def open_reader(self, settings, trigger_run_id, checkpoint, group_id):
        assert trigger_run_id == PRODUCER_RUN
        self.opened.append((checkpoint, group_id))
        return FakeReader(self.envelopes, checkpoint=checkpoint, max_events=self.read.max_events)


def test_execute_hands_batches_to_the_dotted_handler_and_returns_a_summary():
    RECORDED.clear()
    store = DictStore()
    op = _Consumer(
        envelopes=stream(PRODUCER_RUN, 5),
        task_id="consume",
        stream=StreamRef("produce"),
        handler=f"{__name__}.record",
        max_events=2,
    )
    summary = op.execute(context(task_id="consume", store=store))
    assert RECORDED == [[0, 1], [2, 3], [4]]
    assert summary["pages"] == 5 and summary["pages_this_try"] == 5 and summary["batches_this_try"] == 3
    assert summary["finished"] and summary["trigger_run_id"] == PRODUCER_RUN and summary["attempt"] == 0
    assert op.opened == [(Checkpoint(), "airflow-kafka-events.dag.consume")]
    final = load_checkpoint(store, checkpoint_key(PRODUCER_RUN), 0)
    assert final is not None and final.finished


def test_execute_resumes_from_the_checkpoint_of_its_generation_only():
    RECORDED.clear()
    store = DictStore()
    save_checkpoint(store, checkpoint_key(PRODUCER_RUN), Checkpoint(next_sequence_index=3, offset=3), 0)
    kwargs = {"task_id": "consume", "stream": StreamRef("produce"), "handler": f"{__name__}.record"}
    _Consumer(envelopes=stream(PRODUCER_RUN, 5), **kwargs).execute(context(task_id="consume", store=store))
    assert RECORDED == [[3, 4]]
    RECORDED.clear()
    # cleared: generation 1 has no checkpoint, the stream is read from its start
    _Consumer(envelopes=stream(PRODUCER_RUN, 5), **kwargs).execute(
        context(task_id="consume", store=store, clear_number=1)
    )
    assert RECORDED == [[0, 1, 2, 3, 4]]


def test_an_unimportable_handler_fails_before_reading():
    op = _Consumer(
        envelopes=stream(PRODUCER_RUN, 1),
        task_id="consume",
        stream=StreamRef("produce"),
        handler="nope.nothing",
    )
    with pytest.raises(ConfigurationError, match=r"cannot import handler 'nope\.nothing'"):
        op.execute(context(task_id="consume", store=DictStore()))
    assert op.opened == []


def test_a_stream_that_never_starts_names_the_producer_task():
    class NeverStarts(_Consumer):
        def open_reader(self, settings, trigger_run_id, checkpoint, group_id):
            class Reader(FakeReader):
                def next_batch(self):
                    raise StreamNotStartedError(
                        "stream did not start within 1s: no element arrived: its producer never started",
                        topic="airflow.trigger-events",
                        trigger_run_id=trigger_run_id,
                    )

            return Reader([])

    op = NeverStarts(
        envelopes=[],
        task_id="consume",
        stream=StreamRef("produce"),
        handler=f"{__name__}.record",
        reschedule=False,
    )
    with pytest.raises(StreamNotStartedError, match="Is task 'produce' of this DAG run streaming"):
        op.execute(context(task_id="consume", store=DictStore()))


# --------------------------------------------------------------------------- @task.stream_consumer
def test_the_decorator_is_registered_in_the_provider_info_and_reachable_as_task_attribute():
    entries = {e["name"]: e for e in get_provider_info()["task-decorators"]}
    assert entries["stream_consumer"] == {
        "name": "stream_consumer",
        "class-name": "airflow_kafka_events.streams.consuming.decorator.stream_consumer_task",
    }
    assert task.stream_consumer is stream_consumer_task


def test_the_decorated_function_is_the_batch_handler_with_call_arguments():
    calls: list[tuple[list[int], str]] = []
    with DAG("decorated", schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:

        @task.stream_consumer(stream=StreamRef("produce"), max_events=50)
        def handle(events, context, label="x"):
            calls.append(([e.sequence_index for e in events], label))
            return len(events)

        handle(label="pages")
        handle()  # a second task: a unique task id

    assert sorted(dag.task_ids) == ["handle", "handle__1"]
    op = dag.get_task("handle")
    assert isinstance(op, _StreamConsumerDecoratedOperator) and isinstance(op, StreamConsumerOperator)
    assert op.read.max_events == 50 and op.stream == StreamRef("produce") and op.handler is None

    op.handle_trigger_events([], context())
    assert calls == [([], "pages")]


def test_the_decorated_function_must_take_events_and_context():
    with DAG("decorated_bad", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):

        @task.stream_consumer(stream=StreamRef("produce"))
        def handle(events):
            return None

        with pytest.raises(TypeError, match=r"must accept \(events, context"):
            handle()


def test_the_decorator_refuses_a_handler_argument():
    with pytest.raises(ConfigurationError, match="no handler"):
        stream_consumer_task(handler="m.f", stream=StreamRef("p"))


def test_a_fresh_consumer_bounds_its_lookup_by_the_runs_run_after():
    from datetime import datetime, timedelta, timezone

    from airflow_kafka_events.streams.descriptor import DEFAULT_NOT_BEFORE_MARGIN

    RECORDED.clear()
    run_after = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)
    op = _Consumer(
        envelopes=stream(PRODUCER_RUN, 2),
        task_id="consume",
        stream=StreamRef("produce"),
        handler=f"{__name__}.record",
    )
    op.execute(context(task_id="consume", store=DictStore(), run_after=run_after))
    assert op.not_before == run_after - DEFAULT_NOT_BEFORE_MARGIN
    assert DEFAULT_NOT_BEFORE_MARGIN == timedelta(minutes=10)

"""StreamingWrapperTrigger around real Airflow triggers and test triggers, against a real broker."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import uuid

import pytest
from airflow.providers.standard.triggers.temporal import DateTimeTrigger, TimeDeltaTrigger
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from airflow_kafka_events.streams.descriptor import StreamDescriptor
from airflow_kafka_events.streams.producing.wrapper import (
    TASK_FAILED_ERROR_TYPE,
    TIMEOUT_ERROR_TYPE,
    StreamingWrapperTrigger,
)
from integration.triggers import sample_triggers as samples
from integration.triggers.sample_triggers import collect, read_topic

pytestmark = pytest.mark.integration

SAMPLES = samples.MODULE


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


def _key() -> str:
    return f"dag/wrap/-1/run-{uuid.uuid4().hex}"


def _run(trigger) -> tuple[StreamDescriptor, TriggerEvent, float]:
    started = time.monotonic()
    (event,) = asyncio.run(collect(trigger))
    elapsed = time.monotonic() - started
    assert type(event) is TriggerEvent
    return StreamDescriptor.from_dict(event.payload), event, elapsed


def _payloads(bootstrap: str, topic: str, key: str) -> list:
    stored = read_topic(bootstrap, topic, key)
    assert [s.envelope.sequence_index for s in stored] == list(range(len(stored)))
    assert [s.envelope.is_last for s in stored] == [False] * (len(stored) - 1) + [True]
    assert stored[-1].envelope.payload is None
    return [s.envelope.payload for s in stored[:-1]]


def test_wrapping_a_datetime_trigger_streams_its_moment(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    inner = DateTimeTrigger(moment=moment)
    assert inner.serialize()[0] == "airflow.providers.standard.triggers.temporal.DateTimeTrigger"
    descriptor, _, elapsed = _run(StreamingWrapperTrigger.wrap(inner, trigger_run_id=key, topic=topic))
    assert elapsed >= 0.5
    assert (descriptor.count, descriptor.error) == (1, None)
    (payload,) = _payloads(kafka_bootstrap, topic, key)
    assert datetime.datetime.fromisoformat(payload) == moment


def test_wrapping_a_timedelta_trigger(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    before = datetime.datetime.now(datetime.timezone.utc)
    wrapper = StreamingWrapperTrigger.wrap(
        TimeDeltaTrigger(datetime.timedelta(seconds=1)), trigger_run_id=key, topic=topic
    )
    # it serializes as the DateTimeTrigger it is, and survives our own serialize()
    again = StreamingWrapperTrigger(**wrapper.serialize()[1])
    assert again.serialize() == wrapper.serialize()
    descriptor, _, _ = _run(again)
    (payload,) = _payloads(kafka_bootstrap, topic, key)
    assert datetime.datetime.fromisoformat(payload) >= before + datetime.timedelta(seconds=1)
    assert descriptor.count == 1


def test_every_event_of_a_multi_event_trigger_is_a_page(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    name = f"multi-{uuid.uuid4().hex}"
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.MultiEventTrigger",
        wrapped_kwargs={"name": name, "count": 5, "interval": 0.01},
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, _ = _run(wrapper)
    assert (descriptor.count, descriptor.error) == (5, None)
    assert _payloads(kafka_bootstrap, topic, key) == [{"n": n, "name": name} for n in range(5)]
    assert samples.CLEANUPS[name] == 1


def test_max_events_ends_the_stream_normally(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    name = f"max-{uuid.uuid4().hex}"
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.MultiEventTrigger",
        wrapped_kwargs={"name": name, "count": 50},
        max_events=3,
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, _ = _run(wrapper)
    assert (descriptor.count, descriptor.error) == (3, None)
    assert [p["n"] for p in _payloads(kafka_bootstrap, topic, key)] == [0, 1, 2]


def test_task_success_event_is_the_last_page(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    name = f"end-{uuid.uuid4().hex}"
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.EndTaskTrigger",
        wrapped_kwargs={"name": name, "state": "success"},
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, _ = _run(wrapper)
    assert (descriptor.count, descriptor.error) == (2, None)
    assert _payloads(kafka_bootstrap, topic, key) == [
        {"before": True},
        {"task_instance_state": "success", "xcoms": {"answer": 42, "name": name}},
    ]


def test_task_failed_event_fails_the_stream_and_with_finish_task_the_task(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    name = f"fail-{uuid.uuid4().hex}"
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.EndTaskTrigger",
        wrapped_kwargs={"name": name, "state": "failed"},
        trigger_run_id=key,
        topic=topic,
        finish_task=True,
    )
    (event,) = asyncio.run(collect(wrapper))
    assert type(event) is TaskFailedEvent
    descriptor = StreamDescriptor.from_dict((event.xcoms or {})["return_value"])
    assert descriptor.count == 2 and descriptor.error is not None
    assert descriptor.error["type"] == TASK_FAILED_ERROR_TYPE
    stored = read_topic(kafka_bootstrap, topic, key)
    assert stored[1].envelope.payload["task_instance_state"] == "failed"
    assert stored[-1].envelope.error is not None


def test_finish_task_success(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.MultiEventTrigger",
        wrapped_kwargs={"name": "fin", "count": 2},
        trigger_run_id=key,
        topic=topic,
        finish_task=True,
    )
    (event,) = asyncio.run(collect(wrapper))
    assert type(event) is TaskSuccessEvent
    assert StreamDescriptor.from_dict((event.xcoms or {})["return_value"]).count == 2


def test_a_trigger_that_never_returns_is_bounded_by_the_timeout(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    name = f"forever-{uuid.uuid4().hex}"
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.ForeverTrigger",
        wrapped_kwargs={"name": name, "before": 2},
        timeout=1,
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, elapsed = _run(wrapper)
    assert 1 <= elapsed < 15
    assert descriptor.count == 2
    assert descriptor.error is not None and descriptor.error["type"] == TIMEOUT_ERROR_TYPE
    assert _payloads(kafka_bootstrap, topic, key) == [{"n": 0}, {"n": 1}]
    terminal = read_topic(kafka_bootstrap, topic, key)[-1].envelope
    assert terminal.error is not None and terminal.error.type == TIMEOUT_ERROR_TYPE
    assert samples.CLEANUPS[name] == 1

    # a retry of the timed-out stream is a new attempt
    again, _, _ = _run(StreamingWrapperTrigger(**wrapper.serialize()[1]))
    assert (again.attempt, again.count) == (1, 2)


def test_timeout_can_end_the_stream_normally(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.ForeverTrigger",
        wrapped_kwargs={"name": "quiet", "before": 1},
        timeout=1,
        timeout_is_error=False,
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, elapsed = _run(wrapper)
    assert 1 <= elapsed < 15
    assert (descriptor.count, descriptor.error) == (1, None)


def test_an_error_of_the_wrapped_trigger_ends_the_stream_with_it(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    wrapper = StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.MultiEventTrigger",
        wrapped_kwargs={"name": "broken", "count": 5, "fail_after": 2},
        trigger_run_id=key,
        topic=topic,
    )
    descriptor, _, _ = _run(wrapper)
    assert descriptor.count == 2
    assert descriptor.error == {
        "type": f"{SAMPLES}.PageFetchError",
        "message": "event source broke after 2 events",
    }

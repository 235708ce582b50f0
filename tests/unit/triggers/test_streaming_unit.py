"""Stream ids, descriptors, resume rules and the streaming triggers' logic without a broker."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import enum
import json
import time
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent, TriggerEvent
from hypothesis import given
from hypothesis import strategies as st

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeEncodeError,
    StreamIdentityError,
    StreamTimeoutError,
    ValidationError,
    WrappedTaskFailedError,
)
from airflow_kafka_events.streams.descriptor import (
    ResumePlan,
    StreamDescriptor,
    StreamKey,
    parse_stream_id,
    plan_resume,
    stream_id,
)
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger
from airflow_kafka_events.streams.producing.wrapper import (
    TASK_FAILED_ERROR_TYPE,
    TIMEOUT_ERROR_TYPE,
    StreamingWrapperTrigger,
    json_payload,
)
from airflow_kafka_events.streams.producing.writer import AttemptWriter
from airflow_kafka_events.streams.progress import (
    GENERATION_METADATA_KEY,
    StreamLocation,
    StreamProgress,
    find_stream_progress,
    lookup_stream,
)
from integration.triggers import sample_triggers as samples

pytestmark = pytest.mark.unit

SAMPLES = samples.MODULE


# --------------------------------------------------------------------------- stream ids
_key_part = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1)
_run_part = st.text(st.characters(codec="utf-8"), min_size=1)


@given(dag_id=_key_part, run_id=_run_part, task_id=_key_part, map_index=st.integers(min_value=-1))
def test_stream_id_round_trips(dag_id, run_id, task_id, map_index):
    value = stream_id(dag_id, run_id, task_id, map_index)
    assert parse_stream_id(value) == StreamKey(dag_id, run_id, task_id, map_index)


@given(
    a=st.tuples(_key_part, _run_part, _key_part, st.integers(min_value=-1, max_value=5)),
    b=st.tuples(_key_part, _run_part, _key_part, st.integers(min_value=-1, max_value=5)),
)
def test_stream_id_is_unambiguous(a, b):
    assert (stream_id(*a) == stream_id(*b)) == (a == b)


def test_stream_id_layout_and_slashes_in_run_id():
    assert stream_id("dag", "manual__2024/01/01", "task") == "dag/task/-1/manual__2024/01/01"
    assert stream_id("dag", "r", "task", 3) == "dag/task/3/r"
    # with run_id in the middle, ("d", "x/t", "t2") and ("d", "x", "t/t2") would both read "d/x/t/t2"
    assert stream_id("d", "x/t", "t2") == "d/t2/-1/x/t"
    assert parse_stream_id("d/t/0/a/b/c") == StreamKey("d", "a/b/c", "t", 0)


@pytest.mark.parametrize(
    "args",
    [
        ("da/g", "run", "task", -1),
        ("dag", "run", "ta/sk", -1),
        ("", "run", "task", -1),
        ("dag", "", "task", -1),
        ("dag", "run", "", -1),
        ("dag", "run", "task", -2),
        ("dag", "run", "task", True),
        ("dag", "run", "task", "1"),
        (None, "run", "task", -1),
    ],
)
def test_stream_id_rejects_invalid_parts(args):
    with pytest.raises(ValidationError):
        stream_id(*args)


@pytest.mark.parametrize(
    "value",
    ["", "dag", "dag/task/-1", "dag/task/x/run", "dag/task/01/run", "dag/task/+1/run", "/t/-1/r", "d//-1/r"],
)
def test_parse_stream_id_rejects_non_ids(value):
    with pytest.raises(ValidationError):
        parse_stream_id(value)


# --------------------------------------------------------------------------- descriptor
def _descriptor(**overrides: Any) -> StreamDescriptor:
    values: dict[str, Any] = {
        "topic": "airflow.trigger-events",
        "trigger_run_id": "dag/task/-1/run",
        "attempt": 1,
        "count": 250,
        "first_offset": 10,
        "last_offset": 300,
        "partition": 2,
        "error": None,
    }
    values.update(overrides)
    return StreamDescriptor(**values)


@pytest.mark.parametrize(
    "descriptor",
    [
        _descriptor(),
        _descriptor(count=0, first_offset=5, last_offset=5),
        _descriptor(first_offset=None),
        _descriptor(error={"type": "builtins.ValueError", "message": "boom"}),
        _descriptor(error=StreamFailure(type="Timeout", message="late")),
    ],
)
def test_descriptor_round_trips_through_json(descriptor):
    data = descriptor.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert StreamDescriptor.from_dict(json.loads(json.dumps(data))) == descriptor
    assert set(data) == {
        "topic",
        "trigger_run_id",
        "attempt",
        "count",
        "first_offset",
        "last_offset",
        "partition",
        "error",
    }


def test_descriptor_error_properties():
    failed = _descriptor(error=StreamFailure(type="Timeout", message="late"))
    assert failed.failed and failed.to_dict()["error"] == {"type": "Timeout", "message": "late"}
    assert not _descriptor().failed


@pytest.mark.parametrize(
    "change",
    [
        {"topic": ""},
        {"trigger_run_id": None},
        {"attempt": -1},
        {"count": "3"},
        {"first_offset": -1},
        {"last_offset": None},
        {"partition": True},
        {"error": "boom"},
        {"error": {"type": "", "message": "m"}},
        {"error": {"type": "T"}},
    ],
)
def test_descriptor_rejects_bad_values(change):
    data = {**_descriptor().to_dict(), **change}
    with pytest.raises(ValidationError):
        StreamDescriptor.from_dict(data)


def test_descriptor_from_dict_requires_fields():
    data = _descriptor().to_dict()
    del data["partition"]
    with pytest.raises(ValidationError, match="partition"):
        StreamDescriptor.from_dict(data)
    with pytest.raises(ValidationError):
        StreamDescriptor.from_dict(["not", "a", "dict"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- resume rules
def _progress(
    *,
    attempt: int = 0,
    seq: int = 4,
    is_last: bool = False,
    error: bool = False,
    cursor: str | None = "c5",
    generation: int | None = None,
) -> StreamProgress:
    return StreamProgress(
        trigger_run_id="k",
        topic="t",
        partition=0,
        offset=100,
        attempt=attempt,
        sequence_index=seq,
        is_last=is_last,
        error=StreamFailure(type="E", message="m") if error else None,
        resume_cursor=cursor,
        first_offset=90,
        generation=generation,
    )


_INTERRUPTED = {"attempt": 2, "seq": 4}
_COMPLETE = {"attempt": 2, "seq": 4, "is_last": True}
_FAILED = {"attempt": 2, "seq": 4, "is_last": True, "error": True}
_NO_CURSOR = {"attempt": 2, "seq": 4, "cursor": None}
_NEW_ATTEMPT = ResumePlan(3, 0, None, False)
_RESUME = ResumePlan(2, 5, "c5", False)
_DONE = ResumePlan(2, 5, None, True)


@pytest.mark.parametrize(
    ("progress", "generation", "expected"),
    [
        # nothing written: attempt 0, whatever the generation
        pytest.param(None, None, ResumePlan(0, 0, None, False), id="nothing-written"),
        pytest.param(None, 0, ResumePlan(0, 0, None, False), id="nothing-written-gen-0"),
        pytest.param(None, 3, ResumePlan(0, 0, None, False), id="nothing-written-gen-3"),
        # no generation known (start_from_trigger): the rules of the stream alone
        pytest.param(_progress(**_INTERRUPTED), None, _RESUME, id="interrupted"),
        pytest.param(_progress(seq=0, cursor="c1"), None, ResumePlan(0, 1, "c1", False), id="after-first"),
        pytest.param(_progress(**_NO_CURSOR), None, _NEW_ATTEMPT, id="no-cursor"),
        pytest.param(
            replace(_progress(**_INTERRUPTED), first_missing=0), None, _NEW_ATTEMPT, id="unresumable-hole"
        ),
        pytest.param(
            replace(_progress(**_INTERRUPTED, generation=1), first_missing=2),
            1,
            _NEW_ATTEMPT,
            id="same-gen-hole",
        ),
        pytest.param(_progress(**_FAILED), None, _NEW_ATTEMPT, id="failed-attempt"),
        pytest.param(_progress(**_COMPLETE), None, _DONE, id="complete"),
        pytest.param(_progress(**_INTERRUPTED, generation=4), None, _RESUME, id="no-gen-resumes-any-gen"),
        pytest.param(_progress(**_COMPLETE, generation=4), None, _DONE, id="no-gen-complete-any-gen"),
        # the same generation (a retry, a triggerer restart): the rules of the stream
        pytest.param(_progress(**_INTERRUPTED, generation=1), 1, _RESUME, id="same-gen-interrupted"),
        pytest.param(_progress(**_COMPLETE, generation=1), 1, _DONE, id="same-gen-complete"),
        pytest.param(_progress(**_FAILED, generation=1), 1, _NEW_ATTEMPT, id="same-gen-failed"),
        pytest.param(_progress(**_NO_CURSOR, generation=1), 1, _NEW_ATTEMPT, id="same-gen-no-cursor"),
        pytest.param(_progress(**_INTERRUPTED, generation=0), 0, _RESUME, id="gen-0-interrupted"),
        # another generation (the task was cleared since): a new attempt from 0
        pytest.param(_progress(**_INTERRUPTED, generation=0), 1, _NEW_ATTEMPT, id="cleared-interrupted"),
        pytest.param(_progress(**_COMPLETE, generation=0), 1, _NEW_ATTEMPT, id="cleared-complete"),
        pytest.param(_progress(**_FAILED, generation=0), 1, _NEW_ATTEMPT, id="cleared-failed"),
        pytest.param(_progress(**_COMPLETE, generation=5), 1, _NEW_ATTEMPT, id="other-higher-gen"),
        # written without a generation, read by a task that knows its own: another generation
        pytest.param(_progress(**_INTERRUPTED), 0, _NEW_ATTEMPT, id="progress-gen-none-interrupted"),
        pytest.param(_progress(**_COMPLETE), 1, _NEW_ATTEMPT, id="progress-gen-none-complete"),
    ],
)
def test_plan_resume(progress, generation, expected):
    plan = plan_resume(progress, generation)
    assert plan == expected
    attempt, next_seq, cursor, already_complete = plan  # a plain tuple too
    assert (attempt, next_seq, cursor, already_complete) == tuple(expected)


def test_progress_reads_the_generation_from_the_envelope_metadata():
    def progress(metadata: dict[str, str]) -> StreamProgress:
        envelope = TriggerEventEnvelope(
            trigger_run_id="k", sequence_index=1, is_last=False, payload=1, metadata=metadata
        )
        return StreamProgress.from_envelope(envelope, topic="t", partition=0, offset=7, first_offset=None)

    assert progress({GENERATION_METADATA_KEY: "3"}).generation == 3
    assert progress({GENERATION_METADATA_KEY: "0", "first_offset": "2"}).generation == 0
    assert progress({}).generation is None
    assert progress({GENERATION_METADATA_KEY: "x"}).generation is None
    assert progress({GENERATION_METADATA_KEY: "-1"}).generation is None


def test_stream_location_never_scans_below_the_low_watermark():
    location = StreamLocation(topic="t", partition=0, num_partitions=1, low=40, high=90)
    assert location.scan_start == 40 and location.not_before_ms is None
    bounded = StreamLocation(topic="t", partition=0, num_partitions=1, low=40, high=90, scan_start=70)
    assert bounded.scan_start == 70


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1700000000000"])
def test_lookup_refuses_a_bad_not_before_before_any_kafka_access(bad):
    with pytest.raises(ValueError, match="not_before_ms"):
        lookup_stream({"bootstrap.servers": "nowhere:1"}, "t", "k", not_before_ms=bad)
    with pytest.raises(ValueError, match="not_before_ms"):
        find_stream_progress({"bootstrap.servers": "nowhere:1"}, "t", "k", not_before_ms=bad)


def _writer(*, generation: int | None, next_seq: int, first_offset: int | None) -> AttemptWriter:
    return AttemptWriter(
        None,  # type: ignore[arg-type]  # encode() does not produce
        topic="t",
        partition=0,
        trigger_run_id="k",
        attempt=1,
        next_seq=next_seq,
        first_offset=first_offset,
        cursor=None,
        identity=ProducerIdentity(),
        delivery_timeout=1.0,
        generation=generation,
    )


@pytest.mark.parametrize(
    ("generation", "next_seq", "first_offset", "metadata"),
    [
        (None, 0, None, {}),
        (None, 3, 10, {"first_offset": "10"}),
        (2, 0, None, {"generation": "2"}),
        (2, 3, 10, {"generation": "2", "first_offset": "10"}),
        (0, 3, None, {"generation": "0"}),
    ],
)
def test_every_envelope_of_an_attempt_records_its_generation(generation, next_seq, first_offset, metadata):
    writer = _writer(generation=generation, next_seq=next_seq, first_offset=first_offset)
    for is_last in (False, True):
        value = writer.encode(payload=None if is_last else {"p": 1}, cursor="c", is_last=is_last, error=None)
        assert TRIGGER_EVENT_CODEC.decode(value).metadata == metadata


# --------------------------------------------------------------------------- pages and triggers
def test_page_checks_its_cursor():
    assert Page({"a": 1}).cursor is None
    assert Page(b"x", cursor="2").cursor == "2"
    with pytest.raises(ValidationError):
        Page(1, cursor=2)  # type: ignore[arg-type]


def _round_trip(trigger) -> Any:
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    return cls(**kwargs)


def _airflow_round_trip(trigger) -> Any:
    """The trip Airflow makes: serde on the worker, stored JSON, decoded in the triggerer."""
    from airflow.models.trigger import Trigger
    from airflow.sdk.module_loading import import_string
    from airflow.sdk.serde import serialize
    from airflow.serialization.decoders import smart_decode_trigger_kwargs

    classpath, kwargs = trigger.serialize()
    stored = json.dumps(serialize(kwargs))
    decoded = {k: smart_decode_trigger_kwargs(v) for k, v in Trigger._decrypt_kwargs(stored).items()}
    return import_string(classpath)(**decoded)


def _triggers() -> list[Any]:
    from airflow.providers.standard.triggers.temporal import DateTimeTrigger

    moment = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    return [
        samples.PagedTrigger(total=3),
        samples.PagedTrigger(
            total=7,
            fail_at=2,
            fail_times=3,
            bad_payload_at=5,
            cursors=False,
            trigger_run_id="d/t/-1/r",
            topic="x.events",
            kafka_config_id="other",
            finish_task=True,
            generation=2,
            not_before="2030-01-02T03:04:05.123000+00:00",
            producer_identity={"dag_id": "d", "try_number": 2},
        ),
        samples.BytesTrigger(chunks=["a", "b"], trigger_run_id="k", generation=0),
        samples.BytesTrigger(chunks=["a"], not_before=moment + datetime.timedelta(hours=2)),
        StreamingWrapperTrigger(
            wrapped_classpath=f"{SAMPLES}.MultiEventTrigger", wrapped_kwargs={"name": "n", "count": 2}
        ),
        StreamingWrapperTrigger.wrap(
            DateTimeTrigger(moment=moment), max_events=1, timeout=2.5, timeout_is_error=False, topic="w"
        ),
        StreamingWrapperTrigger(
            wrapped_classpath=f"{SAMPLES}.MultiEventTrigger",
            wrapped_kwargs={"name": "n", "count": 1},
            generation=7,
            not_before="2030-01-02T05:04:05+02:00",
        ),
    ]


@pytest.mark.parametrize("trigger", _triggers(), ids=lambda t: type(t).__name__)
def test_serialize_round_trips(trigger):
    again = _round_trip(trigger)
    assert type(again) is type(trigger)
    assert again.serialize() == trigger.serialize()


@pytest.mark.parametrize("trigger", _triggers(), ids=lambda t: type(t).__name__)
def test_serialize_round_trips_through_airflow_serialization(trigger):
    again = _airflow_round_trip(trigger)
    assert type(again) is type(trigger)
    assert again.serialize() == trigger.serialize()


def test_serialize_maps_onto_init():
    classpath, kwargs = samples.PagedTrigger(total=3, topic="t").serialize()
    assert classpath == f"{SAMPLES}.PagedTrigger"
    assert kwargs == {
        "total": 3,
        "fail_at": None,
        "fail_times": 1,
        "bad_payload_at": None,
        "cursors": True,
        "trigger_run_id": None,
        "topic": "t",
        "kafka_config_id": "kafka_default",
        "finish_task": False,
        "generation": None,
        "not_before": None,
        "producer_identity": None,
    }
    json.dumps(kwargs)


def test_generation_and_not_before_are_plain_json_kwargs():
    trigger = samples.PagedTrigger(total=1, generation=3, not_before="2030-01-02T03:04:05Z")
    kwargs = trigger.serialize()[1]
    assert (kwargs["generation"], kwargs["not_before"]) == (3, "2030-01-02T03:04:05+00:00")
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert trigger.not_before_ms == 1893553445000
    moment = datetime.datetime(
        2030, 1, 2, 5, 4, 5, 678900, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    from_datetime = samples.PagedTrigger(total=1, not_before=moment)
    assert from_datetime.not_before == "2030-01-02T05:04:05.678900+02:00"
    assert from_datetime.not_before_ms == 1893553445678
    assert _round_trip(from_datetime).serialize() == from_datetime.serialize()
    assert samples.PagedTrigger(total=1).not_before_ms is None
    assert samples.PagedTrigger(total=1, not_before="1960-01-01T00:00:00+00:00").not_before_ms == 0
    assert not hasattr(samples.PagedTrigger(total=1), "restart")


def test_serialize_refuses_subclass_kwargs_named_like_stream_kwargs():
    class Clashing(StreamingTrigger):
        def trigger_kwargs(self) -> dict[str, Any]:
            return {"topic": "mine"}

        async def pages(self, cursor):  # pragma: no cover - never run
            yield Page(None)

    with pytest.raises(ConfigurationError, match="topic"):
        Clashing().serialize()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trigger_run_id": ""},
        {"trigger_run_id": 5},
        {"topic": ""},
        {"kafka_config_id": None},
        {"producer_identity": ["dag"]},
        {"producer_identity": {"unknown": 1}},
        {"producer_identity": {"map_index": "x"}},
        {"generation": -1},
        {"generation": True},
        {"generation": "1"},
        {"generation": 1.0},
        {"not_before": "yesterday"},
        {"not_before": "2030-01-02T03:04:05"},  # no timezone
        {"not_before": datetime.datetime(2030, 1, 2)},  # naive
        {"not_before": 1893553445},
        {"not_before": ""},
    ],
)
def test_stream_kwargs_are_checked(kwargs):
    with pytest.raises((ConfigurationError, ValidationError)):
        samples.PagedTrigger(total=1, **kwargs)


def test_constructing_a_trigger_creates_no_hook_and_no_producer(monkeypatch):
    import airflow_kafka_events.kafka.producer as producer
    import airflow_kafka_events.provider.hook as hooks

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Kafka clients must not be created while a trigger is constructed")

    monkeypatch.setattr(hooks.KafkaEventsHook, "__init__", refuse)
    monkeypatch.setattr(producer, "get_producer", refuse)
    monkeypatch.setattr(producer.RecordProducer, "__init__", refuse)
    trigger = samples.PagedTrigger(total=1, kafka_config_id="nowhere")
    wrapper = StreamingWrapperTrigger(wrapped_classpath=f"{SAMPLES}.MultiEventTrigger", wrapped_kwargs={})
    assert _round_trip(trigger).kafka_config_id == "nowhere"
    assert repr(trigger).startswith(f"<{SAMPLES}.PagedTrigger")
    assert _round_trip(wrapper).serialize() == wrapper.serialize()


def _ti(**overrides: Any) -> SimpleNamespace:
    values = {
        "dag_id": "dag",
        "run_id": "manual__2024-01-01T00:00:00+00:00",
        "task_id": "task",
        "map_index": -1,
    }
    values["try_number"] = 3
    values.update(overrides)
    return SimpleNamespace(**values)


def test_trigger_run_id_comes_from_kwarg_then_task_instance():
    trigger = samples.PagedTrigger(total=1, trigger_run_id="explicit")
    trigger.task_instance = _ti()
    assert trigger.resolve_trigger_run_id() == "explicit"

    derived = samples.PagedTrigger(total=1)
    derived.task_instance = _ti(map_index=4)
    assert derived.resolve_trigger_run_id() == "dag/task/4/manual__2024-01-01T00:00:00+00:00"
    assert derived.serialize()[1]["trigger_run_id"] is None  # stays derived, not frozen

    none_index = samples.PagedTrigger(total=1)
    none_index.task_instance = _ti(map_index=None)
    assert none_index.resolve_trigger_run_id() == "dag/task/-1/manual__2024-01-01T00:00:00+00:00"


def test_trigger_run_id_missing_is_a_typed_error_before_any_kafka_access(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    trigger = samples.PagedTrigger(total=1)
    with pytest.raises(StreamIdentityError, match="trigger_run_id"):
        asyncio.run(samples.collect(trigger))
    broken = samples.PagedTrigger(total=1)
    broken.task_instance = _ti(task_id="a/b")
    with pytest.raises(StreamIdentityError):
        broken.resolve_trigger_run_id()


def test_producer_identity_from_kwarg_then_task_instance():
    given_identity = samples.PagedTrigger(total=1, producer_identity={"dag_id": "x", "map_index": 2})
    given_identity.task_instance = _ti()
    assert given_identity.resolve_producer_identity() == ProducerIdentity(dag_id="x", map_index=2)

    from_ti = samples.PagedTrigger(total=1)
    from_ti.task_instance = _ti()
    assert from_ti.resolve_producer_identity() == ProducerIdentity(
        dag_id="dag", run_id="manual__2024-01-01T00:00:00+00:00", task_id="task", map_index=-1, try_number=3
    )
    assert samples.PagedTrigger(total=1).resolve_producer_identity() == ProducerIdentity()


@pytest.mark.parametrize(
    ("finish_task", "error", "expected"),
    [
        (False, None, TriggerEvent),
        (False, {"type": "E", "message": "m"}, TriggerEvent),
        (True, None, TaskSuccessEvent),
        (True, {"type": "E", "message": "m"}, TaskFailedEvent),
    ],
)
def test_final_event(finish_task, error, expected):
    descriptor = _descriptor(error=error)
    event = samples.PagedTrigger(total=1, finish_task=finish_task).final_event(descriptor)
    assert type(event) is expected
    if finish_task:
        assert event.xcoms == {"return_value": descriptor.to_dict()}
        # the event survives the pydantic round trip the triggerer makes
        dumped = event.model_dump()
        assert type(event).model_validate(dumped).xcoms == {"return_value": descriptor.to_dict()}
    else:
        assert event.payload == descriptor.to_dict()


# --------------------------------------------------------------------------- wrapper, without Kafka
class Color(enum.Enum):
    RED = "red"


def test_json_payload_conversions():
    moment = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    ident = uuid.UUID(int=7)
    converted = json_payload(
        {
            "when": moment,
            "day": moment.date(),
            "delta": datetime.timedelta(seconds=90),
            "color": Color.RED,
            "price": decimal.Decimal("1.50"),
            "id": ident,
            "tuple": (1, 2),
            "set": {3, 1},
            "nested": b"\x00\x01",
            1: "int key",
            "nan": float("nan"),
        }
    )
    assert converted == {
        "when": "2030-01-02T03:04:05+00:00",
        "day": "2030-01-02",
        "delta": 90.0,
        "color": "red",
        "price": "1.50",
        "id": str(ident),
        "tuple": [1, 2],
        "set": [1, 3],
        "nested": "AAE=",
        "1": "int key",
        "nan": "nan",
    }
    assert json_payload(b"raw") == b"raw"
    assert json_payload(None) is None


def test_json_payload_falls_back_to_airflow_serde_and_refuses_the_rest():
    from zoneinfo import ZoneInfo

    import pendulum
    from airflow.sdk.serde import deserialize

    converted = json_payload({"tz": ZoneInfo("Europe/Paris")})
    assert converted["tz"]["__classname__"] == "zoneinfo.ZoneInfo"
    assert deserialize(json.loads(json.dumps(converted["tz"]))) == ZoneInfo("Europe/Paris")
    assert json_payload(pendulum.datetime(2030, 1, 1, tz="UTC")) == "2030-01-01T00:00:00+00:00"

    class Opaque:
        pass

    with pytest.raises(EnvelopeEncodeError, match="Opaque"):
        json_payload({"x": Opaque()})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"wrapped_classpath": "NoDots"},
        {"wrapped_classpath": None},
        {"wrapped_classpath": "a.B", "wrapped_kwargs": ["x"]},
        {"wrapped_classpath": "a.B", "max_events": -1},
        {"wrapped_classpath": "a.B", "max_events": 1.5},
        {"wrapped_classpath": "a.B", "timeout": 0},
        {"wrapped_classpath": "a.B", "timeout": float("inf")},
        {"wrapped_classpath": "a.B", "timeout": True},
    ],
)
def test_wrapper_checks_its_kwargs(kwargs):
    with pytest.raises(ConfigurationError):
        StreamingWrapperTrigger(**kwargs)


def test_wrapper_error_types():
    wrapper = StreamingWrapperTrigger(wrapped_classpath="a.B")
    assert wrapper.stream_error_for(StreamTimeoutError("late")) == StreamFailure(TIMEOUT_ERROR_TYPE, "late")
    assert wrapper.stream_error_for(WrappedTaskFailedError("no")) == StreamFailure(
        TASK_FAILED_ERROR_TYPE, "no"
    )
    assert wrapper.stream_error_for(ValueError("v")) == StreamFailure("ValueError", "v")


async def _pages(wrapper: StreamingWrapperTrigger) -> tuple[list[Page], BaseException | None]:
    pages: list[Page] = []
    try:
        async for page in wrapper.pages(None):
            pages.append(page)
    except Exception as exc:
        return pages, exc
    return pages, None


def _wrapper(name: str, cls: str, **kwargs: Any) -> StreamingWrapperTrigger:
    options = {k: kwargs.pop(k) for k in ("max_events", "timeout", "timeout_is_error") if k in kwargs}
    return StreamingWrapperTrigger(
        wrapped_classpath=f"{SAMPLES}.{cls}", wrapped_kwargs={"name": name, **kwargs}, **options
    )


def test_wrapper_pages_are_the_wrapped_events_and_cleanup_runs():
    name = f"multi-{uuid.uuid4().hex}"
    pages, error = asyncio.run(_pages(_wrapper(name, "MultiEventTrigger", count=4)))
    assert error is None
    assert [p.payload for p in pages] == [{"n": n, "name": name} for n in range(4)]
    assert all(p.cursor is None for p in pages)
    assert samples.CLEANUPS[name] == 1


def test_wrapper_max_events_stops_early():
    name = f"max-{uuid.uuid4().hex}"
    pages, error = asyncio.run(_pages(_wrapper(name, "MultiEventTrigger", count=10, max_events=3)))
    assert error is None and [p.payload["n"] for p in pages] == [0, 1, 2]
    assert samples.CLEANUPS[name] == 1
    pages, error = asyncio.run(_pages(_wrapper(name, "MultiEventTrigger", count=10, max_events=0)))
    assert (pages, error) == ([], None)


@pytest.mark.parametrize(
    ("state", "error_type"), [("success", None), ("skipped", None), ("failed", WrappedTaskFailedError)]
)
def test_wrapper_task_end_event_ends_the_stream(state, error_type):
    name = f"end-{uuid.uuid4().hex}"
    pages, error = asyncio.run(_pages(_wrapper(name, "EndTaskTrigger", state=state)))
    assert [p.payload for p in pages] == [
        {"before": True},
        {"task_instance_state": state, "xcoms": {"answer": 42, "name": name}},
    ]
    assert (type(error) if error else None) is error_type
    assert samples.CLEANUPS[name] == 1


def test_wrapper_timeout_bounds_a_trigger_that_never_returns():
    name = f"forever-{uuid.uuid4().hex}"
    started = time.monotonic()
    # without the wrapper's timeout this would never return: the outer bound turns a hang into a failure
    pages, error = asyncio.run(
        asyncio.wait_for(_pages(_wrapper(name, "ForeverTrigger", before=2, timeout=0.5)), 60)
    )
    assert [p.payload for p in pages] == [{"n": 0}, {"n": 1}]
    assert isinstance(error, StreamTimeoutError)
    assert time.monotonic() - started >= 0.5  # it ran until its timeout
    assert samples.CLEANUPS[name] == 1

    pages, error = asyncio.run(_pages(_wrapper(name, "ForeverTrigger", timeout=0.3, timeout_is_error=False)))
    assert (pages, error) == ([], None)


def test_wrapper_passes_the_wrapped_error_on():
    name = f"broken-{uuid.uuid4().hex}"
    pages, error = asyncio.run(_pages(_wrapper(name, "MultiEventTrigger", count=5, fail_after=2)))
    assert len(pages) == 2 and isinstance(error, samples.PageFetchError)


def test_wrapper_on_real_datetime_trigger_payload_is_iso_text():
    from airflow.providers.standard.triggers.temporal import DateTimeTrigger

    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=300)
    wrapper = StreamingWrapperTrigger.wrap(DateTimeTrigger(moment=moment))
    pages, error = asyncio.run(_pages(wrapper))
    assert error is None
    assert [p.payload for p in pages] == [moment.isoformat()]


def test_wrapper_gives_the_wrapped_trigger_its_task_instance_and_forwards_on_kill():
    name = f"kill-{uuid.uuid4().hex}"
    wrapper = _wrapper(name, "ForeverTrigger")
    wrapper.task_instance = _ti()
    built = wrapper.build_wrapped()
    assert built.task_instance is wrapper.task_instance

    async def scenario() -> None:
        pages = wrapper.pages(None)
        task = asyncio.ensure_future(pages.__anext__())
        await asyncio.sleep(0.05)
        await wrapper.on_kill()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pages.aclose()

    asyncio.run(scenario())
    assert samples.KILLS[name] == 1
    assert samples.CLEANUPS[name] == 1


@pytest.mark.parametrize(
    "module",
    [
        "airflow_kafka_events.streams.descriptor",
        "airflow_kafka_events.kafka.partitioner",
        "airflow_kafka_events.streams.progress",
    ],
)
def test_stream_modules_import_no_airflow(module):
    import subprocess
    import sys

    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

from __future__ import annotations

import dataclasses
import math
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from airflow_kafka_events.envelopes.json_values import (
    json_from_text,
    json_to_text,
    payload_from_avro,
    payload_to_avro,
)
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    ProducerIdentity,
    SourceKind,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import EnvelopeDecodeError, EnvelopeEncodeError, ValidationError

pytestmark = pytest.mark.unit

UTC = timezone.utc
T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
ASSET = AssetRef(name="orders", uri="s3://bucket/orders")


# --------------------------------------------------------------------------- trigger envelope
def test_trigger_envelope_defaults() -> None:
    before = datetime.now(UTC)
    env = TriggerEventEnvelope("run-1", 0, False)
    assert env.payload is None
    assert env.attempt == 0
    assert env.producer == ProducerIdentity()
    assert env.resume_cursor is None
    assert env.error is None
    assert env.metadata == {}
    assert env.emitted_at.tzinfo is UTC
    assert before <= env.emitted_at <= datetime.now(UTC)


def test_trigger_envelope_is_frozen() -> None:
    env = TriggerEventEnvelope("run-1", 0, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.sequence_index = 3  # type: ignore[misc]


def test_emitted_at_is_normalised_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    env = TriggerEventEnvelope("r", 0, False, emitted_at=datetime(2024, 1, 1, 12, tzinfo=plus_two))
    assert env.emitted_at == datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert env.emitted_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"trigger_run_id": ""}, "trigger_run_id must not be empty"),
        ({"trigger_run_id": 5}, "trigger_run_id must be a str"),
        ({"sequence_index": -1}, "sequence_index must be between 0"),
        ({"sequence_index": 2**63}, "sequence_index must be between 0"),
        ({"sequence_index": True}, "sequence_index must be an int"),
        ({"sequence_index": 1.0}, "sequence_index must be an int"),
        ({"attempt": -1}, "attempt must be between 0"),
        ({"attempt": 2**31}, "attempt must be between 0"),
        ({"is_last": 1}, "is_last must be a bool"),
        ({"emitted_at": datetime(2024, 1, 1)}, "emitted_at must be timezone-aware"),
        ({"emitted_at": "2024-01-01"}, "emitted_at must be a datetime"),
        ({"producer": "me"}, "producer must be a ProducerIdentity"),
        ({"resume_cursor": 3}, "resume_cursor must be a str or None"),
        ({"error": "boom"}, "error must be a StreamError"),
        ({"error": StreamFailure("E", "m"), "is_last": False}, "is_last=True"),
        ({"metadata": {"a": 1}}, "metadata['a'] must be a str"),
        ({"metadata": {1: "a"}}, "metadata keys must be str"),
        ({"metadata": ["a"]}, "metadata must be a mapping"),
    ],
)
def test_trigger_envelope_validation(kwargs: dict, fragment: str) -> None:
    base = {"trigger_run_id": "r", "sequence_index": 0, "is_last": True}
    with pytest.raises(ValidationError, match="TriggerEventEnvelope") as info:
        TriggerEventEnvelope(**{**base, **kwargs})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [{"dag_id": 1}, {"run_id": b"x"}, {"task_id": 0}, {"map_index": "0"}, {"try_number": 2**31}],
)
def test_producer_identity_validation(kwargs: dict) -> None:
    with pytest.raises(ValidationError, match="ProducerIdentity"):
        ProducerIdentity(**kwargs)


def test_stream_error_validation_and_from_exception() -> None:
    with pytest.raises(ValidationError, match=r"StreamError\.type must not be empty"):
        StreamFailure("", "m")
    with pytest.raises(ValidationError, match=r"StreamError\.message"):
        StreamFailure("E", None)  # type: ignore[arg-type]
    assert StreamFailure.from_exception(ValueError("bad")) == StreamFailure("ValueError", "bad")
    assert (
        StreamFailure.from_exception(ValidationError("x")).type
        == "airflow_kafka_events.errors.ValidationError"
    )


def test_metadata_is_copied() -> None:
    source = {"a": "b"}
    env = TriggerEventEnvelope("r", 0, False, metadata=source)
    source["c"] = "d"
    assert env.metadata == {"a": "b"}


def test_bytes_like_payload_becomes_bytes() -> None:
    assert TriggerEventEnvelope("r", 0, False, payload=bytearray(b"ab")).payload == b"ab"
    assert type(TriggerEventEnvelope("r", 0, False, payload=memoryview(b"ab")).payload) is bytes


def test_trigger_to_avro_and_back_all_fields() -> None:
    env = TriggerEventEnvelope(
        trigger_run_id="run-42",
        sequence_index=7,
        is_last=True,
        payload={"rows": [1, 2.5, None], "ok": True},
        attempt=3,
        emitted_at=T0,
        producer=ProducerIdentity("dag", "manual__1", "task", 4, 2),
        resume_cursor="offset:99",
        error=StreamFailure("TimeoutError", "no data"),
        metadata={"trace": "abc"},
    )
    record = env.to_avro()
    assert record == {
        "trigger_run_id": "run-42",
        "attempt": 3,
        "sequence_index": 7,
        "is_last": True,
        "payload": {"json": '{"rows":[1,2.5,null],"ok":true}'},
        "emitted_at": T0,
        "producer": {
            "dag_id": "dag",
            "run_id": "manual__1",
            "task_id": "task",
            "map_index": 4,
            "try_number": 2,
        },
        "resume_cursor": "offset:99",
        "error": {"type": "TimeoutError", "message": "no data"},
        "metadata": {"trace": "abc"},
    }
    assert TriggerEventEnvelope.from_avro(record) == env


def test_trigger_from_avro_accepts_raw_micros_and_missing_defaults() -> None:
    micros = int((T0 - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    env = TriggerEventEnvelope.from_avro(
        {"trigger_run_id": "r", "sequence_index": 1, "is_last": False, "emitted_at": micros, "producer": None}
    )
    assert env.emitted_at == T0
    assert env.attempt == 0 and env.metadata == {} and env.payload is None


# --------------------------------------------------------------------------- payload / JSON text
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (2**100, str(2**100)),
        (-(2**70), str(-(2**70))),
        (1.0, "1.0"),
        (0.1, "0.1"),
        (-0.0, "-0.0"),
        (1e300, "1e+300"),
        ("é😀", '"é😀"'),
        (None, "null"),
        (True, "true"),
        ([], "[]"),
        ({}, "{}"),
        ((1, (2,)), "[1,[2]]"),
        ({"b": 1, "a": [None]}, '{"b":1,"a":[null]}'),
        ({"1": 2, "true": None, "-0.5": [{"null": 1}]}, '{"1":2,"true":null,"-0.5":[{"null":1}]}'),
    ],
)
def test_json_to_text(value: object, text: str) -> None:
    assert json_to_text(value) == text


def test_json_text_round_trip_keeps_types() -> None:
    value = {"int": 1, "float": 1.0, "bool": True, "big": 2**64 + 1, "nested": [{"x": [[]]}]}
    back = json_from_text(json_to_text(value))
    assert back == value
    assert type(back["int"]) is int and type(back["float"]) is float and type(back["bool"]) is bool


def test_lone_surrogates_round_trip_through_escapes() -> None:
    value = {"\ud800": "x\udfff"}
    text = json_to_text(value)
    text.encode("utf-8")  # valid UTF-8 for the Avro string
    assert json_from_text(text) == value


class _Thing:
    pass


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({1, 2}, "'set'"),
        (_Thing(), "'_Thing'"),
        (Decimal("1.5"), "'Decimal'"),
        (b"x", "'bytes'"),  # bytes only as the whole payload
        (datetime(2024, 1, 1, tzinfo=UTC), "'datetime'"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        ({"a": [1, {"b": -math.inf}]}, "$['a'][1]['b']"),
        ({1: "a"}, "key of type 'int'"),
        ({True: "a"}, "key of type 'bool'"),
        ({None: "a"}, "key of type 'NoneType'"),
        ({1.5: "a"}, "key of type 'float' (1.5)"),
        ({"a": [{"b": {-2: 1}}]}, "$['a'][0]['b'] has a key of type 'int' (-2)"),
        ({"a": 1, 2: float("nan")}, "$ has a key of type 'int' (2)"),
        ({("a",): 1}, "key of type 'tuple'"),
        ({"a": frozenset()}, "'frozenset'"),
    ],
)
def test_json_to_text_rejects_non_json(value: object, fragment: str) -> None:
    with pytest.raises(EnvelopeEncodeError) as info:
        json_to_text([value] if isinstance(value, bytes) else value)
    assert fragment in str(info.value)


def test_json_to_text_rejects_cycles_and_deep_nesting() -> None:
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(EnvelopeEncodeError, match="circular"):
        json_to_text(cyclic)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(EnvelopeEncodeError, match="nested too deeply"):
        json_to_text(deep)


def test_shared_but_acyclic_references_are_fine() -> None:
    shared = [1]
    assert json_to_text({"a": shared, "b": shared}) == '{"a":[1],"b":[1]}'


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "{", "", "[1,]", "'a'"])
def test_json_from_text_is_strict(text: str) -> None:
    with pytest.raises(EnvelopeDecodeError):
        json_from_text(text)


def test_payload_avro_union_values() -> None:
    assert payload_to_avro(None) is None
    assert payload_to_avro(b"\x00\xff") == b"\x00\xff"
    assert payload_to_avro(bytearray(b"a")) == b"a"
    assert payload_to_avro("") == {"json": '""'}
    assert payload_to_avro([]) == {"json": "[]"}
    assert payload_from_avro(None) is None
    assert payload_from_avro(b"a") == b"a"
    assert payload_from_avro({"json": '""'}) == ""
    with pytest.raises(EnvelopeDecodeError):
        payload_from_avro(3)
    with pytest.raises(EnvelopeEncodeError, match="'set'"):
        TriggerEventEnvelope("r", 0, False, payload={1}).to_avro()


# --------------------------------------------------------------------------- asset envelope
def test_asset_envelope_defaults() -> None:
    env = AssetEventEnvelope(ASSET)
    assert uuid.UUID(env.event_id).version == 4
    assert env.source == EventSource(SourceKind.EXTERNAL)
    assert env.extra == {} and env.causation == () and env.signature is None
    assert env.partition_key is None and env.partition_date is None and env.idempotency_key is None
    assert env.emitted_at.tzinfo is UTC
    assert AssetEventEnvelope(ASSET).event_id != env.event_id


def test_asset_envelope_normalisation() -> None:
    env = AssetEventEnvelope(
        ASSET,
        causation=["a", "b"],
        signature=bytearray(b"sig"),
        partition_key="2024-01-01",
        partition_date=datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
    )
    assert env.causation == ("a", "b")
    assert type(env.signature) is bytes
    assert env.partition_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert env.partition_date.tzinfo is UTC


def test_event_source_accepts_kind_values() -> None:
    assert EventSource("task").kind is SourceKind.TASK
    assert SourceKind("dag_callback") is SourceKind.DAG_CALLBACK
    with pytest.raises(ValidationError, match=r"EventSource\.kind must be one of task, dag_callback"):
        EventSource("scheduler")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"EventSource\.map_index"):
        EventSource(SourceKind.TASK, map_index="1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"asset": "orders"}, "asset must be an AssetRef"),
        ({"event_id": ""}, "event_id must not be empty"),
        ({"partition_date": T0}, "partition_date requires partition_key"),
        (
            {"partition_key": "k", "partition_date": datetime(2024, 1, 1)},
            "partition_date must be timezone-aware",
        ),
        ({"partition_key": 5}, "partition_key must be a str"),
        ({"extra": [1]}, "extra must be a mapping"),
        ({"extra": {1: 1}}, "extra keys must be str"),
        ({"idempotency_key": 1}, "idempotency_key must be a str"),
        ({"source": "task"}, "source must be an EventSource"),
        ({"emitted_at": datetime(2024, 1, 1)}, "emitted_at must be timezone-aware"),
        ({"causation": "abc"}, "causation must be a sequence"),
        ({"causation": ["a", ""]}, "causation[1] must not be empty"),
        ({"causation": [1]}, "causation[0] must be a str"),
        ({"signature": "sig"}, "signature must be bytes"),
    ],
)
def test_asset_envelope_validation(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValidationError, match="AssetEventEnvelope") as info:
        AssetEventEnvelope(**{"asset": ASSET, **kwargs})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "kwargs", [{"name": "", "uri": "x"}, {"name": "x", "uri": ""}, {"name": 1, "uri": "x"}]
)
def test_asset_ref_validation(kwargs: dict) -> None:
    with pytest.raises(ValidationError, match="AssetRef"):
        AssetRef(**kwargs)


def test_asset_to_avro_and_back_all_fields() -> None:
    env = AssetEventEnvelope(
        asset=ASSET,
        event_id="5f0c3c36-8d52-4c8e-9d7a-0d1e4b1c2a3f",
        partition_key="2024-05-06",
        partition_date=T0,
        extra={"rows": 10, "schema": {"cols": ["a", "b"]}, "ratio": 0.5, "none": None},
        idempotency_key="orders-2024-05-06",
        source=EventSource(SourceKind.TASK, "dag", "run", "task", -1, 1, "etl"),
        emitted_at=T0,
        causation=("e1", "e2"),
        signature=b"\x01\x02",
    )
    record = env.to_avro()
    assert record["extra"] == {
        "rows": "10",
        "schema": '{"cols":["a","b"]}',
        "ratio": "0.5",
        "none": "null",
    }
    assert record["source"]["kind"] == "task"
    assert record["causation"] == ["e1", "e2"]
    assert AssetEventEnvelope.from_avro(record) == env


def test_asset_extra_with_non_json_value_names_key_and_type() -> None:
    env = AssetEventEnvelope(ASSET, extra={"when": datetime(2024, 1, 1, tzinfo=UTC)})
    with pytest.raises(EnvelopeEncodeError, match=r"extra\['when'\].*'datetime'"):
        env.to_avro()

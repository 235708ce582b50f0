from __future__ import annotations

import functools
from datetime import datetime, timezone
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kafka_events.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC, EnvelopeCodec, frame_confluent
from airflow_kafka_events.envelopes import AssetEventEnvelope, AssetRef, TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError

pytestmark = pytest.mark.unit

MODEST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UTC = timezone.utc

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**300), max_value=2**300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(), children, max_size=6),
    max_leaves=30,
)
timestamps = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999), timezones=st.just(UTC)
)


def identical(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 vs 1.0 and True vs 1 differ; -0.0 vs 0.0 too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    return bool(a == b)


def test_identical_helper() -> None:
    assert identical({"a": [1, 2.0]}, {"a": [1, 2.0]})
    assert not identical(1, 1.0)
    assert not identical(True, 1)
    assert not identical(0.0, -0.0)
    assert not identical({"a": 1, "b": 2}, {"b": 2, "a": 1})


@MODEST
@given(value=json_values, index=st.integers(min_value=0, max_value=2**63 - 1), emitted_at=timestamps)
def test_any_json_payload_round_trips_exactly(value: Any, index: int, emitted_at: datetime) -> None:
    envelope = TriggerEventEnvelope("run", index, False, payload=value, emitted_at=emitted_at)
    decoded = TRIGGER_EVENT_CODEC.decode(TRIGGER_EVENT_CODEC.encode(envelope))
    assert identical(decoded.payload, value)
    assert decoded.payload is not None or value is None
    assert decoded.sequence_index == index
    assert decoded.emitted_at == emitted_at


@MODEST
@given(payload=st.binary(max_size=512))
def test_any_bytes_payload_round_trips(payload: bytes) -> None:
    decoded = TRIGGER_EVENT_CODEC.decode(
        TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("run", 0, True, payload=payload))
    )
    assert type(decoded.payload) is bytes and decoded.payload == payload


@MODEST
@given(
    extra=st.dictionaries(st.text(), json_values, max_size=6), metadata=st.dictionaries(st.text(), st.text())
)
def test_any_json_object_extra_round_trips_exactly(extra: dict[str, Any], metadata: dict[str, str]) -> None:
    envelope = AssetEventEnvelope(AssetRef("a", "s3://a"), extra=extra)
    decoded = ASSET_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(envelope))
    assert identical(decoded.extra, extra)
    trigger = TriggerEventEnvelope("run", 0, False, metadata=metadata)
    assert TRIGGER_EVENT_CODEC.decode(TRIGGER_EVENT_CODEC.encode(trigger)).metadata == metadata


# --------------------------------------------------------------------------- decoding never crashes
@functools.cache
def _registry_codec() -> tuple[EnvelopeCodec[TriggerEventEnvelope], int]:
    codec = EnvelopeCodec(
        TriggerEventEnvelope, registry_client=SchemaRegistryClient.new_client({"url": "mock://properties"})
    )
    data = codec.encode(TriggerEventEnvelope("r", 0, False), topic="t")
    return codec, int.from_bytes(data[1:5], "big")


def _decode_only_typed_errors(codec: EnvelopeCodec[Any], data: bytes) -> None:
    try:
        codec.decode(data)
    except EnvelopeDecodeError as exc:
        assert str(exc)
    # anything else propagates and fails the test


@MODEST
@given(data=st.binary(max_size=300))
def test_random_bytes_only_raise_decode_errors(data: bytes) -> None:
    _decode_only_typed_errors(TRIGGER_EVENT_CODEC, data)
    _decode_only_typed_errors(ASSET_EVENT_CODEC, data)
    _decode_only_typed_errors(_registry_codec()[0], data)


@MODEST
@given(body=st.binary(max_size=300))
def test_random_bodies_behind_valid_headers_only_raise_decode_errors(body: bytes) -> None:
    for codec in (TRIGGER_EVENT_CODEC, ASSET_EVENT_CODEC):
        _decode_only_typed_errors(codec, b"\xc3\x01" + codec.fingerprint + body)
    registry_codec, schema_id = _registry_codec()
    _decode_only_typed_errors(registry_codec, frame_confluent(schema_id, body))


@MODEST
@given(
    value=json_values,
    data=st.data(),
)
def test_mutated_messages_only_raise_decode_errors(value: Any, data: st.DataObject) -> None:
    message = bytearray(TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("r", 1, False, payload=value)))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=2, max_value=len(message) - 1))
        message[position] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(message)))
    _decode_only_typed_errors(TRIGGER_EVENT_CODEC, bytes(message[:cut]))
    _decode_only_typed_errors(TRIGGER_EVENT_CODEC, bytes(message))

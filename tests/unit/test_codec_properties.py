from __future__ import annotations

import enum
import functools
import json
import math
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kafka_events.envelopes.codec import (
    ASSET_EVENT_CODEC,
    TRIGGER_EVENT_CODEC,
    AttemptEncoder,
    EnvelopeCodec,
)
from airflow_kafka_events.envelopes.framing import frame_confluent
from airflow_kafka_events.envelopes.json_values import json_from_text, json_to_text
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    ProducerIdentity,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import EnvelopeDecodeError, EnvelopeEncodeError

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


# --------------------------------------------------------------------------- fast paths vs references
# The walk and json calls the codec used before its fast paths, kept verbatim as the reference:
# the fast paths must accept exactly what these accept, write the same text, and raise the same
# error with the same message otherwise.
_HINT = "None, bool, int, float (finite), str, list, tuple or dict with str keys"


def _reference_check(value: Any, path: str, what: str, active: set[int]) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EnvelopeEncodeError(
                f"{what} value at {path} is {value!r}: strict JSON has no NaN or Infinity"
            )
        return
    if isinstance(value, (list, tuple, dict)):
        marker = id(value)
        if marker in active:
            raise EnvelopeEncodeError(f"{what} value at {path} contains itself (circular reference)")
        active.add(marker)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise EnvelopeEncodeError(
                        f"{what} value at {path} has a key of type {type(key).__qualname__!r} ({key!r}): "
                        "JSON object keys must be str"
                    )
                _reference_check(item, f"{path}[{key!r}]", what, active)
        else:
            for index, item in enumerate(value):
                _reference_check(item, f"{path}[{index}]", what, active)
        active.discard(marker)
        return
    raise EnvelopeEncodeError(
        f"{what} value at {path} has type {type(value).__qualname__!r}, which is not JSON; "
        f"use {_HINT}, or bytes for a raw payload"
    )


def reference_json_to_text(value: Any, *, what: str = "payload") -> str:
    try:
        _reference_check(value, "$", what, set())
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except EnvelopeEncodeError:
        raise
    except RecursionError as exc:
        raise EnvelopeEncodeError(f"{what} value is nested too deeply to encode") from exc
    except (TypeError, ValueError) as exc:
        raise EnvelopeEncodeError(f"{what} value cannot be written as JSON: {exc}") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def reference_json_from_text(text: str, *, what: str = "payload") -> Any:
    try:
        return json.loads(text, parse_constant=_reject)
    except RecursionError as exc:
        raise EnvelopeDecodeError(f"{what} JSON text is nested too deeply to decode") from exc
    except ValueError as exc:
        raise EnvelopeDecodeError(f"{what} is not valid strict JSON text: {exc}") from exc


def outcome(func: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", func(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def outcome_identical(func: Any, *args: Any) -> Any:
    """Like outcome(), checked with identical() instead of == for the value."""
    kind, value = outcome(func, *args)
    return _Identical(value) if kind == "ok" else (kind, value)


class _Identical:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and other[0] == "ok" and identical(other[1], self.value)

    __hash__ = None  # type: ignore[assignment]


class Colour(enum.Enum):
    RED = 1


class Size(enum.IntEnum):
    BIG = 7


class Name(str, enum.Enum):
    ADA = "ada"


class MyInt(int):
    pass


class MyStr(str):
    pass


surrogates = st.sampled_from(["\ud800", "x\udfff", "\udbff\udc00"])
key_like = st.sampled_from(["1", "-2.5", "1e+300", "true", "null", "é", "2024-01-01", "01", "1e5", "-0"])
wild_text = st.text(max_size=8) | surrogates | key_like
wild_keys = (
    wild_text
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.booleans()
    | st.none()
    | st.sampled_from([Size.BIG, Name.ADA, MyInt(3), MyStr("k"), ("t",), Colour.RED])
)
wild_scalars = (
    json_scalars
    | st.floats()  # NaN and infinities
    | wild_text
    | st.integers(min_value=2**63, max_value=2**70)
    | st.sampled_from([Size.BIG, Name.ADA, MyInt(5), MyStr("s"), Colour.RED, b"x", {1}, Decimal("1.5")])
)
wild_values = st.recursive(
    wild_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(wild_keys, children, max_size=4)
    ),
    max_leaves=20,
)


@MODEST
@given(value=wild_values)
def test_json_to_text_matches_the_reference_walk(value: Any) -> None:
    assert outcome(json_to_text, value) == outcome(reference_json_to_text, value)
    extra = {"k": value}
    ours = outcome(functools.partial(json_to_text, what="extra"), extra)
    assert ours == outcome(functools.partial(reference_json_to_text, what="extra"), extra)


@MODEST
@given(value=json_values)
def test_json_to_text_matches_the_reference_on_json(value: Any) -> None:
    assert json_to_text(value) == reference_json_to_text(value)


def test_json_to_text_matches_the_reference_on_cycles_depth_and_huge_ints() -> None:
    cyclic: dict[str, Any] = {"a": []}
    cyclic["a"].append(cyclic)
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    for value in (cyclic, deep, [10**5000], {"x": [1, {2: 3}]}, {"1": 1}, [{"true": 1, "b": {None: 2}}]):
        assert outcome(json_to_text, value) == outcome(reference_json_to_text, value)
    # the fast path still works after refusing a cycle (its circular-check state is reset)
    assert json_to_text({"a": [1], "b": [1]}) == '{"a":[1],"b":[1]}'


json_text_samples = (
    wild_values.map(lambda v: json.dumps(v, default=repr, skipkeys=True, ensure_ascii=False))
    | wild_values.map(lambda v: json.dumps(v, default=repr, skipkeys=True, indent=1))
    | st.text(alphabet=' \t\n\r\x0b\x0c\ufeff{}[],:"\\/0123456789.eE+-trufalsnNIiy\ud800u', max_size=40)
    | st.from_regex(r"\A-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,4})?\Z")
)


@MODEST
@given(text=json_text_samples, data=st.data())
def test_json_from_text_matches_the_reference(text: str, data: st.DataObject) -> None:
    assert outcome(json_from_text, text) == outcome_identical(reference_json_from_text, text)
    if text:
        cut = data.draw(st.integers(min_value=0, max_value=len(text)))
        char = data.draw(st.sampled_from(list(' ,]}"\\0e-\ud800')))
        mutated = text[:cut] + char + text[cut + 1 :]
        assert outcome(json_from_text, mutated) == outcome_identical(reference_json_from_text, mutated)


# --------------------------------------------------------------------------- Avro fast path
def _fastavro_codec() -> EnvelopeCodec[TriggerEventEnvelope]:
    codec = EnvelopeCodec(TriggerEventEnvelope)
    codec._fast = False  # the reference: fastavro both ways
    return codec


REFERENCE_CODEC = _fastavro_codec()
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
some_text = st.text(max_size=70)
envelope_payloads = st.none() | st.binary(max_size=200) | json_values
trigger_envelopes = st.builds(
    lambda run, index, last, payload, attempt, at, producer, cursor, error, metadata: TriggerEventEnvelope(
        run, index, last or error is not None, payload, attempt, at, producer, cursor, error, metadata
    ),
    st.text(min_size=1, max_size=70),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.booleans(),
    envelope_payloads,
    st.integers(min_value=0, max_value=2**31 - 1),
    timestamps,
    st.builds(
        ProducerIdentity,
        st.none() | some_text,
        st.none() | some_text,
        st.none() | some_text,
        st.none() | int32,
        st.none() | int32,
    ),
    st.none() | some_text,
    st.none() | st.builds(StreamFailure, st.text(min_size=1, max_size=20), some_text),
    st.dictionaries(some_text, some_text, max_size=4),
)


@MODEST
@given(envelope=trigger_envelopes)
def test_fast_avro_writer_writes_fastavros_bytes(envelope: TriggerEventEnvelope) -> None:
    fast = TRIGGER_EVENT_CODEC.encode(envelope)
    assert fast == REFERENCE_CODEC.encode(envelope)
    decoded = TRIGGER_EVENT_CODEC.decode(fast)
    assert decoded == REFERENCE_CODEC.decode(fast) == envelope
    assert identical(decoded.payload, REFERENCE_CODEC.decode(fast).payload)


@MODEST
@given(envelope=trigger_envelopes, data=st.data())
def test_fast_avro_reader_matches_fastavro_on_damaged_bodies(
    envelope: TriggerEventEnvelope, data: st.DataObject
) -> None:
    message = bytearray(TRIGGER_EVENT_CODEC.encode(envelope))
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        position = data.draw(st.integers(min_value=10, max_value=len(message) - 1))
        message[position] = data.draw(st.sampled_from([0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF]))
    cut = data.draw(st.integers(min_value=10, max_value=len(message) + 2))
    damaged = bytes(message[:cut]) + b"\x00" * max(0, cut - len(message))
    fast, reference = outcome(TRIGGER_EVENT_CODEC.decode, damaged), outcome(REFERENCE_CODEC.decode, damaged)
    assert fast[0] == reference[0] and fast[1] == reference[1]
    if fast[0] == "ok":
        assert identical(fast[1].payload, reference[1].payload)


def test_fast_path_is_pinned_to_the_current_schema() -> None:
    from airflow_kafka_events.envelopes import codec, schemas

    # A new schema version turns the fast path off (fastavro alone) until it is written for it.
    assert codec._FAST_FINGERPRINT == schemas.schema_fingerprint(schemas.TRIGGER_EVENT_ENVELOPE)
    assert TRIGGER_EVENT_CODEC._fits_fast_path() and not ASSET_EVENT_CODEC._fits_fast_path()


# --------------------------------------------------------------------------- one attempt's encoder
def _attempt_encoder(envelope: TriggerEventEnvelope, codec: Any = TRIGGER_EVENT_CODEC, **kwargs: Any) -> Any:
    return AttemptEncoder(
        codec,
        trigger_run_id=envelope.trigger_run_id,
        attempt=envelope.attempt,
        producer=envelope.producer,
        metadata=envelope.metadata,
        **kwargs,
    )


def _encode_page(encoder: AttemptEncoder, envelope: TriggerEventEnvelope) -> bytes:
    return encoder.encode(
        envelope.sequence_index,
        payload=envelope.payload,
        resume_cursor=envelope.resume_cursor,
        is_last=envelope.is_last,
        error=envelope.error,
        emitted_at=envelope.emitted_at,
    )


@MODEST
@given(envelope=trigger_envelopes)
def test_an_attempt_encoder_writes_the_codecs_bytes(envelope: TriggerEventEnvelope) -> None:
    data = _encode_page(_attempt_encoder(envelope), envelope)
    assert data == TRIGGER_EVENT_CODEC.encode(envelope) == REFERENCE_CODEC.encode(envelope)


pages_of_an_attempt = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**63 - 1),
        envelope_payloads,
        st.none() | some_text,
        timestamps,
        st.none() | st.builds(StreamFailure, st.text(min_size=1, max_size=20), some_text),
    ),
    min_size=1,
    max_size=30,
)


@MODEST
@given(first=trigger_envelopes, pages=pages_of_an_attempt)
def test_an_attempt_encoder_writes_every_envelope_of_its_attempt_as_the_codec(
    first: TriggerEventEnvelope, pages: list[tuple[Any, ...]]
) -> None:
    encoder = _attempt_encoder(first)
    for index, payload, cursor, at, error in pages:
        envelope = replace(
            first,
            sequence_index=index,
            payload=payload,
            resume_cursor=cursor,
            emitted_at=at,
            is_last=error is not None,
            error=error,
        )
        assert _encode_page(encoder, envelope) == TRIGGER_EVENT_CODEC.encode(envelope)
        assert TRIGGER_EVENT_CODEC.decode(_encode_page(encoder, envelope)) == envelope


def test_an_attempt_encoder_stamps_the_time_of_the_encode() -> None:
    encoder = _attempt_encoder(TriggerEventEnvelope("run-1", 0, False))
    before = datetime.now(UTC)
    decoded = TRIGGER_EVENT_CODEC.decode(encoder.encode(3, payload={"a": 1}, resume_cursor="4"))
    after = datetime.now(UTC)
    assert before <= decoded.emitted_at <= after
    assert (decoded.sequence_index, decoded.payload, decoded.resume_cursor) == (3, {"a": 1}, "4")


def test_an_attempt_encoder_writes_the_registry_framing_of_the_codec() -> None:
    from tests.unit.test_codec import mock_registry

    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=mock_registry())
    envelope = TriggerEventEnvelope("run-1", 7, False, {"page": 7}, 2, resume_cursor="8", metadata={"a": "b"})
    data = _encode_page(_attempt_encoder(envelope, codec, topic="trigger-events"), envelope)
    assert data == codec.encode(envelope, topic="trigger-events")
    assert data[0] == 0 and codec.decode(data) == envelope


def test_an_attempt_encoder_without_the_fast_path_is_the_codecs_way() -> None:
    envelope = TriggerEventEnvelope("run-1", 7, False, {"page": 7}, resume_cursor="8")
    encoder = _attempt_encoder(envelope, REFERENCE_CODEC)
    assert _encode_page(encoder, envelope) == REFERENCE_CODEC.encode(envelope)


NAIVE = datetime(2026, 1, 1)


@pytest.mark.parametrize(
    ("fixed", "page"),
    [
        ({}, {"payload": float("nan")}),
        ({}, {"payload": {1: "a"}}),
        ({}, {"payload": {"a": {2.5: True}}}),
        ({}, {"payload": {"s"}}),
        ({}, {"resume_cursor": 5}),
        ({}, {"resume_cursor": "\ud800"}),
        ({}, {"payload": "\udfff"}),
        ({}, {"error": StreamFailure("E", "m")}),
        ({}, {"is_last": 1}),
        ({}, {"sequence_index": -1}),
        ({}, {"sequence_index": 2**63}),
        ({}, {"sequence_index": True}),
        ({}, {"emitted_at": NAIVE}),
        ({}, {"emitted_at": "2026-01-01T00:00:00+00:00"}),
        ({"trigger_run_id": ""}, {}),
        ({"trigger_run_id": "\ud800"}, {}),
        ({"attempt": -1}, {}),
        ({"metadata": {"k": 1}}, {}),
        ({"metadata": {"k": "\ud800"}}, {}),
        ({"producer": "dag"}, {}),
    ],
)
def test_an_attempt_encoder_refuses_or_writes_as_the_codec(
    fixed: dict[str, Any], page: dict[str, Any]
) -> None:
    fields: dict[str, Any] = {
        "trigger_run_id": "run-1",
        "attempt": 0,
        "producer": ProducerIdentity("d", "r", "t", -1, 1),
        "metadata": {"generation": "0"},
        **fixed,
    }
    values: dict[str, Any] = {
        "sequence_index": 3,
        "payload": {"page": 3},
        "resume_cursor": "4",
        "is_last": False,
        "error": None,
        "emitted_at": datetime(2026, 1, 1, tzinfo=UTC),
        **page,
    }
    encoder = AttemptEncoder(TRIGGER_EVENT_CODEC, **fields)  # never raises: the envelope does
    index = values.pop("sequence_index")

    def general() -> bytes:
        return TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope(sequence_index=index, **fields, **values))

    def attempt() -> bytes:
        return encoder.encode(index, **values)

    assert outcome(attempt) == outcome(general)


def test_an_attempt_encoder_builds_no_envelope_for_a_page_the_fast_path_takes() -> None:
    from unittest import mock

    envelope = TriggerEventEnvelope("run-1", 7, False, {"page": 7}, resume_cursor="8", metadata={"a": "b"})
    encoder = _attempt_encoder(envelope)
    with mock.patch.object(TriggerEventEnvelope, "__post_init__", side_effect=AssertionError("built")):
        data = _encode_page(encoder, envelope)
    assert data == TRIGGER_EVENT_CODEC.encode(envelope)

"""The stream decoder accepts exactly what the codec accepts, into equal envelopes, record after record."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.framing import frame_confluent
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError
from airflow_kafka_events.streams.consuming.decoder import READ_FINGERPRINT, StreamDecoder

pytestmark = pytest.mark.unit

MODEST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UTC = timezone.utc

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
some_text = st.text(max_size=20)
producers = st.builds(
    ProducerIdentity,
    st.none() | some_text,
    st.none() | some_text,
    st.none() | some_text,
    st.none() | int32,
    st.none() | int32,
)
envelopes = st.builds(
    lambda run, index, last, payload, attempt, at, producer, cursor, error, metadata: TriggerEventEnvelope(
        run, index, last or error is not None, payload, attempt, at, producer, cursor, error, metadata
    ),
    st.sampled_from(["run-a", "run-b", "é"]) | st.text(min_size=1, max_size=20),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.booleans(),
    st.none() | st.binary(max_size=50) | json_values,
    st.integers(min_value=0, max_value=2**31 - 1),
    st.datetimes(
        min_value=datetime(1, 1, 1),
        max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
        timezones=st.just(UTC),
    ),
    st.sampled_from([ProducerIdentity(), ProducerIdentity("d", "r", "t", 0, 1)]) | producers,
    st.none() | some_text,
    st.none() | st.builds(StreamFailure, st.text(min_size=1, max_size=10), some_text),
    st.dictionaries(some_text, some_text, max_size=3),
)


def outcome(func: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", func(data)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def same(decoder: StreamDecoder, data: bytes) -> None:
    """The decoder's result (or error) is the codec's, with the payload of the same types."""
    ours, codec = outcome(decoder.decode, data), outcome(TRIGGER_EVENT_CODEC.decode, data)
    assert ours == codec
    if ours[0] == "ok":
        assert repr(ours[1].payload) == repr(codec[1].payload)
        assert type(ours[1].metadata) is dict and ours[1].metadata is not codec[1].metadata


@MODEST
@given(stream=st.lists(envelopes, min_size=1, max_size=8))
def test_a_run_of_envelopes_decodes_like_the_codec(stream: list[TriggerEventEnvelope]) -> None:
    decoder = StreamDecoder(TRIGGER_EVENT_CODEC)
    for envelope in stream:
        data = TRIGGER_EVENT_CODEC.encode(envelope)
        same(decoder, data)
        assert decoder.decode(data) == envelope


@MODEST
@given(stream=st.lists(envelopes, min_size=1, max_size=4), data=st.data())
def test_damaged_records_between_good_ones_decode_like_the_codec(
    stream: list[TriggerEventEnvelope], data: st.DataObject
) -> None:
    decoder = StreamDecoder(TRIGGER_EVENT_CODEC)
    for envelope in stream:
        good = TRIGGER_EVENT_CODEC.encode(envelope)
        same(decoder, good)  # the shared bytes are now this record's
        message = bytearray(good)
        for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
            position = data.draw(st.integers(min_value=10, max_value=len(message) - 1))
            message[position] = data.draw(st.sampled_from([0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF]))
        cut = data.draw(st.integers(min_value=10, max_value=len(message) + 2))
        same(decoder, bytes(message[:cut]) + b"\x00" * max(0, cut - len(message)))


def test_the_shared_parts_are_not_taken_for_a_record_that_differs_there() -> None:
    decoder = StreamDecoder(TRIGGER_EVENT_CODEC)
    first = TriggerEventEnvelope("run", 0, False, {"a": 1}, producer=ProducerIdentity("d", "r", "t", 1, 1))
    other = TriggerEventEnvelope("run2", 1, True, None, producer=ProducerIdentity("d", "r", "t", 1, 2))
    assert decoder.decode(TRIGGER_EVENT_CODEC.encode(first)) == first
    assert decoder.decode(TRIGGER_EVENT_CODEC.encode(other)) == other
    again = decoder.decode(TRIGGER_EVENT_CODEC.encode(first))
    assert again == first and again.metadata == {}


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc3", b"\xc3\x01", b"\x00\x00\x00\x00\x07abc", b"not avro", b"\xc3\x01" + b"\x00" * 8 + b"\x02"],
)
def test_what_is_not_an_envelope_raises_the_codecs_error(data: bytes) -> None:
    decoder = StreamDecoder(TRIGGER_EVENT_CODEC)
    with pytest.raises(EnvelopeDecodeError):
        decoder.decode(data)
    same(decoder, data)


def test_a_payload_that_is_not_strict_json_raises_the_codecs_error() -> None:
    envelope = TriggerEventEnvelope("run", 0, False, {"a": 1})
    data = TRIGGER_EVENT_CODEC.encode(envelope).replace(b'{"a":1}', b'{"a":N}')
    decoder = StreamDecoder(TRIGGER_EVENT_CODEC)
    with pytest.raises(EnvelopeDecodeError, match="not valid strict JSON"):
        decoder.decode(data)
    same(decoder, data)


def test_another_codec_decodes_every_record() -> None:
    class Counting:
        calls = 0

        def decode(self, data: bytes) -> TriggerEventEnvelope:
            Counting.calls += 1
            return TRIGGER_EVENT_CODEC.decode(data)

    decoder = StreamDecoder(Counting())
    data = TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("run", 0, True))
    assert decoder.decode(data).is_last and Counting.calls == 1
    registry_framed = frame_confluent(7, data[10:])
    with pytest.raises(EnvelopeDecodeError):
        StreamDecoder(EnvelopeCodec(TriggerEventEnvelope)).decode(registry_framed)


def test_the_decoder_reads_the_current_schema_version() -> None:
    # A new schema version turns the decoder's own reading off (the codec decodes) until it reads it.
    assert schemas.schema_fingerprint(schemas.TRIGGER_EVENT_ENVELOPE) == READ_FINGERPRINT

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from typing import Any

import fastavro
import fastavro.schema
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.framing import (
    detect_framing,
    frame_confluent,
    frame_single_object,
    parse_confluent,
    parse_single_object,
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
from airflow_kafka_events.envelopes.registry import EnvelopeDeserializer, EnvelopeSerializer
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    EnvelopeEncodeError,
    EnvelopeSerializationError,
    TruncatedMessageError,
    UnknownFramingError,
    UnknownSchemaError,
)
from harness.airflow_free import run_without_airflow

pytestmark = pytest.mark.unit

UTC = timezone.utc
T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
FP = bytes(range(1, 9))  # a hand-made fingerprint


def full_trigger() -> TriggerEventEnvelope:
    return TriggerEventEnvelope(
        trigger_run_id="run-ü-1",
        sequence_index=2**40,
        is_last=True,
        payload={"text": "日本語", "big": 2**80, "f": 0.1, "nested": [[], {}, None, False]},
        attempt=7,
        emitted_at=T0,
        producer=ProducerIdentity("dag", "run", "task", 3, 2),
        resume_cursor="cursor-9",
        error=StreamFailure("RuntimeError", "upstream went away"),
        metadata={"k": "v", "ü": ""},
    )


def full_asset() -> AssetEventEnvelope:
    return AssetEventEnvelope(
        asset=AssetRef("orders", "s3://bucket/orders"),
        event_id="0b7e7dc4-4d22-4a8c-9d2a-3c64bd0e2e55",
        partition_key="2024-05-06",
        partition_date=T0,
        extra={"rows": 12, "cols": ["a", "b"], "meta": {"x": None, "y": 1.5}, "huge": -(2**99)},
        idempotency_key="orders:2024-05-06",
        source=EventSource(SourceKind.TASK_CALLBACK, "dag", "run", "task", -1, 1, "etl"),
        emitted_at=T0,
        causation=("c1", "c2", "c3"),
        signature=b"\x00\x01\xfe\xff",
    )


def mock_registry() -> Any:
    # confluent-kafka 2.16: new_client() returns the in-memory mock for mock:// URLs
    return SchemaRegistryClient.new_client({"url": "mock://unit-tests"})


# --------------------------------------------------------------------------- framing, exact bytes
def test_frame_single_object_exact_bytes() -> None:
    assert frame_single_object(FP, b"body") == b"\xc3\x01\x01\x02\x03\x04\x05\x06\x07\x08body"
    assert frame_single_object(FP, b"") == b"\xc3\x01" + FP


def test_parse_single_object_exact_bytes() -> None:
    fingerprint, body = parse_single_object(b"\xc3\x01" + FP + b"\x02a")
    assert fingerprint == FP and bytes(body) == b"\x02a"
    fingerprint, body = parse_single_object(b"\xc3\x01" + FP)
    assert fingerprint == FP and bytes(body) == b""


@pytest.mark.parametrize("length", range(10))
def test_parse_single_object_truncated_header(length: int) -> None:
    data = (b"\xc3\x01" + FP)[:length]
    with pytest.raises(TruncatedMessageError, match=f"is {length} bytes"):
        parse_single_object(data)


@pytest.mark.parametrize("data", [b"\x00\x01" + FP, b"\xc3\x02" + FP, b"\x00", b"\xc3\x00"])
def test_parse_single_object_wrong_magic(data: bytes) -> None:
    with pytest.raises(UnknownFramingError, match="c3 01"):
        parse_single_object(data)


def test_frame_single_object_rejects_bad_fingerprint() -> None:
    with pytest.raises(EnvelopeEncodeError, match="8 bytes"):
        frame_single_object(b"\x00" * 7, b"")


def test_frame_confluent_exact_bytes() -> None:
    assert frame_confluent(1, b"body") == b"\x00\x00\x00\x00\x01body"
    assert frame_confluent(0x01020304, b"") == b"\x00\x01\x02\x03\x04"
    assert frame_confluent(2**31 - 1, b"x") == b"\x00\x7f\xff\xff\xffx"


@pytest.mark.parametrize("schema_id", [-1, 2**31, True, 1.0, "1"])
def test_frame_confluent_rejects_bad_ids(schema_id: Any) -> None:
    with pytest.raises(EnvelopeEncodeError, match="schema registry id"):
        frame_confluent(schema_id, b"")


def test_parse_confluent_exact_bytes() -> None:
    assert parse_confluent(b"\x00\x00\x00\x01\x00abc") == (256, b"abc")
    assert parse_confluent(b"\x00\x01\x02\x03\x04") == (0x01020304, b"")


@pytest.mark.parametrize("length", range(5))
def test_parse_confluent_truncated_header(length: int) -> None:
    with pytest.raises(TruncatedMessageError):
        parse_confluent(b"\x00\x00\x00\x00\x07"[:length])


@pytest.mark.parametrize("data", [b"\x01\x00\x00\x00\x01", b"\xc3\x01\x00\x00\x00"])
def test_parse_confluent_wrong_magic(data: bytes) -> None:
    with pytest.raises(UnknownFramingError):
        parse_confluent(data)


@pytest.mark.parametrize(
    ("data", "framing"),
    [(b"\xc3\x01", "single-object"), (b"\xc3\x01" + FP + b"x", "single-object"), (b"\x00", "confluent")],
)
def test_detect_framing(data: bytes, framing: str) -> None:
    assert detect_framing(data) == framing


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", TruncatedMessageError),
        (b"\xc3", TruncatedMessageError),
        (b"\xc3\x02", UnknownFramingError),
        (b"\x01\x00\x00\x00\x01", UnknownFramingError),  # registry wire format v1 (GUIDs): not supported
        (b"{", UnknownFramingError),
        (b"\xff", UnknownFramingError),
    ],
)
def test_detect_framing_errors(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        detect_framing(data)


# --------------------------------------------------------------------------- fingerprints
def _crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) exactly as the Avro specification gives it."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_fingerprint_known_vector_for_int_schema() -> None:
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema("int"))
    assert canonical == '"int"'
    assert _crc64_avro(canonical.encode()) == 0x7275D51A3F395C8F
    # fastavro's hex is the little-endian byte order used on the wire
    assert fastavro.schema.fingerprint(canonical, "CRC-64-AVRO") == "8f5c393f1ad57572"


@pytest.mark.parametrize("name", [schemas.TRIGGER_EVENT_ENVELOPE, schemas.ASSET_EVENT_ENVELOPE])
def test_schema_fingerprints_match_spec_and_fastavro(name: str) -> None:
    for version in schemas.schema_versions(name):
        canonical = schemas.canonical_form(name, version)
        expected = _crc64_avro(canonical.encode()).to_bytes(8, "little")
        assert schemas.schema_fingerprint(name, version) == expected
        assert expected.hex() == fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")


def test_encoded_message_header_is_magic_plus_current_fingerprint() -> None:
    data = TRIGGER_EVENT_CODEC.encode(full_trigger())
    canonical = fastavro.schema.to_parsing_canonical_form(schemas.load_schema(schemas.TRIGGER_EVENT_ENVELOPE))
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
    assert data[2:10] == TRIGGER_EVENT_CODEC.fingerprint


# --------------------------------------------------------------------------- schemas package
def test_schemas_package_api() -> None:
    assert set(schemas.schema_names()) >= {"trigger_event_envelope", "asset_event_envelope"}
    for name in schemas.schema_names():
        versions = schemas.schema_versions(name)
        assert versions and versions == sorted(versions) and versions[0] >= 1
        assert schemas.current_version(name) == versions[-1]
        assert schemas.schema_path(name) == schemas.schema_path(name, versions[-1])
        for version in versions:
            path = schemas.schema_path(name, version)
            assert path.name == f"v{version}.avsc" and path.is_file()
            assert json.loads(path.read_text()) == schemas.raw_schema(name, version)
            raw = schemas.raw_schema(name, version)
            assert raw["namespace"] == "io.airflow_kafka_events" and raw["type"] == "record"
        assert schemas.load_schema(name) is schemas.load_schema(name, versions[-1])


def test_schemas_unknown_name_or_version() -> None:
    with pytest.raises(ConfigurationError, match="unknown envelope schema"):
        schemas.schema_versions("nope")
    with pytest.raises(ConfigurationError, match="no version 999"):
        schemas.load_schema(schemas.TRIGGER_EVENT_ENVELOPE, 999)


def test_codec_requires_an_envelope_type() -> None:
    with pytest.raises(ConfigurationError):
        EnvelopeCodec(dict)  # type: ignore[type-var]


# --------------------------------------------------------------------------- round trips
def test_singletons() -> None:
    assert TRIGGER_EVENT_CODEC.envelope_type is TriggerEventEnvelope
    assert TRIGGER_EVENT_CODEC.record_name == "io.airflow_kafka_events.TriggerEventEnvelope"
    assert ASSET_EVENT_CODEC.record_name == "io.airflow_kafka_events.AssetEventEnvelope"


@pytest.mark.parametrize(
    "envelope",
    [
        full_trigger(),
        TriggerEventEnvelope("r", 0, False),
        TriggerEventEnvelope("r", 1, False, payload=b"\x00\xff raw"),
        TriggerEventEnvelope("r", 1, False, payload=b""),
        TriggerEventEnvelope("r", 2, True, payload=None, error=StreamFailure("E", "")),
        TriggerEventEnvelope("r", 3, False, payload=""),
        TriggerEventEnvelope("r", 3, False, payload=0),
        TriggerEventEnvelope("r", 3, False, payload=[]),
        TriggerEventEnvelope("r", 3, False, payload={}),
        TriggerEventEnvelope("r", 3, False, payload=False),
        TriggerEventEnvelope("r", 3, False, emitted_at=datetime(1, 1, 1, tzinfo=UTC)),
        TriggerEventEnvelope(
            "r", 3, False, emitted_at=datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        ),
    ],
    ids=lambda e: repr(e.payload)[:20],
)
def test_trigger_round_trip(envelope: TriggerEventEnvelope) -> None:
    decoded = TRIGGER_EVENT_CODEC.decode(TRIGGER_EVENT_CODEC.encode(envelope))
    assert decoded == envelope
    assert type(decoded.payload) is type(envelope.payload)
    assert decoded.emitted_at.tzinfo is not None and decoded.emitted_at.utcoffset().total_seconds() == 0


def test_none_payload_round_trips_to_none_not_json_null() -> None:
    decoded = TRIGGER_EVENT_CODEC.decode(TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("r", 0, False)))
    assert decoded.payload is None


def test_tuples_become_lists() -> None:
    env = TriggerEventEnvelope("r", 0, False, payload={"t": (1, (2, 3))})
    assert TRIGGER_EVENT_CODEC.decode(TRIGGER_EVENT_CODEC.encode(env)).payload == {"t": [1, [2, 3]]}


@pytest.mark.parametrize(
    "envelope",
    [
        full_asset(),
        AssetEventEnvelope(AssetRef("a", "a")),
        AssetEventEnvelope(
            AssetRef("a", "a"), source=EventSource(SourceKind.DAG_CALLBACK, dag_id="d", run_id="r")
        ),
        AssetEventEnvelope(AssetRef("a", "a"), partition_key="p"),
        AssetEventEnvelope(AssetRef("a", "a"), extra={"": "", "e": [], "o": {}}),
    ],
)
def test_asset_round_trip(envelope: AssetEventEnvelope) -> None:
    assert ASSET_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(envelope)) == envelope


def test_causation_chain_round_trips() -> None:
    first = AssetEventEnvelope(AssetRef("raw", "s3://raw"))
    second = AssetEventEnvelope(AssetRef("clean", "s3://clean"), causation=(first.event_id,))
    third = AssetEventEnvelope(
        AssetRef("report", "s3://report"), causation=(*second.causation, second.event_id)
    )
    decoded = ASSET_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(third))
    assert decoded.causation == (first.event_id, second.event_id)


def test_encode_rejects_other_envelope_types_and_non_json_payloads() -> None:
    with pytest.raises(EnvelopeEncodeError, match="encodes TriggerEventEnvelope, got AssetEventEnvelope"):
        TRIGGER_EVENT_CODEC.encode(full_asset())  # type: ignore[arg-type]
    with pytest.raises(EnvelopeEncodeError, match="'set'"):
        TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("r", 0, False, payload={"s": {1}}))
    with pytest.raises(EnvelopeEncodeError, match="NaN"):
        TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("r", 0, False, payload=[float("nan")]))


def test_encode_wraps_avro_writer_failures() -> None:
    # a lone surrogate in an Avro string cannot be written as UTF-8
    with pytest.raises(EnvelopeEncodeError, match="cannot write TriggerEventEnvelope"):
        TRIGGER_EVENT_CODEC.encode(TriggerEventEnvelope("\ud800", 0, False))


# --------------------------------------------------------------------------- typed decode errors
def test_decode_unknown_magic() -> None:
    with pytest.raises(UnknownFramingError, match="unknown framing"):
        TRIGGER_EVENT_CODEC.decode(b'{"trigger_run_id": "r"}')


def test_decode_unknown_fingerprint() -> None:
    data = TRIGGER_EVENT_CODEC.encode(full_trigger())
    forged = data[:2] + b"\xde\xad\xbe\xef\x00\x00\x00\x00" + data[10:]
    with pytest.raises(UnknownSchemaError, match="deadbeef00000000"):
        TRIGGER_EVENT_CODEC.decode(forged)


def test_decode_other_envelope_type_is_unknown_schema() -> None:
    with pytest.raises(UnknownSchemaError):
        TRIGGER_EVENT_CODEC.decode(ASSET_EVENT_CODEC.encode(full_asset()))


def test_decode_registry_framing_without_registry() -> None:
    with pytest.raises(UnknownSchemaError, match="no schema registry client"):
        TRIGGER_EVENT_CODEC.decode(frame_confluent(5, b"\x02r"))


@pytest.mark.parametrize(
    ("codec", "envelope"), [(TRIGGER_EVENT_CODEC, full_trigger()), (ASSET_EVENT_CODEC, full_asset())]
)
def test_decode_every_truncation(codec: EnvelopeCodec[Any], envelope: Any) -> None:
    data = codec.encode(envelope)
    for length in range(len(data)):
        with pytest.raises(TruncatedMessageError):
            codec.decode(data[:length])


def test_decode_garbage_body() -> None:
    header = b"\xc3\x01" + TRIGGER_EVENT_CODEC.fingerprint
    # trigger_run_id "r", attempt 0, sequence_index 0, is_last true, then payload union branch 9 (none such)
    with pytest.raises(EnvelopeDecodeError) as info:
        TRIGGER_EVENT_CODEC.decode(header + b"\x02r\x00\x00\x01\x12" + b"\x00" * 20)
    assert info.value.__cause__ is not None
    # invalid UTF-8 in the first string
    with pytest.raises(EnvelopeDecodeError, match="not a valid TriggerEventEnvelope"):
        TRIGGER_EVENT_CODEC.decode(header + b"\x04\xff\xfe" + b"\x00" * 30)


def test_decode_trailing_bytes() -> None:
    data = TRIGGER_EVENT_CODEC.encode(full_trigger())
    with pytest.raises(EnvelopeDecodeError, match="3 unexpected bytes"):
        TRIGGER_EVENT_CODEC.decode(data + b"xyz")


def test_decode_invalid_json_payload_and_invalid_envelope() -> None:
    schema = schemas.load_schema(schemas.TRIGGER_EVENT_ENVELOPE)
    record = full_trigger().to_avro()

    def encode(rec: dict) -> bytes:
        import io

        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, rec)
        return frame_single_object(TRIGGER_EVENT_CODEC.fingerprint, buf.getvalue())

    with pytest.raises(EnvelopeDecodeError, match="payload is not valid strict JSON"):
        TRIGGER_EVENT_CODEC.decode(encode({**record, "payload": {"json": "{nope"}}))
    with pytest.raises(EnvelopeDecodeError, match="payload is not valid strict JSON"):
        TRIGGER_EVENT_CODEC.decode(encode({**record, "payload": {"json": "NaN"}}))
    # valid Avro, but a foreign producer wrote a negative sequence index
    with pytest.raises(
        EnvelopeDecodeError, match=r"not a valid TriggerEventEnvelope.*sequence_index"
    ) as info:
        TRIGGER_EVENT_CODEC.decode(encode({**record, "sequence_index": -5}))
    assert isinstance(info.value.__cause__, ValueError)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(EnvelopeDecodeError, match="expected bytes"):
        TRIGGER_EVENT_CODEC.decode("c3 01")  # type: ignore[arg-type]


def test_decode_accepts_bytes_like() -> None:
    data = TRIGGER_EVENT_CODEC.encode(full_trigger())
    assert TRIGGER_EVENT_CODEC.decode(bytearray(data)) == full_trigger()
    assert TRIGGER_EVENT_CODEC.decode(memoryview(data)) == full_trigger()  # type: ignore[arg-type]


def test_decode_errors_are_serialization_errors() -> None:
    from confluent_kafka.serialization import SerializationError

    with pytest.raises(SerializationError):
        TRIGGER_EVENT_CODEC.decode(b"\x07")


# --------------------------------------------------------------------------- schema registry
def test_registry_framing_with_mock_registry() -> None:
    registry = mock_registry()
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    data = codec.encode(full_trigger(), topic="trigger-events")
    registered = registry.get_latest_version("trigger-events-value")
    assert data[:5] == b"\x00" + registered.schema_id.to_bytes(4, "big")
    assert detect_framing(data) == "confluent"
    assert json.loads(registered.schema.schema_str) == schemas.raw_schema(schemas.TRIGGER_EVENT_ENVELOPE)
    assert codec.decode(data) == full_trigger()
    # a fresh codec on the same registry fetches the writer schema by id
    fresh = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    assert fresh.decode(data) == full_trigger()
    # single-object bytes still decode with a registry configured
    assert fresh.decode(TRIGGER_EVENT_CODEC.encode(full_trigger())) == full_trigger()


def test_registry_ids_differ_per_subject_and_asset_codec_works() -> None:
    registry = mock_registry()
    trig = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    asset = EnvelopeCodec(AssetEventEnvelope, registry_client=registry)
    t_id, _ = parse_confluent(trig.encode(full_trigger(), topic="t"))
    a_data = asset.encode(full_asset(), topic="a")
    a_id, _ = parse_confluent(a_data)
    assert t_id != a_id
    assert EnvelopeCodec(AssetEventEnvelope, registry_client=registry).decode(a_data) == full_asset()
    # trigger bytes read as an asset event: the writer schema is known but cannot be resolved
    with pytest.raises(EnvelopeDecodeError):
        EnvelopeCodec(AssetEventEnvelope, registry_client=registry).decode(
            trig.encode(full_trigger(), topic="t")
        )


def test_decode_without_fetch_never_asks_the_registry_and_fetch_writers_does_it_in_a_thread() -> None:
    import asyncio
    import threading

    from airflow_kafka_events.errors import SchemaRegistryUnavailableError

    registry = mock_registry()
    data = EnvelopeCodec(AssetEventEnvelope, registry_client=registry).encode(full_asset(), topic="a")
    schema_id, _ = parse_confluent(data)
    asked: list[str] = []

    class Watched:  # the registry, noting the thread of every fetch
        def get_schema(self, wanted: int) -> Any:
            asked.append(threading.current_thread().name)
            return registry.get_schema(wanted)

    reader = EnvelopeCodec(AssetEventEnvelope, registry_client=Watched())
    with pytest.raises(SchemaRegistryUnavailableError, match=f"registry id {schema_id} is not fetched yet"):
        reader.decode(data, fetch=False)
    assert asked == []

    async def fetch() -> str:
        await reader.fetch_writers([None, b"", TRIGGER_EVENT_CODEC.encode(full_trigger()), data, data])
        return threading.current_thread().name

    loop_thread = asyncio.run(fetch())
    assert len(asked) == 1 and asked[0] != loop_thread  # once per id, not on the loop's thread
    assert reader.decode(data, fetch=False) == full_asset()
    asyncio.run(fetch())
    assert len(asked) == 1  # fetched already
    # an unknown id: the fetch leaves the verdict to a decode that may ask the registry
    unknown = frame_confluent(4243, b"\x02r")
    asyncio.run(reader.fetch_writers([unknown]))
    with pytest.raises(SchemaRegistryUnavailableError):
        reader.decode(unknown, fetch=False)
    with pytest.raises(UnknownSchemaError, match="no schema with id 4243"):
        reader.decode(unknown)


def test_registry_unknown_schema_id() -> None:
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=mock_registry())
    with pytest.raises(UnknownSchemaError, match="no schema with id 4242"):
        codec.decode(frame_confluent(4242, b"\x02r"))


def test_registry_schema_that_is_not_avro() -> None:
    registry = mock_registry()
    schema_id = registry.register_schema("other-value", Schema('{"type": "object"}', schema_type="JSON"))
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    with pytest.raises(UnknownSchemaError, match="JSON schema, not Avro"):
        codec.decode(frame_confluent(schema_id, b"\x02r"))


def test_registry_needs_topic() -> None:
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=mock_registry())
    with pytest.raises(EnvelopeEncodeError, match="needs the topic"):
        codec.encode(full_trigger())


def test_registry_custom_subject_name_strategy() -> None:
    registry = mock_registry()
    codec = EnvelopeCodec(
        TriggerEventEnvelope, registry_client=registry, subject_name_strategy=record_subject_name_strategy
    )
    data = codec.encode(full_trigger(), topic="whatever")
    assert registry.get_subjects() == ["io.airflow_kafka_events.TriggerEventEnvelope"]
    assert codec.decode(data) == full_trigger()


class CountingRegistry:
    """Duck-typed registry: register_schema + get_schema, counting calls."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.schemas: dict[int, Schema] = {}
        self.register_calls = 0
        self.get_calls = 0

    def register_schema(self, subject: str, schema: Schema) -> int:
        self.register_calls += 1
        if self.fail:
            raise ConnectionError("registry unreachable")
        self.schemas[100] = schema
        return 100

    def get_schema(self, schema_id: int) -> Schema:
        self.get_calls += 1
        if self.fail:
            raise ConnectionError("registry unreachable")
        return self.schemas[schema_id]


def test_registry_lookups_are_cached() -> None:
    registry = CountingRegistry()
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    messages = [codec.encode(full_trigger(), topic="t") for _ in range(10)]
    assert registry.register_calls == 1
    reader = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    assert all(reader.decode(m) == full_trigger() for m in messages)
    assert registry.get_calls == 1
    # a duck-typed registry raising KeyError for an unknown id
    with pytest.raises(UnknownSchemaError):
        reader.decode(frame_confluent(7, b""))


def test_registry_failures_are_not_decode_errors() -> None:
    registry = CountingRegistry(fail=True)
    codec = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry)
    with pytest.raises(EnvelopeSerializationError, match="registry unreachable") as info:
        codec.encode(full_trigger(), topic="t")
    assert not isinstance(info.value, EnvelopeEncodeError)
    with pytest.raises(EnvelopeSerializationError, match="registry unreachable") as info:
        codec.decode(frame_confluent(1, b""))
    assert not isinstance(info.value, EnvelopeDecodeError)


def test_registry_lookup_instead_of_register() -> None:
    registry = mock_registry()
    lookup_only = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry, auto_register=False)
    with pytest.raises(EnvelopeSerializationError, match="could not look up"):
        lookup_only.encode(full_trigger(), topic="t")
    registered = EnvelopeCodec(TriggerEventEnvelope, registry_client=registry).encode(
        full_trigger(), topic="t"
    )
    assert lookup_only.encode(full_trigger(), topic="t")[:5] == registered[:5]


# --------------------------------------------------------------------------- confluent serde
def test_serializer_and_deserializer() -> None:
    serializer = EnvelopeSerializer(TRIGGER_EVENT_CODEC)
    deserializer = EnvelopeDeserializer(TRIGGER_EVENT_CODEC)
    ctx = SerializationContext("t", MessageField.VALUE)
    assert serializer(None, ctx) is None
    assert deserializer(None, ctx) is None
    data = serializer(full_trigger(), ctx)
    assert data is not None and data[:2] == b"\xc3\x01"
    assert deserializer(data, ctx) == full_trigger()
    assert deserializer(serializer(full_trigger())) == full_trigger()


def test_serializer_passes_context_to_registry() -> None:
    registry = mock_registry()
    codec = EnvelopeCodec(AssetEventEnvelope, registry_client=registry)
    data = EnvelopeSerializer(codec)(full_asset(), SerializationContext("assets", MessageField.KEY))
    assert registry.get_subjects() == ["assets-key"]
    assert EnvelopeDeserializer(codec)(data) == full_asset()


# --------------------------------------------------------------------------- process-level checks
def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_imports_no_airflow_module() -> None:
    run_without_airflow(
        "import airflow_kafka_events.envelopes.codec, airflow_kafka_events.envelopes.model, "
        "airflow_kafka_events.envelopes.schemas"
    )


def test_schemas_are_parsed_once() -> None:
    out = _run(
        """
        from unittest import mock
        import fastavro
        with mock.patch.object(fastavro, "parse_schema", wraps=fastavro.parse_schema) as parse:
            from airflow_kafka_events.envelopes import schemas
            from airflow_kafka_events.envelopes.codec import EnvelopeCodec, TRIGGER_EVENT_CODEC
            from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
            assert parse.call_count == 0  # nothing parsed at import
            envelopes = [TriggerEventEnvelope("r", i, False, payload=i) for i in range(100)]
            data = [TRIGGER_EVENT_CODEC.encode(e) for e in envelopes]
            after_encode = parse.call_count
            for _ in range(3):
                codec = EnvelopeCodec(TriggerEventEnvelope)
                assert [codec.decode(d).payload for d in data] == list(range(100))
            print(after_encode, parse.call_count, len(schemas.schema_versions("trigger_event_envelope")))
        """
    )
    after_encode, after_decode, versions = map(int, out.split())
    assert after_encode == 1
    assert after_decode == versions

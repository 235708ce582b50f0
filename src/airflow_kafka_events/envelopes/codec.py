"""Avro encoding of envelopes, with two framings told apart by their leading bytes.

* **Avro single-object encoding** (no registry): ``C3 01`` + the 8-byte little-endian
  CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form + the Avro
  body.  The decoder looks the fingerprint up among every schema version kept in
  :mod:`airflow_kafka_events.envelopes.schemas` and resolves it against the current version.
* **Confluent Schema Registry wire format** (when a registry client is configured):
  ``00`` + the 4-byte big-endian schema id + the Avro body.  The writer schema is
  fetched from the registry by id (once per id).

Decoding failures raise :class:`~airflow_kafka_events.errors.EnvelopeDecodeError`
subclasses (truncated, unknown framing, unknown schema).  A schema registry that
cannot be reached raises the base
:class:`~airflow_kafka_events.errors.EnvelopeSerializationError`, so callers can tell a
broken message from a transient registry failure.

Schemas are parsed once per process, on first use.  This module imports no Airflow
module and needs ``confluent_kafka.schema_registry`` only when a registry is used.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import fastavro
import fastavro.schema
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, TriggerEventEnvelope
from airflow_kafka_events.envelopes.trigger_avro import FAST_FINGERPRINT as _FAST_FINGERPRINT
from airflow_kafka_events.envelopes.trigger_avro import read_trigger as _read_trigger
from airflow_kafka_events.envelopes.trigger_avro import write_trigger as _write_trigger
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    EnvelopeEncodeError,
    EnvelopeSerializationError,
    TruncatedMessageError,
    UnknownFramingError,
    UnknownSchemaError,
)

__all__ = [
    "ASSET_EVENT_CODEC",
    "CONFLUENT_HEADER_SIZE",
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_HEADER_SIZE",
    "SINGLE_OBJECT_MAGIC",
    "TRIGGER_EVENT_CODEC",
    "EnvelopeCodec",
    "EnvelopeDeserializer",
    "EnvelopeSerializer",
    "Framing",
    "asset_event_codec",
    "detect_framing",
    "frame_confluent",
    "frame_single_object",
    "parse_confluent",
    "parse_single_object",
    "topic_subject_name_strategy",
    "trigger_event_codec",
]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
FINGERPRINT_SIZE = 8
SINGLE_OBJECT_HEADER_SIZE = len(SINGLE_OBJECT_MAGIC) + FINGERPRINT_SIZE  # 10
CONFLUENT_MAGIC = 0x00
CONFLUENT_HEADER_SIZE = 5
_CONFLUENT_ID = struct.Struct(">I")
_MAX_SCHEMA_ID = 2**31 - 1

Framing = Literal["single-object", "confluent"]


# --------------------------------------------------------------------------- framing
def frame_single_object(fingerprint: bytes, body: bytes) -> bytes:
    """``C3 01`` + 8-byte fingerprint (little-endian CRC-64-AVRO) + body."""
    if len(fingerprint) != FINGERPRINT_SIZE:
        raise EnvelopeEncodeError(
            f"a single-object fingerprint is {FINGERPRINT_SIZE} bytes, got {len(fingerprint)}"
        )
    return b"".join((SINGLE_OBJECT_MAGIC, fingerprint, body))


def parse_single_object(data: bytes) -> tuple[bytes, bytes]:
    """Split single-object encoded bytes into (fingerprint, body)."""
    if len(data) < SINGLE_OBJECT_HEADER_SIZE:
        if bytes(data[:2]) != SINGLE_OBJECT_MAGIC[: len(data)]:
            raise UnknownFramingError(
                f"not Avro single-object encoding: leading bytes {bytes(data[:2]).hex(' ')} are not c3 01"
            )
        raise TruncatedMessageError(
            f"Avro single-object message is {len(data)} bytes, shorter than its "
            f"{SINGLE_OBJECT_HEADER_SIZE}-byte header (c3 01 + 8-byte fingerprint)"
        )
    if bytes(data[:2]) != SINGLE_OBJECT_MAGIC:
        raise UnknownFramingError(
            f"not Avro single-object encoding: leading bytes {bytes(data[:2]).hex(' ')} are not c3 01"
        )
    return bytes(data[2:SINGLE_OBJECT_HEADER_SIZE]), bytes(data[SINGLE_OBJECT_HEADER_SIZE:])


def frame_confluent(schema_id: int, body: bytes) -> bytes:
    """``00`` + 4-byte big-endian schema id + body (Confluent wire format)."""
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id <= _MAX_SCHEMA_ID:
        raise EnvelopeEncodeError(
            f"a schema registry id is an int from 0 to {_MAX_SCHEMA_ID}, got {schema_id!r}"
        )
    return b"".join((bytes((CONFLUENT_MAGIC,)), _CONFLUENT_ID.pack(schema_id), body))


def parse_confluent(data: bytes) -> tuple[int, bytes]:
    """Split Confluent wire-format bytes into (schema id, body)."""
    if not data:
        raise TruncatedMessageError("empty message: no schema registry header")
    if data[0] != CONFLUENT_MAGIC:
        raise UnknownFramingError(
            f"not the schema registry wire format: leading byte {data[0]:02x} is not {CONFLUENT_MAGIC:02x}"
        )
    if len(data) < CONFLUENT_HEADER_SIZE:
        raise TruncatedMessageError(
            f"schema registry message is {len(data)} bytes, shorter than its "
            f"{CONFLUENT_HEADER_SIZE}-byte header (00 + 4-byte schema id)"
        )
    (schema_id,) = _CONFLUENT_ID.unpack_from(data, 1)
    return schema_id, bytes(data[CONFLUENT_HEADER_SIZE:])


def detect_framing(data: bytes) -> Framing:
    """Which framing ``data`` uses, from its leading bytes."""
    if not data:
        raise TruncatedMessageError("empty message: no framing header")
    first = data[0]
    if first == SINGLE_OBJECT_MAGIC[0]:
        if len(data) < 2:
            raise TruncatedMessageError(
                "message is 1 byte (c3): too short for the single-object marker c3 01"
            )
        if data[1] == SINGLE_OBJECT_MAGIC[1]:
            return "single-object"
        raise UnknownFramingError(
            f"unknown framing: leading bytes c3 {data[1]:02x} are not the single-object marker c3 01"
        )
    if first == CONFLUENT_MAGIC:
        return "confluent"
    raise UnknownFramingError(
        f"unknown framing: leading byte {first:02x} is neither Avro single-object encoding (c3 01) "
        f"nor the schema registry wire format (00)"
    )


# --------------------------------------------------------------------------- subject names
def topic_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """TopicNameStrategy: ``<topic>-value`` (or ``<topic>-key`` for a key serializer)."""
    return f"{ctx.topic}-{ctx.field}"


SubjectNameStrategy = Callable[[SerializationContext, "str | None"], "str | None"]


# --------------------------------------------------------------------------- codec
class AvroEnvelope(Protocol):
    AVRO_SCHEMA_NAME: ClassVar[str]

    def to_avro(self) -> dict[str, Any]: ...

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Any: ...


E = TypeVar("E", bound=AvroEnvelope)


def _is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, LookupError) or getattr(exc, "http_status_code", None) == 404


class EnvelopeCodec(Generic[E]):
    """Encodes and decodes one envelope type.

    Without ``registry_client`` messages use Avro single-object encoding.  With one
    (a ``confluent_kafka.schema_registry.SchemaRegistryClient`` or any object with
    ``register_schema(subject, schema)`` and ``get_schema(schema_id)``) they use the
    registry wire format, the subject coming from ``subject_name_strategy(ctx,
    record_name)`` (default ``<topic>-value``; confluent's strategies fit).  With
    ``auto_register=False`` the schema is looked up (``lookup_schema``) instead of
    registered.  Decoding accepts both framings either way.
    """

    def __init__(
        self,
        envelope_type: type[E],
        *,
        registry_client: Any | None = None,
        subject_name_strategy: SubjectNameStrategy | None = None,
        auto_register: bool = True,
    ) -> None:
        name = getattr(envelope_type, "AVRO_SCHEMA_NAME", None)
        if not isinstance(name, str):
            raise ConfigurationError(f"{envelope_type!r} is not an envelope type (no AVRO_SCHEMA_NAME)")
        self._type = envelope_type
        self._name = name
        self._registry = registry_client
        self._strategy: SubjectNameStrategy = subject_name_strategy or topic_subject_name_strategy
        self._auto_register = auto_register
        self._by_fingerprint: dict[bytes, dict[str, Any]] | None = None
        self._subject_ids: dict[str, int] = {}
        self._registry_writers: dict[int, dict[str, Any]] = {}
        self._fast: bool | None = None  # the fast path fits (decided on first use)

    def __repr__(self) -> str:
        registry = "" if self._registry is None else f", registry_client={self._registry!r}"
        return f"EnvelopeCodec({self._type.__name__}{registry})"

    # ------------------------------------------------------------------ schema facts
    @property
    def envelope_type(self) -> type[E]:
        return self._type

    @property
    def schema_name(self) -> str:
        return self._name

    @property
    def registry_client(self) -> Any | None:
        return self._registry

    @property
    def schema(self) -> dict[str, Any]:
        """The current (reader and writer) schema, parsed."""
        return schemas.load_schema(self._name)

    @property
    def fingerprint(self) -> bytes:
        """Single-object fingerprint of the current schema."""
        return schemas.schema_fingerprint(self._name)

    @property
    def record_name(self) -> str:
        """Full name of the Avro record, e.g. ``io.airflow_kafka_events.TriggerEventEnvelope``."""
        return str(self.schema["name"])

    # ------------------------------------------------------------------ encode
    def encode(
        self, envelope: E, *, topic: str | None = None, ctx: SerializationContext | None = None
    ) -> bytes:
        """Avro bytes of ``envelope``; ``topic`` (or ``ctx``) is needed only with a registry."""
        if ctx is None and topic is not None:
            ctx = SerializationContext(topic, MessageField.VALUE)
        if not isinstance(envelope, self._type):
            raise EnvelopeEncodeError(
                f"{self!r} encodes {self._type.__name__}, got {type(envelope).__qualname__}"
            )
        body = self._fast_write(envelope) if type(envelope) is TriggerEventEnvelope else None
        if body is not None and self._registry is None:
            return SINGLE_OBJECT_MAGIC + _FAST_FINGERPRINT + body  # frame_single_object(), pinned fingerprint
        if body is None:
            body = self._write_body(envelope.to_avro())
        if self._registry is None:
            return frame_single_object(self.fingerprint, body)
        return frame_confluent(self._registry_schema_id(ctx), body)

    def _fits_fast_path(self) -> bool:  # not for a later schema version: fastavro only
        if self._fast is None:
            self._fast = self._type is TriggerEventEnvelope and self.fingerprint == _FAST_FINGERPRINT
        return self._fast

    def _fast_write(self, envelope: Any) -> bytes | None:
        try:
            return _write_trigger(envelope) if self._fits_fast_path() else None
        except Exception:  # e.g. a lone surrogate: the fastavro way words the error
            return None

    def _write_body(self, record: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self.schema, record)
        except Exception as exc:
            raise EnvelopeEncodeError(f"cannot write {self._type.__name__} as Avro: {exc}") from exc
        return buffer.getvalue()

    def _registry_schema_id(self, ctx: SerializationContext | None) -> int:
        if ctx is None or not ctx.topic:
            raise EnvelopeEncodeError(
                f"encoding {self._type.__name__} with a schema registry needs the topic "
                "(it names the subject)"
            )
        subject = self._strategy(ctx, self.record_name)
        if not subject:
            raise EnvelopeEncodeError(f"the subject name strategy gave no subject for topic {ctx.topic!r}")
        schema_id = self._subject_ids.get(subject)
        if schema_id is not None:
            return schema_id
        registry: Any = self._registry
        try:
            from confluent_kafka.schema_registry import Schema
        except ImportError as exc:  # pragma: no cover - depends on installed extras
            raise ConfigurationError(
                "a schema registry needs confluent-kafka's schema registry support: "
                "pip install 'airflow-kafka-events[schema-registry]'"
            ) from exc
        text = json.dumps(schemas.raw_schema(self._name), separators=(",", ":"))
        schema = Schema(text, schema_type="AVRO")
        try:
            if self._auto_register:
                schema_id = int(registry.register_schema(subject, schema))
            else:
                schema_id = int(registry.lookup_schema(subject, schema).schema_id)
        except Exception as exc:
            action = "register" if self._auto_register else "look up"
            raise EnvelopeSerializationError(
                f"could not {action} the {self._name} schema under subject {subject!r}: {exc}"
            ) from exc
        self._subject_ids[subject] = schema_id
        self._registry_writers.setdefault(schema_id, self.schema)
        return schema_id

    # ------------------------------------------------------------------ decode
    def decode(self, data: bytes) -> E:
        """The envelope in ``data`` (either framing); ``EnvelopeDecodeError`` subclasses on failure."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EnvelopeDecodeError(f"expected bytes to decode, got {type(data).__qualname__}")
        data = bytes(data)
        if detect_framing(data) == "single-object":
            fingerprint, body = parse_single_object(data)
            writer = self._writer_by_fingerprint(fingerprint)
        else:
            schema_id, body = parse_confluent(data)
            writer = self._writer_by_schema_id(schema_id)
        if writer is self.schema and self._fits_fast_path():
            fast = _read_trigger(body)
            if fast is not None:
                return fast  # type: ignore[return-value]
        record = self._read_body(body, writer)
        try:
            envelope: E = self._type.from_avro(record)
        except EnvelopeDecodeError:
            raise
        except Exception as exc:
            raise EnvelopeDecodeError(f"decoded record is not a valid {self._type.__name__}: {exc}") from exc
        return envelope

    def _known_fingerprints(self) -> dict[bytes, dict[str, Any]]:
        if self._by_fingerprint is None:
            self._by_fingerprint = {
                schemas.schema_fingerprint(self._name, version): schemas.load_schema(self._name, version)
                for version in schemas.schema_versions(self._name)
            }
        return self._by_fingerprint

    def _writer_by_fingerprint(self, fingerprint: bytes) -> dict[str, Any]:
        known = self._known_fingerprints()
        writer = known.get(fingerprint)
        if writer is None:
            raise UnknownSchemaError(
                f"unknown writer schema fingerprint {fingerprint.hex()} for {self._type.__name__}; "
                f"known versions {schemas.schema_versions(self._name)} have fingerprints "
                f"{', '.join(fp.hex() for fp in known)}"
            )
        return writer

    def _writer_by_schema_id(self, schema_id: int) -> dict[str, Any]:
        writer = self._registry_writers.get(schema_id)
        if writer is not None:
            return writer
        if self._registry is None:
            raise UnknownSchemaError(
                f"message names schema registry id {schema_id}, but no schema registry client is configured"
            )
        try:
            registered = self._registry.get_schema(schema_id)
        except Exception as exc:
            if _is_not_found(exc):
                raise UnknownSchemaError(f"schema registry has no schema with id {schema_id}") from exc
            raise EnvelopeSerializationError(
                f"could not fetch schema id {schema_id} from the schema registry: {exc}"
            ) from exc
        if registered is None:
            raise UnknownSchemaError(f"schema registry has no schema with id {schema_id}")
        schema_type = getattr(registered, "schema_type", None) or "AVRO"
        if schema_type != "AVRO":
            raise UnknownSchemaError(f"schema registry id {schema_id} is a {schema_type} schema, not Avro")
        try:
            parsed: Any = fastavro.parse_schema(json.loads(registered.schema_str))
            canonical = fastavro.schema.to_parsing_canonical_form(parsed)
            fingerprint = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
        except Exception as exc:
            raise UnknownSchemaError(
                f"schema registry id {schema_id} holds no usable Avro schema: {exc}"
            ) from exc
        # A registered copy of a kept version shares the already parsed schema.
        writer = self._known_fingerprints().get(fingerprint, parsed)
        self._registry_writers[schema_id] = writer
        return writer

    def _read_body(self, body: bytes, writer: dict[str, Any]) -> dict[str, Any]:
        reader = self.schema
        buffer = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(buffer, writer, None if writer is reader else reader)
        except EOFError as exc:
            raise TruncatedMessageError(
                f"Avro body of {len(body)} bytes ends before the {self._type.__name__} record is complete"
            ) from exc
        except IndexError as exc:
            if buffer.tell() >= len(body):
                raise TruncatedMessageError(
                    f"Avro body of {len(body)} bytes ends before the {self._type.__name__} record is complete"
                ) from exc
            raise EnvelopeDecodeError(f"Avro body is not a valid {self._type.__name__}: {exc}") from exc
        except Exception as exc:
            raise EnvelopeDecodeError(
                f"Avro body is not a valid {self._type.__name__}: {type(exc).__name__}: {exc}"
            ) from exc
        trailing = len(body) - buffer.tell()
        if trailing:
            raise EnvelopeDecodeError(
                f"{trailing} unexpected bytes after the {self._type.__name__} record in the Avro body"
            )
        if not isinstance(record, dict):
            raise EnvelopeDecodeError(f"Avro body holds a {type(record).__qualname__}, not a record")
        return record


# --------------------------------------------------------------------------- confluent serde
class EnvelopeSerializer:
    """confluent-kafka style value serializer: ``serializer(envelope, ctx) -> bytes``."""

    def __init__(self, codec: EnvelopeCodec[Any]) -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        return self.codec.encode(obj, ctx=ctx)


class EnvelopeDeserializer:
    """confluent-kafka style value deserializer: ``deserializer(bytes, ctx) -> envelope``."""

    def __init__(self, codec: EnvelopeCodec[Any]) -> None:
        self.codec = codec

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if data is None:
            return None
        return self.codec.decode(data)


# --------------------------------------------------------------------------- shared codecs
TRIGGER_EVENT_CODEC: EnvelopeCodec[TriggerEventEnvelope] = EnvelopeCodec(TriggerEventEnvelope)
ASSET_EVENT_CODEC: EnvelopeCodec[AssetEventEnvelope] = EnvelopeCodec(AssetEventEnvelope)


def trigger_event_codec() -> EnvelopeCodec[TriggerEventEnvelope]:
    """The shared registry-less codec for trigger events."""
    return TRIGGER_EVENT_CODEC


def asset_event_codec() -> EnvelopeCodec[AssetEventEnvelope]:
    """The shared registry-less codec for asset events."""
    return ASSET_EVENT_CODEC

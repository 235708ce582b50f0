"""Avro bodies of the envelopes, in either framing of :mod:`.framing`, told apart by their leading bytes.

* **Avro single-object encoding** (no registry): ``C3 01`` + the 8-byte little-endian
  CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form + the Avro
  body.  The decoder looks the fingerprint up among every schema version kept in
  :mod:`airflow_kafka_events.envelopes.schemas` and resolves it against the current version.
* **Confluent Schema Registry wire format** (when a registry client is configured):
  ``00`` + the 4-byte big-endian schema id + the Avro body; the schema ids come from
  :mod:`airflow_kafka_events.envelopes.registry`.

Bodies are written and read by fastavro, except trigger event bodies of the current schema,
which have a hand-written fast path here (byte for byte as fastavro writes them).

Decoding failures raise :class:`~airflow_kafka_events.errors.EnvelopeDecodeError`
subclasses (truncated, unknown framing, unknown schema).  A schema registry that
cannot be reached raises the base
:class:`~airflow_kafka_events.errors.EnvelopeSerializationError`, so callers can tell a
broken message from a transient registry failure.

Schemas are parsed once per process, on first use.  This module imports no Airflow
module and needs ``confluent_kafka.schema_registry`` only when a registry is used.
"""

from __future__ import annotations

import asyncio
import io
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import fastavro
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.framing import (
    CONFLUENT_HEADER_SIZE,
    CONFLUENT_ID,
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    detect_framing,
    frame_confluent,
    frame_single_object,
    parse_confluent,
    parse_single_object,
)
from airflow_kafka_events.envelopes.json_values import json_from_text, json_to_text
from airflow_kafka_events.envelopes.model import (
    INT64_MAX,
    AssetEventEnvelope,
    ProducerIdentity,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.envelopes.registry import RegistrySchemas, RegistrySettings, SubjectNameStrategy
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    EnvelopeEncodeError,
    EnvelopeSerializationError,
    SchemaRegistryUnavailableError,
    TruncatedMessageError,
    UnknownSchemaError,
)

__all__ = [
    "ASSET_EVENT_CODEC",
    "REGISTRY_CODECS",
    "TRIGGER_EVENT_CODEC",
    "AttemptEncoder",
    "EnvelopeCodec",
    "EnvelopeCodecs",
    "RegistryCodecs",
    "envelope_codecs",
]

# --------------------------------------------------------------------------- the trigger event fast path
# fastavro spends most of an envelope's time on per-call work (schema checks, trying union
# branches).  Trigger event bodies of the current schema (pinned by fingerprint) are written
# and read here, byte for byte as fastavro does (the unit tests compare both); anything else
# (a failure, a body truncated, odd or breaking a rule) goes the fastavro way, which raises.
# A new schema version switches this path off (its fingerprint differs).
#: CRC-64-AVRO fingerprint of the trigger event envelope schema this module writes and reads.
_FAST_FINGERPRINT = bytes.fromhex("8e485a47790b7893")
_BYTE = tuple(bytes((i,)) for i in range(256))
_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_U64 = 1 << 64


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zig-zag, for the int64 range
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    size = len(data)
    return (_BYTE[size << 1] if size < 0x40 else _long(size)) + data


def _some(value: Any, write: Callable[[Any], bytes]) -> bytes:
    return b"\x00" if value is None else b"\x02" + write(value)


def _trigger_head(trigger_run_id: str, attempt: int) -> bytes:
    """The body's first fields: ``trigger_run_id``, ``attempt``."""
    return _string(trigger_run_id) + _long(attempt)


def _producer_part(producer: ProducerIdentity) -> bytes:
    """The body's ``producer`` record."""
    return b"".join(
        (
            _some(producer.dag_id, _string),
            _some(producer.run_id, _string),
            _some(producer.task_id, _string),
            _some(producer.map_index, _long),
            _some(producer.try_number, _long),
        )
    )


def _metadata_part(metadata: Mapping[str, str]) -> bytes:
    """The body's last field, ``metadata`` (a map: one block, then the empty block)."""
    if not metadata:
        return b"\x00"
    parts = [_long(len(metadata))]
    for key, value in metadata.items():
        parts += (_string(key), _string(value))
    parts.append(b"\x00")
    return b"".join(parts)


def _trigger_body(
    head: bytes,
    sequence_index: int,
    is_last: bool,
    payload: Any,
    micros: int,
    producer_part: bytes,
    cursor: str | None,
    error: StreamFailure | None,
    metadata_part: bytes,
) -> bytes:
    """A trigger event body from its parts, in the schema's field order (``head``, ``producer_part``
    and ``metadata_part`` as the functions above write them; ``micros``: ``emitted_at``)."""
    if payload is None:
        payload_part = b"\x00"
    elif isinstance(payload, bytes):
        payload_part = b"\x02" + _long(len(payload)) + payload
    else:
        payload_part = b"\x04" + _string(json_to_text(payload, what="payload"))
    return b"".join(
        (
            head,
            _long(sequence_index),
            b"\x01" if is_last else b"\x00",
            payload_part,
            _long(micros),
            producer_part,
            _some(cursor, _string),
            b"\x00" if error is None else b"\x02" + _string(error.type) + _string(error.message),
            metadata_part,
        )
    )


def _write_trigger(envelope: TriggerEventEnvelope) -> bytes:
    return _trigger_body(
        _trigger_head(envelope.trigger_run_id, envelope.attempt),
        envelope.sequence_index,
        envelope.is_last,
        envelope.payload,
        (envelope.emitted_at - _EPOCH) // _MICROSECOND,
        _producer_part(envelope.producer),
        envelope.resume_cursor,
        envelope.error,
        _metadata_part(envelope.metadata),
    )


# (data, position) -> (value, next position); ValueError / IndexError on anything unusual.
def long_at(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    n, shift = byte & 0x7F, 7
    while byte & 0x80:
        if shift > 63:
            raise ValueError("varint too long")
        pos += 1
        byte = data[pos]
        n |= (byte & 0x7F) << shift
        shift += 7
    if n >= _U64:  # beyond an int64's zig-zag
        raise ValueError("varint too long")
    return (n >> 1) ^ -(n & 1), pos + 1


def bytes_at(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = long_at(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise ValueError("length out of range")
    return data[pos:end], end


def string_at(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = bytes_at(data, pos)
    return raw.decode(), pos


def some_at(data: bytes, pos: int, read: Callable[[bytes, int], tuple[Any, int]]) -> tuple[Any, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise ValueError("union branch")
    return read(data, pos + 1)


def metadata_at(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    result: dict[str, str] = {}
    count, pos = long_at(data, pos)
    while count:
        if count < 0:
            raise ValueError("sized map block")
        for _ in range(count):
            key, pos = string_at(data, pos)
            result[key], pos = string_at(data, pos)
        count, pos = long_at(data, pos)
    return result, pos


def _read_trigger(body: bytes) -> TriggerEventEnvelope | None:
    try:
        run_id, pos = string_at(body, 0)
        attempt, pos = long_at(body, pos)
        index, pos = long_at(body, pos)
        flag, kind = body[pos], body[pos + 1]
        if flag > 1 or kind not in (0, 2, 4):
            return None
        raw, pos = bytes_at(body, pos + 2) if kind else (b"", pos + 2)
        micros, pos = long_at(body, pos)
        producer = []  # dag_id, run_id, task_id, map_index, try_number
        for read in (string_at, string_at, string_at, long_at, long_at):
            value, pos = some_at(body, pos, read)
            producer.append(value)
        cursor, pos = some_at(body, pos, string_at)
        error, pos = some_at(body, pos, _error_at)
        metadata, pos = metadata_at(body, pos)
        if pos != len(body):
            return None
        fields = trigger_fields(
            run_id, attempt, index, flag, kind, raw, micros, producer, cursor, error, metadata
        )
    except (ValueError, IndexError, OverflowError, EnvelopeDecodeError):
        return None
    return TriggerEventEnvelope._from_checked(fields)


def trigger_fields(
    run_id: str,
    attempt: int,
    index: int,
    flag: int,
    kind: int,
    raw: bytes,
    micros: int,
    producer: Any,
    cursor: str | None,
    error: Any,
    metadata: dict[str, str],
) -> dict[str, Any]:
    """A trigger event envelope's fields from the values of its Avro body, in their order (``flag``:
    ``is_last``; ``kind`` and ``raw``: the payload's union branch and bytes).  Raises
    ``EnvelopeDecodeError`` for a JSON payload that is not strict JSON, ``OverflowError`` for a time
    out of range."""
    return {
        "trigger_run_id": run_id,
        "sequence_index": index,
        "is_last": flag == 1,
        "payload": None if kind == 0 else raw if kind == 2 else json_from_text(raw.decode(), what="payload"),
        "attempt": attempt,
        "emitted_at": _EPOCH + timedelta(microseconds=micros),
        "producer": producer,
        "resume_cursor": cursor,
        "error": error,
        "metadata": metadata,
    }


def _error_at(data: bytes, pos: int) -> tuple[tuple[str, str], int]:
    kind, pos = string_at(data, pos)
    message, pos = string_at(data, pos)
    return (kind, message), pos


# --------------------------------------------------------------------------- codec
class AvroEnvelope(Protocol):
    AVRO_SCHEMA_NAME: ClassVar[str]

    def to_avro(self) -> dict[str, Any]: ...

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Any: ...


E = TypeVar("E", bound=AvroEnvelope)


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
        self._registry = (
            None
            if registry_client is None
            else RegistrySchemas(
                registry_client, subject_name_strategy=subject_name_strategy, auto_register=auto_register
            )
        )
        self._by_fingerprint: dict[bytes, dict[str, Any]] | None = None
        self._fast: bool | None = None  # the fast path fits (decided on first use)

    def __repr__(self) -> str:
        registry = "" if self._registry is None else f", registry_client={self._registry.client!r}"
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
        return None if self._registry is None else self._registry.client

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
        if body is not None:
            return self._frame(body, ctx, fast=True)
        return self._frame(self._write_body(envelope.to_avro()), ctx)

    def _frame(self, body: bytes, ctx: SerializationContext | None, *, fast: bool = False) -> bytes:
        """``body`` in its framing: single-object encoding (``fast``: a body the fast path wrote, of the
        pinned fingerprint), or the registry's wire format with the schema id of ``ctx``'s subject."""
        if self._registry is None:
            if fast:
                return SINGLE_OBJECT_MAGIC + _FAST_FINGERPRINT + body  # frame_single_object(), pinned
            return frame_single_object(self.fingerprint, body)
        return frame_confluent(self._registry.schema_id(self._name, self.record_name, ctx, self._type), body)

    def prepare(self, topic: str) -> None:
        """Ask the registry for the schema id of ``topic`` now (blocking), not at the first record."""
        if self._registry is not None:
            ctx = SerializationContext(topic, MessageField.VALUE)
            self._registry.schema_id(self._name, self.record_name, ctx, self._type)

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

    # ------------------------------------------------------------------ decode
    def decode(self, data: bytes, *, fetch: bool = True) -> E:
        """The envelope in ``data`` (either framing); ``EnvelopeDecodeError`` subclasses on failure.

        ``fetch=False`` (on an event loop): never a registry call; a schema id whose writer schema
        was not fetched yet (:meth:`fetch_writers`) raises
        :class:`~airflow_kafka_events.errors.SchemaRegistryUnavailableError` (decode it again).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EnvelopeDecodeError(f"expected bytes to decode, got {type(data).__qualname__}")
        data = bytes(data)
        if detect_framing(data) == "single-object":
            fingerprint, body = parse_single_object(data)
            writer = self._writer_by_fingerprint(fingerprint)
        else:
            schema_id, body = parse_confluent(data)
            writer = self._writer_by_schema_id(schema_id, fetch)
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

    def _writer_by_schema_id(self, schema_id: int, fetch: bool = True) -> dict[str, Any]:
        if self._registry is None:
            raise UnknownSchemaError(
                f"message names schema registry id {schema_id}, but no schema registry client is configured"
            )
        if not fetch:
            writer = self._registry.cached_writer(schema_id)
            if writer is None:
                raise SchemaRegistryUnavailableError(
                    f"the writer schema of registry id {schema_id} is not fetched yet (the registry "
                    "did not answer, or does not know the id): decode the record again"
                )
            return writer
        return self._registry.writer(schema_id, self._known_fingerprints())

    async def fetch_writers(self, values: Iterable[bytes | None]) -> None:
        """Fetch the writer schemas of the registry-framed ``values`` not fetched yet, each in a
        thread (``asyncio.to_thread``), so that an event loop never waits on the registry's HTTP:
        :meth:`decode` with ``fetch=False`` then finds them.  A failure (registry unavailable, id
        unknown) is left for that decode to report.  Nothing to fetch: returns without yielding."""
        registry = self._registry
        if registry is None:
            return
        missing: list[int] = []
        for value in values:
            if value is None or len(value) < CONFLUENT_HEADER_SIZE or value[0] != CONFLUENT_MAGIC:
                continue
            schema_id = CONFLUENT_ID.unpack_from(value, 1)[0]
            if registry.cached_writer(schema_id) is None and schema_id not in missing:
                missing.append(schema_id)
        for schema_id in missing:
            try:
                await asyncio.to_thread(self._writer_by_schema_id, schema_id)
            except EnvelopeSerializationError:
                pass  # the decode reports it (a verdict, or the registry still to wait for)

    def _read_body(self, body: bytes, writer: dict[str, Any]) -> dict[str, Any]:
        reader = self.schema
        buffer = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(buffer, writer, None if writer is reader else reader)
        except (EOFError, IndexError) as exc:  # an IndexError before the end: not a truncation
            if isinstance(exc, EOFError) or buffer.tell() >= len(body):
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


# --------------------------------------------------------------------------- one attempt's envelopes
class AttemptEncoder:
    """Encodes the envelopes of one attempt of a stream: ``trigger_run_id``, ``attempt``, ``producer``
    and ``metadata`` are the same in each, so their Avro bytes are written once, and each envelope
    writes only its own fields (sequence index, ``is_last``, payload, ``emitted_at``, cursor, error).

    :meth:`encode` returns ``codec.encode()`` of the :class:`TriggerEventEnvelope` with those fields,
    byte for byte.  When the codec has no fast path (another schema version) or a value is one the
    fast path does not take (a lone surrogate, a field breaking a rule), that envelope is built and
    encoded by ``codec``: its checks, its errors.
    """

    def __init__(
        self,
        codec: EnvelopeCodec[TriggerEventEnvelope],
        *,
        trigger_run_id: str,
        attempt: int,
        producer: ProducerIdentity,
        metadata: Mapping[str, str],
        topic: str | None = None,
    ) -> None:
        self.codec = codec
        self._fixed: dict[str, Any] = {
            "trigger_run_id": trigger_run_id,
            "attempt": attempt,
            "producer": producer,
            "metadata": dict(metadata),
        }
        self._ctx = None if topic is None else SerializationContext(topic, MessageField.VALUE)
        self._parts: tuple[bytes, bytes, bytes] | None = None  # head, producer, metadata
        if codec.envelope_type is TriggerEventEnvelope and codec._fits_fast_path():
            try:
                TriggerEventEnvelope(sequence_index=0, is_last=False, **self._fixed)  # their rules
                self._parts = (
                    _trigger_head(trigger_run_id, attempt),
                    _producer_part(producer),
                    _metadata_part(self._fixed["metadata"]),
                )
            except Exception:  # every envelope goes the codec's way, which raises
                self._parts = None

    def encode(
        self,
        sequence_index: int,
        *,
        payload: Any = None,
        resume_cursor: str | None = None,
        is_last: bool = False,
        error: StreamFailure | None = None,
        emitted_at: datetime | None = None,
    ) -> bytes:
        """The bytes of this attempt's envelope ``sequence_index`` (``emitted_at``: now, unless given)."""
        parts = self._parts
        if parts is not None:
            try:
                body = self._body(parts, sequence_index, payload, resume_cursor, is_last, error, emitted_at)
            except Exception:  # the codec's way words the error
                body = None
            if body is not None:
                return self.codec._frame(body, self._ctx, fast=True)
        fields: dict[str, Any] = {} if emitted_at is None else {"emitted_at": emitted_at}
        envelope = TriggerEventEnvelope(
            sequence_index=sequence_index,
            is_last=is_last,
            payload=payload,
            resume_cursor=resume_cursor,
            error=error,
            **fields,
            **self._fixed,
        )
        return self.codec.encode(envelope, ctx=self._ctx)

    @staticmethod
    def _body(
        parts: tuple[bytes, bytes, bytes],
        sequence_index: int,
        payload: Any,
        cursor: str | None,
        is_last: bool,
        error: StreamFailure | None,
        emitted_at: datetime | None,
    ) -> bytes | None:
        """The body, or ``None`` when a field breaks a rule of :class:`TriggerEventEnvelope` (the
        rules ``__post_init__`` checks of the fields an envelope varies in; keep in step)."""
        if not (
            type(sequence_index) is int
            and 0 <= sequence_index <= INT64_MAX
            and type(is_last) is bool
            and (cursor is None or isinstance(cursor, str))
            and (error is None or (is_last and isinstance(error, StreamFailure)))
        ):
            return None
        if isinstance(payload, (bytearray, memoryview)):
            payload = bytes(payload)
        if emitted_at is None:
            micros = time.time_ns() // 1000  # datetime.now(timezone.utc)'s clock and rounding
        elif isinstance(emitted_at, datetime) and emitted_at.utcoffset() is not None:
            micros = (emitted_at.astimezone(timezone.utc) - _EPOCH) // _MICROSECOND
        else:
            return None
        head, producer, metadata = parts
        return _trigger_body(
            head, sequence_index, is_last, payload, micros, producer, cursor, error, metadata
        )


# --------------------------------------------------------------------------- shared codecs
TRIGGER_EVENT_CODEC: EnvelopeCodec[TriggerEventEnvelope] = EnvelopeCodec(TriggerEventEnvelope)
ASSET_EVENT_CODEC: EnvelopeCodec[AssetEventEnvelope] = EnvelopeCodec(AssetEventEnvelope)


@dataclass(frozen=True)
class EnvelopeCodecs:
    """The codecs of one Kafka connection: both envelope types, with its schema registry or without."""

    trigger: EnvelopeCodec[TriggerEventEnvelope]
    asset: EnvelopeCodec[AssetEventEnvelope]
    registry: RegistrySettings | None = None


def envelope_codecs(registry: RegistrySettings | None) -> EnvelopeCodecs:
    """The shared registry-less codecs without ``registry``; else this process's two codecs for
    ``registry`` (:data:`REGISTRY_CODECS`), writing the registry's wire format through one client
    (both read either framing)."""
    if registry is None:
        return EnvelopeCodecs(TRIGGER_EVENT_CODEC, ASSET_EVENT_CODEC)
    return REGISTRY_CODECS.get(registry)


class RegistryCodecs:
    """This process's codecs per schema registry settings, made on first use.

    Every reader of one connection's settings (each ``emit_asset_event`` builds its own) shares one
    registry client and one cache of schema ids and writer schemas: the current schema is
    registered, and a writer schema fetched, once per process.  Process-wide on purpose, as the
    producers are.  Keyed by pid: a forked child makes its own client (the parent's HTTP
    connections are not used across ``fork()``).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._codecs: dict[tuple[int, tuple[Any, ...]], EnvelopeCodecs] = {}

    def get(self, registry: RegistrySettings) -> EnvelopeCodecs:
        key = (os.getpid(), registry.identity())
        with self.lock:
            codecs = self._codecs.get(key)
            if codecs is None:
                codecs = self._codecs[key] = _registry_codecs(registry)
            return codecs


def _registry_codecs(registry: RegistrySettings) -> EnvelopeCodecs:
    client = registry.new_client()
    options: dict[str, Any] = {
        "registry_client": client,
        "subject_name_strategy": registry.strategy,
        "auto_register": registry.auto_register,
    }
    return EnvelopeCodecs(
        EnvelopeCodec(TriggerEventEnvelope, **options), EnvelopeCodec(AssetEventEnvelope, **options), registry
    )


#: The process's codecs per schema registry settings.
REGISTRY_CODECS = RegistryCodecs()
# Held across fork(), so that a forked child never inherits the lock taken by a thread it does not have.
os.register_at_fork(
    before=REGISTRY_CODECS.lock.acquire,
    after_in_parent=REGISTRY_CODECS.lock.release,
    after_in_child=REGISTRY_CODECS.lock.release,
)

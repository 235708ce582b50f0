"""The Confluent schema registry side of the envelopes: schema ids for writing, writer schemas by id.

:class:`RegistrySchemas` wraps a registry client (a ``confluent_kafka.schema_registry.SchemaRegistryClient``
or any object with ``register_schema(subject, schema)``, ``lookup_schema(subject, schema)`` and
``get_schema(schema_id)``): it registers (or looks up) the current schema under the subject its
strategy names and fetches a writer schema by id, once per subject and per id.  A registry that
cannot be reached raises :class:`~airflow_kafka_events.errors.EnvelopeSerializationError` (retryable);
an id the registry does not know raises :class:`~airflow_kafka_events.errors.UnknownSchemaError`.

:class:`EnvelopeSerializer` and :class:`EnvelopeDeserializer` are an envelope codec in
confluent-kafka's serializer shape.  This module imports no Airflow module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import fastavro
import fastavro.schema
from confluent_kafka.serialization import SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeEncodeError,
    EnvelopeSerializationError,
    UnknownSchemaError,
)

if TYPE_CHECKING:
    from airflow_kafka_events.envelopes.codec import EnvelopeCodec

__all__ = [
    "EnvelopeDeserializer",
    "EnvelopeSerializer",
    "RegistrySchemas",
    "SubjectNameStrategy",
    "record_subject_name_strategy",
    "topic_subject_name_strategy",
]

SubjectNameStrategy = Callable[[SerializationContext, "str | None"], "str | None"]


def topic_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """TopicNameStrategy: ``<topic>-value`` (or ``<topic>-key`` for a key serializer)."""
    return f"{ctx.topic}-{ctx.field}"


def record_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str | None:
    """RecordNameStrategy: the record's full name, whatever the topic (several types on one topic)."""
    return record_name


def _is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, LookupError) or getattr(exc, "http_status_code", None) == 404


class RegistrySchemas:
    """Schema ids and writer schemas of one registry client, cached per subject and per id."""

    def __init__(
        self,
        client: Any,
        *,
        subject_name_strategy: SubjectNameStrategy | None = None,
        auto_register: bool = True,
    ) -> None:
        self.client = client
        self.strategy: SubjectNameStrategy = subject_name_strategy or topic_subject_name_strategy
        self.auto_register = auto_register
        self._subject_ids: dict[str, int] = {}
        self._writers: dict[int, dict[str, Any]] = {}

    def subject(self, ctx: SerializationContext | None, record_name: str, what: type) -> str:
        """The subject the strategy names for ``ctx``'s topic and ``record_name``."""
        if ctx is None or not ctx.topic:
            raise EnvelopeEncodeError(
                f"encoding {what.__name__} with a schema registry needs the topic (it names the subject)"
            )
        subject = self.strategy(ctx, record_name)
        if not subject:
            raise EnvelopeEncodeError(f"the subject name strategy gave no subject for topic {ctx.topic!r}")
        return subject

    def schema_id(
        self, schema_name: str, record_name: str, ctx: SerializationContext | None, what: type
    ) -> int:
        """The id of ``schema_name``'s current version under its subject (registered or looked up)."""
        subject = self.subject(ctx, record_name, what)
        schema_id = self._subject_ids.get(subject)
        if schema_id is not None:
            return schema_id
        schema = registry_schema(schema_name)
        try:
            if self.auto_register:
                schema_id = int(self.client.register_schema(subject, schema))
            else:
                schema_id = int(self.client.lookup_schema(subject, schema).schema_id)
        except Exception as exc:
            action = "register" if self.auto_register else "look up"
            raise EnvelopeSerializationError(
                f"could not {action} the {schema_name} schema under subject {subject!r}: {exc}"
            ) from exc
        self._subject_ids[subject] = schema_id
        self._writers.setdefault(schema_id, schemas.load_schema(schema_name))
        return schema_id

    def writer(self, schema_id: int, known: Mapping[bytes, dict[str, Any]]) -> dict[str, Any]:
        """The writer schema of ``schema_id``; a registered copy of a ``known`` version (by
        fingerprint) is that already parsed schema."""
        writer = self._writers.get(schema_id)
        if writer is not None:
            return writer
        try:
            registered = self.client.get_schema(schema_id)
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
        writer = known.get(fingerprint, parsed)
        self._writers[schema_id] = writer
        return writer


def registry_schema(schema_name: str, version: int | None = None) -> Any:
    """``schema_name``'s schema (current or ``version``) as a registry ``Schema`` (compact JSON, Avro)."""
    try:
        from confluent_kafka.schema_registry import Schema
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        raise ConfigurationError(
            "a schema registry needs confluent-kafka's schema registry support: "
            "pip install 'airflow-kafka-events[schema-registry]'"
        ) from exc
    raw = schemas.raw_schema(schema_name, version)
    return Schema(json.dumps(raw, separators=(",", ":")), schema_type="AVRO")


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

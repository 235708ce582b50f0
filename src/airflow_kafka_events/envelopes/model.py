"""Envelope types carried on Kafka: trigger event stream elements and asset events.

Every envelope is a frozen dataclass validated on construction (``ValidationError``)
with ``to_avro()`` / ``from_avro()`` converting to and from the record dict that
fastavro writes and reads with the schemas in :mod:`airflow_kafka_events.envelopes.schemas`.

Payload representation (``TriggerEventEnvelope.payload``): ``None`` (no payload), raw
``bytes``, or any JSON value carried as strict JSON text (RFC 8259, no NaN/Infinity).
JSON text keeps integers of any size and the exact ``repr`` of floats, and every
language can parse it.  Tuples are written as JSON arrays and come back as lists;
``bytearray``/``memoryview`` payloads are stored as ``bytes``; subclasses of ``int``,
``float``, ``str`` (e.g. ``str`` enums) come back as the base type.  Dict keys must be
``str``.  Anything else (sets, arbitrary objects, NaN, Infinity) is rejected with
:class:`~airflow_kafka_events.errors.EnvelopeEncodeError` when the envelope is encoded.

``AssetEventEnvelope.extra`` is a JSON object carried as an Avro ``map<string, string>``
whose values are the JSON text of each key's value.

This module imports no Airflow module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, ClassVar, TypeVar

from airflow_kafka_events.envelopes.json_values import (
    json_from_text,
    json_to_text,
    payload_from_avro,
    payload_to_avro,
)
from airflow_kafka_events.envelopes.schemas import ASSET_EVENT_ENVELOPE, TRIGGER_EVENT_ENVELOPE
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError

__all__ = [
    "AssetEventEnvelope",
    "AssetRef",
    "EventSource",
    "ProducerIdentity",
    "SourceKind",
    "StreamFailure",
    "TriggerEventEnvelope",
]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_PRODUCER_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")
_T = TypeVar("_T")


def _identity_to_avro(owner: Any) -> dict[str, Any]:
    """The task-instance identity fields (``_PRODUCER_FIELDS``) of a producer or an event source."""
    return {name: getattr(owner, name) for name in _PRODUCER_FIELDS}


def _identity_from_avro(record: Mapping[str, Any]) -> dict[str, Any]:
    """The task-instance identity fields of an Avro record (each optional)."""
    return {name: record.get(name) for name in _PRODUCER_FIELDS}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _new_event_id() -> str:
    return str(uuid.uuid4())


# --------------------------------------------------------------------------- validation helpers
def _fail(owner: str, name: str, problem: str) -> ValidationError:
    return ValidationError(f"{owner}.{name} {problem}")


def _check_str(owner: str, name: str, value: Any, *, optional: bool = False, non_empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        expected = "a str or None" if optional else "a str"
        raise _fail(owner, name, f"must be {expected}, got {type(value).__qualname__}")
    if non_empty and not value:
        raise _fail(owner, name, "must not be empty")


def _check_int(owner: str, name: str, value: Any, *, low: int, high: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        expected = "an int or None" if optional else "an int"
        raise _fail(owner, name, f"must be {expected}, got {type(value).__qualname__}")
    if not low <= value <= high:
        raise _fail(owner, name, f"must be between {low} and {high}, got {value}")


def _utc(owner: str, name: str, value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise _fail(owner, name, f"must be a datetime, got {type(value).__qualname__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _fail(owner, name, f"must be timezone-aware, got naive {value.isoformat()}")
    try:
        return value.astimezone(timezone.utc)
    except (OverflowError, ValueError) as exc:
        raise _fail(owner, name, f"is out of range in UTC: {value.isoformat()}") from exc


def _str_map(owner: str, name: str, value: Any, *, str_values: bool) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(owner, name, f"must be a mapping, got {type(value).__qualname__}")
    result: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(owner, name, f"keys must be str, got {type(key).__qualname__} {key!r}")
        if str_values and not isinstance(item, str):
            raise ValidationError(f"{owner}.{name}[{key!r}] must be a str, got {type(item).__qualname__}")
        result[key] = item
    return result


def _timestamp_from_avro(value: Any) -> datetime:
    # fastavro turns timestamp-micros into an aware UTC datetime; a reader without
    # logical types hands over the raw microseconds.
    if isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH + timedelta(microseconds=value)
    if isinstance(value, datetime):
        return value
    raise EnvelopeDecodeError(f"timestamp has unexpected Avro value of type {type(value).__qualname__!r}")


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def _unchecked(cls: type[_T], fields: dict[str, Any]) -> _T:
    # A frozen dataclass instance from values already checked against its rules.
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


# --------------------------------------------------------------------------- trigger events
@dataclass(frozen=True)
class ProducerIdentity:
    """The task instance (or other process) that produced a stream element; all optional."""

    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None

    def __post_init__(self) -> None:
        for name in ("dag_id", "run_id", "task_id"):
            _check_str("ProducerIdentity", name, getattr(self, name), optional=True)
        for name in ("map_index", "try_number"):
            _check_int(
                "ProducerIdentity", name, getattr(self, name), low=INT32_MIN, high=INT32_MAX, optional=True
            )

    def to_avro(self) -> dict[str, Any]:
        return _identity_to_avro(self)

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> ProducerIdentity:
        return cls(**_identity_from_avro(record))


@dataclass(frozen=True)
class StreamFailure:
    """Why a stream ended in failure: an error type name and a message (a record, not an exception).

    Its Avro record is named ``StreamError`` (the schemas keep their names).
    """

    type: str
    message: str

    def __post_init__(self) -> None:
        _check_str("StreamError", "type", self.type, non_empty=True)
        _check_str("StreamError", "message", self.message)

    @classmethod
    def from_exception(cls, exc: BaseException) -> StreamFailure:
        """``type`` is the exception class's qualified name (with its module unless builtin)."""
        kind = type(exc)
        name = (
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        return cls(type=name, message=str(exc))

    def to_avro(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> StreamFailure:
        return cls(type=record["type"], message=record["message"])


@dataclass(frozen=True)
class TriggerEventEnvelope:
    """One element of a trigger's event stream.

    ``attempt`` is the stream's epoch: a retry that restarts a failed stream writes a
    higher attempt and consumers follow the highest one.  ``error`` may only be set on
    the last element (``is_last=True``).
    """

    AVRO_SCHEMA_NAME: ClassVar[str] = TRIGGER_EVENT_ENVELOPE

    trigger_run_id: str
    sequence_index: int
    is_last: bool
    payload: Any = None
    attempt: int = 0
    emitted_at: datetime = field(default_factory=_utcnow)
    producer: ProducerIdentity = ProducerIdentity()
    resume_cursor: str | None = None
    error: StreamFailure | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "TriggerEventEnvelope"
        _check_str(owner, "trigger_run_id", self.trigger_run_id, non_empty=True)
        _check_int(owner, "sequence_index", self.sequence_index, low=0, high=INT64_MAX)
        if not isinstance(self.is_last, bool):
            raise _fail(owner, "is_last", f"must be a bool, got {type(self.is_last).__qualname__}")
        _check_int(owner, "attempt", self.attempt, low=0, high=INT32_MAX)
        _set(self, "emitted_at", _utc(owner, "emitted_at", self.emitted_at))
        if self.producer is None:
            _set(self, "producer", ProducerIdentity())
        elif not isinstance(self.producer, ProducerIdentity):
            raise _fail(
                owner, "producer", f"must be a ProducerIdentity, got {type(self.producer).__qualname__}"
            )
        _check_str(owner, "resume_cursor", self.resume_cursor, optional=True)
        if self.error is not None:
            if not isinstance(self.error, StreamFailure):
                raise _fail(
                    owner, "error", f"must be a StreamError or None, got {type(self.error).__qualname__}"
                )
            if not self.is_last:
                raise _fail(owner, "error", "may only be set on the last element of a stream (is_last=True)")
        _set(self, "metadata", _str_map(owner, "metadata", self.metadata, str_values=True))
        if isinstance(self.payload, (bytearray, memoryview)):
            _set(self, "payload", bytes(self.payload))

    def to_avro(self) -> dict[str, Any]:
        """The Avro record dict; ``EnvelopeEncodeError`` if the payload is not JSON or bytes."""
        return {
            "trigger_run_id": self.trigger_run_id,
            "attempt": self.attempt,
            "sequence_index": self.sequence_index,
            "is_last": self.is_last,
            "payload": payload_to_avro(self.payload),
            "emitted_at": self.emitted_at,
            "producer": self.producer.to_avro(),
            "resume_cursor": self.resume_cursor,
            "error": None if self.error is None else self.error.to_avro(),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def _from_checked(cls, fields: dict[str, Any]) -> TriggerEventEnvelope | None:
        """The envelope if ``fields`` pass the ``__post_init__`` rules, else None (keep in step).

        For the codec's reader: exact types, a fresh metadata dict, ``producer`` the values of
        ProducerIdentity's fields in order, ``error`` None or (type, message); the constructor
        keeps every refusal and its message.
        """
        producer, error = fields["producer"], fields["error"]
        if not (
            fields["trigger_run_id"]
            and 0 <= fields["sequence_index"] <= INT64_MAX
            and 0 <= fields["attempt"] <= INT32_MAX
            and (error is None or (fields["is_last"] and error[0]))
            and all(n is None or INT32_MIN <= n <= INT32_MAX for n in producer[3:])
        ):
            return None
        fields["producer"] = _unchecked(ProducerIdentity, dict(zip(_PRODUCER_FIELDS, producer, strict=True)))
        if error is not None:
            fields["error"] = _unchecked(StreamFailure, {"type": error[0], "message": error[1]})
        return _unchecked(cls, fields)

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> TriggerEventEnvelope:
        error = record.get("error")
        producer = record.get("producer")
        return cls(
            trigger_run_id=record["trigger_run_id"],
            sequence_index=record["sequence_index"],
            is_last=record["is_last"],
            payload=payload_from_avro(record.get("payload")),
            attempt=record.get("attempt", 0),
            emitted_at=_timestamp_from_avro(record["emitted_at"]),
            producer=ProducerIdentity() if producer is None else ProducerIdentity.from_avro(producer),
            resume_cursor=record.get("resume_cursor"),
            error=None if error is None else StreamFailure.from_avro(error),
            metadata=record.get("metadata") or {},
        )


# --------------------------------------------------------------------------- asset events
class SourceKind(str, Enum):
    """What produced an asset event (the Avro enum ``SourceKind``)."""

    TASK = "task"
    DAG_CALLBACK = "dag_callback"
    TASK_CALLBACK = "task_callback"
    NOTIFIER = "notifier"
    EXTERNAL = "external"


@dataclass(frozen=True)
class AssetRef:
    """The asset an event is about, as Airflow names it."""

    name: str
    uri: str

    def __post_init__(self) -> None:
        _check_str("AssetRef", "name", self.name, non_empty=True)
        _check_str("AssetRef", "uri", self.uri, non_empty=True)

    def to_avro(self) -> dict[str, Any]:
        return {"name": self.name, "uri": self.uri}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> AssetRef:
        return cls(name=record["name"], uri=record["uri"])


@dataclass(frozen=True)
class EventSource:
    """Who produced an asset event; only ``kind`` is required (a str value is accepted)."""

    kind: SourceKind
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None
    producer: str | None = None

    def __post_init__(self) -> None:
        owner = "EventSource"
        if not isinstance(self.kind, SourceKind):
            try:
                _set(self, "kind", SourceKind(self.kind))
            except ValueError as exc:
                allowed = ", ".join(k.value for k in SourceKind)
                raise _fail(owner, "kind", f"must be one of {allowed}; got {self.kind!r}") from exc
        for name in ("dag_id", "run_id", "task_id", "producer"):
            _check_str(owner, name, getattr(self, name), optional=True)
        for name in ("map_index", "try_number"):
            _check_int(owner, name, getattr(self, name), low=INT32_MIN, high=INT32_MAX, optional=True)

    def to_avro(self) -> dict[str, Any]:
        return {"kind": self.kind.value, **_identity_to_avro(self), "producer": self.producer}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> EventSource:
        return cls(kind=record["kind"], producer=record.get("producer"), **_identity_from_avro(record))


@dataclass(frozen=True)
class AssetEventEnvelope:
    """An explicit event about an asset.

    ``extra`` is a JSON object (dict with str keys, JSON values); ``partition_date``
    requires ``partition_key``; ``causation`` lists the ``event_id`` of the events
    that led to this one.
    """

    AVRO_SCHEMA_NAME: ClassVar[str] = ASSET_EVENT_ENVELOPE

    asset: AssetRef
    event_id: str = field(default_factory=_new_event_id)
    partition_key: str | None = None
    partition_date: datetime | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    source: EventSource = EventSource(SourceKind.EXTERNAL)
    emitted_at: datetime = field(default_factory=_utcnow)
    causation: tuple[str, ...] = ()
    signature: bytes | None = None
    #: ``extra``'s JSON texts exactly as they were on the wire (decoded envelopes only): what a
    #: producer in another language signed, kept verbatim for the signature check
    wire_extra: Mapping[str, str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        owner = "AssetEventEnvelope"
        if not isinstance(self.asset, AssetRef):
            raise _fail(owner, "asset", f"must be an AssetRef, got {type(self.asset).__qualname__}")
        _check_str(owner, "event_id", self.event_id, non_empty=True)
        _check_str(owner, "partition_key", self.partition_key, optional=True)
        if self.partition_date is not None:
            if self.partition_key is None:
                raise _fail(owner, "partition_date", "requires partition_key")
            _set(self, "partition_date", _utc(owner, "partition_date", self.partition_date))
        _set(self, "extra", _str_map(owner, "extra", self.extra, str_values=False))
        _check_str(owner, "idempotency_key", self.idempotency_key, optional=True)
        if not isinstance(self.source, EventSource):
            raise _fail(owner, "source", f"must be an EventSource, got {type(self.source).__qualname__}")
        _set(self, "emitted_at", _utc(owner, "emitted_at", self.emitted_at))
        if isinstance(self.causation, (str, bytes)) or not isinstance(self.causation, Iterable):
            raise _fail(
                owner,
                "causation",
                f"must be a sequence of event ids, got {type(self.causation).__qualname__}",
            )
        causation = tuple(self.causation)
        for index, item in enumerate(causation):
            _check_str(owner, f"causation[{index}]", item, non_empty=True)
        _set(self, "causation", causation)
        if self.signature is not None:
            if not isinstance(self.signature, (bytes, bytearray, memoryview)):
                raise _fail(
                    owner, "signature", f"must be bytes or None, got {type(self.signature).__qualname__}"
                )
            _set(self, "signature", bytes(self.signature))

    def to_avro(self) -> dict[str, Any]:
        """The Avro record dict; ``EnvelopeEncodeError`` if ``extra`` holds a non-JSON value."""
        return {
            "event_id": self.event_id,
            "asset": self.asset.to_avro(),
            "partition_key": self.partition_key,
            "partition_date": self.partition_date,
            "extra": {key: json_to_text(value, what=f"extra[{key!r}]") for key, value in self.extra.items()},
            "idempotency_key": self.idempotency_key,
            "source": self.source.to_avro(),
            "emitted_at": self.emitted_at,
            "causation": list(self.causation),
            "signature": self.signature,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> AssetEventEnvelope:
        partition_date = record.get("partition_date")
        extra = record.get("extra") or {}
        return cls(
            asset=AssetRef.from_avro(record["asset"]),
            event_id=record["event_id"],
            partition_key=record.get("partition_key"),
            partition_date=None if partition_date is None else _timestamp_from_avro(partition_date),
            extra={key: json_from_text(text, what=f"extra[{key!r}]") for key, text in extra.items()},
            idempotency_key=record.get("idempotency_key"),
            source=EventSource.from_avro(record["source"]),
            emitted_at=_timestamp_from_avro(record["emitted_at"]),
            causation=tuple(record.get("causation") or ()),
            signature=record.get("signature"),
            wire_extra=dict(extra),
        )

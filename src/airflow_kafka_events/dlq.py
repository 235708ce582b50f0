"""Dead-letter records: the refused Kafka record, unchanged, plus headers that say why.

A consumer that refuses a record (undecodable bytes, an unknown schema, a failed signature or
allowlist check, a causation chain that is too deep ...) writes it to a dead-letter topic with
:class:`DeadLetterWriter` and waits for the broker's acknowledgement before it moves past the
record, so that nothing it refuses is lost.

Record format:

* **value** and **key**: the original record's, byte for byte (replay = produce them again);
* **headers**: the original headers, except any named like the ones below (a record
  dead-lettered twice carries only the latest reason), followed by:

  ==========================  =====================================================================
  ``x-reason``                short code: ``undecodable``, ``unknown-schema``, ``invalid-envelope``,
                              ``signature-missing``, ``signature-invalid``,
                              ``signing-key-unavailable``, ``not-allowed``, ``causation-too-deep``,
                              ``internal-error`` (see :class:`DeadLetterReason`)
  ``x-error-type``            qualified name of the exception that refused it
  ``x-error-message``         its message (at most 1000 characters)
  ``x-source-topic``          topic, partition, offset of the original record
  ``x-source-partition``
  ``x-source-offset``
  ``x-source-timestamp``      the original record's timestamp, ms since the epoch (when known)
  ``x-consumer``              who refused it (e.g. the watcher's asset and consumer group)
  ``x-event-id``              the envelope's event id / asset URI, when the bytes decoded
  ``x-asset-uri``
  ``x-dead-lettered-at``      UTC ISO-8601 instant the record was refused
  ==========================  =====================================================================

  All header values are UTF-8 text.  :meth:`DeadLetter.from_headers` reads them back.

A dead-letter topic can receive the same record more than once (a redelivery after a crash
between the write and the offset commit): readers should tolerate duplicates, e.g. by
``(x-source-topic, x-source-partition, x-source-offset)``.

This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Protocol

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.producer import DeliveryReceipt

__all__ = [
    "DEAD_LETTER_HEADERS",
    "HEADER_ASSET_URI",
    "HEADER_CONSUMER",
    "HEADER_DEAD_LETTERED_AT",
    "HEADER_ERROR_MESSAGE",
    "HEADER_ERROR_TYPE",
    "HEADER_EVENT_ID",
    "HEADER_REASON",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TIMESTAMP",
    "HEADER_SOURCE_TOPIC",
    "MAX_ERROR_MESSAGE_CHARS",
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetterWriter",
    "dead_letter_headers",
    "error_type_name",
]

HEADER_REASON = "x-reason"
HEADER_ERROR_TYPE = "x-error-type"
HEADER_ERROR_MESSAGE = "x-error-message"
HEADER_SOURCE_TOPIC = "x-source-topic"
HEADER_SOURCE_PARTITION = "x-source-partition"
HEADER_SOURCE_OFFSET = "x-source-offset"
HEADER_SOURCE_TIMESTAMP = "x-source-timestamp"
HEADER_CONSUMER = "x-consumer"
HEADER_EVENT_ID = "x-event-id"
HEADER_ASSET_URI = "x-asset-uri"
HEADER_DEAD_LETTERED_AT = "x-dead-lettered-at"

#: Every header name this module writes (original headers with these names are dropped).
DEAD_LETTER_HEADERS: frozenset[str] = frozenset(
    {
        HEADER_REASON,
        HEADER_ERROR_TYPE,
        HEADER_ERROR_MESSAGE,
        HEADER_SOURCE_TOPIC,
        HEADER_SOURCE_PARTITION,
        HEADER_SOURCE_OFFSET,
        HEADER_SOURCE_TIMESTAMP,
        HEADER_CONSUMER,
        HEADER_EVENT_ID,
        HEADER_ASSET_URI,
        HEADER_DEAD_LETTERED_AT,
    }
)

#: Longest ``x-error-message`` written; longer messages are cut and end with "...".
MAX_ERROR_MESSAGE_CHARS = 1000

Header = tuple[str, "bytes | str | None"]


class DeadLetterReason(str, Enum):
    """Why a record was dead-lettered (the ``x-reason`` header)."""

    #: The bytes are not an asset event envelope: unknown framing, truncated, invalid Avro.
    UNDECODABLE = "undecodable"
    #: Well framed, but written with a schema this consumer does not know (another envelope type,
    #: a newer version).
    UNKNOWN_SCHEMA = "unknown-schema"
    #: Decoded, but the envelope's fields are invalid.
    INVALID_ENVELOPE = "invalid-envelope"
    #: The consumer requires signed events and the event has no signature.
    SIGNATURE_MISSING = "signature-missing"
    #: The signature matches no accepted key.
    SIGNATURE_INVALID = "signature-invalid"
    #: The consumer could not load its signing key, so it could not verify the event.
    SIGNING_KEY_UNAVAILABLE = "signing-key-unavailable"
    #: The event's source matches no rule of the consumer's allowlist.
    NOT_ALLOWED = "not-allowed"
    #: The event's causation chain is longer than the consumer accepts (feedback loop).
    CAUSATION_TOO_DEEP = "causation-too-deep"
    #: The consumer failed while checking the record (a bug); the record is kept for replay.
    INTERNAL_ERROR = "internal-error"


def error_type_name(exc: BaseException | type[BaseException]) -> str:
    """``module.QualName`` of an exception (or class); builtins without the module."""
    kind = exc if isinstance(exc, type) else type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", errors="replace")


def _cut(message: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


@dataclass(frozen=True)
class DeadLetter:
    """Why and where from a record was refused: what the ``x-*`` headers carry."""

    reason: str
    error_type: str
    error_message: str
    source_topic: str
    source_partition: int
    source_offset: int
    source_timestamp_ms: int | None = None
    consumer: str | None = None
    event_id: str | None = None
    asset_uri: str | None = None
    dead_lettered_at: datetime = field(default_factory=_utcnow)

    def __post_init__(self) -> None:
        if isinstance(self.reason, DeadLetterReason):
            object.__setattr__(self, "reason", self.reason.value)
        for name in ("reason", "error_type", "source_topic"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValidationError(f"DeadLetter.{name} must be a non-empty str, got {value!r}")
        if not isinstance(self.error_message, str):
            raise ValidationError("DeadLetter.error_message must be a str")
        object.__setattr__(self, "error_message", _cut(self.error_message))
        for name in ("source_partition", "source_offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationError(f"DeadLetter.{name} must be an int, got {value!r}")
        stamp = self.dead_lettered_at
        if not isinstance(stamp, datetime) or stamp.tzinfo is None:
            raise ValidationError("DeadLetter.dead_lettered_at must be a timezone-aware datetime")
        object.__setattr__(self, "dead_lettered_at", stamp.astimezone(timezone.utc))

    @classmethod
    def from_exception(
        cls,
        reason: DeadLetterReason | str,
        exc: BaseException,
        *,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int | None = None,
        consumer: str | None = None,
        event_id: str | None = None,
        asset_uri: str | None = None,
    ) -> DeadLetter:
        return cls(
            reason=reason.value if isinstance(reason, DeadLetterReason) else reason,
            error_type=error_type_name(exc),
            error_message=str(exc),
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            source_timestamp_ms=timestamp_ms,
            consumer=consumer,
            event_id=event_id,
            asset_uri=asset_uri,
        )

    def headers(self) -> list[tuple[str, bytes]]:
        """The ``x-*`` headers, in a fixed order; optional ones only when set."""
        values: list[tuple[str, str | None]] = [
            (HEADER_REASON, self.reason),
            (HEADER_ERROR_TYPE, self.error_type),
            (HEADER_ERROR_MESSAGE, self.error_message),
            (HEADER_SOURCE_TOPIC, self.source_topic),
            (HEADER_SOURCE_PARTITION, str(self.source_partition)),
            (HEADER_SOURCE_OFFSET, str(self.source_offset)),
            (
                HEADER_SOURCE_TIMESTAMP,
                None if self.source_timestamp_ms is None else str(self.source_timestamp_ms),
            ),
            (HEADER_CONSUMER, self.consumer),
            (HEADER_EVENT_ID, self.event_id),
            (HEADER_ASSET_URI, self.asset_uri),
            (HEADER_DEAD_LETTERED_AT, self.dead_lettered_at.isoformat(timespec="microseconds")),
        ]
        return [(name, value.encode("utf-8")) for name, value in values if value is not None]

    @classmethod
    def from_headers(cls, headers: Iterable[Header] | Mapping[str, bytes | str | None] | None) -> DeadLetter:
        """Read a dead-letter record's ``x-*`` headers back (the last value of a name wins)."""
        items = headers.items() if isinstance(headers, Mapping) else (headers or [])
        found: dict[str, str | None] = {}
        for name, value in items:
            if name in DEAD_LETTER_HEADERS:
                found[name] = _text(value)

        def required(name: str) -> str:
            value = found.get(name)
            if value is None:
                raise ValidationError(f"the record has no {name!r} header: not a dead-letter record")
            return value

        def number(name: str) -> int:
            value = required(name)
            try:
                return int(value)
            except ValueError as exc:
                raise ValidationError(f"header {name!r} is not an int: {value!r}") from exc

        stamp = found.get(HEADER_DEAD_LETTERED_AT)
        return cls(
            reason=required(HEADER_REASON),
            error_type=required(HEADER_ERROR_TYPE),
            error_message=found.get(HEADER_ERROR_MESSAGE) or "",
            source_topic=required(HEADER_SOURCE_TOPIC),
            source_partition=number(HEADER_SOURCE_PARTITION),
            source_offset=number(HEADER_SOURCE_OFFSET),
            source_timestamp_ms=(
                number(HEADER_SOURCE_TIMESTAMP) if found.get(HEADER_SOURCE_TIMESTAMP) is not None else None
            ),
            consumer=found.get(HEADER_CONSUMER),
            event_id=found.get(HEADER_EVENT_ID),
            asset_uri=found.get(HEADER_ASSET_URI),
            dead_lettered_at=datetime.fromisoformat(stamp) if stamp else _utcnow(),
        )


def dead_letter_headers(original: Sequence[Header] | None, letter: DeadLetter) -> list[Header]:
    """The headers of the dead-letter record: ``original`` minus ``x-*`` names we write, then ours."""
    kept: list[Header] = [
        (name, value) for name, value in (original or ()) if name not in DEAD_LETTER_HEADERS
    ]
    return [*kept, *letter.headers()]


class _Producer(Protocol):
    """What :class:`DeadLetterWriter` needs of a producer (an ``EnvelopeProducer`` fits)."""

    def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = ...,
        headers: Any = ...,
        partition: int | None = ...,
        timeout: float = ...,
    ) -> DeliveryReceipt: ...

    async def send_async(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = ...,
        headers: Any = ...,
        partition: int | None = ...,
        timeout: float = ...,
    ) -> DeliveryReceipt: ...


class DeadLetterWriter:
    """Writes refused records to ``topic`` and waits for the broker's acknowledgement.

    ``producer`` should be idempotent with ``acks=all`` (an
    :class:`~airflow_kafka_events.kafka.producer.EnvelopeProducer`); a failed delivery raises
    :class:`~airflow_kafka_events.errors.DeliveryError` (or another
    :class:`~airflow_kafka_events.errors.KafkaOperationError`): the caller must then not move
    past the record.
    """

    def __init__(self, producer: _Producer, topic: str, *, timeout: float = 30.0) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValidationError(f"dead-letter topic must be a non-empty str, got {topic!r}")
        self.producer = producer
        self.topic = topic
        self.timeout = timeout

    def write(
        self,
        letter: DeadLetter,
        *,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> DeliveryReceipt:
        """Write one dead-letter record and block until it is acknowledged."""
        return self.producer.send_and_wait(
            self.topic,
            value,
            key=key,
            headers=dead_letter_headers(headers, letter),
            timeout=self.timeout,
        )

    async def awrite(
        self,
        letter: DeadLetter,
        *,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> DeliveryReceipt:
        """Write one dead-letter record and await its acknowledgement without blocking the loop."""
        return await self.producer.send_async(
            self.topic,
            value,
            key=key,
            headers=dead_letter_headers(headers, letter),
            timeout=self.timeout,
        )

"""Dead-letter records: the refused Kafka record, unchanged, plus headers that say why.

A consumer that refuses a record (undecodable bytes, an unknown schema, a failed signature or
allowlist check, a causation chain that is too deep ...) writes it to a dead-letter topic with
:class:`~airflow_kafka_events.dead_letters.writer.DeadLetterWriter` and waits for the broker's
acknowledgement before it moves past the
record, so that nothing it refuses is lost.

Record format:

* **value** and **key**: the original record's, byte for byte (replay = produce them again);
* **headers**: the original headers, except any named like the ones below (a record
  dead-lettered twice carries only the latest reason), followed by:

  ==========================  =====================================================================
  ``x-reason``                short code: ``undecodable``, ``unknown-schema``, ``invalid-envelope``,
                              ``too-large``, ``signature-missing``, ``signature-invalid``,
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
  ``x-truncated``             ``true`` on a *reference* dead letter (below), absent otherwise
  ``x-truncated-cause``       why the whole record could not be written (the limit, or the error)
  ``x-original-value-bytes``  size of the original value (the dead letter holds a prefix of it)
  ``x-original-headers-dropped``  how many original headers were left out (only when > 0)
  ==========================  =====================================================================

  All header values are UTF-8 text.  :meth:`DeadLetter.from_headers` reads them back.

How a dead letter is written, and what happens to one the dead-letter topic cannot carry:
:mod:`airflow_kafka_events.dead_letters.writer`.

This module imports no Airflow module.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from airflow_kafka_events.dead_letters.headers import (
    HEADER_ASSET_URI,
    HEADER_CONSUMER,
    HEADER_DEAD_LETTERED_AT,
    HEADER_ERROR_MESSAGE,
    HEADER_ERROR_TYPE,
    HEADER_EVENT_ID,
    HEADER_ORIGINAL_HEADERS_DROPPED,
    HEADER_ORIGINAL_VALUE_BYTES,
    HEADER_REASON,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TIMESTAMP,
    HEADER_SOURCE_TOPIC,
    HEADER_TRUNCATED,
    HEADER_TRUNCATED_CAUSE,
    WRITTEN_HEADERS,
    DeadLetterReason,
)
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.consumer import SourceRecord
from airflow_kafka_events.kafka.record_size import (
    Header,
)

if TYPE_CHECKING:
    from airflow_kafka_events.envelopes.model import AssetEventEnvelope

log = logging.getLogger(__name__)

__all__ = [
    "MAX_ERROR_MESSAGE_CHARS",
    "REFERENCE_MAX_HEADER_BYTES",
    "REFERENCE_MAX_KEY_BYTES",
    "REFERENCE_PREFIX_BYTES",
    "DeadLetter",
    "dead_letter_headers",
    "error_type_name",
]


#: Longest ``x-error-message`` written; longer messages are cut and end with "...".
MAX_ERROR_MESSAGE_CHARS = 1000
#: Bytes of the original value a reference dead letter keeps.
REFERENCE_PREFIX_BYTES = 4096
#: Bytes (names and values) of original headers a reference dead letter keeps, in order.
REFERENCE_MAX_HEADER_BYTES = 16 * 1024
#: Longest key a reference dead letter keeps (a longer one is cut).
REFERENCE_MAX_KEY_BYTES = 4096


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
    #: A reference dead letter: the value is only a prefix of the original (see the module doc).
    truncated: bool = False
    truncated_cause: str | None = None
    original_value_bytes: int | None = None
    original_headers_dropped: int = 0

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
        self._check_ints(("source_partition", "source_offset"), minimum=None)
        self._check_ints(("original_value_bytes", "original_headers_dropped"), minimum=0)
        stamp = self.dead_lettered_at
        if not isinstance(stamp, datetime) or stamp.tzinfo is None:
            raise ValidationError("DeadLetter.dead_lettered_at must be a timezone-aware datetime")
        object.__setattr__(self, "dead_lettered_at", stamp.astimezone(timezone.utc))
        if self.truncated_cause is not None:
            object.__setattr__(self, "truncated_cause", _cut(self.truncated_cause))

    def _check_ints(self, names: Sequence[str], *, minimum: int | None) -> None:
        """Ints (``None`` allowed only where ``minimum`` is set: the optional sizes)."""
        for name in names:
            value = getattr(self, name)
            if value is None and minimum is not None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < (minimum or -(2**63)):
                bound = "an int" if minimum is None else f"an int >= {minimum}"
                raise ValidationError(f"DeadLetter.{name} must be {bound}, got {value!r}")

    def as_reference(self, cause: str, *, original_value_bytes: int, headers_dropped: int = 0) -> DeadLetter:
        """This letter for a reference dead letter (the value cut to a prefix, see the module doc)."""
        return dataclasses.replace(
            self,
            truncated=True,
            truncated_cause=cause,
            original_value_bytes=original_value_bytes,
            original_headers_dropped=headers_dropped,
        )

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

    @classmethod
    def of_record(
        cls,
        reason: DeadLetterReason | str,
        exc: BaseException,
        record: SourceRecord,
        envelope: AssetEventEnvelope | None,
        *,
        consumer: str,
    ) -> DeadLetter:
        """The dead letter of a consumed ``record`` refused for ``reason`` (``envelope``: if it decoded)."""
        return cls.from_exception(
            reason,
            exc,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            timestamp_ms=record.timestamp_ms,
            consumer=consumer,
            event_id=None if envelope is None else envelope.event_id,
            asset_uri=None if envelope is None else envelope.asset.uri,
        )

    def headers(self) -> list[tuple[str, bytes]]:
        """The ``x-*`` headers, in a fixed order; optional ones only when set."""
        values: list[tuple[str, object]] = [
            (HEADER_REASON, self.reason),
            (HEADER_ERROR_TYPE, self.error_type),
            (HEADER_ERROR_MESSAGE, self.error_message),
            (HEADER_SOURCE_TOPIC, self.source_topic),
            (HEADER_SOURCE_PARTITION, self.source_partition),
            (HEADER_SOURCE_OFFSET, self.source_offset),
            (HEADER_SOURCE_TIMESTAMP, self.source_timestamp_ms),
            (HEADER_CONSUMER, self.consumer),
            (HEADER_EVENT_ID, self.event_id),
            (HEADER_ASSET_URI, self.asset_uri),
            (HEADER_DEAD_LETTERED_AT, self.dead_lettered_at.isoformat(timespec="microseconds")),
        ]
        if self.truncated:
            values += [
                (HEADER_TRUNCATED, "true"),
                (HEADER_TRUNCATED_CAUSE, self.truncated_cause),
                (HEADER_ORIGINAL_VALUE_BYTES, self.original_value_bytes),
                (HEADER_ORIGINAL_HEADERS_DROPPED, self.original_headers_dropped or None),
            ]
        return [(name, str(value).encode("utf-8")) for name, value in values if value is not None]

    @classmethod
    def from_headers(cls, headers: Iterable[Header] | Mapping[str, bytes | str | None] | None) -> DeadLetter:
        """Read a dead-letter record's ``x-*`` headers back (the last value of a name wins)."""
        items = headers.items() if isinstance(headers, Mapping) else (headers or [])
        found: dict[str, str | None] = {}
        for name, value in items:
            if name in WRITTEN_HEADERS:
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

        def optional_number(name: str) -> int | None:
            return number(name) if found.get(name) is not None else None

        stamp = found.get(HEADER_DEAD_LETTERED_AT)
        return cls(
            reason=required(HEADER_REASON),
            error_type=required(HEADER_ERROR_TYPE),
            error_message=found.get(HEADER_ERROR_MESSAGE) or "",
            source_topic=required(HEADER_SOURCE_TOPIC),
            source_partition=number(HEADER_SOURCE_PARTITION),
            source_offset=number(HEADER_SOURCE_OFFSET),
            source_timestamp_ms=optional_number(HEADER_SOURCE_TIMESTAMP),
            consumer=found.get(HEADER_CONSUMER),
            event_id=found.get(HEADER_EVENT_ID),
            asset_uri=found.get(HEADER_ASSET_URI),
            dead_lettered_at=datetime.fromisoformat(stamp) if stamp else _utcnow(),
            truncated=found.get(HEADER_TRUNCATED) == "true",
            truncated_cause=found.get(HEADER_TRUNCATED_CAUSE),
            original_value_bytes=optional_number(HEADER_ORIGINAL_VALUE_BYTES),
            original_headers_dropped=optional_number(HEADER_ORIGINAL_HEADERS_DROPPED) or 0,
        )


def dead_letter_headers(original: Sequence[Header] | None, letter: DeadLetter) -> list[Header]:
    """The headers of the dead-letter record: ``original`` minus ``x-*`` names we write, then ours."""
    kept: list[Header] = [(name, value) for name, value in (original or ()) if name not in WRITTEN_HEADERS]
    return [*kept, *letter.headers()]

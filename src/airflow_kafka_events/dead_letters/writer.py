"""Writing dead letters: :class:`DeadLetterWriter` produces a dead letter
(:mod:`airflow_kafka_events.dead_letters.letter`) and waits for the broker's acknowledgement, so
that nothing a consumer refuses is lost.

Records the dead-letter topic cannot carry
    A record larger than the dead-letter producer may send (librdkafka's ``message.max.bytes``,
    default 1,000,000 bytes) or than the dead-letter topic accepts (the topic's
    ``max.message.bytes``) is written as a **reference** instead of failing for ever: the value
    is cut to its first ``REFERENCE_PREFIX_BYTES`` bytes, the original headers are kept up to
    ``REFERENCE_MAX_HEADER_BYTES`` bytes in all, the key up to ``REFERENCE_MAX_KEY_BYTES``
    bytes (the letter's limits), and ``x-truncated: true``, ``x-truncated-cause`` and
    ``x-original-value-bytes`` say so;
    the source coordinates (``x-source-*``) locate the whole record while the source topic keeps
    it.  If even that does not fit, a bare reference (empty value, no original headers) is
    written.  :class:`DeadLetterWriter` chooses the form by itself: a record it knows to be too
    large for ``message.max.bytes`` goes straight to the reference form, and a
    ``MSG_SIZE_TOO_LARGE`` / ``RECORD_LIST_TOO_LARGE`` answer (client or broker) makes it write
    the reference at once, never retrying the record that cannot fit.

A dead-letter topic can receive the same record more than once (a redelivery after a crash
between the write and the offset commit): readers should tolerate duplicates, e.g. by
``(x-source-topic, x-source-partition, x-source-offset)``.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_kafka_events.dead_letters.headers import (
    WRITTEN_HEADERS,
)
from airflow_kafka_events.dead_letters.letter import (
    REFERENCE_MAX_HEADER_BYTES,
    REFERENCE_MAX_KEY_BYTES,
    REFERENCE_PREFIX_BYTES,
    DeadLetter,
    dead_letter_headers,
)
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.record_size import (
    RECORD_OVERHEAD_BYTES,
    Header,
    _header_bytes,
    is_size_error,
    record_size,
)
from airflow_kafka_events.kafka.topics import client_message_max_bytes

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.producer import RecordProducer

log = logging.getLogger(__name__)

__all__ = ["DLQ_ROLE", "DLQ_TIMEOUT", "DeadLetterWriter"]


@dataclass(frozen=True)
class _Plan:
    """One form of a dead-letter record to try: what is produced."""

    value: bytes | None
    key: bytes | None
    headers: list[Header]


_RAISE_LIMITS = (
    "; to keep whole records raise max.message.bytes on the dead-letter topic and message.max.bytes "
    "on its producer"
)


#: Producer role of dead-letter writes, and how long a write waits for the broker: the role's
#: producer drops a letter it could not deliver by then, so a retried write never leaves a second
#: copy published later (``get_producer(config, role=DLQ_ROLE, message_timeout=DLQ_TIMEOUT)``).
DLQ_ROLE = "dead-letter"
DLQ_TIMEOUT = 30.0


class DeadLetterWriter:
    """Writes refused records to ``topic`` and waits for the broker's acknowledgement.

    ``producer`` should be idempotent with ``acks=all`` (an
    :class:`~airflow_kafka_events.kafka.producer.RecordProducer`).  A record too large for
    the producer (``max_message_bytes``, default the producer's ``message.max.bytes``) or for
    the topic is written as a reference (see the module doc) instead of failing.  Any other
    failed delivery raises :class:`~airflow_kafka_events.errors.DeliveryError` (or another
    :class:`~airflow_kafka_events.errors.KafkaOperationError`): the caller must then not move
    past the record.
    """

    def __init__(
        self,
        producer: RecordProducer,
        topic: str,
        *,
        timeout: float = 30.0,
        max_message_bytes: int | None = None,
        reference_prefix_bytes: int = REFERENCE_PREFIX_BYTES,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValidationError(f"dead-letter topic must be a non-empty str, got {topic!r}")
        if max_message_bytes is None:
            config = getattr(producer, "config", None)
            max_message_bytes = client_message_max_bytes(config if isinstance(config, Mapping) else {})
        for name, value in (("max_message_bytes", max_message_bytes), ("prefix", reference_prefix_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"{name} must be an int >= 0, got {value!r}")
        self.producer = producer
        self.topic = topic
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.reference_prefix_bytes = reference_prefix_bytes

    # ------------------------------------------------------------------ forms
    def _reference(
        self,
        letter: DeadLetter,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        cause: str,
        *,
        bare: bool = False,
    ) -> _Plan:
        original = list(headers or ())
        kept, dropped = _bounded_headers(original, 0 if bare else REFERENCE_MAX_HEADER_BYTES)
        if bare:
            dropped = len([name for name, _ in original if name not in WRITTEN_HEADERS])
        prefix = None if value is None else (b"" if bare else value[: self.reference_prefix_bytes])
        reference = letter.as_reference(
            cause, original_value_bytes=len(value) if value is not None else 0, headers_dropped=dropped
        )
        cut_key = key[: 256 if bare else REFERENCE_MAX_KEY_BYTES] if key is not None else None
        return _Plan(prefix, cut_key, [*kept, *reference.headers()])

    def _plans(
        self, letter: DeadLetter, value: bytes | None, key: bytes | None, headers: Sequence[Header] | None
    ) -> Generator[_Plan, BaseException, None]:
        """The forms to try, largest first; each next one is sent the size error of the previous."""
        whole = _Plan(value, key, dead_letter_headers(headers, letter))
        size = record_size(whole.value, whole.key, whole.headers)
        cause = f"the record is {size} bytes, over message.max.bytes={self.max_message_bytes} minus framing"
        if size + RECORD_OVERHEAD_BYTES <= self.max_message_bytes:
            cause = f"writing the whole record failed: {(yield whole)}"
        cause += _RAISE_LIMITS
        where = f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset}"
        log.warning("dead-lettering %s to %r as a reference: %s", where, self.topic, cause)
        error = yield self._reference(letter, value, key, headers, cause)
        log.warning("dead-lettering %s to %r as a bare reference: %s", where, self.topic, error)
        bare_cause = f"{cause}; a reference with a prefix did not fit either: {error}"
        yield self._reference(letter, value, key, headers, bare_cause, bare=True)

    @staticmethod
    def _next_plan(plans: Generator[_Plan, BaseException, None], exc: Exception) -> _Plan:
        """The next form after ``exc``; ``exc`` itself when it is no size error or no form is left."""
        if not is_size_error(exc):
            raise exc
        try:
            return plans.send(exc)
        except StopIteration:
            raise exc from None

    # ------------------------------------------------------------------ API
    def write(
        self,
        letter: DeadLetter,
        *,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> DeliveryReceipt:
        """Write one dead-letter record (whole, else a reference) and block until it is acknowledged."""
        plans = self._plans(letter, value, key, headers)
        plan = next(plans)
        while True:
            try:
                return self.producer.send_and_wait(
                    self.topic, plan.value, key=plan.key, headers=plan.headers, timeout=self.timeout
                )
            except Exception as exc:  # a size error moves on to the next form; others are raised
                plan = self._next_plan(plans, exc)

    async def awrite(
        self,
        letter: DeadLetter,
        *,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> DeliveryReceipt:
        """Like :meth:`write`, awaiting the acknowledgement without blocking the event loop."""
        plans = self._plans(letter, value, key, headers)
        plan = next(plans)
        while True:
            try:
                return await self.producer.send_async(
                    self.topic, plan.value, key=plan.key, headers=plan.headers, timeout=self.timeout
                )
            except Exception as exc:  # a size error moves on to the next form; others are raised
                plan = self._next_plan(plans, exc)


def _bounded_headers(original: Sequence[Header] | None, limit: int) -> tuple[list[Header], int]:
    """The original headers, in order, while their bytes stay within ``limit``; and how many were left."""
    kept: list[Header] = []
    used = 0
    items = [(name, value) for name, value in (original or ()) if name not in WRITTEN_HEADERS]
    for index, (name, value) in enumerate(items):
        size = _header_bytes(name, value)
        if used + size > limit:
            return kept, len(items) - index
        kept.append((name, value))
        used += size
    return kept, 0

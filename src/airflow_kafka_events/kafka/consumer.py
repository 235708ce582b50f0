"""Reading envelopes: a thin consumer that decodes, batches and commits explicitly.

Offsets are never auto-committed: callers commit the records they have fully handled
(:meth:`EnvelopeConsumer.commit`), so a crash re-delivers unhandled records instead of
losing them. Records that cannot be decoded are returned with ``error`` set (and their raw
bytes) rather than raised, so the caller can dead-letter them and keep going.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_events.errors import EnvelopeDecodeError, KafkaOperationError
from airflow_kafka_events.kafka.clients import new_consumer

log = logging.getLogger(__name__)

E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)


def consume_available(consumer: Consumer, max_messages: int, timeout: float) -> list[Message]:
    """Wait up to ``timeout`` for ONE message, then take what else is already fetched (no waiting).

    librdkafka's ``consume(n, timeout)`` returns only when ``n`` messages arrived or the whole
    timeout passed, so a lone record arriving mid-wait would sit until the timeout ends; this
    hands it over as soon as it arrives.  Raises ``KafkaException`` like ``consume``.
    """
    first = consumer.consume(num_messages=1, timeout=timeout)
    if not first or max_messages <= 1:
        return list(first)
    return [*first, *consumer.consume(num_messages=max_messages - 1, timeout=0)]


class RecordDecoder(Protocol[E_co]):
    """Turns a record's value into what a consumer hands out (a codec, or :data:`RAW_BYTES`)."""

    def decode(self, data: bytes) -> E_co: ...


class _RawBytes:
    """A decoder that keeps the value's bytes: the caller decodes (e.g. after a size check)."""

    def decode(self, data: bytes) -> bytes:
        return data


#: Pass as ``decoder`` to get each record's bytes in ``value`` (and ``raw``), undecoded.
RAW_BYTES: RecordDecoder[bytes] = _RawBytes()


@dataclass(frozen=True)
class ConsumedRecord(Generic[E]):
    """One consumed message: the decoded envelope, or the decode error and the raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None
    value: E | None
    raw: bytes | None
    error: EnvelopeDecodeError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class EnvelopeConsumer(Generic[E]):
    """A confluent-kafka consumer that yields decoded envelopes in batches."""

    def __init__(
        self,
        config: Mapping[str, Any],
        decoder: RecordDecoder[E],
        *,
        topics: Sequence[str] | None = None,
        assignment: Sequence[TopicPartition] | None = None,
    ) -> None:
        if bool(topics) == bool(assignment):
            raise ValueError("pass exactly one of topics (group subscription) or assignment")
        self._decoder = decoder
        self._consumer, self.health = new_consumer(config, name=f"consumer of {topics or assignment}")
        try:
            if topics:
                self._consumer.subscribe(list(topics))
            else:
                self._consumer.assign(list(assignment or ()))
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("cannot create Kafka consumer", exc) from exc

    @property
    def client(self) -> Consumer:
        return self._consumer

    def _record(self, msg: Message) -> ConsumedRecord[E]:
        raw = msg.value()
        value: E | None = None
        error: EnvelopeDecodeError | None = None
        if raw is None:
            error = EnvelopeDecodeError("message has no value (tombstone)")
        else:
            try:
                value = self._decoder.decode(raw)
            except EnvelopeDecodeError as exc:
                error = exc
        ts_type, ts = msg.timestamp()
        offset = msg.offset()
        return ConsumedRecord(
            topic=msg.topic() or "",
            partition=msg.partition() or 0,
            offset=-1 if offset is None else offset,
            key=msg.key() if isinstance(msg.key(), bytes) else None,
            headers=tuple(msg.headers() or ()),  # type: ignore[arg-type]
            timestamp_ms=ts if ts_type != 0 else None,
            value=value,
            raw=raw if isinstance(raw, bytes) else None,
            error=error,
        )

    def poll_batch(self, max_records: int = 500, timeout: float = 1.0) -> list[ConsumedRecord[E]]:
        """Return up to ``max_records`` records, waiting at most ``timeout`` seconds for the first."""
        try:
            messages = consume_available(self._consumer, max_records, timeout)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("consume failed", exc) from exc
        records: list[ConsumedRecord[E]] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaOperationError("consumer error", kafka_error=err)
            records.append(self._record(msg))
        return records

    def commit(self, records: Sequence[ConsumedRecord[Any]]) -> None:
        """Synchronously commit the position after the given records (per partition max + 1)."""
        positions: dict[tuple[str, int], int] = {}
        for r in records:
            positions[(r.topic, r.partition)] = max(positions.get((r.topic, r.partition), -1), r.offset)
        if not positions:
            return
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in positions.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("offset commit failed", exc) from exc

    def close(self) -> None:
        """Leave the group and release the client. Never raises."""
        try:
            self._consumer.close()
        except Exception as exc:  # closing must not mask the caller's own error
            log.warning("closing Kafka consumer failed: %s", exc)

    def __enter__(self) -> EnvelopeConsumer[E]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SourceRecord(Protocol):
    """Where a consumed record is: what a dead letter names as its source."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int | None: ...

"""Finding a stream's partition and where to read it from.

An explicit ``partition`` wins, then the checkpoint's.  Otherwise
:func:`~airflow_kafka_events.kafka.partitioner.partition_for_key` (murmur2, as the Java
clients and librdkafka's ``murmur2_random`` partitioner, which this package's producers use)
gives the partition directly.  For a stream written by a producer with another partitioner,
a reader made with ``scan_partitions=True`` assigns every partition of the topic and keeps
only the one where the stream's key first appears: correct with any partitioner, at the cost
of reading the other partitions until then.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, KafkaOperationError, TopicError
from airflow_kafka_events.kafka.consumer import ConsumedRecord

__all__ = [
    "TRANSIENT_CODES",
    "partition_count",
    "readable_offset",
    "rejected_record",
]

log = logging.getLogger(__name__)

#: Kafka errors on a consumed message that only mean "not right now".
TRANSIENT_CODES = frozenset(
    {
        KafkaError._PARTITION_EOF,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)
#: Topic metadata errors that mean "the topic is not there (yet)".
_TOPIC_MISSING_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})


def partition_count(consumer: Any, topic: str, timeout: float) -> int | None:
    """How many partitions ``topic`` has; ``None`` while it is missing or its metadata is out of reach.

    Raises :class:`KafkaOperationError` / :class:`TopicError` for errors that do not heal.
    """
    try:
        metadata = consumer.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and (error.retriable() or error.code() in TRANSIENT_CODES):
            return None
        raise KafkaOperationError.from_exception(f"cannot read metadata of topic {topic!r}", exc) from exc
    described = metadata.topics.get(topic)
    if described is None:
        return None
    if described.error is not None:
        if described.error.code() in _TOPIC_MISSING_CODES:
            return None
        raise TopicError(f"cannot read topic {topic!r}", kafka_error=described.error)
    return len(described.partitions) or None


def readable_offset(
    consumer: Any, topic: str, partition: int, offset: int, *, timeout: float, where: str
) -> int | None:
    """``offset`` if the partition still holds it, ``None`` when retention removed it."""
    try:
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout, cached=False
        )
    except KafkaException as exc:
        raise KafkaOperationError.from_exception(f"cannot read the offsets of {where}", exc) from exc
    if offset < low:
        log.info(
            "%s: checkpoint offset %d is gone (log starts at %d); reading from the beginning",
            where,
            offset,
            low,
        )
        return None
    return offset


def _headers(msg: Message) -> tuple[tuple[str, bytes | None], ...]:
    items = msg.headers() or ()
    pairs = items.items() if isinstance(items, Mapping) else items
    return tuple((str(k), v.encode("utf-8") if isinstance(v, str) else v) for k, v in pairs)


def rejected_record(
    msg: Message, topic: str, key: bytes, exc: EnvelopeDecodeError
) -> ConsumedRecord[TriggerEventEnvelope]:
    """A record of the stream that could not be decoded, with its raw bytes (for a dead-letter topic)."""
    raw = msg.value()
    ts_type, ts = msg.timestamp()
    offset = msg.offset()
    return ConsumedRecord(
        topic=msg.topic() or topic,
        partition=msg.partition() or 0,
        offset=-1 if offset is None else offset,
        key=key,
        headers=_headers(msg),
        timestamp_ms=ts if ts_type != 0 else None,
        value=None,
        raw=raw if isinstance(raw, bytes) else None,
        error=exc,
    )

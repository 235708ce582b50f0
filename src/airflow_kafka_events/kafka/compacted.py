"""Reading a compacted topic: the latest value of some keys, or of every key.

A compacted topic keeps (at least) the latest record of each key; its readers here read a
partition from a start offset to its high watermark as it is when the read begins, and keep the
latest value per key (a tombstone, ``None``, forgets the key).  Used for the watchers' clean-stop
marks (:mod:`airflow_kafka_events.watcher.stops`: the keys of the watchers starting, in the
partitions they hash to)
and the stream index (:mod:`airflow_kafka_events.streams.index`: every key, every partition, or only
the records after an earlier read's positions).

Both are blocking (call them on a thread from async code) and bounded by one deadline.  A topic
that does not exist raises what ``missing()`` builds (an error that names the option and the fix).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_events.kafka.settings import KafkaSettings

__all__ = [
    "CompactedRead",
    "read_compacted",
    "read_compacted_keys",
]

#: Records asked of librdkafka per ``consume()`` call.
CONSUME_BATCH = 5000


@dataclass
class CompactedRead:
    """What a read of a compacted topic found: the latest value per key, and where it stopped."""

    #: key -> its latest value read (``None``: a tombstone)
    latest: dict[bytes, bytes | None] = field(default_factory=dict)
    #: partition -> the next offset to read (the high watermark the read went up to)
    positions: dict[int, int] = field(default_factory=dict)
    #: records read
    records: int = 0
    #: ``after`` named a partition whose offsets no longer hold it (the topic was recreated): it was
    #: read from its start, so what an earlier read found is stale
    restarted: bool = False


def _new_reader(settings: KafkaSettings, purpose: str) -> Any:
    from airflow_kafka_events.kafka.assigned_reader import bounded_read_config
    from airflow_kafka_events.kafka.clients import new_consumer

    consumer, _ = new_consumer(
        bounded_read_config(settings, purpose, **{"fetch.wait.max.ms": 10}), name=purpose
    )
    return consumer


def _partitions(consumer: Any, topic: str, timeout: float, missing: Callable[[], Exception]) -> list[int]:
    found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise missing()
    return sorted(found.partitions)


def _take(msg: Any, todo: dict[int, int], on_record: Callable[[Any], None]) -> bool:
    """Hand ``msg`` to ``on_record`` when it is in its partition's range; whether it was.  A partition's
    end (its EOF, or the last offset of its range) takes it out of ``todo``."""
    from confluent_kafka import KafkaError, KafkaException

    error = msg.error()
    partition = msg.partition()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            todo.pop(partition, None)
        elif not error.retriable():
            raise KafkaException(error)
        return False
    end = todo.get(partition)
    if end is None:
        return False
    offset = msg.offset() or 0
    if offset >= end - 1:
        todo.pop(partition, None)
    if offset >= end:
        return False
    on_record(msg)
    return True


def _read_ranges(
    consumer: Any,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    deadline: float,
    on_record: Callable[[Any], None],
) -> int:
    """Hand every record of ``ranges`` (partition -> [start, end)) to ``on_record``; the count read."""
    from confluent_kafka import TopicPartition

    todo = {p: end for p, (start, end) in ranges.items() if end > start}
    if not todo:
        return 0
    consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in todo])
    count = 0
    while todo:
        left = deadline - time.monotonic()
        if left <= 0:
            parts = ", ".join(str(p) for p in sorted(todo))
            raise TimeoutError(f"reading the compacted topic {topic!r} (partition(s) {parts}) took too long")
        for msg in consumer.consume(num_messages=CONSUME_BATCH, timeout=min(1.0, left)):
            count += _take(msg, todo, on_record)
    return count


def read_compacted_keys(
    settings: KafkaSettings,
    topic: str,
    keys: Collection[bytes],
    *,
    timeout: float,
    purpose: str,
    missing: Callable[[], Exception],
) -> dict[bytes, bytes | None]:
    """The latest value of each of ``keys`` (``None``: it has none, or a tombstone), from the
    partitions they are in only."""
    from confluent_kafka import TopicPartition

    from airflow_kafka_events.kafka.partitioner import partition_for_key

    deadline = time.monotonic() + timeout
    wanted = set(keys)
    latest: dict[bytes, bytes | None] = dict.fromkeys(wanted)
    if not wanted:
        return latest
    consumer = _new_reader(settings, purpose)
    try:
        count = len(_partitions(consumer, topic, timeout, missing))
        ranges: dict[int, tuple[int, int]] = {}
        for partition in sorted({partition_for_key(key, count) for key in wanted}):
            ranges[partition] = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic())
            )

        def keep(msg: Any) -> None:
            key = msg.key()
            if key in wanted:
                latest[key] = msg.value()

        _read_ranges(consumer, topic, ranges, deadline, keep)
        return latest
    finally:
        consumer.close()


def read_compacted(
    settings: KafkaSettings,
    topic: str,
    *,
    timeout: float,
    purpose: str,
    missing: Callable[[], Exception],
    after: Mapping[int, int] | None = None,
) -> CompactedRead:
    """The latest value of every key of ``topic`` (every partition up to its end as it is now).

    ``after`` (partition -> offset, an earlier read's :attr:`CompactedRead.positions`): read only
    from there; a partition whose offsets went back (the topic was recreated) is read from its start.
    """
    from confluent_kafka import TopicPartition

    deadline = time.monotonic() + timeout
    consumer = _new_reader(settings, purpose)
    try:
        partitions = _partitions(consumer, topic, timeout, missing)
        ranges: dict[int, tuple[int, int]] = {}
        restarted = False
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic())
            )
            start = low
            if after is not None and partition in after:
                if low <= after[partition] <= high:
                    start = after[partition]
                else:
                    restarted = True
            ranges[partition] = (start, high)
        result = CompactedRead(positions={p: end for p, (_, end) in ranges.items()}, restarted=restarted)

        def keep(msg: Any) -> None:
            result.latest[msg.key() or b""] = msg.value()

        result.records = _read_ranges(consumer, topic, ranges, deadline, keep)
        return result
    finally:
        consumer.close()

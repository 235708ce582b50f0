"""Which watcher dead-letters a record that every watcher of its topic refuses: one, over all triggerers.

An undecodable record belongs to no asset, so every watcher reading its topic refuses it.  Within one
triggerer the first of them writes the dead letter (an in-process claim,
:data:`airflow_kafka_events.watcher.dead_letters.DEAD_LETTERED`); the watchers of another
triggerer cannot see that claim, so each triggerer would write one dead letter of the record.

So the watchers claim such a record in Kafka before writing: each appends a claim (the record's
coordinates, the dead-letter topic, the claiming watcher) to the watchers' compacted topic
(``[kafka_events] watcher_stops_topic``, :mod:`.stops`), every claim of one record in the same
partition of it (chosen by the record's coordinates), and reads that partition up to its own claim.
The first claim in the partition's log order wins, and every claimer sees the same first claim: only
its watcher writes the dead letter, the others move on.  A watcher is named by its connection and
asset (as its clean-stop mark is), the same in every run: one that claimed a record and stopped
before its dead letter was acknowledged reads the record again, finds its own claim first and
writes it then.  Each claim's key names its run too, so compaction keeps every claim.

A claim's partition is read from an hour before the record's timestamp (claims come after the
record; the hour covers clocks that disagree); a record without a timestamp, from the start.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.errors import TopicError

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import KafkaSettings

__all__ = [
    "CLAIM_READ_TIMEOUT",
    "CLAIM_WRITE_TIMEOUT",
    "DeadLetterClaims",
    "claim_partition",
]

#: Key prefix of a claim in the watchers' compacted topic.
CLAIM_PREFIX = b"dead-letter-claim:"
#: Seconds to wait for the broker's acknowledgement of a claim.
CLAIM_WRITE_TIMEOUT = 10.0
#: Seconds a claimer may spend reading the claims before its own.
CLAIM_READ_TIMEOUT = 15.0
#: How far before the record's timestamp the claims are read (ms).
CLOCK_MARGIN_MS = 3_600_000


def claim_partition(coordinates: list[Any], partitions: int) -> int:
    """The partition of the watchers' topic every claim of the record at ``coordinates`` goes to."""
    from airflow_kafka_events.kafka.partitioner import partition_for_key

    return partition_for_key(json.dumps(coordinates, separators=(",", ":")), partitions)


class DeadLetterClaims:
    """Claims of one watcher (``claimer``) in ``topic``, through ``producer`` and ``settings``."""

    def __init__(self, producer: RecordProducer, settings: KafkaSettings, topic: str, claimer: str) -> None:
        self.producer = producer
        self.settings = settings
        self.topic = topic
        self.claimer = claimer
        self.run = uuid.uuid4().hex
        self._partitions: int | None = None

    def _partition_count(self) -> int:
        if self._partitions is None:
            from confluent_kafka.admin import AdminClient

            admin = AdminClient(self.settings.admin_config())
            found = admin.list_topics(self.topic, timeout=CLAIM_READ_TIMEOUT).topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                raise TopicError(
                    f"the watchers' topic {self.topic!r} does not exist ([kafka_events] "
                    "watcher_stops_topic): create it with `airflow-kafka-events topics ensure`"
                )
            self._partitions = len(found.partitions)
        return self._partitions

    async def first_claimer(
        self, dlq_topic: str, topic: str, partition: int, offset: int, timestamp_ms: int | None
    ) -> str:
        """Claim the record at ``topic[partition]@offset`` for ``dlq_topic``; the watcher whose claim
        came first (this one's ``claimer`` when it won).  Raises the client's errors,
        :class:`TopicError` when the watchers' topic is missing, :class:`TimeoutError`."""
        import asyncio

        coordinates: list[Any] = [dlq_topic, topic, partition, offset]
        target = claim_partition(coordinates, await asyncio.to_thread(self._partition_count))
        key = CLAIM_PREFIX + json.dumps([*coordinates, self.claimer, self.run]).encode("utf-8")
        value = json.dumps({"claim": coordinates, "by": self.claimer}).encode("utf-8")
        receipt = await self.producer.send_async(
            self.topic, value, key=key, partition=target, timeout=CLAIM_WRITE_TIMEOUT
        )
        since = None if timestamp_ms is None or timestamp_ms <= 0 else timestamp_ms - CLOCK_MARGIN_MS
        return await asyncio.to_thread(self._first, coordinates, target, receipt.offset, since)

    def _start(self, consumer: Any, partition: int, own_offset: int, since_ms: int | None) -> int:
        """The offset of ``partition`` from which the claims are read."""
        from confluent_kafka import TopicPartition

        low, _high = consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=CLAIM_READ_TIMEOUT
        )
        if since_ms is None:
            return int(low)
        (found,) = consumer.offsets_for_times(
            [TopicPartition(self.topic, partition, since_ms)], timeout=CLAIM_READ_TIMEOUT
        )
        return int(low) if found.offset < 0 else max(int(low), min(found.offset, own_offset))

    def _first(self, coordinates: list[Any], partition: int, own_offset: int, since_ms: int | None) -> str:
        """The claimer of the first claim of ``coordinates`` in ``partition`` up to ``own_offset``."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        from airflow_kafka_events.kafka.assigned_reader import bounded_read_config
        from airflow_kafka_events.kafka.clients import new_consumer

        deadline = time.monotonic() + CLAIM_READ_TIMEOUT
        consumer, _ = new_consumer(bounded_read_config(self.settings, "dead-letter-claims"), name="claims")
        try:
            start = self._start(consumer, partition, own_offset, since_ms)
            consumer.assign([TopicPartition(self.topic, partition, start)])
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"reading the claims in {self.topic}[{partition}] took too long")
                msg = consumer.poll(min(1.0, left))
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue  # its own claim is acknowledged: it is on its way
                    raise KafkaException(error)
                claimer = _claimer_of(msg.key(), msg.value(), coordinates)
                if claimer is not None:
                    return claimer
                if (msg.offset() or 0) >= own_offset:
                    return self.claimer  # not reached: its own claim matches at the latest
        finally:
            consumer.close()


def _claimer_of(key: bytes | None, value: bytes | None, coordinates: list[Any]) -> str | None:
    """Who made the claim in this record when it is one of ``coordinates``."""
    if not (key or b"").startswith(CLAIM_PREFIX):
        return None
    try:
        claim = json.loads(value or b"")
    except ValueError:
        return None
    if isinstance(claim, dict) and claim.get("claim") == coordinates and isinstance(claim.get("by"), str):
        return str(claim["by"])
    return None

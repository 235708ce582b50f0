"""One Kafka reader per triggerer and topic for every deferred stream consumer waiting on it.

A deferred consumer's :class:`~airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger`
does not open a client of its own: it subscribes a feed to the process's shared reader of its topic
and connection (:data:`STREAM_WAIT_KIND` in
:data:`~airflow_kafka_events.kafka.shared_reader.SHARED_READERS`, see
:mod:`~airflow_kafka_events.kafka.shared_reader`).  So 200 waiting consumers on one topic cost
one client, not 200.

* **Routing by key.**  The reader decodes nothing: a record's routing key is its Kafka key (a
  stream's ``trigger_run_id``), so each record reaches the one waiter of its stream; the waiter's
  :class:`~airflow_kafka_events.streams.consuming.follower.StreamFollower` decodes its own records.
* **One partition per stream.**  The reader is scoped (``whole_topics=False``): it reads only the
  partitions its waiters' streams live on, and a feed follows only its stream's partition (the
  checkpoint's, else the key's by murmur2, as a
  :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` finds it).
* **Joining behind.**  A waiter whose checkpoint is behind what the shared reader read of its
  partition catches up with a private reader from its checkpoint, then merges; at most
  :data:`MAX_CATCH_UP` of those run at once per shared reader, the others wait for a slot.
* **Failures.**  The shared reader rides out what may pass (a broker down or restarting: its
  waiters keep waiting, and a waiter that starts meanwhile tries to subscribe again every
  :data:`TOPIC_RETRY` seconds) and fails its waiters only on what does not heal (credentials,
  TLS or authorization refused, the topic deleted); a record of the topic another stream wrote,
  or one that cannot be decoded, concerns one waiter at most (see
  :mod:`~airflow_kafka_events.kafka.shared_reader`, *Failures*).
* **A fixed group id** (:data:`WAIT_GROUP_ID`, never joined, nothing committed): the registry
  keys readers by their whole client configuration, so a per-stream group id would give one
  reader per stream again.

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Mapping
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka.assigned_reader import heals_by_retrying
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.positions import Partition
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_feed import READ_BATCH, Feed
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS, SharedReader
from airflow_kafka_events.streams.consuming.follower import StreamFollower
from airflow_kafka_events.streams.consuming.sequence import SequenceTracker

__all__ = [
    "MAX_CATCH_UP",
    "STREAM_WAIT_KIND",
    "WAIT_GROUP_ID",
    "StreamWatch",
    "shared_stream_reader",
    "wait_reader_config",
]

log = logging.getLogger(__name__)

#: :class:`~airflow_kafka_events.kafka.shared_reader.SharedReaders` kind of the waiters' readers.
STREAM_WAIT_KIND = "stream-wait"
#: The ``group.id`` of every waiters' reader (librdkafka wants one; it is never joined).
WAIT_GROUP_ID = "airflow-kafka-events-stream-wait"
#: Catch-up readers (each a Kafka client) of one shared waiters' reader running at once.
MAX_CATCH_UP = 4
#: Seconds between two tries to subscribe while the stream's topic does not exist or the brokers
#: cannot be reached.
TOPIC_RETRY = 1.0


def wait_reader_config(settings: KafkaSettings) -> dict[str, Any]:
    """The client configuration of the waiters' reader: the connection's, a fixed group id, no
    commits, a partition's end not reported, earliest reset (a checkpoint's offset gone: the start)."""
    return settings.consumer_config(
        WAIT_GROUP_ID,
        **{
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        },
    )


def _record_key(message: Message) -> bytes | None:
    key = message.key()
    return key if isinstance(key, bytes) or key is None else bytes(key)


def _route(key: bytes | None) -> list[Hashable]:
    return [key]


def shared_stream_reader(config: Mapping[str, Any], topic: str, poll_timeout: float) -> SharedReader:
    """This process's waiters' reader of ``topic`` with these client settings (pair with one
    ``release``: a feed's ``close`` does it)."""
    return SHARED_READERS.acquire(
        STREAM_WAIT_KIND,
        config,
        [topic],
        name=f"stream-waits-of-{topic}",
        decode=_record_key,
        route=_route,
        poll_timeout=poll_timeout,
        whole_topics=False,
        max_catch_up=MAX_CATCH_UP,
    )


class StreamWatch:
    """A waiting trigger's view of its stream: a feed of the shared reader into a follower.

    :meth:`fill` subscribes on its first call (and again while the topic does not exist), then
    takes in what the feed hands over; :attr:`tracker` tells where the stream is.  A
    checkpoint past the stream's end subscribes nothing.  :meth:`close` leaves the shared reader
    (the last one to leave closes it).
    """

    def __init__(self, config: Mapping[str, Any], follower: StreamFollower, *, poll_timeout: float) -> None:
        self.config = dict(config)
        self.follower = follower
        self.poll_timeout = poll_timeout
        self.feed: Feed | None = None
        #: the stream's partition, once subscribed
        self.partition: Partition | None = None
        self._closed = False

    @property
    def tracker(self) -> SequenceTracker:
        return self.follower.tracker

    async def fill(self, timeout: float) -> None:
        """Take in what arrives within ``timeout`` seconds (returns once something did).

        Raises :class:`~airflow_kafka_events.errors.StreamGapError` when more than the follower's
        ``max_buffered`` elements are held ahead of a missing one, and the shared reader's
        failure (e.g. :class:`~airflow_kafka_events.errors.KafkaOperationError`)."""
        if self.tracker.finished_taken or self._closed:
            return
        if self.feed is None:
            try:
                self.feed = await self._subscribe()
            except TopicError as exc:  # not there yet: the trigger's start clock decides
                log.info("%s: %s; looking again in %gs", self.follower.where, exc, TOPIC_RETRY)
                await asyncio.sleep(min(timeout, TOPIC_RETRY))
                return
            except Exception as exc:
                if not heals_by_retrying(exc):
                    raise
                # e.g. the brokers are down: the trigger's clocks decide how long that may last
                log.warning(
                    "%s: cannot subscribe yet (%s); trying again in %gs",
                    self.follower.where,
                    exc,
                    TOPIC_RETRY,
                )
                await asyncio.sleep(min(timeout, TOPIC_RETRY))
                return
        records, _ = await self.feed.take(READ_BATCH, timeout)
        self.follower.offer(record.message for record in records)

    async def _subscribe(self) -> Feed:
        follower = self.follower
        shared = shared_stream_reader(self.config, follower.topic, self.poll_timeout)
        try:
            tp = await self._partition_of(shared)
            low = (await shared.start_offsets([tp]))[tp]
            offset = None if follower.checkpoint is None else follower.checkpoint.offset
            start = low if offset is None else max(offset, low)
            key = follower.key
            feed = await shared.subscribe(
                {tp: start},
                keys=[key],
                match=lambda record_key: record_key == key,
                name=f"wait-{follower.trigger_run_id}",
            )
        except BaseException:
            await shared.release()
            raise
        self.partition = tp
        log.info(
            "%s: waiting from offset %d of partition %d (%s)",
            follower.where,
            start,
            tp[1],
            "catching up with the shared reader" if feed.catching_up else "through the shared reader",
        )
        return feed

    async def _partition_of(self, shared: SharedReader) -> Partition:
        """The checkpoint's partition (read before, so it exists), else the key's (murmur2)."""
        follower = self.follower
        checkpoint = follower.checkpoint
        if checkpoint is not None and checkpoint.partition is not None:
            return (follower.topic, checkpoint.partition)
        count = len(await shared.topic_partitions())
        return (follower.topic, partition_for_key(follower.key, count))

    async def close(self) -> None:
        """Leave the shared reader. Idempotent."""
        self._closed = True
        feed, self.feed = self.feed, None
        if feed is not None:
            await feed.close()

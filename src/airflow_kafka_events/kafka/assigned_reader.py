"""Read every partition of some topics from chosen offsets, without joining a consumer group.

A consumer group splits partitions between its members: two triggerers whose watchers share
one group each see only part of the topic (measured: 60 of 120 events never became asset
events, silently).  :class:`AssignedReader` instead ``assign()``s every partition itself and
starts where its owner says; the owner keeps the positions (for a watcher, in Airflow's
``asset_state_store``), so the reader is correct wherever and however often it runs, and a
restarted owner resumes at once (no group rebalance or session timeout to wait out).

Every client call runs on the reader's own :class:`~airflow_kafka_events.kafka.client_executor.ClientExecutor`
thread.  Nothing is ever committed and no group is joined; librdkafka insists on a ``group.id``,
so a placeholder is set when the configuration names none.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from airflow_kafka_events.errors import (
    ConfigurationError,
    KafkaAuthenticationError,
    KafkaOperationError,
    KafkaTlsError,
    TopicError,
)
from airflow_kafka_events.kafka.client_executor import ClientExecutor
from airflow_kafka_events.kafka.client_log import Cause, ClientHealth, cause_of, refusal_error
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.consumer import consume_available
from airflow_kafka_events.kafka.positions import Partition
from airflow_kafka_events.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

__all__ = [
    "AssignedReader",
    "StartPolicy",
    "bounded_read_config",
    "heals_by_retrying",
]

#: Causes of client errors that will not heal by themselves: the reader raises instead of retrying.
_FATAL_CAUSES = (Cause.AUTHENTICATION, Cause.AUTHORIZATION)
#: Placeholder ``group.id`` when the connection names none: librdkafka insists on one.
_NO_GROUP = "airflow-kafka-events.assigned-reader"
#: Seconds between librdkafka statistics reports of a reader (only broker up/down is read).
_STATS_INTERVAL = 30.0


def heals_by_retrying(exc: BaseException) -> bool:
    """Whether a reader's failure may pass if the reader tries again (a broker down, a timeout, a
    client call that failed once), rather than one that will not: the brokers refused the client
    (credentials, TLS, authorization), librdkafka called its error fatal, or a topic does not exist
    (:class:`TopicError`)."""
    if isinstance(exc, (KafkaAuthenticationError, KafkaTlsError, TopicError)):
        return False
    if isinstance(exc, KafkaOperationError) and exc.kafka_error is not None:
        return not (exc.kafka_error.fatal() or cause_of(exc.code) in _FATAL_CAUSES)
    return True


class StartPolicy:
    """Where a partition without a stored position starts: ``auto.offset.reset`` (first or next offset)."""

    EARLIEST = "earliest"
    LATEST = "latest"

    @staticmethod
    def from_config(config: Mapping[str, Any]) -> str:
        value = str(config.get("auto.offset.reset", "earliest")).lower()
        if value in {"earliest", "smallest", "beginning"}:
            return StartPolicy.EARLIEST
        if value in {"latest", "largest", "end"}:
            return StartPolicy.LATEST
        raise ConfigurationError(
            f"auto.offset.reset={value!r} cannot place a new reader: use 'earliest' or 'latest'"
        )


class AssignedReader:
    """One consumer over all partitions of ``topics`` (assign, never subscribe, never commit).

    :param config: librdkafka consumer configuration (``bootstrap.servers`` ... ); auto-commit
        is forced off.  Its ``group.id`` is never joined.
    :param name: for thread names and logs.
    """

    def __init__(self, config: Mapping[str, Any], topics: Sequence[str], *, name: str) -> None:
        if not topics:
            raise ConfigurationError("an AssignedReader needs at least one topic")
        self.topics = sorted(topics)
        self.name = name
        cfg = dict(config)
        cfg.setdefault("group.id", _NO_GROUP)
        cfg["enable.auto.commit"] = False
        cfg["enable.auto.offset.store"] = False
        self.start_policy = StartPolicy.from_config(cfg)
        self.bootstrap_servers = str(cfg.get("bootstrap.servers", ""))
        self._config = cfg
        #: librdkafka's logs and errors of this reader (rate-limited, causes kept for errors)
        self.health = ClientHealth.for_config(cfg, name=f"reader {name}", stats_interval=_STATS_INTERVAL)
        self._executor = ClientExecutor(name)
        self._consumer: Consumer | None = None
        self._opened_at = 0.0

    # ------------------------------------------------------------------ opening
    async def open(self) -> None:
        self._opened_at = time.monotonic()
        await self._executor.run(self._new_consumer)

    def _new_consumer(self) -> None:
        # set on the client's thread: a close queued behind an open whose await was cancelled
        # still finds the consumer and closes it
        self._consumer, _ = new_consumer(
            self._config,
            name=f"reader {self.name}",
            what=f"cannot create a reader of {self.topics}",
            health=self.health,
        )

    @property
    def client(self) -> Consumer:
        """The librdkafka consumer, for non-blocking reads only (e.g. cached watermarks); every
        blocking call goes through this reader's thread."""
        return self._client()

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise KafkaOperationError(f"reader {self.name} is not open")
        return self._consumer

    async def partitions(self, timeout: float = 10.0) -> list[Partition]:
        """Every partition of every topic (raises :class:`TopicError` naming a missing topic)."""
        return await self._executor.run(self._partitions, timeout)

    def _partitions(self, timeout: float) -> list[Partition]:
        found: list[Partition] = []
        for topic in self.topics:
            try:
                meta = self._client().list_topics(topic=topic, timeout=timeout).topics.get(topic)
            except KafkaException as exc:
                raise KafkaOperationError.from_exception(
                    f"cannot read the metadata of topic {topic!r} from {self.bootstrap_servers}", exc
                ) from exc
            if meta is None or meta.error is not None or not meta.partitions:
                cause = meta.error if meta is not None else "no metadata"
                raise TopicError(
                    f"topic {topic!r} is not available on {self.bootstrap_servers} ({cause}); create it "
                    "first (e.g. `airflow-kafka-events topics ensure` or your cluster's tooling)"
                )
            found.extend((topic, p) for p in sorted(meta.partitions))
        return found

    async def policy_offsets(
        self, partitions: Sequence[Partition], timeout: float = 10.0
    ) -> dict[Partition, int]:
        """Where partitions start by ``auto.offset.reset``: their first or their next offset."""
        return await self._executor.run(self._policy_offsets, list(partitions), timeout)

    def _policy_offsets(self, partitions: list[Partition], timeout: float) -> dict[Partition, int]:
        starts: dict[Partition, int] = {}
        earliest = self.start_policy == StartPolicy.EARLIEST
        for topic, partition in partitions:
            tp = KafkaTopicPartition(topic, partition)
            # what this client's fetches of the partition already told it, if anything: asking the
            # broker waits behind the connection's pending fetch (up to fetch.wait.max.ms) each time
            low, high = self._client().get_watermark_offsets(tp, cached=True)
            known = low if earliest else high
            if known is None or known < 0:
                try:
                    low, high = self._client().get_watermark_offsets(tp, timeout=timeout)
                except KafkaException as exc:
                    raise KafkaOperationError.from_exception(
                        f"cannot read the offsets of {topic}[{partition}] from {self.bootstrap_servers}", exc
                    ) from exc
                known = low if earliest else high
            starts[(topic, partition)] = known
        return starts

    async def assign(self, positions: Mapping[Partition, int]) -> None:
        """Start (or add) reading these partitions at these offsets."""
        tps = [KafkaTopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
        await self._executor.run(self._client().incremental_assign, tps)

    # ------------------------------------------------------------------ reading
    async def poll_batch(self, max_records: int, timeout: float) -> list[Message]:
        """Up to ``max_records`` records in one call on the client's thread: it waits at most
        ``timeout`` for the first, then takes what is already fetched without waiting (librdkafka's
        ``consume(n, timeout)`` alone would hold a lone record until the whole timeout passed).

        Passing client errors are logged.  Raises :class:`KafkaOperationError` naming the brokers,
        the cause and the fix when the client saw an authentication or authorization failure:
        those do not heal by retrying."""
        messages = await self._executor.run(consume_available, self._client(), max_records, timeout)
        self._raise_if_refused()
        records: list[Message] = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
            else:
                self._check_error(error)
        return records

    async def unassign(self, partitions: Sequence[Partition]) -> None:
        """Stop reading these partitions (the others keep their positions)."""
        tps = [KafkaTopicPartition(t, p) for t, p in sorted(partitions)]
        if tps:
            await self._executor.run(self._client().incremental_unassign, tps)

    async def positions(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        """Per partition, the offset of the next record this reader hands out (past everything it
        handed out, and past offsets without a record such as transaction markers); partitions
        without a known position are left out."""
        tps = [KafkaTopicPartition(t, p) for t, p in sorted(partitions)]
        found = await self._executor.run(self._client().position, tps) if tps else []
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    async def seek(self, tp: Partition, offset: int) -> None:
        await self._executor.run(self._client().seek, KafkaTopicPartition(tp[0], tp[1], offset))

    def _raise_if_refused(self) -> None:
        refused = self.health.refusal(since=self._opened_at)
        if refused is not None:  # credentials or TLS: KafkaAuthenticationError / KafkaTlsError
            raise refusal_error(self.health, refused)
        seen = self.health.last_error(since=self._opened_at)
        if seen is not None and seen.cause is Cause.AUTHORIZATION:
            raise KafkaOperationError(
                f"Kafka refused the reader of {self.topics} at {self.bootstrap_servers}: "
                f"{seen.cause.value} ({seen.text}); {self.health.fix_for(seen.cause)}",
                kafka_error=KafkaError(seen.code),
            )

    def _check_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        cause = cause_of(error.code())
        if error.fatal() or cause in _FATAL_CAUSES:
            raise KafkaOperationError(
                f"Kafka consumer error on {self.topics} at {self.bootstrap_servers}: {cause.value} "
                f"({error}); {self.health.fix_for(cause)}",
                kafka_error=error,
            )
        self.health.logger.log(
            logging.WARNING,
            "Kafka consumer error on %s at %s: %s; the client retries by itself",
            self.topics,
            self.bootstrap_servers,
            error,
        )

    # ------------------------------------------------------------------ closing
    async def close(self) -> None:
        if self._executor.closed:
            return
        try:
            await self._executor.run(self._close_consumer)
        finally:
            self._executor.shutdown()

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


# --------------------------------------------------------------- bounded reads
# The consumer configuration of a bounded read: offset ranges a client assigns itself, no group.
#
# Inspection readers and the stream progress lookup read ranges of offsets they assign; they join no
# group and commit nothing, so their group id is a throwaway one, auto-commit and the offset store are
# off, and a partition's end is reported (``enable.partition.eof``) so a read knows it has reached it.
# The consumer itself is made by :func:`airflow_kafka_events.kafka.clients.new_consumer`.
def bounded_read_config(settings: KafkaSettings, purpose: str, **extra: Any) -> dict[str, Any]:
    """librdkafka configuration of a bounded read named ``purpose`` (in its group id); ``extra`` added."""
    return settings.with_overrides({"enable.auto.commit": False}).consumer_config(
        f"airflow-kafka-events-{purpose}-{uuid.uuid4().hex}",
        **{
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            **extra,
        },
    )

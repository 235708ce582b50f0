"""One topic read through a bounded window: the reader every inspection function uses.

:class:`TopicReader` is a plain ``assign()`` consumer (built by
:func:`~airflow_kafka_events.kafka.clients.new_consumer`: it joins no group and commits nothing)
with one deadline for the whole call.  Every broker request is made in short slices, so a
refused login or TLS handshake (seen by the client's
:class:`~airflow_kafka_events.kafka.client_log.ClientHealth`) fails the call at once with its
cause, and brokers that do not answer fail it at the deadline with
:class:`~airflow_kafka_events.ui.inspection.errors.BrokerTimeoutError` -- never a hang.

:func:`scan` plans a :class:`~airflow_kafka_events.ui.inspection.window.ScanWindow` on every
partition (watermarks, ``offsets_for_times``) and hands the records in it, partition by
partition in offset order, to a callback, and returns the :class:`ScannedWindow` it read.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_events.kafka.assigned_reader import bounded_read_config
from airflow_kafka_events.kafka.client_log import FIXES, Cause, refusal_error
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import retry_until
from airflow_kafka_events.ui.inspection.errors import (
    BrokerTimeoutError,
    InspectionError,
    RecordNotFoundError,
    TopicNotFoundError,
)
from airflow_kafka_events.ui.inspection.window import PartitionWindow, ScannedWindow, ScanWindow, to_ms

__all__ = [
    "DEFAULT_TIMEOUT",
    "Progress",
    "TopicReader",
    "message_headers",
    "message_timestamp_ms",
    "scan",
]

log = logging.getLogger(__name__)

#: Seconds a whole inspection call may take (metadata, offsets, reading) unless asked otherwise.
DEFAULT_TIMEOUT = 30.0
#: ListOffsets "timestamps" of the high and the low watermark.
LATEST, EARLIEST = -1, -2
#: The reader's ``fetch.wait.max.ms``.
FETCH_WAIT_MS = 10
#: Longest single broker request: a refusal seen meanwhile ends the call within this.
_SLICE = 1.0
_UNKNOWN_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
_TRANSIENT = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
    }
)

_TAKE, _SKIP, _STOP = object(), object(), object()

#: ``progress(records_done, records_planned)``: called while a scan reads.
Progress = Callable[[int, int], None]
T = TypeVar("T")


class _Again(Exception):
    """A transient Kafka error: the request is made again (until the deadline)."""


def _bound(found: dict[int, int] | None, partition: int, low: int, high: int, *, default: int) -> int:
    """A looked-up offset within the watermarks (``-1``, no record at or after the time: ``high``)."""
    if found is None:
        return default
    offset = found[partition]
    return high if offset < 0 else min(max(offset, low), high)


def _kafka_error(exc: BaseException) -> KafkaError | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


class TopicReader:
    """An ``assign()`` consumer of one topic with a deadline (a context manager; close it)."""

    def __init__(
        self, config: Mapping[str, Any], topic: str, *, timeout: float = DEFAULT_TIMEOUT, name: str = "reader"
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise InspectionError(f"a topic name is a non-empty str, got {topic!r}")
        if not timeout > 0:
            raise InspectionError(f"timeout must be > 0 seconds, got {timeout!r}")
        settings = config if isinstance(config, KafkaSettings) else KafkaSettings(config)
        # a bounded read never long-polls: a fetch left waiting at one partition's end would
        # hold the next partition's first fetch for fetch.wait.max.ms (500 ms by default)
        consumer_config = bounded_read_config(settings, "inspect", **{"fetch.wait.max.ms": FETCH_WAIT_MS})
        self.topic = topic
        self.timeout = timeout
        self.servers = settings.bootstrap_servers
        #: the connection's envelope codecs (its schema registry, if it has one)
        self.codecs = settings.codecs
        self.deadline = time.monotonic() + timeout
        self.consumer, self.health = new_consumer(
            consumer_config,
            name=f"inspection {name}",
            what="cannot create the inspection reader",
            error_type=InspectionError,
        )

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception as exc:  # closing must not mask the caller's own error
            log.warning("closing the inspection reader failed: %s", exc)

    # ------------------------------------------------------------------ errors and retries
    def _left(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._serve_callbacks()
        self._raise_if_refused()
        if left <= 0:
            seen = self.health.last_error()
            cause = seen.cause if seen is not None else Cause.TIMED_OUT
            detail = f" ({seen.cause.value}: {seen.text})" if seen is not None else ""
            raise BrokerTimeoutError(
                f"no answer from the Kafka brokers at {self.servers} within {self.timeout}s while {what} "
                f"of topic {self.topic!r}{detail}; fix: {FIXES[cause].format(servers=self.servers)} "
                "(or allow more time)",
                kafka_error=KafkaError(KafkaError._TIMED_OUT),
            )
        return left

    def _raise_if_refused(self) -> None:
        seen = self.health.refusal()
        if seen is not None:
            raise refusal_error(self.health, seen)

    def _retry(self, what: str, call: Callable[[float], T]) -> T:
        """``call(timeout)`` until it answers, a lasting error, or the deadline (the package's retry loop)."""

        def attempt() -> T:
            left = self._left(what)
            try:
                return call(min(left, _SLICE))
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.code() in _UNKNOWN_TOPIC:
                    raise TopicNotFoundError(
                        f"topic {self.topic!r} does not exist at {self.servers} (or this client may not see "
                        "it); fix: create the topics with `airflow-kafka-events topics ensure`, or name the "
                        "right topic (--topic)",
                        kafka_error=err,
                    ) from exc
                if err is None or not (err.retriable() or err.code() in _TRANSIENT):
                    self._serve_callbacks()
                    self._raise_if_refused()
                    raise InspectionError.from_exception(
                        f"{what} of topic {self.topic!r} at {self.servers} failed", exc
                    ) from exc
                raise _Again from exc

        def pause() -> float:
            self._serve_callbacks()
            return min(0.05, max(0.0, self.deadline - time.monotonic()))

        return retry_until(attempt, retry_on=lambda exc: isinstance(exc, _Again), pause=pause)

    def _serve_callbacks(self) -> None:
        """Let librdkafka report errors (refusals, unreachable brokers) between metadata requests.

        A consumer's ``error_cb`` runs only inside ``poll``/``consume``; before anything is
        assigned a ``poll(0)`` serves it without taking a record.
        """
        try:
            if not self.consumer.assignment():
                self.consumer.poll(0)
        except KafkaException:  # what it reports is in the health already
            pass

    # ------------------------------------------------------------------ metadata
    def partitions(self) -> list[int]:
        """The topic's partition ids; :class:`TopicNotFoundError` when it does not exist."""

        def call(timeout: float) -> list[int]:
            meta = self.consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
            if meta is None:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            if meta.error is not None:
                raise KafkaException(meta.error)
            if not meta.partitions:  # metadata without partitions yet: asked again
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
            return sorted(meta.partitions)

        return self._retry("reading the metadata", call)

    def watermarks(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self.topic, partition)
        low, high = self._retry(
            f"reading the watermarks of partition {partition}",
            lambda timeout: self.consumer.get_watermark_offsets(tp, timeout=timeout, cached=False),
        )
        return int(low), int(high)

    def offsets(self, partitions: Sequence[int], stamp: int) -> dict[int, int]:
        """ListOffsets of every partition in one request: the first offset at or after ``stamp`` (ms).

        ``stamp`` may also be :data:`LATEST` (the high watermark) or :data:`EARLIEST` (the low one);
        a partition with no record at or after ``stamp`` answers ``-1``.
        """
        wanted = [TopicPartition(self.topic, partition, stamp) for partition in partitions]

        def call(timeout: float) -> list[TopicPartition]:
            found = self.consumer.offsets_for_times(wanted, timeout=timeout)
            for item in found:
                if item.error is not None:
                    raise KafkaException(item.error)
            return list(found)

        return {tp.partition: int(tp.offset) for tp in self._retry("looking up offsets", call)}

    def plan(
        self, window: ScanWindow, partitions: Sequence[int] | None = None
    ) -> list[tuple[int, int, int, int, int]]:
        """``(partition, start, end, low, high)`` of the window on each partition (a few requests in all)."""
        ids = self.partitions() if partitions is None else list(partitions)
        lows, highs = self.offsets(ids, EARLIEST), self.offsets(ids, LATEST)
        since = None if window.since is None else self.offsets(ids, to_ms(window.since))
        until = None if window.until is None else self.offsets(ids, to_ms(window.until))
        planned = []
        for partition in ids:
            low, high = lows[partition], highs[partition]
            start = _bound(since, partition, low, high, default=low)
            planned.append(
                (partition, start, max(start, _bound(until, partition, low, high, default=high)), low, high)
            )
        return planned

    # ------------------------------------------------------------------ reading
    def read(self, partition: int, start: int, end: int, *, follow: bool = False) -> Iterator[Message]:
        """The records with ``start <= offset < end`` of one partition, in offset order.

        ``follow``: do not stop at the partition's end; wait for new records (with no deadline,
        still failing at once on a refused login) until the caller stops iterating.
        """
        if end <= start:
            return
        if follow:
            self.deadline = float("inf")
        tp = TopicPartition(self.topic, partition, start)
        try:
            self.consumer.assign([tp])
        except KafkaException as exc:
            raise InspectionError.from_exception(
                f"cannot assign {self.topic!r} partition {partition}", exc
            ) from exc
        batch = max(1, min(end - start, 500))
        what = f"reading offsets {start}..{end - 1} of partition {partition}"
        while True:
            left = self._left(what)
            try:
                messages = self.consumer.consume(num_messages=batch, timeout=min(left, _SLICE))
            except KafkaException as exc:
                raise InspectionError.from_exception(f"{what} of topic {self.topic!r} failed", exc) from exc
            for msg in messages:
                verdict = self._verdict(msg, start, end, follow, what)
                if verdict is _STOP:
                    return
                if verdict is _TAKE:
                    yield msg
                    if (msg.offset() or 0) >= end - 1:
                        return

    def _verdict(self, msg: Message, start: int, end: int, follow: bool, what: str) -> object:
        """Whether a consumed message is taken, skipped, or ends the range."""
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return _SKIP if follow else _STOP
            if err.retriable() or err.code() in _TRANSIENT:
                return _SKIP
            raise InspectionError(f"{what} of topic {self.topic!r} failed", kafka_error=err)
        offset = msg.offset()
        if offset is None or offset < start:
            return _SKIP
        return _STOP if offset >= end else _TAKE

    def read_one(self, partition: int, offset: int) -> Message:
        """The record at ``partition`` / ``offset``; :class:`RecordNotFoundError` when there is none."""
        if partition not in self.partitions():
            raise RecordNotFoundError(
                f"topic {self.topic!r} at {self.servers} has no partition {partition}; "
                "fix: take the coordinates from a listing"
            )
        low, high = self.watermarks(partition)
        if not low <= offset < high:
            raise RecordNotFoundError(_missing_offset(self.topic, partition, offset, low, high))
        for msg in self.read(partition, offset, offset + 1):
            if msg.offset() == offset:
                return msg
        raise RecordNotFoundError(
            f"no record at {self.topic}[{partition}]@{offset} (compacted away, or a transaction marker)"
        )


def _missing_offset(topic: str, partition: int, offset: int, low: int, high: int) -> str:
    """Why ``offset`` is outside the partition's watermarks ``low`` .. ``high`` (exclusive)."""
    where = f"no record at {topic}[{partition}]@{offset}"
    holds = f"it holds offsets {low}..{high - 1}" if high > low else "it holds no record"
    if offset >= high:
        why = f"the offset is past the end of the partition (its end offset is {high}; {holds})"
    else:
        why = f"{holds}: older ones were removed by retention"
    return f"{where}: {why}; fix: take the coordinates from a listing"


def scan(
    config: Mapping[str, Any],
    topic: str,
    window: ScanWindow,
    handle: Callable[[Message], None],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    partitions: Sequence[int] | None = None,
    progress: Progress | None = None,
    name: str = "scan",
) -> ScannedWindow:
    """``handle(record)`` for every record of ``window`` (partition by partition, in offset order).

    Per partition the newest ``window.max_records`` records of the window are read; the returned
    :class:`ScannedWindow` says which offsets, and where older ones were left out.
    """
    read: list[PartitionWindow] = []
    with TopicReader(config, topic, timeout=timeout, name=name) as reader:
        plan = reader.plan(window)
        if partitions is not None:
            plan = [p for p in plan if p[0] in set(partitions)]
        total = sum(min(end - start, window.max_records) for _, start, end, _, _ in plan)
        done = 0
        if progress is not None:
            progress(0, total)
        for partition, start, end, low, high in plan:
            first = max(start, end - window.max_records)
            scanned = 0
            for msg in reader.read(partition, first, end):
                scanned += 1
                handle(msg)
                if progress is not None and (done + scanned) % 200 == 0:
                    progress(done + scanned, total)
            done += end - first
            read.append(PartitionWindow(partition, first, end, scanned, first > start, low, high))
        if progress is not None:
            progress(total, total)
    return ScannedWindow(topic, window, tuple(read))


def message_headers(msg: Message) -> list[tuple[str, bytes | None]]:
    """A record's headers as a list of ``(name, value)``."""
    pairs = [(str(header[0]), header[1]) for header in msg.headers() or []]
    return [(name, value.encode("utf-8") if isinstance(value, str) else value) for name, value in pairs]


def message_timestamp_ms(msg: Message) -> int | None:
    """A record's timestamp (ms since the epoch), ``None`` when it has none."""
    kind, value = msg.timestamp()
    return None if kind == 0 or value is None or value < 0 else int(value)

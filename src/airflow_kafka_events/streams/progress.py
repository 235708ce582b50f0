"""How far a stream got: the latest envelope of one ``trigger_run_id`` in Kafka.

Every envelope of a stream has the key ``trigger_run_id``, so all of them are in one
partition (:func:`~airflow_kafka_events.kafka.partitioner.partition_for_key`) in the order
they were written, and sequence numbers only grow within an attempt: the key's last record
is the stream's latest progress.  :func:`find_stream_progress` reads that partition
*backwards* from the high watermark in chunks (default 500 offsets), decoding only records
with the key, until it meets the key or the low watermark.

The cost of a lookup that finds nothing (a new stream) grows with the partition, so a caller
that knows no envelope of the stream can be older than some instant passes it as
``not_before_ms`` (epoch milliseconds): the first offset with a timestamp at or after it
(``offsets_for_times`` on the key's partition) is the lowest offset read.  Envelopes with an
older timestamp are ignored by design; keep the bound early enough for clock skew between
the writers (or the broker, with ``LogAppendTime``) and whoever computed it.  A caller that
knows when the stream was written passes ``not_after_ms`` too: the backward read then starts
at the first offset stamped at or after it (exclusive) instead of the high watermark, so the
lookup costs at most the offsets of that time, whatever the partition holds.  A lookup with
either bound doubles its chunk after each one without the key (up to 64 times ``chunk_size``),
so the records written after the stream cost a few round trips, not one per chunk.

A writer that keeps pages in flight (a streaming trigger's ``stream_write_window``) can leave a
*hole*: a page whose delivery failed, with later pages of the attempt delivered.  A lookup given
``gap_window`` (the writer's window) checks the latest attempt's last ``gap_window`` sequence numbers
and returns the envelope *before* the first missing page, so a writer resuming from it fills the
hole; when no page before the hole can be resumed after (page 0 is missing, or the hole lies where no
page could be in flight), the progress says so in ``first_missing`` and the writer starts a new
attempt.

The reader is a plain ``assign()`` consumer: it joins no group and commits nothing (its
``group.id`` is a throwaway, ``enable.auto.commit=false``).  Kafka failures raise
:class:`~airflow_kafka_events.errors.StreamProgressError` (with librdkafka's error code).
Calls block; run them in a thread from asyncio code.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypedDict, TypeVar, Unpack

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, StreamProgressError
from airflow_kafka_events.kafka.assigned_reader import bounded_read_config
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import retry_until

__all__ = [
    "FIRST_OFFSET_METADATA_KEY",
    "GENERATION_METADATA_KEY",
    "StreamLocation",
    "StreamLookupOptions",
    "StreamProgress",
    "find_stream_progress",
    "lookup_stream",
]

log = logging.getLogger(__name__)

#: Envelope ``metadata`` key holding the offset of the attempt's ``sequence_index`` 0
#: envelope (written on every later envelope of the attempt by the streaming triggers).
FIRST_OFFSET_METADATA_KEY = "first_offset"
#: Envelope ``metadata`` key holding the generation (the task's ``clear_number``) an attempt
#: was written for (on every envelope of the attempt, when the writer knew it).
GENERATION_METADATA_KEY = "generation"

DEFAULT_CHUNK_SIZE = 500
#: A lookup bounded in time (``not_before_ms`` / ``not_after_ms``) doubles its chunk after each one
#: without the key, up to this many times ``chunk_size``: the records written after a stream in
#: its window cost a few round trips, not one per ``chunk_size`` offsets.
_MAX_CHUNK_GROWTH = 64
#: The lookup's ``fetch.wait.max.ms`` (as the inspection reader's).
_FETCH_WAIT_MS = 10

#: Errors worth retrying until the lookup's deadline (leadership moves, timeouts, transport).
_TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)
#: An unknown topic is retried only this long (metadata of a just created topic propagating).
_UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
UNKNOWN_TOPIC_GRACE = 5.0

T = TypeVar("T")


class _Again(Exception):
    """Not answered yet (a transient Kafka error, a topic still without metadata): try again."""


@dataclass(frozen=True)
class StreamLocation:
    """The partition that holds a stream, and its watermarks when it was looked up.

    ``scan_start`` is the lowest offset the lookup would read: ``low``, or with a
    ``not_before_ms`` bound the first offset whose timestamp is at or after it (``high``
    when there is none); it is never below ``low``.  ``scan_end`` (exclusive) is where the
    backward read starts: ``high``, or with a ``not_after_ms`` bound the first offset whose
    timestamp is at or after it (``high`` when there is none).
    """

    topic: str
    partition: int
    num_partitions: int
    low: int
    high: int
    scan_start: int = 0
    not_before_ms: int | None = None
    scan_end: int | None = None
    not_after_ms: int | None = None

    def __post_init__(self) -> None:
        if self.scan_start < self.low:
            object.__setattr__(self, "scan_start", self.low)
        if self.scan_end is None or self.scan_end > self.high:
            object.__setattr__(self, "scan_end", self.high)

    @property
    def end(self) -> int:
        """``scan_end`` as an int (it is set in ``__post_init__``)."""
        return self.high if self.scan_end is None else self.scan_end


#: The fields of a :class:`StreamProgress` that are its envelope's, under the same names.
_FROM_ENVELOPE = ("trigger_run_id", "attempt", "sequence_index", "is_last", "error", "resume_cursor")


@dataclass(frozen=True)
class StreamProgress:
    """The latest envelope of a stream: highest ``(attempt, sequence_index)`` at its end.

    ``first_offset`` is the offset of the ``sequence_index`` 0 envelope of the same attempt
    (``None`` when it cannot be found any more).  ``generation`` is the task generation
    recorded in the envelope's metadata (``None``: none recorded).  ``first_missing`` (only from a
    lookup with ``gap_window``) is the sequence index of a page of this attempt missing below
    ``sequence_index`` with no page before it to resume after: the attempt cannot be continued.
    """

    trigger_run_id: str
    topic: str
    partition: int
    offset: int
    attempt: int
    sequence_index: int
    is_last: bool
    error: StreamFailure | None
    resume_cursor: str | None
    first_offset: int | None
    generation: int | None = None
    first_missing: int | None = None

    @classmethod
    def from_envelope(
        cls,
        envelope: TriggerEventEnvelope,
        *,
        topic: str,
        partition: int,
        offset: int,
        first_offset: int | None,
    ) -> StreamProgress:
        copied: dict[str, Any] = {name: getattr(envelope, name) for name in _FROM_ENVELOPE}
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            first_offset=first_offset,
            generation=metadata_generation(envelope),
            **copied,
        )


def _metadata_int(envelope: TriggerEventEnvelope, key: str) -> int | None:
    text = envelope.metadata.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def metadata_first_offset(envelope: TriggerEventEnvelope) -> int | None:
    """The attempt's first offset recorded in ``envelope.metadata``, if any."""
    return _metadata_int(envelope, FIRST_OFFSET_METADATA_KEY)


def metadata_generation(envelope: TriggerEventEnvelope) -> int | None:
    """The task generation recorded in ``envelope.metadata``, if any."""
    return _metadata_int(envelope, GENERATION_METADATA_KEY)


@dataclass(frozen=True)
class _Found:
    offset: int
    envelope: TriggerEventEnvelope
    #: the record value's bytes (what the writer counted of it while in flight)
    size: int = 0

    @property
    def rank(self) -> tuple[int, int, int]:
        return (self.envelope.attempt, self.envelope.sequence_index, self.offset)


def _acknowledged_below(seen: Mapping[int, _Found], top: int, low: int, window_bytes: int) -> int:
    """``low`` raised to the page from which the pages seen just below ``top`` (contiguous, down
    from ``top - 1``) hold ``window_bytes``: the pages in flight beside ``top`` held fewer bytes,
    so none below that page was still in flight when ``top`` was sent (no hole there)."""
    total = 0
    for seq in range(top - 1, low - 1, -1):
        found = seen.get(seq)
        if found is None:
            return low
        total += found.size
        if total >= window_bytes:
            return seq
    return low


class _PartitionScanner:
    """Reads offset ranges of one partition, keeping the decoded records of one key."""

    def __init__(
        self,
        config: KafkaSettings | Mapping[str, Any],
        topic: str,
        trigger_run_id: str,
        *,
        timeout: float,
        codec: EnvelopeCodec[TriggerEventEnvelope] | None,
    ) -> None:
        settings = config if isinstance(config, KafkaSettings) else KafkaSettings(config)
        # no long poll: each chunk re-assigns an earlier offset, and a fetch left waiting at the
        # partition's end would hold that chunk's first fetch for fetch.wait.max.ms (500 ms default)
        consumer_config = bounded_read_config(settings, "progress", **{"fetch.wait.max.ms": _FETCH_WAIT_MS})
        self.topic = topic
        self.trigger_run_id = trigger_run_id
        self.key = trigger_run_id.encode("utf-8")
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.codec = codec if codec is not None else settings.codecs.trigger
        self.consumer, _ = new_consumer(
            consumer_config,
            name=f"progress of {trigger_run_id}",
            what="cannot create the stream progress reader",
            error_type=StreamProgressError,
        )

    # ------------------------------------------------------------------ deadline and errors
    def remaining(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StreamProgressError(
                f"looking up stream {self.trigger_run_id!r} in topic {self.topic!r} took longer than "
                f"{self.timeout}s ({what})",
                kafka_error=KafkaError(KafkaError._TIMED_OUT),
            )
        return left

    def transient(self, error: KafkaError | None) -> bool:
        """Whether ``error`` is worth retrying (until the deadline)."""
        if error is None:
            return False
        code = error.code()
        if code in _UNKNOWN_TOPIC_CODES:
            return time.monotonic() - self.started < min(UNKNOWN_TOPIC_GRACE, self.timeout)
        return bool(error.retriable()) or code in _TRANSIENT_CODES

    def pause_seconds(self) -> float:
        """The wait before trying again: 0.1 s, or what is left of the deadline."""
        return min(0.1, max(0.0, self.deadline - time.monotonic()))

    def until_answered(self, operation: Callable[[], T]) -> T:
        """``operation()`` again while it raises :class:`_Again`, until it answers or the deadline
        (:meth:`remaining` raises) -- the retry policy of :mod:`airflow_kafka_events.retry`."""
        return retry_until(operation, retry_on=lambda exc: isinstance(exc, _Again), pause=self.pause_seconds)

    def ask(self, stage: str, what: str, call: Callable[[float], T]) -> T:
        """``call(timeout)`` within the deadline (:meth:`remaining` names ``stage``); a Kafka error
        raises :class:`_Again` when transient, else :class:`StreamProgressError` saying ``what``."""
        left = self.remaining(stage)
        try:
            return call(min(left, 5.0))
        except KafkaException as exc:
            error = StreamProgressError.from_exception(what, exc)
            if not self.transient(error.kafka_error):
                raise error from exc
            raise _Again from exc

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception as exc:  # closing must not mask the caller's own error
            log.warning("closing the stream progress reader failed: %s", exc)

    # ------------------------------------------------------------------ metadata
    def locate(self) -> StreamLocation:
        num_partitions = self.until_answered(self._partition_count)
        partition = partition_for_key(self.key, num_partitions)
        low, high = self.until_answered(lambda: self._watermarks(partition))
        return StreamLocation(
            topic=self.topic,
            partition=partition,
            num_partitions=num_partitions,
            low=low,
            high=high,
            scan_start=low,
        )

    def _partition_count(self) -> int:
        metadata = self.ask(
            "topic metadata",
            f"cannot read metadata of topic {self.topic!r}",
            lambda timeout: self.consumer.list_topics(self.topic, timeout=timeout),
        )
        meta = metadata.topics.get(self.topic)
        err = None if meta is None else meta.error
        if meta is not None and err is None and meta.partitions:
            return len(meta.partitions)
        if err is not None and not self.transient(err):
            hint = ""
            if err.code() in _UNKNOWN_TOPIC_CODES:
                hint = " (it does not exist: create the topics with `airflow-kafka-events topics ensure`)"
            raise StreamProgressError(f"topic {self.topic!r} is not available{hint}", kafka_error=err)
        raise _Again

    def _watermarks(self, partition: int) -> tuple[int, int]:
        # transient: e.g. NOT_LEADER_FOR_PARTITION right after a topic was created or a leader moved
        low, high = self.ask(
            "watermarks",
            f"cannot read the watermarks of {self.topic!r} partition {partition}",
            lambda timeout: self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=timeout, cached=False
            ),
        )
        return low, high

    def bound(
        self, location: StreamLocation, not_before_ms: int | None, not_after_ms: int | None = None
    ) -> StreamLocation:
        """``location`` read only in the offsets stamped from ``not_before_ms`` to ``not_after_ms``."""
        if not_before_ms is not None:
            start = self.offset_at(location, not_before_ms)
            location = replace(location, scan_start=start, not_before_ms=not_before_ms)
        if not_after_ms is not None:
            end = max(location.scan_start, self.offset_at(location, not_after_ms))
            location = replace(location, scan_end=end, not_after_ms=not_after_ms)
        return location

    def offset_at(self, location: StreamLocation, timestamp_ms: int) -> int:
        """The first offset of the location's partition stamped at or after ``timestamp_ms``
        (``high`` when there is none)."""
        wanted = TopicPartition(self.topic, location.partition, timestamp_ms)
        what = (
            f"cannot look up the offset of timestamp {timestamp_ms} in {self.topic!r} "
            f"partition {location.partition}"
        )

        def offset_for_time() -> Any:
            (found,) = self.ask(
                "offsets for the time bounds",
                what,
                lambda timeout: self.consumer.offsets_for_times([wanted], timeout=timeout),
            )
            if found.error is not None:
                if not self.transient(found.error):
                    raise StreamProgressError(what, kafka_error=found.error)
                raise _Again
            return found

        found = self.until_answered(offset_for_time)
        # a negative offset: no record at or after the timestamp
        return location.high if found.offset < 0 else min(max(found.offset, location.low), location.high)

    # ------------------------------------------------------------------ reading
    def read_range(self, partition: int, start: int, end: int) -> list[_Found]:
        """Records of the key with ``start <= offset < end``, in offset order."""
        found: list[_Found] = []
        try:
            self.consumer.assign([TopicPartition(self.topic, partition, start)])
        except KafkaException as exc:
            raise StreamProgressError.from_exception("cannot assign the stream partition", exc) from exc
        batch = max(1, min(end - start, 1000))
        while True:
            left = self.remaining(f"reading offsets {start}..{end - 1} of partition {partition}")
            try:
                messages = self.consumer.consume(num_messages=batch, timeout=min(left, 1.0))
            except KafkaException as exc:
                raise StreamProgressError.from_exception("reading the stream partition failed", exc) from exc
            if self._take(messages, partition, start, end, found):
                return found

    def _take(self, messages: list[Any], partition: int, start: int, end: int, found: list[_Found]) -> bool:
        """Add the key's records among ``messages`` to ``found``; whether the range is read."""
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return True
                if self.transient(err):
                    continue
                raise StreamProgressError("reading the stream partition failed", kafka_error=err)
            offset = msg.offset()
            if offset is None or offset < start:
                continue
            if offset >= end:
                return True
            if msg.key() == self.key:
                record = self._decode(msg.value(), partition, offset)
                if record is not None:
                    found.append(record)
            if offset >= end - 1:
                return True
        return False

    def _decode(self, value: bytes | None, partition: int, offset: int) -> _Found | None:
        if value is None:
            return None
        try:
            envelope = self.codec.decode(value)
        except EnvelopeDecodeError as exc:
            # Not one of ours (our writers use this codec): ignore it, as a reader would.
            log.warning(
                "skipping undecodable record with key %r at %s[%d]@%d: %s",
                self.trigger_run_id,
                self.topic,
                partition,
                offset,
                exc,
            )
            return None
        if envelope.trigger_run_id != self.trigger_run_id:
            return None
        return _Found(offset=offset, envelope=envelope, size=len(value))

    # ------------------------------------------------------------------ search
    def latest(
        self, location: StreamLocation, chunk_size: int, gap_window: int = 0, gap_bytes: int = 0
    ) -> StreamProgress | None:
        end = location.end
        size = chunk_size
        while end > location.scan_start:
            start = max(location.scan_start, end - size)
            records = self.read_range(location.partition, start, end)
            if records:
                best = max(records, key=lambda r: r.rank)
                first = self._first_offset(location, best, records, start, chunk_size)
                unresumable: int | None = None
                if gap_window > 0 and not best.envelope.is_last:
                    before, missing = self._before_first_hole(
                        location, best, records, start, chunk_size, gap_window, gap_bytes
                    )
                    if before is None:
                        unresumable = missing
                    else:
                        best = before
                return replace(
                    StreamProgress.from_envelope(
                        best.envelope,
                        topic=self.topic,
                        partition=location.partition,
                        offset=best.offset,
                        first_offset=first,
                    ),
                    first_missing=unresumable,
                )
            end = start
            if location.not_before_ms is not None or location.not_after_ms is not None:
                size = min(size * 2, chunk_size * _MAX_CHUNK_GROWTH)  # a time window: fewer round trips
        return None

    def _before_first_hole(
        self,
        location: StreamLocation,
        latest: _Found,
        records: list[_Found],
        start: int,
        chunk_size: int,
        window: int,
        window_bytes: int = 0,
    ) -> tuple[_Found | None, int | None]:
        """The envelope before the first page missing among the ``window`` pages up to ``latest``
        (of its attempt), and that page's sequence index; ``(latest, None)`` when none is missing,
        ``(None, seq)`` when no page before it can be resumed after.

        With at most ``window`` pages in flight, page ``latest - window`` was acknowledged before
        ``latest`` was sent: a hole lies above it.  With ``window_bytes`` too (the writer's bytes
        bound: the pages in flight when ``latest`` was sent held fewer bytes), once the pages seen
        just below ``latest`` hold that many bytes, every page below them was acknowledged before
        ``latest`` was sent.  The partition is read back (in chunks) until every page from the
        lower of those bounds to ``latest`` is seen, or to the attempt's first offset.
        """
        attempt, top = latest.envelope.attempt, latest.envelope.sequence_index
        low = max(0, top - window)
        floor = location.scan_start
        seen: dict[int, _Found] = {}
        while True:
            for record in records:
                envelope = record.envelope
                if envelope.attempt != attempt or not low <= envelope.sequence_index <= top:
                    continue
                seen.setdefault(envelope.sequence_index, record)
                hinted = 0 if envelope.sequence_index == 0 else metadata_first_offset(envelope)
                if hinted is not None:
                    floor = max(floor, record.offset if envelope.sequence_index == 0 else hinted)
            if window_bytes > 0:
                low = _acknowledged_below(seen, top, low, window_bytes)
            if sum(1 for seq in seen if seq >= low) == top - low + 1 or start <= floor:
                break
            end, start = start, max(floor, start - chunk_size)
            records = self.read_range(location.partition, start, end)
        missing = next((seq for seq in range(low, top + 1) if seq not in seen), None)
        if missing is None:
            return latest, None
        log.warning(
            "stream %r attempt %d: page %d is missing from %s[%d] while later pages up to %d are there "
            "(a write failed twice); %s",
            self.trigger_run_id,
            attempt,
            missing,
            self.topic,
            location.partition,
            top,
            f"resuming after page {missing - 1}" if missing > low else "it cannot be resumed",
        )
        return (seen[missing - 1], missing) if missing > low else (None, missing)

    def _first_offset(
        self, location: StreamLocation, best: _Found, records: list[_Found], start: int, chunk_size: int
    ) -> int | None:
        attempt = best.envelope.attempt
        lowest: int | None = None
        while True:
            for record in sorted(records, key=lambda r: r.offset, reverse=True):
                if record.offset > best.offset or record.envelope.attempt != attempt:
                    continue
                if record.envelope.sequence_index == 0:
                    return record.offset
                hinted = metadata_first_offset(record.envelope)
                if hinted is not None:
                    return hinted
                lowest = record.offset
            if start <= location.scan_start:
                return lowest
            end, start = start, max(location.scan_start, start - chunk_size)
            records = self.read_range(location.partition, start, end)


def _check_ms(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be an int >= 0 (epoch milliseconds) or None, got {value!r}")


def _check_args(topic: str, trigger_run_id: str, timeout: float, chunk_size: int, gap_window: int) -> None:
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic must be a non-empty str, got {topic!r}")
    if not isinstance(trigger_run_id, str) or not trigger_run_id:
        raise ValueError(f"trigger_run_id must be a non-empty str, got {trigger_run_id!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size!r}")
    if gap_window < 0:
        raise ValueError(f"gap_window must be >= 0, got {gap_window!r}")


def lookup_stream(
    config: KafkaSettings | Mapping[str, Any],
    topic: str,
    trigger_run_id: str,
    *,
    timeout: float = 30.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    codec: EnvelopeCodec[TriggerEventEnvelope] | None = None,
    not_before_ms: int | None = None,
    not_after_ms: int | None = None,
    gap_window: int = 0,
    gap_bytes: int = 0,
) -> tuple[StreamLocation, StreamProgress | None]:
    """Where the stream lives (partition, watermarks) and its latest envelope (``None``: none).

    ``config`` is :class:`KafkaSettings` or a librdkafka mapping with ``bootstrap.servers``
    (producer-only keys are dropped; group and commit settings are replaced).  The whole
    lookup is bounded by ``timeout`` seconds.  ``not_before_ms`` (epoch milliseconds):
    read no offset below the first one whose record timestamp is at or after it (see the
    module doc); the returned location's ``scan_start`` is that offset.  ``not_after_ms``:
    read no offset at or above the first one stamped at or after it (``scan_end``); the
    envelope returned is then the stream's latest *before* that time.  ``gap_window`` (pages):
    return the envelope before a missing page among the latest attempt's last ``gap_window``
    (see the module doc); 0: the latest envelope, holes or not.  ``gap_bytes``: the writer's bound
    on the bytes in flight too (its ``WINDOW_BYTES``), so the pages read back stop at that many
    bytes below the latest page, whatever ``gap_window``; 0: pages only.
    """
    _check_args(topic, trigger_run_id, timeout, chunk_size, gap_window)
    if gap_bytes < 0:
        raise ValueError(f"gap_bytes must be >= 0, got {gap_bytes!r}")
    _check_ms("not_before_ms", not_before_ms)
    _check_ms("not_after_ms", not_after_ms)
    scanner = _PartitionScanner(config, topic, trigger_run_id, timeout=timeout, codec=codec)
    try:
        location = scanner.locate()
        if not_before_ms is not None or not_after_ms is not None:
            location = scanner.bound(location, not_before_ms, not_after_ms)
        return location, scanner.latest(location, chunk_size, gap_window, gap_bytes)
    finally:
        scanner.close()


class StreamLookupOptions(TypedDict, total=False):
    """The keyword options of :func:`lookup_stream`, taken by :func:`find_stream_progress` too."""

    timeout: float
    chunk_size: int
    codec: EnvelopeCodec[TriggerEventEnvelope] | None
    not_before_ms: int | None
    not_after_ms: int | None
    gap_window: int
    gap_bytes: int


def find_stream_progress(
    config: KafkaSettings | Mapping[str, Any],
    topic: str,
    trigger_run_id: str,
    **options: Unpack[StreamLookupOptions],
) -> StreamProgress | None:
    """The latest envelope of ``trigger_run_id`` in ``topic``, or ``None`` if it has none: the
    :class:`StreamProgress` half of :func:`lookup_stream` (the same options; the search is in the
    module doc)."""
    return lookup_stream(config, topic, trigger_run_id, **options)[1]

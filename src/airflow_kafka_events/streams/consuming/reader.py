"""Reading one trigger run's event stream from Kafka: strictly in order, in batches, resumable.

A *stream* is every :class:`~airflow_kafka_events.envelopes.model.TriggerEventEnvelope` whose
record key is the stream's ``trigger_run_id``; one key lives in one partition, so the broker keeps
the stream's records in the order they were written.  The reader turns that log into the sequence
the producer meant:

* **Epochs and order**: the reader follows the highest attempt; elements come in ``sequence_index``
  order, without duplicates; an element that arrives before its predecessors is held until they
  arrive (:mod:`~airflow_kafka_events.streams.consuming.sequence`, which also decides when a batch
  of ``max_events`` / ``max_wait`` is due).
* **Gaps.** When the next expected element does not come, the reader waits ``gap_timeout`` seconds
  within one :meth:`StreamReader.next_batch` call, then raises
  :class:`~airflow_kafka_events.errors.StreamGapError` naming the missing index (time the caller
  spends between calls does not count, so it is also the longest pause between two elements).
* **Start.** Until the first element arrives, ``start_timeout`` applies instead (counted from the
  first ``next_batch`` call): :class:`~airflow_kafka_events.errors.StreamNotStartedError`.
* **End.** An ``is_last`` element ends the stream, delivered (a page, or a payload-less end marker)
  in a final batch with ``finished=True``.  One carrying an ``error`` is not delivered: the elements
  before it are, then the next call raises :class:`~airflow_kafka_events.errors.StreamFailedError`
  with the producer's error; before raising, the reader reads the partition up to its current end,
  so a retry (a higher attempt) already written supersedes the failure.
* **Poison.** A record with the stream's key that cannot be decoded is returned in the batch's
  ``rejected`` list for the caller to dead-letter
  (:func:`~airflow_kafka_events.streams.consuming.decoder.decode_stream_record`); records of other
  keys are skipped by their key, without decoding them.

Resuming: :meth:`StreamReader.ack` tells the reader the caller finished a batch (and every earlier
one); :meth:`StreamReader.checkpoint` is then the position after it, never past an unacknowledged
element.  A reader created with that :class:`~airflow_kafka_events.streams.checkpoint.Checkpoint`
seeks to its offset (no consumer group needed) and skips elements below its sequence index; when
the offset is gone (retention) or unknown, it reads the partition from its beginning.  With
``group_id`` the position is also committed to that dedicated group
(:mod:`~airflow_kafka_events.streams.consuming.commits`).  Rejected records are delivered at least
once.  The partition: an explicit one, the checkpoint's, else the key's by murmur2, or with
``scan_partitions`` the first where the key appears
(:mod:`~airflow_kafka_events.streams.consuming.partition`).

Python's cyclic collector: a reader decodes each batch with collections paused
(:func:`~airflow_kafka_events.streams.consuming.collector.collections_paused`, which turns the
collector back on after the decode only if it found it on); it changes no collector setting.

A reader is not thread-safe; use one per thread.  This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    KafkaOperationError,
    StreamFailedError,
    StreamReadError,
    ValidationError,
)
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.consumer import ConsumedRecord, RecordDecoder, consume_available
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.collector import collections_paused
from airflow_kafka_events.streams.consuming.commits import (
    commit_checkpoint,
    committed_checkpoint,
    reader_config,
)
from airflow_kafka_events.streams.consuming.deadlines import StreamDeadlines, positive_seconds
from airflow_kafka_events.streams.consuming.decoder import StreamDecoder, decode_stream_record, usable_message
from airflow_kafka_events.streams.consuming.partition import (
    partition_count,
    readable_offset,
)
from airflow_kafka_events.streams.consuming.sequence import (
    BatchPolicy,
    Offer,
    SequenceTracker,
    StreamBatch,
    failure_error,
    gap_error,
)

__all__ = [
    "ReadOptions",
    "StreamReader",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadOptions:
    """How a stream is read (see the module doc), validated on construction.

    ``max_events`` pages at most per batch, due ``max_wait`` seconds after its first page was
    ready; ``gap_timeout`` / ``start_timeout`` seconds to wait for the next / the first page;
    ``poll_timeout`` seconds of one Kafka poll.  A bad value is a
    :class:`~airflow_kafka_events.errors.ConfigurationError` naming the option.
    """

    max_events: int = 100
    max_wait: float = 1.0
    gap_timeout: float = 300.0
    start_timeout: float = 600.0
    poll_timeout: float = 0.2

    def __post_init__(self) -> None:
        policy = BatchPolicy(self.max_events, self.max_wait)  # an int >= 1, seconds >= 0
        object.__setattr__(self, "max_wait", float(policy.max_wait))
        for name in ("gap_timeout", "start_timeout", "poll_timeout"):
            object.__setattr__(self, name, positive_seconds(name, getattr(self, name)))

    @property
    def policy(self) -> BatchPolicy:
        return BatchPolicy(self.max_events, self.max_wait)

    def windowed(self, start_timeout: float, gap_timeout: float) -> ReadOptions:
        """These options with other (start, gap) timeouts, e.g. an idle interval."""
        return replace(self, start_timeout=start_timeout, gap_timeout=gap_timeout)


def _check_reader_arguments(
    topic: Any, trigger_run_id: Any, *, max_buffered: int, partition: int | None, checkpoint: Any
) -> None:
    if not isinstance(topic, str) or not topic:
        raise ConfigurationError(f"topic must be a non-empty str, got {topic!r}")
    if not isinstance(trigger_run_id, str) or not trigger_run_id:
        raise ConfigurationError(f"trigger_run_id must be a non-empty str, got {trigger_run_id!r}")
    if max_buffered < 1:
        raise ConfigurationError(f"max_buffered must be >= 1, got {max_buffered!r}")
    if partition is not None and partition < 0:
        raise ConfigurationError(f"partition must be >= 0, got {partition!r}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise ConfigurationError(f"checkpoint must be a Checkpoint, got {type(checkpoint).__qualname__}")


class StreamReader:
    """Reads one trigger run's stream from ``topic`` in order, in batches (see the module doc).

    ``consumer_config`` is a librdkafka consumer configuration, e.g.
    ``KafkaSettings.consumer_config(group_id)``; the reader turns off auto-commit and
    offset storing and resets to the earliest offset.  With ``group_id`` the acknowledged
    position is committed to that (dedicated) group; otherwise nothing is committed.
    ``partition`` pins the stream's partition.  ``codec`` decodes values (default: the
    registry-less trigger event codec).  ``max_buffered`` bounds the elements held ahead
    of a missing one: beyond it the gap is reported at once.  ``options``: the batches and
    the timeouts (:class:`ReadOptions`).
    """

    #: Monotonic clock and sleep; replaceable for tests.
    _clock = staticmethod(time.monotonic)
    _sleep = staticmethod(time.sleep)

    def __init__(
        self,
        consumer_config: Mapping[str, Any],
        topic: str,
        trigger_run_id: str,
        *,
        options: ReadOptions = ReadOptions(),
        checkpoint: Checkpoint | None = None,
        group_id: str | None = None,
        partition: int | None = None,
        codec: RecordDecoder[TriggerEventEnvelope] = TRIGGER_EVENT_CODEC,
        max_buffered: int = 10_000,
        scan_partitions: bool = False,
    ) -> None:
        _check_reader_arguments(
            topic, trigger_run_id, max_buffered=max_buffered, partition=partition, checkpoint=checkpoint
        )
        if not isinstance(options, ReadOptions):
            raise ConfigurationError(f"options must be a ReadOptions, got {type(options).__qualname__}")
        self.topic = topic
        self.trigger_run_id = trigger_run_id
        self.options = options
        self.policy = options.policy
        self.gap_timeout = options.gap_timeout
        self.start_timeout = options.start_timeout
        self.poll_timeout = options.poll_timeout
        self.group_id = group_id
        self.max_buffered = max_buffered
        self._decoder = StreamDecoder(codec)
        self._key = trigger_run_id.encode("utf-8")
        self._token = object()

        self._tracker = self._new_tracker(checkpoint)
        self._acked: Checkpoint | None = checkpoint
        self._acked_number = 0
        self._batches = 0
        self._partition: int | None = partition
        self._scan_partitions = scan_partitions  # the producer's partitioner is not murmur2
        if self._partition is None and checkpoint is not None:
            self._partition = checkpoint.partition
        # offset after the last record read from the stream's partition (None: not known)
        self._next_offset: int | None = checkpoint.offset if checkpoint is not None else None
        self._resume_from_group = checkpoint is None and group_id is not None
        self._assigned = False
        self._rejected: list[ConsumedRecord[TriggerEventEnvelope]] = []
        # consumed messages not taken in yet (from ``_unread_at`` on): a chunk is decoded only as
        # far as the next batch needs, so the decoded pages held at once are about one batch
        self._unread: list[Message] = []
        self._unread_at = 0
        self._ready_since: float | None = None
        self._deadlines = StreamDeadlines(options.start_timeout, options.gap_timeout)
        self._failure_error: StreamFailedError | None = None
        self._closed = False

        self._consumer: Any = None
        if not self._tracker.finished_taken:
            self._consumer = self._make_consumer(reader_config(consumer_config, trigger_run_id, group_id))

    # ------------------------------------------------------------------ seams
    def _make_consumer(self, config: dict[str, Any]) -> Any:
        consumer, _ = new_consumer(config, name=f"reader of {self.trigger_run_id}")
        return consumer

    def _new_tracker(self, checkpoint: Checkpoint | None) -> SequenceTracker:
        if checkpoint is None:
            return SequenceTracker(self.trigger_run_id)
        return SequenceTracker(
            self.trigger_run_id,
            attempt=checkpoint.attempt,
            next_sequence_index=checkpoint.next_sequence_index,
            finished=checkpoint.finished,
        )

    # ------------------------------------------------------------------ public state
    @property
    def partition(self) -> int | None:
        """The stream's partition, once known."""
        return self._partition

    @property
    def tracker(self) -> SequenceTracker:
        return self._tracker

    def checkpoint(self) -> Checkpoint | None:
        """The position after the last acknowledged batch (or the starting checkpoint)."""
        return self._acked

    def _where(self) -> str:
        where = f"stream {self.trigger_run_id!r} on topic {self.topic!r}"
        if self._partition is not None:
            where += f" (partition {self._partition})"
        return where

    def _check_open(self) -> None:
        if self._closed:
            raise StreamReadError(
                f"the reader of {self._where()} is closed",
                topic=self.topic,
                trigger_run_id=self.trigger_run_id,
            )

    # ------------------------------------------------------------------ reading
    def next_batch(self) -> StreamBatch:
        """Block until a batch is due and return it (see the module doc for the rules).

        Raises :class:`StreamNotStartedError`, :class:`StreamGapError`,
        :class:`StreamFailedError`, or :class:`KafkaOperationError` for client failures.
        After the final batch it returns empty finished batches.
        """
        self._check_open()
        if self._failure_error is not None:
            raise self._failure_error
        if self._tracker.finished_taken:
            return self._batch()
        call_start = self._clock()
        self._deadlines.begin(call_start)
        while True:
            now = self._clock()
            if not self._assigned:
                self._await_assignment(now, call_start)
                continue
            batch = self._batch_if_due(now, call_start)
            if batch is not None:
                return batch

    def _await_assignment(self, now: float, call_start: float) -> None:
        if self._assign():
            return
        self._check_deadline(now, call_start)
        self._sleep(min(self.poll_timeout, max(0.0, self._deadline(call_start) - now)))

    def _batch_if_due(self, now: float, call_start: float) -> StreamBatch | None:
        """The batch when one is due; else read what comes until it could be (``None``)."""
        ready = self._tracker.ready_count + len(self._rejected)
        if ready and self._ready_since is None:
            self._ready_since = now
        if self.policy.due(ready, self._ready_since, now, end_known=self._tracker.ended):
            return self._batch()
        if not ready and self._tracker.failure is not None:
            self._catch_up()
            if self._tracker.failure is not None and not self._rejected:
                raise self._fail()
            return None
        if now >= self._deadline(call_start):
            if ready:  # hand out what came before the gap first
                return self._batch()
            self._check_deadline(now, call_start)
        wake = [self._deadline(call_start)]
        due_at = self.policy.due_at(ready, self._ready_since)
        if due_at is not None:
            wake.append(due_at)
        self._take_in(max(0.0, min(self.poll_timeout, min(wake) - now)))
        return None

    def fill(self, timeout: float) -> None:
        """Read what arrives within ``timeout`` seconds into the reader, handing nothing out.

        For a caller that only waits for elements (a deferred consumer's trigger) and keeps
        its own start and gap clocks: no start or gap deadline applies here.  It looks at
        :attr:`tracker` afterwards (``started``, ``ready_count``, ``ended``, ``restarts``).
        Returns early once ``max_events`` elements are ready or the stream's end (or
        failure) is known.  Raises :class:`StreamGapError` when more than ``max_buffered``
        elements are held ahead of a missing one, :class:`KafkaOperationError` for client
        failures, :class:`StreamReadError` once closed.
        """
        self._check_open()
        deadline = self._clock() + max(0.0, timeout)
        while not self._tracker.finished_taken:
            now = self._clock()
            if now >= deadline:
                return
            if not self._assigned and not self._assign():
                self._sleep(min(self.poll_timeout, deadline - now))
                continue
            self._take_in(min(self.poll_timeout, deadline - now))
            if self._tracker.ended or self._tracker.ready_count >= self.policy.max_events:
                return

    def __iter__(self) -> Iterator[StreamBatch]:
        """Batches until the final one (``finished=True``); raises the typed stream errors."""
        while True:
            batch = self.next_batch()
            yield batch
            if batch.finished:
                return

    def ack(self, batch: StreamBatch) -> Checkpoint:
        """The caller finished handling ``batch`` (and every batch before it).

        Returns the new checkpoint; with ``group_id`` it is also committed to the group
        (a failed commit raises :class:`KafkaOperationError`, the in-memory checkpoint is
        advanced regardless).  Acknowledging an older batch again changes nothing.
        """
        if not isinstance(batch, StreamBatch) or batch._reader_token is not self._token:
            raise ValidationError("ack() takes a batch returned by this reader's next_batch()")
        if batch.number <= self._acked_number and self._acked is not None:
            return self._acked
        self._acked_number = max(self._acked_number, batch.number)
        self._acked = batch.checkpoint
        if self.group_id and self._consumer is not None and not self._closed:
            self._commit(batch.checkpoint)
        return batch.checkpoint

    def close(self) -> None:
        """Release the Kafka client. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        self._unread = []
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            consumer.close()
        except Exception as exc:  # closing must not mask the caller's own error
            log.warning("closing the Kafka consumer of %s failed: %s", self._where(), exc)

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ deadlines
    def _deadline(self, call_start: float) -> float:
        return self._deadlines.deadline(call_start, started=self._tracker.started)

    def _check_deadline(self, now: float, call_start: float) -> None:
        error = self._deadlines.expired(
            now, call_start, self._tracker, assigned=self._assigned, topic=self.topic, where=self._where()
        )
        if error is not None:
            raise error

    def _fail(self) -> StreamFailedError:
        self._failure_error = failure_error(self._tracker, topic=self.topic)
        return self._failure_error

    # ------------------------------------------------------------------ Kafka
    def _assign(self) -> bool:
        """Assign the stream's partition (or every partition); ``False`` while the topic is missing."""
        count = partition_count(self._consumer, self.topic, max(self.poll_timeout, 1.0))
        if count is None:
            return False
        if self._partition is None and not self._scan_partitions:
            self._partition = partition_for_key(self._key, count)
        if self._partition is not None and self._partition >= count:
            raise ConfigurationError(
                f"{self._where()}: partition {self._partition} does not exist (the topic has {count})"
            )
        candidates = [self._partition] if self._partition is not None else list(range(count))
        if self._resume_from_group:
            self._load_group_checkpoint(candidates)
        assignment = [self._start_position(p) for p in candidates]
        try:
            self._consumer.assign(assignment)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception(f"cannot assign {self._where()}", exc) from exc
        log.debug(
            "%s: reading %s",
            self._where(),
            ", ".join(f"partition {tp.partition} from offset {tp.offset}" for tp in assignment),
        )
        self._assigned = True
        return True

    def _start_position(self, partition: int) -> TopicPartition:
        if partition == self._partition and self._next_offset is not None:
            self._next_offset = readable_offset(
                self._consumer,
                self.topic,
                partition,
                self._next_offset,
                timeout=max(self.poll_timeout, 5.0),
                where=self._where(),
            )
        if partition != self._partition or self._next_offset is None:
            return TopicPartition(self.topic, partition, OFFSET_BEGINNING)
        return TopicPartition(self.topic, partition, self._next_offset)

    def _load_group_checkpoint(self, partitions: list[int]) -> None:
        self._resume_from_group = False
        found = committed_checkpoint(
            self._consumer,
            self.topic,
            partitions,
            trigger_run_id=self.trigger_run_id,
            group_id=self.group_id,
            timeout=max(self.poll_timeout, 10.0),
            where=self._where(),
        )
        if found is None:
            return
        partition, checkpoint = found
        log.info("%s: resuming from group %r at %s", self._where(), self.group_id, checkpoint)
        self._tracker = self._new_tracker(checkpoint)
        self._acked = checkpoint
        self._partition = partition
        self._next_offset = checkpoint.offset
        partitions[:] = [partition]

    def _commit(self, checkpoint: Checkpoint) -> None:
        commit_checkpoint(
            self._consumer,
            self.topic,
            checkpoint,
            trigger_run_id=self.trigger_run_id,
            group_id=self.group_id,
            where=self._where(),
        )

    def _consume(self, timeout: float) -> list[Message]:
        try:
            return consume_available(self._consumer, max(self.policy.max_events, 500), timeout)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception(f"consuming {self._where()} failed", exc) from exc

    def _catch_up(self) -> None:
        """Read the stream's partition up to its current end (a retry may already be written)."""
        if self._partition is None:
            return
        try:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, self._partition), timeout=max(self.poll_timeout, 5.0), cached=False
            )
        except KafkaException as exc:
            log.warning("%s: cannot read the end offset (%s); not looking for a retry", self._where(), exc)
            return
        deadline = self._clock() + self.gap_timeout
        while self._tracker.failure is not None and (self._next_offset or 0) < high:
            now = self._clock()
            if now >= deadline:
                return
            self._take_in(max(0.0, min(self.poll_timeout, deadline - now)))

    # ------------------------------------------------------------------ records
    def _take_in(self, timeout: float) -> None:
        """Take in the consumed messages not taken in yet, else consume (waiting up to ``timeout``)."""
        if self._unread_at >= len(self._unread):
            self._unread, self._unread_at = self._consume(timeout), 0
        self._process()

    def _process(self) -> None:
        """Take unread messages in, in one pass (most are the stream's next elements), until
        ``max_events`` elements (or rejected records) are ready; the rest wait for the next pass.
        The collector is paused while they are decoded (:func:`collections_paused`): the batch's
        pages meet one young collection after the pass, not one every 700 allocations."""
        tracker = self._tracker
        before = tracker.progress
        lock_on: int | None = None
        key = self._key
        where = self._where()  # for the logs
        messages, at, full = self._unread, self._unread_at, self.policy.max_events
        count = len(messages)
        with collections_paused():
            while at < count:
                msg = messages[at]
                at += 1
                if msg.error() is not None and not usable_message(msg, where=where):
                    continue
                partition = msg.partition()
                offset = msg.offset()
                if self._partition is not None and partition != self._partition:
                    continue  # scan mode: another partition, fetched before the lock-on
                if msg.key() != key:
                    if self._partition is not None and offset is not None:
                        self._next_offset = offset + 1
                    continue
                if self._partition is None:  # scan mode found the stream's partition
                    self._partition = lock_on = partition
                    where = self._where()
                if offset is not None:
                    self._next_offset = offset + 1
                self._handle(msg, offset, where)
                if tracker.ready_count + len(self._rejected) >= full:
                    break
        if at < count:
            self._unread_at = at
        else:  # every message taken in: drop the chunk
            self._unread, self._unread_at = [], 0
        self._settle(before, lock_on, where)

    def _settle(self, before: tuple[int, int, int, bool], lock_on: int | None, where: str) -> None:
        """After a pass: the scan's lock-on, too many held elements, the progress clock."""
        tracker = self._tracker
        if lock_on is not None:
            self._lock_on(lock_on)
        if tracker.buffered_count > self.max_buffered:
            how = f"more than {self.max_buffered} later elements arrived meanwhile"
            raise gap_error(tracker, f"{self._where()}: ", how, topic=self.topic)
        if tracker.progress != before:
            self._deadlines.last_progress = self._clock()
            if tracker.progress[0] != before[0]:
                log.info(
                    "%s: attempt %d supersedes attempt %d; starting over at sequence_index 0",
                    where,
                    tracker.attempt,
                    before[1],
                )

    def _handle(self, msg: Message, offset: int | None, where: str) -> None:
        envelope = decode_stream_record(
            msg, self._decoder, trigger_run_id=self.trigger_run_id, topic=self.topic, where=where
        )
        if isinstance(envelope, ConsumedRecord):
            self._rejected.append(envelope)
            return
        outcome = self._tracker.offer(envelope, offset)
        if outcome is not Offer.READY and outcome not in (Offer.BUFFERED, Offer.RESTARTED):
            log.debug(
                "%s: dropped attempt %d sequence_index %d at offset %s (%s)",
                where,
                envelope.attempt,
                envelope.sequence_index,
                offset,
                outcome.value,
            )

    def _lock_on(self, partition: int) -> None:
        """Scan mode found the stream's partition: read only that one from now on."""
        offset = self._next_offset if self._next_offset is not None else OFFSET_BEGINNING
        log.debug("%s: found the stream; dropping the other partitions", self._where())
        self._unread, self._unread_at = [], 0  # read again from the offset after the last one taken in
        try:
            self._consumer.assign([TopicPartition(self.topic, partition, offset)])
        except KafkaException as exc:
            raise KafkaOperationError.from_exception(f"cannot assign {self._where()}", exc) from exc

    # ------------------------------------------------------------------ batches
    def _resume_offset(self) -> int | None:
        held = self._tracker.lowest_held_position()
        if held is None:
            return self._next_offset
        if self._next_offset is None:
            return held
        return min(held, self._next_offset)

    def _batch(self) -> StreamBatch:
        taken = self._tracker.take(self.policy.max_events)
        rejected, self._rejected = self._rejected, []
        if self._tracker.ready_count == 0:
            self._ready_since = None
        self._batches += 1
        checkpoint = Checkpoint(
            attempt=taken.attempt,
            next_sequence_index=taken.next_sequence_index,
            offset=self._resume_offset(),
            partition=self._partition,
            finished=taken.finished,
        )
        offsets = [pos for pos in taken.positions if pos is not None]
        if taken.restarted:
            log.info(
                "%s: restarted at attempt %d; elements of earlier attempts handed out before are superseded",
                self._where(),
                taken.attempt,
            )
        return StreamBatch(
            events=taken.events,
            attempt=taken.attempt,
            restarted=taken.restarted,
            finished=taken.finished,
            rejected=rejected,
            first_offset=offsets[0] if offsets else None,
            last_offset=offsets[-1] if offsets else None,
            partition=self._partition,
            checkpoint=checkpoint,
            number=self._batches,
            _reader_token=self._token,
        )

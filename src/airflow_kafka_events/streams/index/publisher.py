"""What a stream's producer and its consumers write to the stream index, and when.

* :class:`StreamIndexWriter` -- the streaming trigger's: its stream's record at the attempt's start,
  then after a page when :class:`~.options.Cadence` says so (every N pages or S seconds), and at its
  end (finished, or failed with the error).  Each record carries a ``pages_over_time`` sample.
* :class:`ConsumerIndexWriter` -- a consumer's (a streaming task reading its own stream, a
  ``StreamConsumerOperator``): its position after a checkpoint when the cadence says so, and when it
  stops (finished or not).

The index is a view for people: writing it never holds a page or a batch up and never fails a
stream.  Records are queued (``send``, no wait) on a producer of their own with a short
:data:`INDEX_WRITE_TIMEOUT`; only the last one is awaited, at most that long.  A failed write is
logged (the first with the fix, the others at debug level); when the index topic does not exist the
writer stops writing (one warning naming ``topics ensure``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError

from airflow_kafka_events.streams.index.options import Cadence
from airflow_kafka_events.streams.index.record import (
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    encode_record,
    sampled,
    stream_key,
)

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.delivery import DeliveryFuture
    from airflow_kafka_events.streams.checkpoint import Checkpoint

__all__ = [
    "INDEX_ROLE",
    "INDEX_WRITE_TIMEOUT",
    "ConsumerIndexWriter",
    "StreamIndexWriter",
    "consumer_writer",
]

log = logging.getLogger(__name__)

#: Producer role of the index writers (a producer of their own: its short timeout).
INDEX_ROLE = "stream-index"
#: Seconds an index record may take to be delivered (and the most a writer waits for its last one).
INDEX_WRITE_TIMEOUT = 5.0
_MISSING = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


class _Sender:
    """Queues index records on ``producer``; logs failures; stops when the topic is missing."""

    def __init__(self, producer: Any, topic: str, what: str, logger: Any, clock: Callable[[], float]) -> None:
        self.producer = producer
        self.topic = topic
        self.what = what
        self.log = logger if logger is not None else log
        self.clock = clock
        self.failures = 0
        self.stopped: str | None = None
        self.last: DeliveryFuture | None = None

    def _done(self, future: DeliveryFuture) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        if getattr(exc, "code", None) in _MISSING:
            if self.stopped is None:
                self._stop(str(exc), f": {exc}")
            return
        (self.log.warning if self.failures == 1 else self.log.debug)(
            "%s: writing its stream index record to %r failed (the stream itself is not affected): %s",
            self.what,
            self.topic,
            exc,
        )

    def check_topic(self, timeout: float = INDEX_WRITE_TIMEOUT) -> bool:
        """Whether the index topic exists (blocking: one metadata request); a missing one stops the
        writer at once (one warning) instead of after its first record's delivery timeout."""
        has = getattr(self.producer, "has_topic", None)
        if has is None or has(self.topic, timeout) is not False:
            return True  # unknown: the writes say
        self._stop("missing", "")
        return False

    def _stop(self, cause: str, detail: str) -> None:
        """Stop writing: the index topic is missing (one warning with the fix)."""
        self.stopped = cause
        self.log.warning(
            "%s: the stream index topic %r does not exist; the index is not written (fix: create it with "
            "`airflow-kafka-events topics ensure`, [kafka_events] stream_index_topic)%s",
            self.what,
            self.topic,
            detail,
        )

    def send(self, key: bytes, value: bytes) -> None:
        if self.stopped is not None:
            return
        try:
            future = self.producer.send(self.topic, value, key=key, timeout=INDEX_WRITE_TIMEOUT)
        except Exception as exc:  # a closed producer, a full queue: the index misses one record
            self._failed(exc)
            return
        future.add_done_callback(self._done)
        self.last = future

    def wait_last(self, timeout: float = INDEX_WRITE_TIMEOUT) -> bool:
        """Block until the last queued record is delivered (or failed, or ``timeout``); whether it was."""
        future = self.last
        if future is None:
            return False
        try:
            future.result(timeout=timeout)
        except Exception:  # logged by _done
            return False
        return True


class StreamIndexWriter:
    """Writes one attempt's :class:`StreamRecord` as the streaming trigger writes its pages."""

    def __init__(
        self,
        producer: Any,
        index_topic: str,
        record: StreamRecord,
        *,
        cadence: Cadence | None = None,
        logger: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sender = _Sender(producer, index_topic, f"stream {record.stream_id}", logger, clock)
        self.cadence = cadence if cadence is not None else Cadence()
        self.record = record
        self.key = stream_key(record.stream_id)
        self._written_pages = record.pages
        self._written_at = clock()

    @property
    def clock(self) -> Callable[[], float]:
        return self.sender.clock

    def check_topic(self) -> bool:
        """Whether the index topic exists (blocking; see :meth:`_Sender.check_topic`)."""
        return self.sender.check_topic()

    def _write(self, record: StreamRecord) -> None:
        self.record = record
        self._written_pages = record.pages
        self._written_at = record.updated_at
        self.sender.send(self.key, encode_record(record))

    def start(self) -> None:
        """The attempt's first record (status running)."""
        now = self.clock()
        started = self.record.started_at if self.record.started_at is not None else now
        self._write(self.record.with_pages(now, self.record.pages, status="running", started_at=started))

    def page(self, sequence_index: int, offset: int) -> None:
        """Page ``sequence_index`` was delivered at ``offset``; the record is written when it is due."""
        now = self.clock()
        first = self.record.first_offset if self.record.first_offset is not None else offset
        if sequence_index == 0:
            first = offset
        pages = sequence_index + 1
        self.record = replace(
            self.record,
            pages=pages,
            last_sequence=sequence_index,
            last_offset=offset,
            first_offset=first,
            last_page_at=now,
        )
        if self.cadence.due(pages - self._written_pages, now - self._written_at):
            self._write(self.record.with_pages(now, pages))

    def pages(self, first_sequence: int, offsets: Sequence[int]) -> None:
        """Pages ``first_sequence ..`` were delivered at ``offsets``: as :meth:`page` for each, but the
        record is only looked at where the page cadence falls due and at the last one."""
        if not offsets:
            return
        last = first_sequence + len(offsets) - 1
        due = self._written_pages + self.cadence.pages - 1  # the page whose delivery makes it due
        while first_sequence <= due < last:
            self.page(due, offsets[due - first_sequence])
            due = self._written_pages + self.cadence.pages - 1
        self.page(last, offsets[-1])

    def finished(self, pages: int, last_offset: int, first_offset: int | None, error: str | None) -> None:
        """The terminal marker (sequence index ``pages``) was delivered at ``last_offset``."""
        now = self.clock()
        self._write(
            self.record.with_pages(
                now,
                pages,
                status="failed" if error is not None else "finished",
                ended_at=now,
                last_page_at=now,
                last_sequence=pages,
                last_offset=last_offset,
                first_offset=first_offset,
                error=error,
            )
        )

    async def flush(self, timeout: float = INDEX_WRITE_TIMEOUT) -> bool:
        """Wait (without blocking the loop) for the last record's delivery; whether it was delivered."""
        future = self.sender.last
        if future is None:
            return False
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancellation (3.11)
                await future
        except Exception:  # logged by the sender
            return False
        return True


class ConsumerIndexWriter:
    """Writes one consumer's :class:`ConsumerRecord` of one stream as it checkpoints."""

    def __init__(
        self,
        producer: Any,
        index_topic: str,
        record: ConsumerRecord,
        *,
        cadence: Cadence | None = None,
        logger: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sender = _Sender(producer, index_topic, f"consumer {record.consumer_id}", logger, clock)
        self.cadence = cadence if cadence is not None else Cadence()
        self.record = record
        self.key = consumer_key(record.stream_id, record.consumer_id)
        self._written_at: float | None = None
        self._written_position: int | None = None

    def check_topic(self) -> bool:
        """Whether the index topic exists (blocking; see :meth:`_Sender.check_topic`)."""
        return self.sender.check_topic()

    def position(
        self,
        *,
        attempt: int,
        next_sequence_index: int,
        offset: int | None,
        finished: bool,
        lag_pages: int | None = None,
        force: bool = False,
    ) -> None:
        """The consumer handled pages ``0..next_sequence_index-1`` of ``attempt``; written when due."""
        now = self.sender.clock()
        previous_attempt = self.record.attempt
        before = self._written_position
        moved = 0 if before is None else max(0, next_sequence_index - before)
        due = (
            force
            or finished
            or self._written_at is None
            or attempt != previous_attempt
            or self.cadence.due(moved, now - self._written_at)
        )
        self.record = replace(
            self.record,
            attempt=attempt,
            next_sequence_index=next_sequence_index,
            offset=offset,
            finished=finished,
            lag_pages=lag_pages,
            updated_at=now,
        )
        if not due:
            return
        samples = self.record.positions_over_time if attempt == previous_attempt else ()
        self.record = replace(self.record, positions_over_time=sampled(samples, now, next_sequence_index))
        self._written_at, self._written_position = now, next_sequence_index
        self.sender.send(self.key, encode_record(self.record))

    def checkpointed(self, checkpoint: Checkpoint) -> None:
        """The consumer acknowledged ``checkpoint``: :meth:`position` at it."""
        self.position(
            attempt=checkpoint.attempt,
            next_sequence_index=checkpoint.next_sequence_index,
            offset=checkpoint.offset,
            finished=checkpoint.finished,
        )

    def close(self, timeout: float = INDEX_WRITE_TIMEOUT) -> bool:
        """Write the latest position if it was not, then wait for it (at most ``timeout``)."""
        if self._written_position != self.record.next_sequence_index and self.record.attempt is not None:
            self.position(
                attempt=self.record.attempt,
                next_sequence_index=self.record.next_sequence_index or 0,
                offset=self.record.offset,
                finished=self.record.finished,
                lag_pages=self.record.lag_pages,
                force=True,
            )
        return self.sender.wait_last(timeout)


def consumer_writer(
    settings: Any, stream_id: str, context: Mapping[str, Any], *, logger: Any = None
) -> ConsumerIndexWriter | None:
    """The index writer of the task instance in ``context`` reading ``stream_id``.

    ``None`` when the context has no task instance, or no producer could be made (logged).
    ``settings``: the consumer's ``KafkaSettings`` (the producer is one per process and connection).
    The writer has checked that the index topic exists (one metadata request): with the topic
    missing it writes nothing, and its close does not wait a record's delivery timeout.
    """
    from airflow_kafka_events.kafka.producer import get_producer
    from airflow_kafka_events.streams.descriptor import generation_of
    from airflow_kafka_events.streams.descriptor import stream_id as task_stream
    from airflow_kafka_events.streams.index.options import index_topic

    ti = context.get("ti")
    if ti is None:
        return None
    dag_id, run_id, task_id = (getattr(ti, name, None) for name in ("dag_id", "run_id", "task_id"))
    map_index = getattr(ti, "map_index", None)
    map_index = -1 if not isinstance(map_index, int) or isinstance(map_index, bool) else map_index
    try:
        consumer_id = task_stream(dag_id, run_id, task_id, map_index)  # type: ignore[arg-type]
    except ValueError:
        return None
    record = ConsumerRecord(
        stream_id=stream_id,
        consumer_id=consumer_id,
        updated_at=time.time(),
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        generation=generation_of(context),
    )
    try:
        producer = get_producer(
            settings.producer_config(), role=INDEX_ROLE, message_timeout=INDEX_WRITE_TIMEOUT
        )
        writer = ConsumerIndexWriter(
            producer, index_topic(), record, cadence=Cadence.from_config(), logger=logger
        )
        writer.check_topic()
        return writer
    except Exception as exc:  # the index never fails a task
        (logger if logger is not None else log).warning(
            "stream %s: the consumer's stream index record will not be written: %s", stream_id, exc
        )
        return None

"""The results stream of an iteration: every item's result, in Kafka, as a trigger event stream.

Each ``@task.iterable`` task instance writes the results of its items to the stream
``stream_id(dag_id, run_id, task_id, map_index)`` -- the same naming as a streaming
producer -- one :class:`~airflow_kafka_events.envelopes.model.TriggerEventEnvelope` per succeeded
item, payload ``{"ordinal": <int>, "id": <item id>, "result": <JSON value>}``, in completion
order.  Any reader of trigger event streams reads it: a further stage iterates it lazily
(``results_of(task_id)`` / ``StreamRef(task_id)``), while it is being written.

Rules (:class:`ResultsStreamWriter`, the runner's result sink)

* Delivery is pipelined (no wait per result); an item counts as done only once the broker
  acknowledged its result (``acks=all``), so the task's checkpoint never covers a lost
  result.  A failed delivery fails the task.
* Generations: every envelope records the task's generation (the DAG run's
  ``clear_number``).  A task cleared since the stream's latest attempt writes a new attempt
  from ``sequence_index`` 0; readers follow the highest attempt.
* Retries continue the attempt: the next result gets the next ``sequence_index``.  Before
  the first item, the writer reads the attempt's records written after the checkpoint's
  position (or, without a checkpoint, the whole attempt: a worker that died before its
  first checkpoint) and reports their items as done, so an item whose result was delivered
  is neither run again nor written twice -- even when the worker died before the
  checkpoint that would have covered it.
* End: when every item succeeded the writer appends the payload-less ``is_last`` marker
  (its ``sequence_index`` is the number of results).  When items failed and the task will
  be retried the stream stays open (the retry continues it); on the task's last try the
  marker carries the error, so lazy readers stop with ``StreamFailedError`` instead of
  waiting.  A stream whose attempt ended in error, or has a gap (a lost delivery), is
  started over as a new attempt, and the iteration with it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import (
    EnvelopeDecodeError,
    EnvelopeEncodeError,
    StreamProgressError,
    ValidationError,
)
from airflow_kafka_events.iteration.errors import NonRetryableItemError
from airflow_kafka_events.iteration.items import Item
from airflow_kafka_events.iteration.outcome import SinkOpening
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.progress import (
    FIRST_OFFSET_METADATA_KEY,
    GENERATION_METADATA_KEY,
    StreamLocation,
    StreamProgress,
    lookup_stream,
)

__all__ = [
    "ResultsStreamWriter",
    "read_partition_range",
]

log = logging.getLogger(__name__)

#: Producer role of results, and how long a result waits for the broker (the role's message
#: timeout: a result not acknowledged by then is dropped, never published later).
RESULTS_ROLE = "iteration-results"
RESULTS_DELIVERY_TIMEOUT = 30.0


def read_partition_range(
    settings: KafkaSettings,
    topic: str,
    partition: int,
    start: int,
    end: int,
    key: bytes,
    *,
    timeout: float = 60.0,
) -> list[tuple[int, TriggerEventEnvelope]]:
    """``(offset, envelope)`` of the records of ``key`` with ``start <= offset < end``, in order.

    Undecodable records are skipped (with a warning).  Raises :class:`StreamProgressError`
    when Kafka fails or the range is not read within ``timeout`` seconds.
    """
    if end <= start:
        return []
    config = settings.consumer_config(
        f"airflow-kafka-events-results-scan-{uuid.uuid4().hex}",
        **{"enable.partition.eof": True, "enable.auto.offset.store": False},
    )
    scan = _RangeScan(topic, partition, start, end, key, settings.codecs.trigger)
    deadline = time.monotonic() + timeout
    consumer, _ = new_consumer(
        config,
        name=f"results scan of {topic}[{partition}]",
        what="cannot create the results stream reader",
        error_type=StreamProgressError,
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StreamProgressError(
                    f"reading offsets {start}..{end - 1} of {topic}[{partition}] took longer than {timeout}s",
                    kafka_error=KafkaError(KafkaError._TIMED_OUT),
                )
            for msg in consumer.consume(num_messages=500, timeout=min(left, 1.0)):
                if scan.take(msg):
                    return scan.found
    except KafkaException as exc:
        raise StreamProgressError.from_exception(f"reading {topic}[{partition}] failed", exc) from exc
    finally:
        try:
            consumer.close()
        except Exception as exc:  # closing must not mask the caller's error
            log.warning("closing the results stream reader failed: %s", exc)


@dataclass
class _RangeScan:
    """The records of ``key`` in ``[start, end)`` of one partition, collected message by message."""

    topic: str
    partition: int
    start: int
    end: int
    key: bytes
    codec: EnvelopeCodec[TriggerEventEnvelope]
    found: list[tuple[int, TriggerEventEnvelope]] = field(default_factory=list)

    def take(self, msg: Any) -> bool:
        """Collect ``msg`` if it is one of the range's; whether the range is read to its end."""
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return True
            if err.retriable():
                return False
            raise StreamProgressError(f"reading {self.topic}[{self.partition}] failed", kafka_error=err)
        offset = msg.offset()
        if offset is None or offset < self.start:
            return False
        if offset >= self.end:
            return True
        raw = msg.value()
        if msg.key() == self.key and raw is not None:
            try:
                self.found.append((offset, self.codec.decode(raw)))
            except EnvelopeDecodeError as exc:
                log.warning(
                    "skipping an undecodable record at %s[%d]@%d: %s", self.topic, self.partition, offset, exc
                )
        return offset >= self.end - 1


class ResultsStreamWriter:
    """Writes an iteration's results stream; a :class:`~airflow_kafka_events.iteration.outcome.ResultSink`.

    ``lookup`` and ``scan`` (defaults: :func:`~airflow_kafka_events.streams.progress.lookup_stream`
    and :func:`read_partition_range`) are replaceable for tests.
    """

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        producer: RecordProducer,
        topic: str,
        trigger_run_id: str,
        generation: int,
        identity: ProducerIdentity | None = None,
        not_before_ms: int | None = None,
        lookup_timeout: float = 30.0,
        delivery_timeout: float = RESULTS_DELIVERY_TIMEOUT,
        scan_timeout: float = 120.0,
        lookup: Callable[..., tuple[StreamLocation, StreamProgress | None]] = lookup_stream,
        scan: Callable[..., list[tuple[int, TriggerEventEnvelope]]] = read_partition_range,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.topic = topic
        self.trigger_run_id = trigger_run_id
        self.key = trigger_run_id.encode("utf-8")
        self.generation = generation
        self.identity = identity or ProducerIdentity()
        self.not_before_ms = not_before_ms
        self.lookup_timeout = lookup_timeout
        self.delivery_timeout = delivery_timeout
        self.scan_timeout = scan_timeout
        self._lookup = lookup
        self._scan = scan
        self.opened = False
        self.closed = False
        self.complete = False  # the attempt already has its normal end
        self.partition: int | None = None
        self.attempt = 0
        self.first_offset: int | None = None
        self._next_seq = 0  # sequence index of the next result written
        self._acked_seq = 0  # every result below it is delivered
        self._acked_offset: int | None = None  # offset after the last of them
        self._early: dict[int, int] = {}  # delivered out of order: seq -> offset
        self.written = 0

    # ------------------------------------------------------------------ open
    def open(self, saved: Any, *, restart: bool) -> SinkOpening:
        location, progress = self._lookup(
            self.settings,
            self.topic,
            self.trigger_run_id,
            timeout=self.lookup_timeout,
            not_before_ms=self.not_before_ms,
        )
        self.partition = location.partition
        self.opened = True
        fresh_reason: str | None = None
        if progress is None:
            fresh_reason = ""
        elif progress.generation != self.generation:
            fresh_reason = f"attempt {progress.attempt} is of generation {progress.generation}"
        elif progress.is_last and progress.error is not None:
            fresh_reason = f"attempt {progress.attempt} ended in error"
        elif restart:
            fresh_reason = "the iteration starts over"
        if fresh_reason is not None:
            return self._fresh(location, progress, fresh_reason)
        assert progress is not None
        return self._continue(location, progress, saved)

    def _fresh(self, location: StreamLocation, progress: StreamProgress | None, why: str) -> SinkOpening:
        self.attempt = 0 if progress is None else progress.attempt + 1
        self._next_seq = self._acked_seq = 0
        self._acked_offset = location.high
        if progress is not None:
            log.info(
                "results stream %s: writing attempt %d from its start (%s)",
                self.trigger_run_id,
                self.attempt,
                why,
            )
        return SinkOpening(restarted=progress is not None)

    def _continue(self, location: StreamLocation, progress: StreamProgress, saved: Any) -> SinkOpening:
        attempt = progress.attempt
        start: int | None = None
        min_seq = 0
        if isinstance(saved, Mapping) and saved.get("attempt") == attempt:
            start = saved.get("offset")
            min_seq = int(saved.get("next_seq", 0))
        if not isinstance(start, int):
            start = progress.first_offset if progress.first_offset is not None else location.scan_start
            min_seq = 0
        records = self._scan(
            self.settings,
            self.topic,
            location.partition,
            start,
            location.high,
            self.key,
            timeout=self.scan_timeout,
        )
        seqs: set[int] = set()
        recovered: list[int] = []
        for offset, envelope in records:
            if envelope.attempt != attempt or envelope.sequence_index < min_seq:
                continue
            if envelope.sequence_index == 0:
                self.first_offset = offset
            seqs.add(envelope.sequence_index)
            if envelope.is_last:
                continue
            payload = envelope.payload
            if isinstance(payload, Mapping) and isinstance(payload.get("ordinal"), int):
                recovered.append(payload["ordinal"])
        last = progress.sequence_index
        expected = set(range(min_seq, last + 1))
        if seqs != expected:
            missing = sorted(expected - seqs)[:5]
            log.warning(
                "results stream %s: attempt %d misses sequence indexes %s (a lost delivery); starting over",
                self.trigger_run_id,
                attempt,
                missing,
            )
            return self._fresh(location, progress, "its attempt has a gap")
        self.attempt = attempt
        if self.first_offset is None:
            self.first_offset = progress.first_offset
        self.complete = progress.is_last
        self._next_seq = self._acked_seq = last if progress.is_last else last + 1
        self._acked_offset = location.high
        log.info(
            "results stream %s: continuing attempt %d at sequence_index %d; %d result(s) found past the "
            "checkpoint%s",
            self.trigger_run_id,
            attempt,
            self._next_seq,
            len(recovered),
            " (the stream is complete)" if self.complete else "",
        )
        return SinkOpening(recovered=tuple(recovered))

    # ------------------------------------------------------------------ writing
    def _metadata(self, sequence_index: int) -> dict[str, str]:
        metadata = {GENERATION_METADATA_KEY: str(self.generation)}
        if sequence_index > 0 and self.first_offset is not None:
            metadata[FIRST_OFFSET_METADATA_KEY] = str(self.first_offset)
        return metadata

    def _envelope(
        self, sequence_index: int, payload: Any, *, is_last: bool = False, error: StreamFailure | None = None
    ) -> bytes:
        return self.settings.codecs.trigger.encode(
            TriggerEventEnvelope(
                trigger_run_id=self.trigger_run_id,
                sequence_index=sequence_index,
                is_last=is_last,
                payload=payload,
                attempt=self.attempt,
                producer=self.identity,
                error=error,
                metadata=self._metadata(sequence_index),
            ),
            topic=self.topic,
        )

    def put(self, item: Item, item_id: str, result: Any) -> concurrent.futures.Future[Any]:
        if not self.opened or self.closed:
            raise RuntimeError(f"results stream {self.trigger_run_id!r} is not open")
        if self.complete:
            raise RuntimeError(f"results stream {self.trigger_run_id!r} already ended; no result can follow")
        seq = self._next_seq
        try:
            value = self._envelope(seq, {"ordinal": item.ordinal, "id": item_id, "result": result})
        except (EnvelopeEncodeError, ValidationError) as exc:
            raise NonRetryableItemError(
                f"the result of item {item_id} cannot be written to the results stream: {exc} "
                "(return a JSON value, or turn the results stream off with results_stream=False)"
            ) from exc
        sent = self.producer.send(
            self.topic, value, key=self.key, partition=self.partition, timeout=self.delivery_timeout
        )
        self._next_seq += 1
        self.written += 1
        out: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def relay(fut: concurrent.futures.Future[Any]) -> None:
            error = fut.exception()
            if error is not None:
                out.set_exception(error)
            else:
                out.set_result((seq, fut.result().offset))

        sent.add_done_callback(relay)
        return out

    def delivered(self, value: Any) -> None:
        seq, offset = value
        if seq == 0:
            self.first_offset = offset
        self._early[seq] = offset
        while self._acked_seq in self._early:
            self._acked_offset = self._early.pop(self._acked_seq) + 1
            self._acked_seq += 1

    def state(self) -> dict[str, Any]:
        """Covers the results delivered so far: ``{"attempt", "next_seq", "offset"}``."""
        return {"attempt": self.attempt, "next_seq": self._acked_seq, "offset": self._acked_offset}

    # ------------------------------------------------------------------ end
    def describe(self) -> dict[str, Any]:
        """Where the stream is (the ``results`` entry of the task's summary)."""
        return {
            "topic": self.topic,
            "trigger_run_id": self.trigger_run_id,
            "attempt": self.attempt,
            "partition": self.partition,
            "results": self._acked_seq,
            "written_this_try": self.written,
            "complete": self.complete,
        }

    def close(self, error: BaseException | None = None) -> dict[str, Any]:
        """End the attempt (``is_last``; with ``error`` a failed end) and return :meth:`describe`."""
        if not self.opened or self.closed or self.complete:
            self.closed = True
            return self.describe()
        stream_error = None if error is None else StreamFailure.from_exception(error)
        if stream_error is not None and len(stream_error.message) > 2000:
            stream_error = StreamFailure(type=stream_error.type, message=stream_error.message[:2000] + "...")
        value = self._envelope(self._next_seq, None, is_last=True, error=stream_error)
        receipt = self.producer.send_and_wait(
            self.topic, value, key=self.key, partition=self.partition, timeout=self.delivery_timeout
        )
        self.delivered((self._next_seq, receipt.offset))
        self._next_seq += 1
        self.closed = True
        self.complete = stream_error is None
        description = self.describe()
        description["results"] = self._acked_seq - 1  # the end marker is not a result
        description["failed"] = stream_error is not None
        return description

"""Consumer side of a trigger event stream: read it back in order and hand its pages over.

Every reader of a stream -- the task that resumes after its streaming trigger
(:class:`~airflow_kafka_events.streams.producing.operator.StreamingOperatorMixin`), a consumer
beside its producer (:class:`~airflow_kafka_events.streams.consuming.operator.StreamConsumerOperator`)
and an iteration over a stream (:mod:`airflow_kafka_events.iteration`) -- uses this module:

* :class:`StreamEvent`, :func:`page_events`, :func:`is_end_marker`: the pages of a batch
  as handed to a handler (the payload-less end marker dropped);
* :func:`drive_stream`: the reading loop -- read a
  :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` to the stream's end,
  hand the pages to a batch handler (or a per-page one), checkpoint after each batch and
  acknowledge it; :class:`ConsumptionSummary` is what it did;
* :func:`read_stream`: a finished stream a task resumes with (its descriptor), read from the
  task's checkpoint with :func:`drive_stream`;
* :class:`StreamCheckpoints`: the read checkpoint of one stream in a task's state store
  (key :func:`checkpoint_key`, one generation), loaded and saved in one place.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_events import metrics
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import (
    KafkaOperationError,
    StreamFailedError,
    StreamGapError,
    StreamNotStartedError,
    ValidationError,
)
from airflow_kafka_events.streams.checkpoint import (
    Checkpoint,
    CheckpointStore,
    load_checkpoint,
    save_checkpoint,
    state_store_of,
)
from airflow_kafka_events.streams.consuming.collector import resolve_gc_threshold, young_collections_every
from airflow_kafka_events.streams.descriptor import StreamDescriptor, generation_of

if TYPE_CHECKING:
    from airflow_kafka_events.streams.consuming.sequence import StreamBatch
    from airflow_kafka_events.streams.index.publisher import ConsumerIndexWriter

__all__ = [
    "CHECKPOINT_KEY_PREFIX",
    "ConsumptionSummary",
    "StreamCheckpoints",
    "StreamEvent",
    "checkpoint_key",
    "drive_stream",
    "is_end_marker",
    "page_events",
    "read_stream",
]

log = logging.getLogger(__name__)

#: Task state store key prefix of a stream's read checkpoint.
CHECKPOINT_KEY_PREFIX = "stream:"


# ====================================================================== events
@dataclass(frozen=True)
class StreamEvent:
    """One page of a stream as handed to ``handle_trigger_events``.

    ``payload`` is the page payload (a JSON value or bytes), ``sequence_index`` its position
    (0-based) in attempt ``attempt`` of stream ``trigger_run_id``.
    """

    payload: Any
    sequence_index: int
    attempt: int
    trigger_run_id: str

    @classmethod
    def from_envelope(cls, envelope: TriggerEventEnvelope) -> StreamEvent:
        # The envelope's fields are checked already: set without the frozen __init__'s four
        # object.__setattr__ calls (the consumer loop's own time per page: 5.4 -> 2.3 us).
        event = object.__new__(cls)
        event.__dict__.update(
            payload=envelope.payload,
            sequence_index=envelope.sequence_index,
            attempt=envelope.attempt,
            trigger_run_id=envelope.trigger_run_id,
        )
        return event


def is_end_marker(envelope: TriggerEventEnvelope) -> bool:
    """The payload-less ``is_last`` envelope that ends an attempt (it carries no page)."""
    return envelope.is_last and envelope.payload is None


def page_events(envelopes: Iterable[TriggerEventEnvelope]) -> list[StreamEvent]:
    """The pages among ``envelopes`` (end markers dropped), as :class:`StreamEvent`."""
    page = StreamEvent.from_envelope
    return [page(e) for e in envelopes if not (e.is_last and e.payload is None)]  # is_end_marker


# ====================================================================== checkpoints
def checkpoint_key(trigger_run_id: str) -> str:
    """Task state store key of the read checkpoint of stream ``trigger_run_id``."""
    return f"{CHECKPOINT_KEY_PREFIX}{trigger_run_id}"


@dataclass(frozen=True)
class StreamCheckpoints:
    """The read checkpoint of stream ``trigger_run_id`` in a task state store, for ``generation``.

    Stored under :func:`checkpoint_key` with
    :func:`~airflow_kafka_events.streams.checkpoint.save_checkpoint`; a checkpoint of another
    generation (the task was cleared since) is not loaded.  :meth:`of_task` builds it from
    a task context (``None`` when the context has no task state store).
    """

    store: CheckpointStore
    trigger_run_id: str
    generation: int

    @classmethod
    def of_task(cls, context: Mapping[str, Any], trigger_run_id: str) -> StreamCheckpoints | None:
        """The checkpoints of ``trigger_run_id`` in ``context["task_state_store"]``, if any."""
        store = state_store_of(context)
        if store is None:
            return None
        return cls(store, trigger_run_id, generation_of(context))

    @property
    def key(self) -> str:
        return checkpoint_key(self.trigger_run_id)

    def load(self, logger: logging.Logger | Any = None, *, attempt: int | None = None) -> Checkpoint | None:
        """The stored checkpoint, logged when found; ``None`` when none (or not of ``attempt``)."""
        stored = load_checkpoint(self.store, self.key, self.generation)
        if stored is None or (attempt is not None and stored.attempt != attempt):
            return None
        (logger if logger is not None else log).info(
            "stream %s: resuming after checkpoint %s", self.trigger_run_id, stored
        )
        return stored

    def save(self, checkpoint: Checkpoint) -> None:
        save_checkpoint(self.store, self.key, checkpoint, self.generation)


# ====================================================================== reading loop
def _pages_at(checkpoint: Checkpoint | None) -> int:
    if checkpoint is None:
        return 0
    if checkpoint.finished:  # next_sequence_index counts the end marker
        return max(0, checkpoint.next_sequence_index - 1)
    return checkpoint.next_sequence_index


@dataclass
class ConsumptionSummary:
    """What a stream reading run did; ``to_dict()`` is the XCom of batch handlers.

    ``pages``: pages of the followed attempt handled so far (by every try);
    ``pages_this_try`` / ``batches_this_try``: handled by this run; ``restarted``: a newer
    attempt superseded pages handled before; ``finished``: the stream's end was reached.
    """

    trigger_run_id: str
    topic: str
    attempt: int | None
    pages: int = 0
    pages_this_try: int = 0
    batches_this_try: int = 0
    restarted: bool = False
    finished: bool = False
    #: the run stopped because the stream was idle (see ``drive_stream(is_idle=)``); not in the XCom
    idle: bool = False

    @classmethod
    def starting_at(cls, trigger_run_id: str, topic: str, start: Checkpoint | None) -> ConsumptionSummary:
        """The summary of a run that starts at checkpoint ``start`` (``None``: the beginning)."""
        return cls(
            trigger_run_id=trigger_run_id,
            topic=topic,
            attempt=None if start is None else start.attempt,
            pages=_pages_at(start),
            finished=bool(start is not None and start.finished),
        )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        del values["idle"]
        return values

    def carry(self) -> dict[str, Any]:
        """What a deferred reading run passes on to its resumption (:meth:`carried`)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("trigger_run_id", "topic")}

    @classmethod
    def carried(cls, trigger_run_id: str, topic: str, values: Mapping[str, Any]) -> ConsumptionSummary:
        """The summary a resumed run continues (``values`` from :meth:`carry`)."""
        known = {"pages", "pages_this_try", "batches_this_try", "restarted", "finished"}
        counts = {k: values[k] for k in known if k in values}
        return cls(trigger_run_id=trigger_run_id, topic=topic, attempt=values.get("attempt"), **counts)

    def log_handled(self, logger: logging.Logger | Any = None) -> None:
        """Log what this try handled."""
        (logger if logger is not None else log).info(
            "stream %s: %d page(s) handled by this try in %d batch(es); %d in all",
            self.trigger_run_id,
            self.pages_this_try,
            self.batches_this_try,
            self.pages,
        )


class _Reader(Protocol):
    def next_batch(self) -> StreamBatch: ...

    def ack(self, batch: StreamBatch) -> Checkpoint: ...

    def checkpoint(self) -> Checkpoint | None: ...


def _note_batch(batch: StreamBatch, summary: ConsumptionSummary, out: Any) -> None:
    """Log the batch's rejected records and a restart; follow the batch's attempt."""
    for record in batch.rejected:
        out.warning(
            "stream %s: skipping an undecodable record at %s[%s] offset %s: %s",
            summary.trigger_run_id,
            record.topic,
            record.partition,
            record.offset,
            record.error,
        )
    if batch.restarted:
        out.warning(
            "stream %s: attempt %d supersedes pages handled before; reading it from its start",
            summary.trigger_run_id,
            batch.attempt,
        )
        summary.restarted = True
    if summary.attempt != batch.attempt:
        summary.attempt = batch.attempt
        summary.pages = 0


def _page_checkpoint(event: StreamEvent, batch: StreamBatch, before: Checkpoint | None) -> Checkpoint:
    """The position after ``event``, inside a batch read from checkpoint ``before``."""
    partition = batch.partition
    if partition is None and before is not None:
        partition = before.partition
    return Checkpoint(
        attempt=event.attempt,
        next_sequence_index=event.sequence_index + 1,
        # re-reading from the last acknowledged offset is always safe
        offset=None if before is None else before.offset,
        partition=partition,
    )


def _hand_pages_one_by_one(
    reader: _Reader,
    batch: StreamBatch,
    events: list[StreamEvent],
    handle_event: Callable[[StreamEvent], Any],
    save: Callable[[Checkpoint], None] | None,
    summary: ConsumptionSummary,
) -> Any:
    """Call ``handle_event`` per page; checkpoint after every page but the batch's last."""
    last: Any = None
    before = reader.checkpoint()
    for position, event in enumerate(events):
        last = handle_event(event)
        summary.pages = event.sequence_index + 1
        summary.pages_this_try += 1
        if save is not None and position < len(events) - 1:
            save(_page_checkpoint(event, batch, before))
    return last


def _report_batch(topic: str, batch: StreamBatch, pages: int, seconds: float) -> None:
    """Metrics of a handled batch: pages, the handler's time, the lag behind the last page's write."""
    written = batch.events[-1].emitted_at if batch.events else None
    lag = (datetime.now(timezone.utc) - written).total_seconds() if written is not None else 0.0
    metrics.batch_handled(topic, pages, seconds, lag)


class _CheckpointAhead:
    """A handled batch's checkpoint, stored while the next batch is read.

    :meth:`submit` starts storing a handled batch's checkpoint in one background thread (a
    round trip to Airflow's API: about as long as reading a batch); :meth:`settle`, called
    before the next batch is handed to a handler (and before the reading loop returns), waits
    for it, raises its error, and then acknowledges the batch to the reader (its consumer
    group commit) and tells the stream index.  So a handler never runs before every batch
    handled before it is checkpointed, and a hard crash still replays at most one batch.
    Only ``save`` runs in the thread; the reader, the index and the handlers stay on the
    caller's thread.  Without ``save`` a batch is acknowledged at once.
    """

    def __init__(
        self,
        reader: _Reader,
        save: Callable[[Checkpoint], None] | None,
        index: ConsumerIndexWriter | None,
        out: Any,
        name: str,
    ) -> None:
        self._reader = reader
        self._save = save
        self._index = index
        self._out = out
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[Future[None], StreamBatch] | None = None

    def submit(self, batch: StreamBatch) -> None:
        """``batch`` was handled: store its checkpoint (in the background when there is a store)."""
        self.settle()
        if self._save is None:
            self._acknowledge(batch)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-checkpoint")
        # the pages are not kept while the next batch is read: only what ack() needs
        slim = replace(batch, events=[], rejected=[])
        self._pending = (self._pool.submit(self._save, batch.checkpoint), slim)

    def settle(self) -> None:
        """Wait for the checkpoint in flight (its error raises here), then acknowledge its batch."""
        if self._pending is None:
            return
        saving, batch = self._pending
        self._pending = None
        saving.result()
        self._acknowledge(batch)

    def _acknowledge(self, batch: StreamBatch) -> None:
        try:
            self._reader.ack(batch)
        except KafkaOperationError as exc:  # the task state store keeps the position anyway
            self._out.warning("stream %s: committing the position to Kafka failed: %s", self._name, exc)
        if self._index is not None:
            self._index.checkpointed(batch.checkpoint)

    def __enter__(self) -> _CheckpointAhead:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is None:
                self.settle()
            elif self._pending is not None:
                try:
                    self.settle()
                except Exception as failed:  # the error already leaving the loop is the one to see
                    self._out.warning(
                        "stream %s: storing the checkpoint of the last handled batch failed: %s",
                        self._name,
                        failed,
                    )
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def drive_stream(
    reader: _Reader,
    *,
    trigger_run_id: str,
    topic: str,
    handle_batch: Callable[[list[StreamEvent]], Any] | None = None,
    handle_event: Callable[[StreamEvent], Any] | None = None,
    save: Callable[[Checkpoint], None] | None = None,
    start: Checkpoint | None = None,
    logger: logging.Logger | Any = None,
    summary: ConsumptionSummary | None = None,
    is_idle: Callable[[StreamNotStartedError | StreamGapError], bool] | None = None,
    index: ConsumerIndexWriter | None = None,
    gc_threshold: int = 0,
) -> tuple[ConsumptionSummary, Any]:
    """Read ``reader`` to the stream's end, handing pages over in order; ``(summary, last result)``.

    Exactly one of ``handle_batch`` (called once per batch with its pages) and
    ``handle_event`` (called once per page) is given.  After each batch the batch's
    checkpoint is passed to ``save`` (in a background thread, while the next batch is read)
    and then acknowledged to the reader (which commits it to its consumer group, if any);
    the next batch is handed over only once that save returned, and a save that raises ends
    the run there.  With ``handle_event`` a checkpoint is also saved after every page but
    the batch's last.  An exception of a handler propagates at once: nothing after the
    failing batch (or page) is handled or checkpointed.  Batches without pages (only the end
    marker) call no handler.

    ``summary`` continues the counts of an earlier run of the same try (a consumer that
    deferred while idle).  ``is_idle``: when the reader raises ``StreamNotStartedError`` or
    ``StreamGapError`` and ``is_idle(error)`` is true, the run stops there (everything
    handled so far is checkpointed) and returns with ``summary.idle`` set.

    ``index``: the consumer's stream index writer; it is told each acknowledged checkpoint (it
    writes when due) and closed (its latest position written) when the run stops, however it stops.

    ``gc_threshold``: Python's first collector threshold while reading, at least this many
    allocations (:func:`~airflow_kafka_events.streams.consuming.collector.young_collections_every`;
    0 leaves it).
    """
    if (handle_batch is None) == (handle_event is None):
        raise ValueError("pass exactly one of handle_batch and handle_event")
    out = logger if logger is not None else log
    if summary is None:
        summary = ConsumptionSummary.starting_at(trigger_run_id, topic, start)
    summary.idle = False
    last: Any = None
    closes_index = nullcontext() if index is None else closing(index)
    ahead = _CheckpointAhead(reader, save, index, out, trigger_run_id)
    with young_collections_every(gc_threshold), closes_index, ahead:
        while not summary.finished:
            try:
                batch = reader.next_batch()
            except (StreamNotStartedError, StreamGapError) as exc:
                if is_idle is None or not is_idle(exc):
                    raise
                summary.idle = True
                return summary, last  # leaving the block waits for the checkpoint in flight
            ahead.settle()  # every batch before this one is checkpointed before it is handled
            _note_batch(batch, summary, out)
            events = page_events(batch.events)
            if events:
                started = time.monotonic()
                if handle_batch is not None:
                    last = handle_batch(events)
                    summary.pages = events[-1].sequence_index + 1
                    summary.pages_this_try += len(events)
                else:
                    assert handle_event is not None
                    last = _hand_pages_one_by_one(reader, batch, events, handle_event, save, summary)
                summary.batches_this_try += 1
                _report_batch(topic, batch, len(events), time.monotonic() - started)
            ahead.submit(batch)
            summary.finished = batch.finished
            del batch, events  # the handled pages go now, not after the next batch is read
        return summary, last


# ====================================================================== a finished stream
def read_stream(
    event: Any,
    *,
    owner: str,
    context: Mapping[str, Any],
    handlers: Callable[
        [], tuple[Callable[[list[StreamEvent]], Any] | None, Callable[[StreamEvent], Any] | None]
    ],
    handler_name: str,
    open_reader: Callable[[StreamDescriptor, Checkpoint], Any],
    open_index: Callable[[str], ConsumerIndexWriter | None],
    logger: logging.Logger | Any = None,
) -> tuple[ConsumptionSummary, Any]:
    """Read the finished stream ``event`` describes, from the task's checkpoint; ``(summary, last result)``.

    ``event``: the :class:`~airflow_kafka_events.streams.descriptor.StreamDescriptor` (or its
    dict) a streaming trigger ends with.  Errors come in this order: not a descriptor
    (:class:`~airflow_kafka_events.errors.ValidationError`), a stream its producer failed
    (:class:`~airflow_kafka_events.errors.StreamFailedError`, before any page is handled),
    no handler (``handlers()`` raises).  ``handlers()`` gives ``(handle_batch, handle_event)``
    as :func:`drive_stream` takes them; ``open_reader(descriptor, start)`` opens the reader (a
    context manager) only when a page is left to read; ``open_index(trigger_run_id)`` is the
    consumer's stream index writer (``None``: none).  ``owner`` names the task in errors.
    """
    out = logger if logger is not None else log
    descriptor = _descriptor_of(event, owner)
    _raise_if_failed(descriptor)
    handle_batch, handle_event = handlers()
    checkpoints = StreamCheckpoints.of_task(context, descriptor.trigger_run_id)
    start = _start_of(descriptor, checkpoints, out)
    out.info(
        "stream %s: attempt %d has %d page(s) in %s[%d]; handing them to %s",
        descriptor.trigger_run_id,
        descriptor.attempt,
        descriptor.count,
        descriptor.topic,
        descriptor.partition,
        handler_name,
    )
    index = open_index(descriptor.trigger_run_id)
    if start.finished:
        summary = ConsumptionSummary.starting_at(descriptor.trigger_run_id, descriptor.topic, start)
        out.info("stream %s: every page was handled already", descriptor.trigger_run_id)
        if index is not None:
            index.checkpointed(start)
            index.close()
        return summary, None
    with open_reader(descriptor, start) as reader:
        summary, last = drive_stream(
            reader,
            trigger_run_id=descriptor.trigger_run_id,
            topic=descriptor.topic,
            handle_batch=handle_batch,
            handle_event=handle_event,
            save=None if checkpoints is None else checkpoints.save,
            start=start,
            logger=out,
            index=index,
            gc_threshold=resolve_gc_threshold(),
        )
    summary.log_handled(out)
    return summary, last


def _raise_if_failed(descriptor: StreamDescriptor) -> None:
    """A stream its producer ended with an error fails the task before any page is handled."""
    if descriptor.failed:
        error = descriptor.error or {}
        raise StreamFailedError(
            error.get("type", "Error"),
            error.get("message", ""),
            attempt=descriptor.attempt,
            sequence_index=descriptor.count,
            topic=descriptor.topic,
            trigger_run_id=descriptor.trigger_run_id,
        )


def _start_of(descriptor: StreamDescriptor, checkpoints: StreamCheckpoints | None, logger: Any) -> Checkpoint:
    """The checkpoint of the descriptor's attempt, or the attempt's first page."""
    stored = None if checkpoints is None else checkpoints.load(logger, attempt=descriptor.attempt)
    if stored is not None:
        return stored
    return Checkpoint(
        attempt=descriptor.attempt,
        next_sequence_index=0,
        offset=descriptor.first_offset,
        partition=descriptor.partition,
    )


def _descriptor_of(event: Any, owner: str) -> StreamDescriptor:
    if isinstance(event, StreamDescriptor):
        return event
    if not isinstance(event, Mapping):
        raise ValidationError(
            f"{owner} resumed with {type(event).__qualname__} event; a streaming task resumes with "
            "the stream descriptor its StreamingTrigger yields"
        )
    try:
        return StreamDescriptor.from_dict(event)
    except ValidationError as exc:
        raise ValidationError(
            f"{owner} resumed with an event that is not a stream descriptor: {exc}"
        ) from exc

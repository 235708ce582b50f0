"""Streaming triggers: every page a trigger fetches goes to Kafka; the task resumes once.

Airflow resumes a deferred task on the *first* event its trigger yields and drops the
rest, so a :class:`StreamingTrigger` does not yield its pages: it writes each page to Kafka
as a :class:`~airflow_kafka_events.envelopes.model.TriggerEventEnvelope` (key
``trigger_run_id``) and yields ONE event at the end, carrying a
:class:`~airflow_kafka_events.streams.descriptor.StreamDescriptor` that tells the task where the stream
is (``TriggerEvent(descriptor.to_dict())``, or with ``finish_task=True`` a
``TaskSuccessEvent``/``TaskFailedEvent`` whose XCom ``return_value`` is the descriptor).

Delivery and resume
    Pages are pipelined: up to ``[kafka_events] stream_write_window`` pages are in flight while the
    next are fetched, and their ``acks=all`` receipts are taken in batches
    (:mod:`~airflow_kafka_events.streams.producing.writer`).  The stream's progress is the run of
    pages acknowledged in order.  A page that fails while later pages reached Kafka is sent again,
    with every page after it, before the run fails, so that no page follows a missing one.  If that
    second send fails too (logged as an error), the next run finds the hole: its lookup checks the
    last window of pages and resumes after the page before the missing one.  A trigger that is
    stopped (triggerer restart, redistribution, crash) and started again looks its stream up in Kafka
    (:func:`~airflow_kafka_events.streams.progress.lookup_stream`) and continues after the last
    written page from that page's ``cursor``: written pages are not fetched again.
    The rules are in :func:`~airflow_kafka_events.streams.descriptor.plan_resume`.

Generations
    ``generation`` is the task's generation (the DAG run's ``clear_number``; the operators
    pass it).  Every envelope of an attempt records it (``metadata["generation"]``), and a
    trigger whose generation differs from the one on the stream's latest envelope writes a
    new attempt: the task was cleared since.  It is a plain value of the trigger's kwargs,
    so a trigger run again with the same kwargs -- after a triggerer restart, even during
    the first deferral after a clear -- resumes its attempt.  Without a generation
    (``None``, e.g. ``start_from_trigger`` tasks) a clear cannot be told from a retry.

Bounded lookup
    ``not_before`` (ISO-8601 with a timezone) is an instant no envelope of the stream can be
    older than (the operators pass the DAG run's ``run_after`` minus a margin for clock
    skew).  The progress lookup then reads the key's partition only from the first record
    at or after it, so looking up a new stream does not read the whole partition.
    Envelopes older than the bound are ignored.

End of an attempt
    After the last page a *terminal marker* is written: an ``is_last`` envelope without
    payload whose ``sequence_index`` is the number of data pages (an empty stream is one
    terminal marker with ``sequence_index`` 0).  If ``pages()`` raises, or a page cannot be
    encoded, the terminal marker carries the error and so does the descriptor; the task
    then fails (the operator fails it, or ``finish_task`` yields ``TaskFailedEvent``).  A
    retry then writes a new attempt.  Kafka errors are not stream errors: they fail the
    trigger and the next run resumes after what was delivered.

Broker outages
    Each page waits up to ``outage_timeout`` (``[kafka_events] stream_outage_timeout``, 300 s)
    for unreachable brokers (:mod:`~airflow_kafka_events.streams.producing.outage`).  One attempt never
    writes a page twice except to close a hole: librdkafka's retries of a page carry the idempotent
    producer's sequence number (the broker stores one copy), a failed page is sent again byte for byte
    with the pages after it (a consumer keeps the first copy of each), and a page whose outcome is
    unknown fails the run; the next run resumes from what Kafka holds.

Stream index
    The trigger also writes its stream's state record to the stream index (a compacted topic,
    :mod:`airflow_kafka_events.streams.index`): at the attempt's start, every
    ``[kafka_events] stream_index_every_pages`` pages or ``stream_index_every_seconds`` seconds, and
    at its end.  The index is for people (listings); a record that cannot be written is logged and
    never holds up or fails the stream.

Readers follow the highest ``attempt`` of a key and should ignore a repeated
``(attempt, sequence_index)`` (Airflow may briefly run one trigger in two triggerers).
Keep the partition count of a stream topic fixed: a key's partition depends on it.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from airflow_kafka_events import metrics
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeEncodeError,
    StreamIdentityError,
    ValidationError,
)
from airflow_kafka_events.kafka.producer import RecordProducer, get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.descriptor import ResumePlan, StreamDescriptor, plan_resume, stream_id
from airflow_kafka_events.streams.index.options import Cadence, index_topic
from airflow_kafka_events.streams.index.publisher import INDEX_ROLE, INDEX_WRITE_TIMEOUT, StreamIndexWriter
from airflow_kafka_events.streams.index.record import StreamRecord
from airflow_kafka_events.streams.producing.outage import (
    STREAM_LINGER_MS,
    STREAM_ROLE,
    resolve_outage_timeout,
    wait_for_earlier_sends,
)
from airflow_kafka_events.streams.producing.writer import (
    WINDOW_BYTES,
    AttemptWriter,
    close_iterator,
    parse_not_before,
    resolve_write_window,
)
from airflow_kafka_events.streams.progress import StreamLocation, StreamProgress, lookup_stream

__all__ = [
    "DEFAULT_TOPIC",
    "RETURN_VALUE_KEY",
    "Page",
    "StreamingTrigger",
]

DEFAULT_TOPIC = "airflow.trigger-events"
_log = logging.getLogger(__name__)
#: XCom key of the descriptor when ``finish_task=True``.
RETURN_VALUE_KEY = "return_value"

_STREAM_KWARGS = (
    "trigger_run_id",
    "topic",
    "kafka_config_id",
    "finish_task",
    "generation",
    "not_before",
    "producer_identity",
)
_IDENTITY_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")


@dataclass(frozen=True)
class Page:
    """One page of a stream.

    ``payload`` is a JSON value (``None``, bool, int, finite float, str, list, dict with str
    keys) or ``bytes``.  ``cursor`` is where to resume *after* this page: a restarted
    trigger calls ``pages(cursor)`` of the last written page.  A page without a cursor
    cannot be resumed after; a stream interrupted after such a page restarts as a new
    attempt.
    """

    payload: Any = None
    cursor: str | None = None

    def __post_init__(self) -> None:
        if self.cursor is not None and not isinstance(self.cursor, str):
            raise ValidationError(f"Page.cursor must be a str or None, got {type(self.cursor).__qualname__}")


class StreamingTrigger(BaseTrigger):
    """Base class of triggers that stream pages through Kafka and resume their task once.

    Subclasses implement :meth:`trigger_kwargs` (their own ``__init__`` keyword arguments,
    JSON or Airflow-serde serializable) and :meth:`pages` (an async iterator of
    :class:`Page`).  :meth:`serialize` returns ``(classpath, {**trigger_kwargs(),
    **stream kwargs})``, which maps 1:1 onto ``__init__``.

    :param trigger_run_id: the stream's id and Kafka key.  Default: derived from the task
        instance the triggerer attaches (``stream_id(dag_id, run_id, task_id, map_index)``),
        which is what ``start_from_trigger`` tasks rely on.
    :param topic: the Kafka topic of the stream.
    :param kafka_config_id: Airflow Kafka connection (read in ``run()``, never in ``__init__``).
    :param finish_task: end the task from the trigger (``TaskSuccessEvent`` /
        ``TaskFailedEvent`` with the descriptor as XCom ``return_value``) instead of
        resuming it with ``TriggerEvent(descriptor)``.
    :param generation: the task's generation (the DAG run's ``clear_number``, an int >= 0):
        recorded on every envelope; an attempt of another generation is not resumed, a new
        attempt starts (the task was cleared).  ``None``: unknown, the stream is resumed
        whatever generation wrote it.
    :param not_before: ISO-8601 timestamp with a timezone (a tz-aware ``datetime`` is
        accepted and stored as its ISO text): no envelope of the stream is older, so the
        progress lookup reads nothing older.  ``None``: the whole partition may be read.
    :param producer_identity: ``ProducerIdentity`` fields for the envelopes; default: the
        task instance's ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``.
    """

    #: Upper bound (seconds) of the progress lookup in Kafka.
    progress_timeout: float = 60.0
    #: How long (seconds) one page may wait for unreachable brokers before the run fails;
    #: ``None``: ``[kafka_events] stream_outage_timeout`` (default 300).
    outage_timeout: float | None = None
    #: Pages in flight at most (produced, receipt not taken yet); ``None``:
    #: ``[kafka_events] stream_write_window`` (default 1024).
    write_window: int | None = None

    def __init__(
        self,
        *,
        trigger_run_id: str | None = None,
        topic: str = DEFAULT_TOPIC,
        kafka_config_id: str = "kafka_default",
        finish_task: bool = False,
        generation: int | None = None,
        not_before: str | datetime | None = None,
        producer_identity: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if trigger_run_id is not None and (not isinstance(trigger_run_id, str) or not trigger_run_id):
            raise ConfigurationError(
                f"trigger_run_id must be a non-empty str or None, got {trigger_run_id!r}"
            )
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(f"topic must be a non-empty str, got {topic!r}")
        if not isinstance(kafka_config_id, str) or not kafka_config_id:
            raise ConfigurationError(f"kafka_config_id must be a non-empty str, got {kafka_config_id!r}")
        if generation is not None and (
            isinstance(generation, bool) or not isinstance(generation, int) or generation < 0
        ):
            raise ConfigurationError(f"generation must be an int >= 0 or None, got {generation!r}")
        not_before_moment = parse_not_before(not_before)
        if producer_identity is not None:
            if not isinstance(producer_identity, Mapping):
                raise ConfigurationError(
                    f"producer_identity must be a dict or None, got {type(producer_identity).__qualname__}"
                )
            unknown = set(producer_identity) - set(_IDENTITY_FIELDS)
            if unknown:
                raise ConfigurationError(f"producer_identity has unknown fields {sorted(unknown)}")
            ProducerIdentity(**producer_identity)  # validates the values
            producer_identity = dict(producer_identity)
        self.trigger_run_id = trigger_run_id
        self.topic = topic
        self.kafka_config_id = kafka_config_id
        self.finish_task = bool(finish_task)
        self.generation = generation
        self.not_before = None if not_before_moment is None else not_before_moment.isoformat()
        self.producer_identity = producer_identity
        self._pages_iterator: Any = None

    @property
    def not_before_ms(self) -> int | None:
        """``not_before`` in epoch milliseconds (rounded down, at least 0), or ``None``."""
        moment = parse_not_before(self.not_before)
        if moment is None:
            return None
        return max(0, math.floor(moment.timestamp() * 1000))

    # ------------------------------------------------------------------ subclass API
    @abc.abstractmethod
    def trigger_kwargs(self) -> dict[str, Any]:
        """The subclass's own ``__init__`` keyword arguments (serializable)."""

    @abc.abstractmethod
    def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        """Pages after ``cursor`` (``None``: from the beginning), in order.

        Implement as ``async def pages(self, cursor): ... yield Page(...)``.  Each page is
        delivered to Kafka before the next one is requested.  An exception ends the stream
        with that error (see :meth:`stream_error_for`).
        """

    def stream_error_for(self, exc: BaseException) -> StreamFailure:
        """The :class:`StreamFailure` recorded when ``pages()`` raised ``exc``."""
        return StreamFailure.from_exception(exc)

    # ------------------------------------------------------------------ serialization
    def stream_kwargs(self) -> dict[str, Any]:
        return {
            "trigger_run_id": self.trigger_run_id,
            "topic": self.topic,
            "kafka_config_id": self.kafka_config_id,
            "finish_task": self.finish_task,
            "generation": self.generation,
            "not_before": self.not_before,
            "producer_identity": None if self.producer_identity is None else dict(self.producer_identity),
        }

    def serialize(self) -> tuple[str, dict[str, Any]]:
        own = dict(self.trigger_kwargs())
        clash = set(own) & set(_STREAM_KWARGS)
        if clash:
            raise ConfigurationError(
                f"{type(self).__qualname__}.trigger_kwargs() reuses stream argument names {sorted(clash)}"
            )
        classpath = f"{type(self).__module__}.{type(self).__qualname__}"
        return classpath, {**own, **self.stream_kwargs()}

    # ------------------------------------------------------------------ identity
    def resolve_trigger_run_id(self) -> str:
        """``trigger_run_id``, else the task instance's :func:`stream_id`; else ``StreamIdentityError``."""
        if self.trigger_run_id:
            return self.trigger_run_id
        ti = self.task_instance
        if ti is None:
            raise StreamIdentityError(
                f"{type(self).__qualname__} has no trigger_run_id and no task instance to derive it from; "
                "pass trigger_run_id=stream_id(dag_id, run_id, task_id, map_index)"
            )
        map_index = getattr(ti, "map_index", None)
        try:
            return stream_id(
                getattr(ti, "dag_id", None),  # type: ignore[arg-type]
                getattr(ti, "run_id", None),  # type: ignore[arg-type]
                getattr(ti, "task_id", None),  # type: ignore[arg-type]
                -1 if map_index is None else map_index,
            )
        except ValidationError as exc:
            raise StreamIdentityError(f"cannot derive trigger_run_id from the task instance: {exc}") from exc

    def resolve_producer_identity(self) -> ProducerIdentity:
        """``producer_identity`` if given, else the task instance's fields, else empty."""
        if self.producer_identity is not None:
            return ProducerIdentity(**self.producer_identity)
        ti = self.task_instance
        if ti is None:
            return ProducerIdentity()
        values: dict[str, Any] = {}
        for name in _IDENTITY_FIELDS:
            value = getattr(ti, name, None)
            wanted = int if name in ("map_index", "try_number") else str
            if isinstance(value, wanted) and not isinstance(value, bool):
                values[name] = value
        try:
            return ProducerIdentity(**values)
        except ValidationError:
            return ProducerIdentity()

    # ------------------------------------------------------------------ events
    def final_event(self, descriptor: StreamDescriptor) -> TriggerEvent:
        """The one event yielded at the end of :meth:`run`."""
        payload = descriptor.to_dict()
        if not self.finish_task:
            return TriggerEvent(payload)
        if descriptor.failed:
            return TaskFailedEvent(xcoms={RETURN_VALUE_KEY: payload})
        return TaskSuccessEvent(xcoms={RETURN_VALUE_KEY: payload})

    # ------------------------------------------------------------------ run
    def resolve_outage_timeout(self) -> float:
        """``outage_timeout``, else ``[kafka_events] stream_outage_timeout``, else 300 s."""
        return resolve_outage_timeout(self.outage_timeout)

    def resolve_write_window(self) -> int:
        """``write_window``, else ``[kafka_events] stream_write_window``, else 1024 pages."""
        return resolve_write_window(self.write_window)

    def _open_kafka(self) -> tuple[KafkaSettings, RecordProducer, RecordProducer, int]:
        # Blocking (connection lookup, client creation): called in a worker thread.
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        hook = KafkaEventsHook(kafka_config_id=self.kafka_config_id)
        settings = hook.get_settings()
        producer = get_producer(
            settings.producer_config(linger_ms=STREAM_LINGER_MS),
            role=STREAM_ROLE,
            message_timeout=self.resolve_outage_timeout(),
        )
        index_producer = hook.get_producer(role=INDEX_ROLE, message_timeout=INDEX_WRITE_TIMEOUT)
        settings.codecs.trigger.prepare(self.topic)  # a registry's schema id, off the event loop
        return settings, producer, index_producer, self.resolve_write_window()

    def _index_writer(
        self,
        producer: RecordProducer,
        trigger_run_id: str,
        identity: ProducerIdentity,
        partition: int,
        attempt: int,
        generation: int | None,
        progress: StreamProgress | None,
    ) -> StreamIndexWriter:
        """The writer of this attempt's stream index record (continuing what ``progress`` wrote of it)."""
        continuing = progress is not None and progress.attempt == attempt
        record = StreamRecord(
            stream_id=trigger_run_id,
            topic=self.topic,
            partition=partition,
            attempt=attempt,
            status="running",
            pages=0,
            updated_at=0.0,
            generation=generation,
            dag_id=identity.dag_id,
            run_id=identity.run_id,
            task_id=identity.task_id,
            map_index=identity.map_index,
            try_number=identity.try_number,
        )
        if continuing and progress is not None:
            written = progress.sequence_index + (0 if progress.is_last else 1)
            record = replace(
                record,
                pages=written,
                last_sequence=progress.sequence_index,
                first_offset=progress.first_offset,
                last_offset=progress.offset,
            )
        return StreamIndexWriter(
            producer, index_topic(), record, cadence=Cadence.from_config(), logger=self.log
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Write the stream to Kafka (resuming it if it has progress); yield one event."""
        trigger_run_id = self.resolve_trigger_run_id()
        identity = self.resolve_producer_identity()
        settings, producer, index_producer, window = await asyncio.to_thread(self._open_kafka)
        await wait_for_earlier_sends(producer, self.topic, trigger_run_id, self.log)
        location, progress = await self._look_up(settings, trigger_run_id)
        plan = plan_resume(progress, self.generation)
        if plan.already_complete and progress is not None:
            yield self.final_event(
                await self._report_complete(index_producer, trigger_run_id, identity, progress)
            )
            return
        writer, index = await self._open_writer(
            settings, producer, index_producer, trigger_run_id, identity, location, progress, plan, window
        )
        error = await self._write_pages(writer, plan.cursor, index)
        self._acknowledged(writer, index, await writer.drain())
        yield self.final_event(await self._finish(writer, index, error))

    async def _look_up(
        self, settings: KafkaSettings, trigger_run_id: str
    ) -> tuple[StreamLocation, StreamProgress | None]:
        """Where the stream is and its latest envelope (``None``: nothing written yet)."""
        location, progress = await asyncio.to_thread(
            lookup_stream,
            settings,
            self.topic,
            trigger_run_id,
            timeout=self.progress_timeout,
            not_before_ms=self.not_before_ms,
            gap_window=self.resolve_write_window(),
            gap_bytes=WINDOW_BYTES,
        )
        if location.not_before_ms is not None:
            self.log.info(
                "stream %s: looked up from offset %d of %s[%d] (not before %s; offsets %d..%d)",
                trigger_run_id,
                location.scan_start,
                self.topic,
                location.partition,
                self.not_before,
                location.low,
                location.high,
            )
        return location, progress

    async def _report_complete(
        self,
        index_producer: RecordProducer,
        trigger_run_id: str,
        identity: ProducerIdentity,
        progress: StreamProgress,
    ) -> StreamDescriptor:
        """The descriptor of an attempt already complete in Kafka (its index record written again)."""
        index = self._index_writer(
            index_producer,
            trigger_run_id,
            identity,
            progress.partition,
            progress.attempt,
            progress.generation,
            progress,
        )
        await asyncio.to_thread(index.check_topic)
        index.finished(progress.sequence_index, progress.offset, progress.first_offset, None)
        await index.flush()
        self.log.info(
            "stream %s attempt %d is already complete in %s[%d]; reporting it again",
            trigger_run_id,
            progress.attempt,
            self.topic,
            progress.partition,
        )
        return StreamDescriptor(
            topic=self.topic,
            trigger_run_id=trigger_run_id,
            attempt=progress.attempt,
            count=progress.sequence_index,
            first_offset=progress.first_offset,
            last_offset=progress.offset,
            partition=progress.partition,
            error=None,
        )

    def _why(self, plan: ResumePlan, progress: StreamProgress | None) -> str:
        """Why the attempt starts where it does (for the log)."""
        if progress is not None and plan.attempt == progress.attempt:
            return f"resuming after cursor {plan.cursor!r}"
        if progress is None:
            return "from the beginning"
        if self.generation is not None and progress.generation != self.generation:
            return (
                f"from the beginning: attempt {progress.attempt} is of generation {progress.generation}, "
                f"this task is of generation {self.generation}"
            )
        if progress.first_missing is not None:
            return (
                f"from the beginning: page {progress.first_missing} of attempt {progress.attempt} is missing"
            )
        if progress.is_last:
            return f"from the beginning: attempt {progress.attempt} failed"
        return (
            f"from the beginning: page {progress.sequence_index} of attempt {progress.attempt} has no cursor"
        )

    async def _open_writer(
        self,
        settings: KafkaSettings,
        producer: RecordProducer,
        index_producer: RecordProducer,
        trigger_run_id: str,
        identity: ProducerIdentity,
        location: StreamLocation,
        progress: StreamProgress | None,
        plan: ResumePlan,
        window: int,
    ) -> tuple[AttemptWriter, StreamIndexWriter]:
        """The writer of the attempt ``plan`` says, and its stream index record (started)."""
        self.log.info(
            "stream %s: writing attempt %d from sequence %d (%s) to %s[%d]",
            trigger_run_id,
            plan.attempt,
            plan.next_seq,
            self._why(plan, progress),
            self.topic,
            location.partition,
        )
        continued = progress if progress is not None and plan.attempt == progress.attempt else None
        # an attempt has one generation: a trigger without one keeps the attempt's
        generation = self.generation
        if generation is None and continued is not None:
            generation = continued.generation
        writer = AttemptWriter(
            producer,
            topic=self.topic,
            partition=location.partition,
            trigger_run_id=trigger_run_id,
            attempt=plan.attempt,
            next_seq=plan.next_seq,
            first_offset=None if continued is None else continued.first_offset,
            cursor=plan.cursor,
            identity=identity,
            delivery_timeout=producer.message_timeout,
            generation=generation,
            log=self.log,
            codec=settings.codecs.trigger,
            window=window,
        )
        index = self._index_writer(
            index_producer, trigger_run_id, identity, location.partition, plan.attempt, generation, progress
        )
        await asyncio.to_thread(index.check_topic)
        index.start()
        return writer, index

    async def _finish(
        self, writer: AttemptWriter, index: StreamIndexWriter, error: StreamFailure | None
    ) -> StreamDescriptor:
        """End the attempt (with ``error``, if the pages failed) and its index record; its descriptor."""
        descriptor = await writer.finish(error)
        index.finished(
            descriptor.count,
            descriptor.last_offset,
            descriptor.first_offset,
            None if error is None else f"{error.type}: {error.message}",
        )
        await index.flush()
        metrics.incr(f"{metrics.STREAMS_ENDED}.{'complete' if error is None else 'failed'}")
        self.log.info(
            "stream %s attempt %d ended: %d pages (%d written by this run), offsets %s..%d%s",
            writer.trigger_run_id,
            descriptor.attempt,
            descriptor.count,
            writer.written - 1,
            descriptor.first_offset,
            descriptor.last_offset,
            "" if error is None else f", error {error.type}: {error.message}",
        )
        return descriptor

    async def _write_pages(
        self, writer: AttemptWriter, cursor: str | None, index: StreamIndexWriter
    ) -> StreamFailure | None:
        """Fetch, encode and send pages (up to the writer's window in flight); the error that ended
        the stream, if any.  Pages still in flight when it returns are the caller's to drain."""
        try:
            iterator = self.pages(cursor)
        except Exception as exc:
            self.log.warning("pages() of stream %s failed", writer.trigger_run_id, exc_info=True)
            return self.stream_error_for(exc)
        self._pages_iterator = iterator
        try:
            while True:
                try:
                    page = await iterator.__anext__()
                except StopAsyncIteration:
                    return None
                except Exception as exc:
                    self.log.warning("pages() of stream %s failed", writer.trigger_run_id, exc_info=True)
                    return self.stream_error_for(exc)
                try:
                    if not isinstance(page, Page):
                        raise TypeError(f"pages() must yield Page objects, got {type(page).__qualname__}")
                    value = writer.encode(payload=page.payload, cursor=page.cursor, is_last=False, error=None)
                except (EnvelopeEncodeError, ValidationError, TypeError) as exc:
                    self.log.warning(
                        "page %d of stream %s cannot be written: %s",
                        writer.next_seq,
                        writer.trigger_run_id,
                        exc,
                    )
                    return self.stream_error_for(exc)
                acknowledged = await writer.send(value, page.cursor)
                if acknowledged:
                    self._acknowledged(writer, index, acknowledged)
        finally:
            self._pages_iterator = None
            try:
                await close_iterator(iterator)
            except Exception:
                self.log.warning("closing pages() of stream %s failed", writer.trigger_run_id, exc_info=True)

    @staticmethod
    def _acknowledged(writer: AttemptWriter, index: StreamIndexWriter, count: int) -> None:
        """``count`` more pages are acknowledged: the index and the metric learn the frontier."""
        first, offsets = writer.take_acknowledged()
        if offsets:
            index.pages(first, offsets)
            metrics.incr(metrics.PAGES_WRITTEN, count, tags={"topic": writer.topic})

    async def cleanup(self) -> None:
        """Close a page iterator left open by an interrupted run. Never raises."""
        iterator, self._pages_iterator = self._pages_iterator, None
        try:
            if iterator is not None:
                await close_iterator(iterator)
            await super().cleanup()
        except Exception:
            self.log.warning("cleanup of %s failed", type(self).__qualname__, exc_info=True)

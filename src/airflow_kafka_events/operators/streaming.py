"""Producer side: deferrable operators whose trigger streams every page through Kafka.

A :class:`~airflow_kafka_events.triggers.streaming.StreamingTrigger` writes each page it
fetches to Kafka and resumes its task ONCE, with a
:class:`~airflow_kafka_events.streams.StreamDescriptor`.  :class:`StreamingOperatorMixin`
is the operator half:

* :meth:`StreamingOperatorMixin.defer_stream` (called from ``execute()``) names the stream
  deterministically (``stream_id(dag_id, run_id, task_id, map_index)``, so retries and
  consumers find it), gives the trigger the task's *generation* (so a user *clear* starts
  the stream over and a *retry* resumes it) and a lower time bound for its progress lookup,
  checks the trigger arguments survive Airflow's serialization, and defers;
* :meth:`StreamingOperatorMixin.resume_stream`, the method the task resumes in, reads the
  stream back from Kafka in order and in batches and hands it to the operator:

  - to :meth:`~StreamingOperatorMixin.handle_trigger_events` ``(events, context)`` when the
    operator overrides it: ``events`` is a list of :class:`StreamEvent` (``payload``,
    ``sequence_index``, ``attempt``, ``trigger_run_id``); the task's return value is a
    summary dict (:class:`StreamSummary`);
  - otherwise to the operator's classic single-event method (``method_name``, default
    ``execute_complete(self, context, event)``), called once per page, in order, with
    ``event`` = the page payload; the task's return value is what its last call returned.

  The position is checkpointed in ``context["task_state_store"]`` (key
  ``"stream:<trigger_run_id>"``) after every handled batch, and for the single-event shim
  after every call.  A handler that raises fails the task (normal retry semantics); no
  later page is handled, and the retry resumes after the last checkpoint, so each page's
  effect happens once.  A stream that its producer ended with an error fails the task
  with :class:`~airflow_kafka_events.errors.StreamFailedError` (type and message of the
  producer's error) before any of its pages is handled: the retry writes a new attempt.

Restart or resume
    ``context["dag_run"].clear_number`` is the *generation*.  :meth:`defer_stream` passes it
    to the trigger (``generation=``), which records it on every envelope it writes: when
    the stream's latest envelope is of another generation the task was cleared since, and
    the trigger writes a new attempt; with the same generation (a retry, or the same
    trigger run again after a triggerer restart) it resumes the stream where it is in
    Kafka.  The decision is made from what is in Kafka and the trigger's own kwargs, so it
    survives a triggerer restart at any point.  Checkpoints are stored per generation too,
    so a cleared task reads its new attempt from the start.  ``clear_number`` counts clears
    of the whole DAG run, so clearing another task of the run also counts as a clear here.
    Envelopes written without a generation (by a ``start_from_trigger`` task) count as of
    another generation.

Bounded progress lookup
    :meth:`defer_stream` also passes ``not_before``: the DAG run's ``run_after`` (no task of
    the run starts before it, and it does not change when the run is cleared) minus
    :attr:`StreamingOperatorMixin.stream_not_before_margin` (default 10 minutes, for clock
    skew between Airflow's database and the Kafka writers or broker).  The trigger's
    progress lookup reads the stream's partition only from there, so starting a new stream
    does not read the whole partition.  Envelopes of the stream older than the bound are
    ignored (e.g. of a deleted DAG run whose run id was used again).  The task SDK's
    ``dag_run`` has no ``queued_at``, and its ``start_date`` is reset by a clear, which
    would hide the attempts of earlier generations; without a ``run_after`` no bound is
    passed.

Pure "fetch into Kafka" tasks
    :class:`StreamingTriggerOperator` runs a streaming trigger with ``finish_task=True``,
    by default with ``start_from_trigger`` (no worker slot at all): the trigger ends the task
    and the stream descriptor is its XCom ``return_value``.  Consumers read the stream by
    reference (:class:`~airflow_kafka_events.operators.consumer.StreamRef`).  A
    ``start_from_trigger`` task has no worker step, so it cannot tell a clear from a retry:
    after a clear its (complete) stream is reported again, not fetched again.

Parse-time check
    The mixin checks ``start_trigger_args.trigger_kwargs`` (when ``start_from_trigger``) and
    the attributes named in :attr:`StreamingOperatorMixin.trigger_kwargs_fields` with
    :func:`~airflow_kafka_events.serialization_check.check_trigger_kwargs` when the operator
    is created, so a DAG file with, e.g., a lambda in trigger kwargs fails to parse with a
    :class:`~airflow_kafka_events.errors.TriggerSerializationError` naming the argument.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol

from airflow.sdk import BaseOperator
from airflow.triggers.base import StartTriggerArgs

from airflow_kafka_events.checkpoint import Checkpoint, CheckpointStore, load_checkpoint, save_checkpoint
from airflow_kafka_events.envelopes import TriggerEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    KafkaOperationError,
    StreamFailedError,
    ValidationError,
)
from airflow_kafka_events.kafka.stream_reader import StreamBatch, StreamReader
from airflow_kafka_events.serialization_check import check_trigger_kwargs
from airflow_kafka_events.streams import StreamDescriptor, stream_id
from airflow_kafka_events.triggers.streaming import StreamingTrigger

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

__all__ = [
    "CHECKPOINT_KEY_PREFIX",
    "DEFAULT_NOT_BEFORE_MARGIN",
    "RESUME_METHOD",
    "StreamEvent",
    "StreamSummary",
    "StreamingOperatorMixin",
    "StreamingTriggerOperator",
    "checkpoint_key",
    "drive_stream",
    "generation_of",
    "not_before_of",
    "page_events",
    "task_stream_id",
    "with_stream_kwargs",
]

log = logging.getLogger(__name__)

#: The method a streaming task resumes in (``next_method`` of its deferral).
RESUME_METHOD = "resume_stream"
#: Task state store key prefix of a stream's read checkpoint.
CHECKPOINT_KEY_PREFIX = "stream:"
#: How much earlier than the DAG run's ``run_after`` a stream's progress lookup starts.
DEFAULT_NOT_BEFORE_MARGIN = timedelta(minutes=10)


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
        return cls(
            payload=envelope.payload,
            sequence_index=envelope.sequence_index,
            attempt=envelope.attempt,
            trigger_run_id=envelope.trigger_run_id,
        )


def is_end_marker(envelope: TriggerEventEnvelope) -> bool:
    """The payload-less ``is_last`` envelope that ends an attempt (it carries no page)."""
    return envelope.is_last and envelope.payload is None


def page_events(envelopes: Iterable[TriggerEventEnvelope]) -> list[StreamEvent]:
    """The pages among ``envelopes`` (end markers dropped), as :class:`StreamEvent`."""
    return [StreamEvent.from_envelope(e) for e in envelopes if not is_end_marker(e)]


# ====================================================================== context helpers
def generation_of(context: Mapping[str, Any]) -> int:
    """The task's generation: ``dag_run.clear_number`` (0 when unknown)."""
    for holder in (context.get("dag_run"), context.get("ti")):
        value = getattr(holder, "clear_number", None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def task_stream_id(
    context: Mapping[str, Any], task_id: str | None = None, map_index: int | None = None
) -> str:
    """``stream_id`` of ``task_id`` (default: the running task) in the context's DAG run."""
    ti = context["ti"]
    if map_index is None:
        map_index = getattr(ti, "map_index", None)
    return stream_id(ti.dag_id, ti.run_id, task_id or ti.task_id, -1 if map_index is None else map_index)


def checkpoint_key(trigger_run_id: str) -> str:
    """Task state store key of the read checkpoint of stream ``trigger_run_id``."""
    return f"{CHECKPOINT_KEY_PREFIX}{trigger_run_id}"


def not_before_of(
    context: Mapping[str, Any], margin: timedelta = DEFAULT_NOT_BEFORE_MARGIN
) -> datetime | None:
    """The instant no envelope of the DAG run's streams can be older than, or ``None``.

    ``dag_run.run_after`` minus ``margin``: the scheduler starts no task of a run before its
    ``run_after``, and a clear does not change it (unlike ``start_date`` and ``queued_at``),
    so the bound also covers the attempts of earlier generations.  ``None`` when the
    context has no timezone-aware ``run_after``.
    """
    run_after = getattr(context.get("dag_run"), "run_after", None)
    if not isinstance(run_after, datetime) or run_after.tzinfo is None or run_after.utcoffset() is None:
        return None
    return run_after - margin


def state_store_of(context: Mapping[str, Any]) -> CheckpointStore | None:
    """``context["task_state_store"]`` when the context has one."""
    store = context.get("task_state_store")
    if (
        store is None
        or not callable(getattr(store, "get", None))
        or not callable(getattr(store, "set", None))
    ):
        return None
    return store  # type: ignore[no-any-return]


def with_stream_kwargs(trigger: StreamingTrigger, **overrides: Any) -> StreamingTrigger:
    """A copy of ``trigger`` (rebuilt from its ``serialize()``) with stream kwargs replaced."""
    if not isinstance(trigger, StreamingTrigger):
        raise ConfigurationError(f"expected a StreamingTrigger, got {type(trigger).__qualname__}")
    _classpath, kwargs = trigger.serialize()
    kwargs.update(overrides)
    return type(trigger)(**kwargs)


# ====================================================================== reading loop
@dataclass
class StreamSummary:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Reader(Protocol):
    def next_batch(self) -> StreamBatch: ...

    def ack(self, batch: StreamBatch) -> Checkpoint: ...

    def checkpoint(self) -> Checkpoint | None: ...


def _pages_at(checkpoint: Checkpoint | None) -> int:
    if checkpoint is None:
        return 0
    if checkpoint.finished:  # next_sequence_index counts the end marker
        return max(0, checkpoint.next_sequence_index - 1)
    return checkpoint.next_sequence_index


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
) -> tuple[StreamSummary, Any]:
    """Read ``reader`` to the stream's end, handing pages over in order; ``(summary, last result)``.

    Exactly one of ``handle_batch`` (called once per batch with its pages) and
    ``handle_event`` (called once per page) is given.  After each batch the batch's
    checkpoint is passed to ``save`` and then acknowledged to the reader (which commits it
    to its consumer group, if any); with ``handle_event`` a checkpoint is also saved after
    every page but the batch's last.  An exception of a handler propagates at once: nothing
    after the failing batch (or page) is handled or checkpointed.  Batches without pages
    (only the end marker) call no handler.
    """
    if (handle_batch is None) == (handle_event is None):
        raise ValueError("pass exactly one of handle_batch and handle_event")
    out = logger if logger is not None else log
    summary = StreamSummary(
        trigger_run_id=trigger_run_id,
        topic=topic,
        attempt=None if start is None else start.attempt,
        pages=_pages_at(start),
        finished=bool(start is not None and start.finished),
    )
    last: Any = None
    if summary.finished:
        return summary, last
    while True:
        batch = reader.next_batch()
        for record in batch.rejected:
            out.warning(
                "stream %s: skipping an undecodable record at %s[%s] offset %s: %s",
                trigger_run_id,
                record.topic,
                record.partition,
                record.offset,
                record.error,
            )
        if batch.restarted:
            out.warning(
                "stream %s: attempt %d supersedes pages handled before; reading it from its start",
                trigger_run_id,
                batch.attempt,
            )
            summary.restarted = True
        if summary.attempt != batch.attempt:
            summary.attempt = batch.attempt
            summary.pages = 0
        events = page_events(batch.events)
        if events:
            if handle_batch is not None:
                last = handle_batch(events)
                summary.pages = events[-1].sequence_index + 1
                summary.pages_this_try += len(events)
            else:
                assert handle_event is not None
                before = reader.checkpoint()
                for position, event in enumerate(events):
                    last = handle_event(event)
                    summary.pages = event.sequence_index + 1
                    summary.pages_this_try += 1
                    if save is not None and position < len(events) - 1:
                        save(
                            Checkpoint(
                                attempt=event.attempt,
                                next_sequence_index=event.sequence_index + 1,
                                # re-reading from the last acknowledged offset is always safe
                                offset=None if before is None else before.offset,
                                partition=batch.partition
                                if batch.partition is not None
                                else (None if before is None else before.partition),
                            )
                        )
            summary.batches_this_try += 1
        if save is not None:
            save(batch.checkpoint)
        try:
            reader.ack(batch)
        except KafkaOperationError as exc:  # the task state store keeps the position anyway
            out.warning("stream %s: committing the position to Kafka failed: %s", trigger_run_id, exc)
        if batch.finished:
            summary.finished = True
            return summary, last


# ====================================================================== the mixin
def _owner(operator: Any) -> str:
    return f"{type(operator).__name__}(task_id={getattr(operator, 'task_id', '?')!r})"


def _parse_time_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the ones resolved at run time (XComArgs, ...): those are not data yet."""
    from airflow.sdk.definitions._internal.mixins import ResolveMixin

    return {name: value for name, value in values.items() if not isinstance(value, ResolveMixin)}


class StreamingOperatorMixin:
    """Makes a deferrable operator stream its trigger's pages through Kafka (see the module doc).

    Use it before ``BaseOperator`` in the bases::

        class ListItemsOperator(StreamingOperatorMixin, BaseOperator):
            def execute(self, context):
                self.defer_stream(ItemsPagesTrigger(url=self.url))

            def handle_trigger_events(self, events, context):  # a batch of StreamEvent
                store_items([e.payload for e in events])

    or keep a classic ``execute_complete(self, context, event)``: it is called once per page.

    Class attributes tune the reading of the stream on resume: ``stream_max_events`` (batch
    size), ``stream_max_wait``, ``stream_gap_timeout`` and ``stream_start_timeout`` (seconds;
    the stream is complete in Kafka when the task resumes, so these only bound broker
    trouble).  ``trigger_kwargs_fields`` names operator attributes that feed a trigger;
    they are checked for serializability when the operator is created.
    ``stream_not_before_margin`` is how much earlier than the DAG run's ``run_after`` the
    trigger's progress lookup starts (see the module doc).
    """

    stream_max_events: ClassVar[int] = 100
    stream_max_wait: ClassVar[float] = 0.2
    stream_gap_timeout: ClassVar[float] = 60.0
    stream_start_timeout: ClassVar[float] = 60.0
    stream_poll_timeout: ClassVar[float] = 0.2
    stream_not_before_margin: ClassVar[timedelta] = DEFAULT_NOT_BEFORE_MARGIN
    trigger_kwargs_fields: ClassVar[Sequence[str]] = ()

    # ------------------------------------------------------------------ parse time
    def _validate_start_from_trigger_kwargs(self) -> None:
        """Called by Airflow when the operator is created (also for every base ``__init__``)."""
        owner = _owner(self)
        if getattr(self, "start_from_trigger", False):
            start_args = getattr(self, "start_trigger_args", None)
            trigger_kwargs = getattr(start_args, "trigger_kwargs", None)
            if trigger_kwargs:
                check_trigger_kwargs(_parse_time_values(trigger_kwargs), owner=owner)
        fields = {name: getattr(self, name) for name in self.trigger_kwargs_fields if hasattr(self, name)}
        if fields:
            check_trigger_kwargs(_parse_time_values(fields), owner=owner)
        parent = getattr(super(), "_validate_start_from_trigger_kwargs", None)
        if parent is not None:
            parent()

    # ------------------------------------------------------------------ execute side
    def defer_stream(
        self,
        trigger: StreamingTrigger,
        *,
        method_name: str = "execute_complete",
        timeout: timedelta | float | None = None,
        context: Context | Mapping[str, Any] | None = None,
    ) -> NoReturn:
        """Defer to ``trigger``, streaming every page through Kafka; call from ``execute()``.

        The trigger gets the task's deterministic ``trigger_run_id``, its ``generation``
        (the DAG run's ``clear_number``) and ``not_before`` (the DAG run's ``run_after``
        minus :attr:`stream_not_before_margin`), each unless it has one already; see the
        module doc.  Raises :class:`~airflow_kafka_events.errors.TriggerSerializationError`
        when a trigger argument would not survive Airflow's serialization.  On resume the
        pages go to :meth:`handle_trigger_events` if the operator overrides it, else to
        ``method_name(context, event)`` once per page.  ``context`` defaults to the running
        task's context.
        """
        if not isinstance(trigger, StreamingTrigger):
            raise ConfigurationError(
                f"{_owner(self)}: defer_stream() needs a StreamingTrigger, got {type(trigger).__qualname__}"
            )
        if not isinstance(method_name, str) or not method_name:
            raise ConfigurationError(
                f"{_owner(self)}: method_name must be a method name, got {method_name!r}"
            )
        if context is None:
            from airflow.sdk import get_current_context

            context = get_current_context()
        trigger_run_id = trigger.trigger_run_id or task_stream_id(context)
        generation = trigger.generation if trigger.generation is not None else generation_of(context)
        not_before = trigger.not_before
        if not_before is None:
            bound = not_before_of(context, self.stream_not_before_margin)
            not_before = None if bound is None else bound.isoformat()
        streaming = with_stream_kwargs(
            trigger, trigger_run_id=trigger_run_id, generation=generation, not_before=not_before
        )
        classpath, kwargs = streaming.serialize()
        check_trigger_kwargs(kwargs, owner=f"{_owner(self)} deferring to {classpath}")
        self._log().info(
            "stream %s: deferring (generation %d, progress lookup not before %s)",
            trigger_run_id,
            generation,
            not_before,
        )
        operator: Any = self
        operator.defer(
            trigger=streaming,
            method_name=RESUME_METHOD,
            kwargs={"handler_method": method_name, "kafka_config_id": streaming.kafka_config_id},
            timeout=timeout,
        )
        raise AssertionError("defer() returned")  # pragma: no cover - defer() always raises

    @staticmethod
    def stream_start_trigger_args(
        trigger_cls: str | type[StreamingTrigger],
        trigger_kwargs: Mapping[str, Any] | None = None,
        *,
        method_name: str = "execute_complete",
        timeout: timedelta | None = None,
    ) -> StartTriggerArgs:
        """``StartTriggerArgs`` for a ``start_from_trigger`` task resuming in :meth:`resume_stream`.

        With ``finish_task=True`` in ``trigger_kwargs`` the trigger ends the task itself (the
        descriptor becomes its XCom) and nothing resumes; otherwise the task resumes on a
        worker and reads the stream like a task that called :meth:`defer_stream`.
        """
        classpath = (
            trigger_cls
            if isinstance(trigger_cls, str)
            else f"{trigger_cls.__module__}.{trigger_cls.__qualname__}"
        )
        kwargs = dict(trigger_kwargs or {})
        return StartTriggerArgs(
            trigger_cls=classpath,
            trigger_kwargs=kwargs,
            next_method=RESUME_METHOD,
            next_kwargs={
                "handler_method": method_name,
                "kafka_config_id": kwargs.get("kafka_config_id", "kafka_default"),
            },
            timeout=timeout,
        )

    # ------------------------------------------------------------------ resume side
    def handle_trigger_events(self, events: Sequence[StreamEvent], context: Context) -> Any:
        """Handle a batch of pages, in order.  Override to opt into batches.

        Not overriding it keeps the classic behaviour: the single-event method given to
        :meth:`defer_stream` is called once per page.
        """
        raise NotImplementedError

    def _handles_batches(self) -> bool:
        return type(self).handle_trigger_events is not StreamingOperatorMixin.handle_trigger_events

    def _log(self) -> Any:
        return getattr(self, "log", log)

    def open_stream_reader(
        self,
        topic: str,
        trigger_run_id: str,
        *,
        kafka_config_id: str,
        checkpoint: Checkpoint | None,
        partition: int | None = None,
    ) -> StreamReader:
        """The reader of a finished stream (no consumer group: the task state store keeps the position)."""
        from airflow_kafka_events.hooks import KafkaEventsHook

        settings = KafkaEventsHook(kafka_config_id=kafka_config_id).get_settings()
        config = settings.consumer_config(f"airflow-kafka-events-resume-{uuid.uuid4().hex}")
        return StreamReader(
            config,
            topic,
            trigger_run_id,
            checkpoint=checkpoint,
            max_events=self.stream_max_events,
            max_wait=self.stream_max_wait,
            gap_timeout=self.stream_gap_timeout,
            start_timeout=self.stream_start_timeout,
            poll_timeout=self.stream_poll_timeout,
            partition=partition,
        )

    def resume_stream(
        self,
        context: Context,
        event: Any = None,
        handler_method: str = "execute_complete",
        kafka_config_id: str = "kafka_default",
    ) -> Any:
        """Where a streaming task resumes: read the stream of ``event`` and hand its pages over."""
        descriptor = _descriptor_of(event, _owner(self))
        logger = self._log()
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
        batches = self._handles_batches()
        single: Callable[..., Any] | None = None
        if not batches:
            single = getattr(self, handler_method, None)
            if not callable(single):
                raise ConfigurationError(
                    f"{_owner(self)} has no method {handler_method!r} to hand the stream's pages to "
                    "(define it, or override handle_trigger_events)"
                )
        store = state_store_of(context)
        generation = generation_of(context)
        key = checkpoint_key(descriptor.trigger_run_id)
        stored = load_checkpoint(store, key, generation) if store is not None else None
        if stored is not None and stored.attempt == descriptor.attempt:
            start = stored
            logger.info("stream %s: resuming after checkpoint %s", descriptor.trigger_run_id, stored)
        else:
            start = Checkpoint(
                attempt=descriptor.attempt,
                next_sequence_index=0,
                offset=descriptor.first_offset,
                partition=descriptor.partition,
            )
        logger.info(
            "stream %s: attempt %d has %d page(s) in %s[%d]; handing them to %s",
            descriptor.trigger_run_id,
            descriptor.attempt,
            descriptor.count,
            descriptor.topic,
            descriptor.partition,
            "handle_trigger_events" if batches else handler_method,
        )

        save: Callable[[Checkpoint], None] | None = None
        if store is not None:
            checkpoint_store = store

            def save(checkpoint: Checkpoint) -> None:
                save_checkpoint(checkpoint_store, key, checkpoint, generation)

        if start.finished:
            summary = StreamSummary(
                descriptor.trigger_run_id, descriptor.topic, start.attempt, _pages_at(start), finished=True
            )
            logger.info("stream %s: every page was handled already", descriptor.trigger_run_id)
            return summary.to_dict() if batches else None

        handle_batch: Callable[[list[StreamEvent]], Any] | None = None
        handle_event: Callable[[StreamEvent], Any] | None = None
        if batches:

            def handle_batch(events: list[StreamEvent]) -> Any:
                return self.handle_trigger_events(events, context)

        else:
            assert single is not None
            legacy = single

            def handle_event(event: StreamEvent) -> Any:
                return legacy(context, event=event.payload)

        reader = self.open_stream_reader(
            descriptor.topic,
            descriptor.trigger_run_id,
            kafka_config_id=kafka_config_id,
            checkpoint=start,
            partition=descriptor.partition,
        )
        with reader:
            summary, last = drive_stream(
                reader,
                trigger_run_id=descriptor.trigger_run_id,
                topic=descriptor.topic,
                handle_batch=handle_batch,
                handle_event=handle_event,
                save=save,
                start=start,
                logger=logger,
            )
        logger.info(
            "stream %s: %d page(s) handled by this try in %d batch(es); %d in all",
            descriptor.trigger_run_id,
            summary.pages_this_try,
            summary.batches_this_try,
            summary.pages,
        )
        return summary.to_dict() if batches else last


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


# ====================================================================== fetch-only operator
class StreamingTriggerOperator(StreamingOperatorMixin, BaseOperator):
    """Runs a streaming trigger only to get its pages into Kafka.

    The trigger runs with ``finish_task=True``: it ends the task (failed if the stream
    failed) with the :class:`~airflow_kafka_events.streams.StreamDescriptor` as XCom
    ``return_value``.  With ``start_from_trigger=True`` (default) the task starts in the
    triggerer and never takes a worker slot; its trigger gets no ``generation`` (nor
    ``not_before``): such a task cannot tell a clear from a retry, and after a clear its
    complete stream is reported again, not fetched again.  Otherwise ``execute()`` defers
    to it through :meth:`~StreamingOperatorMixin.defer_stream`, which passes both (so a
    clear starts the stream over).  Consume the
    stream by reference with
    :class:`~airflow_kafka_events.operators.consumer.StreamConsumerOperator`.

    :param trigger_cls: classpath of a :class:`StreamingTrigger` subclass.
    :param trigger_kwargs: its keyword arguments; checked for serializability when the
        operator is created (``finish_task`` is forced to ``True``).
    :param start_from_trigger: start the task in the triggerer.
    :param trigger_timeout: fail the task if the trigger runs longer than this.
    """

    ui_color = "#e0f0ff"

    def __init__(
        self,
        *,
        trigger_cls: str,
        trigger_kwargs: Mapping[str, Any] | None = None,
        start_from_trigger: bool = True,
        trigger_timeout: timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(trigger_cls, str) or "." not in trigger_cls:
            raise ConfigurationError(
                f"{_owner(self)}: trigger_cls must be the dotted classpath of a trigger, got {trigger_cls!r}"
            )
        if trigger_kwargs is not None and not isinstance(trigger_kwargs, Mapping):
            raise ConfigurationError(
                f"{_owner(self)}: trigger_kwargs must be a dict, got {type(trigger_kwargs).__qualname__}"
            )
        self.trigger_cls = trigger_cls
        self.trigger_kwargs: dict[str, Any] = {**(trigger_kwargs or {}), "finish_task": True}
        self.trigger_timeout = trigger_timeout
        check_trigger_kwargs(_parse_time_values(self.trigger_kwargs), owner=_owner(self))
        self.start_from_trigger = bool(start_from_trigger)
        self.start_trigger_args = self.stream_start_trigger_args(
            trigger_cls, self.trigger_kwargs, timeout=trigger_timeout
        )

    def execute(self, context: Context) -> Any:
        from airflow.sdk.module_loading import import_string

        trigger_class = import_string(self.trigger_cls)
        if not (isinstance(trigger_class, type) and issubclass(trigger_class, StreamingTrigger)):
            raise ConfigurationError(f"{_owner(self)}: {self.trigger_cls} is not a StreamingTrigger class")
        self.defer_stream(trigger_class(**self.trigger_kwargs), context=context, timeout=self.trigger_timeout)

"""Producer side: deferrable operators whose trigger streams every page through Kafka.

A :class:`~airflow_kafka_events.streams.producing.trigger.StreamingTrigger` writes each page it
fetches to Kafka and resumes its task ONCE, with a
:class:`~airflow_kafka_events.streams.descriptor.StreamDescriptor`.  :class:`StreamingOperatorMixin`
is the operator half:

* :meth:`StreamingOperatorMixin.defer_stream` (called from ``execute()``) names the stream
  deterministically (``stream_id(dag_id, run_id, task_id, map_index)``, so retries and
  consumers find it), gives the trigger the task's *generation* (so a user *clear* starts
  the stream over and a *retry* resumes it) and a lower time bound for its progress lookup,
  checks the trigger arguments survive Airflow's serialization, and defers;
* :meth:`StreamingOperatorMixin.resume_stream`, the method the task resumes in, reads the
  stream back from Kafka in order and in batches (with the reading loop of
  :mod:`airflow_kafka_events.streams.consuming.consumption`) and hands it to the operator:

  - to :meth:`~StreamingOperatorMixin.handle_trigger_events` ``(events, context)`` when the
    operator overrides it: ``events`` is a list of
    :class:`~airflow_kafka_events.streams.consuming.consumption.StreamEvent` (``payload``,
    ``sequence_index``, ``attempt``, ``trigger_run_id``); the task's return value is a
    summary dict (:class:`ConsumptionSummary`);
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
    reference (:class:`~airflow_kafka_events.streams.consuming.operator.StreamRef`).  A
    ``start_from_trigger`` task has no worker step, so it cannot tell a clear from a retry:
    after a clear its (complete) stream is reported again, not fetched again.

Parse-time check
    The mixin checks ``start_trigger_args.trigger_kwargs`` (when ``start_from_trigger``) and
    the attributes named in :attr:`StreamingOperatorMixin.trigger_kwargs_fields` with
    :func:`~airflow_kafka_events.provider.serialization.check_trigger_kwargs` when the operator
    is created, so a DAG file with, e.g., a lambda in trigger kwargs fails to parse with a
    :class:`~airflow_kafka_events.errors.TriggerSerializationError` naming the argument.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout
from airflow.triggers.base import StartTriggerArgs

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.provider.serialization import check_trigger_kwargs
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.consumption import StreamEvent, read_stream
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.descriptor import (
    DEFAULT_NOT_BEFORE_MARGIN,
    generation_of,
    not_before_of,
    task_label,
    task_stream_id,
)
from airflow_kafka_events.streams.producing.trigger import StreamingTrigger

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

__all__ = [
    "RESUME_METHOD",
    "StreamingOperatorMixin",
    "StreamingTriggerOperator",
    "with_stream_kwargs",
]

log = logging.getLogger(__name__)

#: The method a streaming task resumes in (``next_method`` of its deferral).
RESUME_METHOD = "resume_stream"


def with_stream_kwargs(trigger: StreamingTrigger, **overrides: Any) -> StreamingTrigger:
    """A copy of ``trigger`` (rebuilt from its ``serialize()``) with stream kwargs replaced."""
    if not isinstance(trigger, StreamingTrigger):
        raise ConfigurationError(f"expected a StreamingTrigger, got {type(trigger).__qualname__}")
    _classpath, kwargs = trigger.serialize()
    kwargs.update(overrides)
    return type(trigger)(**kwargs)


# ====================================================================== the mixin
def _parse_time_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the ones resolved at run time (XComArgs, ...): those are not data yet."""
    from airflow.sdk.definitions._internal.mixins import ResolveMixin

    return {name: value for name, value in values.items() if not isinstance(value, ResolveMixin)}


#: Airflow's ``next_method`` of a task whose trigger failed.
TRIGGER_FAIL = "__fail__"


def _trigger_cause(traceback: Any) -> str | None:
    """The last line of a failed trigger's traceback (``Type: message``), if there is one."""
    if not isinstance(traceback, (list, tuple)):
        return None
    lines = [line.strip() for chunk in traceback if isinstance(chunk, str) for line in chunk.splitlines()]
    return next((line for line in reversed(lines) if line), None)


#: The reader options the mixin's ``stream_<option>`` class attributes tune.
_READER_TUNING = ("max_events", "max_wait", "gap_timeout", "start_timeout", "poll_timeout")


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
        owner = task_label(self)
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
                f"{task_label(self)}: defer_stream() needs a StreamingTrigger, "
                f"got {type(trigger).__qualname__}"
            )
        if not isinstance(method_name, str) or not method_name:
            raise ConfigurationError(
                f"{task_label(self)}: method_name must be a method name, got {method_name!r}"
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
        check_trigger_kwargs(kwargs, owner=f"{task_label(self)} deferring to {classpath}")
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

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's, except that a failed trigger's cause reaches the task's error.

        Airflow 3.3 logs a failed trigger's traceback (``Trigger failed:``) and raises
        ``TaskDeferralError("Trigger failure")``: the task's last line, ``context["exception"]`` in
        failure callbacks and alerts then say nothing of the cause.  Here that error carries the
        traceback's last line (e.g. the missing topic and the command that creates it).
        """
        try:
            return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
        except TaskDeferralError as exc:
            cause = _trigger_cause((next_kwargs or {}).get("traceback"))
            if next_method != TRIGGER_FAIL or cause is None or isinstance(exc, TaskDeferralTimeout):
                raise
            raise TaskDeferralError(f"{exc}: {cause}") from exc

    def _handles_batches(self) -> bool:
        return type(self).handle_trigger_events is not StreamingOperatorMixin.handle_trigger_events

    def _log(self) -> Any:
        return getattr(self, "log", log)

    def _index_writer(self, context: Context, trigger_run_id: str, kafka_config_id: str) -> Any:
        """This task's stream index writer as a consumer of ``trigger_run_id`` (``None``: none)."""
        from airflow_kafka_events.provider.hook import KafkaEventsHook
        from airflow_kafka_events.streams.index.publisher import consumer_writer

        try:
            settings = KafkaEventsHook(kafka_config_id=kafka_config_id).get_settings()
        except Exception as exc:  # the reader says what is wrong with the connection
            self._log().debug("no stream index writer: %s", exc)
            return None
        return consumer_writer(settings, trigger_run_id, context, logger=self._log())

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
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        settings = KafkaEventsHook(kafka_config_id=kafka_config_id).get_settings()
        config = settings.consumer_config(f"airflow-kafka-events-resume-{uuid.uuid4().hex}")
        tuned = ReadOptions(**{name: getattr(self, f"stream_{name}") for name in _READER_TUNING})
        return StreamReader(
            config,
            topic,
            trigger_run_id,
            options=tuned,
            checkpoint=checkpoint,
            partition=partition,
            codec=settings.codecs.trigger,
        )

    def _stream_handlers(
        self, context: Context, batches: bool, handler_method: str
    ) -> tuple[Callable[[list[StreamEvent]], Any] | None, Callable[[StreamEvent], Any] | None]:
        """``(handle_batch, handle_event)``: the batch handler, or the classic single-event method."""
        if batches:

            def handle_batch(events: list[StreamEvent]) -> Any:
                return self.handle_trigger_events(events, context)

            return handle_batch, None
        single = getattr(self, handler_method, None)
        if not callable(single):
            raise ConfigurationError(
                f"{task_label(self)} has no method {handler_method!r} to hand the stream's pages to "
                "(define it, or override handle_trigger_events)"
            )
        legacy: Callable[..., Any] = single

        def handle_event(event: StreamEvent) -> Any:
            return legacy(context, event=event.payload)

        return None, handle_event

    def resume_stream(
        self,
        context: Context,
        event: Any = None,
        handler_method: str = "execute_complete",
        kafka_config_id: str = "kafka_default",
    ) -> Any:
        """Where a streaming task resumes: read the stream of ``event`` and hand its pages over."""
        batches = self._handles_batches()
        summary, last = read_stream(
            event,
            owner=task_label(self),
            context=context,
            handlers=lambda: self._stream_handlers(context, batches, handler_method),
            handler_name="handle_trigger_events" if batches else handler_method,
            open_reader=lambda descriptor, start: self.open_stream_reader(
                descriptor.topic,
                descriptor.trigger_run_id,
                kafka_config_id=kafka_config_id,
                checkpoint=start,
                partition=descriptor.partition,
            ),
            open_index=lambda trigger_run_id: self._index_writer(context, trigger_run_id, kafka_config_id),
            logger=self._log(),
        )
        return summary.to_dict() if batches else last


# ====================================================================== fetch-only operator
class StreamingTriggerOperator(StreamingOperatorMixin, BaseOperator):
    """Runs a streaming trigger only to get its pages into Kafka.

    The trigger runs with ``finish_task=True``: it ends the task (failed if the stream
    failed) with the :class:`~airflow_kafka_events.streams.descriptor.StreamDescriptor` as XCom
    ``return_value``.  With ``start_from_trigger=True`` (default) the task starts in the
    triggerer and never takes a worker slot; its trigger gets no ``generation`` (nor
    ``not_before``): such a task cannot tell a clear from a retry, and after a clear its
    complete stream is reported again, not fetched again.  Otherwise ``execute()`` defers
    to it through :meth:`~StreamingOperatorMixin.defer_stream`, which passes both (so a
    clear starts the stream over).  Consume the
    stream by reference with
    :class:`~airflow_kafka_events.streams.consuming.operator.StreamConsumerOperator`.

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
                f"{task_label(self)}: trigger_cls must be the dotted classpath of a trigger, "
                f"got {trigger_cls!r}"
            )
        if trigger_kwargs is not None and not isinstance(trigger_kwargs, Mapping):
            raise ConfigurationError(
                f"{task_label(self)}: trigger_kwargs must be a dict, got {type(trigger_kwargs).__qualname__}"
            )
        self.trigger_cls = trigger_cls
        self.trigger_kwargs: dict[str, Any] = {**(trigger_kwargs or {}), "finish_task": True}
        self.trigger_timeout = trigger_timeout
        check_trigger_kwargs(_parse_time_values(self.trigger_kwargs), owner=task_label(self))
        self.start_from_trigger = bool(start_from_trigger)
        self.start_trigger_args = self.stream_start_trigger_args(
            trigger_cls, self.trigger_kwargs, timeout=trigger_timeout
        )

    def execute(self, context: Context) -> Any:
        from airflow.sdk.module_loading import import_string

        trigger_class = import_string(self.trigger_cls)
        if not (isinstance(trigger_class, type) and issubclass(trigger_class, StreamingTrigger)):
            raise ConfigurationError(
                f"{task_label(self)}: {self.trigger_cls} is not a StreamingTrigger class"
            )
        self.defer_stream(trigger_class(**self.trigger_kwargs), context=context, timeout=self.trigger_timeout)

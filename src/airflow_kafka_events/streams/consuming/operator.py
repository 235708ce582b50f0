"""Consumer side: read another task's trigger event stream by reference, in order, in batches.

:class:`StreamRef` names the stream of a producing task of the SAME DAG run
(``stream_id(dag_id, run_id, producer_task_id, map_index)``); no DAG edge is needed, so a
:class:`StreamConsumerOperator` can run beside its producer and handle pages while they are
being written.

Guarantees (from :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader`): pages
are handled strictly in ``sequence_index`` order, duplicates are dropped, the reader follows
the producer's highest attempt, a missing page fails the task with
:class:`~airflow_kafka_events.errors.StreamGapError` after ``gap_timeout``, a stream that
does not start fails it with :class:`~airflow_kafka_events.errors.StreamNotStartedError`
after ``start_timeout``, and a stream that its producer ended with an error fails it with
:class:`~airflow_kafka_events.errors.StreamFailedError` (after the pages before the error
were handled).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_kafka_events.errors import (
    ConfigurationError,
    StreamGapError,
    StreamNotStartedError,
    StreamProgressError,
    ValidationError,
)
from airflow_kafka_events.provider.serialization import check_trigger_kwargs
from airflow_kafka_events.streams.checkpoint import Checkpoint, state_store_of
from airflow_kafka_events.streams.consuming.collector import resolve_gc_threshold
from airflow_kafka_events.streams.consuming.consumption import (
    ConsumptionSummary,
    StreamCheckpoints,
    StreamEvent,
    drive_stream,
)
from airflow_kafka_events.streams.consuming.deadlines import with_gap_timeout, with_start_timeout
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.consuming.slot_release import (
    DEFAULT_RESCHEDULE_INTERVAL,
    IN_WORKER,
    RESCHEDULE,
    Rerun,
    RescheduleNote,
    WaitOptions,
    gives_slot_back,
    load_note,
    reschedule_consumer,
)
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger, wait_event_error
from airflow_kafka_events.streams.descriptor import not_before_of, stream_id, task_label
from airflow_kafka_events.streams.index.publisher import consumer_writer
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_kafka_events.kafka.settings import KafkaSettings

__all__ = [
    "StreamConsumerOperator",
    "StreamRef",
    "consumer_group_id",
]

#: The reader's bound on pages held ahead of a missing one (a larger gap is no idle wait).
_MAX_BUFFERED = 10_000


@dataclass(frozen=True)
class StreamRef:
    """The stream of task ``producer_task_id`` (and ``map_index``) in the consumer's DAG run.

    Resolved at run time (:meth:`resolve`) to ``stream_id(dag_id, run_id, producer_task_id,
    map_index)``, the ``trigger_run_id`` a streaming producer of that task writes under.
    ``topic`` and ``kafka_config_id`` say where the stream is.
    """

    producer_task_id: str
    _: KW_ONLY
    map_index: int = -1
    topic: str = DEFAULT_TOPIC
    kafka_config_id: str = "kafka_default"

    def __post_init__(self) -> None:
        if not isinstance(self.producer_task_id, str) or not self.producer_task_id:
            raise ConfigurationError(
                f"StreamRef.producer_task_id must be a non-empty str, got {self.producer_task_id!r}"
            )
        if "/" in self.producer_task_id:
            raise ConfigurationError(
                f"StreamRef.producer_task_id cannot contain '/': {self.producer_task_id!r}"
            )
        if isinstance(self.map_index, bool) or not isinstance(self.map_index, int) or self.map_index < -1:
            raise ConfigurationError(f"StreamRef.map_index must be an int >= -1, got {self.map_index!r}")
        for name in ("topic", "kafka_config_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"StreamRef.{name} must be a non-empty str, got {value!r}")

    def trigger_run_id(self, dag_id: str, run_id: str) -> str:
        """The referenced stream's id in DAG run ``run_id`` of ``dag_id``."""
        return stream_id(dag_id, run_id, self.producer_task_id, self.map_index)

    def resolve(self, context: Mapping[str, Any]) -> str:
        """The referenced stream's id in the DAG run of ``context`` (``context["ti"]``)."""
        ti = context["ti"]
        return self.trigger_run_id(ti.dag_id, ti.run_id)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def consumer_group_id(dag_id: str, task_id: str, map_index: int = -1) -> str:
    """The Kafka consumer group of a consuming task (one per task; mapped instances apart)."""
    group = f"airflow-kafka-events.{dag_id}.{task_id}"
    return group if map_index is None or map_index < 0 else f"{group}.{map_index}"


class StreamConsumerOperator(BaseOperator):
    """Handles the pages of another task's stream (:class:`StreamRef`) in order, in batches.

    Give ``handler``, the dotted path of an importable callable ``handler(events, context)``,
    or subclass and override :meth:`handle_trigger_events`.  ``events`` is a list of
    :class:`~airflow_kafka_events.streams.consuming.consumption.StreamEvent` (``payload``,
    ``sequence_index``, ``attempt``, ``trigger_run_id``), at most ``max_events`` of them; a
    batch is handed over as soon as ``max_events`` pages are there or ``max_wait`` seconds
    after its first page arrived.

    Position: after each handled batch the position is checkpointed in
    ``context["task_state_store"]`` (key ``"stream:<trigger_run_id>"``, generation = the DAG
    run's ``clear_number``) and committed to the consumer group ``airflow-kafka-events.
    <dag_id>.<task_id>`` (the commit carries the checkpoint in its metadata; it is used
    when no task state store is available, and shows the consumer's lag).  A handler that
    raises fails the task; the retry resumes after the last handled batch, so each batch's
    effect happens once if the handler applies a batch atomically.  A cleared task starts
    over: with no checkpoint of its generation it reads the latest attempt found in Kafka
    from its first page.

    Waiting (see :mod:`airflow_kafka_events.streams.consuming.slot_release`): the task reads in a poll loop on
    its worker while pages come, keeping its slot.  When no page is ready it gives the slot
    back, so a producer that needs one can start: with nothing of the stream written yet at
    once, otherwise once no page was ready for ``idle_interval`` seconds (with everything
    handled so far checkpointed).  How depends on ``deferrable`` (default: ``[operators]
    default_deferrable``):

    * ``deferrable=False`` with ``reschedule=True`` (the defaults): the task reschedules
      itself as a sensor in ``reschedule`` mode does (``up_for_reschedule``, the same try
      runs again ``reschedule_interval`` seconds later, no triggerer needed) and goes on
      from its checkpoint; the start and gap timeouts count across reruns;
    * ``deferrable=True``: it defers to a
      :class:`~airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger`, which waits in
      the triggerer until ``max_events`` pages are there (or the stream's end, a new
      attempt, or ``resume_wait`` seconds after the first new page) and resumes the task at
      its checkpoint; the trigger runs the start and gap timeouts itself;
    * ``deferrable=False, reschedule=False``: it waits in the worker, holding its slot, for
      the first page (``start_timeout``) and each next one (``gap_timeout``): the lowest
      latency, but consumers queued before their producers can take every slot and fail.

    In every mode the timeouts end in the same ``StreamNotStartedError`` /
    ``StreamGapError``; when the slot is given back, ``start_timeout`` counts from the
    task's first start in this try, except the time its producer was known to wait for a
    slot (no state or ``scheduled``).

    Returns (XCom) ``{"trigger_run_id", "topic", "attempt", "pages", "pages_this_try",
    "batches_this_try", "restarted", "finished"}`` (and ``"deferrals"`` or ``"reschedules"``,
    the slot give-backs of this try, when it may give its slot back), ``pages`` counting
    every page of the attempt handled by any try.

    :param stream: the stream to read.
    :param handler: dotted path of ``handler(events, context)``.
    :param max_events: most pages per batch.
    :param max_wait: seconds a batch waits for more pages once it has one.
    :param gap_timeout: seconds to wait for the next page of a started stream.
    :param start_timeout: seconds to wait for the stream's first element.
    :param kafka_config_id: Kafka connection (default: ``stream.kafka_config_id``).
    :param poll_timeout: seconds of one Kafka poll.
    :param lookup_timeout: seconds to look up the stream's latest attempt on a fresh start.
    :param deferrable: defer while idle (see *Waiting*); default ``[operators] default_deferrable``.
    :param reschedule: without deferral, reschedule while idle (see *Waiting*); ``False``
        waits in the worker.
    :param reschedule_interval: seconds from giving the slot back by a reschedule to the rerun.
    :param idle_interval: seconds without a ready page before giving the slot back (default
        ``max(max_wait, 1)`` when deferring, ``max(max_wait, 10)`` when rescheduling).
    :param resume_wait: seconds the deferred wait gives a batch to fill after its first page
        (default ``max(5, max_wait)``).
    :param state_poll_interval: seconds between two looks at the producer's state while deferred.

    The operator keeps the reading options as :attr:`read`
    (:class:`~airflow_kafka_events.streams.consuming.reader.ReadOptions`), the waiting ones as
    :attr:`wait` (:class:`~airflow_kafka_events.streams.consuming.slot_release.WaitOptions`).
    """

    ui_color = "#f0e4ff"

    def __init__(
        self,
        *,
        stream: StreamRef,
        handler: str | None = None,
        max_events: int = 100,
        max_wait: float = 1.0,
        gap_timeout: float = 300.0,
        start_timeout: float = 600.0,
        kafka_config_id: str | None = None,
        poll_timeout: float = 0.2,
        lookup_timeout: float = 30.0,
        deferrable: bool | None = None,
        reschedule: bool = True,
        reschedule_interval: float = DEFAULT_RESCHEDULE_INTERVAL,
        idle_interval: float | None = None,
        resume_wait: float | None = None,
        state_poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = task_label(self)
        if not isinstance(stream, StreamRef):
            raise ConfigurationError(f"{owner}: stream must be a StreamRef, got {type(stream).__qualname__}")
        if handler is not None:
            # a callable here would have to travel to the worker: it must be a dotted path
            check_trigger_kwargs({"handler": handler}, owner=owner)
            if not isinstance(handler, str) or "." not in handler.strip(".") or handler.strip() != handler:
                raise ConfigurationError(
                    f"{owner}: handler must be the dotted path of an importable callable "
                    f"'module.function', got {handler!r}"
                )
        elif type(self).handle_trigger_events is StreamConsumerOperator.handle_trigger_events:
            raise ConfigurationError(
                f"{owner}: give handler='module.function' or override handle_trigger_events"
            )
        if kafka_config_id is not None and (not isinstance(kafka_config_id, str) or not kafka_config_id):
            raise ConfigurationError(
                f"{owner}: kafka_config_id must be a non-empty str, got {kafka_config_id!r}"
            )
        try:
            self.read = ReadOptions(max_events, max_wait, gap_timeout, start_timeout, poll_timeout)
            self.wait = WaitOptions.following(
                self.read.max_wait,
                deferrable=deferrable,
                reschedule=reschedule,
                idle_interval=idle_interval,
                resume_wait=resume_wait,
                reschedule_interval=reschedule_interval,
                state_poll_interval=state_poll_interval,
                lookup_timeout=lookup_timeout,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"{owner}: {exc}") from exc
        self.stream = stream
        self.handler = handler
        self.kafka_config_id = kafka_config_id or stream.kafka_config_id
        #: the reader's options of this run (the timeouts are the idle interval while idle waits)
        self._reading = self.read
        #: how this run waits (:func:`~airflow_kafka_events.streams.consuming.slot_release.wait_mode`)
        self.wait_mode = IN_WORKER
        #: epoch seconds of the last handled page (the gap clock of a rescheduling run)
        self._last_progress = 0.0
        #: the last :meth:`starting_point` found nothing of the stream written yet
        self.stream_unwritten = False
        self._handler_callable: Callable[..., Any] | None = None

    # ------------------------------------------------------------------ handling
    def handle_trigger_events(self, events: Sequence[StreamEvent], context: Context) -> Any:
        """Handle one batch of pages (in order).  Default: call ``handler(events, context)``."""
        return self.load_handler()(events, context)

    def load_handler(self) -> Callable[..., Any]:
        """The ``handler`` callable (imported once)."""
        if self._handler_callable is None:
            if self.handler is None:
                raise ConfigurationError(f"{task_label(self)} has no handler")
            from airflow.sdk.module_loading import import_string

            try:
                function = import_string(self.handler)
            except ImportError as exc:
                raise ConfigurationError(
                    f"{task_label(self)}: cannot import handler {self.handler!r}: {exc}"
                ) from exc
            if not callable(function):
                raise ConfigurationError(f"{task_label(self)}: handler {self.handler!r} is not callable")
            self._handler_callable = function
        return self._handler_callable

    # ------------------------------------------------------------------ Kafka
    def get_settings(self) -> KafkaSettings:
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        return KafkaEventsHook(kafka_config_id=self.kafka_config_id).get_settings()

    def starting_point(
        self, settings: KafkaSettings, trigger_run_id: str, not_before: datetime | None = None
    ) -> Checkpoint:
        """Where a task without a checkpoint starts: the first page of the latest attempt in Kafka.

        Nothing written yet: the first offset of the stream's partition at or after
        ``not_before`` (no envelope of the DAG run's streams is older than its ``run_after``,
        see ``not_before_of``), following whatever attempt comes; :attr:`stream_unwritten` is
        then set.  The lookup failed: the start of the partition.
        """
        from airflow_kafka_events.streams.progress import lookup_stream

        not_before_ms = None if not_before is None else max(0, int(not_before.timestamp() * 1000))
        self.stream_unwritten = False
        try:
            location, progress = lookup_stream(
                settings,
                self.stream.topic,
                trigger_run_id,
                timeout=self.wait.lookup_timeout,
                not_before_ms=not_before_ms,
            )
        except StreamProgressError as exc:
            self.log.info("stream %s: no progress found (%s); reading from the start", trigger_run_id, exc)
            return Checkpoint()
        if progress is None:
            self.stream_unwritten = True
            return Checkpoint(offset=location.scan_start, partition=location.partition)
        self.log.info(
            "stream %s: starting at attempt %d (offset %s of partition %d)",
            trigger_run_id,
            progress.attempt,
            progress.first_offset,
            progress.partition,
        )
        return Checkpoint(
            attempt=progress.attempt,
            next_sequence_index=0,
            offset=progress.first_offset,
            partition=progress.partition,
        )

    def open_reader(
        self, settings: KafkaSettings, trigger_run_id: str, checkpoint: Checkpoint | None, group_id: str
    ) -> StreamReader:
        return StreamReader(
            settings.consumer_config(group_id),
            self.stream.topic,
            trigger_run_id,
            options=self._reading,
            checkpoint=checkpoint,
            group_id=group_id,
            codec=settings.codecs.trigger,
        )

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        trigger_run_id = self._trigger_run_id(context)
        if self.handler is not None:
            self.load_handler()  # fail before reading anything
        checkpoints = StreamCheckpoints.of_task(context, trigger_run_id)
        self.wait_mode = self.wait.mode(has_store=checkpoints is not None)
        note = self._load_note(context, trigger_run_id)
        if note is not None and note.resume is not None:
            self.log.info("stream %s: rerun %d after giving the slot back", trigger_run_id, note.reschedules)
            return self._go_on(context, trigger_run_id, **note.resume)
        settings = self.get_settings()
        start: Checkpoint | None = None
        if checkpoints is not None:
            start = checkpoints.load(self.log)
            if start is None:
                start = self.starting_point(settings, trigger_run_id, not_before_of(context))
        else:
            self.log.warning(
                "no task state store in the context: the position is kept in the consumer group only"
            )
        start_deadline = time.time() + self.read.start_timeout if note is None else note.start_deadline
        deferrals = 0 if note is None else note.reschedules
        if gives_slot_back(self.wait_mode, unwritten=self.stream_unwritten):
            # nothing to read yet: give the slot back at once (the producer may need it to start)
            self.log.info("stream %s has not started: giving the slot back at once", trigger_run_id)
            summary = ConsumptionSummary.starting_at(trigger_run_id, self.stream.topic, start)
            self._give_slot_back(context, trigger_run_id, summary, start, start_deadline, deferrals, True)
        self.log.info(
            "reading stream %s of task %r from topic %s",
            trigger_run_id,
            self.stream.producer_task_id,
            self.stream.topic,
        )
        return self._read(context, trigger_run_id, settings, start, None, start_deadline, deferrals)

    def resume_reading(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        summary: dict[str, Any] | None = None,
        start_deadline: float | None = None,
        checkpoint: dict[str, Any] | None = None,
        deferrals: int = 0,
    ) -> dict[str, Any]:
        """Resumed by the :class:`StreamWaitTrigger`: fail as an in-worker read would, or read on."""
        trigger_run_id = self._trigger_run_id(context)
        error = wait_event_error(event or {}, topic=self.stream.topic, trigger_run_id=trigger_run_id)
        if error is not None:  # not ready: the typed error an in-worker read raises
            raise self._not_started(error) if isinstance(error, StreamNotStartedError) else error
        self.log.info(
            "stream %s: resumed (%s, %s page(s) ready) after deferral %d",
            trigger_run_id,
            (event or {}).get("reason"),
            (event or {}).get("ready"),
            deferrals,
        )
        self.wait_mode = self.wait.mode(has_store=True)
        if event and isinstance(event.get("start_deadline"), (int, float)):
            start_deadline = float(event["start_deadline"])
        return self._go_on(context, trigger_run_id, summary, start_deadline, checkpoint, deferrals)

    def _go_on(
        self,
        context: Context,
        trigger_run_id: str,
        summary: dict[str, Any] | None = None,
        start_deadline: float | None = None,
        checkpoint: dict[str, Any] | None = None,
        deferrals: int = 0,
    ) -> dict[str, Any]:
        """Read on from the checkpoint after the slot was given back (deferred or rescheduled)."""
        checkpoints = StreamCheckpoints.of_task(context, trigger_run_id)
        start = None if checkpoints is None else checkpoints.load(self.log)
        if start is None and checkpoint is not None:
            start = Checkpoint.from_json(checkpoint)
        carried = (
            None
            if summary is None
            else ConsumptionSummary.carried(trigger_run_id, self.stream.topic, summary)
        )
        deadline = time.time() + self.read.start_timeout if start_deadline is None else start_deadline
        return self._read(context, trigger_run_id, self.get_settings(), start, carried, deadline, deferrals)

    def _read(
        self,
        context: Context,
        trigger_run_id: str,
        settings: KafkaSettings,
        start: Checkpoint | None,
        summary: ConsumptionSummary | None,
        start_deadline: float,
        deferrals: int,
    ) -> dict[str, Any]:
        ti = context["ti"]
        checkpoints = StreamCheckpoints.of_task(context, trigger_run_id)
        map_index = getattr(ti, "map_index", -1)
        group_id = consumer_group_id(ti.dag_id, ti.task_id, -1 if map_index is None else map_index)
        note = self._load_note(context, trigger_run_id)
        self._last_progress = (
            time.time() if note is None or note.last_progress is None else note.last_progress
        )
        self._reading = self.read.windowed(*self._reader_windows(start_deadline))

        def handle_batch(events: list[StreamEvent]) -> Any:
            result = self.handle_trigger_events(events, context)
            self._last_progress = time.time()
            return result

        try:
            with self.open_reader(settings, trigger_run_id, start, group_id) as reader:
                summary, _ = drive_stream(
                    reader,
                    trigger_run_id=trigger_run_id,
                    topic=self.stream.topic,
                    handle_batch=handle_batch,
                    save=None if checkpoints is None else checkpoints.save,
                    start=start,
                    logger=self.log,
                    summary=summary,
                    is_idle=None if self.wait_mode == IN_WORKER else self._idle_test(start_deadline),
                    index=consumer_writer(settings, trigger_run_id, context, logger=self.log),
                    gc_threshold=resolve_gc_threshold(),
                )
                position = reader.checkpoint()
        except StreamNotStartedError as exc:
            raise self._not_started(exc) from exc
        except StreamGapError as exc:
            if self.wait_mode == IN_WORKER:
                raise
            # the reader waited the idle interval, the task more
            raise with_gap_timeout(exc, self.read.gap_timeout) from exc
        if gives_slot_back(self.wait_mode, idle=summary.idle):
            self._give_slot_back(context, trigger_run_id, summary, position, start_deadline, deferrals, False)
        summary.log_handled(self.log)
        result = summary.to_dict()
        if self.wait_mode != IN_WORKER:
            result["deferrals" if self.wait_mode != RESCHEDULE else "reschedules"] = deferrals
        return result

    def _idle_test(self, start_deadline: float) -> Callable[[StreamNotStartedError | StreamGapError], bool]:
        """Whether a reader's (idle-sized) timeout is an idle wait, not the real timeout."""

        def is_idle(exc: StreamNotStartedError | StreamGapError) -> bool:
            if isinstance(exc, StreamNotStartedError):
                return time.time() < start_deadline
            if self.wait.idle_interval >= self.read.gap_timeout or len(exc.present) > _MAX_BUFFERED:
                return False
            # the trigger keeps the gap clock of a deferral; a rerun keeps it here
            return self.wait_mode != RESCHEDULE or time.time() - self._last_progress < self.read.gap_timeout

        return is_idle

    def _reader_windows(self, start_deadline: float) -> tuple[float, float]:
        """The reader's (start, gap) timeouts: the idle interval when it gives the slot back while idle."""
        gap_timeout, idle_interval = self.read.gap_timeout, self.wait.idle_interval
        if self.wait_mode == IN_WORKER:
            return self.read.start_timeout, gap_timeout
        remaining = start_deadline - time.time()
        gap_remaining = gap_timeout
        if self.wait_mode == RESCHEDULE:
            gap_remaining = max(self._last_progress + gap_timeout - time.time(), 0.1)
        return max(min(idle_interval, remaining), 0.1), min(idle_interval, gap_remaining)

    def _give_slot_back(
        self,
        context: Context,
        trigger_run_id: str,
        summary: ConsumptionSummary,
        position: Checkpoint | None,
        start_deadline: float,
        deferrals: int,
        unwritten: bool,
    ) -> None:
        """Defer, or reschedule with what the rerun goes on from (see *Waiting*)."""
        resume = {
            "summary": summary.carry(),
            "start_deadline": start_deadline,
            "checkpoint": None if position is None else position.to_json(),
            "deferrals": deferrals + 1,
        }
        if self.wait_mode != RESCHEDULE:
            self._defer_idle(context, trigger_run_id, position, resume)
            return
        store = state_store_of(context)
        assert store is not None, "only a task with a state store reschedules"
        rerun = Rerun(self.stream, trigger_run_id, self.read.start_timeout, self.wait.reschedule_interval)
        try:
            reschedule_consumer(
                context,
                store,
                rerun,
                resume=None if unwritten else resume,  # a stream not started yet is looked up again
                start_deadline=start_deadline,
                reschedules=deferrals + 1,
                last_progress=None if unwritten else self._last_progress,
            )
        except StreamNotStartedError as exc:
            raise self._not_started(exc) from exc

    def _load_note(self, context: Context, trigger_run_id: str) -> RescheduleNote | None:
        return load_note(context, trigger_run_id) if self.wait_mode == RESCHEDULE else None

    def _defer_idle(
        self, context: Context, trigger_run_id: str, position: Checkpoint | None, resume: dict[str, Any]
    ) -> None:
        ti = context["ti"]
        trigger = StreamWaitTrigger.waiting_for(
            self.stream,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            trigger_run_id=trigger_run_id,
            kafka_config_id=self.kafka_config_id,
            checkpoint=resume["checkpoint"],
            read=self.read,
            wait=self.wait,
            start_deadline=resume["start_deadline"],
            gap_deadline=time.time() - self.wait.idle_interval + self.read.gap_timeout,
        )
        self.log.info(
            "stream %s: no page ready for %gs; deferring at %s (deferral %d)",
            trigger_run_id,
            self.wait.idle_interval,
            position,
            resume["deferrals"],
        )
        self.defer(trigger=trigger, method_name="resume_reading", kwargs=resume)

    def _trigger_run_id(self, context: Context) -> str:
        try:
            return self.stream.resolve(context)
        except ValidationError as exc:
            raise ConfigurationError(
                f"{task_label(self)}: cannot name the stream of {self.stream}: {exc}"
            ) from exc

    def _not_started(self, exc: StreamNotStartedError) -> StreamNotStartedError:
        """``exc`` with a hint at the producing task (and the real ``start_timeout``)."""
        where = "" if self.stream.map_index < 0 else f" (map_index {self.stream.map_index})"
        hint = (
            f". Is task {self.stream.producer_task_id!r}{where} "
            f"of this DAG run streaming to topic {self.stream.topic!r}?"
        )
        return with_start_timeout(exc, self.read.start_timeout, hint)

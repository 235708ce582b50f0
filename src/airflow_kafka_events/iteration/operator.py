"""``IterableOperator``: one task instance runs a Python callable over many items.

The operator behind ``@task.iterable`` (see :mod:`airflow_kafka_events.iteration`).  Its
``execute()`` resolves the items (upstream lists, or a stream read while its producer is
still writing), runs :class:`~airflow_kafka_events.iteration.runner.IterationRunner` over
them with the task's ``task_state_store`` as checkpoint store, writes every result to the
task's results stream and returns a bounded summary (the XCom ``return_value``).

Calling the callable
    Like ``@task``: the callable gets the item's arguments (``iterate(url=...)`` gives it
    ``url=``), the constant arguments (``.partial(...)``), and the context values its
    signature names (``ti``, ``dag_run``, ... or all of them with ``**context``) -- taken
    from the item's OWN shallow copy of the context, which also holds
    ``iteration_item`` (:class:`~airflow_kafka_events.iteration.items.ItemInfo`).  Sync
    callables run in worker threads, async ones on the task's event loop.  An item cannot
    defer: raising ``TaskDeferred`` fails the item (no retry); ``AirflowSkipException``
    marks the item done without a result.

Partitioned asset events
    ``emit_partitions=Asset(...)`` publishes one asset event per succeeded item with
    :func:`~airflow_kafka_events.assets.emit.emit_asset_event`, partition key
    ``partition_key(item_kwargs, result)`` (default: the item id; ``None`` emits nothing).
    The event is part of the item: an item is done once its callable returned, its event
    was acknowledged and its result delivered; a failing emission fails the item (its retry
    calls the callable again; the event's default idempotency key is the same).

Waiting for a stream
    The task gives the worker slot back while the stream has not started, or is idle with
    nothing in flight -- see :mod:`airflow_kafka_events.iteration.deferral`: by deferring
    (``deferrable=True``) or, by default, by a reschedule; ``deferrable=False,
    reschedule=False`` waits in the worker (lowest latency, one slot held for the stream's
    whole life: consumers queued before their producers can take every slot).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.bases.decorator import get_unique_task_id, is_async_callable

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.calling import item_handler, validate_iterate_kwargs
from airflow_kafka_events.iteration.deferral import Resumption
from airflow_kafka_events.iteration.items import Item
from airflow_kafka_events.iteration.options import (
    CheckpointOptions,
    IterationOptions,
    ReportOptions,
    RetryOptions,
    ShardOptions,
    as_seconds,
)
from airflow_kafka_events.iteration.runner import IterationRunner
from airflow_kafka_events.iteration.sources import (
    ListItems,
    StreamIdle,
    StreamItems,
    StreamItemSource,
    locate_stream_start,
)
from airflow_kafka_events.streams.checkpoint import Checkpoint, state_store_of
from airflow_kafka_events.streams.consuming.collector import resolve_gc_threshold, young_collections_every
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.consuming.slot_release import (
    DEFAULT_RESCHEDULE_INTERVAL,
    IN_WORKER,
    RESCHEDULE,
    Rerun,
    WaitOptions,
    gives_slot_back,
    load_note,
    reschedule_consumer,
)
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger, wait_event_error
from airflow_kafka_events.streams.descriptor import generation_of, not_before_of, task_stream_id
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_kafka_events.iteration.results import ResultsStreamWriter

__all__ = [
    "ITEM_CONTEXT_KEY",
    "IterableOperator",
]

#: Context key of the :class:`ItemInfo` in each item's context copy.
ITEM_CONTEXT_KEY = "iteration_item"


@dataclass(frozen=True)
class ResultOptions:
    """Where an iterating task's results go: its results stream, and the partitioned asset events.

    ``partition_key(item_kwargs, result) -> str | None`` (default: the item id) names the
    event of an item; it needs ``emit_partitions``, the ``Asset`` to publish them for.
    """

    results_stream: bool = True
    results_topic: str = DEFAULT_TOPIC
    kafka_config_id: str | None = None
    emit_partitions: Any = None
    partition_key: Callable[[Mapping[str, Any], Any], str | None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "results_stream", bool(self.results_stream))
        if self.partition_key is not None and not callable(self.partition_key):
            raise ConfigurationError(f"partition_key must be callable, got {self.partition_key!r}")
        if self.partition_key is not None and self.emit_partitions is None:
            raise ConfigurationError("partition_key needs emit_partitions=Asset(...)")


def _by_kwargs(item_id: Callable[[Mapping[str, Any]], str] | None) -> Callable[[Item], str] | None:
    """The runner's ``item_id(item)`` of the operator's ``item_id(item_kwargs)``."""
    if item_id is None:
        return None
    if not callable(item_id):
        raise ConfigurationError(f"item_id must be callable, got {item_id!r}")
    return lambda item: item_id(item.value)


class IterableOperator(BaseOperator):
    """Runs ``python_callable`` over every item of ``iterate_kwargs`` in ONE task instance.

    With ``shards=n`` (``batch(size=n)``: n mapped instances, ``shard`` = 0 .. n-1) each
    instance handles the items whose ordinal ``% n`` is its ``shard``.  Returns (XCom) the
    runner's summary (counts, the failed item ids capped at ``max_failed_ids``) plus
    ``results``: where the results stream is.

    :param python_callable: the function called once per item.
    :param iterate_kwargs: ``{argument: items}``; items are a list/tuple, an upstream
        XComArg, or one stream (``StreamRef`` / ``from_stream`` / ``results_of``).  Several
        lists combine as their cartesian product, like ``expand()``.
    :param op_args: / :param op_kwargs: constant arguments of every call.
    :param concurrency: items running at the same time in this task instance.
    :param item_retries: more tries of a failing item (within this task try).
    :param item_retry_delay: seconds (or timedelta) before an item's first retry;
        ``item_retry_backoff`` multiplies it per retry, ``max_item_retry_delay`` caps it.
    :param item_timeout: seconds (or timedelta) one try of an item may take.  Async items
        are cancelled; a sync item's thread is abandoned (threads cannot be killed) and the
        item fails -- see :mod:`airflow_kafka_events.iteration.retries`.
    :param max_abandoned_threads: sync calls still running after their timeout that fail
        the task (default ``max(4, concurrency)``).
    :param fail_fast: stop at the first item that failed for good, instead of trying every
        item and failing at the end with the list of failed item ids.
    :param checkpoint_every: / :param checkpoint_interval: save the progress checkpoint every
        that many completed items or seconds (whichever comes first).
    :param progress_every: / :param progress_interval: log a progress line every that many
        completed items or seconds.
    :param item_id: ``item_id(item_kwargs) -> str`` names items in logs, failures and
        results (default: the item's ordinal).
    :param results_stream: write every result to the task's results stream in Kafka.
    :param results_topic: / :param kafka_config_id: where the results stream goes.
    :param emit_partitions: an ``Asset``: publish one partitioned asset event per item.
    :param partition_key: ``partition_key(item_kwargs, result) -> str | None`` (default:
        the item id).
    :param max_failed_ids: most failed item ids in the summary.
    :param stream_max_events: / :param stream_max_wait: / :param stream_gap_timeout: /
        :param stream_start_timeout: reading a stream source (see ``StreamReader``).
    :param deferrable: give the worker slot back to the triggerer while a stream source is
        idle (default ``[operators] default_deferrable``); without it, ``reschedule=True``
        gives it back by a reschedule, rerun ``stream_reschedule_interval`` seconds later,
        and ``reschedule=False`` waits in the worker; ``stream_idle_interval`` (default
        ``max(stream_max_wait, 1)`` deferring, ``max(stream_max_wait, 10)`` rescheduling):
        seconds without a page before that;
        ``stream_resume_wait`` (default ``max(5, stream_max_wait)``): how long the deferred
        wait gives ``stream_max_events`` pages to come after the first;
        ``stream_state_poll_interval``: seconds between two looks at the producer's state.
    :param show_return_value_in_logs: / :param templates_dict: / :param templates_exts: as
        for ``@task``: log the summary at the end; a templated dict passed to the callable as
        ``templates_dict``; the file extensions rendered in it.

    The operator keeps the keywords in frozen, validated groups: :attr:`iteration`
    (:class:`~airflow_kafka_events.iteration.options.IterationOptions`, what the runner takes),
    :attr:`results` (:class:`ResultOptions`), :attr:`read` (the ``stream_*`` reading options,
    :class:`~airflow_kafka_events.streams.consuming.reader.ReadOptions`) and :attr:`wait`
    (:class:`~airflow_kafka_events.streams.consuming.slot_release.WaitOptions`).
    """

    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs", "iterate_kwargs")
    template_fields_renderers = {
        "templates_dict": "json",
        "op_args": "py",
        "op_kwargs": "py",
        "iterate_kwargs": "py",
    }
    # the option groups are frozen: copies of the task share them
    shallow_copy_attrs: Sequence[str] = ("python_callable", "iteration", "results", "read", "wait")
    ui_color = "#e8f4e4"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        iterate_kwargs: Mapping[str, Any],
        task_id: str,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        shard: int = 0,
        shards: int = 1,
        concurrency: int = 1,
        item_retries: int = 0,
        item_retry_delay: float | timedelta = 0.0,
        item_retry_backoff: float = 2.0,
        max_item_retry_delay: float | timedelta | None = None,
        item_timeout: float | timedelta | None = None,
        max_abandoned_threads: int | None = None,
        fail_fast: bool = False,
        checkpoint_every: int = 500,
        checkpoint_interval: float | timedelta = 15.0,
        progress_every: int = 1000,
        progress_interval: float | timedelta = 30.0,
        item_id: Callable[[Mapping[str, Any]], str] | None = None,
        results_stream: bool = True,
        results_topic: str = DEFAULT_TOPIC,
        kafka_config_id: str | None = None,
        emit_partitions: Any = None,
        partition_key: Callable[[Mapping[str, Any], Any], str | None] | None = None,
        max_failed_ids: int = 100,
        stream_max_events: int = 100,
        stream_max_wait: float = 0.5,
        stream_gap_timeout: float = 300.0,
        stream_start_timeout: float = 600.0,
        deferrable: bool | None = None,
        reschedule: bool = True,
        stream_reschedule_interval: float = DEFAULT_RESCHEDULE_INTERVAL,
        stream_idle_interval: float | None = None,
        stream_resume_wait: float | None = None,
        stream_state_poll_interval: float = 5.0,
        show_return_value_in_logs: bool = True,
        templates_dict: dict[str, Any] | None = None,
        templates_exts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if not getattr(self, "_BaseOperator__from_mapped", False):
            task_id = get_unique_task_id(task_id, kwargs.get("dag"), kwargs.get("task_group"))
        kwargs.pop("multiple_outputs", None)  # the summary is one XCom
        if "task_concurrency" in kwargs:  # AIP-104's examples use the name Airflow 3 removed
            raise ConfigurationError(
                f"{type(self).__name__}(task_id={task_id!r}): task_concurrency is not an Airflow 3 "
                "argument; use max_active_tis_per_dag=N (task instances of this task at once) or "
                "concurrency=N (items at once inside one task instance)"
            )
        if not callable(python_callable):
            raise ConfigurationError(f"python_callable must be callable, got {python_callable!r}")
        op_args = list(op_args or [])
        op_kwargs = dict(op_kwargs or {})
        iterate_kwargs = dict(iterate_kwargs or {})
        validate_iterate_kwargs(
            python_callable, iterate_kwargs, op_args, op_kwargs, owner=f"IterableOperator({task_id!r})"
        )
        super().__init__(task_id=task_id, **kwargs)
        self.python_callable = python_callable
        self.op_args = op_args
        self.op_kwargs = op_kwargs
        self.iterate_kwargs = {
            name: StreamItems(value) if isinstance(value, StreamRef) else value
            for name, value in iterate_kwargs.items()
        }
        try:
            self.iteration = IterationOptions(
                shard=ShardOptions(shard, shards, concurrency),
                retry=RetryOptions(
                    item_retries,
                    as_seconds(item_retry_delay),
                    item_retry_backoff,
                    as_seconds(max_item_retry_delay),
                    as_seconds(item_timeout),
                    max_abandoned_threads,
                    fail_fast,
                ),
                checkpoint=CheckpointOptions(checkpoint_every, as_seconds(checkpoint_interval)),
                report=ReportOptions(progress_every, as_seconds(progress_interval), max_failed_ids),
                item_id=_by_kwargs(item_id),
            )
            self.results = ResultOptions(
                results_stream, results_topic, kafka_config_id, emit_partitions, partition_key
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self._owner()}: {exc}") from exc
        try:
            self.read = ReadOptions(
                stream_max_events, stream_max_wait, stream_gap_timeout, stream_start_timeout
            )
            self.wait = WaitOptions.following(
                self.read.max_wait,
                deferrable=deferrable,
                reschedule=reschedule,
                idle_interval=stream_idle_interval,
                resume_wait=stream_resume_wait,
                reschedule_interval=stream_reschedule_interval,
                state_poll_interval=stream_state_poll_interval,
            )
        except ConfigurationError as exc:  # the options' names are the keywords without "stream_"
            raise ConfigurationError(f"{self._owner()}: stream_{exc}") from exc
        #: how this run waits (:func:`~airflow_kafka_events.streams.consuming.slot_release.wait_mode`)
        self.wait_mode = IN_WORKER
        self.show_return_value_in_logs = bool(show_return_value_in_logs)
        self.templates_dict = templates_dict
        if templates_exts:
            self.template_ext = tuple(templates_exts)

    def _owner(self) -> str:
        return f"{type(self).__name__}(task_id={self.task_id!r})"

    # ------------------------------------------------------------------ pieces
    def _emitter(self) -> Callable[[Mapping[str, Any], dict[str, Any], Any], None] | None:
        asset = self.results.emit_partitions
        if asset is None:
            return None
        partition_key = self.results.partition_key
        kafka_config_id = self.results.kafka_config_id

        def emit(item_kwargs: Mapping[str, Any], context: dict[str, Any], result: Any) -> None:
            from airflow_kafka_events.assets.emit import emit_asset_event, source_from_task_context

            info = context[ITEM_CONTEXT_KEY]
            key = info.item_id if partition_key is None else partition_key(item_kwargs, result)
            if key is None:
                return
            emit_asset_event(
                asset,
                partition_key=str(key),
                extra={"item": info.item_id, "ordinal": info.ordinal},
                source=source_from_task_context(context),
                kafka_config_id=kafka_config_id,
            )

        return emit

    def _stream_spec(self) -> tuple[str, StreamItems] | None:
        streams = [(n, v) for n, v in self.iterate_kwargs.items() if isinstance(v, StreamItems)]
        return streams[0] if streams else None

    def _stream_ref(self) -> StreamRef:
        found = self._stream_spec()
        assert found is not None, "only a stream source gives its slot back"
        return found[1].stream

    def _open_source(self, context: Context, resumption: Resumption) -> ListItems | StreamItemSource:
        """The items: lists (resolved XComArgs) or a stream read from its latest attempt.

        A resumed deferral reads on from the stream position after the last page handled.
        """
        found = self._stream_spec()
        if found is None:
            return ListItems(self.iterate_kwargs)
        name, spec = found
        ref = spec.stream
        trigger_run_id = ref.resolve(context)
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        settings = KafkaEventsHook(kafka_config_id=ref.kafka_config_id or "kafka_default").get_settings()
        start = None if resumption.position is None else Checkpoint.from_json(resumption.position)
        attempt, unwritten = resumption.attempt, False
        if start is None:
            start, attempt, unwritten = locate_stream_start(
                settings, ref.topic, trigger_run_id, not_before=not_before_of(context)
            )
        idle = None
        if self.wait_mode != IN_WORKER:
            idle = StreamIdle(
                interval=self.wait.idle_interval,
                start_deadline=resumption.start_deadline,
                gap_timeout=self.read.gap_timeout,
                start_timeout=self.read.start_timeout,
            )
        reader = StreamReader(
            settings.consumer_config(f"airflow-kafka-events-iterate-{uuid.uuid4().hex}"),
            ref.topic,
            trigger_run_id,
            options=self.read if idle is None else self.read.windowed(*idle.reader_windows()),
            checkpoint=start,
            codec=settings.codecs.trigger,
        )
        self.log.info(
            "iterating the %s (stream %s, attempt %d, from item %d) while its producer may still be writing",
            spec,
            trigger_run_id,
            attempt,
            resumption.ordinal,
        )
        source = StreamItemSource(
            reader,
            name=name,
            spec=spec,
            trigger_run_id=trigger_run_id,
            attempt=attempt,
            idle=idle,
            checkpoint=start,
            ordinal=resumption.ordinal,
        )
        source.unwritten = unwritten
        if resumption.last_progress is not None:
            source.last_progress = resumption.last_progress
        return source

    def _open_sink(self, context: Context, generation: int) -> ResultsStreamWriter:
        from airflow_kafka_events.envelopes.model import ProducerIdentity
        from airflow_kafka_events.iteration.results import (
            RESULTS_DELIVERY_TIMEOUT,
            RESULTS_ROLE,
            ResultsStreamWriter,
        )
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        ti = context["ti"]
        hook = KafkaEventsHook(kafka_config_id=self.results.kafka_config_id or "kafka_default")
        map_index = getattr(ti, "map_index", None)
        bound = not_before_of(context)
        return ResultsStreamWriter(
            settings=hook.get_settings(),
            # a result not acknowledged within the writer's wait is dropped, never published later
            producer=hook.get_producer(role=RESULTS_ROLE, message_timeout=RESULTS_DELIVERY_TIMEOUT),
            topic=self.results.results_topic,
            delivery_timeout=RESULTS_DELIVERY_TIMEOUT,
            trigger_run_id=task_stream_id(context),
            generation=generation,
            identity=ProducerIdentity(
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=-1 if map_index is None else map_index,
                try_number=getattr(ti, "try_number", None),
            ),
            not_before_ms=None if bound is None else max(0, int(bound.timestamp() * 1000)),
        )

    def _last_try(self, context: Context) -> bool:
        try_number = getattr(context["ti"], "try_number", None)
        retries = self.retries or 0
        return not isinstance(try_number, int) or try_number > retries

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        self.wait_mode = self.wait.mode(has_store=state_store_of(context) is not None)
        found = self._stream_spec()
        note = None
        if found is not None and self.wait_mode == RESCHEDULE:
            note = load_note(context, found[1].stream.resolve(context))
        if note is None:
            return self._iterate(context, Resumption(start_deadline=time.time() + self.read.start_timeout))
        self.log.info("iteration rerun %d after giving the slot back", note.reschedules)
        if note.resume is None:  # the stream had not started: look it up again
            return self._iterate(
                context, Resumption(start_deadline=note.start_deadline, deferrals=note.reschedules)
            )
        return self._iterate(context, Resumption(**note.resume))

    def resume_iterating(
        self, context: Context, event: dict[str, Any] | None = None, **resumption: Any
    ) -> dict[str, Any]:
        """Resumed by the :class:`StreamWaitTrigger`: fail as an in-worker read would, or go on."""
        ref = self._stream_ref()
        error = wait_event_error(event or {}, topic=ref.topic, trigger_run_id=ref.resolve(context))
        if error is not None:
            raise error
        state = Resumption.from_kwargs(resumption, event)
        self.wait_mode = self.wait.mode(has_store=True)
        self.log.info(
            "iteration resumed (%s, %s page(s) ready) after deferral %d",
            (event or {}).get("reason"),
            (event or {}).get("ready"),
            state.deferrals,
        )
        return self._iterate(context, state)

    def _give_slot_back(
        self, context: Context, source: StreamItemSource, state: Resumption, carried: Any, unwritten: bool
    ) -> None:
        """Defer, or reschedule with where the rerun goes on (see *Waiting for a stream*)."""
        ref, following = self._stream_ref(), state.after(source, carried)
        if self.wait_mode == RESCHEDULE:
            store = state_store_of(context)
            assert store is not None
            reschedule_consumer(
                context,
                store,
                Rerun(ref, source.trigger_run_id, self.read.start_timeout, self.wait.reschedule_interval),
                resume=None if unwritten else following.to_kwargs(),
                start_deadline=state.start_deadline,
                reschedules=following.deferrals,
                last_progress=None if unwritten else source.last_progress,
            )
            return
        ti = context["ti"]
        trigger = StreamWaitTrigger.waiting_for(
            ref,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            trigger_run_id=source.trigger_run_id,
            kafka_config_id=ref.kafka_config_id,
            checkpoint=following.position,
            read=self.read,
            wait=self.wait,
            start_deadline=state.start_deadline,
            gap_deadline=source.last_progress + self.read.gap_timeout,
        )
        self.log.info(
            "no page for %gs and nothing in flight; deferring at item %d, %s (deferral %d)",
            self.wait.idle_interval,
            following.ordinal,
            source.position,
            following.deferrals,
        )
        self.defer(trigger=trigger, method_name="resume_iterating", kwargs=following.to_kwargs())

    def _iterate(self, context: Context, state: Resumption) -> dict[str, Any]:
        store = state_store_of(context)
        if store is None:
            self.log.warning(
                "no task state store in the context: progress is not checkpointed, a retry runs every item"
            )
        if self.templates_dict is not None:
            context["templates_dict"] = self.templates_dict  # type: ignore[typeddict-unknown-key]
        generation = generation_of(context)
        source = self._open_source(context, state)
        sink: ResultsStreamWriter | None = None
        try:
            if isinstance(source, StreamItemSource) and gives_slot_back(
                self.wait_mode, unwritten=source.unwritten
            ):
                # nothing to iterate yet: give the slot back at once (the producer may need it)
                self.log.info("stream %s has not started: giving the slot back", source.trigger_run_id)
                self._give_slot_back(context, source, state, state.carried, True)
            sink = self._open_sink(context, generation) if self.results.results_stream else None
            runner = IterationRunner(
                item_handler(self.python_callable, self.op_args, self.op_kwargs, self._emitter()),
                self.iteration,
                context_key=ITEM_CONTEXT_KEY,
                is_async=is_async_callable(self.python_callable),
                context=context,
                store=store,
                generation=generation,
                source_key=source.key,
                sink=sink,
                logger=self.log,
                carried=state.carried or None,
            )
            # a stream's items come in batches of pages held while their items run: the collector's
            # threshold is raised as in a consumer task (collector.py)
            threshold = resolve_gc_threshold() if isinstance(source, StreamItemSource) else 0
            try:
                with young_collections_every(threshold):
                    summary = runner.run(source)
            except BaseException as exc:
                if sink is not None and sink.opened and self._last_try(context):
                    try:
                        sink.close(error=exc)
                    except Exception as close_exc:
                        self.log.warning("ending the results stream with the error failed: %s", close_exc)
                raise
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        if summary.suspended and isinstance(source, StreamItemSource):
            # the results stream stays open
            self._give_slot_back(context, source, state, summary.to_dict(), False)
        return self._returned(summary.to_dict(), sink, source, state)

    def _returned(
        self,
        out: dict[str, Any],
        sink: ResultsStreamWriter | None,
        source: ListItems | StreamItemSource,
        state: Resumption,
    ) -> dict[str, Any]:
        """The XCom: the summary, where the (now ended) results stream is, the deferrals."""
        out["results"] = sink.close() if sink is not None else None
        if self.wait_mode != IN_WORKER and isinstance(source, StreamItemSource):
            out["reschedules" if self.wait_mode == RESCHEDULE else "deferrals"] = state.deferrals
        if self.show_return_value_in_logs:
            self.log.info("Done. Returned value was: %s", out)
        else:
            self.log.info("Done. Returned value not shown")
        return out

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
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.bases.decorator import get_unique_task_id, is_async_callable
from airflow.sdk.definitions._internal.mixins import ResolveMixin
from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from airflow_kafka_events.checkpoint import state_store_of
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.checkpoints import DEFAULT_CHECKPOINT_KEY
from airflow_kafka_events.iteration.errors import NonRetryableItemError, SkipItem
from airflow_kafka_events.iteration.runner import IterationRunner
from airflow_kafka_events.iteration.sources import (
    ListItems,
    StreamItems,
    StreamItemSource,
    stream_starting_point,
)
from airflow_kafka_events.operators.consumer import StreamRef
from airflow_kafka_events.streams import generation_of, not_before_of, task_stream_id
from airflow_kafka_events.triggers.streaming import DEFAULT_TOPIC

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from airflow_kafka_events.iteration.results import ResultsStreamWriter

__all__ = ["ITEM_CONTEXT_KEY", "IterableOperator", "validate_iterate_kwargs"]

#: Context key of the :class:`ItemInfo` in each item's context copy.
ITEM_CONTEXT_KEY = "iteration_item"

_ITERABLE_HINT = (
    "a list or tuple, an upstream task's output (XComArg), a StreamRef, or from_stream(...) / results_of(...)"
)


def _seconds(name: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be seconds (a number) or a timedelta, got {value!r}")
    return float(value)


def _is_stream(value: Any) -> bool:
    return isinstance(value, (StreamRef, StreamItems))


def validate_iterate_kwargs(
    python_callable: Callable[..., Any],
    iterate_kwargs: Mapping[str, Any],
    op_args: Sequence[Any] = (),
    op_kwargs: Mapping[str, Any] | None = None,
    *,
    owner: str = "iterate()",
) -> None:
    """Check, when the DAG is parsed, that the items can be passed to ``python_callable``."""
    op_kwargs = op_kwargs or {}
    if not isinstance(iterate_kwargs, Mapping) or not iterate_kwargs:
        raise TypeError(f"{owner} needs at least one argument to iterate over, e.g. iterate(url=urls)")
    for name, value in iterate_kwargs.items():
        if name in KNOWN_CONTEXT_KEYS:
            raise ValueError(f"{owner}: cannot iterate over the task context variable {name!r}")
        if name in op_kwargs:
            raise TypeError(f"{owner}: argument {name!r} is both iterated over and given as a constant")
        ok = (
            isinstance(value, ResolveMixin)
            or _is_stream(value)
            or (isinstance(value, (list, tuple, range)) and not isinstance(value, str))
        )
        if not ok:
            raise TypeError(
                f"{owner}: argument {name!r} must be {_ITERABLE_HINT}; got {type(value).__qualname__}"
            )
    streams = [name for name, value in iterate_kwargs.items() if _is_stream(value)]
    if streams and len(iterate_kwargs) > 1:
        raise TypeError(
            f"{owner}: a stream ({streams[0]!r}) must be the only argument iterated over; "
            "pass the other arguments as constants with .partial(...)"
        )
    signature = inspect.signature(python_callable)
    parameters = [
        p.replace(default=None) if p.name in KNOWN_CONTEXT_KEYS and p.default is p.empty else p
        for p in signature.parameters.values()
    ]
    # the items' arguments are only known at run time: bind placeholders
    placeholders = dict.fromkeys(iterate_kwargs)
    try:
        _bind_with_defaults(signature, parameters, op_args, {**op_kwargs, **placeholders})
    except TypeError as exc:
        name = getattr(python_callable, "__name__", repr(python_callable))
        raise TypeError(f"{owner}: {name}() cannot be called with these arguments: {exc}") from exc


def _bind_with_defaults(
    signature: inspect.Signature,
    parameters: list[inspect.Parameter],
    op_args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> None:
    # a parameter without default after one with a default (context keys got None) is fine here
    loose = [
        p.replace(default=None)
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)
        and p.name in kwargs
        else p
        for p in parameters
    ]
    try:
        relaxed = signature.replace(parameters=loose)
    except ValueError:
        relaxed = signature
    relaxed.bind(*op_args, **kwargs)


@contextlib.contextmanager
def _item_outcome() -> Iterator[None]:
    """An item's ``TaskDeferred`` fails it without retries; ``AirflowSkipException`` skips it."""
    try:
        yield
    except TaskDeferred as exc:
        raise NonRetryableItemError(
            f"an item cannot defer ({type(exc).__name__}); iterate items that run on the worker, "
            "or stream the deferred work through Kafka and iterate that stream"
        ) from None
    except AirflowSkipException as exc:
        raise SkipItem(str(exc)) from exc


class _Binder:
    """The keyword arguments of one call, as ``@task`` builds them (``KeywordParameters``).

    The signature is inspected once; each call merges context, constants and the item's
    arguments (in that order of precedence, lowest first) into the item's context copy.
    """

    def __init__(self, fn: Callable[..., Any], op_args: Sequence[Any], op_kwargs: Mapping[str, Any]) -> None:
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        self.wildcard = any(p.kind == p.VAR_KEYWORD for p in params)
        positional = {
            p.name for p in params[: len(op_args)] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        }
        self.names = [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in positional
        ]
        self.positional = positional
        self.op_kwargs = dict(op_kwargs)

    def __call__(self, item_kwargs: Mapping[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        context.update(self.op_kwargs)
        context.update(item_kwargs)
        if self.wildcard:
            if self.positional:
                return {k: v for k, v in context.items() if k not in self.positional}
            return context
        return {name: context[name] for name in self.names if name in context}


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
    """

    template_fields: Sequence[str] = ("op_args", "op_kwargs", "iterate_kwargs")
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py", "iterate_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable", "item_id", "partition_key")
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
        **kwargs: Any,
    ) -> None:
        if not getattr(self, "_BaseOperator__from_mapped", False):
            task_id = get_unique_task_id(task_id, kwargs.get("dag"), kwargs.get("task_group"))
        kwargs.pop("multiple_outputs", None)  # the summary is one XCom
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
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ConfigurationError(f"{self._owner()}: shards must be an int >= 1, got {shards!r}")
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
            raise ConfigurationError(f"{self._owner()}: shard must be in 0..{shards - 1}, got {shard!r}")
        self.shard = shard
        self.shards = shards
        self.concurrency = concurrency
        self.item_retries = item_retries
        self.item_retry_delay = _seconds("item_retry_delay", item_retry_delay)
        self.item_retry_backoff = item_retry_backoff
        self.max_item_retry_delay = _seconds("max_item_retry_delay", max_item_retry_delay, optional=True)
        self.item_timeout = _seconds("item_timeout", item_timeout, optional=True)
        self.max_abandoned_threads = max_abandoned_threads
        self.fail_fast = fail_fast
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval = _seconds("checkpoint_interval", checkpoint_interval)
        self.progress_every = progress_every
        self.progress_interval = _seconds("progress_interval", progress_interval)
        if item_id is not None and not callable(item_id):
            raise ConfigurationError(f"{self._owner()}: item_id must be callable, got {item_id!r}")
        if partition_key is not None and not callable(partition_key):
            raise ConfigurationError(
                f"{self._owner()}: partition_key must be callable, got {partition_key!r}"
            )
        if partition_key is not None and emit_partitions is None:
            raise ConfigurationError(f"{self._owner()}: partition_key needs emit_partitions=Asset(...)")
        self.item_id = item_id
        self.results_stream = bool(results_stream)
        self.results_topic = results_topic
        self.kafka_config_id = kafka_config_id
        self.emit_partitions = emit_partitions
        self.partition_key = partition_key
        self.max_failed_ids = max_failed_ids
        self.stream_max_events = stream_max_events
        self.stream_max_wait = stream_max_wait
        self.stream_gap_timeout = stream_gap_timeout
        self.stream_start_timeout = stream_start_timeout
        # every runner option is checked now, so a bad value fails the DAG file, not the task
        self._runner(handler=lambda value, context: None, context=None, store=None, source_key="", sink=None)

    def _owner(self) -> str:
        return f"{type(self).__name__}(task_id={self.task_id!r})"

    # ------------------------------------------------------------------ pieces
    def _runner(self, **kwargs: Any) -> IterationRunner:
        item_id = self.item_id
        return IterationRunner(
            concurrency=self.concurrency,
            item_retries=self.item_retries,
            item_retry_delay=self.item_retry_delay or 0.0,
            item_retry_backoff=self.item_retry_backoff,
            max_item_retry_delay=self.max_item_retry_delay,
            item_timeout=self.item_timeout,
            max_abandoned_threads=self.max_abandoned_threads,
            fail_fast=self.fail_fast,
            shard=self.shard,
            shards=self.shards,
            checkpoint_every=self.checkpoint_every,
            checkpoint_interval=self.checkpoint_interval or 15.0,
            progress_every=self.progress_every,
            progress_interval=self.progress_interval or 30.0,
            context_key=ITEM_CONTEXT_KEY,
            item_id=None if item_id is None else (lambda item: item_id(item.value)),
            max_failed_ids=self.max_failed_ids,
            is_async=is_async_callable(self.python_callable),
            **kwargs,
        )

    def _emitter(self) -> Callable[[Mapping[str, Any], dict[str, Any], Any], None] | None:
        asset = self.emit_partitions
        if asset is None:
            return None
        partition_key = self.partition_key
        kafka_config_id = self.kafka_config_id

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

    def _handler(self) -> Callable[[Any, dict[str, Any]], Any]:
        fn = self.python_callable
        op_args = tuple(self.op_args)
        binder = _Binder(fn, op_args, self.op_kwargs)
        emit = self._emitter()

        if is_async_callable(fn):

            async def handler(item_kwargs: Any, context: dict[str, Any]) -> Any:
                with _item_outcome():
                    result = await fn(*op_args, **binder(item_kwargs, context))
                if emit is not None:
                    await asyncio.to_thread(emit, item_kwargs, context, result)
                return result

            return handler

        def sync_handler(item_kwargs: Any, context: dict[str, Any]) -> Any:
            with _item_outcome():
                result = fn(*op_args, **binder(item_kwargs, context))
            if emit is not None:
                emit(item_kwargs, context, result)
            return result

        return sync_handler

    def _kafka_settings(self, kafka_config_id: str | None) -> Any:
        from airflow_kafka_events.hooks import KafkaEventsHook

        return KafkaEventsHook(kafka_config_id=kafka_config_id or "kafka_default").get_settings()

    def _open_source(self, context: Context) -> ListItems | StreamItemSource:
        """The items: lists (resolved XComArgs) or a stream read from its latest attempt."""
        streams = {
            name: value for name, value in self.iterate_kwargs.items() if isinstance(value, StreamItems)
        }
        if not streams:
            return ListItems(self.iterate_kwargs)
        ((name, spec),) = streams.items()
        from airflow_kafka_events.kafka.stream_reader import StreamReader

        ref = spec.stream
        trigger_run_id = ref.resolve(context)
        settings = self._kafka_settings(ref.kafka_config_id)
        start, attempt = stream_starting_point(
            settings, ref.topic, trigger_run_id, not_before=not_before_of(context)
        )
        reader = StreamReader(
            settings.consumer_config(f"airflow-kafka-events-iterate-{uuid.uuid4().hex}"),
            ref.topic,
            trigger_run_id,
            checkpoint=start,
            max_events=self.stream_max_events,
            max_wait=self.stream_max_wait,
            gap_timeout=self.stream_gap_timeout,
            start_timeout=self.stream_start_timeout,
        )
        self.log.info(
            "iterating the %s (stream %s, attempt %d) while its producer may still be writing",
            spec,
            trigger_run_id,
            attempt,
        )
        return StreamItemSource(reader, name=name, spec=spec, trigger_run_id=trigger_run_id, attempt=attempt)

    def _open_sink(self, context: Context, generation: int) -> ResultsStreamWriter:
        from airflow_kafka_events.envelopes import ProducerIdentity
        from airflow_kafka_events.hooks import KafkaEventsHook
        from airflow_kafka_events.iteration.results import (
            RESULTS_DELIVERY_TIMEOUT,
            RESULTS_ROLE,
            ResultsStreamWriter,
        )

        ti = context["ti"]
        hook = KafkaEventsHook(kafka_config_id=self.kafka_config_id or "kafka_default")
        map_index = getattr(ti, "map_index", None)
        bound = not_before_of(context)
        return ResultsStreamWriter(
            settings=hook.get_settings(),
            # a result not acknowledged within the writer's wait is dropped, never published later
            producer=hook.get_producer(role=RESULTS_ROLE, message_timeout=RESULTS_DELIVERY_TIMEOUT),
            topic=self.results_topic,
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
        store = state_store_of(context)
        if store is None:
            self.log.warning(
                "no task state store in the context: progress is not checkpointed, a retry runs every item"
            )
        generation = generation_of(context)
        source = self._open_source(context)
        sink: ResultsStreamWriter | None = None
        try:
            sink = self._open_sink(context, generation) if self.results_stream else None
            runner = self._runner(
                handler=self._handler(),
                context=context,
                store=store,
                checkpoint_key=DEFAULT_CHECKPOINT_KEY,
                generation=generation,
                source_key=source.key,
                sink=sink,
                logger=self.log,
            )
            try:
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
        out = summary.to_dict()
        out["results"] = sink.close() if sink is not None else None
        return out

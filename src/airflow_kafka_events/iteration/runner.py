"""The in-task iteration engine: run one callable over many items inside ONE task instance.

:class:`IterationRunner` is what ``@task.iterable`` runs on the worker.  It is pure Python
(no Airflow import), so every rule below is tested without Airflow services.

Items
    An item is an :class:`Item`: its ``ordinal`` (0-based position in its source, stable
    across tries) and its ``value`` (what the handler gets).  The source is any iterable or
    async iterable of items, consumed lazily: items are never materialised as task instances
    (no ``max_map_length`` cap) nor kept in memory once handled.

Sharding
    A runner with ``shards=n`` and ``shard=k`` handles the items whose ``ordinal % n == k``
    (:func:`shard_of`).  ``batch(size=n)`` runs n task instances over the same source, one
    per shard: each item is handled by exactly one of them, none twice, none skipped,
    whatever the order or the timing of the instances.  (A Kafka consumer group cannot split
    a stream: a stream is keyed by its ``trigger_run_id`` and so lives in ONE partition,
    which a group hands to one member only.)

Sync and async handlers
    ``handler(value, context)`` is called once per try of an item with the item's value and
    the item's own shallow copy of ``context`` (with :class:`ItemInfo` under
    ``context_key``), so items never share a mutable context dict.  A coroutine function
    runs on the runner's event loop; a plain function runs in a worker thread.  At most
    ``concurrency`` items run at the same time.  The runner never writes ``os.environ``
    (shared by every thread); it warns when items changed it.

Per-item retries and timeouts
    A failing item is tried again up to ``item_retries`` more times, after
    ``item_retry_delay * item_retry_backoff ** (attempt - 1)`` seconds (at most
    ``max_item_retry_delay``).  The delay does not hold a concurrency slot: other items
    run meanwhile.  ``item_timeout`` bounds one try of an item:

    * async items are cancelled with ``asyncio.wait_for``;
    * sync items run in worker threads, which Python cannot kill.  At the timeout the item
      fails with :class:`ItemTimeoutError` (and may be retried) and its thread is ABANDONED:
      a new thread takes its slot, and the old call keeps running to its end in the
      background, its result ignored.  Its side effects may therefore still happen, even
      after a retry of the item started.  More than ``max_abandoned_threads`` calls still
      running after their timeout fail the task (:class:`TooManyAbandonedThreadsError`):
      hung calls do not pile up for ever.

    The task's own ``execution_timeout`` still bounds the whole task.

Failure policy
    ``fail_fast=True``: the first item that fails for good (retries exhausted) stops the
    iteration: no new item starts, running items finish, then :class:`IterationFailedError`
    is raised.  ``fail_fast=False`` (default): every item is tried; at the end
    :class:`IterationFailedError` lists the failed item ids (capped at ``max_failed_ids``).
    A handler raising :class:`SkipItem` marks its item done without a result;
    :class:`NonRetryableItemError` fails it at once, without retries.

Progress checkpoint (what a retry skips)
    Items done are tracked as a *watermark* -- every local index below it is done -- plus
    a few ranges of indexes done out of order above it (:class:`CompletedItems`; local
    index = ``ordinal // shards``).  The checkpoint is saved in ``store`` (Airflow's
    ``task_state_store``, which survives task retries, unlike XComs that are cleared on a
    new try) every ``checkpoint_every`` completed items or ``checkpoint_interval`` seconds,
    whichever comes first, and when the runner ends (also on failure) -- never once per
    item.  A save starts as soon as ``checkpoint_every`` items completed (even while every
    slot is busy with a long item), and a due save is awaited before the next item starts,
    so the saved state is about ``checkpoint_every`` items behind at most when a worker
    dies.  The next try of
    the task skips every item of the checkpoint; a checkpoint of another ``generation``
    (the DAG run's ``clear_number``: the task was cleared), shard layout or ``source_key``
    is ignored and the iteration starts over.

Results
    With a ``sink`` (:class:`ResultSink`, e.g. the Kafka results stream), each result is
    handed to ``sink.put`` and the item counts as done only once its delivery is
    acknowledged, so the checkpoint never covers an item whose result was lost.  On start
    ``sink.open`` reports the items whose results it already holds beyond the checkpoint's
    position (delivered after the last save, before a worker died); they are skipped too.

Logging: one progress line every ``progress_every`` completed items or ``progress_interval``
seconds (done / failed / retrying / running / rate), never one per item; the first
``max_logged_failures`` item failures are logged one by one.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import heapq
import inspect
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from airflow_kafka_events.errors import AirflowKafkaEventsError, ConfigurationError, ValidationError

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_CHECKPOINT_KEY",
    "CompletedItems",
    "Item",
    "ItemInfo",
    "ItemTimeoutError",
    "IterationCheckpoint",
    "IterationError",
    "IterationFailedError",
    "IterationRunner",
    "IterationSummary",
    "NonRetryableItemError",
    "ResultDeliveryError",
    "ResultSink",
    "SinkOpening",
    "SkipItem",
    "SourceRestartedError",
    "TooManyAbandonedThreadsError",
    "local_index",
    "retry_delay",
    "shard_of",
]

log = logging.getLogger(__name__)

#: Version of the checkpoint JSON layout.
CHECKPOINT_FORMAT = 1
#: Task state store key of the checkpoint (the store is scoped to one task instance).
DEFAULT_CHECKPOINT_KEY = "iteration:progress"


# ====================================================================== errors
class IterationError(AirflowKafkaEventsError):
    """Base class of the iteration errors."""


class ItemTimeoutError(IterationError, TimeoutError):
    """One try of an item took longer than ``item_timeout``."""


class NonRetryableItemError(IterationError):
    """Raised by a handler (or a sink) to fail an item at once, without its retries."""


class SkipItem(IterationError):
    """Raised by a handler: the item is done, without a result."""


class ResultDeliveryError(IterationError):
    """A result could not be delivered to the sink: the task fails (its retry resumes)."""


class SourceRestartedError(IterationError):
    """The item source started over (e.g. a producer wrote a new stream attempt)."""


class TooManyAbandonedThreadsError(IterationError):
    """Too many sync items are still running after their ``item_timeout``."""


class IterationFailedError(IterationError):
    """Items failed for good; ``summary`` is the :class:`IterationSummary` of the run."""

    def __init__(self, message: str, summary: IterationSummary) -> None:
        super().__init__(message)
        self.summary = summary

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.summary))


class _InnerTimeout(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


# ====================================================================== items
@dataclass(frozen=True)
class Item:
    """One item of a source: ``ordinal`` (0-based, stable across tries) and ``value``."""

    ordinal: int
    value: Any


@dataclass(frozen=True)
class ItemInfo:
    """What an item's context copy says about the item (``context["iteration_item"]``).

    ``item_id``: the id used in logs, summaries and results; ``attempt``: 1-based try of
    the item within this task try; ``shard`` / ``shards``: the batch layout.
    """

    ordinal: int
    item_id: str
    attempt: int
    shard: int
    shards: int


def shard_of(ordinal: int, shards: int) -> int:
    """The shard (0 .. shards-1) that handles item ``ordinal``: ``ordinal % shards``."""
    return ordinal % shards


def local_index(ordinal: int, shards: int) -> int:
    """Position of item ``ordinal`` among the items of its shard: ``ordinal // shards``."""
    return ordinal // shards


def retry_delay(attempt: int, delay: float, backoff: float, max_delay: float | None) -> float:
    """Seconds before try ``attempt + 1`` of an item whose try ``attempt`` (1-based) failed."""
    seconds = delay * (backoff ** (attempt - 1))
    return seconds if max_delay is None else min(seconds, max_delay)


# ====================================================================== completed items
class CompletedItems:
    """Local indexes of completed items: a watermark plus ranges completed out of order.

    Every index below :attr:`watermark` is completed; :attr:`ranges` are the half-open
    ranges ``[start, end)`` completed above it (sorted, disjoint, never adjacent).  Items
    completing in order only move the watermark; a failed item leaves a gap, and what
    completes after it extends one range, so the state stays small.
    """

    __slots__ = ("_count", "_ends", "_starts", "watermark")

    def __init__(self, watermark: int = 0, ranges: Iterable[Iterable[int]] = ()) -> None:
        if isinstance(watermark, bool) or not isinstance(watermark, int) or watermark < 0:
            raise ValidationError(f"watermark must be an int >= 0, got {watermark!r}")
        self.watermark = watermark
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._count = watermark
        for start, end in ranges:
            self._append_range(int(start), int(end))

    def _append_range(self, start: int, end: int) -> None:
        if not start < end:
            raise ValidationError(f"a completed range must have start < end, got [{start}, {end})")
        if start < self.watermark or (self._ends and start <= self._ends[-1]):
            raise ValidationError(
                f"completed range [{start}, {end}) is not above the watermark and the ranges before it"
            )
        self._starts.append(start)
        self._ends.append(end)
        self._count += end - start
        self._lift()

    def _lift(self) -> None:
        while self._starts and self._starts[0] == self.watermark:
            self.watermark = self._ends[0]
            del self._starts[0]
            del self._ends[0]

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        if index < self.watermark:
            return index >= 0
        pos = bisect.bisect_right(self._starts, index) - 1
        return pos >= 0 and index < self._ends[pos]

    def __len__(self) -> int:
        return self._count

    @property
    def ranges(self) -> list[list[int]]:
        return [[s, e] for s, e in zip(self._starts, self._ends, strict=True)]

    def add(self, index: int) -> bool:
        """Mark ``index`` completed; ``False`` when it already was."""
        if index < self.watermark:
            return False
        if index == self.watermark:
            self.watermark += 1
            self._count += 1
            self._lift()
            return True
        starts, ends = self._starts, self._ends
        pos = bisect.bisect_right(starts, index)
        if pos > 0 and index < ends[pos - 1]:
            return False
        joins_left = pos > 0 and ends[pos - 1] == index
        joins_right = pos < len(starts) and starts[pos] == index + 1
        if joins_left and joins_right:
            ends[pos - 1] = ends[pos]
            del starts[pos]
            del ends[pos]
        elif joins_left:
            ends[pos - 1] = index + 1
        elif joins_right:
            starts[pos] = index
        else:
            starts.insert(pos, index)
            ends.insert(pos, index + 1)
        self._count += 1
        return True

    def to_json(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "ranges": self.ranges}

    @classmethod
    def from_json(cls, value: Any) -> CompletedItems:
        if not isinstance(value, Mapping):
            raise ValidationError(f"completed items are a JSON object, got {type(value).__qualname__}")
        ranges = value.get("ranges", [])
        if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) for r in ranges
        ):
            raise ValidationError(f"completed ranges must be [[start, end], ...], got {ranges!r}")
        return cls(value.get("watermark", 0), ranges)


# ====================================================================== checkpoint
@dataclass
class IterationCheckpoint:
    """What the task state store keeps between tries (``to_json`` / ``from_json``)."""

    generation: int
    source: str
    shard: int
    shards: int
    completed: CompletedItems = field(default_factory=CompletedItems)
    results: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "generation": self.generation,
            "source": self.source,
            "shard": self.shard,
            "shards": self.shards,
            **self.completed.to_json(),
            "results": self.results,
        }

    @classmethod
    def from_json(cls, value: Any) -> IterationCheckpoint:
        """Inverse of :meth:`to_json`; :class:`ValidationError` for anything else."""
        if not isinstance(value, Mapping):
            raise ValidationError(f"an iteration checkpoint is a JSON object, got {type(value).__qualname__}")
        if value.get("format") != CHECKPOINT_FORMAT:
            raise ValidationError(
                f"iteration checkpoint format {value.get('format')!r} is not supported "
                f"(this version reads {CHECKPOINT_FORMAT})"
            )
        try:
            generation, source, shard, shards = (
                value["generation"],
                value["source"],
                value["shard"],
                value["shards"],
            )
        except KeyError as exc:
            raise ValidationError(f"iteration checkpoint has no {exc.args[0]!r}") from exc
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (generation, shard, shards)):
            raise ValidationError("iteration checkpoint generation/shard/shards must be ints")
        if not isinstance(source, str):
            raise ValidationError("iteration checkpoint source must be a str")
        return cls(
            generation=generation,
            source=source,
            shard=shard,
            shards=shards,
            completed=CompletedItems.from_json(value),
            results=value.get("results"),
        )


# ====================================================================== results sink
@dataclass(frozen=True)
class SinkOpening:
    """What :meth:`ResultSink.open` found: ``recovered`` ordinals, or ``restarted``.

    ``recovered``: items whose results the sink already holds beyond the saved position
    (they are done).  ``restarted``: the sink starts over (e.g. a new stream attempt), so
    the checkpoint cannot be trusted and the iteration starts over too.
    """

    recovered: tuple[int, ...] = ()
    restarted: bool = False


class ResultSink(Protocol):
    """Where per-item results go.  Every method is called from the runner's thread.

    * ``open(saved, restart=...)`` once, before any item: ``saved`` is the sink state of
      the checkpoint (``None``: none), ``restart`` asks for a fresh start;
    * ``put(item, item_id, result)`` per succeeded item, in completion order: returns a
      ``concurrent.futures.Future`` resolved once the result is durable (``None``: it is
      already); raising :class:`NonRetryableItemError` fails the item (e.g. a result that
      cannot be encoded), anything else fails the task;
    * ``delivered(value)`` with the future's value once it resolved;
    * ``state()`` the JSON state stored with a checkpoint: it covers only delivered results
      (and so only items the checkpoint has as done).
    """

    def open(self, saved: Any, *, restart: bool) -> SinkOpening: ...

    def put(self, item: Item, item_id: str, result: Any) -> concurrent.futures.Future[Any] | None: ...

    def delivered(self, value: Any) -> None: ...

    def state(self) -> Any: ...


class _Store(Protocol):
    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


# ====================================================================== summary
@dataclass
class IterationSummary:
    """What one run of the runner did (``to_dict()`` is JSON; the task's XCom builds on it).

    ``items``: items of this shard seen in the source; ``succeeded``: done by any try
    (``succeeded_this_try`` by this one; ``skipped`` were done by earlier tries, of which
    ``recovered`` were found in the results sink past the checkpoint); ``failed``: failed
    for good (``failed_items``: their ids, at most ``max_failed_ids``); ``stopped_early``:
    ``fail_fast`` stopped the run before every item was tried; ``skipped_items``: items whose handler
    raised :class:`SkipItem`.
    """

    shard: int
    shards: int
    generation: int
    items: int = 0
    succeeded: int = 0
    succeeded_this_try: int = 0
    skipped: int = 0
    recovered: int = 0
    skipped_items: int = 0
    failed: int = 0
    failed_items: list[str] = field(default_factory=list)
    failed_items_truncated: bool = False
    item_retries: int = 0
    timed_out: int = 0
    abandoned_threads: int = 0
    stopped_early: bool = False
    checkpoints_saved: int = 0
    resumed: bool = False
    duration_seconds: float = 0.0
    items_per_second: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ====================================================================== worker threads
class _Job:
    __slots__ = ("abandoned", "args", "fn", "future", "loop")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.abandoned = False


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _ThreadRunner:
    """Runs sync item calls in daemon threads; a call past its timeout is abandoned.

    ``size`` threads serve the calls.  An abandoned thread (its call outlived
    ``item_timeout``) is replaced at once so capacity stays ``size``; it exits when its call
    returns.
    """

    def __init__(self, size: int, *, name: str = "iteration-item") -> None:
        self._size = size
        self._name = name
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # threads serving the queue (not abandoned)
        self._abandoned = 0  # abandoned calls still running
        self._counter = itertools.count(1)
        self._closed = False

    @property
    def abandoned(self) -> int:
        with self._lock:
            return self._abandoned

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self._name}-{next(self._counter)}", daemon=True)
        self._threads += 1
        thread.start()

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                value, ok = job.fn(*job.args), True
            except BaseException as exc:  # handed to the loop, which decides
                value, ok = exc, False
            with self._lock:
                abandoned = job.abandoned
                if abandoned:
                    self._abandoned -= 1
            if abandoned:
                return  # a replacement already serves the queue
            try:
                job.loop.call_soon_threadsafe(_settle, job.future, ok, value)
            except RuntimeError:  # the loop is closed: the runner is gone
                return

    async def run(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Any:
        job = _Job(fn, args, asyncio.get_running_loop())
        with self._lock:
            if self._closed:
                raise RuntimeError("the item thread pool is shut down")
            if self._threads < self._size:
                self._spawn()
        self._queue.put(job)
        if timeout is None:
            return await job.future
        done, _ = await asyncio.wait({job.future}, timeout=timeout)
        if done:
            return job.future.result()
        with self._lock:
            if not job.future.done():
                job.abandoned = True
                self._abandoned += 1
                self._threads -= 1
                self._spawn()  # keep the capacity; the abandoned thread exits when its call ends
        if job.abandoned:
            raise ItemTimeoutError(
                f"the item did not finish within item_timeout={timeout:g}s; its thread was "
                "abandoned (a thread cannot be killed: the call may still finish in the background)"
            )
        return job.future.result()  # pragma: no cover - finished right at the deadline

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, 0
        for _ in range(threads):
            self._queue.put(None)


# ====================================================================== the runner
@dataclass(order=True)
class _Retry:
    due: float
    seq: int
    work: _Work = field(compare=False)


@dataclass
class _Work:
    item: Item
    local: int
    item_id: str
    attempt: int = 1


def _positive(name: str, value: Any, *, allow_zero: bool = False, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        raise ConfigurationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def _count(name: str, value: Any, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
    return value


class IterationRunner:
    """Runs ``handler`` over items with bounded concurrency, retries, timeouts, checkpoints.

    See the module doc for the semantics of every option.  :meth:`run` consumes the
    items and returns an :class:`IterationSummary`, or raises :class:`IterationFailedError`
    (items failed), :class:`ResultDeliveryError`, :class:`TooManyAbandonedThreadsError`, or
    whatever the source raised.  A runner is used once.
    """

    #: Monotonic clock; replaceable for tests.
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(
        self,
        handler: Callable[[Any, dict[str, Any]], Any],
        *,
        concurrency: int = 1,
        item_retries: int = 0,
        item_retry_delay: float = 0.0,
        item_retry_backoff: float = 2.0,
        max_item_retry_delay: float | None = None,
        item_timeout: float | None = None,
        fail_fast: bool = False,
        shard: int = 0,
        shards: int = 1,
        store: _Store | None = None,
        checkpoint_key: str = DEFAULT_CHECKPOINT_KEY,
        generation: int = 0,
        source_key: str = "",
        checkpoint_every: int = 500,
        checkpoint_interval: float = 15.0,
        progress_every: int = 1000,
        progress_interval: float = 30.0,
        context: Mapping[str, Any] | None = None,
        context_key: str = "iteration_item",
        item_id: Callable[[Item], str] | None = None,
        sink: ResultSink | None = None,
        max_failed_ids: int = 100,
        max_abandoned_threads: int | None = None,
        max_logged_failures: int = 20,
        is_async: bool | None = None,
        logger: logging.Logger | Any = None,
    ) -> None:
        if not callable(handler):
            raise ConfigurationError(f"handler must be callable, got {handler!r}")
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler) if is_async is None else bool(is_async)
        self.concurrency = _count("concurrency", concurrency, low=1)
        self.item_retries = _count("item_retries", item_retries, low=0)
        self.item_retry_delay = _positive("item_retry_delay", item_retry_delay, allow_zero=True) or 0.0
        self.item_retry_backoff = _positive("item_retry_backoff", item_retry_backoff) or 1.0
        if self.item_retry_backoff < 1:
            raise ConfigurationError(f"item_retry_backoff must be >= 1, got {item_retry_backoff!r}")
        self.max_item_retry_delay = _positive(
            "max_item_retry_delay", max_item_retry_delay, allow_zero=True, optional=True
        )
        self.item_timeout = _positive("item_timeout", item_timeout, optional=True)
        self.fail_fast = bool(fail_fast)
        self.shards = _count("shards", shards, low=1)
        self.shard = _count("shard", shard, low=0)
        if self.shard >= self.shards:
            raise ConfigurationError(f"shard must be < shards ({self.shards}), got {shard!r}")
        self.store = store
        self.checkpoint_key = checkpoint_key
        self.generation = _count("generation", generation, low=0)
        self.source_key = source_key
        self.checkpoint_every = _count("checkpoint_every", checkpoint_every, low=1)
        self.checkpoint_interval = _positive("checkpoint_interval", checkpoint_interval) or 15.0
        self.progress_every = _count("progress_every", progress_every, low=1)
        self.progress_interval = _positive("progress_interval", progress_interval) or 30.0
        self.context = context
        self.context_key = context_key
        self.item_id = item_id
        self.sink = sink
        self.max_failed_ids = _count("max_failed_ids", max_failed_ids, low=0)
        self.max_abandoned_threads = _count(
            "max_abandoned_threads",
            max(4, self.concurrency) if max_abandoned_threads is None else max_abandoned_threads,
            low=0,
        )
        self.max_logged_failures = _count("max_logged_failures", max_logged_failures, low=0)
        self.log = logger if logger is not None else log

        self.summary = IterationSummary(shard=self.shard, shards=self.shards, generation=self.generation)
        self.completed = CompletedItems()
        self._sink_saved: Any = None
        self._used = False
        # run state (event loop thread only)
        self._retries: list[_Retry] = []
        self._retry_seq = itertools.count()
        self._running = 0
        self._deliveries = 0
        self._exhausted = False
        self._stopping = False
        self._fatal: BaseException | None = None
        self._first_failure: BaseException | None = None
        self._dirty = False
        self._since_save = 0
        self._last_save = 0.0
        self._started = 0.0
        self._last_progress_at = 0.0
        self._last_progress_count = 0
        self._failures_logged = 0
        self._pool: _ThreadRunner | None = None
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._change: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._source_lock: asyncio.Lock | None = None
        self._save_lock: asyncio.Lock | None = None
        self._save_task: asyncio.Future[None] | None = None
        self._sync_iter: Iterator[Item] | None = None
        self._async_iter: AsyncIterator[Item] | None = None

    # ------------------------------------------------------------------ checkpoint
    def _load(self) -> bool:
        """Load the checkpoint and open the sink; whether a previous try's progress is used."""
        restart = False
        checkpoint: IterationCheckpoint | None = None
        if self.store is not None:
            stored = self.store.get(self.checkpoint_key, None)
            if stored is not None:
                checkpoint = IterationCheckpoint.from_json(stored)
                if checkpoint.generation != self.generation:
                    self.log.info(
                        "iteration: the checkpoint is of generation %d, this task of generation %d "
                        "(it was cleared): starting over",
                        checkpoint.generation,
                        self.generation,
                    )
                    checkpoint = None
                elif (checkpoint.shard, checkpoint.shards, checkpoint.source) != (
                    self.shard,
                    self.shards,
                    self.source_key,
                ):
                    self.log.warning(
                        "iteration: the checkpoint is of shard %d/%d over %r, this run is shard %d/%d "
                        "over %r: starting over",
                        checkpoint.shard,
                        checkpoint.shards,
                        checkpoint.source,
                        self.shard,
                        self.shards,
                        self.source_key,
                    )
                    checkpoint = None
                    restart = True
        if checkpoint is not None:
            self.completed = checkpoint.completed
            self._sink_saved = checkpoint.results
        if self.sink is not None:
            opening = self.sink.open(self._sink_saved, restart=restart)
            if opening.restarted and checkpoint is not None:
                self.log.warning("iteration: the results sink starts over, so does the iteration")
                self.completed = CompletedItems()
                checkpoint = None
            self._sink_saved = self.sink.state()
            for ordinal in opening.recovered:
                if shard_of(ordinal, self.shards) == self.shard and self.completed.add(
                    local_index(ordinal, self.shards)
                ):
                    self.summary.recovered += 1
        resumed = len(self.completed) > 0
        if resumed:
            self.log.info(
                "iteration: resuming; %d item(s) done by earlier tries (watermark %d, %d range(s) above it, "
                "%d found in the results past the checkpoint)",
                len(self.completed),
                self.completed.watermark,
                len(self.completed.ranges),
                self.summary.recovered,
            )
        return resumed

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint JSON of the current state."""
        return IterationCheckpoint(
            generation=self.generation,
            source=self.source_key,
            shard=self.shard,
            shards=self.shards,
            completed=self.completed,
            results=self.sink.state() if self.sink is not None else None,
        ).to_json()

    def _store_set(self, value: dict[str, Any]) -> None:
        assert self.store is not None
        self.store.set(self.checkpoint_key, value)

    def _checkpoint_due(self, now: float) -> bool:
        return (
            self.store is not None
            and self._dirty
            and (
                self._since_save >= self.checkpoint_every or now - self._last_save >= self.checkpoint_interval
            )
        )

    async def _save(self) -> None:
        assert self._save_lock is not None and self._io is not None
        async with self._save_lock:
            if self.store is None or not self._dirty:
                return
            value = self.snapshot()
            self._dirty = False
            self._since_save = 0
            self._last_save = self.clock()
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self._store_set, value)
            except Exception as exc:  # losing a checkpoint only costs re-runs
                self._dirty = True
                self.log.warning("iteration: saving the checkpoint failed: %s", exc)
            else:
                self.summary.checkpoints_saved += 1

    def _save_soon(self) -> None:
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.ensure_future(self._save())

    # ------------------------------------------------------------------ items
    def _id_of(self, item: Item) -> str:
        if self.item_id is None:
            return str(item.ordinal)
        return str(self.item_id(item))

    def _context_for(self, work: _Work) -> dict[str, Any]:
        context = dict(self.context) if self.context is not None else {}
        context[self.context_key] = ItemInfo(
            ordinal=work.item.ordinal,
            item_id=work.item_id,
            attempt=work.attempt,
            shard=self.shard,
            shards=self.shards,
        )
        return context

    async def _pull(self) -> _Work | None:
        assert self._source_lock is not None
        async with self._source_lock:
            while not self._exhausted:
                try:
                    if self._sync_iter is not None:
                        item = next(self._sync_iter)
                    else:
                        assert self._async_iter is not None
                        item = await self._async_iter.__anext__()
                except (StopIteration, StopAsyncIteration):
                    self._exhausted = True
                    return None
                if self._stopping:
                    return None
                if not isinstance(item, Item):
                    raise ConfigurationError(f"an item source must yield Item objects, got {item!r}")
                if item.ordinal % self.shards != self.shard:
                    continue
                self.summary.items += 1
                local = item.ordinal // self.shards
                if local in self.completed:
                    self.summary.skipped += 1
                    continue
                return _Work(item=item, local=local, item_id=self._id_of(item))
            return None

    def _notify(self) -> None:
        assert self._change is not None
        self._change.set()
        self._change = asyncio.Event()

    async def _wait_change(self, timeout: float | None) -> None:
        assert self._change is not None
        event = self._change
        if timeout is None:
            await event.wait()
            return
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout))
        except asyncio.TimeoutError:
            pass

    async def _next_work(self) -> _Work | None:
        while True:
            if self._stopping or self._fatal is not None:
                return None
            now = self.clock()
            if self._retries and self._retries[0].due <= now:
                return heapq.heappop(self._retries).work
            if self._checkpoint_due(now):
                await self._save()
                continue
            if not self._exhausted:
                work = await self._pull()
                if work is not None:
                    return work
                continue
            if self._retries:
                await self._wait_change(self._retries[0].due - now)
            elif self._running > 0:
                await self._wait_change(None)
            else:
                return None

    async def _call(self, work: _Work) -> Any:
        context = self._context_for(work)
        if self.is_async:
            coroutine = self.handler(work.item.value, context)
            if self.item_timeout is None:
                return await coroutine
            try:
                return await asyncio.wait_for(_guard(coroutine), timeout=self.item_timeout)
            except asyncio.TimeoutError as exc:
                raise ItemTimeoutError(
                    f"the item did not finish within item_timeout={self.item_timeout:g}s (cancelled)"
                ) from exc
            except _InnerTimeout as inner:
                raise inner.error from None
        assert self._pool is not None
        return await self._pool.run(self.handler, (work.item.value, context), self.item_timeout)

    async def _worker(self) -> None:
        while True:
            work = await self._next_work()
            if work is None:
                return
            self._running += 1
            try:
                try:
                    result = await self._call(work)
                except asyncio.CancelledError:
                    raise
                except SkipItem:
                    self.summary.skipped_items += 1
                    self._complete(work)
                except Exception as exc:
                    self._failed(work, exc)
                else:
                    self._succeeded(work, result)
                self._check_abandoned()
            finally:
                self._running -= 1
                self._notify()

    def _check_abandoned(self) -> None:
        if self._pool is None:
            return
        abandoned = self._pool.abandoned
        self.summary.abandoned_threads = max(self.summary.abandoned_threads, abandoned)
        if abandoned > self.max_abandoned_threads and self._fatal is None:
            self._fatal = TooManyAbandonedThreadsError(
                f"{abandoned} sync item call(s) are still running after item_timeout "
                f"(max_abandoned_threads={self.max_abandoned_threads}): the items hang; failing the task"
            )

    def _succeeded(self, work: _Work, result: Any) -> None:
        if self.sink is None:
            self._complete(work)
            return
        try:
            future = self.sink.put(work.item, work.item_id, result)
        except NonRetryableItemError as exc:
            self._failed(work, exc)
            return
        except Exception as exc:
            self._fail_task(
                ResultDeliveryError(f"cannot hand the result of item {work.item_id} over: {exc}"), exc
            )
            return
        if future is None:
            self._complete(work)
            return
        self._deliveries += 1
        loop = asyncio.get_running_loop()

        def done(fut: concurrent.futures.Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(self._delivered, work, fut)
            except RuntimeError:  # the loop is closed
                pass

        future.add_done_callback(done)

    def _delivered(self, work: _Work, future: concurrent.futures.Future[Any]) -> None:
        self._deliveries -= 1
        try:
            value = future.result()
        except Exception as exc:
            self._fail_task(
                ResultDeliveryError(f"the result of item {work.item_id} was not delivered: {exc}"), exc
            )
        else:
            assert self.sink is not None
            self.sink.delivered(value)
            self._complete(work)
        if self._deliveries == 0 and self._idle is not None:
            self._idle.set()
        self._notify()

    def _fail_task(self, error: BaseException, cause: BaseException) -> None:
        if self._fatal is None:
            error.__cause__ = cause
            self._fatal = error
            self._stopping = True
        if self._idle is not None:
            self._idle.set()
        self._notify()

    def _complete(self, work: _Work) -> None:
        if self.completed.add(work.local):
            self.summary.succeeded_this_try += 1
            self._dirty = True
            self._since_save += 1
            done = self.summary.succeeded_this_try
            if done % self.progress_every == 0:
                self._progress()
            if self._since_save >= self.checkpoint_every and self.store is not None:
                self._save_soon()  # even while every slot is busy with a long item

    def _failed(self, work: _Work, exc: BaseException) -> None:
        if isinstance(exc, ItemTimeoutError):
            self.summary.timed_out += 1
        retry = (
            work.attempt <= self.item_retries
            and not isinstance(exc, NonRetryableItemError)
            and not self._stopping
        )
        if retry:
            delay = retry_delay(
                work.attempt, self.item_retry_delay, self.item_retry_backoff, self.max_item_retry_delay
            )
            self.summary.item_retries += 1
            self._log_failure(
                "iteration: item %s failed on try %d of %d (%s: %s); retrying in %.3gs",
                work.item_id,
                work.attempt,
                self.item_retries + 1,
                type(exc).__name__,
                exc,
                delay,
            )
            work.attempt += 1
            heapq.heappush(self._retries, _Retry(self.clock() + delay, next(self._retry_seq), work))
            return
        self.summary.failed += 1
        if self._first_failure is None:
            self._first_failure = exc
        if len(self.summary.failed_items) < self.max_failed_ids:
            self.summary.failed_items.append(work.item_id)
        else:
            self.summary.failed_items_truncated = True
        self._log_failure(
            "iteration: item %s failed for good after %d try(s): %s: %s",
            work.item_id,
            work.attempt,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        if self.fail_fast and not self._stopping:
            self._stopping = True
            self.summary.stopped_early = True
            self.log.error("iteration: fail_fast: item %s failed; starting no more items", work.item_id)

    def _log_failure(self, message: str, *args: Any, exc_info: BaseException | None = None) -> None:
        if self._failures_logged < self.max_logged_failures:
            self._failures_logged += 1
            self.log.warning(message, *args, exc_info=exc_info)
            if self._failures_logged == self.max_logged_failures:
                self.log.warning("iteration: not logging further item failures one by one")

    # ------------------------------------------------------------------ progress
    def _progress(self) -> None:
        now = self.clock()
        done = self.summary.succeeded_this_try
        window = now - self._last_progress_at
        rate = (done - self._last_progress_count) / window if window > 0 else 0.0
        self._last_progress_at = now
        self._last_progress_count = done
        self.log.info(
            "iteration: %d done (%d this try), %d failed, %d waiting to retry, %d running; %.1f items/s",
            len(self.completed),
            done,
            self.summary.failed,
            len(self._retries),
            self._running,
            rate,
        )

    async def _ticker(self) -> None:
        tick = max(0.01, min(self.checkpoint_interval, self.progress_interval) / 4)
        while True:
            await asyncio.sleep(tick)
            now = self.clock()
            if now - self._last_progress_at >= self.progress_interval:
                self._progress()
            if self._checkpoint_due(now):
                await self._save()

    # ------------------------------------------------------------------ main
    async def _main(self, items: Iterable[Item] | AsyncIterable[Item]) -> None:
        self._change = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._source_lock = asyncio.Lock()
        self._save_lock = asyncio.Lock()
        if isinstance(items, AsyncIterable):
            self._async_iter = items.__aiter__()
        else:
            self._sync_iter = iter(items)
        ticker = asyncio.ensure_future(self._ticker())
        workers = [asyncio.ensure_future(self._worker()) for _ in range(self.concurrency)]
        try:
            while True:
                done, _pending = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
                failed = [t for t in done if not t.cancelled() and t.exception() is not None]
                if failed:
                    error = failed[0].exception()
                    assert error is not None
                    self._stopping = True
                    self._notify()
                    await asyncio.gather(*workers, return_exceptions=True)
                    raise error
                if len(done) == len(workers):
                    break
            while self._deliveries and self._fatal is None:
                self._idle.clear()
                await self._idle.wait()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            if self._save_task is not None:
                await asyncio.gather(self._save_task, return_exceptions=True)
        if self._fatal is not None:
            raise self._fatal

    def run(self, items: Iterable[Item] | AsyncIterable[Item]) -> IterationSummary:
        """Handle every item not done by an earlier try; see the class doc for what it raises."""
        if self._used:
            raise RuntimeError("an IterationRunner runs once")
        self._used = True
        self.summary.resumed = self._load()
        self._started = self._last_save = self._last_progress_at = self.clock()
        environ = dict(os.environ)
        self._io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="iteration-checkpoint")
        if not self.is_async:
            self._pool = _ThreadRunner(self.concurrency)
        loop = asyncio.new_event_loop()
        error: BaseException | None = None
        try:
            loop.run_until_complete(self._main(items))
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                _cancel_all(loop)
            finally:
                loop.close()
                self._io.shutdown(wait=True)  # an in-flight save must not land after the final one
                if self._pool is not None:
                    self.summary.abandoned_threads = max(self.summary.abandoned_threads, self._pool.abandoned)
                    self._pool.shutdown()
                self._finish(environ, error)
        return self._conclude()

    def _finish(self, environ: dict[str, str], error: BaseException | None) -> None:
        elapsed = max(self.clock() - self._started, 1e-9)
        self.summary.succeeded = len(self.completed)
        self.summary.duration_seconds = round(elapsed, 3)
        self.summary.items_per_second = round(self.summary.succeeded_this_try / elapsed, 1)
        if self.store is not None:
            try:
                self._store_set(self.snapshot())
                self._dirty = False
                self.summary.checkpoints_saved += 1
            except Exception as exc:
                self.log.warning("iteration: saving the final checkpoint failed: %s", exc)
        if dict(os.environ) != environ:
            changed = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
            self.log.warning(
                "iteration: items changed os.environ (%s); it is shared by every item and thread: "
                "pass env= to subprocesses instead",
                ", ".join(changed[:10]),
            )
        self.log.info(
            "iteration%s: %d item(s) of this shard seen; %d done (%d this try, %d by earlier tries), "
            "%d failed, %d item retries, %d timed out; %.1f items/s%s",
            "" if self.shards == 1 else f" shard {self.shard}/{self.shards}",
            self.summary.items,
            self.summary.succeeded,
            self.summary.succeeded_this_try,
            self.summary.skipped,
            self.summary.failed,
            self.summary.item_retries,
            self.summary.timed_out,
            self.summary.items_per_second,
            "" if error is None else f"; stopped by {type(error).__name__}",
        )

    def _conclude(self) -> IterationSummary:
        summary = self.summary
        if summary.failed or summary.stopped_early:
            ids = ", ".join(summary.failed_items)
            more = " (and more)" if summary.failed_items_truncated else ""
            how = (
                "fail_fast stopped the iteration"
                if summary.stopped_early
                else f"{summary.succeeded} of {summary.items} item(s) succeeded"
            )
            raise IterationFailedError(
                f"{summary.failed} item(s) failed: {ids}{more}; {how}. The task's retry runs only the "
                "items that did not succeed",
                summary,
            ) from self._first_failure
        return summary


async def _guard(coroutine: Any) -> Any:
    """Await ``coroutine``; a ``TimeoutError`` it raises itself is told apart from ``wait_for``'s."""
    try:
        return await coroutine
    except (TimeoutError, asyncio.TimeoutError) as exc:
        raise _InnerTimeout(exc) from exc


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())

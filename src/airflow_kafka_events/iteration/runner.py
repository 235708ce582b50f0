"""The in-task iteration engine: run one callable over many items inside ONE task instance.

:class:`IterationRunner` is what ``@task.iterable`` runs on the worker.  It is pure Python
(no Airflow import), so every rule below is tested without Airflow services.

Items and shards
    The source is any iterable or async iterable of :class:`Item` (``ordinal``, ``value``),
    consumed lazily: items are never materialised as task instances (no ``max_map_length``
    cap) nor kept in memory once handled.  A runner with ``shards=n`` and ``shard=k``
    handles the items whose ``ordinal % n == k`` -- see
    :mod:`airflow_kafka_events.iteration.items`.

Sync and async handlers
    ``handler(value, context)`` is called once per try of an item with the item's value and
    the item's own shallow copy of ``context`` (with :class:`ItemInfo` under
    ``context_key``), so items never share a mutable context dict.  A coroutine function
    runs on the runner's event loop; a plain function runs in a worker thread.  At most
    ``concurrency`` items run at the same time.  The runner never writes ``os.environ``
    (shared by every thread); it warns when items changed it.

Per-item retries and timeouts
    A failing item is tried again up to ``item_retries`` more times, with backoff; the delay
    holds no concurrency slot.  ``item_timeout`` bounds one try: async items are
    cancelled, a sync item's thread is abandoned (threads cannot be killed) -- see
    :mod:`airflow_kafka_events.iteration.retries`.

Failure policy
    ``fail_fast=True``: the first item that fails for good (retries exhausted) stops the
    iteration: no new item starts, running items finish, then :class:`IterationFailedError`
    is raised.  ``fail_fast=False`` (default): every item is tried; at the end
    :class:`IterationFailedError` lists the failed item ids (capped at ``max_failed_ids``).
    A handler raising :class:`SkipItem` marks its item done without a result;
    :class:`NonRetryableItemError` fails it at once, without retries.

Progress checkpoint (what a retry skips)
    A watermark of the items done plus the ranges done out of order above it, saved in
    ``store`` every ``checkpoint_every`` items or ``checkpoint_interval`` seconds and when
    the runner ends; the next try skips every item of the checkpoint -- see
    :mod:`airflow_kafka_events.iteration.checkpoints`.

Results
    With a ``sink`` (:class:`ResultSink`, e.g. the Kafka results stream), each result is
    handed to ``sink.put`` and the item is done only once its delivery is acknowledged, so
    the checkpoint never covers an item whose result was lost.  On start ``sink.open``
    reports the items whose results it already holds past the checkpoint's position
    (delivered after the last save, before a worker died); they are skipped too.

Idle sources (stopping to wait elsewhere)
    When the source yields :data:`~airflow_kafka_events.iteration.items.SOURCE_IDLE` (a
    stream with nothing new for its idle interval) and nothing is in flight -- no item
    running, waiting for a retry or abandoned in a thread, every result delivered, no item
    failed for good -- the runner stops: the checkpoint is saved, the results sink is NOT
    ended, and :meth:`run` returns a summary with ``suspended`` set.  A later runner of the
    same try (``carried=`` that summary) goes on from the checkpoint.  Otherwise it pulls
    again.

Logging
    One progress line every ``progress_every`` completed items or ``progress_interval``
    seconds (done / failed / retrying / running / rate), never one per item; the first
    ``max_logged_failures`` item failures are logged one by one (:class:`RunLog`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.checkpoints import (
    DEFAULT_CHECKPOINT_KEY,
    CheckpointKeeper,
    CompletedItems,
    IterationCheckpoint,
    ProgressStore,
    usable_checkpoint,
)
from airflow_kafka_events.iteration.errors import (
    ItemTimeoutError,
    NonRetryableItemError,
    ResultDeliveryError,
    SkipItem,
    TooManyAbandonedThreadsError,
)
from airflow_kafka_events.iteration.items import Item, ItemSource, SourceIdle, Work, shard_of
from airflow_kafka_events.iteration.options import IterationOptions, count_option
from airflow_kafka_events.iteration.outcome import IterationSummary, ResultSink, conclude
from airflow_kafka_events.iteration.retries import ItemThreadPool, RetryQueue, await_with_timeout, retry_delay

__all__ = [
    "IterationRunner",
]

log = logging.getLogger(__name__)

#: What the source's iterator gives once it is exhausted (a sentinel of this module).
_END: Any = object()

#: The options of a runner given none (frozen: shared).
DEFAULT_OPTIONS = IterationOptions()


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
        options: IterationOptions = DEFAULT_OPTIONS,
        *,
        store: ProgressStore | None = None,
        checkpoint_key: str = DEFAULT_CHECKPOINT_KEY,
        generation: int = 0,
        source_key: str = "",
        context: Mapping[str, Any] | None = None,
        context_key: str = "iteration_item",
        sink: ResultSink | None = None,
        is_async: bool | None = None,
        logger: logging.Logger | Any = None,
        carried: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(handler):
            raise ConfigurationError(f"handler must be callable, got {handler!r}")
        if not isinstance(options, IterationOptions):
            raise ConfigurationError(f"options must be an IterationOptions, got {type(options).__qualname__}")
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler) if is_async is None else bool(is_async)
        self.options = options
        self.generation = count_option("generation", generation, low=0)
        self.source_key = source_key
        self.context = context
        self.context_key = context_key
        self.sink = sink
        self.log = logger if logger is not None else log

        self.summary = IterationSummary.continuing(
            carried,
            shard=self.options.shard.shard,
            shards=self.options.shard.shards,
            generation=self.generation,
        )
        self.completed = CompletedItems()
        self._checkpoints = CheckpointKeeper(
            store,
            checkpoint_key,
            self.snapshot,
            self.summary,
            every=self.options.checkpoint.checkpoint_every,
            interval=self.options.checkpoint.checkpoint_interval,
            clock=lambda: self.clock(),
            logger=self.log,
        )
        self._report = RunLog(self.log, max_logged_failures=self.options.report.max_logged_failures)
        self._used = False
        # run state (event loop thread only)
        self._retries: RetryQueue[Work] = RetryQueue()
        self._running = 0
        self._undelivered = 0  # results handed to the sink, their delivery not reported yet
        self._stopping = False
        self._fatal: BaseException | None = None
        self._first_failure: BaseException | None = None
        self._started = 0.0
        self._pool: ItemThreadPool | None = None
        self._change: asyncio.Event | None = None
        # the source's iterator (one of them), pulled by one worker at a time
        self._sync_items: Iterator[Item] | None = None
        self._async_items: AsyncIterator[Item | SourceIdle] | None = None
        self._pulling = asyncio.Lock()
        self._exhausted = False

    # ------------------------------------------------------------------ checkpoint
    def _load(self) -> bool:
        """Load the checkpoint and open the sink; whether a previous try's progress is used."""
        checkpoint, restart = usable_checkpoint(
            self._checkpoints.load(),
            generation=self.generation,
            shard=self.options.shard.shard,
            shards=self.options.shard.shards,
            source_key=self.source_key,
            logger=self.log,
        )
        if checkpoint is not None:
            self.completed = checkpoint.completed
        if self.sink is not None:
            self._open_sink(None if checkpoint is None else checkpoint.results, checkpoint, restart)
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

    def _open_sink(self, saved: Any, checkpoint: IterationCheckpoint | None, restart: bool) -> None:
        """Open the sink; count the items it holds past the checkpoint as done."""
        assert self.sink is not None
        opening = self.sink.open(saved, restart=restart)
        if opening.restarted and checkpoint is not None:
            self.log.warning("iteration: the results sink starts over, so does the iteration")
            self.completed = CompletedItems()
        shard, shards = self.options.shard.shard, self.options.shard.shards
        for ordinal in opening.recovered:
            if shard_of(ordinal, shards) == shard and self.completed.add(ordinal // shards):
                self.summary.recovered += 1

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint JSON of the current state."""
        return IterationCheckpoint(
            generation=self.generation,
            source=self.source_key,
            shard=self.options.shard.shard,
            shards=self.options.shard.shards,
            completed=self.completed,
            results=self.sink.state() if self.sink is not None else None,
        ).to_json()

    # ------------------------------------------------------------------ items
    def _id_of(self, item: Item) -> str:
        return str(item.ordinal if self.options.item_id is None else self.options.item_id(item))

    async def _next_of_shard(self) -> Work | SourceIdle | None:
        """The source's next item of this shard not done yet (the others count in the summary as
        seen and skipped), :data:`SOURCE_IDLE`, or ``None``: exhausted, or stopping."""
        async with self._pulling:
            while not self._exhausted:
                if self._sync_items is not None:
                    item = next(self._sync_items, _END)
                else:
                    assert self._async_items is not None
                    item = await anext(self._async_items, _END)
                self._exhausted = item is _END
                if self._exhausted or self._stopping:
                    return None
                if isinstance(item, SourceIdle):
                    return item
                if not isinstance(item, Item):
                    raise ConfigurationError(f"an item source must yield Item objects, got {item!r}")
                shard, shards = self.options.shard.shard, self.options.shard.shards
                if shard_of(item.ordinal, shards) != shard:
                    continue
                self.summary.items += 1
                if item.ordinal // shards in self.completed:
                    self.summary.skipped += 1
                    continue
                return Work(item=item, local=item.ordinal // shards, item_id=self._id_of(item))
            return None

    async def _pull(self) -> Work | None:
        work = await self._next_of_shard()
        if isinstance(work, SourceIdle):
            if self.in_flight() == 0 and not self.summary.failed and self._fatal is None:
                self.summary.suspended = self._stopping = True
                self.log.info("iteration: the source is idle and nothing is in flight; stopping to wait")
            return None
        return work

    def in_flight(self) -> int:
        """Items running, waiting for a retry or abandoned in a thread, plus undelivered results."""
        abandoned = 0 if self._pool is None else self._pool.abandoned
        return self._running + len(self._retries) + self._undelivered + abandoned

    def _notify(self) -> None:
        assert self._change is not None
        self._change.set()
        self._change = asyncio.Event()

    async def _wait_change(self, timeout: float | None) -> None:
        assert self._change is not None
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(None if timeout is None else max(0.0, timeout)):
                await self._change.wait()

    async def _next_work(self) -> Work | None:
        while True:
            if self._stopping or self._fatal is not None:
                return None
            now = self.clock()
            retry = self._retries.pop_due(now)
            if retry is not None:
                return retry
            if self._checkpoints.due(now):
                await self._checkpoints.save()
                continue
            if not self._exhausted:
                work = await self._pull()
                if work is not None:
                    return work
                continue
            due = self._retries.next_due()
            if due is not None:
                await self._wait_change(due - now)
            elif self._running > 0:
                await self._wait_change(None)
            else:
                return None

    async def _call(self, work: Work) -> Any:
        """One try of ``work``: the handler gets the item's value and its own copy of the context."""
        context = dict(self.context) if self.context is not None else {}
        context[self.context_key] = work.info(self.options.shard.shard, self.options.shard.shards)
        if self.is_async:
            return await await_with_timeout(
                self.handler(work.item.value, context), self.options.retry.item_timeout
            )
        assert self._pool is not None
        return await self._pool.run(self.handler, (work.item.value, context), self.options.retry.item_timeout)

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
        most = self.options.max_abandoned_threads
        if self._fatal is None and abandoned > most:
            self._fatal = TooManyAbandonedThreadsError(
                f"{abandoned} sync item call(s) are still running after item_timeout "
                f"(max_abandoned_threads={most}): the items hang; failing the task"
            )

    # ------------------------------------------------------------------ outcomes
    def _succeeded(self, work: Work, result: Any) -> None:
        """Complete ``work``, or hand its result to the sink: it completes once the result is durable."""
        if self.sink is None:
            self._complete(work)
            return
        try:
            future = self.sink.put(work.item, work.item_id, result)
        except NonRetryableItemError as exc:  # the sink refuses this result: the item fails
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
        self._undelivered += 1
        loop = asyncio.get_running_loop()

        def reported(fut: concurrent.futures.Future[Any]) -> None:  # on the producer's thread
            try:
                loop.call_soon_threadsafe(self._delivered, work, fut)
            except RuntimeError:  # the loop is closed
                pass

        future.add_done_callback(reported)

    def _delivered(self, work: Work, future: concurrent.futures.Future[Any]) -> None:
        assert self.sink is not None
        self._undelivered -= 1
        try:
            value = future.result()
        except Exception as exc:
            error = ResultDeliveryError(f"the result of item {work.item_id} was not delivered: {exc}")
            self._fail_task(error, exc)
        else:
            self.sink.delivered(value)
            self._complete(work)
        self._notify()

    def _fail_task(self, error: BaseException, cause: BaseException) -> None:
        if self._fatal is None:
            error.__cause__ = cause
            self._fatal = error
            self._stopping = True
        self._notify()

    def _complete(self, work: Work) -> None:
        if self.completed.add(work.local):
            self.summary.succeeded_this_try += 1
            if self.summary.succeeded_this_try % self.options.report.progress_every == 0:
                self._progress()
            self._checkpoints.completed()

    # ------------------------------------------------------------------ failures
    def _failed(self, work: Work, exc: BaseException) -> None:
        if isinstance(exc, ItemTimeoutError):
            self.summary.timed_out += 1
        retry = (
            work.attempt <= self.options.retry.item_retries
            and not isinstance(exc, NonRetryableItemError)
            and not self._stopping
        )
        if retry:
            self._retry(work, exc)
        else:
            self._failed_for_good(work, exc)

    def _retry(self, work: Work, exc: BaseException) -> None:
        delay = retry_delay(
            work.attempt,
            self.options.retry.item_retry_delay,
            self.options.retry.item_retry_backoff,
            self.options.retry.max_item_retry_delay,
        )
        self.summary.item_retries += 1
        self._report.failure(
            "iteration: item %s failed on try %d of %d (%s: %s); retrying in %.3gs",
            work.item_id,
            work.attempt,
            self.options.retry.item_retries + 1,
            type(exc).__name__,
            exc,
            delay,
        )
        work.attempt += 1
        self._retries.push(self.clock() + delay, work)

    def _failed_for_good(self, work: Work, exc: BaseException) -> None:
        self.summary.failed += 1
        if self._first_failure is None:
            self._first_failure = exc
        if len(self.summary.failed_items) < self.options.report.max_failed_ids:
            self.summary.failed_items.append(work.item_id)
        else:
            self.summary.failed_items_truncated = True
        self._report.failure(
            "iteration: item %s failed for good after %d try(s): %s: %s",
            work.item_id,
            work.attempt,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        if self.options.retry.fail_fast and not self._stopping:
            self._stopping = True
            self.summary.stopped_early = True
            self.log.error("iteration: fail_fast: item %s failed; starting no more items", work.item_id)

    # ------------------------------------------------------------------ progress
    def _progress(self) -> None:
        self._report.progress(
            self.clock(), self.summary, len(self.completed), len(self._retries), self._running
        )

    async def _ticker(self) -> None:
        tick = max(
            0.01, min(self.options.checkpoint.checkpoint_interval, self.options.report.progress_interval) / 4
        )
        while True:
            await asyncio.sleep(tick)
            now = self.clock()
            if now - self._report.last_progress_at >= self.options.report.progress_interval:
                self._progress()
            if self._checkpoints.due(now):
                await self._checkpoints.save()

    # ------------------------------------------------------------------ main
    async def _await_workers(self, workers: list[asyncio.Task[None]]) -> None:
        """Wait for every worker; the first one that raised stops the others, then propagates."""
        # FIRST_EXCEPTION returns once one raised, else once all finished (a cancelled one raised nothing)
        done, _pending = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            error = failed[0].exception()
            assert error is not None
            self._stopping = True
            self._notify()
            await asyncio.gather(*workers, return_exceptions=True)
            raise error

    async def _main(self, items: ItemSource) -> None:
        self._change = asyncio.Event()
        if isinstance(items, AsyncIterable):
            self._async_items = aiter(items)
        else:
            self._sync_items = iter(items)
        ticker = asyncio.ensure_future(self._ticker())
        workers = [asyncio.ensure_future(self._worker()) for _ in range(self.options.shard.concurrency)]
        try:
            await self._await_workers(workers)
            while self._undelivered and self._fatal is None:
                await self._wait_change(None)
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            await self._checkpoints.settle()
        if self._fatal is not None:
            raise self._fatal

    def run(self, items: ItemSource) -> IterationSummary:
        """Handle every item not done by an earlier try; see the class doc for what it raises."""
        if self._used:
            raise RuntimeError("an IterationRunner runs once")
        self._used = True
        self.summary.resumed = self._load() or self.summary.resumed
        self._started = self._report.last_progress_at = self.clock()
        environ = dict(os.environ)
        self._checkpoints.open()
        if not self.is_async:
            self._pool = ItemThreadPool(self.options.shard.concurrency)
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
                self._checkpoints.close()  # an in-flight save must not land after the final one
                if self._pool is not None:
                    self.summary.abandoned_threads = max(self.summary.abandoned_threads, self._pool.abandoned)
                    self._pool.shutdown()
                self._finish(environ, error)
        return conclude(self.summary, self._first_failure)

    def _finish(self, environ: dict[str, str], error: BaseException | None) -> None:
        elapsed = max(self.clock() - self._started, 1e-9)
        self.summary.succeeded = len(self.completed)
        self.summary.duration_seconds = elapsed = round(self.summary.duration_seconds + elapsed, 3)
        self.summary.items_per_second = round(self.summary.succeeded_this_try / max(elapsed, 1e-9), 1)
        self._checkpoints.final()
        self._report.environ(environ)
        self._report.end(self.summary, error)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


class RunLog:
    """The log lines of one run (see the module doc, *Logging*)."""

    def __init__(self, logger: logging.Logger | Any, *, max_logged_failures: int) -> None:
        self.log = logger
        self.max_logged_failures = max_logged_failures
        self.failures_logged = 0
        self.last_progress_at = 0.0
        self.last_progress_count = 0

    def failure(self, message: str, *args: Any, exc_info: BaseException | None = None) -> None:
        """Log an item failure, unless ``max_logged_failures`` were logged already."""
        if self.failures_logged < self.max_logged_failures:
            self.failures_logged += 1
            self.log.warning(message, *args, exc_info=exc_info)
            if self.failures_logged == self.max_logged_failures:
                self.log.warning("iteration: not logging further item failures one by one")

    def progress(self, now: float, summary: IterationSummary, done: int, retrying: int, running: int) -> None:
        """One progress line: ``done`` items in all, the rate since the last line."""
        this_try = summary.succeeded_this_try
        window = now - self.last_progress_at
        rate = (this_try - self.last_progress_count) / window if window > 0 else 0.0
        self.last_progress_at = now
        self.last_progress_count = this_try
        self.log.info(
            "iteration: %d done (%d this try), %d failed, %d waiting to retry, %d running; %.1f items/s",
            done,
            this_try,
            summary.failed,
            retrying,
            running,
            rate,
        )

    def environ(self, before: Mapping[str, str]) -> None:
        """Warn when items changed ``os.environ`` (shared by every item and thread)."""
        if dict(os.environ) != before:
            changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
            self.log.warning(
                "iteration: items changed os.environ (%s); it is shared by every item and thread: "
                "pass env= to subprocesses instead",
                ", ".join(changed[:10]),
            )

    def end(self, summary: IterationSummary, error: BaseException | None) -> None:
        """The run's last line."""
        self.log.info(
            "iteration%s: %d item(s) of this shard seen; %d done (%d this try, %d by earlier tries), "
            "%d failed, %d item retries, %d timed out; %.1f items/s%s",
            "" if summary.shards == 1 else f" shard {summary.shard}/{summary.shards}",
            summary.items,
            summary.succeeded,
            summary.succeeded_this_try,
            summary.skipped,
            summary.failed,
            summary.item_retries,
            summary.timed_out,
            summary.items_per_second,
            "" if error is None else f"; stopped by {type(error).__name__}",
        )

"""Per-item retries and timeouts.

A failing item is tried again up to ``item_retries`` more times, after
``item_retry_delay * item_retry_backoff ** (attempt - 1)`` seconds (at most
``max_item_retry_delay``; :func:`retry_delay`).  The delay does not hold a concurrency
slot: the item waits in a :class:`RetryQueue` while other items run.  ``item_timeout``
bounds one try of an item:

* async items are cancelled with ``asyncio.timeout`` (:func:`await_with_timeout`);
* sync items run in worker threads, which Python cannot kill.  At the timeout the item
  fails with :class:`~airflow_kafka_events.iteration.errors.ItemTimeoutError` (and may be
  retried) and its thread is ABANDONED: a new thread takes its slot, and the old call keeps
  running to its end in the background, its result ignored
  (:class:`ItemThreadPool`).  Its side effects may
  therefore still happen, even after a retry of the item started.  More than
  ``max_abandoned_threads`` calls still running after their timeout fail the task
  (:class:`~airflow_kafka_events.iteration.errors.TooManyAbandonedThreadsError`): hung calls
  do not pile up for ever.

The task's own ``execution_timeout`` still bounds the whole task.

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from airflow_kafka_events.iteration.errors import ItemTimeoutError

__all__ = [
    "ItemThreadPool",
    "RetryQueue",
    "await_with_timeout",
    "retry_delay",
    "settle",
]

W = TypeVar("W")


def retry_delay(attempt: int, delay: float, backoff: float, max_delay: float | None) -> float:
    """Seconds before try ``attempt + 1`` of an item whose try ``attempt`` (1-based) failed."""
    seconds = delay * (backoff ** (attempt - 1))
    return seconds if max_delay is None else min(seconds, max_delay)


@dataclass(order=True)
class _Retry(Generic[W]):
    due: float
    seq: int
    work: W = field(compare=False)


class RetryQueue(Generic[W]):
    """Work waiting to be tried again, earliest ``due`` first (ties: first pushed first)."""

    def __init__(self) -> None:
        self._heap: list[_Retry[W]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: float, work: W) -> None:
        heapq.heappush(self._heap, _Retry(due, next(self._seq), work))

    def next_due(self) -> float | None:
        """When the earliest retry is due; ``None`` when nothing waits."""
        return self._heap[0].due if self._heap else None

    def pop_due(self, now: float) -> W | None:
        """The earliest work due at ``now``, removed; ``None`` when none is due yet."""
        if self._heap and self._heap[0].due <= now:
            return heapq.heappop(self._heap).work
        return None


async def await_with_timeout(coroutine: Awaitable[Any], timeout: float | None) -> Any:
    """Await ``coroutine``, cancelled after ``timeout`` seconds with :class:`ItemTimeoutError`.

    A ``TimeoutError`` raised by the coroutine itself propagates as it is.
    """
    if timeout is None:
        return await coroutine
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await coroutine
    except TimeoutError as exc:
        if not scope.expired():
            raise  # the coroutine's own
        raise ItemTimeoutError(
            f"the item did not finish within item_timeout={timeout:g}s (cancelled)"
        ) from exc


# ====================================================================== sync items
@dataclass(slots=True)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    abandoned: bool = False


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Resolve ``future`` with ``value`` (a result when ``ok``, else an exception) unless it is done."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class ItemThreadPool:
    """Runs sync item calls in ``size`` daemon threads; a call past its timeout is abandoned:
    its thread is replaced at once (capacity stays ``size``) and exits when its call returns."""

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
                job.loop.call_soon_threadsafe(settle, job.future, ok, value)
            except RuntimeError:  # the loop is closed: the runner is gone
                return

    async def run(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Any:
        loop = asyncio.get_running_loop()
        job = _Job(fn, args, loop, loop.create_future())
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

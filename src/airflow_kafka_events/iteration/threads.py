"""Worker threads of sync items; a call that outlives ``item_timeout`` is abandoned.

Python cannot kill a thread.  At the timeout the item fails with
:class:`~airflow_kafka_events.iteration.errors.ItemTimeoutError` and its thread is
ABANDONED: a new thread takes its slot, and the old call keeps running to its end in the
background, its result ignored (:class:`ItemThreadPool`).

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_kafka_events.iteration.errors import ItemTimeoutError

__all__ = [
    "ItemThreadPool",
    "settle",
]


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

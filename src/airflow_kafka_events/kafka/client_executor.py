"""One thread per Kafka client, for the blocking calls made from an asyncio loop.

librdkafka's ``poll`` / ``commit`` / ``seek`` / ``close`` block.  Wrapping them in
``asgiref.sync_to_async`` (default ``thread_sensitive=True``) runs every such call of a whole
process on ONE shared thread: in a triggerer, one idle consumer's ``poll(1.0)`` then delays
every other consumer (measured: 0.34 records/s for the busy one with three idle ones).
``loop.run_in_executor(None, ...)`` is no better: the default pool is small, shared with
``asyncio.to_thread``, and lets two calls of one consumer overlap.

:class:`ClientExecutor` gives one client its own single thread: its calls run in order, never
two at once, and never wait behind another client.  A cancelled ``await`` does not interrupt a
call already running on the thread; the next call simply queues behind it (so ``close`` after
a cancelled ``poll`` is safe).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["ClientExecutor"]


class ClientExecutor:
    """A single-thread executor owned by one Kafka client."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kafka-client-{name}")
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on this client's thread and await its result."""
        if self._closed:
            raise RuntimeError(f"client executor {self.name!r} is shut down")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        """Stop accepting calls; the thread ends after the call it is running. Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=False)

    @property
    def closed(self) -> bool:
        return self._closed

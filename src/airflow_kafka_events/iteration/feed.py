"""Pulling the items of one shard from a source, and a source that went idle.

:class:`ItemFeed` reads a source (an iterable or async iterable of
:class:`~airflow_kafka_events.iteration.items.Item`) for the runner: it keeps the items of
its shard, skips those the checkpoint has as done (counting both in the summary) and turns
them into :class:`~airflow_kafka_events.iteration.items.Work`.  One worker pulls at a time.

A source that may have nothing to give for a while (a stream whose producer pauses) yields
:data:`SOURCE_IDLE` when nothing came for its idle interval and reads on when pulled again;
the feed hands the marker to the runner (its module doc, *Idle sources*, says what it does).

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Final

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.checkpoints import CompletedItems
from airflow_kafka_events.iteration.items import Item, Work
from airflow_kafka_events.iteration.outcome import IterationSummary

__all__ = [
    "SOURCE_IDLE",
    "ItemFeed",
    "ItemSource",
    "SourceIdle",
]


class SourceIdle:
    """The type of :data:`SOURCE_IDLE` (one instance)."""

    def __repr__(self) -> str:
        return "SOURCE_IDLE"


#: What a source yields when nothing came for its idle interval (it reads on when pulled again).
SOURCE_IDLE: Final = SourceIdle()


#: What a source's iterator gives once it is exhausted (a sentinel of this module).
_END: Final = object()

#: What a runner iterates: items, or (async) items and :data:`SOURCE_IDLE` markers.
ItemSource = Iterable[Item] | AsyncIterable[Item | SourceIdle]


class ItemFeed:
    """The items of shard ``shard`` of ``shards`` in ``items`` not in ``completed``, as work."""

    def __init__(
        self,
        items: ItemSource,
        *,
        shard: int,
        shards: int,
        completed: CompletedItems,
        summary: IterationSummary,
        item_id: Callable[[Item], str],
    ) -> None:
        self.shard = shard
        self.shards = shards
        self.completed = completed
        self.summary = summary
        self.item_id = item_id
        self.exhausted = False
        self._lock = asyncio.Lock()
        self._sync_iter: Iterator[Any] | None = None
        self._async_iter: AsyncIterator[Any] | None = None
        if isinstance(items, AsyncIterable):
            self._async_iter = items.__aiter__()
        else:
            self._sync_iter = iter(items)

    async def pull(self, stopping: Callable[[], bool]) -> Work | SourceIdle | None:
        """The next item to handle, :data:`SOURCE_IDLE`, or ``None`` (exhausted, or ``stopping()``)."""
        async with self._lock:
            while not self.exhausted:
                if self._sync_iter is not None:
                    item = next(self._sync_iter, _END)
                else:
                    assert self._async_iter is not None
                    item = await anext(self._async_iter, _END)
                self.exhausted = item is _END
                if self.exhausted or stopping():
                    return None
                if item is SOURCE_IDLE:
                    return SOURCE_IDLE
                if not isinstance(item, Item):
                    raise ConfigurationError(f"an item source must yield Item objects, got {item!r}")
                if item.ordinal % self.shards != self.shard:
                    continue
                self.summary.items += 1
                local = item.ordinal // self.shards
                if local in self.completed:
                    self.summary.skipped += 1
                    continue
                return Work(item=item, local=local, item_id=self.item_id(item))
            return None

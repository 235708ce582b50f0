"""Items of an iteration and how shards split them.

An item is an :class:`Item`: its ``ordinal`` (0-based position in its source, stable
across tries) and its ``value`` (what the handler gets).  A runner with ``shards=n`` and
``shard=k`` handles the items whose ``ordinal % n == k`` (:func:`shard_of`); among them an
item's *local index* is ``ordinal // n``, which the progress checkpoint records.
``batch(size=n)`` runs n task instances over the same source, one per shard: each item is
handled by exactly one of them, none twice, none skipped, whatever the order or the timing
of the instances.  (A Kafka consumer group cannot split a stream: a
stream is keyed by its ``trigger_run_id`` and so lives in ONE partition, which a group
hands to one member only.)

A source that may have nothing to give for a while (a stream whose producer pauses) yields
:data:`SOURCE_IDLE` when nothing came for its idle interval and reads on when pulled again
(what the runner does then: :mod:`~airflow_kafka_events.iteration.runner`, *Idle sources*).

This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["SOURCE_IDLE", "Item", "ItemInfo", "ItemSource", "SourceIdle", "Work", "shard_of"]


@dataclass(frozen=True)
class Item:
    """One item of a source: ``ordinal`` (0-based, stable across tries) and ``value``."""

    ordinal: int
    value: Any


class SourceIdle:
    """The type of :data:`SOURCE_IDLE` (one instance)."""

    def __repr__(self) -> str:
        return "SOURCE_IDLE"


#: What a source yields when nothing came for its idle interval (it reads on when pulled again).
SOURCE_IDLE: Final = SourceIdle()

#: What a runner iterates: items, or (async) items and :data:`SOURCE_IDLE` markers.
ItemSource = Iterable[Item] | AsyncIterable[Item | SourceIdle]


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


@dataclass
class Work:
    """An item of this shard being handled: its ``local`` index, id and current ``attempt``."""

    item: Item
    local: int
    item_id: str
    attempt: int = 1

    def info(self, shard: int, shards: int) -> ItemInfo:
        """The :class:`ItemInfo` of the current try."""
        return ItemInfo(
            ordinal=self.item.ordinal, item_id=self.item_id, attempt=self.attempt, shard=shard, shards=shards
        )

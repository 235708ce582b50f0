"""Task iteration (AIP-104 semantics) over lists and streams: ``@task.iterable``.

One task instance runs a function over many items -- an upstream list, or the pages of
another task's stream read while that task is still paging -- with bounded in-task
concurrency, per-item retries and timeouts, a progress checkpoint in the task state store
(a retry runs only the items not done yet), per-item results in a Kafka results stream
and a bounded summary as XCom.  ``batch(size=n)`` spreads the items over n task
instances.

* :mod:`~airflow_kafka_events.iteration.runner` -- the engine (no Airflow import):
  :class:`IterationRunner` (scheduling, concurrency, failure policy) over its parts
  :mod:`~airflow_kafka_events.iteration.items` (items, shards),
  :mod:`~airflow_kafka_events.iteration.retries` (per-item retries and timeouts),
  :mod:`~airflow_kafka_events.iteration.checkpoints` (:class:`CompletedItems`, the
  progress checkpoint), :mod:`~airflow_kafka_events.iteration.outcome` (result sink,
  summary) and :mod:`~airflow_kafka_events.iteration.errors`;
* :mod:`~airflow_kafka_events.iteration.sources` -- :func:`from_stream`, :func:`results_of`,
  :class:`StreamItems`;
* :mod:`~airflow_kafka_events.iteration.operator` -- :class:`IterableOperator`;
* :mod:`~airflow_kafka_events.iteration.decorator` -- :func:`iterable_task`
  (``@task.iterable``);
* :mod:`~airflow_kafka_events.iteration.results` -- the results stream writer.

Importing this package imports no Airflow module; the Airflow-aware names are loaded on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.iteration.checkpoints import CompletedItems
from airflow_kafka_events.iteration.errors import (
    ItemTimeoutError,
    IterationFailedError,
    NonRetryableItemError,
    SkipItem,
    SourceRestartedError,
    TooManyAbandonedThreadsError,
)
from airflow_kafka_events.iteration.items import Item, ItemInfo, shard_of
from airflow_kafka_events.iteration.outcome import IterationSummary
from airflow_kafka_events.iteration.runner import IterationRunner
from airflow_kafka_events.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from airflow_kafka_events.iteration.decorator import iterable_task
    from airflow_kafka_events.iteration.operator import IterableOperator
    from airflow_kafka_events.iteration.sources import StreamItems, from_stream, results_of

__all__ = [
    "CompletedItems",
    "Item",
    "ItemInfo",
    "ItemTimeoutError",
    "IterableOperator",
    "IterationFailedError",
    "IterationRunner",
    "IterationSummary",
    "NonRetryableItemError",
    "SkipItem",
    "SourceRestartedError",
    "StreamItems",
    "TooManyAbandonedThreadsError",
    "from_stream",
    "iterable_task",
    "results_of",
    "shard_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "iterable_task": "airflow_kafka_events.iteration.decorator",
        "IterableOperator": "airflow_kafka_events.iteration.operator",
        "StreamItems": "airflow_kafka_events.iteration.sources",
        "from_stream": "airflow_kafka_events.iteration.sources",
        "results_of": "airflow_kafka_events.iteration.sources",
    },
    globals(),
)

"""What an iteration produces: per-item results handed to a :class:`ResultSink`, and its summary.

:class:`IterationSummary` counts what one run did; :func:`conclude` returns it, or raises
:class:`~airflow_kafka_events.iteration.errors.IterationFailedError` when items failed for
good (or ``fail_fast`` stopped the run).

This module imports no Airflow module.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from airflow_kafka_events.iteration.errors import IterationFailedError
from airflow_kafka_events.iteration.items import Item

__all__ = [
    "IterationSummary",
    "ResultSink",
    "SinkOpening",
    "conclude",
]


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


# ====================================================================== summary
@dataclass
class IterationSummary:
    """What one run of the runner did (``to_dict()`` is JSON; the task's XCom builds on it).

    ``items``: items of this shard seen in the source; ``succeeded``: done by any try
    (``succeeded_this_try`` by this one; ``skipped`` were done by earlier tries, of which
    ``recovered`` were found in the results sink past the checkpoint); ``failed``: failed
    for good (``failed_items``: their ids, at most ``max_failed_ids``); ``stopped_early``:
    ``fail_fast`` stopped the run before every item was tried; ``skipped_items``: items whose handler
    raised :class:`SkipItem`; ``suspended``: the run stopped while its source was idle, with
    nothing in flight, to go on later in the same try (:meth:`continuing`).
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
    suspended: bool = False
    duration_seconds: float = 0.0
    items_per_second: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def continuing(
        cls, carried: Mapping[str, Any] | None, *, shard: int, shards: int, generation: int
    ) -> IterationSummary:
        """A summary going on from ``carried`` (``to_dict()`` of a suspended run of the same try).

        Counts and durations add up; ``succeeded`` is recomputed from the checkpoint at the end;
        failures are never carried (a run with a failed item does not suspend).
        """
        summary = cls(shard=shard, shards=shards, generation=generation)
        for name in _CARRIED:
            if carried is not None and isinstance(carried.get(name), (int, float)):
                setattr(summary, name, type(getattr(summary, name))(carried[name]))
        return summary


#: What a suspended run hands to the next run of the same try.
_CARRIED = (
    "items",
    "succeeded_this_try",
    "skipped",
    "recovered",
    "skipped_items",
    "item_retries",
    "timed_out",
    "abandoned_threads",
    "checkpoints_saved",
    "resumed",
    "duration_seconds",
)


def conclude(summary: IterationSummary, first_failure: BaseException | None) -> IterationSummary:
    """``summary``, or :class:`IterationFailedError` (caused by ``first_failure``) when items failed."""
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
        ) from first_failure
    return summary

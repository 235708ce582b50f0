"""The iteration engine alone, its checkpoints: the watermark, resuming after a worker died or
after failed items, shards, and items done only once their results are delivered."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from typing import Any

import pytest

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.iteration.checkpoints import CompletedItems, IterationCheckpoint
from airflow_kafka_events.iteration.errors import (
    IterationFailedError,
    NonRetryableItemError,
    ResultDeliveryError,
)
from airflow_kafka_events.iteration.items import Item, shard_of
from airflow_kafka_events.iteration.outcome import SinkOpening
from unit.iteration.runners import make_runner
from unit.iteration.test_runner import Store, WorkerDied, items

pytestmark = pytest.mark.unit


# ====================================================================== watermark checkpoint
def test_completed_items_watermark_and_out_of_order_ranges():
    done = CompletedItems()
    for index in (0, 1, 5, 3, 6, 4, 9):
        assert done.add(index)
    assert not done.add(5) and not done.add(0)
    assert (done.watermark, done.ranges, len(done)) == (2, [[3, 7], [9, 10]], 7)
    assert 4 in done and 2 not in done and 8 not in done and -1 not in done
    done.add(2)
    assert (done.watermark, done.ranges) == (7, [[9, 10]])
    done.add(8)
    done.add(7)
    assert (done.watermark, done.ranges, len(done)) == (10, [], 10)

    # a permanently failed item leaves ONE gap; what completes after it is one range
    gap = CompletedItems()
    for index in range(1000):
        if index != 5:
            gap.add(index)
    assert (gap.watermark, gap.ranges) == (5, [[6, 1000]])
    again = CompletedItems.from_json(json.loads(json.dumps(gap.to_json())))
    assert (again.watermark, again.ranges, len(again)) == (5, [[6, 1000]], 999)


@pytest.mark.parametrize(
    "bad",
    [
        {"watermark": -1},
        {"watermark": 3, "ranges": [[2, 4]]},
        {"watermark": 0, "ranges": [[5, 5]]},
        {"watermark": 0, "ranges": [[5, 8], [7, 9]]},
        {"watermark": 0, "ranges": [["a", 2]]},
        [],
    ],
)
def test_completed_items_reject_malformed_json(bad):
    with pytest.raises(ValidationError):
        CompletedItems.from_json(bad)


def test_checkpoint_json_round_trip_and_format_check():
    checkpoint = IterationCheckpoint(
        generation=2,
        source="list:n:10",
        shard=1,
        shards=3,
        completed=CompletedItems(4, [[6, 8]]),
        results=None,
    )
    assert IterationCheckpoint.from_json(json.loads(json.dumps(checkpoint.to_json()))).to_json() == (
        checkpoint.to_json()
    )
    with pytest.raises(ValidationError, match="format"):
        IterationCheckpoint.from_json({**checkpoint.to_json(), "format": 99})


def test_checkpoints_are_batched_not_per_item():
    store = Store()

    async def handler(value, context):
        return None

    summary = make_runner(handler, store=store, checkpoint_every=100, checkpoint_interval=3600).run(
        items(1000)
    )
    assert store.sets == 1000 // 100 + 1 == summary.checkpoints_saved  # + the final save


def test_time_based_checkpoints_while_items_are_slow():
    store = Store()

    async def handler(value, context):
        await asyncio.sleep(0.05)

    make_runner(handler, store=store, checkpoint_every=10_000, checkpoint_interval=0.1).run(items(12))
    assert 2 <= store.sets <= 12  # some interval saves and the final one, never one per item


def _run_until_worker_death(store: Store, n: int, die_at: int, **kwargs: Any) -> list[int]:
    calls: list[int] = []

    def handler(value, context):
        if value["n"] == die_at:
            store.frozen = True  # the process is gone: nothing it does later is stored
            raise WorkerDied
        calls.append(value["n"])

    with pytest.raises(WorkerDied):
        make_runner(handler, store=store, **kwargs).run(items(n))
    store.frozen = False
    return calls


def test_a_retry_after_worker_death_resumes_at_the_last_checkpoint():
    store = Store()
    first = _run_until_worker_death(store, 100, die_at=45, concurrency=1, checkpoint_every=10)
    assert first == list(range(45))
    assert store.checkpoint().completed.watermark == 40  # saved before item 40 started

    second: list[int] = []

    def handler(value, context):
        second.append(value["n"])

    summary = make_runner(handler, store=store, concurrency=1, checkpoint_every=10).run(items(100))
    assert second == list(range(40, 100))  # items done by the first try before its checkpoint: skipped
    assert (summary.skipped, summary.succeeded_this_try, summary.succeeded, summary.resumed) == (
        40,
        60,
        100,
        True,
    )


def test_a_retry_after_failed_items_runs_only_them():
    store = Store()

    def flaky(value, context):
        if value["n"] % 10 == 3:
            raise ValueError("not yet")

    with pytest.raises(IterationFailedError):
        make_runner(flaky, store=store, concurrency=3).run(items(50))
    assert store.checkpoint().completed.watermark == 3

    second: list[int] = []

    def handler(value, context):
        second.append(value["n"])

    summary = make_runner(handler, store=store, concurrency=3).run(items(50))
    assert sorted(second) == [3, 13, 23, 33, 43]
    assert summary.succeeded == 50 and store.checkpoint().completed.watermark == 50


def test_a_cleared_task_or_another_source_starts_over():
    store = Store()
    make_runner(lambda v, c: None, store=store, generation=0, source_key="list:n:10").run(items(10))

    runs: list[int] = []

    def handler(value, context):
        runs.append(value["n"])

    make_runner(handler, store=store, generation=1, source_key="list:n:10").run(items(10))  # cleared
    assert sorted(runs) == list(range(10))
    runs.clear()
    make_runner(handler, store=store, generation=1, source_key="list:n:12").run(items(12))  # new items
    assert sorted(runs) == list(range(12))
    runs.clear()
    make_runner(handler, store=store, generation=1, source_key="list:n:12").run(items(12))  # a retry
    assert runs == []


# ====================================================================== sharding
def test_shards_split_the_items_exactly_once():
    seen: list[int] = []
    lock = threading.Lock()

    def handler(value, context):
        with lock:
            seen.append(value["n"])

    summaries = [make_runner(handler, shard=k, shards=3, concurrency=2).run(items(100)) for k in range(3)]
    assert sorted(seen) == list(range(100))
    assert [s.items for s in summaries] == [34, 33, 33]
    assert all(shard_of(n, 3) == k for k in range(3) for n in range(k, 100, 3))


def test_sharded_checkpoints_track_local_indexes():
    store = Store()

    def handler(value, context):
        if value["n"] == 7:  # local index 7 // 3 == 2 of shard 1
            raise ValueError("no")

    with pytest.raises(IterationFailedError):
        make_runner(handler, store=store, shard=1, shards=3, concurrency=1).run(items(30))
    completed = store.checkpoint().completed
    assert (completed.watermark, completed.ranges) == (2, [[3, 10]])


# ====================================================================== results sink
class FakeSink:
    """Acknowledges every result from another thread, as a Kafka producer does."""

    def __init__(self, recovered: tuple[int, ...] = (), fail_at: int | None = None) -> None:
        self.recovered = recovered
        self.fail_at = fail_at
        self.put_order: list[int] = []
        self.acked: list[int] = []
        self.saved: Any = "unset"
        self.pool = concurrent.futures.ThreadPoolExecutor(2)

    def open(self, saved: Any, *, restart: bool) -> SinkOpening:
        self.saved = saved
        return SinkOpening(recovered=self.recovered)

    def put(self, item: Item, item_id: str, result: Any) -> concurrent.futures.Future[Any]:
        if result == "not json":
            raise NonRetryableItemError("cannot encode")
        self.put_order.append(item.ordinal)

        def deliver() -> int:
            time.sleep(0.001)
            if item.ordinal == self.fail_at:
                raise OSError("broker gone")
            return item.ordinal

        return self.pool.submit(deliver)

    def delivered(self, value: Any) -> None:
        self.acked.append(value)

    def state(self) -> Any:
        return {"acked": len(self.acked)}


def test_items_are_done_only_once_their_results_are_delivered():
    store = Store()
    sink = FakeSink(recovered=(4, 5))

    def handler(value, context):
        return "not json" if value["n"] == 9 else value["n"]

    with pytest.raises(IterationFailedError) as caught:
        make_runner(handler, store=store, sink=sink, concurrency=3).run(items(12))
    summary = caught.value.summary
    assert summary.failed_items == ["9"]  # a result that cannot be written fails its item
    assert summary.recovered == 2 and summary.skipped == 2  # delivered before a worker died: not re-run
    assert sorted(sink.acked) == [0, 1, 2, 3, 6, 7, 8, 10, 11]
    checkpoint = store.checkpoint()
    assert checkpoint.results == {"acked": 9}
    assert (checkpoint.completed.watermark, checkpoint.completed.ranges) == (9, [[10, 12]])


def test_a_lost_result_fails_the_task():
    sink = FakeSink(fail_at=3)
    with pytest.raises(ResultDeliveryError, match="item 3 was not delivered"):
        make_runner(lambda v, c: v["n"], sink=sink, concurrency=1).run(items(10))

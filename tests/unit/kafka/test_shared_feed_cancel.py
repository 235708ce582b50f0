"""A watcher's wait for its feed ends on cancellation even when records arrive at the same moment.

At a triggerer's stop Airflow cancels each shared stream's poll task and awaits it
(``_SharedStreamGroup.stop``); the poll is then usually inside ``Feed.take``.  On Python 3.11,
``asyncio.wait_for`` returns the inner result instead of raising when the inner wait finished in
the same loop iteration as the cancellation, so the poll went on reading and the stop never ended
(the runner was SIGKILLed by Airflow's supervisor 20 s later, no watcher closed).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from airflow_kafka_events.kafka.shared_feed import FedRecord, Feed

pytestmark = pytest.mark.unit

TP = ("events", 0)


def _record(offset: int) -> FedRecord:
    return FedRecord(cast(Any, None), ("k", offset), TP, offset)


class _Shared:
    """The shared reader's side a feed looks at: its frontier."""

    def __init__(self) -> None:
        self.frontier: dict[tuple[str, int], int] = {TP: 0}


def _feed() -> Feed:
    feed = Feed(cast(Any, _Shared()), {TP: 0}, keys=["k"], match=lambda decoded: True, capacity=10, name="w")
    feed.shared = {TP}
    return feed


def _read(feed: Feed, records: list[FedRecord], frontier: int) -> None:
    """What the shared reader does with a batch: its frontier moves, the feed gets its records."""
    cast(Any, feed)._shared.frontier[TP] = frontier
    feed._offer(records)


def test_a_take_cancelled_as_its_records_arrive_is_cancelled():
    async def scenario() -> tuple[bool, bool]:
        feed = _feed()
        taking = asyncio.create_task(feed.take(10, timeout=30.0))
        await asyncio.sleep(0)  # the take waits for records
        _read(feed, [_record(4)], 5)  # the shared reader hands it a record: the wait ends
        assert not taking.done()
        taking.cancel()  # Airflow's stop, in that same loop iteration, before the take resumes
        await asyncio.sleep(0.05)
        done, cancelled = taking.done(), taking.cancelled()
        if not done:  # the cancellation was swallowed: the take waits on
            taking.cancel()
            await asyncio.gather(taking, return_exceptions=True)
        return done, cancelled

    done, cancelled = asyncio.run(scenario())
    assert done and cancelled, "the take swallowed its cancellation and kept waiting"


def test_a_take_cancelled_while_waiting_is_cancelled():
    async def scenario() -> bool:
        feed = _feed()
        taking = asyncio.create_task(feed.take(10, timeout=30.0))
        await asyncio.sleep(0)
        taking.cancel()
        await asyncio.gather(taking, return_exceptions=True)
        return taking.cancelled()

    assert asyncio.run(scenario())


def test_a_take_times_out_with_nothing_and_returns_what_arrived():
    async def scenario() -> tuple[Any, Any]:
        feed = _feed()
        empty = await feed.take(10, timeout=0.05)
        _read(feed, [], 3)
        return empty, await feed.take(10, timeout=1.0)

    empty, moved = asyncio.run(scenario())
    assert empty == ([], {})
    assert moved == ([], {TP: 3})


def test_progress_past_other_records_wakes_no_owner_its_records_do():
    """Every batch of the shared reader moves every feed's frontier: waking every owner for it cost
    a wake-up per watcher and batch; the owner gets the progress when its wait ends."""

    async def scenario() -> tuple[bool, Any, Any]:
        feed = _feed()
        taking = asyncio.create_task(feed.take(10, timeout=0.3))
        await asyncio.sleep(0)
        _read(feed, [], 3)  # another owner's record was read
        await asyncio.sleep(0.05)
        woken = taking.done()
        progress = await taking  # the wait ended at its timeout, with the progress
        taking = asyncio.create_task(feed.take(10, timeout=30.0))
        await asyncio.sleep(0)
        _read(feed, [_record(3)], 4)  # its own record: the wait ends at once
        async with asyncio.timeout(1.0):
            records, frontier = await taking
        return woken, progress, ([r.offset for r in records], frontier)

    woken, progress, own = asyncio.run(scenario())
    assert not woken
    assert progress == ([], {TP: 3})
    assert own == ([3], {TP: 4})


def test_no_code_of_the_package_waits_with_asyncio_wait_for():
    """The same swallowed cancellation anywhere a watcher's poll or close waits would hang the stop;
    in a task, it would keep an item or the iteration running after its cancellation."""
    import airflow_kafka_events

    root = Path(airflow_kafka_events.__file__).parent
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "asyncio.wait_for(" in line
    ]
    assert found == [], f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for at {found}"

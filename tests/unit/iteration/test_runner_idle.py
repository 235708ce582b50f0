"""The runner over a source that goes idle: it stops to wait elsewhere only with nothing in
flight, after its checkpoint is saved, without ending its results sink; a later runner of the
same try goes on from the checkpoint with the counts carried.  No Airflow, no broker."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_kafka_events.iteration.checkpoints import DEFAULT_CHECKPOINT_KEY, IterationCheckpoint
from airflow_kafka_events.iteration.errors import IterationFailedError
from airflow_kafka_events.iteration.items import SOURCE_IDLE, Item, SourceIdle
from airflow_kafka_events.iteration.outcome import SinkOpening
from unit.iteration.runners import make_runner
from unit.iteration.test_runner import Store

pytestmark = pytest.mark.unit


class IdleSource:
    """Yields ``steps`` in order: ints are item ordinals, ``SOURCE_IDLE`` an idle interval."""

    def __init__(self, steps: list[int | SourceIdle], *, idle_seconds: float = 0.05) -> None:
        self.steps = steps
        self.idle_seconds = idle_seconds
        self.idles_taken = 0

    async def _run(self) -> AsyncIterator[Item | SourceIdle]:
        for step in self.steps:
            if isinstance(step, SourceIdle):
                await asyncio.sleep(self.idle_seconds)  # nothing came for the idle interval
                self.idles_taken += 1
                yield SOURCE_IDLE
            else:
                yield Item(step, step)

    def __aiter__(self) -> AsyncIterator[Item | SourceIdle]:
        return self._run()


class SlowSink:
    """A results sink whose deliveries resolve ``delay`` seconds later; never ended here."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.next_seq = 0
        self.acked = 0
        self.ended = False

    def open(self, saved: Any, *, restart: bool) -> SinkOpening:
        self.acked = self.next_seq = 0 if saved is None else saved["next_seq"]
        return SinkOpening()

    def put(self, item: Item, item_id: str, result: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        loop = asyncio.get_running_loop()
        loop.call_later(self.delay, future.set_result, seq)
        return future

    def delivered(self, value: Any) -> None:
        self.acked = max(self.acked, value + 1)

    def state(self) -> Any:
        return {"next_seq": self.acked}


def test_an_idle_source_with_nothing_in_flight_stops_the_run_with_the_checkpoint_saved():
    store = Store()
    handled: list[int] = []
    runner = make_runner(lambda v, ctx: handled.append(v), store=store, checkpoint_every=100)
    source = IdleSource([0, 1, 2, SOURCE_IDLE, 3, 4])
    summary = runner.run(source)
    assert summary.suspended and handled == [0, 1, 2] and source.idles_taken == 1
    assert summary.succeeded == summary.succeeded_this_try == summary.items == 3
    saved = store.checkpoint()  # saved although checkpoint_every was not reached
    assert saved.completed.watermark == 3

    # the next run of the same try goes on from the checkpoint, counts carried
    again = make_runner(
        lambda v, ctx: handled.append(v), store=store, carried=summary.to_dict(), checkpoint_every=100
    )
    rest = again.run(IdleSource([3, 4]))
    assert handled == [0, 1, 2, 3, 4] and not rest.suspended
    assert rest.items == rest.succeeded == rest.succeeded_this_try == 5 and rest.skipped == 0


def test_an_item_in_flight_keeps_the_run_going_until_it_is_done():
    done: list[int] = []

    async def handler(value: int, context: dict[str, Any]) -> None:
        await asyncio.sleep(0.3 if value == 1 else 0)  # item 1 is still running at the first idle
        done.append(value)

    runner = make_runner(handler, concurrency=2, store=Store())
    source = IdleSource([0, 1, *[SOURCE_IDLE] * 12, 9])
    summary = runner.run(source)
    assert summary.suspended and sorted(done) == [0, 1]
    # it pulled again while item 1 ran (0.3 s, idle steps of 0.05 s), and stopped after it ended
    assert 2 <= source.idles_taken < 12, source.idles_taken


def test_undelivered_results_keep_the_run_going_and_the_sink_is_not_ended():
    sink = SlowSink(delay=0.3)
    store = Store()
    runner = make_runner(lambda v, ctx: v, sink=sink, store=store)
    source = IdleSource([0, 1, *[SOURCE_IDLE] * 12, 7])
    summary = runner.run(source)
    assert summary.suspended and sink.acked == 2 and not sink.ended
    assert 2 <= source.idles_taken < 12
    assert IterationCheckpoint.from_json(store.get(DEFAULT_CHECKPOINT_KEY)).results == {"next_seq": 2}


def test_an_item_waiting_for_its_retry_keeps_the_run_going():
    tries: dict[int, int] = {}

    def handler(value: int, context: dict[str, Any]) -> None:
        tries[value] = tries.get(value, 0) + 1
        if value == 1 and tries[value] == 1:
            raise RuntimeError("first try fails")

    runner = make_runner(handler, item_retries=1, item_retry_delay=0.2, store=Store())
    summary = runner.run(IdleSource([0, 1, *[SOURCE_IDLE] * 12, 9]))
    assert summary.suspended and tries == {0: 1, 1: 2} and summary.item_retries == 1


def test_a_run_with_an_item_failed_for_good_never_stops_while_idle():
    def handler(value: int, context: dict[str, Any]) -> None:
        if value == 1:
            raise RuntimeError("item 1 fails")

    runner = make_runner(handler, store=Store())
    source = IdleSource([0, 1, SOURCE_IDLE, 2, SOURCE_IDLE, 3])
    with pytest.raises(IterationFailedError) as info:
        runner.run(source)
    # it read the whole source (it would run item 1 again after a stop: the failure is this try's)
    assert source.idles_taken == 2 and not info.value.summary.suspended
    assert info.value.summary.succeeded == 3

"""A send's future: a ``concurrent.futures.Future`` that makes its condition only when one is needed.

Each test checks one Future behaviour callers rely on (waiting, callbacks, cancelling,
``concurrent.futures.wait``, ``asyncio.wrap_future``) on both sides of that laziness: a future
settled before anyone touched it, and one somebody waits on or registered a callback with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from airflow_kafka_events.kafka import delivery
from airflow_kafka_events.kafka.delivery import DeliveryFuture, DeliveryReceipt

pytestmark = pytest.mark.unit

RECEIPT = DeliveryReceipt("t", 0, 7, None, b"k")


def test_the_layout_it_builds_on_is_this_pythons():
    # when concurrent.futures keeps other attributes, DeliveryFuture is a plain Future (tested below)
    assert delivery.LAZY_FUTURES


def test_settled_before_anyone_looked_it_makes_no_condition_and_reads_as_finished():
    future = DeliveryFuture()
    assert isinstance(future, concurrent.futures.Future)
    assert future.outstanding()
    assert future.settle(RECEIPT)
    assert future._cond is None  # nobody waited: no lock was made for it
    assert not future.outstanding()
    assert future.done() and not future.cancelled() and not future.running()
    assert future.result(timeout=0) == RECEIPT
    assert future.exception(timeout=0) is None
    assert future._cond is None
    called = []
    future.add_done_callback(called.append)  # after the fact: called at once, as a Future does
    assert called == [future]


def test_a_failure_is_raised_by_result_and_returned_by_exception():
    future = DeliveryFuture()
    error = ValueError("refused")
    assert future.settle(exception=error)
    with pytest.raises(ValueError, match="refused"):
        future.result(timeout=0)
    assert future.exception(timeout=0) is error


def test_it_settles_once():
    future = DeliveryFuture()
    assert future.settle(RECEIPT)
    assert not future.settle(exception=ValueError("late"))
    assert future.result(timeout=0) == RECEIPT


def test_a_waiter_on_another_thread_is_woken_by_settle():
    future = DeliveryFuture()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(timeout=30)))
    waiter.start()
    # the waiter holds the condition (made on its first use) before settle notifies it
    for _ in range(3000):
        if future._cond is not None and future._cond._waiters:  # type: ignore[attr-defined]
            break
        threading.Event().wait(0.01)
    assert future._cond is not None
    assert future.settle(RECEIPT)
    waiter.join(30)
    assert got == [RECEIPT]


def test_an_unsettled_future_times_out_like_a_future():
    future = DeliveryFuture()
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(timeout=0.01)
    assert not future.done() and future.outstanding()


def test_callbacks_registered_before_settle_are_called_once_with_the_outcome():
    future = DeliveryFuture()
    seen: list[object] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    future.add_done_callback(lambda f: seen.append(f.exception()))
    assert seen == []
    assert future.settle(RECEIPT)
    assert seen == [RECEIPT, None]


def test_a_cancelled_future_is_not_settled():
    future = DeliveryFuture()
    assert future.cancel()
    assert not future.outstanding()
    assert not future.settle(RECEIPT)
    assert not future.settle(exception=ValueError("x"))
    assert future.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=0)


def test_a_settled_future_cannot_be_cancelled():
    future = DeliveryFuture()
    future.settle(RECEIPT)
    assert not future.cancel()
    assert future.result(timeout=0) == RECEIPT


def test_wait_and_as_completed_see_settled_and_later_settled_futures():
    early, late, never = DeliveryFuture(), DeliveryFuture(), DeliveryFuture()
    early.settle(RECEIPT)
    done, not_done = concurrent.futures.wait([early, late, never], timeout=0)
    assert done == {early} and not_done == {late, never}
    threading.Timer(0.05, late.settle, kwargs={"exception": ValueError("x")}).start()
    done, not_done = concurrent.futures.wait([early, late, never], timeout=30, return_when="FIRST_EXCEPTION")
    assert done == {early, late} and not_done == {never}
    completed = list(concurrent.futures.as_completed([early, late], timeout=30))
    assert set(completed) == {early, late}


@pytest.mark.parametrize("settle_first", [True, False])
def test_asyncio_awaits_it_through_wrap_future(settle_first):
    async def main() -> object:
        future = DeliveryFuture()
        if settle_first:
            future.settle(RECEIPT)
        else:
            asyncio.get_running_loop().call_later(0.01, future.settle, RECEIPT)
        return await asyncio.wait_for(asyncio.wrap_future(future), 30)

    assert asyncio.run(main()) == RECEIPT


def test_asyncio_cancelling_its_wait_cancels_the_future():
    future = DeliveryFuture()

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(future), 0.01)

    asyncio.run(main())
    assert future.cancelled()
    assert not future.settle(RECEIPT)


def test_settling_on_one_thread_while_another_waits_loses_no_outcome():
    futures = [DeliveryFuture() for _ in range(2000)]
    results: list[object] = []

    def wait_all() -> None:
        for i, f in enumerate(futures):
            results.append(f.result(timeout=30) if i % 2 else f.exception(timeout=30))

    waiter = threading.Thread(target=wait_all)
    waiter.start()
    errors = [ValueError(str(i)) for i in range(len(futures))]
    for i, f in enumerate(futures):
        assert f.settle(RECEIPT) if i % 2 else f.settle(exception=errors[i])
    waiter.join(60)
    assert results == [RECEIPT if i % 2 else errors[i] for i in range(len(futures))]


def test_with_an_unknown_future_layout_it_is_a_plain_future(monkeypatch):
    monkeypatch.setattr(delivery, "LAZY_FUTURES", False)
    future = DeliveryFuture()
    assert future._cond is not None  # made up front by Future.__init__
    seen: list[object] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    assert future.settle(RECEIPT)
    assert not future.settle(RECEIPT)
    assert seen == [RECEIPT] and future.result(timeout=0) == RECEIPT

"""A send's future: makes its condition only when one is needed.

Each test checks one behaviour callers rely on (waiting, callbacks, cancelling, ``await``,
``concurrent.futures.wait`` through :meth:`as_future`) on both sides of that laziness: a future
settled before anyone touched it, and one somebody waits on or registered a callback with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from airflow_kafka_events.kafka.delivery import DeliveryFuture, DeliveryReceipt

pytestmark = pytest.mark.unit

RECEIPT = DeliveryReceipt("t", 0, 7, None, b"k")


def test_settled_before_anyone_looked_it_makes_no_condition_and_reads_as_finished():
    future = DeliveryFuture()
    assert future.outstanding() and not future.done()
    assert future.settle(RECEIPT)
    assert future._cond is None  # nobody waited: no lock was made for it
    assert not future.outstanding()
    assert future.done() and not future.cancelled()
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
    # the waiter makes the condition under the future's lock, which it holds until it waits
    for _ in range(3000):
        if future._cond is not None:
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


def test_wait_and_as_completed_see_settled_and_later_settled_futures_as_futures():
    early, late, never = DeliveryFuture(), DeliveryFuture(), DeliveryFuture()
    early.settle(RECEIPT)
    views = {f: f.as_future() for f in (early, late, never)}
    done, not_done = concurrent.futures.wait(views.values(), timeout=0)
    assert done == {views[early]} and not_done == {views[late], views[never]}
    threading.Timer(0.05, late.settle, kwargs={"exception": ValueError("x")}).start()
    done, not_done = concurrent.futures.wait(views.values(), timeout=30, return_when="FIRST_EXCEPTION")
    assert done == {views[early], views[late]} and not_done == {views[never]}
    assert views[early].result(timeout=0) == RECEIPT
    assert str(views[late].exception(timeout=0)) == "x"
    completed = list(concurrent.futures.as_completed([views[early], views[late]], timeout=30))
    assert set(completed) == {views[early], views[late]}


def test_cancelling_either_of_a_future_and_its_as_future_cancels_both():
    future = DeliveryFuture()
    view = future.as_future()
    assert view.cancel()
    assert future.cancelled() and not future.settle(RECEIPT)
    future = DeliveryFuture()
    view = future.as_future()
    assert future.cancel()
    assert view.cancelled()


@pytest.mark.parametrize("settle_first", [True, False])
@pytest.mark.parametrize("from_thread", [True, False])
def test_asyncio_awaits_it(settle_first, from_thread):
    async def main() -> object:
        future = DeliveryFuture()
        if settle_first:
            future.settle(RECEIPT)
        elif from_thread:
            threading.Timer(0.01, future.settle, args=(RECEIPT,)).start()
        else:
            asyncio.get_running_loop().call_later(0.01, future.settle, RECEIPT)
        return await asyncio.wait_for(future, 30)

    assert asyncio.run(main()) == RECEIPT


def test_awaiting_a_failed_future_raises_its_error():
    async def main() -> None:
        future = DeliveryFuture()
        threading.Timer(0.01, future.settle, kwargs={"exception": ValueError("refused")}).start()
        await asyncio.wait_for(future, 30)

    with pytest.raises(ValueError, match="refused"):
        asyncio.run(main())


def test_asyncio_cancelling_its_wait_cancels_the_future():
    future = DeliveryFuture()

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(future, 0.01)

    asyncio.run(main())
    assert future.cancelled()
    assert not future.settle(RECEIPT)


def test_a_settle_after_the_awaiting_loop_closed_is_harmless():
    future = DeliveryFuture()

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.wait_for(future, 30))
        await asyncio.sleep(0)
        assert not task.done()  # left pending: the loop closes with the future still waited on

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()
    assert future.settle(RECEIPT)
    assert future.result(timeout=0) == RECEIPT


def test_a_failing_callback_is_logged_and_the_others_still_called(caplog):
    future = DeliveryFuture()
    seen: list[object] = []
    future.add_done_callback(lambda f: 1 / 0)
    future.add_done_callback(seen.append)
    assert future.settle(RECEIPT)
    assert seen == [future]
    assert "exception calling callback" in caplog.text


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


def test_futures_sharing_a_lock_are_settled_and_waited_on_each_alone():
    # a producer's futures share its lock: a waiter is woken by its own future only
    lock = threading.Lock()
    first, second = DeliveryFuture(lock), DeliveryFuture(lock)
    other = DeliveryReceipt("t", 1, 8, None, None)
    got: dict[str, object] = {}
    waiters = [
        threading.Thread(target=lambda: got.setdefault("first", first.result(timeout=30))),
        threading.Thread(target=lambda: got.setdefault("second", second.result(timeout=30))),
    ]
    for waiter in waiters:
        waiter.start()
    for _ in range(3000):
        if first._cond is not None and second._cond is not None:
            break
        threading.Event().wait(0.01)
    assert first.settle(RECEIPT)
    waiters[0].join(30)
    assert got == {"first": RECEIPT} and second.outstanding()
    assert second.settle(other)
    waiters[1].join(30)
    assert got == {"first": RECEIPT, "second": other}
    assert not lock.locked()

"""The iteration engine alone (no Airflow, no broker): running items, retries, timeouts, concurrency.

Its checkpoints (watermark, resuming, shards, delivered results) are in test_runner_checkpoints.py;
the helpers here (``Store``, ``items``) serve both.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import tracemalloc
from typing import Any

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.checkpoints import DEFAULT_CHECKPOINT_KEY, IterationCheckpoint
from airflow_kafka_events.iteration.errors import (
    ItemTimeoutError,
    IterationFailedError,
    NonRetryableItemError,
    SkipItem,
    TooManyAbandonedThreadsError,
)
from airflow_kafka_events.iteration.items import Item, ItemInfo
from airflow_kafka_events.iteration.retries import retry_delay
from unit.iteration.runners import make_runner

pytestmark = pytest.mark.unit


class Store:
    """JSON round trip like Airflow's task state store; counts writes; can stop accepting them."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.sets = 0
        self.frozen = False

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self.sets += 1
        if not self.frozen:
            self.data[key] = json.dumps(value)

    def checkpoint(self) -> IterationCheckpoint:
        return IterationCheckpoint.from_json(self.get(DEFAULT_CHECKPOINT_KEY))


class WorkerDied(BaseException):
    """Stands for the worker process dying: nothing after it runs (the store is frozen first)."""


def items(n: int, start: int = 0) -> list[Item]:
    return [Item(i, {"n": i}) for i in range(start, n)]


def ordinals(calls: list[Any]) -> list[int]:
    return sorted(calls)


# ====================================================================== success
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_item_runs_once_with_its_value(kind):
    seen: list[int] = []
    lock = threading.Lock()

    def sync_handler(value, context):
        with lock:
            seen.append(value["n"])
        return value["n"] * 2

    async def async_handler(value, context):
        await asyncio.sleep(0)
        seen.append(value["n"])
        return value["n"] * 2

    handler = sync_handler if kind == "sync" else async_handler
    store = Store()
    summary = make_runner(handler, concurrency=4, store=store).run(items(50))

    assert sorted(seen) == list(range(50))
    assert (summary.items, summary.succeeded, summary.succeeded_this_try, summary.failed) == (50, 50, 50, 0)
    assert store.checkpoint().completed.watermark == 50
    assert store.checkpoint().completed.ranges == []


def test_an_async_item_source_is_consumed_lazily():
    pulled: list[int] = []

    async def source():
        for i in range(10):
            pulled.append(i)
            yield Item(i, i)

    handled: list[tuple[int, int]] = []

    async def handler(value, context):
        handled.append((value, len(pulled)))

    make_runner(handler, concurrency=1).run(source())
    # an item is pulled only when a slot is free: never far ahead of the handled ones
    assert all(pulled_then - value <= 2 for value, pulled_then in handled), handled


# ====================================================================== failures and retries
def test_a_failing_item_is_retried_with_backoff_while_other_items_keep_going():
    calls: list[tuple[int, int]] = []  # (ordinal, try)
    release = threading.Event()

    async def handler(value, context):
        info: ItemInfo = context["iteration_item"]
        calls.append((info.ordinal, info.attempt))
        if info.ordinal == 0 and info.attempt < 3:
            raise ValueError("flaky")
        if info.ordinal == 1:
            raise ValueError("always")
        if info.ordinal == 9:
            release.set()

    runner = make_runner(handler, concurrency=1, item_retries=2, item_retry_delay=0.3, item_retry_backoff=2)
    with pytest.raises(IterationFailedError) as caught:
        runner.run(items(10))

    summary = caught.value.summary
    assert summary.failed == 1 and summary.failed_items == ["1"], summary
    assert summary.succeeded == 9 and summary.item_retries == 4, summary
    assert calls.count((0, 1)) == 1 and (0, 3) in calls and (1, 3) in calls
    # with ONE slot, items 2..9 ran while item 0 waited for its retry: the delay held no slot
    assert calls.index((9, 1)) < calls.index((0, 2)), calls
    assert "1 item(s) failed: 1" in str(caught.value)


def test_retry_delays_grow_with_the_backoff_and_are_capped():
    assert [retry_delay(a, 1.0, 2.0, None) for a in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert retry_delay(5, 1.0, 3.0, 10.0) == 10.0
    assert retry_delay(1, 0.0, 2.0, None) == 0.0


def test_non_retryable_and_skip_signals():
    tries: dict[int, int] = {}

    def handler(value, context):
        n = value["n"]
        tries[n] = tries.get(n, 0) + 1
        if n == 2:
            raise NonRetryableItemError("bad data")
        if n == 3:
            raise SkipItem("nothing to do")

    store = Store()
    with pytest.raises(IterationFailedError) as caught:
        make_runner(handler, item_retries=5, store=store).run(items(5))
    assert tries[2] == 1  # no retry
    assert caught.value.summary.skipped_items == 1
    assert 3 in store.checkpoint().completed and 2 not in store.checkpoint().completed


@pytest.mark.parametrize("fail_fast", [True, False])
def test_fail_fast_stops_scheduling_while_collect_tries_every_item(fail_fast):
    called: list[int] = []

    def handler(value, context):
        called.append(value["n"])
        if value["n"] in (3, 7):
            raise RuntimeError(f"item {value['n']} broke")

    with pytest.raises(IterationFailedError) as caught:
        make_runner(handler, concurrency=1, fail_fast=fail_fast).run(items(20))

    summary = caught.value.summary
    if fail_fast:
        assert called == [0, 1, 2, 3] and summary.stopped_early and summary.failed_items == ["3"]
        assert "fail_fast" in str(caught.value)
    else:
        assert called == list(range(20)) and not summary.stopped_early
        assert summary.failed_items == ["3", "7"] and summary.succeeded == 18
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_failed_item_ids_are_capped():
    def handler(value, context):
        raise ValueError("no")

    with pytest.raises(IterationFailedError) as caught:
        make_runner(handler, max_failed_ids=5, item_id=lambda item: f"id-{item.ordinal}").run(items(50))
    summary = caught.value.summary
    assert summary.failed == 50
    assert summary.failed_items == [f"id-{i}" for i in range(5)] and summary.failed_items_truncated
    json.dumps(summary.to_dict())  # the summary stays JSON (an XCom)


# ====================================================================== timeouts
def test_async_item_timeout_cancels_the_item_and_fails_it():
    cancelled = threading.Event()

    async def handler(value, context):
        if value["n"] == 2:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        if value["n"] == 3:
            raise TimeoutError("the item's own timeout")  # not the runner's

    with pytest.raises(IterationFailedError) as caught:
        make_runner(handler, concurrency=2, item_timeout=0.2).run(items(6))

    summary = caught.value.summary
    assert cancelled.is_set()  # item 2 was cancelled at its timeout, not waited for
    assert summary.failed_items == ["2", "3"] or summary.failed_items == ["3", "2"]
    assert summary.timed_out == 1  # only item 2: item 3 raised its own TimeoutError
    assert summary.succeeded == 4


def test_sync_item_timeout_is_enforced_by_abandoning_the_thread():
    """PINNED: a sync item over item_timeout fails at once; its thread is abandoned, not awaited."""
    release = threading.Event()
    finished_late = threading.Event()
    errors: list[BaseException] = []

    def handler(value, context):
        if value["n"] == 1 and context["iteration_item"].attempt == 1:
            release.wait(30)
            finished_late.set()
            return "late"
        return value["n"]

    runner = make_runner(handler, concurrency=1, item_timeout=0.2, item_retries=1)
    original = runner._failed

    def record(work, exc):
        errors.append(exc)
        original(work, exc)

    runner._failed = record  # type: ignore[method-assign]
    summary = runner.run(items(5))

    assert not finished_late.is_set()  # did not wait for the hung call (it is still blocked)
    assert [type(e) for e in errors] == [ItemTimeoutError]
    assert "abandoned" in str(errors[0])
    # the retry ran in a replacement thread and every item succeeded
    assert summary.succeeded == 5 and summary.timed_out == 1 and summary.abandoned_threads == 1
    release.set()
    assert finished_late.wait(5)  # the abandoned call ran to its end; its result was ignored


def test_too_many_hung_sync_items_fail_the_task():
    release = threading.Event()

    def handler(value, context):
        release.wait(30)

    try:
        with pytest.raises(TooManyAbandonedThreadsError):
            make_runner(handler, concurrency=2, item_timeout=0.1, max_abandoned_threads=2).run(items(10))
    finally:
        release.set()


# ====================================================================== concurrency and isolation
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_concurrency_limit_is_respected(kind):
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def enter():
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])

    def leave():
        with lock:
            state["now"] -= 1

    def sync_handler(value, context):
        enter()
        time.sleep(0.01)
        leave()

    async def async_handler(value, context):
        enter()
        await asyncio.sleep(0.01)
        leave()

    make_runner(sync_handler if kind == "sync" else async_handler, concurrency=3).run(items(40))
    assert state["max"] == 3


def test_each_item_gets_its_own_context_copy_and_os_environ_is_untouched(caplog):
    base = {"ti": object(), "shared": "yes"}
    contexts: list[dict[str, Any]] = []
    lock = threading.Lock()
    environ = dict(os.environ)

    def handler(value, context):
        context["mine"] = value["n"]  # mutating the copy must not leak to other items
        time.sleep(0.001)
        with lock:
            contexts.append(context)
        assert context["mine"] == value["n"]
        assert context["iteration_item"].ordinal == value["n"]

    make_runner(handler, concurrency=4, context=base).run(items(20))

    assert len({id(c) for c in contexts}) == 20
    assert all(c["ti"] is base["ti"] and c["shared"] == "yes" for c in contexts)  # shallow copies
    assert base == {"ti": base["ti"], "shared": "yes"}
    assert dict(os.environ) == environ


def test_items_changing_os_environ_are_reported(caplog, monkeypatch):
    monkeypatch.delenv("ITERATION_TEST_VAR", raising=False)

    def handler(value, context):
        os.environ["ITERATION_TEST_VAR"] = "x"

    with caplog.at_level("WARNING"):
        make_runner(handler).run(items(1))
    monkeypatch.delenv("ITERATION_TEST_VAR", raising=False)
    assert "ITERATION_TEST_VAR" in caplog.text and "os.environ" in caplog.text


# ====================================================================== options and scale
@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"item_retries": -1},
        {"item_timeout": 0},
        {"item_retry_backoff": 0.5},
        {"shard": 3, "shards": 3},
        {"checkpoint_every": 0},
        {"item_retry_delay": "1s"},
    ],
)
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        make_runner(lambda v, c: None, **kwargs)


def test_a_runner_runs_once():
    runner = make_runner(lambda v, c: None)
    runner.run([])
    with pytest.raises(RuntimeError):
        runner.run([])


def test_100_000_trivial_items_in_one_runner_stay_flat_and_are_checkpointed_in_batches():
    store = Store()
    handled = 0

    async def handler(value, context):
        nonlocal handled
        handled += 1

    def source():
        for i in range(100_000):
            yield Item(i, i)

    tracemalloc.start()
    started = time.monotonic()
    try:
        summary = make_runner(handler, store=store, concurrency=8, context={"k": "v"}).run(source())
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert handled == summary.succeeded == 100_000
    assert store.sets == 100_000 // 500 + 1  # batched watermarks: no per-item store call
    assert store.checkpoint().completed.to_json() == {"watermark": 100_000, "ranges": []}
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"  # nothing kept per item
    print(f"\n100,000 items in {elapsed:.2f}s (traced), peak {peak / 1e6:.2f} MB, {store.sets} store writes")


ENGINE_MODULES = ["airflow_kafka_events.iteration", "airflow_kafka_events.iteration.runner"]


@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_the_engine_imports_no_airflow(module):
    import subprocess
    import sys

    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

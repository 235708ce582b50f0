"""``@task.iterable`` and ``IterableOperator`` without Airflow services or a broker.

DAGs are built in memory; ``execute()`` runs with a fake context whose ``task_state_store``
keeps JSON values (as Airflow's does) and with the results stream turned off.  A "retry"
is a second ``execute()`` with the same store.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, Asset, task
from airflow.sdk.definitions.mappedoperator import MappedOperator
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred
from airflow.triggers.base import BaseTrigger

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.decorator import iterable_task
from airflow_kafka_events.iteration.errors import IterationFailedError
from airflow_kafka_events.iteration.operator import IterableOperator
from airflow_kafka_events.iteration.sources import StreamItems, from_stream, results_of
from airflow_kafka_events.provider import get_provider_info
from airflow_kafka_events.streams.consuming.operator import StreamRef
from harness.task_state import DictStore
from unit.operators.fakes import context

pytestmark = pytest.mark.unit

START = pendulum.datetime(2025, 1, 1, tz="UTC")


def new_dag(dag_id: str = "iter") -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False)


# ====================================================================== registration and DAG shape
def test_the_decorator_is_registered_as_task_iterable():
    entries = {e["name"]: e["class-name"] for e in get_provider_info()["task-decorators"]}
    assert entries["iterable"] == "airflow_kafka_events.iteration.decorator.iterable_task"
    assert task.iterable is iterable_task


def test_iterate_makes_one_task_and_batch_makes_n_mapped_instances():
    with new_dag() as dag:

        @task
        def list_items() -> list[int]:
            return list(range(10))

        @task.iterable(concurrency=4, item_retries=2, retries=3)
        async def get_item(n: int, base: int):
            return n + base

        urls = list_items()
        single = get_item.partial(base=1).iterate(n=urls)
        batched = get_item.partial(base=2).batch(size=3).iterate(n=urls)

    one = single.operator
    assert isinstance(one, IterableOperator) and one.task_id == "get_item"
    assert one.upstream_task_ids == {"list_items"}  # the XComArg made the DAG edge
    assert one.op_kwargs == {"base": 1} and one.iteration.shard.concurrency == 4 and one.retries == 3
    assert (one.iteration.shard.shard, one.iteration.shard.shards) == (0, 1)

    mapped = batched.operator
    assert isinstance(mapped, MappedOperator) and mapped.task_id == "get_item__1"
    assert mapped.upstream_task_ids == {"list_items"}
    assert mapped.expand_input.value == {"shard": [0, 1, 2]}  # Airflow's own expand(): 3 instances
    assert mapped.partial_kwargs["shards"] == 3 and mapped.partial_kwargs["op_kwargs"] == {"base": 2}
    assert set(dag.task_ids) == {"list_items", "get_item", "get_item__1"}


def test_a_stream_source_needs_no_dag_edge():
    with new_dag():

        @task.iterable
        def handle(page: Any):
            return page

        out = handle.iterate(page=StreamRef("produce"))
        chained = handle.iterate(page=results_of("handle"))
        exploded = handle.iterate(page=from_stream("produce", items_path="data.items"))

    assert out.operator.upstream_task_ids == set()
    assert out.operator.iterate_kwargs == {"page": StreamItems(StreamRef("produce"))}
    assert chained.operator.iterate_kwargs["page"].items_path == "result"
    assert exploded.operator.iterate_kwargs["page"].exploding


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda t: t(n=1), "started with .iterate"),
        (lambda t: t.expand(n=[1]), "instead of .expand"),
        (lambda t: t.iterate(), "at least one argument"),
        (lambda t: t.iterate(m=[1]), "cannot be called with these arguments"),
        (lambda t: t.iterate(n="abc"), "must be a list"),
        (lambda t: t.iterate(n=[1], ti=[2]), "task context variable"),
        (lambda t: t.partial(n=1).iterate(n=[1]), "both iterated over and given as a constant"),
        (lambda t: t.batch(size=0), "batch"),
    ],
)
def test_wrong_uses_fail_when_the_dag_is_parsed(call, error):
    with new_dag():

        @task.iterable
        def work(n: int):
            return n

        with pytest.raises((TypeError, ValueError, ConfigurationError), match=error):
            call(work)


def test_a_stream_must_be_the_only_iterated_argument():
    with new_dag():

        @task.iterable
        def work(a: int, b: int):
            return a

        with pytest.raises(TypeError, match="only argument iterated"):
            work.iterate(a=StreamRef("produce"), b=[1])


def test_bad_runner_options_fail_when_the_dag_is_parsed():
    with new_dag():

        @task.iterable(concurrency=0)
        def work(n: int):
            return n

        with pytest.raises(ConfigurationError, match="concurrency"):
            work.iterate(n=[1])


# ====================================================================== execute
def make_operator(fn, items: Any, **kwargs: Any) -> IterableOperator:
    with new_dag():
        return IterableOperator(
            task_id="it", python_callable=fn, iterate_kwargs={"n": items}, results_stream=False, **kwargs
        )


def test_execute_calls_the_function_per_item_with_constants_and_context():
    seen: list[tuple[int, int, Any, Any]] = []
    lock = threading.Lock()

    def work(n: int, base: int, dag_run=None, iteration_item=None):
        with lock:
            seen.append((n, base, dag_run.conf["k"], iteration_item.ordinal))
        return n + base

    store = DictStore()
    op = make_operator(work, list(range(20)), op_kwargs={"base": 100}, concurrency=3)
    summary = op.execute(context(store=store, conf={"k": "v"}))

    assert sorted(seen) == [(n, 100, "v", n) for n in range(20)]
    assert summary["succeeded"] == 20 and summary["failed"] == 0 and summary["results"] is None
    assert len(store.writes) <= 2  # the final checkpoint, not one write per item


def test_execute_runs_async_functions_on_the_event_loop():
    async def work(n: int):
        await asyncio.sleep(0)
        return n

    assert make_operator(work, [1, 2, 3], concurrency=2).execute(context())["succeeded"] == 3


def test_several_lists_are_iterated_as_their_product():
    seen: list[tuple[str, int]] = []

    def work(letter: str, n: int):
        seen.append((letter, n))

    with new_dag():
        op = IterableOperator(
            task_id="it",
            python_callable=work,
            iterate_kwargs={"letter": ["a", "b"], "n": [1, 2, 3]},
            results_stream=False,
        )
    assert op.execute(context())["items"] == 6
    assert seen == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3)]


def test_items_cannot_defer_and_can_skip():
    class Never(BaseTrigger):
        def serialize(self):  # pragma: no cover - never serialized
            return ("x.Never", {})

        async def run(self):  # pragma: no cover - never run
            yield None

    tries: dict[int, int] = {}

    def work(n: int):
        tries[n] = tries.get(n, 0) + 1
        if n == 1:
            raise TaskDeferred(trigger=Never(), method_name="x")
        if n == 2:
            raise AirflowSkipException("nothing here")
        return n

    op = make_operator(work, [0, 1, 2, 3], item_retries=3)
    with pytest.raises(IterationFailedError) as caught:
        op.execute(context())
    summary = caught.value.summary
    assert summary.failed_items == ["1"] and tries[1] == 1  # deferring is not retried
    assert summary.skipped_items == 1 and summary.succeeded == 3


def test_a_task_retry_runs_only_the_items_that_did_not_succeed():
    store = DictStore()
    calls: list[int] = []
    broken = {4, 9}

    def work(n: int):
        calls.append(n)
        if n in broken:
            raise ValueError(f"item {n}")
        return n

    with pytest.raises(IterationFailedError, match="4, 9"):
        make_operator(work, list(range(12)), item_id=lambda kw: str(kw["n"])).execute(
            context(store=store, try_number=1)
        )
    calls.clear()
    broken.clear()
    summary = make_operator(work, list(range(12))).execute(context(store=store, try_number=2))
    assert sorted(calls) == [4, 9]
    assert (summary["skipped"], summary["succeeded_this_try"], summary["succeeded"]) == (10, 2, 12)

    calls.clear()  # a user clear: a new generation starts over
    make_operator(work, list(range(12))).execute(context(store=store, clear_number=1))
    assert sorted(calls) == list(range(12))


def test_a_batch_instance_handles_its_shard_only():
    seen: list[int] = []

    def work(n: int):
        seen.append(n)

    with new_dag():
        op = IterableOperator(
            task_id="it",
            python_callable=work,
            iterate_kwargs={"n": list(range(10))},
            shard=2,
            shards=3,
            results_stream=False,
        )
    summary = op.execute(context(map_index=2))
    assert seen == [2, 5, 8] and summary["shard"] == 2 and summary["shards"] == 3


def test_per_item_partitioned_asset_events(monkeypatch):
    emitted: list[dict[str, Any]] = []
    lock = threading.Lock()

    def fake_emit(asset, **kwargs):
        with lock:
            emitted.append({"asset": asset.name, **kwargs})

    import airflow_kafka_events.assets.emit as emit_module

    monkeypatch.setattr(emit_module, "emit_asset_event", fake_emit)

    def work(n: int):
        return {"day": f"2025-01-{n + 1:02d}"}

    asset = Asset("s3://bucket/days")
    op = make_operator(
        work,
        [0, 1, 2],
        emit_partitions=asset,
        partition_key=lambda kw, result: None if kw["n"] == 1 else result["day"],
        concurrency=2,
    )
    op.execute(context())
    assert sorted(e["partition_key"] for e in emitted) == ["2025-01-01", "2025-01-03"]
    assert {e["asset"] for e in emitted} == {"s3://bucket/days"}
    assert all(e["source"].task_id == "produce" for e in emitted)  # the fake context's task

    emitted.clear()
    make_operator(lambda n: n, [7, 8], emit_partitions=asset).execute(context())
    assert sorted(e["partition_key"] for e in emitted) == ["0", "1"]  # default: the item id (ordinal)


def test_a_partition_key_needs_an_asset():
    with pytest.raises(ConfigurationError, match="emit_partitions"):
        make_operator(lambda n: n, [1], partition_key=lambda kw, r: "x")


def test_the_example_dag_parses(tmp_path):
    import shutil
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    example = Path(__file__).resolve().parents[3] / "examples" / "dags" / "iterate_pokemon_style.py"
    shutil.copy(example, tmp_path)
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"pokemon_iteration", "pokemon_batched_iteration"}
    batched = bag.dags["pokemon_batched_iteration"]
    assert isinstance(batched.get_task("get_pokemon"), MappedOperator)
    assert batched.get_task("index_pokemon").upstream_task_ids == set()  # reads the results stream lazily


def test_a_stream_iteration_gives_its_slot_back_by_a_reschedule_by_default(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")

    def op(**kwargs: Any) -> IterableOperator:
        return IterableOperator(
            task_id="it",
            python_callable=lambda page: None,
            iterate_kwargs={"page": from_stream("p")},
            **kwargs,
        )

    rescheduling = op()
    assert (rescheduling.wait.deferrable, rescheduling.wait.reschedule) == (False, True)
    assert rescheduling.wait.idle_interval == 10.0 and rescheduling.wait.reschedule_interval == 5.0
    assert op(deferrable=True).wait.idle_interval == 1.0
    assert op(stream_max_wait=20).wait.idle_interval == 20.0
    with pytest.raises(ConfigurationError, match="stream_reschedule_interval"):
        op(stream_reschedule_interval=0)

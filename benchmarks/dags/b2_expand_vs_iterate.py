"""Benchmark B2 DAGs: the same trivial body over ``items`` numbers (the run's conf), three ways.

``bench_b2_expand``
    ``.expand()``: one task instance per item (dynamic task mapping).
``bench_b2_iterate``
    ``@task.iterable`` ``.iterate()``: ONE task instance runs every item.
``bench_b2_batch``
    ``@task.iterable`` ``.batch(size=4).iterate()``: four task instances share the items.

The trivial body returns its number doubled.  ``make`` returns ``list(range(items))``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, get_current_context, task

DEFAULT_ITEMS = 1000
START = pendulum.datetime(2024, 1, 1, tz="UTC")


@task
def make() -> list[int]:
    conf = get_current_context()["dag_run"].conf or {}
    return list(range(int(conf.get("items", DEFAULT_ITEMS))))


with DAG(dag_id="bench_b2_expand", schedule=None, start_date=START, catchup=False, tags=["bench"]):

    @task
    def work(n: int) -> int:
        return n * 2

    work.expand(n=make())


with DAG(dag_id="bench_b2_iterate", schedule=None, start_date=START, catchup=False, tags=["bench"]):

    @task.iterable(concurrency=8)
    async def work_iterated(n: int) -> int:
        return n * 2

    work_iterated.iterate(n=make())


with DAG(dag_id="bench_b2_batch", schedule=None, start_date=START, catchup=False, tags=["bench"]):

    @task.iterable(concurrency=8)
    async def work_batched(n: int) -> int:
        return n * 2

    work_batched.batch(size=4).iterate(n=make())

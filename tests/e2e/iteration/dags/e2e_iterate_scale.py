"""End-to-end DAGs of ``@task.iterable`` at scale and with per-item partitioned fan-out.

``e2e_iterate_scale``
    ``make_many`` returns 100,000 numbers; ``touch`` (async, trivial body) iterates them in
    ONE task instance, with no cap (dynamic task mapping would stop at ``max_map_length``).

``e2e_iterate_fanout``
    ``fan_out`` iterates the ``keys`` of the run's conf and publishes one partitioned asset
    event per item (``emit_partitions``), partition key ``<key>`` (the item's return value).
``e2e_iterate_fanout_process``
    scheduled with ``PartitionedAssetTimetable`` on that asset: once the partition bridge
    posts the events, the scheduler creates one run per partition key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, get_current_context, task

SCALE_ITEMS = 100_000
FANOUT_ASSET = Asset(name="e2e_iterate_fanout", uri="x-e2e://iterate/fanout")


@task
def make_many() -> list[int]:
    return list(range(SCALE_ITEMS))


with DAG(
    dag_id="e2e_iterate_scale",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "iteration"],
):

    @task.iterable(
        concurrency=32,
        checkpoint_every=5_000,
        progress_every=20_000,
        results_stream=False,
    )
    async def touch(n: int) -> None:
        return None

    touch.iterate(n=make_many())


def _key_of(item_kwargs: Mapping[str, Any], result: Any) -> str:
    return str(result)


@task
def fanout_keys() -> list[str]:
    return list(get_current_context()["dag_run"].conf["keys"])


with DAG(
    dag_id="e2e_iterate_fanout",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "iteration"],
):

    @task.iterable(
        concurrency=3,
        results_stream=False,
        emit_partitions=FANOUT_ASSET,
        partition_key=_key_of,
    )
    def fan_out(key: str) -> str:
        return key

    fan_out.iterate(key=fanout_keys())


with DAG(
    dag_id="e2e_iterate_fanout_process",
    schedule=PartitionedAssetTimetable(assets=FANOUT_ASSET),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "iteration"],
):

    @task(retries=0)
    def process_partition() -> dict[str, Any]:
        context = get_current_context()
        return {"partition_key": context["dag_run"].partition_key}

    process_partition()

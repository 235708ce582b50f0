"""End-to-end consumer: one run per partition key of ``e2e_bridge_batches``.

Scheduled with ``PartitionedAssetTimetable``: the partition bridge posts each Kafka asset event
with its partition key, and the scheduler creates one run per key.  The task returns what it saw:
the run's partition key and the ``extra`` of its triggering asset events.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, PartitionedAssetTimetable, dag, get_current_context, task

BATCHES = Asset(name="e2e_bridge_batches", uri="x-e2e://bridge/batches")


@dag(
    dag_id="e2e_bridge_process_batch",
    schedule=PartitionedAssetTimetable(assets=BATCHES),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "bridge"],
)
def e2e_bridge_process_batch() -> None:
    @task(retries=0)
    def process_batch() -> dict[str, Any]:
        context = get_current_context()
        extras: list[Any] = []
        try:
            for events in context["triggering_asset_events"].values():
                extras.extend(dict(event.extra or {}) for event in events)
        except Exception as exc:  # the run's partition key is what this test is about
            extras.append({"error": repr(exc)})
        return {"partition_key": context["dag_run"].partition_key, "extras": extras}

    process_batch()


e2e_bridge_process_batch()

"""Example: one run per batch published by ``ingest_batches``.

``PartitionedAssetTimetable`` creates a DAG run per partition key of ``orders_batches``, so
``batch-0041`` and ``batch-0042`` get a run each even when they are published seconds apart, and
``dag_run.partition_key`` says which batch to work on.  The partition bridge posts the events
through Airflow's REST API, whose body has no ``partition_date``: the batch's date travels in the
event's ``extra["partition_date"]`` (ISO-8601), next to the provenance the bridge adds under
``extra["airflow_kafka_events"]`` (event id, idempotency key, source, causation).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, PartitionedAssetTimetable, dag, get_current_context, task

ORDERS_BATCHES = Asset(name="orders_batches", uri="s3://lake/orders/batches")


@dag(
    dag_id="process_batch_partitioned",
    schedule=PartitionedAssetTimetable(assets=ORDERS_BATCHES),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "asset-events", "partitions"],
)
def process_batch_partitioned() -> None:
    @task
    def validate_and_transform() -> dict[str, Any]:
        context = get_current_context()
        key = context["dag_run"].partition_key
        events = context["triggering_asset_events"][ORDERS_BATCHES]
        extra = dict(events[-1].extra) if events else {}
        print(
            f"processing {key}: {extra.get('path')} ({extra.get('rows')} rows), "
            f"partition_date={extra.get('partition_date')}"
        )
        return {
            "partition_key": key,
            "path": extra.get("path"),
            "partition_date": extra.get("partition_date"),
        }

    validate_and_transform()


process_batch_partitioned()

"""Example: an ingestion task that publishes each batch as soon as it is committed.

Use case 1 of explicit asset events.  ``ingest`` works through a backlog in batches; right after
committing a batch to storage it publishes ``orders_batches`` with the batch's partition key, then
records its checkpoint and moves on.  If a later batch fails, the earlier batches stay published:
``process_batch_partitioned`` (``PartitionedAssetTimetable``) has already got one run per
committed batch.

The events go to Kafka (``kafka_default`` connection, ``[kafka_events] asset_events_topic``,
default ``airflow.asset-events``).  The partition bridge (``airflow-kafka-events bridge``; the
``asset-bridge`` service of ``docker/compose.yaml``, profile ``bridge``) turns each of them into an
Airflow asset event with its partition key; an AssetWatcher could not (its events never carry a
partition key).

Trigger with ``{"batches": [41, 42, 43], "fail_at": 43}`` to watch batch 43 fail after 41 and 42
were published.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, get_current_context, task

from airflow_kafka_events import emit_asset_event

ORDERS_BATCHES = Asset(name="orders_batches", uri="s3://lake/orders/batches")


def commit_batch(batch: int) -> dict[str, Any]:
    """Stand-in for writing one batch to storage; returns where it went and how big it is."""
    return {"path": f"s3://lake/orders/batches/{batch:04d}.parquet", "rows": 10_000}


@dag(
    dag_id="ingest_batches",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "batches": Param([41, 42, 43], type="array", description="batch ids, in order"),
        "fail_at": Param(None, type=["null", "integer"], description="batch id that fails"),
    },
    tags=["example", "asset-events", "partitions"],
)
def ingest_batches() -> None:
    @task(retries=0)
    def ingest() -> list[str]:
        params = get_current_context()["params"]
        published: list[str] = []
        for batch in params["batches"]:
            if batch == params.get("fail_at"):
                raise RuntimeError(f"batch {batch} failed; batches {published} stay published")
            written = commit_batch(batch)
            receipt = emit_asset_event(
                ORDERS_BATCHES,
                partition_key=f"batch-{batch:04d}",
                partition_date=datetime.now(timezone.utc),
                extra={"batch_id": batch, **written},
            )
            # the receipt says Kafka has the event; the bridge makes it an Airflow asset event
            print(f"batch {batch}: event {receipt.event_id} at {receipt.topic}[{receipt.partition}]")
            published.append(f"batch-{batch:04d}")
        return published

    ingest()


ingest_batches()

"""End-to-end producer: an ingestion task publishes each batch as it commits it, then fails.

Use case 1 of the explicit asset-event thread.  ``conf``: ``topic`` (Kafka topic of asset
events), ``batches`` (ids, in order), ``fail_at`` (the batch id whose processing fails) and
``dir`` (where "committed" batches are written).  Every committed batch is published at once with
``emit_asset_event(BATCHES, partition_key="batch-<id>", partition_date=...)``; the failure of a
later batch does not take earlier events back.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, dag, get_current_context, task

from airflow_kafka_events.assets.emit import emit_asset_event

BATCHES = Asset(name="e2e_bridge_batches", uri="x-e2e://bridge/batches")


@dag(
    dag_id="e2e_bridge_ingest",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "bridge"],
)
def e2e_bridge_ingest() -> None:
    @task(retries=0)
    def ingest() -> None:
        conf: dict[str, Any] = get_current_context()["dag_run"].conf or {}
        target = Path(conf["dir"])
        for batch in conf["batches"]:
            if batch == conf.get("fail_at"):
                raise RuntimeError(f"batch {batch} could not be processed")
            (target / f"batch-{batch}.json").write_text(json.dumps({"batch": batch, "rows": 100}))
            receipt = emit_asset_event(
                BATCHES,
                partition_key=f"batch-{batch}",
                partition_date=datetime(2026, 1, 31, tzinfo=timezone.utc),
                extra={"batch_id": batch, "rows": 100},
                topic=conf["topic"],
            )
            print(f"published batch-{batch}: {receipt.to_json()}")

    ingest()


e2e_bridge_ingest()

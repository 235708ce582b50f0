"""Contexts built the way Airflow 3.3's Task SDK builds them, and a producer that records sends.

``task_context`` is ``RuntimeTaskInstance.get_template_context()`` of a real task with a real
``TIRunContext`` (what the task runner hands to ``execute`` and to task callbacks);
``dag_callback_context`` follows ``airflow.dag_processing.processor._execute_dag_callbacks``:
the run's last task instance's context plus ``reason`` — or, without a last TI, just
``dag``, ``run_id`` and ``reason``.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.kafka.delivery import DeliveryReceipt

NOW = datetime(2026, 10, 20, 8, 30, tzinfo=timezone.utc)


def _dag_and_task(dag_id: str, task_id: str):
    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator

    with DAG(dag_id, schedule=None) as dag:
        task = BaseOperator(task_id=task_id)
    return dag, task


def consumed_event(name: str, uri: str, extra: dict[str, Any]) -> Any:
    """An ``AssetEventDagRunReference`` as the API server sends it in ``consumed_asset_events``."""
    from airflow.sdk.api.datamodels._generated import AssetEventDagRunReference

    return AssetEventDagRunReference.model_validate(
        {
            "asset": {"name": name, "uri": uri, "extra": {}},
            "extra": extra,
            "source_task_id": None,
            "source_dag_id": None,
            "source_run_id": None,
            "source_map_index": None,
            "source_aliases": [],
            "timestamp": NOW,
            "partition_key": None,
        }
    )


def task_context(
    *,
    dag_id: str = "producer_dag",
    run_id: str = "manual__2026-10-20",
    task_id: str = "ingest",
    try_number: int = 1,
    map_index: int = -1,
    partition_key: str | None = None,
    partition_date: datetime | None = None,
    consumed: list[Any] | None = None,
) -> dict[str, Any]:
    """The template context of a running task instance, built by the SDK itself."""
    from airflow.sdk.api.datamodels._generated import DagRun, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    _, task = _dag_and_task(dag_id, task_id)
    dag_run = DagRun.model_construct(
        dag_id=dag_id,
        run_id=run_id,
        logical_date=None,
        data_interval_start=None,
        data_interval_end=None,
        run_after=NOW,
        start_date=NOW,
        end_date=None,
        run_type="manual",
        state="running",
        conf={},
        consumed_asset_events=consumed or [],
        partition_key=partition_key,
        partition_date=partition_date,
        clear_number=0,
    )
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(),
        task_id=task_id,
        dag_id=dag_id,
        run_id=run_id,
        try_number=try_number,
        map_index=map_index,
        dag_version_id=uuid.uuid4(),
        task=task,
        _ti_context_from_server=TIRunContext.model_construct(dag_run=dag_run, max_tries=3),
    )
    return dict(ti.get_template_context())


def dag_callback_context(*, with_last_ti: bool = True, **kwargs: Any) -> dict[str, Any]:
    """A DAG-level callback's context as Airflow 3.3's DAG processor builds it."""
    if with_last_ti:
        context = task_context(**kwargs)
        context["reason"] = "task_failure"
        return context
    dag, _ = _dag_and_task(kwargs.get("dag_id", "producer_dag"), "ingest")
    return {"dag": dag, "run_id": kwargs.get("run_id", "manual__2026-10-20"), "reason": "success"}


class RecordingProducer:
    """Stands in for ``RecordProducer``: records every send and acknowledges it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_and_wait(self, topic: str, value: bytes | None, **kwargs: Any) -> DeliveryReceipt:
        self.sent.append({"topic": topic, "value": value, **kwargs})
        key = kwargs.get("key")
        return DeliveryReceipt(
            topic=topic,
            partition=0,
            offset=len(self.sent) - 1,
            timestamp_ms=1_792_000_000_123,
            key=key if isinstance(key, bytes) else None,
        )

    def send(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[DeliveryReceipt]:
        future: concurrent.futures.Future[DeliveryReceipt] = concurrent.futures.Future()
        future.set_result(self.send_and_wait(*args, **kwargs))
        return future

    def envelopes(self) -> list[Any]:
        from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC

        return [ASSET_EVENT_CODEC.decode(s["value"]) for s in self.sent]

"""``@task.iterable`` at scale and per-item partitioned fan-out, through a real Airflow.

* 100,000 items iterated by ONE task instance (no map indexes, no ``max_map_length`` cap);
* an iterable task publishing one partitioned asset event per item (``emit_partitions``):
  with the partition bridge running (a subprocess, as in ``tests/e2e/bridge``), the
  ``PartitionedAssetTimetable`` DAG on that asset runs once per item's partition key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from harness.airflow_stack import AirflowStack
from harness.bridge_process import BridgeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SCALE_DAG = "e2e_iterate_scale"
SCALE_ITEMS = 100_000
FANOUT_DAG = "e2e_iterate_fanout"
PROCESS_DAG = "e2e_iterate_fanout_process"
ASSET_EVENTS_TOPIC = "airflow.asset-events"  # where emit_partitions publishes by default


def _ensure_topic(kafka_admin: Any, topic: str, partitions: int = 3) -> None:
    ensure_topics(kafka_admin, [TopicSpec(topic, partitions=partitions)])


def _run(stack: AirflowStack, dag_id: str, conf: dict[str, Any], timeout: float) -> str:
    started = time.monotonic()
    run_id = stack.trigger_dag(dag_id, conf=conf)
    state = stack.wait_for_dag_run(dag_id, run_id, timeout=timeout)
    assert state == "success", (
        f"{dag_id} run {run_id} is {state}; task instances: "
        f"{[(t['task_id'], t['map_index'], t['state']) for t in stack.task_instances(dag_id, run_id)]}\n"
        f"{stack.diagnostics()}"
    )
    print(f"\n{dag_id} run took {time.monotonic() - started:.1f}s")
    return run_id


# --------------------------------------------------------------------------- 100,000 items
def test_one_hundred_thousand_items_in_one_task_instance(airflow_stack: AirflowStack):
    stack = airflow_stack
    stack.wait_dag_parsed(SCALE_DAG, timeout=180)
    run_id = _run(stack, SCALE_DAG, {}, timeout=300)

    rows = stack.query(
        "SELECT map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
        (SCALE_DAG, run_id, "touch"),
    )
    assert [(r["map_index"], r["state"]) for r in rows] == [(-1, "success")], rows
    summary = stack.xcom(SCALE_DAG, run_id, "touch")
    assert (summary["items"], summary["succeeded"], summary["failed"]) == (SCALE_ITEMS, SCALE_ITEMS, 0), {
        k: v for k, v in summary.items() if k != "failed_items"
    }
    assert summary["failed_items"] == [], summary["failed_items"][:10]
    print(f"touch: {summary.get('duration_seconds')}s, {summary.get('items_per_second')} items/s")


# --------------------------------------------------------------------------- partitioned fan-out
@pytest.fixture
def bridge(
    airflow_stack: AirflowStack,
    kafka_bootstrap: str,
    kafka_admin: Any,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> Iterator[BridgeProcess]:
    _ensure_topic(kafka_admin, ASSET_EVENTS_TOPIC)
    dlq = new_topic(partitions=1, prefix="e2e-iterate-dlq")
    # the asset becomes known to the REST API once a DAG using it is parsed
    airflow_stack.wait_dag_parsed(PROCESS_DAG, timeout=180)
    airflow_stack.wait_dag_parsed(FANOUT_DAG, timeout=180)
    group = f"e2e-iterate-bridge-{uuid.uuid4().hex[:8]}"
    running = BridgeProcess(
        airflow_stack,
        kafka_bootstrap,
        topic=ASSET_EVENTS_TOPIC,
        dlq=dlq,
        group=group,
        log_path=tmp_path / "bridge.log",
        assets=["x-e2e://iterate/*"],
        allow=['{"source_kinds": ["task"], "dag_ids": ["e2e_iterate_fanout"]}'],
    )
    try:
        yield running
    finally:
        running.stop()


def _process_runs(stack: AirflowStack, keys: set[str]) -> list[dict[str, Any]]:
    rows = stack.query(
        "SELECT run_id, state, partition_key FROM dag_run WHERE dag_id = ? ORDER BY id", (PROCESS_DAG,)
    )
    return [row for row in rows if row["partition_key"] in keys]


def test_each_item_publishes_a_partition_and_the_partitioned_dag_runs_once_per_item(
    airflow_stack: AirflowStack, bridge: BridgeProcess
):
    stack = airflow_stack
    suffix = uuid.uuid4().hex[:6]
    keys = [f"item-{n}-{suffix}" for n in range(3)]
    run_id = _run(stack, FANOUT_DAG, {"keys": keys}, timeout=300)
    summary = stack.xcom(FANOUT_DAG, run_id, "fan_out")
    assert (summary["items"], summary["succeeded"], summary["failed"]) == (3, 3, 0), summary

    def done() -> list[dict[str, Any]] | None:
        runs = _process_runs(stack, set(keys))
        finished = {r["partition_key"] for r in runs if r["state"] in ("success", "failed")}
        return runs if finished == set(keys) else None

    runs = stack.wait_for(
        done, 300, f"one finished {PROCESS_DAG} run for each of {keys}", ("scheduler", "api-server")
    )
    assert sorted(r["partition_key"] for r in runs) == sorted(keys), (runs, bridge.log()[-3000:])
    assert all(r["state"] == "success" for r in runs), (runs, bridge.log()[-3000:])
    for run in runs:
        seen = stack.xcom(PROCESS_DAG, run["run_id"], "process_partition")
        assert seen["partition_key"] == run["partition_key"], seen

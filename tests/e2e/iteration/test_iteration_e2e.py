"""``@task.iterable`` through a real Airflow (scheduler, workers, triggerer) and Kafka.

Two DAG runs (see ``dags/e2e_iterate.py``):

(a) 200 items iterated in ONE task instance; ``batch(size=3)``: three instances, every item
    exactly once; a further stage iterating the first one's results stream while it is
    written; items of a stream a deferred (``start_from_trigger``) producer writes;
(b) the worker process dies mid-iteration (``os._exit`` at item 121 of try 1): the retry
    runs exactly the items that had not finished -- each item's effect happens once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_kafka_events.streams.descriptor import stream_id
from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

ITEMS = 200


@pytest.fixture
def stack(airflow_stack: AirflowStack, trigger_events_topic: str) -> AirflowStack:
    return airflow_stack


def _run_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


def _numbers(path: Path) -> list[int]:
    return [int(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def _run(stack: AirflowStack, dag_id: str, directory: Path, timeout: float = 420) -> str:
    started = time.monotonic()
    run_id = stack.trigger_dag(dag_id, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(dag_id, run_id, timeout=timeout)
    assert state == "success", (
        f"{dag_id} run {run_id} is {state}; task instances: "
        f"{[(t['task_id'], t['map_index'], t['state']) for t in stack.task_instances(dag_id, run_id)]}\n"
        f"files: { {p.name: p.read_text()[:200] for p in directory.iterdir()} }\n{stack.diagnostics()}"
    )
    print(f"\n{dag_id} run took {time.monotonic() - started:.1f}s")
    return run_id


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_iterate_in_one_task_instance_and_batch_in_three(stack: AirflowStack, tmp_path: Path):
    dag_id = "e2e_iterate_list"
    directory = _run_dir(tmp_path)
    run_id = _run(stack, dag_id, directory)
    tis = stack.task_instances(dag_id, run_id)

    # .iterate(): ONE task instance handled all 200 items, each once
    record = [t for t in tis if t["task_id"] == "record"]
    assert [(t["map_index"], t["state"]) for t in record] == [(-1, "success")], record
    assert sorted(_numbers(directory / "single.txt")) == list(range(ITEMS))
    summary = stack.xcom(dag_id, run_id, "record")
    assert (summary["items"], summary["succeeded"], summary["failed"]) == (ITEMS, ITEMS, 0), summary
    assert summary["results"]["trigger_run_id"] == stream_id(dag_id, run_id, "record")
    assert summary["results"]["results"] == ITEMS and summary["results"]["complete"], summary

    # .batch(size=3).iterate(): three task instances, every item exactly once, by ordinal % 3
    batched = sorted((t["map_index"], t["state"]) for t in tis if t["task_id"] == "record_batched")
    assert batched == [(0, "success"), (1, "success"), (2, "success")], batched
    seen: list[int] = []
    for shard in range(3):
        numbers = _numbers(directory / f"batch-{shard}.txt")
        assert numbers and all(n % 3 == shard for n in numbers), (shard, numbers)
        seen.extend(numbers)
        part = stack.xcom(dag_id, run_id, "record_batched", map_index=shard)
        assert (part["shard"], part["shards"], part["succeeded"]) == (shard, 3, len(numbers)), part
    assert sorted(seen) == list(range(ITEMS))

    # a further stage iterated the results stream of `record` by reference (no DAG edge)
    assert sorted(_numbers(directory / "chained.txt")) == [4 * n for n in range(ITEMS)]
    # and the pages the triggerer wrote for the start_from_trigger producer
    assert sorted(_numbers(directory / "pages.txt")) == list(range(30))


def test_a_worker_killed_mid_iteration_is_retried_and_runs_only_the_unfinished_items(
    stack: AirflowStack, tmp_path: Path
):
    dag_id = "e2e_iterate_retry"
    directory = _run_dir(tmp_path)
    run_id = _run(stack, dag_id, directory)

    try_number, watermark = map(int, (directory / "died").read_text().split())
    assert try_number == 1 and 121 - 50 < watermark <= 121, (try_number, watermark)
    tries = stack.task_instance_tries(dag_id, run_id, "work")
    assert [t["try_number"] for t in tries] == [1, 2] and tries[-1]["state"] == "success", tries

    # every item's effect happened exactly once: try 1 did 0..120, try 2 did 121..199
    effects = _numbers(directory / "effects.txt")
    assert sorted(effects) == list(range(ITEMS)), [n for n in set(effects) if effects.count(n) > 1]
    assert effects[:121] == list(range(121))

    summary = stack.xcom(dag_id, run_id, "work")
    assert summary["resumed"] and summary["skipped"] == 121, summary
    assert summary["succeeded_this_try"] == ITEMS - 121 and summary["succeeded"] == ITEMS, summary
    # items past the stored checkpoint were found in the results stream, not run again (none when
    # the checkpoint had caught up with all 121 just before the kill: the watermark check allows it)
    assert summary["recovered"] == 121 - watermark, (summary, watermark)
    assert summary["results"]["results"] == ITEMS and summary["results"]["complete"], summary

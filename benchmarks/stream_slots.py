"""B9: N producer/consumer pairs on S worker slots, consumers queued first or producers first.

For each slot count S (``[core] parallelism``; one Airflow deployment per S, one broker for all)
and each number of pairs N, runs ``b9_consumers_first_<N>`` and ``b9_producers_first_<N>``
(``benchmarks/dags/b9_stream_slots.py``: each producer streams ``--pages`` pages ``--delay``
seconds apart; each consumer reads its stream by reference, deferrable unless ``--in-worker``),
then the same DAGs with ample slots (parallelism 2 x N, at most 32) as the reference.  Per run:
state, failed task instances, wall time (run queued → ended), defer cycles per consumer
(the consumers' XCom ``deferrals``), and slot occupancy: the task-seconds spent running by
consumers and by producers (from the state-change log) against S x wall.
Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.  Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    AIRFLOW_DEFAULT_HEALTH,
    DAGS_FOLDER,
    airflow_stack_class,
    create_topics,
    kafka_broker,
    say,
)

RUN_TIMEOUT = 1800.0


def _ts(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def occupancy(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Running task-seconds of consumers and producers, from the state-change log rows."""
    held = {"consume": 0.0, "produce": 0.0}
    since: dict[tuple[str, int], float] = {}
    for row in rows:
        task_id, at = row.get("task_id"), _ts(row.get("dttm"))
        if not task_id or at is None:
            continue
        key = (task_id, row.get("map_index") or -1)
        if key in since:
            held[task_id.split("_")[0]] = held.get(task_id.split("_")[0], 0.0) + at - since.pop(key)
        if row.get("event") == "running":
            since[key] = at
    return held


def wait_for_run(stack: Any, dag_id: str, run_id: str) -> str:
    """The run's final state, read from the metadata DB: with 32 task processes on a small machine
    the api-server can take longer than a client's timeout to answer, while the run goes on."""
    deadline = time.monotonic() + RUN_TIMEOUT
    sql = "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?"
    while time.monotonic() < deadline:
        rows = stack.query(sql, (dag_id, run_id))
        if rows and rows[0]["state"] in ("success", "failed"):
            return str(rows[0]["state"])
        time.sleep(1.0)
    return "timed out"


def measure(stack: Any, dag_id: str, pairs: int, slots: int, conf: dict[str, Any]) -> dict[str, Any]:
    run_id = stack.trigger_dag(dag_id, conf=conf)
    state = wait_for_run(stack, dag_id, run_id)
    run = stack.dag_run(dag_id, run_id)
    started, ended = _ts(run.get("queued_at") or run.get("start_date")), _ts(run.get("end_date"))
    wall = None if started is None or ended is None else ended - started
    tis = stack.task_instances(dag_id, run_id)
    failed = sorted(t["task_id"] for t in tis if t["state"] != "success")
    cycles = []
    for i in range(pairs):
        try:
            summary = stack.xcom(dag_id, run_id, f"consume_{i}")
        except Exception:
            summary = None
        if isinstance(summary, dict):
            cycles.append(int(summary.get("deferrals", 0)))
    held = occupancy(stack.state_change_log(dag_id, run_id=run_id))
    result = {
        "dag_id": dag_id,
        "pairs": pairs,
        "slots": slots,
        "state": state,
        "failed": failed,
        "wall_s": wall,
        "defer_cycles_mean": statistics.mean(cycles) if cycles else None,
        "defer_cycles_max": max(cycles) if cycles else None,
        "consumer_task_s": held.get("consume"),
        "producer_task_s": held.get("produce"),
        "slot_s": None if wall is None else wall * slots,
    }
    say(
        f"[run]     {dag_id} on {slots} slot(s): {state}, {len(failed)} not successful, wall "
        f"{wall if wall is None else round(wall, 1)}s, defer cycles mean {result['defer_cycles_mean']} "
        f"max {result['defer_cycles_max']}, running task-s consumers {held.get('consume', 0):.1f} "
        f"producers {held.get('produce', 0):.1f} of {result['slot_s'] and round(result['slot_s'])} slot-s"
    )
    return result


_STACKS = [0]


def n_runs() -> int:
    """A new number per deployment (two deployments may have the same slot count)."""
    _STACKS[0] += 1
    return _STACKS[0]


def run_slots(
    slots: int,
    pair_counts: list[int],
    bootstrap: str,
    conf: dict[str, Any],
    deferrable: bool,
    scratch: Path,
    database: str,
) -> list[dict[str, Any]]:
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(conn),
        "B9_PAIRS": ",".join(map(str, pair_counts)),
        "B9_DEFERRABLE": "true" if deferrable else "false",
        # with 32 task processes on a small machine a heartbeat or an Execution API answer can be late
        # without anything being wrong
        **AIRFLOW_DEFAULT_HEALTH,
    }
    home = scratch / f"airflow-{slots}-{n_runs()}"
    stack = airflow_stack_class()(home, DAGS_FOLDER, env, parallelism=slots, database=database)
    results: list[dict[str, Any]] = []
    try:
        dag_ids = [f"b9_{o}_{n}" for n in pair_counts for o in ("consumers_first", "producers_first")]
        stack.start(timeout=600.0, dag_ids=dag_ids)
        say(f"[airflow] parallelism {slots}: stack healthy")
        for n in pair_counts:
            for order in ("consumers_first", "producers_first"):
                results.append(measure(stack, f"b9_{order}_{n}", n, slots, conf))
    except Exception as exc:  # a deployment that broke down is a result too (its logs are kept)
        say(f"[error]   parallelism {slots}: {type(exc).__name__}: {exc} (logs under {home / 'logs'})")
        results.append({"pairs": pair_counts, "slots": slots, "state": f"broke off: {type(exc).__name__}"})
    finally:
        stack.stop()
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="8,50", help="numbers of pairs (8,50)")
    parser.add_argument("--slots", default="2,4,8", help="worker slot counts (2,4,8)")
    parser.add_argument("--pages", type=int, default=60, help="pages per producer (60)")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between pages (0.05)")
    parser.add_argument("--in-worker", action="store_true", help="consumers with deferrable=False")
    parser.add_argument("--no-reference", action="store_true", help="skip the ample-slots reference")
    parser.add_argument(
        "--max-reference-slots",
        type=int,
        default=32,
        help="cap of the reference slots, 2 x pairs (32; on 2 cores 32 task processes starve Airflow)",
    )
    parser.add_argument(
        "--database",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="metadata DB (postgres: a local server of its own; SQLite locks up with 32 task processes)",
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    pair_counts = [int(n) for n in args.pairs.split(",")]
    slot_counts = [int(s) for s in args.slots.split(",")]
    conf = {"pages": args.pages, "delay": args.delay}

    from airflow_kafka_events.kafka.topics import TopicSpec
    from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

    scratch = Path(tempfile.mkdtemp(prefix="b9-"))
    results: list[dict[str, Any]] = []
    t0 = time.monotonic()
    finished = False
    try:
        with kafka_broker(scratch / "kafka") as broker:
            bootstrap = broker.bootstrap
            create_topics(bootstrap, [TopicSpec(DEFAULT_TOPIC, partitions=3)])
            for slots in slot_counts:
                results += run_slots(
                    slots, pair_counts, bootstrap, conf, not args.in_worker, scratch, args.database
                )
            if not args.no_reference:
                for n in pair_counts:
                    ample = min(2 * n, args.max_reference_slots)
                    results += run_slots(
                        ample, [n], bootstrap, conf, not args.in_worker, scratch, args.database
                    )
        finished = True
    finally:
        if finished and all(r["state"] == "success" for r in results):
            shutil.rmtree(scratch, ignore_errors=True)
        else:  # the Airflow homes (task logs, metadata DB) of a failed or broken-off run are kept
            say(f"[files]   kept {scratch}")
    say(f"[b9]      done in {time.monotonic() - t0:.0f}s")
    for r in results:
        print(json.dumps(r))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0 if all(r["state"] == "success" for r in results) else 1

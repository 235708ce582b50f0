"""B2: ``.expand()`` vs ``.iterate()`` vs ``.batch(size=4).iterate()`` under one real scheduler.

One broker and one Airflow deployment (api-server, scheduler with the LocalExecutor at the
harness's parallelism of 4, triggerer, dag-processor on SQLite) are started once, with
``benchmarks/dags`` as the DAGs folder.  The three DAGs of ``benchmarks/dags/b2_expand_vs_iterate.py``
then run one after the other over the same ``--items`` numbers with the same trivial body:

* ``expand``: dynamic task mapping, one task instance per item;
* ``iterate``: ``@task.iterable``, ONE task instance runs every item;
* ``batch``: ``@task.iterable`` ``.batch(size=4)``, four task instances share the items.

Per variant: the DAG run's wall time (``queued_at`` -> ``end_date`` from the REST API, and the
benchmark's own clock around trigger + wait), the number of task instances of the working task
(metadata DB) and of the whole run, the final state; then the ratios against ``expand``.  A run
that fails or times out is reported as such, never retried.  Uses ``KAFKA_BOOTSTRAP_SERVERS`` or
starts the local broker.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import Environment, airflow_environment, loadavg, machine_at_start, say, write_results
from benchmarks.streaming_vs_classic import _fmt, _seconds

#: variant -> (dag_id, task_id of the working task)
VARIANTS = {
    "expand": ("bench_b2_expand", "work"),
    "iterate": ("bench_b2_iterate", "work_iterated"),
    "batch": ("bench_b2_batch", "work_batched"),
}


@dataclass
class B2Result:
    variant: str
    dag_id: str
    run_id: str
    state: str
    items: int
    work_task_instances: int
    run_task_instances: int
    items_done: int | None
    wall_api_s: float | None
    wall_clock_s: float
    loadavg_end: list[float]


def _items_done(env: Environment, variant: str, dag_id: str, run_id: str, task_id: str, tis: int) -> int:
    stack = env.stack
    if variant == "expand":
        rows = stack.query(
            "SELECT COUNT(*) AS n FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ? "
            "AND state = 'success'",
            (dag_id, run_id, task_id),
        )
        return int(rows[0]["n"])
    if variant == "iterate":
        return int(stack.xcom(dag_id, run_id, task_id)["succeeded"])
    return sum(int(stack.xcom(dag_id, run_id, task_id, map_index=i)["succeeded"]) for i in range(tis))


def run_once(env: Environment, variant: str, items: int, timeout: float) -> B2Result:
    stack = env.stack
    dag_id, task_id = VARIANTS[variant]
    t0 = time.monotonic()
    run_id = stack.trigger_dag(dag_id, conf={"items": items})
    try:
        state = stack.wait_for_dag_run(dag_id, run_id, timeout=timeout)
    except Exception as exc:  # a run past the deadline is reported, not hidden
        say(f"[{variant}] {run_id} did not finish within {timeout:.0f}s: {str(exc).splitlines()[0]}")
        state = "timeout"
        with contextlib.suppress(Exception):
            stack.api(
                "PATCH",
                f"dags/{dag_id}/dagRuns/{run_id}",
                params={"update_mask": "state"},
                json={"state": "failed"},
            )
    wall_clock = time.monotonic() - t0
    run = stack.dag_run(dag_id, run_id)
    work = stack.query(
        "SELECT COUNT(*) AS n FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
        (dag_id, run_id, task_id),
    )
    total = stack.query(
        "SELECT COUNT(*) AS n FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)
    )
    work_tis = int(work[0]["n"])
    done = None
    if state == "success":
        with contextlib.suppress(Exception):
            done = _items_done(env, variant, dag_id, run_id, task_id, work_tis)
    return B2Result(
        variant=variant,
        dag_id=dag_id,
        run_id=run_id,
        state=state,
        items=items,
        work_task_instances=work_tis,
        run_task_instances=int(total[0]["n"]),
        items_done=done,
        wall_api_s=_seconds(run.get("queued_at"), run.get("end_date")),
        wall_clock_s=round(wall_clock, 3),
        loadavg_end=loadavg(),
    )


def summarize(results: list[B2Result]) -> dict[str, Any]:
    by = {r.variant: r for r in results}
    base = by.get("expand")
    ratios: dict[str, Any] = {}
    for variant, r in by.items():
        if variant == "expand" or base is None:
            continue
        ok = base.state == r.state == "success" and base.wall_api_s and r.wall_api_s
        ratios[f"expand_over_{variant}_wall_api"] = round(base.wall_api_s / r.wall_api_s, 2) if ok else None
        ratios[f"expand_over_{variant}_task_instances"] = (
            round(base.work_task_instances / r.work_task_instances, 1) if r.work_task_instances else None
        )
    return {"ratios": ratios}


def print_table(results: list[B2Result], summary: dict[str, Any], items: int) -> None:
    say("")
    say(f"B2 ({items} items, trivial body, LocalExecutor parallelism 4):")
    say(
        f"{'variant':<8} {'state':<8} {'work TIs':>8} {'run TIs':>7} {'items done':>10} "
        f"{'wall(api)':>9} {'wall(own)':>9}"
    )
    for r in results:
        say(
            f"{r.variant:<8} {r.state:<8} {r.work_task_instances:>8} {r.run_task_instances:>7} "
            f"{r.items_done if r.items_done is not None else '-':>10} "
            f"{_fmt(r.wall_api_s):>8}s {_fmt(r.wall_clock_s):>8}s"
        )
    for name, value in summary["ratios"].items():
        say(f"{name}: {_fmt(value, '.2f')}x")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000, help="items per variant (default 1000)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--no-warmup", action="store_true", help="skip the uncounted 2-item warm-up runs")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.items < 1 or not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--items must be >= 1 and --variants a subset of {','.join(VARIANTS)}")

    load_start = machine_at_start()
    results: list[B2Result] = []
    started = time.monotonic()
    dag_ids = [VARIANTS[v][0] for v in variants]
    with airflow_environment(dag_ids, prefix="bench-b2-", keep_home=args.keep_home) as env:
        if not args.no_warmup:
            for variant in variants:
                warm = run_once(env, variant, items=2, timeout=300)
                say(f"[warmup]  {variant}: {warm.state} in {_fmt(warm.wall_api_s)}s (not counted)")
        for variant in variants:
            result = run_once(env, variant, args.items, args.timeout)
            results.append(result)
            say(
                f"[run] {variant:<8} {result.state:<8} work-TIs={result.work_task_instances:<5} "
                f"items-done={result.items_done} wall(api)={_fmt(result.wall_api_s)}s "
                f"wall(own)={_fmt(result.wall_clock_s)}s load={result.loadavg_end}"
            )
        startup = env.started_in
    summary = summarize(results)
    print_table(results, summary, args.items)
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}; benchmark took {time.monotonic() - started:.0f}s")
    if args.out:
        document = {
            "benchmark": "B2 expand vs iterate vs batch(size=4)",
            "items": args.items,
            "stack_startup_s": round(startup, 1),
            "summary": summary,
            "runs": [asdict(r) for r in results],
        }
        write_results(args.out, document, load_start, load_end)
    return 0 if all(r.state == "success" and r.items_done == args.items for r in results) else 1

"""B1: classic per-page deferral vs streaming (one deferral), side by side under a real Airflow.

One broker and one Airflow deployment (api-server, scheduler with the LocalExecutor, triggerer,
dag-processor on SQLite; ``tests/harness/airflow_stack.py``) are started once, with
``benchmarks/dags`` as the DAGs folder.  Then the DAGs of ``benchmarks/dags/bench_paging.py`` (those
``--variants`` names) run alternately, ``--runs`` times each, over the same paginated source
(``--pages`` pages, ``--delay`` seconds of simulated latency each):

* ``classic``: the task defers to a one-page trigger, resumes on a worker with the page, handles
  it and defers again for the next page (one defer/resume cycle per page);
* ``streaming``: the task defers ONCE to ``CountingPagesTrigger``, which writes every page to
  Kafka; the task resumes once and reads the pages back in batches;
* ``floor``: the task defers once to a trigger that fires at once and resumes: one defer/resume
  cycle alone.  The streaming variant's floor is its median wall + ``pages`` x ``delay``; the run
  reports streaming / floor, and each streaming and floor run's phases
  (``benchmarks/deferral_phases.py``).

Per run: the number of ``deferred`` state changes of the task (metadata ``log`` table), the wall
time of the DAG run (``queued_at`` -> ``end_date`` from the REST API, and the benchmark's own clock
around trigger + wait), the final state and the scheduler's ``state mismatch`` log rows (the
upstream race "finished with state success, but the task instance's state attribute is queued"
that can fail a classic run).  Failed runs are counted, never retried or hidden; the medians are
over the runs that succeeded.  Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC
from benchmarks.deferral_phases import median_phases, phases, run_moments
from benchmarks.harness import Environment, airflow_environment, loadavg, machine_at_start, say, write_results

TASK_ID = "fetch_pages"
VARIANTS = {
    "classic": "bench_classic_paging",
    "streaming": "bench_streaming_paging",
    "floor": "bench_defer_floor",
}


# ====================================================================== one run
@dataclass
class RunResult:
    variant: str
    dag_id: str
    run_id: str
    state: str
    deferrals: int
    state_changes: list[str]
    state_mismatches: int
    tries: int
    pages_handled: int | None
    wall_api_s: float | None  # queued_at -> end_date
    wall_clock_s: float  # trigger + wait, the benchmark's own clock
    loadavg_end: list[float]
    #: seconds between the run's moments (benchmarks/deferral_phases.py); not for classic runs
    phases: dict[str, float] = field(default_factory=dict)


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def run_once(env: Environment, variant: str, pages: int, delay: float, timeout: float) -> RunResult:
    stack = env.stack
    dag_id = VARIANTS[variant]
    if variant == "floor":  # one page that is there at once: the defer/resume cycle alone
        pages, delay = 1, 0.0
    t0 = time.monotonic()
    run_id = stack.trigger_dag(dag_id, conf={"pages": pages, "delay": delay})
    try:
        state = stack.wait_for_dag_run(dag_id, run_id, timeout=timeout)
    except Exception as exc:  # a run stuck past the deadline is a failure too
        say(f"[{variant}] {run_id} did not finish within {timeout:.0f}s: {str(exc).splitlines()[0]}")
        state = "timeout"
        with contextlib.suppress(Exception):  # let the next run start
            stack.api(
                "PATCH",
                f"dags/{dag_id}/dagRuns/{run_id}",
                params={"update_mask": "state"},
                json={"state": "failed"},
            )
    wall_clock = time.monotonic() - t0
    run = stack.dag_run(dag_id, run_id)
    rows = stack.state_change_log(dag_id, run_id=run_id, task_id=TASK_ID)
    events = [str(r.get("event")) for r in rows]
    mismatches = len(stack.state_change_log(dag_id, run_id=run_id, events=["state mismatch"]))
    pages_handled = None
    if state == "success":
        with contextlib.suppress(Exception):
            pages_handled = int(stack.xcom(dag_id, run_id, TASK_ID)["pages"])
    tries = len(stack.task_instance_tries(dag_id, run_id, TASK_ID))
    spans: dict[str, float] = {}
    if variant != "classic" and state == "success":
        with contextlib.suppress(Exception):  # a moment that cannot be read leaves the phases out
            spans = phases(run_moments(stack, dag_id, run_id, TASK_ID, env.bootstrap, DEFAULT_TOPIC))
    return RunResult(
        variant=variant,
        dag_id=dag_id,
        run_id=run_id,
        state=state,
        deferrals=events.count("deferred"),
        state_changes=events,
        state_mismatches=mismatches,
        tries=tries,
        pages_handled=pages_handled,
        wall_api_s=_seconds(run.get("queued_at"), run.get("end_date")),
        wall_clock_s=round(wall_clock, 3),
        loadavg_end=loadavg(),
        phases=spans,
    )


# ====================================================================== report
def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(results: list[RunResult], pages: int, delay: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        mine = [r for r in results if r.variant == variant]
        expected = 1 if variant == "floor" else pages
        ok = [r for r in mine if r.state == "success" and r.pages_handled == expected]
        out[variant] = {
            "runs": len(mine),
            "succeeded": len(ok),
            "failures": len(mine) - len(ok),
            "failed_states": [r.state for r in mine if r not in ok],
            "state_mismatches": sum(r.state_mismatches for r in mine),
            "deferrals_per_run": [r.deferrals for r in mine],
            "median_deferrals_ok": _median(r.deferrals for r in ok),
            "median_wall_api_s": _median(r.wall_api_s for r in ok),
            "median_wall_clock_s": _median(r.wall_clock_s for r in ok),
            "wall_api_s_ok": [r.wall_api_s for r in ok],
            "wall_clock_s_ok": [r.wall_clock_s for r in ok],
            "median_phases_s": median_phases([r.phases for r in ok if r.phases]),
        }
    classic, streaming = out["classic"]["median_wall_api_s"], out["streaming"]["median_wall_api_s"]
    cycle = out["floor"]["median_wall_api_s"]
    floor = None if cycle is None else cycle + pages * delay
    out["ratio"] = {
        "classic_over_streaming_median_wall_api": classic / streaming if classic and streaming else None,
        "floor_s": floor,
        "streaming_over_floor": streaming / floor if streaming and floor else None,
    }
    return out


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(
    results: list[RunResult], summary: dict[str, dict[str, Any]], pages: int, delay: float
) -> None:
    say("")
    say(f"B1 per run ({pages} pages x {delay * 1000:.0f} ms):")
    say(
        f"{'variant':<10} {'run_id':<44} {'state':<8} {'defer':>5} {'mism':>4} "
        f"{'wall(api)':>9} {'wall(own)':>9}"
    )
    for r in results:
        say(
            f"{r.variant:<10} {r.run_id:<44} {r.state:<8} {r.deferrals:>5} {r.state_mismatches:>4} "
            f"{_fmt(r.wall_api_s):>8}s {_fmt(r.wall_clock_s):>8}s"
        )
    say("")
    say(
        f"{'variant':<10} {'runs':>4} {'ok':>3} {'fail':>4} {'mismatch':>8} {'deferrals':>9} "
        f"{'median wall (api)':>18} {'median wall (own)':>18}"
    )
    for variant in VARIANTS:
        s = summary[variant]
        say(
            f"{variant:<10} {s['runs']:>4} {s['succeeded']:>3} {s['failures']:>4} {s['state_mismatches']:>8} "
            f"{_fmt(s['median_deferrals_ok'], '.0f'):>9} {_fmt(s['median_wall_api_s']):>17}s "
            f"{_fmt(s['median_wall_clock_s']):>17}s"
        )
    ratio = summary["ratio"]
    say(
        "ratio classic/streaming of the median wall time (queued -> end): "
        f"{_fmt(ratio['classic_over_streaming_median_wall_api'])}x"
    )
    print_phases(summary)
    say(
        f"floor (median defer/resume cycle + {pages} x {delay * 1000:.0f} ms): "
        f"{_fmt(ratio['floor_s'], '.2f')}s; streaming/floor: {_fmt(ratio['streaming_over_floor'], '.2f')}x"
    )


def print_phases(summary: dict[str, dict[str, Any]]) -> None:
    """The median seconds between a run's moments, streaming and floor side by side."""
    streaming, floor = summary["streaming"]["median_phases_s"], summary["floor"]["median_phases_s"]
    if not streaming and not floor:
        return
    say("")
    say(f"{'median phase (s)':<32} {'streaming':>9} {'floor':>9}")
    for name in [*streaming, *(n for n in floor if n not in streaming)]:
        say(f"{name:<32} {_fmt(streaming.get(name), '.3f'):>9} {_fmt(floor.get(name), '.3f'):>9}")
    say("")


# ====================================================================== main
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100, help="pages of the source (default 100)")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds of latency per page (0.02)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant, alternating (3)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--no-warmup", action="store_true", help="skip the uncounted 2-page warm-up runs")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated variants to run, alternating (default {','.join(VARIANTS)}; "
        "classic takes minutes)",
    )
    args = parser.parse_args(argv)
    if args.pages < 1 or args.runs < 1 or args.delay < 0:
        parser.error("--pages and --runs must be >= 1, --delay >= 0")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")

    load_start = machine_at_start()
    results: list[RunResult] = []
    started = time.monotonic()
    dag_ids = [VARIANTS[v] for v in variants]
    with airflow_environment(dag_ids, prefix="bench-b1-", keep_home=args.keep_home) as env:
        if not args.no_warmup:
            for variant in variants:
                warm = run_once(env, variant, pages=2, delay=0.0, timeout=300)
                say(f"[warmup]  {variant}: {warm.state} in {_fmt(warm.wall_api_s)}s (not counted)")
        for i in range(args.runs):
            for variant in variants:
                per_page = 15.0 if variant == "classic" else 0.5
                timeout = max(300.0, args.pages * (args.delay + per_page))
                result = run_once(env, variant, args.pages, args.delay, timeout)
                results.append(result)
                say(
                    f"[run {i + 1}/{args.runs}] {variant:<9} {result.state:<8} "
                    f"deferrals={result.deferrals:<4} wall(api)={_fmt(result.wall_api_s)}s "
                    f"wall(own)={_fmt(result.wall_clock_s)}s "
                    f"pages={result.pages_handled} state-mismatch={result.state_mismatches} "
                    f"load={result.loadavg_end}"
                )
        startup = env.started_in
    summary = summarize(results, args.pages, args.delay)
    print_table(results, summary, args.pages, args.delay)
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}; benchmark took {time.monotonic() - started:.0f}s")
    if args.out:
        document = {
            "benchmark": "B1 classic per-page deferral vs streaming",
            "pages": args.pages,
            "delay_s": args.delay,
            "runs_per_variant": args.runs,
            "stack_startup_s": round(startup, 1),
            "summary": summary,
            "runs": [asdict(r) for r in results],
        }
        write_results(args.out, document, load_start, load_end)
    return 0 if all(summary[v]["succeeded"] == summary[v]["runs"] for v in variants) else 1

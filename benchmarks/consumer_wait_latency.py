"""B14: the latency a consumer's way of waiting adds to a page that comes while it waits.

One broker and one Airflow deployment (``--topology``: ``production``, PostgreSQL + CeleryExecutor
on Redis with two workers and two triggerers, as CI's e2e tests; or ``embedded``, SQLite +
LocalExecutor) run ``b14_consumer_wait`` (``benchmarks/dags/b14_consumer_wait.py``): three
consumers of one stream side by side, the same operator with its defaults except how it waits:
**rescheduled** (the default: no ``deferrable`` argument, Airflow's ``default_deferrable`` off),
**deferred** (``deferrable=True``) and **in-worker** (``reschedule=False``).  Two cases, alternating,
``--runs`` times each:

* **late producer**: the producer starts ``--late`` seconds after the consumers (an upstream task
  sleeps), so each consumer first finds nothing of the stream written.  Measured: page 0 written ->
  handled.
* **idle, then resumes**: the producer writes ``--gate-page`` pages, then stops until the benchmark
  writes its gate file, which it does once the rescheduled consumer is ``up_for_reschedule`` and the
  deferred one ``deferred`` (both gave their slots back after their ``idle_interval``: 10 s and 1 s by
  default).  Measured: the first page after the pause written -> handled.

Latency of a page = handler time - the envelope's ``emitted_at`` (stamped before the write, so a
page's latency includes its write).  Also per consumer: p50 and max over all pages, the slot
give-backs (``reschedules`` / ``deferrals`` of its XCom), and the ratio of each mode's figure to the
in-worker one's.  Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.  Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from airflow_kafka_events.streams.descriptor import stream_id
from benchmarks.first_page_latency import emitted_times, percentile
from benchmarks.harness import airflow_environment, loadavg, say, write_results

DAG_ID = "b14_consumer_wait"
PRODUCER = "produce"
MODES = {"rescheduled": "consume_reschedule", "deferred": "consume_defer", "in-worker": "consume_in_worker"}
CASES = ("late-producer", "idle-resume")
#: the state each consumer is in once it gave its slot back (the in-worker one never does)
GAVE_BACK = {"consume_reschedule": "up_for_reschedule", "consume_defer": "deferred"}


def _handled(path: Path, attempt: int | None = None) -> dict[int, float]:
    """seq -> when the consumer's handler got the page (the first time), for the stream's attempt
    (None: any)."""
    out: dict[int, float] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if attempt is None or row["attempt"] == attempt:
                out.setdefault(row["seq"], row["at"])
    return out


def _open_gate_when_idle(
    env: Any, run_id: str, run_dir: Path, gate_page: int, timeout: float
) -> dict[str, Any]:
    """Wait until every consumer handled the pages before the pause and the slot-releasing ones gave
    their slots back; then write the gate file.  Returns what the consumers were doing then."""
    stack = env.stack

    def ready() -> dict[str, str] | None:
        if any(len(_handled(run_dir / f"{t}.jsonl")) < gate_page for t in MODES.values()):
            return None
        states = {ti["task_id"]: ti["state"] for ti in stack.task_instances(DAG_ID, run_id)}
        if any(states.get(task_id) != state for task_id, state in GAVE_BACK.items()):
            return None
        return states

    states = stack.wait_for(
        ready, timeout, "every consumer idle after the pages before the pause", interval=0.2
    )
    (run_dir / "gate").write_text("open")
    return {"opened_at": time.time(), "states": {t: states.get(t) for t in MODES.values()}}


def measure_run(env: Any, case: str, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    stack = env.stack
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o777)
    conf: dict[str, Any] = {"dir": str(run_dir), "pages": args.pages, "delay": args.delay, "late": 0}
    if case == "late-producer":
        conf["late"] = args.late
        watched = 0
    else:
        conf["gate_page"] = args.gate_page
        watched = args.gate_page
    t0 = time.monotonic()
    run_id = stack.trigger_dag(DAG_ID, conf=conf)
    gate = None
    if case == "idle-resume":
        gate = _open_gate_when_idle(env, run_id, run_dir, args.gate_page, timeout=300.0)
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=600.0)
    wall = time.monotonic() - t0
    tis = {ti["task_id"]: ti for ti in stack.task_instances(DAG_ID, run_id)}
    emitted = emitted_times(env.settings, stream_id(DAG_ID, run_id, PRODUCER))
    pages: dict[int, float] = emitted["pages"]
    consumers: dict[str, Any] = {}
    for mode, task_id in MODES.items():
        handled = _handled(run_dir / f"{task_id}.jsonl", emitted["attempt"])
        latencies = [at - pages[seq] for seq, at in handled.items() if seq in pages]
        summary = stack.xcom(DAG_ID, run_id, task_id) if tis[task_id]["state"] == "success" else None
        summary = summary if isinstance(summary, dict) else {}
        consumers[mode] = {
            "task_id": task_id,
            "state": tis[task_id]["state"],
            "pages_handled": len(handled),
            "watched_page": watched,
            "watched_latency_s": (
                round(handled[watched] - pages[watched], 3)
                if watched in handled and watched in pages
                else None
            ),
            "p50_s": round(percentile(latencies, 50), 3) if latencies else None,
            "max_s": round(max(latencies), 3) if latencies else None,
            "reschedules": summary.get("reschedules"),
            "deferrals": summary.get("deferrals"),
        }
    result = {
        "case": case,
        "run_id": run_id,
        "state": state,
        "wall_s": round(wall, 1),
        "pages_in_kafka": len(pages),
        "gate": gate,
        "consumers": consumers,
        "loadavg_end": loadavg(),
    }
    print_run(result)
    return result


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def print_run(result: dict[str, Any]) -> None:
    consumers = result["consumers"]
    base = consumers["in-worker"]["watched_latency_s"]
    say(
        f"[run]     {result['case']}: {result['state']} in {result['wall_s']}s, "
        f"{result['pages_in_kafka']} pages; load {result['loadavg_end']}"
        + (f"; gate opened with {result['gate']['states']}" if result["gate"] else "")
    )
    for mode, c in consumers.items():
        latency = c["watched_latency_s"]
        ratio = "-" if latency is None or not base else f"{latency / base:.1f}x"
        give_backs = c["reschedules"] if c["reschedules"] is not None else c["deferrals"]
        say(
            f"          {mode:<12} {c['state']:<8} page {c['watched_page']} written -> handled "
            f"{_s(latency):>8} ({ratio} of in-worker)  p50 {_s(c['p50_s'])} max {_s(c['max_s'])}  "
            f"{c['pages_handled']} pages, slot given back {'-' if give_backs is None else give_backs}x"
        )


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per case and mode: the median of the watched page's latency over the runs, and its ratio to
    the in-worker median."""
    out: dict[str, dict[str, Any]] = {}
    for case in CASES:
        runs = [r for r in results if r["case"] == case]
        medians = {}
        for mode in MODES:
            values = [r["consumers"][mode]["watched_latency_s"] for r in runs]
            values = [v for v in values if v is not None]
            medians[mode] = round(statistics.median(values), 3) if values else None
        base = medians["in-worker"]
        out[case] = {
            mode: {
                "median_s": m,
                "ratio_to_in_worker": None if m is None or not base else round(m / base, 1),
            }
            for mode, m in medians.items()
        }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each case, alternating (2)")
    parser.add_argument("--pages", type=int, default=40, help="pages the producer writes (40)")
    parser.add_argument("--delay", type=float, default=0.25, help="seconds between pages (0.25)")
    parser.add_argument("--late", type=float, default=20.0, help="seconds the producer starts late (20)")
    parser.add_argument("--gate-page", type=int, default=5, help="the page written after the pause (5)")
    parser.add_argument("--topology", choices=("production", "embedded"), default="production")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    args = parser.parse_args(argv)
    if args.runs < 1 or not 0 < args.gate_page < args.pages or args.late < 0:
        parser.error("--runs >= 1, 0 < --gate-page < --pages, --late >= 0")

    load_start = loadavg()
    say(f"[machine] {os.cpu_count()} CPUs, load average {load_start}; topology {args.topology}")
    results: list[dict[str, Any]] = []
    with airflow_environment(
        [DAG_ID], prefix="bench-b14-", keep_home=args.keep_home, topology=args.topology
    ) as env:
        for i in range(args.runs):
            for case in CASES:
                results.append(measure_run(env, case, args, env.home / f"b14-{case}-{i + 1}"))
    load_end = loadavg()
    summary = summarize(results)
    say("")
    say("page written -> handled, median over the runs (ratio to in-worker):")
    for case, modes in summary.items():
        cells = [
            f"{mode} {_s(v['median_s'])} ({v['ratio_to_in_worker'] or '-'}x)" for mode, v in modes.items()
        ]
        say(f"  {case:<14} " + ", ".join(cells))
    say(f"[machine] load average at the end {load_end}")
    if args.out:
        document = {
            "benchmark": "B14 consumer waiting modes: page written -> handled",
            "topology": args.topology,
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "runs": results,
            "summary": summary,
        }
        write_results(args.out, document, load_start, load_end)
    ok = all(
        r["state"] == "success" and all(c["pages_handled"] == args.pages for c in r["consumers"].values())
        for r in results
    )
    return 0 if ok else 1

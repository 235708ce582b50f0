"""B13: N concurrent streams in ONE triggerer, each read by a consumer that defers while idle.

For each number of pairs N (``--pairs``, default 20 then 200; one Airflow deployment per N, one
broker for all) runs ``b13_streams_<N>`` (``benchmarks/dags/b13_many_streams.py``): N producers
started in the triggerer (``StreamingTriggerOperator``, ``CountingPagesTrigger``: ``--pages``
pages ``--delay`` seconds apart) and N deferrable consumers reading them by reference, on
``--slots`` worker slots, ONE triggerer, a PostgreSQL metadata DB of its own.  Every stream writes
page 0, then waits at a gate; the benchmark opens the gate once every producer is deferred and
every consumer has handled page 0 and deferred again (idle), so all N streams are open in the
triggerer at once and their remaining pages flow together.

Per N: the run's state and wall time (queued → end), every task instance's state, each
consumer's defer cycles (its XCom), the phases (queued → gate open → last producer done → end),
the triggerer's memory (its process and the trigger runner it starts: RSS sampled every
``--sample`` seconds; before the run, peak, with every stream open at the gate, at the end) and
CPU seconds (whole run and the streaming phase), the librdkafka clients in the triggerer (one
``rdk:main`` thread per client: the producers plus the deferred consumers' readers; after the
run only the process's producers are left), and per-stream costs (RSS growth, CPU, wall per
stream) to compare the Ns.  Correctness: each consumer's handler records the pages it handled;
every stream must have every page once and in order.
Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.  Not run in CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cpu_accounting import _tree_cpu
from benchmarks.harness import (
    AIRFLOW_DEFAULT_HEALTH,
    DAGS_FOLDER,
    airflow_stack_class,
    create_topics,
    kafka_broker,
    loadavg,
    machine_at_start,
    say,
    write_results,
)
from benchmarks.stream_slots import _ts

MIB = 1024 * 1024


# ====================================================================== the triggerer's processes
def _rdk_threads(pid: int) -> dict[str, int]:
    """librdkafka threads of process ``pid`` by name (``rdk:main``: one per client)."""
    out: dict[str, int] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("rdk:"):
            kind = "rdk:broker" if name.startswith("rdk:broker") else name
            out[kind] = out.get(kind, 0) + 1
    return out


def triggerer_sample(root: int) -> dict[str, Any]:
    """The triggerer's processes now: RSS, threads and librdkafka clients of each and in all."""
    import psutil

    procs: list[dict[str, Any]] = []
    try:
        top = psutil.Process(root)
        members = [top, *top.children(recursive=True)]
    except psutil.Error:
        return {"rss_mib": None, "processes": []}
    for proc in members:
        try:
            with proc.oneshot():
                rss, threads, fds = proc.memory_info().rss, proc.num_threads(), proc.num_fds()
                name = " ".join(x for x in proc.cmdline() if x).replace(sys.executable, "python")[-60:]
        except psutil.Error:
            continue
        rdk = _rdk_threads(proc.pid)
        procs.append(
            {
                "pid": proc.pid,
                "name": name,
                "rss_mib": round(rss / MIB, 1),
                "threads": threads,
                "fds": fds,
                "kafka_clients": rdk.get("rdk:main", 0),
            }
        )
    # the trigger runner: the process that holds the Kafka clients (else the largest child)
    runner = max(procs[1:] or procs, key=lambda p: (p["kafka_clients"], p["rss_mib"]), default=None)
    return {
        "rss_mib": round(sum(p["rss_mib"] for p in procs), 1),
        "runner_rss_mib": runner and runner["rss_mib"],
        "kafka_clients": sum(p["kafka_clients"] for p in procs),
        "threads": sum(p["threads"] for p in procs),
        "fds": sum(p["fds"] for p in procs),
        "processes": procs,
    }


# ====================================================================== one run
@dataclass
class Watch:
    """What the benchmark saw of one run while it went (samples of the triggerer, the phases)."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    gate_opened: float | None = None  # wall-clock epoch seconds
    gate_forced: bool = False
    at_gate: dict[str, Any] | None = None
    producers_done: float | None = None
    cpu_at_gate: float | None = None
    cpu_at_producers_done: float | None = None
    most_deferred: dict[str, int] = field(default_factory=lambda: {"produce": 0, "consume": 0})


def _states(stack: Any, dag_id: str, run_id: str) -> dict[str, str | None]:
    rows = stack.query(
        "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)
    )
    return {str(r["task_id"]): r["state"] for r in rows}


def _page_zero_handled(records: Path, pairs: int) -> int:
    """How many consumers have recorded a page (page 0 comes before the gate)."""
    return sum(1 for i in range(pairs) if (records / f"consume_{i}.txt").exists())


def watch_run(
    stack: Any, dag_id: str, run_id: str, pairs: int, gate: Path, records: Path, args: argparse.Namespace
) -> tuple[str, Watch]:
    """Sample the triggerer and open the gate when every stream is open and every consumer idle."""
    watch = Watch()
    root = stack.pid("triggerer")
    deadline = time.monotonic() + args.timeout
    gate_deadline = time.monotonic() + args.gate_after
    state = "timed out"
    next_log = 0.0
    ready_since: float | None = None
    while time.monotonic() < deadline:
        sample = {"t": time.time(), **triggerer_sample(root), "cpu_s": round(_tree_cpu(root), 2)}
        sample.pop("processes")
        states = _states(stack, dag_id, run_id)
        deferred = {
            role: sum(1 for t, s in states.items() if t.startswith(role) and s == "deferred")
            for role in ("produce", "consume")
        }
        done = sum(1 for t, s in states.items() if t.startswith("produce") and s in ("success", "failed"))
        sample.update(deferred_producers=deferred["produce"], deferred_consumers=deferred["consume"])
        watch.samples.append(sample)
        for role, count in deferred.items():
            watch.most_deferred[role] = max(watch.most_deferred[role], count)
        if watch.gate_opened is None:
            ready = (
                deferred["produce"] == pairs
                and deferred["consume"] == pairs
                and _page_zero_handled(records, pairs) == pairs
            )
            ready_since = (ready_since or time.monotonic()) if ready else None
            held = ready_since is not None and time.monotonic() - ready_since >= args.gate_hold
            if held or time.monotonic() > gate_deadline:
                watch.gate_forced = not ready
                watch.at_gate = {**triggerer_sample(root), "deferred": deferred}
                watch.cpu_at_gate = _tree_cpu(root)
                gate.touch()
                watch.gate_opened = time.time()
                forced = " (forced: not every stream open and consumer idle)" if watch.gate_forced else ""
                say(
                    f"[gate]    {dag_id}: opened{forced} with {deferred['produce']} producers and "
                    f"{deferred['consume']} consumers deferred; triggerer {watch.at_gate['rss_mib']} MiB, "
                    f"{watch.at_gate['kafka_clients']} Kafka clients"
                )
        elif watch.producers_done is None and done == pairs:
            watch.producers_done = time.time()
            watch.cpu_at_producers_done = _tree_cpu(root)
        if time.monotonic() >= next_log:
            next_log = time.monotonic() + 30.0
            counts: dict[str, int] = {}
            for s in states.values():
                counts[str(s)] = counts.get(str(s), 0) + 1
            say(
                f"[watch]   {dag_id}: {counts}; triggerer {sample['rss_mib']} MiB, "
                f"{sample['kafka_clients']} Kafka clients, {sample['threads']} threads, {sample['fds']} fds, "
                f"load {loadavg()}"
            )
        rows = stack.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", (dag_id, run_id))
        if rows and rows[0]["state"] in ("success", "failed"):
            state = str(rows[0]["state"])
            break
        time.sleep(args.sample)
    return state, watch


def check_records(records: Path, pairs: int, pages: int) -> dict[str, Any]:
    """Every consumer's handled pages against 0 .. pages-1, once each, in order."""
    complete, missing, duplicates, out_of_order = 0, 0, 0, 0
    bad: list[dict[str, int]] = []
    for i in range(pairs):
        path = records / f"consume_{i}.txt"
        seen = (
            [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines()]
            if path.exists()
            else []
        )
        indices = [s for s, _page in seen]
        wrong_payload = sum(1 for s, page in seen if s != page)
        lost = len(set(range(pages)) - set(indices))
        twice = len(indices) - len(set(indices))
        unordered = sum(1 for a, b in itertools.pairwise(indices) if b <= a)
        missing, duplicates, out_of_order = missing + lost, duplicates + twice, out_of_order + unordered
        if indices == list(range(pages)) and not wrong_payload:
            complete += 1
        elif len(bad) < 10:
            bad.append(
                {
                    "consumer": i,
                    "handled": len(indices),
                    "missing": lost,
                    "twice": twice,
                    "unordered": unordered,
                }
            )
    return {
        "streams_complete_once_in_order": complete,
        "pages_missing": missing,
        "pages_twice": duplicates,
        "out_of_order": out_of_order,
        "bad_streams": bad,
        "ok": complete == pairs,
    }


def _deferrals(stack: Any, dag_id: str, run_id: str) -> list[int]:
    rows = stack.query(
        "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
        (dag_id, run_id),
    )
    cycles = []
    for row in rows:
        if not str(row["task_id"]).startswith("consume_"):
            continue
        value = row["value"]
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                continue
        if isinstance(value, dict) and "deferrals" in value:
            cycles.append(int(value["deferrals"]))
    return cycles


def measure(stack: Any, pairs: int, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    dag_id = f"b13_streams_{pairs}"
    records, gate = scratch / "records" / str(pairs), scratch / "records" / f"gate-{pairs}"
    stack.wait_dag_parsed(dag_id, timeout=300.0)
    root = stack.pid("triggerer")
    before = triggerer_sample(root)
    cpu0, load_start = _tree_cpu(root), loadavg()
    say(
        f"[run]     {dag_id}: triggerer before the run {before['rss_mib']} MiB, "
        f"{before['kafka_clients']} Kafka clients"
    )
    run_id = stack.trigger_dag(dag_id)
    state, watch = watch_run(stack, dag_id, run_id, pairs, gate, records, args)
    cpu_end, end_sample = _tree_cpu(root), triggerer_sample(root)
    time.sleep(args.settle)  # the finished triggers' readers close; the process's producers stay
    settled = triggerer_sample(root)
    run = stack.query(
        "SELECT queued_at, start_date, end_date FROM dag_run WHERE dag_id = ? AND run_id = ?",
        (dag_id, run_id),
    )[0]
    queued, ended = _ts(run.get("queued_at") or run.get("start_date")), _ts(run.get("end_date"))
    wall = None if queued is None or ended is None else ended - queued
    states = _states(stack, dag_id, run_id)
    not_ok = sorted(t for t, s in states.items() if s != "success")
    cycles = _deferrals(stack, dag_id, run_id)
    check = check_records(records, pairs, args.pages)
    peak = max(watch.samples, key=lambda s: s["rss_mib"] or 0.0, default=end_sample)
    runner_peak = max((s["runner_rss_mib"] or 0.0 for s in watch.samples), default=None)
    growth = None if peak["rss_mib"] is None else peak["rss_mib"] - before["rss_mib"]
    streaming = (
        None
        if watch.gate_opened is None or watch.producers_done is None
        else watch.producers_done - watch.gate_opened
    )
    result: dict[str, Any] = {
        "dag_id": dag_id,
        "pairs": pairs,
        "pages": args.pages,
        "delay_s": args.delay,
        "slots": args.slots,
        "state": state,
        "task_instances": {
            "total": len(states),
            "not_successful": not_ok[:20],
            "not_successful_count": len(not_ok),
        },
        "wall_s": wall,
        "phases_s": {
            "queued_to_gate": None
            if watch.gate_opened is None or queued is None
            else watch.gate_opened - queued,
            "gate_to_producers_done": streaming,
            "producers_done_to_end": None
            if watch.producers_done is None or ended is None
            else ended - watch.producers_done,
        },
        "gate_forced": watch.gate_forced,
        "most_deferred_at_once": watch.most_deferred,
        "defer_cycles": {
            "consumers_reporting": len(cycles),
            "mean": round(sum(cycles) / len(cycles), 2) if cycles else None,
            "max": max(cycles, default=None),
        },
        "triggerer": {
            "rss_mib_before": before["rss_mib"],
            "rss_mib_peak": peak["rss_mib"],
            "rss_mib_at_gate": watch.at_gate and watch.at_gate["rss_mib"],
            "rss_mib_end": end_sample["rss_mib"],
            "rss_mib_settled": settled["rss_mib"],
            "runner_rss_mib_before": before["runner_rss_mib"],
            "runner_rss_mib_peak": runner_peak,
            "runner_rss_mib_at_gate": watch.at_gate and watch.at_gate["runner_rss_mib"],
            "processes_at_gate": watch.at_gate and watch.at_gate["processes"],
            "threads_peak": max((s["threads"] for s in watch.samples), default=None),
            "fds_peak": max((s["fds"] for s in watch.samples), default=None),
            "cpu_s": round(cpu_end - cpu0, 1),
            "cpu_s_streaming": None
            if watch.cpu_at_gate is None or watch.cpu_at_producers_done is None
            else round(watch.cpu_at_producers_done - watch.cpu_at_gate, 1),
            "kafka_clients_before": before["kafka_clients"],
            "kafka_clients_at_gate": watch.at_gate and watch.at_gate["kafka_clients"],
            "kafka_clients_peak": max((s["kafka_clients"] for s in watch.samples), default=None),
            "kafka_clients_settled": settled["kafka_clients"],
        },
        "per_stream": {
            "rss_growth_kib": None if growth is None else round(growth * 1024 / pairs, 1),
            "runner_rss_growth_kib": None
            if runner_peak is None or before["runner_rss_mib"] is None
            else round((runner_peak - before["runner_rss_mib"]) * 1024 / pairs, 1),
            "cpu_ms": round((cpu_end - cpu0) * 1000 / pairs, 1),
            "cpu_ms_streaming": None
            if watch.cpu_at_gate is None or watch.cpu_at_producers_done is None
            else round((watch.cpu_at_producers_done - watch.cpu_at_gate) * 1000 / pairs, 1),
            "wall_s": None if wall is None else round(wall / pairs, 3),
        },
        "records": check,
        "load_start": load_start,
        "load_end": loadavg(),
        "samples": [{k: v for k, v in s.items()} for s in watch.samples],
    }
    gate_s, per = result["phases_s"]["queued_to_gate"], result["per_stream"]
    say(
        f"[run]     {dag_id}: {state}, {len(not_ok)} of {len(states)} task instances not successful, "
        f"wall {wall and round(wall, 1)}s (gate {gate_s and round(gate_s, 1)}s, "
        f"streaming {streaming and round(streaming, 1)}s); triggerer RSS {before['rss_mib']} → peak "
        f"{peak['rss_mib']} MiB ({per['rss_growth_kib']} KiB/stream), CPU {result['triggerer']['cpu_s']}s "
        f"({per['cpu_ms']} ms/stream); Kafka clients at the gate "
        f"{result['triggerer']['kafka_clients_at_gate']}, after the run {settled['kafka_clients']}"
    )
    say(
        f"[records] {dag_id}: {check['streams_complete_once_in_order']}/{pairs} streams complete, once, in "
        f"order; {check['pages_missing']} pages missing, {check['pages_twice']} twice, "
        f"{check['out_of_order']} out of order; load {loadavg()}"
    )
    return result


def run_deployment(pairs: int, bootstrap: str, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(conn),
        "B13_PAIRS": str(pairs),
        "B13_PAGES": str(args.pages),
        "B13_DELAY": str(args.delay),
        "B13_DIR": str(scratch / "records"),
        # with the harness's 15 s a scheduler whose own heartbeat came late under load marked its job
        # failed and reset the task instances it was running as orphans (seen at 200 pairs)
        **AIRFLOW_DEFAULT_HEALTH,
    }
    home = scratch / f"airflow-{pairs}"
    stack = airflow_stack_class()(home, DAGS_FOLDER, env, parallelism=args.slots, database="postgres")
    try:
        stack.start(timeout=600.0, dag_ids=[f"b13_streams_{pairs}"])
        say(f"[airflow] {pairs} pairs, parallelism {args.slots}: stack healthy")
        return measure(stack, pairs, scratch, args)
    except Exception as exc:  # a deployment that broke down is a result too (its logs are kept)
        say(f"[error]   {pairs} pairs: {type(exc).__name__}: {exc} (logs under {home / 'logs'})")
        return {"pairs": pairs, "state": f"broke off: {type(exc).__name__}: {exc}"}
    finally:
        stack.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="20,200", help="numbers of producer/consumer pairs (20,200)")
    parser.add_argument("--pages", type=int, default=50, help="pages per stream (50)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds between pages (0.2)")
    parser.add_argument("--slots", type=int, default=8, help="worker slots, [core] parallelism (8)")
    parser.add_argument("--sample", type=float, default=1.0, help="seconds between samples (1)")
    parser.add_argument(
        "--gate-after",
        type=float,
        default=1200.0,
        help="open the gate after this many seconds even if not every stream is open (1200)",
    )
    parser.add_argument(
        "--gate-hold",
        type=float,
        default=5.0,
        help="seconds every stream must stay open and every consumer idle before the gate opens (5)",
    )
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds after the run before the last sample"
    )
    parser.add_argument("--timeout", type=float, default=2400.0, help="longest run (2400 s)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    pair_counts = [int(n) for n in args.pairs.split(",")]

    from airflow_kafka_events.kafka.topics import TopicSpec
    from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

    scratch = Path(tempfile.mkdtemp(prefix="b13-"))
    results: list[dict[str, Any]] = []
    load_start = machine_at_start()
    t0 = time.monotonic()
    finished = False
    try:
        with kafka_broker(scratch / "kafka") as broker:
            create_topics(broker.bootstrap, [TopicSpec(DEFAULT_TOPIC, partitions=3)])
            for pairs in pair_counts:
                results.append(run_deployment(pairs, broker.bootstrap, scratch, args))
                if args.out:  # after each deployment: a later one that is stopped keeps the earlier results
                    write_results(
                        args.out, {"benchmark": "B13 many streams", "runs": results}, load_start, loadavg()
                    )
        finished = True
    finally:
        ok = finished and all(r["state"] == "success" and r["records"]["ok"] for r in results)
        if ok:
            shutil.rmtree(scratch, ignore_errors=True)
        else:  # the Airflow homes (task logs, metadata DB) and records of a failed run are kept
            say(f"[files]   kept {scratch}")
    load_end = loadavg()
    say(f"[b13]     done in {time.monotonic() - t0:.0f}s, load average at the end {load_end}")
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "samples"}))
    if args.out:
        write_results(args.out, {"benchmark": "B13 many streams", "runs": results}, load_start, load_end)
    return 0 if ok else 1

"""B15: a full garbage collection in a triggerer's runner, its inherited heap frozen or not.

A process builds what a triggerer's supervisor holds when it forks its runner -- Airflow's
``Job`` with a ``TriggererJobRunner`` (so its ``on_starting`` registers the plugin listener's fork
handlers), Airflow's triggerer module and this package's trigger modules imported -- then forks
``--forks`` children, alternating ``[kafka_events] triggerer_freeze_heap`` true and false.  Each child,
as a runner would at its first full collection, times one ``gc.collect(2)`` and reports the
objects frozen and the objects the collector still tracks (what that collection walked).  No
Airflow services and no broker: the supervisor's own state after its start (its in-process API,
its sessions) is not in this heap, which is why it is smaller than a real runner's (~275,000).

A full collection holds the GIL: in a runner its length is how long the event loop waits.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import loadavg, machine_at_start, say, write_results

MODES = ("frozen", "inherited")
TRIGGER_MODULES = (
    "airflow_kafka_events.streams.consuming.wait_trigger",
    "airflow_kafka_events.streams.producing.trigger",
    "airflow_kafka_events.watcher.trigger",
)


def _child(write_fd: int) -> None:
    started = time.perf_counter()
    gc.collect(2)
    took_ms = (time.perf_counter() - started) * 1000
    report = {
        "frozen": gc.get_freeze_count(),
        "tracked": len(gc.get_objects()),
        "full_collection_ms": took_ms,
    }
    os.write(write_fd, json.dumps(report).encode())
    os._exit(0)


def fork_once(mode: str) -> dict[str, Any]:
    """Fork a child under ``mode`` and return what it measured."""
    os.environ["AIRFLOW__KAFKA_EVENTS__TRIGGERER_FREEZE_HEAP"] = "true" if mode == "frozen" else "false"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=10, help="children, alternating the two modes (10)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.forks < 2:
        parser.error("--forks must be >= 2")

    load_start = machine_at_start()
    from airflow.jobs.job import Job
    from airflow.jobs.triggerer_job_runner import TriggererJobRunner

    for module in TRIGGER_MODULES:  # what a runner imports to run this package's triggers
        importlib.import_module(module)

    job = Job()
    TriggererJobRunner(job=job, capacity=10)
    say(f"[supervisor] {len(gc.get_objects()):,} tracked objects before the forks")
    reports: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for i in range(args.forks):
        mode = MODES[i % 2]
        report = fork_once(mode)
        reports[mode].append(report)
        say(
            f"[fork {i + 1}] {mode:<9} frozen {report['frozen']:>8,}  tracked {report['tracked']:>8,}  "
            f"full collection {report['full_collection_ms']:7.1f} ms"
        )
    medians = {mode: statistics.median(r["full_collection_ms"] for r in reports[mode]) for mode in MODES}
    say(
        f"[median] full collection: frozen {medians['frozen']:.1f} ms, "
        f"inherited {medians['inherited']:.1f} ms"
    )
    load_end = loadavg()
    if args.out:
        write_results(
            args.out,
            {
                "benchmark": "B15 a full collection in a triggerer's runner",
                "forks": reports,
                "median_ms": medians,
            },
            load_start,
            load_end,
        )
    return 0

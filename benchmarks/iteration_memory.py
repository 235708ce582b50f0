"""B6: the RSS of one process iterating a million items stays flat.

:class:`~airflow_kafka_events.iteration.runner.IterationRunner` (what ``@task.iterable`` runs
on the worker) consumes a generator of ``--items`` items (default 1,000,000) lazily, with an
async trivial body at ``--concurrency`` items at a time, a progress checkpoint every 500 items
into an in-memory store (as ``task_state_store`` would get) and each item's own context copy.
The resident set size (``/proc/self/statm``, else psutil) is sampled every ``--every`` items
(default 100,000) as the generator hands out that item, and once more after the runner
returned.  Reported: the samples, and max / min over the samples taken while iterating
(the first sample is taken after 0 items, once the runner is warm -- its event loop, its
first context copy).  No broker and no Airflow service are needed.

``--mode sync`` runs a plain function body instead (worker threads).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_kafka_events.iteration.items import Item
from airflow_kafka_events.iteration.options import (
    CheckpointOptions,
    IterationOptions,
    ReportOptions,
    ShardOptions,
)
from airflow_kafka_events.iteration.runner import IterationRunner
from benchmarks.harness import machine_at_start, say

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


class MemoryStore:
    """A ``task_state_store`` stand-in: the last value of each key, and how many writes."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))  # what a real store keeps: JSON
        self.writes += 1


def run(items: int, every: int, concurrency: int, mode: str) -> dict[str, Any]:
    samples: list[tuple[int, int, float]] = []
    t0 = time.monotonic()

    def source() -> Iterator[Item]:
        for ordinal in range(items):
            if ordinal % every == 0:
                samples.append((ordinal, rss_bytes(), round(time.monotonic() - t0, 2)))
            yield Item(ordinal, {"n": ordinal, "payload": f"item-{ordinal}"})

    if mode == "async":

        async def body(value: Any, context: dict[str, Any]) -> Any:
            return value["n"] * 2

        handler: Any = body
    else:

        def handler(value: Any, context: dict[str, Any]) -> Any:
            return value["n"] * 2

    store = MemoryStore()
    options = IterationOptions(
        shard=ShardOptions(concurrency=concurrency),
        checkpoint=CheckpointOptions(checkpoint_every=500),
        report=ReportOptions(progress_every=max(items, 1), progress_interval=3600),
    )
    runner = IterationRunner(
        handler, options, store=store, context={"dag_id": "bench", "run_id": "b6", "params": {}}
    )
    gc.collect()
    rss_before = rss_bytes()
    summary = runner.run(source())
    elapsed = time.monotonic() - t0
    samples.append((items, rss_bytes(), round(elapsed, 2)))
    iterating = [rss for _, rss, _ in samples]
    return {
        "mode": mode,
        "items": items,
        "concurrency": concurrency,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "checkpoint_writes": store.writes,
        "elapsed_s": round(elapsed, 2),
        "items_per_second": round(items / elapsed, 0) if elapsed else None,
        "rss_before_runner_mib": round(rss_before / 2**20, 1),
        "samples": [{"items": n, "rss_mib": round(rss / 2**20, 2), "t_s": t} for n, rss, t in samples],
        "rss_max_over_min": round(max(iterating) / min(iterating), 4),
        "rss_growth_mib": round((iterating[-1] - iterating[0]) / 2**20, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000, help="items (default 1,000,000)")
    parser.add_argument("--every", type=int, default=100_000, help="RSS sample interval in items (100,000)")
    parser.add_argument("--concurrency", type=int, default=16, help="items at a time (16)")
    parser.add_argument("--mode", choices=("async", "sync"), default="async", help="body kind (async)")
    parser.add_argument("--max-ratio", type=float, default=1.10, help="fail above this max/min RSS (1.10)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.items < 1 or args.every < 1 or args.concurrency < 1:
        parser.error("--items, --every and --concurrency must be >= 1")

    machine_at_start()
    result = run(args.items, args.every, args.concurrency, args.mode)
    say(f"B6 {result['mode']} body, {result['items']:,} items, concurrency {result['concurrency']}:")
    say(f"{'items':>10} {'RSS MiB':>9} {'t (s)':>8}")
    for sample in result["samples"]:
        say(f"{sample['items']:>10,} {sample['rss_mib']:>9.2f} {sample['t_s']:>8.2f}")
    say(
        f"succeeded={result['succeeded']:,} failed={result['failed']} checkpoint writes="
        f"{result['checkpoint_writes']} in {result['elapsed_s']}s ({result['items_per_second']:,.0f} items/s)"
    )
    say(
        f"RSS max/min over the samples: {result['rss_max_over_min']:.4f}; first -> last "
        f"{result['rss_growth_mib']:+.2f} MiB; ru_maxrss {result['peak_rss_mib']} MiB"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        say(f"[results] written to {args.out}")
    ok = result["succeeded"] == args.items and result["rss_max_over_min"] <= args.max_ratio
    return 0 if ok else 1

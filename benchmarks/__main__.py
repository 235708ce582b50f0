"""Run a benchmark: ``python -m benchmarks [NAME]`` (no name: list them)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "producer": "benchmarks.producer_throughput",
    "codec": "benchmarks.codec_speed",
    "streaming-vs-classic": "benchmarks.streaming_vs_classic",
    "first-page": "benchmarks.first_page_latency",
    "expand-vs-iterate": "benchmarks.expand_vs_iterate",
    "iteration-memory": "benchmarks.iteration_memory",
    "asset-emit": "benchmarks.asset_emit_latency",
    "asset-event-e2e": "benchmarks.asset_event_e2e_latency",
    "watcher-throughput": "benchmarks.watcher_throughput",
    "watcher-footprint": "benchmarks.watcher_footprint",
    "stream-slots": "benchmarks.stream_slots",
    "ui-pages": "benchmarks.ui_pages",
    "consumer-wait": "benchmarks.consumer_wait_latency",
    "stream-read": "benchmarks.stream_read_throughput",
    "stream-read-gc": "benchmarks.stream_read_gc",
    "many-streams": "benchmarks.many_streams",
    "stream-e2e": "benchmarks.stream_e2e",
    "runner-heap": "benchmarks.runner_heap",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        print("benchmarks:", ", ".join(BENCHMARKS), "\nusage: python -m benchmarks NAME [ARGS...]")
        return 0 if not argv else 2
    return int(importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

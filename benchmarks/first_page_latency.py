"""B7: first-page latency of a consumer reading a stream while its producer is still paging.

One broker and one Airflow deployment (as in B1) run ``bench_first_page``
(``benchmarks/dags/bench_first_page.py``): ``produce`` defers once to ``CountingPagesTrigger``
(``--pages`` pages, ``--delay`` seconds apart), and consumer tasks beside it (no DAG edge), one per
setting of ``CONSUMER_SETTINGS`` (max_events, max_wait, poll_timeout, deferrable), read the same
stream side by side with ``StreamConsumerOperator``.  Their handler records when each page was
handed over; a deferrable consumer (task id ending in ``_d``) also reports its defer cycles.

Latency of a page = handled_at (handler time) - emitted_at (the producer's envelope timestamp,
read back from Kafka after the run: ``StreamEvent`` does not carry it).  Per consumer setting:
first-page latency (page 0 emitted -> handled), p50/p99/max over all pages, the batches, and how
many pages were handled before the producer wrote its last page (its end-of-stream marker, emitted
right after the last page's delivery was acknowledged).  ``emitted_at`` is stamped before the send,
so a page's latency includes its write (acks=all); the first write of a fresh producer includes
its connection set-up (the "page 0 took" line).
Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.kafka import KafkaSettings
from airflow_kafka_events.kafka.consumer import EnvelopeConsumer
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC
from benchmarks.harness import Environment, airflow_environment, loadavg, machine_at_start, say, write_results

DAG_ID = "bench_first_page"
PRODUCER = "produce"
CONSUMER_PREFIX = "consume_"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def emitted_times(settings: KafkaSettings, trigger_run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """emitted_at (epoch seconds) of each page of the stream's latest attempt, and of its end marker."""
    config = settings.consumer_config(f"bench-b7-read-{uuid.uuid4().hex[:8]}")
    pages: dict[int, dict[int, float]] = {}  # attempt -> seq -> emitted_at
    ends: dict[int, float] = {}
    with EnvelopeConsumer(config, TRIGGER_EVENT_CODEC, topics=[DEFAULT_TOPIC]) as consumer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in consumer.poll_batch(max_records=500, timeout=0.5):
                env = rec.value
                if env is None or env.trigger_run_id != trigger_run_id:
                    continue
                at = env.emitted_at.timestamp()
                if env.is_last and env.payload is None:
                    ends[env.attempt] = at
                else:
                    pages.setdefault(env.attempt, {}).setdefault(env.sequence_index, at)
            if ends:
                break
    if not ends:
        raise RuntimeError(f"no end of stream {trigger_run_id} in {DEFAULT_TOPIC} within {timeout:.0f}s")
    attempt = max(ends)
    return {"attempt": attempt, "pages": pages.get(attempt, {}), "end": ends[attempt]}


def _median_write(emitted: dict[int, float], delay: float) -> float | None:
    """Median of (gap between consecutive pages - delay): the time one page takes to be written."""
    gaps = [emitted[i + 1] - emitted[i] - delay for i in sorted(emitted) if i + 1 in emitted]
    return round(statistics.median(gaps), 4) if gaps else None


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def measure_run(env: Environment, pages: int, delay: float, run_dir: Path) -> dict[str, Any]:
    stack = env.stack
    run_dir.mkdir(parents=True)
    t0 = time.monotonic()
    run_id = stack.trigger_dag(DAG_ID, conf={"pages": pages, "delay": delay, "dir": str(run_dir)})
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=max(300.0, pages * delay * 4 + 180))
    wall = time.monotonic() - t0
    tis = {ti["task_id"]: ti for ti in stack.task_instances(DAG_ID, run_id)}
    deferrals = [r["event"] for r in stack.state_change_log(DAG_ID, run_id=run_id, task_id=PRODUCER)].count(
        "deferred"
    )
    emitted = emitted_times(env.settings, stream_id(DAG_ID, run_id, PRODUCER))
    emitted_pages: dict[int, float] = emitted["pages"]
    first_emit = emitted_pages.get(0)
    last_page_emit = emitted_pages.get(pages - 1)
    end_emit = emitted["end"]
    consumers = []
    for task_id in sorted(t for t in tis if t.startswith(CONSUMER_PREFIX)):
        path = run_dir / f"{task_id}.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        handled: dict[int, dict[str, Any]] = {}
        for line in lines:
            if line["attempt"] == emitted["attempt"]:
                handled.setdefault(line["seq"], line)  # a page handled twice counts once, first time
        latencies = [h["at"] - emitted_pages[seq] for seq, h in handled.items() if seq in emitted_pages]
        settings = lines[0] if lines else {}
        started = _ts(tis[task_id].get("start_date"))
        deferrable = task_id.endswith("_d")
        summary = stack.xcom(DAG_ID, run_id, task_id) if deferrable else None
        consumers.append(
            {
                "task_id": task_id,
                "state": tis[task_id]["state"],
                "max_events": settings.get("max_events"),
                "max_wait": settings.get("max_wait"),
                "poll_timeout": settings.get("poll_timeout"),
                "deferrable": deferrable,
                "deferrals": summary.get("deferrals") if isinstance(summary, dict) else None,
                "pages_handled": len(handled),
                "duplicates": len(lines) - len(handled),
                "in_order": [line["seq"] for line in lines] == sorted(line["seq"] for line in lines),
                "batches": len({line["at"] for line in lines}),
                "task_start_minus_first_emit_s": (
                    None if started is None or first_emit is None else round(started - first_emit, 3)
                ),
                "first_page_latency_s": (
                    handled[0]["at"] - first_emit if 0 in handled and first_emit is not None else None
                ),
                "p50_s": percentile(latencies, 50) if latencies else None,
                "p99_s": percentile(latencies, 99) if latencies else None,
                "max_s": max(latencies) if latencies else None,
                "handled_before_last_page_written": sum(1 for h in handled.values() if h["at"] < end_emit),
                "last_handled_after_end_s": (
                    max(h["at"] for h in handled.values()) - end_emit if handled else None
                ),
            }
        )
    return {
        "run_id": run_id,
        "state": state,
        "delay_s": delay,
        "wall_clock_s": round(wall, 2),
        "producer_deferrals": deferrals,
        "producer_state": tis.get(PRODUCER, {}).get("state"),
        "pages_in_kafka": len(emitted_pages),
        "producer_paging_s": None if first_emit is None else round(end_emit - first_emit, 3),
        # the trigger awaits each page's delivery, then sleeps ``delay`` before the next page
        "producer_write_page0_s": (
            None
            if 1 not in emitted_pages or first_emit is None
            else round(emitted_pages[1] - first_emit - delay, 3)
        ),
        "producer_write_median_s": _median_write(emitted_pages, delay),
        "last_page_emitted_minus_first_s": (
            None if first_emit is None or last_page_emit is None else round(last_page_emit - first_emit, 3)
        ),
        "consumers": consumers,
        "loadavg_end": loadavg(),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def print_run(result: dict[str, Any], pages: int) -> None:
    say("")
    say(
        f"B7 run {result['run_id']}: {result['state']}; producer {result['producer_state']} with "
        f"{result['producer_deferrals']} deferral(s), {result['pages_in_kafka']} pages in Kafka, paged for "
        f"{result['producer_paging_s']}s (first page -> end marker); load {result['loadavg_end']}"
    )
    say(
        f"producer: page 0 took {_ms(result['producer_write_page0_s'])}ms to write (acks=all), "
        f"a page typically {_ms(result['producer_write_median_s'])}ms "
        f"(+ {result['delay_s'] * 1000:.0f}ms delay)"
    )
    say(
        f"{'consumer':<24} {'max_events':>10} {'max_wait':>8} {'poll':>5} {'state':<8} {'handled':>7} "
        f"{'batches':>7} {'start-1st':>9} {'1st page':>8} {'p50':>6} {'p99':>6} {'max':>6} {'before end':>10}"
        f" {'defers':>6}"
    )
    for c in result["consumers"]:
        say(
            f"{c['task_id']:<24} {c['max_events']!s:>10} {c['max_wait']!s:>8} {c['poll_timeout']!s:>5} "
            f"{c['state']:<8} "
            f"{c['pages_handled']:>7} {c['batches']:>7} {_ms(c['task_start_minus_first_emit_s']):>7}ms "
            f"{_ms(c['first_page_latency_s']):>6}ms {_ms(c['p50_s']):>4}ms {_ms(c['p99_s']):>4}ms "
            f"{_ms(c['max_s']):>4}ms {c['handled_before_last_page_written']:>6}/{pages}"
            f" {'-' if c['deferrals'] is None else c['deferrals']:>6}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200, help="pages the producer writes (200)")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between pages (0.05)")
    parser.add_argument("--runs", type=int, default=1, help="DAG runs, one after the other (1)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.runs < 1 or args.delay < 0:
        parser.error("--pages and --runs must be >= 1, --delay >= 0")

    load_start = machine_at_start()
    results = []
    with airflow_environment([DAG_ID], prefix="bench-b7-", keep_home=args.keep_home) as env:
        for i in range(args.runs):
            result = measure_run(env, args.pages, args.delay, env.home / f"b7-run-{i + 1}")
            results.append(result)
            print_run(result, args.pages)
    load_end = loadavg()
    say("")
    say(
        "start-1st: consumer task start - page 0 emitted (negative: the consumer was waiting); latency = "
        "handler time - envelope emitted_at; before end: pages handled before the producer wrote its "
        "end-of-stream marker"
    )
    say(f"[machine] load average at the end {load_end}")
    if args.out:
        document = {
            "benchmark": "B7 first-page latency while the producer is still paging",
            "pages": args.pages,
            "delay_s": args.delay,
            "runs": results,
        }
        write_results(args.out, document, load_start, load_end)
    ok = all(
        r["state"] == "success" and all(c["pages_handled"] == args.pages for c in r["consumers"])
        for r in results
    )
    return 0 if ok else 1

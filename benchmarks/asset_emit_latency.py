"""B4: asset event emit latency — ``external.emit`` vs ``emit_asset_event``, sequential, acks=all.

Each call validates the event, builds its ``AssetEventEnvelope``, produces it keyed by the asset
URI with ``acks=all`` + idempotence and returns the ``Receipt`` once the broker acknowledged it.
``--events`` calls run one after the other (each waits for its acknowledgement) per variant, the
two variants alternating in blocks of ``--block`` so both see the same machine load:

* ``external.emit``: the plain-Python path (no Airflow module), Kafka settings from arguments;
* ``emit_asset_event``: the Airflow-aware path (Airflow's secrets masker over ``extra``, the
  ``[kafka_events]`` options, the producer of the ``kafka_default`` connection).  Outside a task
  there is no context to take the source from, so the benchmark passes ``source=`` (kind
  ``task`` with a made-up DAG/run/task id); the connection comes from ``AIRFLOW_CONN_KAFKA_DEFAULT``.

The first call of each variant (producer creation, metadata) is a warm-up, reported apart and
not counted.  Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.  Loopback only: the
figures are the library's and the broker's cost, not a network's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
from airflow_kafka_events.kafka.producer import close_all_producers
from benchmarks.harness import (
    create_topics,
    kafka_broker,
    loadavg,
    machine_at_start,
    percentile,
    remove_topics,
    say,
    write_results,
)

ASSET_URI = "bench://b4/orders"


def summary(samples_s: Sequence[float], wall_s: float) -> dict[str, Any]:
    ms = [s * 1000 for s in samples_s]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "throughput_per_s": round(len(ms) / wall_s, 1),
    }


def _external_emitter(bootstrap: str, topic: str, overrides: dict[str, Any]) -> Callable[[int], Any]:
    from airflow_kafka_events.assets.publish import emit

    def call(i: int) -> Any:
        return emit(
            ASSET_URI,
            partition_key=f"batch-{i % 50}",
            extra={"seq": i, "rows": 1000 + i, "path": f"s3://lake/orders/{i}.parquet"},
            topic=topic,
            producer="b4-bench",
            bootstrap_servers=bootstrap,
            overrides=overrides or None,
        )

    return call


def _airflow_emitter(bootstrap: str, topic: str, overrides: dict[str, Any]) -> Callable[[int], Any]:
    # The connection must exist before Airflow's secrets backends are first read.
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, **overrides}}
    )
    from airflow.sdk import Asset

    from airflow_kafka_events.assets.emit import emit_asset_event
    from airflow_kafka_events.envelopes.model import EventSource, SourceKind

    asset = Asset(name="b4_orders", uri=ASSET_URI)
    source = EventSource(
        SourceKind.TASK,
        dag_id="b4_bench",
        run_id="manual__b4",
        task_id="emit",
        map_index=-1,
        try_number=1,
    )

    def call(i: int) -> Any:
        return emit_asset_event(
            asset,
            partition_key=f"batch-{i % 50}",
            extra={"seq": i, "rows": 1000 + i, "path": f"s3://lake/orders/{i}.parquet"},
            topic=topic,
            kafka_config_id="kafka_default",
            source=source,
        )

    return call


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="emits per variant (2000)")
    parser.add_argument("--block", type=int, default=100, help="emits per block; variants alternate (100)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the scratch topic (3)")
    parser.add_argument(
        "--only", choices=("external", "airflow"), help="run one variant only (default: both)"
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=None,
        help="producer linger.ms for both variants (default: the emit producers', 0 ms)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=0,
        help="also time bursts of this many pipelined emit sends at linger.ms 0 and 1, alternating (0: none)",
    )
    parser.add_argument("--burst-rounds", type=int, default=3, help="rounds of bursts per linger.ms (3)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.events < 1 or args.block < 1 or args.burst < 0 or args.burst_rounds < 1:
        parser.error("--events, --block and --burst-rounds must be >= 1, --burst >= 0")
    return args


def _variants(
    args: argparse.Namespace, bootstrap: str, topic: str
) -> tuple[dict[str, Callable[[int], Any]], dict[str, str]]:
    """The emitters to measure, and why one is not measured (no Airflow here)."""
    overrides: dict[str, Any] = {} if args.linger_ms is None else {"linger.ms": args.linger_ms}
    variants: dict[str, Callable[[int], Any]] = {}
    notes: dict[str, str] = {}
    if args.only in (None, "external"):
        variants["external.emit"] = _external_emitter(bootstrap, topic, overrides)
    if args.only in (None, "airflow"):
        try:
            variants["emit_asset_event"] = _airflow_emitter(bootstrap, topic, overrides)
        except Exception as exc:  # no Airflow here: measure the plain path only, and say so
            notes["emit_asset_event"] = f"not measured: {type(exc).__name__}: {exc}"
            say(f"[skip]    emit_asset_event {notes['emit_asset_event']}")
    return variants, notes


def _measure(
    variants: dict[str, Callable[[int], Any]], events: int, block: int
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, float]]:
    """First-call times (ms), per-emit seconds and busy seconds per variant, blocks alternating."""
    warmup: dict[str, float] = {}
    for name, call in variants.items():
        t0 = time.perf_counter()
        receipt = call(-1)
        warmup[name] = (time.perf_counter() - t0) * 1000
        say(f"[warmup]  {name}: first call {warmup[name]:.1f} ms -> {receipt.to_json()}")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    busy: dict[str, float] = dict.fromkeys(variants, 0.0)
    done = 0
    while done < events:
        size = min(block, events - done)
        for name, call in variants.items():
            mine = samples[name]
            t_block = time.perf_counter()
            for i in range(done, done + size):
                t0 = time.perf_counter()
                receipt = call(i)
                mine.append(time.perf_counter() - t0)
                if receipt.offset < 0:
                    raise RuntimeError(f"{name}: no offset in {receipt}")
            busy[name] += time.perf_counter() - t_block
        done += size
    return warmup, samples, busy


def _bursts(bootstrap: str, topic: str, size: int, rounds: int) -> dict[str, list[float]]:
    """msgs/s of ``size`` emit sends queued at once (futures) then all awaited, per ``linger.ms``."""
    from airflow_kafka_events.assets.publish import build_envelope, emit_producer, record_key, resolve_asset
    from airflow_kafka_events.envelopes.model import EventSource, SourceKind

    source = EventSource(SourceKind.EXTERNAL, producer="b4-burst")
    rates: dict[str, list[float]] = {"linger.ms=0": [], "linger.ms=1": []}
    for _ in range(rounds):
        for linger in (0, 1):
            settings = KafkaSettings({"bootstrap.servers": bootstrap, "linger.ms": linger})
            producer, codec = emit_producer(settings, message_timeout=30.0), settings.codecs.asset
            records = []
            for i in range(size):
                envelope = build_envelope(asset=resolve_asset(f"bench://b4/burst-{i % 20}"), source=source)
                records.append((codec.encode(envelope, topic=topic), record_key(envelope.asset)))
            producer.send_and_wait(topic, records[0][0], key=records[0][1])  # connected, metadata known
            t0 = time.perf_counter()
            futures = [producer.send(topic, value, key=key) for value, key in records]
            for future in futures:
                future.result(timeout=60)
            rate = size / (time.perf_counter() - t0)
            rates[f"linger.ms={linger}"].append(round(rate))
            say(f"[burst]   linger.ms={linger}: {size} pipelined sends {rate:,.0f} msgs/s, load {loadavg()}")
    return rates


def _report(
    args: argparse.Namespace,
    warmup: dict[str, float],
    samples: dict[str, list[float]],
    busy: dict[str, float],
) -> dict[str, Any]:
    say("")
    linger = "emit default (0)" if args.linger_ms is None else args.linger_ms
    say(
        f"B4 asset event emit latency: {args.events} sequential emits per variant, acks=all, "
        f"loopback, linger.ms={linger}"
    )
    say(f"{'variant':<18} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8} {'mean':>8} {'emits/s':>9}")
    results: dict[str, Any] = {}
    for name in samples:
        s = summary(samples[name], busy[name])
        s["warmup_first_call_ms"] = round(warmup[name], 1)
        results[name] = s
        say(
            f"{name:<18} {s['p50_ms']:>6.2f}ms {s['p90_ms']:>6.2f}ms {s['p99_ms']:>6.2f}ms "
            f"{s['max_ms']:>6.1f}ms {s['mean_ms']:>6.2f}ms {s['throughput_per_s']:>9.0f}"
        )
    if len(samples) == 2:
        a, b = results["external.emit"], results["emit_asset_event"]
        say(f"ratio emit_asset_event/external.emit p50: {b['p50_ms'] / a['p50_ms']:.2f}x")
    return results


def _write(args: argparse.Namespace, results: dict[str, Any], load_start: Any, load_end: Any) -> None:
    document = {
        "benchmark": "B4 asset event emit latency",
        "events_per_variant": args.events,
        "block": args.block,
        "linger_ms": args.linger_ms,
        "results": results,
    }
    write_results(args.out, document, load_start, load_end)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    load_start = machine_at_start()
    with kafka_broker() as broker:
        bootstrap = broker.bootstrap
        topic = f"bench-b4-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, [TopicSpec(topic, partitions=args.partitions)])
        try:
            variants, notes = _variants(args, bootstrap, topic)
            results = _report(args, *_measure(variants, args.events, args.block))
            for name, note in notes.items():
                results[name] = {"note": note}
            if args.burst > 0:
                results["bursts_msgs_per_s"] = _bursts(bootstrap, topic, args.burst, args.burst_rounds)
        finally:
            close_all_producers()  # before the topic and the broker go away
            remove_topics(bootstrap, [topic])
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}")
    if args.out:
        _write(args, results, load_start, load_end)
    return 0

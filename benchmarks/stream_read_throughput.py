"""B11: reading one stream back, records/s: raw confluent-kafka vs the project's reader, side by side.

One broker (``KAFKA_BOOTSTRAP_SERVERS`` or the embedded broker), one topic of one partition, one
stream of ``--records`` trigger event envelopes (key = the stream's ``trigger_run_id``) per payload
size (``--sizes``, JSON pages of about 100 B, 1 KB and 64 KB by default).  Each round reads the
whole stream from offset 0 with a new consumer, the variants one after another (alternating in
every round), in the same process:

  raw          ``Consumer.consume(500)`` in a loop, no decode (the message's error is looked at);
  raw+decode   the same, each value decoded with ``TRIGGER_EVENT_CODEC.decode``;
  reader       the project's ``StreamReader`` (``max_events=--max-events``), every batch acknowledged;
  operator     the consumer operator's loop without Airflow: ``drive_stream`` over the same reader,
               a no-op batch handler, each batch's checkpoint saved to an in-memory store, with
               the operator's collector threshold (``[kafka_events] stream_read_gc_threshold``);
  operator-gc700  the same loop with Python's own collector threshold (the option at 0).

Reported per variant: records/s of the best round and of every round, the process CPU time per
record (less swayed by other load on the machine), and the ratios the issue sets goals on (reader /
raw+decode, reader / raw).  The machine's load average is printed with each size.  ``--max-mb`` caps
the bytes written per size (the 64 KB stream gets fewer records; the count is printed).  The default
``--records`` is small, for a quick check: a consumer's start (metadata, the first fetch, up to half
a second) then outweighs the reading, most for raw; use 100,000 or more for figures.

Not a timed test: correctness of the fast paths (order, no duplicates, strict decoding) is checked
by the test suite; here each reader variant only checks it got every record, in order.

``--gc-off`` runs every variant with Python's cyclic garbage collector off: the difference is
the collector's share, which grows with the decoded pages a reader holds (a batch of
``max_events`` pages is alive until its handler returns; raw+decode drops each page at once).
``--gc-threshold N`` sets the collector's first-generation threshold instead (Python's default
700 allocations): pages that live for a batch then seldom reach the oldest generation, whose
collections walk every object of the process.  ``--gc-stats`` also reports, per variant (best
round), the collections of each generation and the wall time spent in them (``gc.callbacks``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, TriggerEventEnvelope

PRODUCER = ProducerIdentity("bench_dag", "manual__2026-12-02", "stream_task", 0, 1)
VARIANTS = ("raw", "raw+decode", "reader", "operator", "operator-gc700")


def page(size: int) -> dict[str, Any]:
    """A JSON page of about ``size`` bytes of JSON text (small records, like an API's page)."""
    items: list[dict[str, Any]] = []
    body: dict[str, Any] = {"items": items, "page": 3, "next": "cursor-4"}
    i = 0
    while True:
        item = {"id": i, "name": f"item-{i:03d}", "price": i * 1.25, "tags": ["a", "b"], "ok": i % 2 == 0}
        if items and len(json.dumps(body)) + len(json.dumps(item)) + 2 > size:
            return body
        items.append(item)
        i += 1


def write_stream(producer_config: dict[str, Any], topic: str, run: str, n: int, size: int) -> int:
    """Write the stream (``n`` envelopes) with a plain producer; the envelope's size in bytes."""
    from confluent_kafka import Producer

    producer = Producer({**producer_config, "linger.ms": 20, "batch.size": 1_000_000})
    failures: list[Any] = []
    key = run.encode()
    chunk = 10_000  # encode in chunks: 1,000,000 encoded pages need not be held at once
    first_size = 0
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        body = page(size)
        for i in range(start, start + count):
            value = TRIGGER_EVENT_CODEC.encode(
                TriggerEventEnvelope(run, i, is_last=i == n - 1, payload=body, producer=PRODUCER)
            )
            first_size = first_size or len(value)
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=0, on_delivery=_collect(failures))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    if producer.flush(300) or failures:
        raise RuntimeError(f"writing the stream failed: {failures[:3]}")
    return first_size


def _collect(failures: list[Any]) -> Callable[[Any, Any], None]:
    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    return delivered


# --------------------------------------------------------------------------- variants
def _raw_consumer(config: dict[str, Any], topic: str) -> Any:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": f"bench-b11-raw-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return consumer


def read_raw(config: dict[str, Any], topic: str, n: int, *, decode: bool) -> int:
    consumer = _raw_consumer(config, topic)
    decoder = TRIGGER_EVENT_CODEC.decode
    seen = 0
    last = -1
    try:
        while seen < n:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is not None:
                    continue
                if decode:
                    envelope = decoder(msg.value())
                    if envelope.sequence_index != last + 1:
                        raise RuntimeError(f"raw+decode: {envelope.sequence_index} after {last}")
                    last = envelope.sequence_index
                seen += 1
    finally:
        consumer.close()
    return seen


def _reader(config: dict[str, Any], topic: str, run: str, max_events: int) -> Any:
    from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader

    options = ReadOptions(max_events=max_events, max_wait=0.05, gap_timeout=30, start_timeout=60)
    return StreamReader(config, topic, run, options=options, partition=0)


def read_in_order(reader: Any) -> int:
    """Every batch of ``reader`` (a ``StreamReader``), each element checked in order, each batch
    acknowledged; how many elements."""
    seen = 0
    for batch in reader:
        for envelope in batch.events:
            if envelope.sequence_index != seen:
                raise RuntimeError(f"reader: {envelope.sequence_index} where {seen} was due")
            seen += 1
        reader.ack(batch)
    return seen


def read_reader(config: dict[str, Any], topic: str, run: str, n: int, max_events: int) -> int:
    with _reader(config, topic, run, max_events) as reader:
        seen = read_in_order(reader)
    if seen != n:
        raise RuntimeError(f"reader: {seen} records, {n} written")
    return seen


def read_operator_loop(
    config: dict[str, Any], topic: str, run: str, n: int, max_events: int, gc_threshold: int
) -> int:
    from airflow_kafka_events.streams.consuming.consumption import drive_stream

    saved: list[Any] = []  # the task state store's stand-in: the latest checkpoint

    def save(checkpoint: Any) -> None:
        saved[:] = [checkpoint]

    with _reader(config, topic, run, max_events) as reader:
        summary, _ = drive_stream(
            reader,
            trigger_run_id=run,
            topic=topic,
            handle_batch=lambda events: None,
            save=save,
            gc_threshold=gc_threshold,
        )
    if summary.pages != n or not summary.finished:
        raise RuntimeError(f"operator loop: {summary.pages} pages, finished={summary.finished}, {n} written")
    return summary.pages


# --------------------------------------------------------------------------- the collector's share
@contextmanager
def collections_timed(
    into: dict[int, list[float]], clock: Callable[[], float] = time.perf_counter
) -> Iterator[None]:
    """Inside the block, each collection of generation g adds 1 to ``into[g][0]`` and its seconds on
    ``clock`` (default: the wall) to ``into[g][1]``."""
    started = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = clock()
        else:
            counts = into.setdefault(info["generation"], [0, 0.0])
            counts[0] += 1
            counts[1] += clock() - started[0]

    gc.callbacks.append(note)
    try:
        yield
    finally:
        gc.callbacks.remove(note)


# --------------------------------------------------------------------------- one payload size
def measure_size(
    bootstrap: str, n: int, size: int, rounds: int, max_events: int, variants: list[str]
) -> dict[str, Any]:
    from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
    from airflow_kafka_events.streams.consuming.collector import DEFAULT_GC_THRESHOLD
    from benchmarks.harness import create_topics, remove_topics

    settings = KafkaSettings({"bootstrap.servers": bootstrap})
    topic = f"bench-b11-{size}-{uuid.uuid4().hex[:8]}"
    run = f"b11-{size}-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [TopicSpec(topic, partitions=1, max_message_bytes=8 * 1024 * 1024)])
    try:
        t0 = time.perf_counter()
        envelope_size = write_stream(settings.producer_config(), topic, run, n, size)
        write_s = time.perf_counter() - t0
        config = settings.consumer_config("bench-b11")
        runs: dict[str, Callable[[], int]] = {
            "raw": lambda: read_raw(config, topic, n, decode=False),
            "raw+decode": lambda: read_raw(config, topic, n, decode=True),
            "reader": lambda: read_reader(config, topic, run, n, max_events),
            "operator": lambda: read_operator_loop(config, topic, run, n, max_events, DEFAULT_GC_THRESHOLD),
            "operator-gc700": lambda: read_operator_loop(config, topic, run, n, max_events, 0),
        }
        rates: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        collections: dict[str, list[dict[int, list[float]]]] = {name: [] for name in variants}
        for r in range(rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            for name in order:
                counted: dict[int, list[float]] = {}
                with collections_timed(counted):
                    started, cpu_started = time.perf_counter(), time.process_time()
                    count = runs[name]()
                    wall = time.perf_counter() - started
                rates[name].append(count / wall)
                cpu[name].append((time.process_time() - cpu_started) / count * 1e6)
                collections[name].append({g: [n, t / wall] for g, (n, t) in sorted(counted.items())})
    finally:
        remove_topics(bootstrap, [topic])
    return {
        "size": size,
        "envelope_bytes": envelope_size,
        "records": n,
        "write_seconds": write_s,
        "load": os.getloadavg(),
        "gc": {"enabled": gc.isenabled(), "threshold": gc.get_threshold()},
        "rates": rates,
        "cpu_us": cpu,
        "collections": collections,
    }


def report(result: dict[str, Any], *, gc_stats: bool = False) -> None:
    rates, cpu = result["rates"], result["cpu_us"]
    best = {name: max(values) for name, values in rates.items()}
    load = ", ".join(f"{x:.2f}" for x in result["load"])
    collector = result["gc"]
    state = "on" if collector["enabled"] else "off"
    print(f"\ncyclic GC {state}, thresholds {collector['threshold']}", end="")
    print(
        f"\npayload ~{result['size']} B (envelope {result['envelope_bytes']} B), "
        f"{result['records']} records, written in {result['write_seconds']:.1f} s; load average {load}"
    )
    for name, values in rates.items():
        every = " ".join(f"{v:,.0f}" for v in values)
        print(
            f"  {name:14s} best {best[name]:10,.0f} rec/s  CPU {min(cpu[name]):6.1f} us/rec   rounds: {every}"
        )
        if gc_stats:
            counted = result["collections"][name][values.index(best[name])]
            share = sum(fraction for _, fraction in counted.values())
            gens = ", ".join(f"gen{g} {int(n)}x {fraction:.0%}" for g, (n, fraction) in counted.items())
            print(f"  {'':14s} collections: {share:.0%} of the wall ({gens or 'none'})")
    for name in ("reader", "operator", "operator-gc700"):
        if name in best and "raw+decode" in best:
            print(f"  {name} / raw+decode: {best[name] / best['raw+decode']:.2f}x", end="")
        if name in best and "raw" in best:
            print(f"   {name} / raw: {best[name] / best['raw']:.3f}x", end="")
        if name in best:
            print()


def main(argv: list[str]) -> int:
    from benchmarks.harness import kafka_broker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=20_000, help="records per stream (e.g. 100000, 1000000)"
    )
    parser.add_argument("--sizes", default="100,1024,65536", help="payload sizes in bytes, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per variant (alternating order)")
    parser.add_argument("--max-events", type=int, default=1000, help="the reader's max_events")
    parser.add_argument("--max-mb", type=int, default=2000, help="cap of the bytes written per size (MB)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="subset of " + ",".join(VARIANTS))
    parser.add_argument(
        "--gc-off", action="store_true", help="with Python's cyclic garbage collector off (to see its share)"
    )
    parser.add_argument(
        "--gc-threshold", type=int, help="the collector's first-generation threshold (Python's default: 700)"
    )
    parser.add_argument(
        "--gc-stats", action="store_true", help="report the collections and their share of the wall"
    )
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}")

    if args.gc_off:
        gc.disable()
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    results = []
    with kafka_broker() as broker:
        for size in (int(s) for s in args.sizes.split(",")):
            n = max(1, min(args.records, args.max_mb * 1_000_000 // size))
            result = measure_size(broker.bootstrap, n, size, args.rounds, args.max_events, variants)
            report(result, gc_stats=args.gc_stats)
            results.append(result)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0

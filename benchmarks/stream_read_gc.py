"""B11 profile: what Python's cyclic collector does while a stream is read, without a broker.

The records of B11's 1 KB stream (trigger event envelopes, the same JSON pages) are encoded once;
an in-memory consumer hands them out as new ``confluent_kafka.Message`` objects in chunks of up to
500 (what ``consume`` returns from a local broker), so only the reading's own CPU is measured, not
the broker's or the network's.  Variants, one after another in one process:

  raw+decode   each value through ``TRIGGER_EVENT_CODEC.decode``, then dropped;
  reader       ``StreamReader`` (``--max-events``), ``for batch in reader``, every batch acknowledged;
  loop         ``drive_stream`` over the same reader (the consumer operator's loop, a no-op
               handler), at the process's collector threshold (``gc_threshold=0``).

Per variant and round: CPU per record, and per generation the collections, their CPU time
(``gc.callbacks``) and, in a separate counting round (``gc.get_objects`` at each collection is
slow), the objects each collection walked and how many reached the oldest generation.  Also the
objects ``gc.is_tracked`` finds in one decoded record.  ``--gc-threshold`` sets the first
threshold (Python's default 700).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Message, TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.streams.consuming.consumption import drive_stream, page_events
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from benchmarks.stream_read_throughput import PRODUCER, collections_timed, page, read_in_order

TOPIC = "bench-b11-gc"
CHUNK = 500


class _Topic:
    def __init__(self, partitions: dict[int, object]) -> None:
        self.partitions, self.error = partitions, None


class _Metadata:
    def __init__(self) -> None:
        self.topics = {TOPIC: _Topic({0: object()})}


class MemoryConsumer:
    """The calls a ``StreamReader`` makes, over messages held in memory (one partition)."""

    def __init__(self, key: bytes, values: list[bytes]) -> None:
        self._key = key
        self._values = values
        self._at = 0

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        return _Metadata()

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, len(self._values)

    def assign(self, tps: list[TopicPartition]) -> None:
        self._at = max(0, tps[0].offset)

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        start = self._at
        values = self._values[start : start + min(num_messages, CHUNK)]
        self._at += len(values)
        key = self._key
        return [
            Message(topic=TOPIC, partition=0, offset=start + i, key=key, value=value)
            for i, value in enumerate(values)
        ]

    def close(self) -> None:
        pass


class MemoryReader(StreamReader):
    """A ``StreamReader`` over a :class:`MemoryConsumer`."""

    def __init__(self, values: list[bytes], *args: Any, **kwargs: Any) -> None:
        self._values = values
        super().__init__(*args, **kwargs)

    def _make_consumer(self, config: dict[str, Any]) -> Any:
        return MemoryConsumer(self._key, self._values)


def stream_values(run: str, n: int, size: int) -> list[bytes]:
    body = page(size)
    return [
        TRIGGER_EVENT_CODEC.encode(
            TriggerEventEnvelope(run, i, is_last=i == n - 1, payload=body, producer=PRODUCER)
        )
        for i in range(n)
    ]


def read_raw_decode(values: list[bytes], run: str, max_events: int) -> int:
    consumer = MemoryConsumer(run.encode(), values)
    decode = TRIGGER_EVENT_CODEC.decode
    last = -1
    while chunk := consumer.consume(CHUNK, 0):
        for msg in chunk:
            envelope = decode(msg.value())
            if envelope.sequence_index != last + 1:
                raise RuntimeError(f"raw+decode: {envelope.sequence_index} after {last}")
            last = envelope.sequence_index
    return last + 1


def _reader(values: list[bytes], run: str, max_events: int) -> MemoryReader:
    options = ReadOptions(max_events=max_events, max_wait=0.05, gap_timeout=30, start_timeout=60)
    return MemoryReader(
        values, {"bootstrap.servers": "memory:9092"}, TOPIC, run, options=options, partition=0
    )


def read_reader(values: list[bytes], run: str, max_events: int) -> int:
    with _reader(values, run, max_events) as reader:
        return read_in_order(reader)


def read_loop(values: list[bytes], run: str, max_events: int) -> int:
    with _reader(values, run, max_events) as reader:
        summary, _ = drive_stream(
            reader, trigger_run_id=run, topic=TOPIC, handle_batch=lambda events: None, save=None
        )
    return int(summary.pages)


VARIANTS: dict[str, Callable[[list[bytes], str, int], int]] = {
    "raw+decode": read_raw_decode,
    "reader": read_reader,
    "loop": read_loop,
}


@contextmanager
def collections_counted(into: dict[int, list[int]]) -> Iterator[None]:
    """Each collection of generation g adds the objects it walked to ``into[g][0]``; a collection
    of generation 1 adds the objects it moved into generation 2 to ``into[1][1]``."""
    walked = [0, 0]

    def note(phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase == "start":
            walked[0] = sum(len(gc.get_objects(g)) for g in range(generation + 1))
            walked[1] = len(gc.get_objects(2))
        else:
            counts = into.setdefault(generation, [0, 0])
            counts[0] += walked[0]
            if generation == 1:
                counts[1] += len(gc.get_objects(2)) - walked[1]

    gc.callbacks.append(note)
    try:
        yield
    finally:
        gc.callbacks.remove(note)


def tracked_per_record(values: list[bytes], run: str) -> dict[str, int]:
    """The objects the collector tracks in one decoded record, by who holds them."""
    with _reader(values[:2], run, 1) as reader:
        envelope = reader.next_batch().events[0]
    payload = envelope.payload
    in_payload: list[Any] = [payload]
    for item in payload["items"]:
        in_payload += [item, *(v for v in item.values() if gc.is_tracked(v))]
    in_payload.append(payload["items"])
    event = page_events([envelope])[0]
    return {
        "payload": sum(gc.is_tracked(o) for o in in_payload),
        "envelope": gc.is_tracked(envelope) + ("__dict__" in dir(envelope) and gc.is_tracked(vars(envelope))),
        "message": int(gc.is_tracked(Message(topic=TOPIC, value=values[0]))),
        "stream event": gc.is_tracked(event) + gc.is_tracked(vars(event)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="payload size in bytes")
    parser.add_argument("--max-events", default="1000,100", help="the reader's max_events, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per variant")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--gc-threshold", type=int, help="the collector's first threshold (default 700)")
    args = parser.parse_args(argv)
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    run = "b11-gc-stream"
    values = stream_values(run, args.records, args.size)
    print(f"thresholds {gc.get_threshold()}, {args.records} records of {len(values[0])} B")
    per_record = tracked_per_record(values, run)
    print(f"tracked objects before reading: {len(gc.get_objects())}; per record: {per_record}")
    for max_events in (int(m) for m in args.max_events.split(",")):
        for name in args.variants.split(","):
            read = VARIANTS[name]
            cpu: list[float] = []
            timed: dict[int, list[float]] = {}
            for _ in range(args.rounds):
                timed = {}
                gc.collect()
                with collections_timed(timed, clock=time.process_time):
                    started = time.process_time()
                    if read(values, run, max_events) != args.records:
                        raise RuntimeError(f"{name}: not every record read")
                    cpu.append((time.process_time() - started) / args.records * 1e6)
            counted: dict[int, list[int]] = {}
            gc.collect()
            with collections_counted(counted):
                read(values, run, max_events)
            best = min(cpu)
            gc_us = sum(t for _, t in timed.values()) / args.records * 1e6
            gens = "; ".join(
                f"gen{g} {int(n)}x {t * 1e3:.0f} ms, walked {counted.get(g, [0])[0] / args.records:.1f}/rec"
                for g, (n, t) in sorted(timed.items())
            )
            promoted = counted.get(1, [0, 0])[1] / args.records
            print(
                f"max_events {max_events:5d} {name:10s} CPU {best:5.1f} us/rec (rounds "
                f"{' '.join(f'{c:.1f}' for c in cpu)}), collections {gc_us:4.1f} us/rec "
                f"[{gens or 'none'}], into gen2 {promoted:.1f}/rec; load {os.getloadavg()[0]:.2f}"
            )
    return 0

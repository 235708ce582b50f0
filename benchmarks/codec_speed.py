"""B3: envelope codec speed against the json module, and produce throughput against raw confluent-kafka.

Part 1 (no broker): encoding a ~1 KB ``TriggerEventEnvelope`` vs ``json.dumps`` of its payload alone,
and decoding it vs ``json.loads`` of the payload's JSON text, timed alternately in one process
(``timeit``, best of ``--rounds`` rounds); the ratios are what matter.

Part 2 (one broker, ``KAFKA_BOOTSTRAP_SERVERS`` or the local broker): the same envelopes produced
with ``acks=all`` + idempotence, alternating rounds of
  raw     -- a plain ``confluent_kafka.Producer``, each envelope encoded inline, a delivery callback;
  project -- ``RecordProducer.send(topic, TRIGGER_EVENT_CODEC.encode(envelope))`` and its future;
  bytes   -- the raw producer with the bytes encoded beforehand (context: the send floor).
Each round ends when every delivery is acknowledged; best round per variant, ratio project / raw;
also the process's CPU time per message (best round), which other load on the machine sways less.
Like with like: both sides get a per-message delivery report (raw: its callback checks the error
of each, ``flush()`` waits for the last; project: each send's future resolves with its receipt,
and the round reads every one) with the same topic, partitions, acks and idempotence.  The project
side also pays for what its produce path guarantees: size check, typed errors (the statistics
every 100 ms they are classified by), the in-flight count, metrics.
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, TriggerEventEnvelope

PRODUCER = ProducerIdentity("bench_dag", "manual__2026-11-30", "stream_task", 0, 1)


def payload(page: int = 3) -> dict[str, Any]:
    """About 1 KB of JSON: a page of 14 small records (115 JSON values)."""
    items = [
        {"id": i, "name": f"item-{i:03d}", "price": i * 1.25, "tags": ["a", "b"], "ok": i % 2 == 0}
        for i in range(14)
    ]
    return {"items": items, "page": page, "next": f"cursor-{page + 1}"}


def envelopes(run: str, n: int) -> list[TriggerEventEnvelope]:
    body = payload()
    return [
        TriggerEventEnvelope(run, i, is_last=i == n - 1, payload=body, producer=PRODUCER) for i in range(n)
    ]


# --------------------------------------------------------------------------- part 1: codec
def _best_us(funcs: dict[str, Callable[[], object]], rounds: int, number: int) -> dict[str, float]:
    best = dict.fromkeys(funcs, float("inf"))
    for _ in range(rounds):
        for name, func in funcs.items():
            best[name] = min(best[name], timeit.timeit(func, number=number) / number * 1e6)
    return best


def codec_figures(rounds: int, number: int) -> dict[str, float]:
    envelope = envelopes("codec", 1)[0]
    data = TRIGGER_EVENT_CODEC.encode(envelope)
    value = envelope.payload
    text = json.dumps(value)
    assert TRIGGER_EVENT_CODEC.decode(data) == envelope
    best = _best_us(
        {
            "encode": lambda: TRIGGER_EVENT_CODEC.encode(envelope),
            "json.dumps": lambda: json.dumps(value),
            "decode": lambda: TRIGGER_EVENT_CODEC.decode(data),
            "json.loads": lambda: json.loads(text),
        },
        rounds,
        number,
    )
    print(f"envelope: {len(data)} bytes, payload JSON text: {len(text)} characters")
    print(f"encode      {best['encode']:7.2f} us   json.dumps {best['json.dumps']:7.2f} us   ", end="")
    print(f"ratio {best['encode'] / best['json.dumps']:.2f}x")
    print(f"decode      {best['decode']:7.2f} us   json.loads {best['json.loads']:7.2f} us   ", end="")
    print(f"ratio {best['decode'] / best['json.loads']:.2f}x")
    return best


# --------------------------------------------------------------------------- part 2: produce
class _Raw:
    """A plain confluent-kafka producer with a counting delivery callback."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(config)
        self.failures: list[Any] = []

    def delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(err)

    def round(self, topic: str, items: list[Any], *, encode: bool) -> float:
        producer, delivered = self.producer, self.delivered
        t0 = time.perf_counter()
        for item in items:
            value = TRIGGER_EVENT_CODEC.encode(item) if encode else item
            while True:
                try:
                    producer.produce(topic, value=value, key=b"raw", on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        remaining = producer.flush(60)
        elapsed = time.perf_counter() - t0
        if remaining or self.failures:
            raise RuntimeError(f"raw producer: {remaining} not delivered, failures {self.failures[:3]}")
        return elapsed


def _project_round(producer: Any, topic: str, items: list[TriggerEventEnvelope]) -> float:
    t0 = time.perf_counter()
    futures = [producer.send(topic, TRIGGER_EVENT_CODEC.encode(item), key="project") for item in items]
    for future in futures:
        future.result()
    return time.perf_counter() - t0


def _produce_rounds(
    config: dict[str, Any], topic: str, items: list[Any], encoded: list[bytes], rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The best wall and CPU seconds of each variant over ``rounds`` (its clients are gone on return)."""
    from airflow_kafka_events.kafka.producer import RecordProducer

    best = {"raw": float("inf"), "project": float("inf"), "bytes": float("inf")}
    cpu = dict(best)  # the process's CPU seconds per round (all threads): less swayed by other load
    project, raw = RecordProducer(config), _Raw(config)
    try:
        _project_round(project, topic, items[:200])  # warm up: connection, producer id
        raw.round(topic, items[:200], encode=True)
        variants: dict[str, Callable[[], float]] = {
            "raw": lambda: raw.round(topic, items, encode=True),
            "project": lambda: _project_round(project, topic, items),
            "bytes": lambda: raw.round(topic, encoded, encode=False),
        }
        for _ in range(rounds):
            for name, run in variants.items():
                started = time.process_time()
                best[name] = min(best[name], run())
                cpu[name] = min(cpu[name], time.process_time() - started)
    finally:
        project.close()
    return best, cpu


def produce_figures(messages: int, rounds: int) -> dict[str, float]:
    from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
    from benchmarks.harness import create_topics, kafka_broker, remove_topics

    items = envelopes("b3", messages)
    encoded = [TRIGGER_EVENT_CODEC.encode(item) for item in items]
    with kafka_broker() as broker:
        config = KafkaSettings({"bootstrap.servers": broker.bootstrap}).producer_config()
        topic = f"bench-b3-{uuid.uuid4().hex[:8]}"
        create_topics(broker.bootstrap, [TopicSpec(topic, partitions=3)])
        try:
            best, cpu = _produce_rounds(config, topic, items, encoded, rounds)
        finally:
            remove_topics(broker.bootstrap, [topic])
    rates = {name: messages / seconds for name, seconds in best.items()}
    us = {name: seconds / messages * 1e6 for name, seconds in cpu.items()}
    print(f"messages per round: {messages}, rounds: {rounds}, envelope: {len(encoded[0])} bytes")
    print(f"raw, encoded inline      : {rates['raw']:9.0f} msg/s   CPU {us['raw']:6.1f} us/msg")
    print(f"project produce path     : {rates['project']:9.0f} msg/s   CPU {us['project']:6.1f} us/msg")
    print(f"raw, bytes encoded before: {rates['bytes']:9.0f} msg/s   CPU {us['bytes']:6.1f} us/msg")
    print(f"ratio project / raw inline: {rates['project'] / rates['raw']:.2f}x (CPU per message: ", end="")
    print(f"{us['project'] / us['raw']:.2f}x)")
    return rates


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000, help="messages per produce round")
    parser.add_argument("--rounds", type=int, default=3, help="produce rounds per variant")
    parser.add_argument("--codec-rounds", type=int, default=60)
    parser.add_argument("--number", type=int, default=200, help="calls per timed codec batch")
    parser.add_argument("--codec-only", action="store_true", help="skip the broker part")
    args = parser.parse_args(argv)
    codec_figures(args.codec_rounds, args.number)
    if not args.codec_only:
        produce_figures(args.messages, args.rounds)
    return 0

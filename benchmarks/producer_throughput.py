"""B0: envelope producer throughput — per-message acknowledged sends vs pipelined sends.

Both variants encode ``TriggerEventEnvelope`` records with the Avro codec and write them with
``acks=all`` + idempotence to the same broker, side by side in one run; the ratio is what matters
(absolute numbers depend on the machine). Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import time
import uuid

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
from airflow_kafka_events.kafka.producer import RecordProducer
from benchmarks.harness import create_topics, kafka_broker, remove_topics


def _envelopes(run: str, n: int) -> list[bytes]:
    payload = {"items": [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(10)]}
    return [
        TRIGGER_EVENT_CODEC.encode(
            TriggerEventEnvelope(trigger_run_id=run, sequence_index=i, is_last=i == n - 1, payload=payload)
        )
        for i in range(n)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args(argv)

    with kafka_broker() as broker:
        settings = KafkaSettings({"bootstrap.servers": broker.bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topics(broker.bootstrap, [TopicSpec(topic, partitions=3)])
        try:
            t0 = time.perf_counter()
            bodies = _envelopes("encode-only", args.messages)
            encode_s = time.perf_counter() - t0

            producer = RecordProducer(settings.producer_config())
            try:
                t0 = time.perf_counter()
                for body in _envelopes("sync", args.messages):
                    producer.send_and_wait(topic, body, key="sync")
                sync_s = time.perf_counter() - t0

                t0 = time.perf_counter()
                futures = [
                    producer.send(topic, body, key="pipelined") for body in _envelopes("pipe", args.messages)
                ]
                for f in futures:
                    f.result()
                pipe_s = time.perf_counter() - t0
            finally:
                producer.close()

            n = args.messages
            print(f"messages per variant: {n}, envelope size: {len(bodies[0])} bytes")
            print(f"encode only     : {n / encode_s:10.0f} msg/s")
            print(f"send_and_wait   : {n / sync_s:10.0f} msg/s  ({sync_s:.2f}s)")
            print(f"pipelined send  : {n / pipe_s:10.0f} msg/s  ({pipe_s:.2f}s)")
            print(f"ratio pipelined/sync: {sync_s / pipe_s:.1f}x")
        finally:
            remove_topics(broker.bootstrap, [topic])
    return 0

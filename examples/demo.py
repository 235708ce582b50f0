"""The airflow-kafka-events demo: everything runs on this machine, no Docker.

1. starts the embedded Kafka broker (a real single-node Apache Kafka in KRaft mode, from
   Maven Central jars) unless ``KAFKA_BOOTSTRAP_SERVERS`` points at one;
2. writes two interleaved paginated streams as Avro ``TriggerEventEnvelope`` records, keyed
   by ``trigger_run_id`` on a 3-partition topic — one of them ends in an error;
3. reads them back in order per stream and prints what happened;
4. starts a real Airflow (api-server, scheduler with the LocalExecutor, triggerer,
   dag-processor) on a temporary SQLite metadata DB with ``examples/dags`` and runs
   ``demo_streaming``: a producer defers ONCE while its trigger writes 100 pages to Kafka, and a
   consumer beside it handles the pages in order while the producer is still paging.

Run it with ``make demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from airflow_kafka_events.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes import ProducerIdentity, StreamError, TriggerEventEnvelope
from airflow_kafka_events.kafka.consumer import EnvelopeConsumer
from airflow_kafka_events.kafka.producer import EnvelopeProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, delete_topics, ensure_topics
from airflow_kafka_events.local_broker import LocalKafkaBroker
from airflow_kafka_events.streams import stream_id
from airflow_kafka_events.triggers.streaming import DEFAULT_TOPIC

PAGES = 100

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / ".demo"


def say(msg: str) -> None:
    print(msg, flush=True)


def broker_bootstrap(keep: bool) -> tuple[str, LocalKafkaBroker | None]:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"], None
    broker = LocalKafkaBroker(state_dir=DEMO_DIR / "kafka")
    t0 = time.monotonic()
    status = broker.start()
    say(
        f"[broker] local Kafka {status.version} up at {status.bootstrap_servers} (pid {status.pid}) "
        f"in {time.monotonic() - t0:.1f}s{'' if not keep else ' — left running (--keep)'}"
    )
    return str(status.bootstrap_servers), broker


def stream_pages(run_id: str, pages: int, fail_at: int | None) -> list[TriggerEventEnvelope]:
    producer = ProducerIdentity(
        dag_id="demo_paginated_api", run_id="manual__demo", task_id=run_id, try_number=1
    )
    out = []
    for i in range(pages):
        if fail_at is not None and i == fail_at:
            out.append(
                TriggerEventEnvelope(
                    trigger_run_id=run_id,
                    sequence_index=i,
                    is_last=True,
                    producer=producer,
                    error=StreamError(type="HTTPError", message=f"503 Service Unavailable on page {i}"),
                )
            )
            return out
        out.append(
            TriggerEventEnvelope(
                trigger_run_id=run_id,
                sequence_index=i,
                is_last=False,
                producer=producer,
                payload={"page": i, "items": [f"{run_id}-item-{i * 3 + j}" for j in range(3)]},
                resume_cursor=f"/items?page={i + 1}",
            )
        )
    out.append(
        TriggerEventEnvelope(trigger_run_id=run_id, sequence_index=pages, is_last=True, producer=producer)
    )
    return out


def envelope_demo(settings: KafkaSettings, admin: AdminClient) -> bool:
    """Part 1: two interleaved envelope streams written and read back in order."""
    topic = f"demo.trigger-events.{uuid.uuid4().hex[:8]}"
    ensure_topics(admin, [TopicSpec(topic, partitions=3)])
    say(f"[kafka]  created topic {topic} (3 partitions)")
    try:
        streams = {
            "orders-api": stream_pages("orders-api", pages=4, fail_at=None),
            "users-api": stream_pages("users-api", pages=5, fail_at=3),
        }
        producer = EnvelopeProducer(settings.producer_config())
        futures = []
        longest = max(len(s) for s in streams.values())
        for i in range(longest):  # interleave the two streams page by page
            for run_id, envs in streams.items():
                if i < len(envs):
                    futures.append(producer.send(topic, TRIGGER_EVENT_CODEC.encode(envs[i]), key=run_id))
        producer.close()
        receipts = [f.result() for f in futures]
        say(
            f"[write]  {len(receipts)} envelopes written with acks=all + idempotence, "
            f"partitions used: {sorted({r.partition for r in receipts})}"
        )

        config = settings.consumer_config(f"demo-{uuid.uuid4().hex[:8]}")
        seen: dict[str, list[TriggerEventEnvelope]] = {}
        with EnvelopeConsumer(config, TRIGGER_EVENT_CODEC, topics=[topic]) as consumer:
            deadline = time.monotonic() + 60
            while sum(map(len, seen.values())) < len(receipts) and time.monotonic() < deadline:
                records = consumer.poll_batch(max_records=100, timeout=0.5)
                for rec in records:
                    assert rec.value is not None, rec.error
                    env = rec.value
                    seen.setdefault(env.trigger_run_id, []).append(env)
                    if env.error:
                        what = f"FAILED: {env.error.type}: {env.error.message}"
                    elif env.is_last:
                        what = "end of stream"
                    else:
                        what = f"payload {env.payload}"
                    say(
                        f"[read]   p{rec.partition}@{rec.offset:<3} {env.trigger_run_id:<11} "
                        f"seq={env.sequence_index} {what}"
                    )
                consumer.commit(records)
        for run_id, envs in seen.items():
            order = [e.sequence_index for e in envs]
            assert order == sorted(order), f"{run_id} out of order: {order}"
            last = envs[-1]
            outcome = f"failed ({last.error.message})" if last.error else "complete"
            say(f"[result] {run_id}: {len(envs)} envelopes in order {order} -> {outcome}")
        ok = set(seen) == set(streams)
        say("[demo]   part 1 OK: every stream read back in order" if ok else "[demo]   part 1 FAILED")
        return ok
    finally:
        delete_topics(admin, [topic])


def airflow_demo(bootstrap: str, settings: KafkaSettings, admin: AdminClient) -> bool:
    """Part 2: real Airflow components run the streaming DAG of examples/dags."""
    sys.path.insert(0, str(REPO / "tests"))
    from harness.airflow_stack import AirflowStack

    ensure_topics(admin, [TopicSpec(DEFAULT_TOPIC, partitions=3)])
    home = DEMO_DIR / "airflow"
    shutil.rmtree(home, ignore_errors=True)
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    stack = AirflowStack(home, REPO / "examples" / "dags", {"AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(conn)})
    t0 = time.monotonic()
    stack.start(dag_ids=["demo_streaming"])
    say(
        f"[airflow] api-server, scheduler, triggerer, dag-processor healthy in {time.monotonic() - t0:.1f}s "
        f"(AIRFLOW_HOME={home})"
    )
    try:
        out = home / "demo-run"
        out.mkdir()
        t0 = time.monotonic()
        run_id = stack.trigger_dag("demo_streaming", conf={"dir": str(out)})
        state = stack.wait_for_dag_run("demo_streaming", run_id, timeout=300)
        say(f"[airflow] demo_streaming run {run_id}: {state} in {time.monotonic() - t0:.1f}s")
        rows = stack.state_change_log("demo_streaming", run_id=run_id, task_id="fetch_pages")
        states = [r.get("event") for r in rows]
        deferrals = states.count("deferred")
        say(
            f"[airflow] fetch_pages state changes: {' -> '.join(str(s) for s in states)}  "
            f"({deferrals} deferral for {PAGES} pages)"
        )
        handled = [json.loads(line) for line in (out / "handled.jsonl").read_text().splitlines()]
        seqs = [h["seq"] for h in handled]
        last_written = _last_envelope_time(settings, stream_id("demo_streaming", run_id, "fetch_pages"))
        early = sum(1 for h in handled if last_written is not None and h["at"] < last_written)
        say(
            f"[airflow] handle_pages handled {len(handled)} pages, in order: {seqs == list(range(PAGES))}; "
            f"{early} of them before the producer wrote its last page"
        )
        summary = stack.xcom("demo_streaming", run_id, "handle_pages")
        say(f"[airflow] handle_pages returned {summary}")
        ok = state == "success" and deferrals == 1 and seqs == list(range(PAGES))
        say("[demo]   part 2 OK: one deferral, each page handled once, in order" if ok else "[demo]   FAILED")
        if not ok:
            say(stack.diagnostics())
        return ok
    finally:
        stack.stop()
        say("[airflow] stopped")


def _last_envelope_time(settings: KafkaSettings, trigger_run_id: str) -> float | None:
    """emitted_at (epoch seconds) of the stream's is_last envelope."""
    config = settings.consumer_config(f"demo-check-{uuid.uuid4().hex[:8]}")
    with EnvelopeConsumer(config, TRIGGER_EVENT_CODEC, topics=[DEFAULT_TOPIC]) as consumer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for rec in consumer.poll_batch(max_records=500, timeout=0.5):
                env = rec.value
                if env is not None and env.trigger_run_id == trigger_run_id and env.is_last:
                    return env.emitted_at.timestamp()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the local broker running")
    parser.add_argument("--skip-airflow", action="store_true", help="only the Kafka part")
    args = parser.parse_args(argv)

    bootstrap, broker = broker_bootstrap(args.keep)
    settings = KafkaSettings({"bootstrap.servers": bootstrap})
    admin = AdminClient(settings.admin_config())
    try:
        ok = envelope_demo(settings, admin)
        if ok and not args.skip_airflow:
            ok = airflow_demo(bootstrap, settings, admin)
        say("[demo]   ALL OK" if ok else "[demo]   FAILED")
        return 0 if ok else 1
    finally:
        del admin  # release the client's connections before the broker goes away
        if broker is not None and not args.keep:
            broker.stop()
            say("[broker] stopped")


if __name__ == "__main__":
    sys.exit(main())

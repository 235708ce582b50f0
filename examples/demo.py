"""The airflow-kafka-events demo: everything runs on this machine, no Docker.

1. starts the embedded Kafka broker (a real single-node Apache Kafka in KRaft mode, from
   Maven Central jars) unless ``KAFKA_BOOTSTRAP_SERVERS`` points at one;
2. writes two interleaved paginated streams as Avro ``TriggerEventEnvelope`` records, keyed
   by ``trigger_run_id`` on a 3-partition topic — one of them ends in an error;
3. reads them back in order per stream and prints what happened;
4. starts a real Airflow (api-server, scheduler with the LocalExecutor, triggerer,
   dag-processor) on a temporary SQLite metadata DB with ``examples/dags`` and runs
   ``demo_streaming``: a producer defers ONCE while its trigger writes 100 pages to Kafka, and a
   consumer beside it handles the pages in order while the producer is still paging;
5. on the same Airflow, explicit asset events end to end:

   * the partition bridge (``airflow-kafka-events bridge``, a subprocess posting to the REST API
     as the ``op`` user ``bridge``): ``ingest_batches`` publishes batches 41 and 42 and fails on
     43; ``process_batch_partitioned`` gets one run per published batch, with its partition key;
   * an asset watcher in the triggerer: ``nightly_load`` fails, its DAG failure callback emits an
     event for ``ops://investigate``, and ``investigate_failure`` runs on it;
   * Airflow's own ``MessageQueueTrigger(scheme="kafka-events")`` as a watcher: an event for
     ``ops://reports`` emitted from outside Airflow runs ``refresh_reports``.

At the end it prints the address of each page of the Kafka Events view in the Airflow UI
(``examples/demo_ui.py``); ``make demo KEEP=1`` (``--keep-running``) leaves Airflow and the broker
running for a look until Ctrl-C; ``--screenshots DIR`` saves a picture of each page (the documentation's).
``make demo TOPOLOGY=production`` (``--topology production``) runs Airflow as the e2e tests do:
PostgreSQL, the CeleryExecutor on Redis with two workers, two triggerers (docs/production-topology.md).

Run it with ``make demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.kafka.consumer import EnvelopeConsumer
from airflow_kafka_events.kafka.producer import RecordProducer, close_all_producers
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, delete_topics, ensure_topics
from airflow_kafka_events.local_broker import LocalKafkaBroker
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_ui  # examples/demo_ui.py: the Kafka Events view, --keep-running
from demo_watcher import (  # examples/demo_watcher.py
    FAILING_DAG,
    INVESTIGATE_DAG,
    REFRESH_DAG,
    message_queue_demo,
    watcher_demo,
)

if TYPE_CHECKING:
    from harness.airflow_stack import AirflowStack
    from harness.bridge_process import BridgeProcess

PAGES = 100

# explicit asset events (examples/dags/ingest_batches.py, process_batch_partitioned.py,
# investigate_on_failure.py)
ASSET_EVENTS_TOPIC = "airflow.asset-events"
DLQ_TOPIC = "airflow.kafka-events.dlq"
INGEST_DAG = "ingest_batches"
PROCESS_DAG = "process_batch_partitioned"
ORDERS_BATCHES = "orders_batches"
ASSET_DAGS = (INGEST_DAG, PROCESS_DAG, FAILING_DAG, INVESTIGATE_DAG, REFRESH_DAG)

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
                    error=StreamFailure(type="HTTPError", message=f"503 Service Unavailable on page {i}"),
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
        producer = RecordProducer(settings.producer_config())
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


def airflow_demo(
    bootstrap: str,
    settings: KafkaSettings,
    admin: AdminClient,
    *,
    keep_running: bool = False,
    screenshots: Path | None = None,
    topology: str = "embedded",
) -> bool:
    """Parts 2 and 3 on ONE real Airflow (api-server, scheduler, triggerer, dag-processor)."""
    sys.path.insert(0, str(REPO / "tests"))
    from harness.airflow_stack import AirflowStack, AirflowStackError

    # the operator's command, as the README's quick start runs it: every topic the configuration names
    created = subprocess.run(
        [str(Path(sys.executable).parent / "airflow-kafka-events"), "topics", "ensure", "--bootstrap-servers",
         bootstrap, "--partitions", "3", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if created.returncode != 0:
        say(f"[kafka]  FAILED: topics ensure exited {created.returncode}: {created.stderr.strip()}")
        return False
    run = uuid.uuid4().hex[:8]
    groups = {"bridge": f"demo-asset-bridge-{run}", "watcher": f"demo-asset-watchers-{run}"}
    # The embedded broker keeps its topics between demos: both consumer groups start after the
    # records already there, so this demo's Airflow only sees this demo's events.
    skipped = sum(_start_at_end(bootstrap, group, ASSET_EVENTS_TOPIC) for group in groups.values())
    say(
        f"[kafka]  `airflow-kafka-events topics ensure`: {DEFAULT_TOPIC}, {ASSET_EVENTS_TOPIC}, "
        f"{DLQ_TOPIC}, the stream index ready; "
        f"new consumer groups start after {skipped // len(groups)} earlier records"
    )
    home = DEMO_DIR / "airflow"
    shutil.rmtree(home, ignore_errors=True)
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    watcher_conn = {
        "conn_type": "kafka",
        "extra": {
            "bootstrap.servers": bootstrap,
            "group.id": groups["watcher"],
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "10000",
        },
    }
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(conn),
        "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps(watcher_conn),
        # watchers sharing a consumer join together before it hands out records
        "AIRFLOW__TRIGGERER__SHARED_STREAM_COHORT_GRACE_PERIOD": "5",
        # nothing runs unasked (e.g. the @daily example DAGs); the demo unpauses what it uses
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # nightly_load retries once: 2 s between tries instead of 5 min
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "2",
        # the Kafka Events view's Health page: the bridge's consumer group
        "AIRFLOW__KAFKA_EVENTS__UI_BRIDGE_GROUP_IDS": groups["bridge"],
    }
    stack = AirflowStack(home, REPO / "examples" / "dags", env, users=demo_ui.UI_USERS, topology=topology)
    stack.enable_watcher_recheck()  # after an unclean stop, watchers ask the api-server what exists
    t0 = time.monotonic()
    stack.start(dag_ids=["demo_streaming", "demo_iteration", *ASSET_DAGS])
    # asset-scheduled DAGs: unpaused now, so the watcher's trigger is running by part 3
    for dag_id in (PROCESS_DAG, INVESTIGATE_DAG, REFRESH_DAG):
        stack.unpause(dag_id)
    say(
        f"[airflow] {', '.join(stack.components)} healthy in {time.monotonic() - t0:.1f}s "
        f"({topology} topology, {stack.database}, AIRFLOW_HOME={home})"
    )
    try:
        ok = streaming_demo(stack, home, settings)
        try:
            ok = asset_events_demo(stack, bootstrap, home, groups["bridge"]) and ok
        except AirflowStackError as exc:
            say(f"[assets] FAILED: {exc}")
            ok = False
        try:
            ok = iteration_demo(stack) and ok
        except AirflowStackError as exc:
            say(f"[iterate] FAILED: {exc}")
            ok = False
        ok = operator_cli_demo(bootstrap) and ok
        ok = demo_ui.ui_demo(stack, say) and ok
        if screenshots is not None:
            ok = demo_ui.save_screenshots(stack, screenshots, say) and ok
        if keep_running:
            demo_ui.stay_open(stack, say)
        return ok
    finally:
        stack.stop()
        say("[airflow] stopped")


def streaming_demo(stack: AirflowStack, home: Path, settings: KafkaSettings) -> bool:
    """Part 2: the streaming DAG of examples/dags."""
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


def asset_events_demo(stack: AirflowStack, bootstrap: str, home: Path, bridge_group: str) -> bool:
    """Part 3: explicit asset events into Airflow, through the partition bridge and an asset watcher."""
    t0 = time.monotonic()
    from harness.bridge_process import BridgeProcess

    bridge = BridgeProcess(
        stack,
        bootstrap,
        topic=ASSET_EVENTS_TOPIC,
        dlq=DLQ_TOPIC,
        group=bridge_group,
        log_path=home / "logs" / "bridge.log",
        # only the partitioned asset; ops://investigate is left to its watcher
        assets=[ORDERS_BATCHES],
        allow=[json.dumps({"source_kinds": ["task"], "dag_ids": [INGEST_DAG]})],
    )
    say(
        f"[assets] partition bridge started (pid {bridge.proc.pid}, group {bridge_group}, "
        f"log {bridge.log_path})"
    )
    try:
        ok = partition_bridge_demo(stack, bridge)
        ok = demo_ui.refused_event_demo(bootstrap, say, topic=ASSET_EVENTS_TOPIC, dlq_topic=DLQ_TOPIC) and ok
    finally:
        code = bridge.stop()
    stopped = code == 0 and "bridge stopped" in bridge.log()
    say(f"[assets] bridge stopped by SIGTERM: exit code {code}")
    if not stopped:
        say(bridge.log()[-3000:])
    ok = ok and stopped
    say(
        f"[demo]   part 3, use case 1 OK in {time.monotonic() - t0:.1f}s: one partitioned run per published "
        "batch, none for the failed one"
        if ok
        else "[demo]   part 3, use case 1 FAILED"
    )
    t0 = time.monotonic()
    watched = watcher_demo(stack)
    say(
        f"[demo]   part 3, use case 2 OK in {time.monotonic() - t0:.1f}s: a failure callback's event "
        "ran the investigation DAG"
        if watched
        else "[demo]   part 3, use case 2 FAILED"
    )
    t0 = time.monotonic()
    queued = message_queue_demo(stack, bootstrap, ASSET_EVENTS_TOPIC)
    say(
        f"[demo]   part 3, use case 3 OK in {time.monotonic() - t0:.1f}s: an external event ran the DAG "
        "that Airflow's MessageQueueTrigger schedules"
        if queued
        else "[demo]   part 3, use case 3 FAILED"
    )
    if not (ok and watched and queued):
        say(stack.diagnostics())
    return ok and watched and queued


def partition_bridge_demo(stack: AirflowStack, bridge: BridgeProcess) -> bool:
    """Use case 1: batches published before the ingestion failed each get their partitioned run."""
    from harness.airflow_stack import AirflowStackError

    keys = {"batch-0041", "batch-0042"}
    t0 = time.monotonic()
    run_id = stack.trigger_dag(INGEST_DAG, conf={"batches": [41, 42, 43], "fail_at": 43})
    state = stack.wait_for_dag_run(INGEST_DAG, run_id, timeout=180)
    say(f"[assets] {INGEST_DAG} run {run_id}: {state} in {time.monotonic() - t0:.1f}s (batch 43 raised)")

    def partitioned_runs() -> list[dict[str, Any]]:
        rows = stack.query(
            "SELECT run_id, state, partition_key FROM dag_run WHERE dag_id = ? ORDER BY id", (PROCESS_DAG,)
        )
        return [r for r in rows if r["partition_key"] is not None]

    def finished() -> list[dict[str, Any]] | None:
        if bridge.proc.poll() is not None:
            raise AirflowStackError(
                f"the bridge exited with {bridge.proc.returncode}:\n{bridge.log()[-3000:]}"
            )
        runs = [r for r in partitioned_runs() if r["partition_key"] in keys]
        done = {r["partition_key"] for r in runs if r["state"] in ("success", "failed")}
        return runs if done == keys else None

    runs = stack.wait_for(
        finished, 180, f"a finished {PROCESS_DAG} run for each of {sorted(keys)}", ("scheduler",)
    )
    say(f"[assets] {PROCESS_DAG} runs {time.monotonic() - t0:.1f}s after the trigger:")
    for r in runs:
        seen = (
            stack.xcom(PROCESS_DAG, r["run_id"], "validate_and_transform") if r["state"] == "success" else {}
        )
        say(
            f"[assets]   partition_key={r['partition_key']}  {r['state']:<7}  run {r['run_id']}  "
            f"processed {seen.get('path')}"
        )
    events = stack.query(
        "SELECT ae.partition_key, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.name = ? ORDER BY ae.id",
        (ORDERS_BATCHES,),
    )
    posted = [
        f"{e['partition_key']} (event {json.loads(e['extra'])['airflow_kafka_events']['event_id'][:8]}…)"
        for e in events
    ]
    say(f"[assets] the bridge posted {len(events)} asset events for {ORDERS_BATCHES}: {', '.join(posted)}")
    all_runs = partitioned_runs()
    unexpected = [r for r in all_runs if r["partition_key"] not in keys]
    if unexpected:
        say(f"[assets] UNEXPECTED {PROCESS_DAG} runs: {unexpected}")
    else:
        say(f"[assets] no {PROCESS_DAG} run for batch-0043: it failed before it was published")
    return (
        state == "failed"
        and sorted(r["partition_key"] for r in runs) == sorted(keys)
        and all(r["state"] == "success" for r in runs)
        and not unexpected
        and sorted(e["partition_key"] for e in events) == sorted(keys)
    )


def iteration_demo(stack: AirflowStack) -> bool:
    """Part 4: task iteration — 5,000 items in ONE task instance, then in 3 (batch), results read lazily."""
    dag_id = "demo_iteration"
    t0 = time.monotonic()
    run_id = stack.trigger_dag(dag_id)
    state = stack.wait_for_dag_run(dag_id, run_id, timeout=300)
    say(f"[iterate] {dag_id} run {run_id}: {state} in {time.monotonic() - t0:.1f}s")
    tis: dict[str, list[dict[str, Any]]] = {}
    for ti in stack.task_instances(dag_id, run_id):
        tis.setdefault(ti["task_id"], []).append(ti)
    for task_id in ("square", "square_batched", "check"):
        states = sorted({t["state"] for t in tis.get(task_id, [])})
        say(f"[iterate]   {task_id:<15} {len(tis.get(task_id, [])):>2} task instance(s), {'/'.join(states)}")
    summary = stack.xcom(dag_id, run_id, "square") or {}
    results = (summary.get("results") or {}).get("trigger_run_id")
    say(
        f"[iterate] square's summary: {summary.get('items')} items, {summary.get('succeeded')} succeeded, "
        f"{summary.get('failed')} failed; results stream {results}"
    )
    ok = (
        state == "success"
        and len(tis.get("square", [])) == 1
        and len(tis.get("square_batched", [])) == 3
        and summary.get("succeeded") == 5_000
    )
    say(
        "[demo]   part 4 OK: 5,000 items in one task instance (no map-length cap), 3 with batch(size=3)"
        if ok
        else "[demo]   part 4 FAILED"
    )
    return ok


def operator_cli_demo(bootstrap: str) -> bool:
    """Part 5: what an operator sees from a shell: `streams ls --json` and `dlq ls --json`."""
    command = [str(Path(sys.executable).parent / "airflow-kafka-events")]
    kafka = ["--bootstrap-servers", bootstrap, "--since", "1h", "--json"]
    # streams ls reads the stream index (the streaming triggers' and readers' state records): every
    # stream, whatever the topic holds besides (part 4's 5,000 results share it)
    streams = subprocess.run(
        [*command, "streams", "ls", "--dag-id", "demo_streaming", "--bootstrap-servers", bootstrap, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    letters = subprocess.run(
        [*command, "dlq", "ls", "--topic", DLQ_TOPIC, *kafka], capture_output=True, text=True, timeout=120
    )
    if streams.returncode != 0 or letters.returncode != 0:
        say(f"[cli]    FAILED: streams ls / dlq ls exited {streams.returncode} / {letters.returncode}: "
            f"{(streams.stderr or letters.stderr).strip()}")  # fmt: skip
        return False
    found, dead = json.loads(streams.stdout), json.loads(letters.stdout)
    done = [s for s in found["streams"] if s["state"] == "complete" and s["pages"] == PAGES]
    reasons = sorted({r["reason"] for r in dead["records"]})
    say(
        f"[cli]    `streams ls --json`: {len(found['streams'])} demo_streaming stream(s), {len(done)} "
        f"complete with {PAGES} pages; `dlq ls --json`: {len(dead['records'])} dead letter(s) {reasons} "
        f"({dead['window']['records_scanned']} records scanned)"
    )
    read = [c for s in done for c in s["consumers"] if c["finished"] and c["lag_pages"] == 0]
    indexed = found["index"]["streams"]
    say(f"[cli]    the stream index: {indexed} stream(s); {len(read)} finished reader(s) of the demo's")
    ok = bool(done) and bool(read) and all("source_topic" in r for r in dead["records"])
    say("[demo]   part 5 OK: the operator CLI lists the demo's stream" if ok else "[demo]   part 5 FAILED")
    return ok


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout: float = 30.0) -> tuple[int, int]:
    """A partition's watermarks, waiting out a leader still being elected (a new or moved topic)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=5)
        except KafkaException as exc:
            if not exc.args[0].retriable() and exc.args[0].code() not in _LEADER_SETTLING:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_LEADER_SETTLING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _start_at_end(bootstrap: str, group: str, topic: str) -> int:
    """Commit the end offsets of ``topic`` for the new ``group``; return how many records that skips."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        marks = {p: _watermarks(consumer, TopicPartition(topic, p)) for p in partitions}
        consumer.commit(
            offsets=[TopicPartition(topic, p, high) for p, (_, high) in marks.items()], asynchronous=False
        )
        return sum(high - low for low, high in marks.values())
    finally:
        consumer.close()


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


def registry_demo(settings: KafkaSettings, admin: AdminClient) -> bool:
    """Optional part (``--registry``): asset events in a schema registry's wire format, read by
    confluent-kafka's own AvroDeserializer (what a service in another language does)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from airflow_kafka_events.assets.publish import build_envelope, publish
    from airflow_kafka_events.envelopes import schemas
    from airflow_kafka_events.envelopes.framing import parse_confluent
    from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
    from airflow_kafka_events.envelopes.registry import envelope_subject, register_schema, registry_schema
    from airflow_kafka_events.kafka.producer import get_producer
    from airflow_kafka_events.local_broker.registry import LocalSchemaRegistry

    registry = LocalSchemaRegistry(DEMO_DIR / "registry")
    t0 = time.monotonic()
    url = str(registry.start().url)
    say(f"[registry] Apicurio Registry up at {url} in {time.monotonic() - t0:.1f}s")
    topic = f"demo.asset-events.{uuid.uuid4().hex[:8]}"
    try:
        ensure_topics(admin, [TopicSpec(topic, partitions=1)])
        framed = settings.with_overrides({"schema.registry.url": url})
        assert framed.registry is not None
        name = schemas.ASSET_EVENT_ENVELOPE
        subject = envelope_subject(framed.registry, name, topic)
        report = register_schema(framed.registry.new_client(), name, subject, registry_schema(name))
        say(f"[registry] {report.line()}")
        envelope = build_envelope(
            asset=AssetRef(name="demo-registry", uri="s3://demo/registry"),
            source=EventSource(SourceKind.EXTERNAL, producer="demo"),
            partition_key="2026-12-02",
        )
        publish(
            envelope, producer=get_producer(framed.producer_config()), topic=topic, codec=framed.codecs.asset
        )
        consumer = Consumer({**framed.consumer_config(f"demo-{uuid.uuid4().hex[:8]}")})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline, msg = time.monotonic() + 30, None
            while msg is None and time.monotonic() < deadline:
                polled = consumer.poll(0.5)
                msg = polled if polled is not None and polled.error() is None else None
        finally:
            consumer.close()
        assert msg is not None, "the asset event did not come back"
        value = msg.value()
        schema_id, _ = parse_confluent(value)
        record = AvroDeserializer(SchemaRegistryClient({"url": url}))(
            value, SerializationContext(topic, MessageField.VALUE)
        )
        ok = AssetEventEnvelope.from_avro(record) == envelope == framed.codecs.asset.decode(value)
        say(
            f"[registry] wrote {len(value)} bytes: 00 + schema id {schema_id} + Avro; confluent-kafka's "
            f"AvroDeserializer read event {record['event_id']} of {record['asset']['uri']}"
        )
        say("[demo]   registry part OK" if ok else "[demo]   registry part FAILED")
        return ok
    finally:
        delete_topics(admin, [topic])
        registry.stop()
        say("[registry] stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the local broker running")
    parser.add_argument("--skip-airflow", action="store_true", help="only the Kafka part")
    parser.add_argument(
        "--registry",
        action="store_true",
        help="also write asset events through a local schema registry (Apicurio; needs Java 21+)",
    )
    parser.add_argument(
        "--keep-running", action="store_true", help="leave Airflow and the broker running until Ctrl-C"
    )
    parser.add_argument(
        "--screenshots", type=Path, metavar="DIR", help="save the view's pages as PNGs in DIR"
    )
    parser.add_argument(
        "--topology",
        choices=("embedded", "production"),
        default="embedded",
        help="embedded: SQLite + LocalExecutor; production: PostgreSQL + CeleryExecutor on Redis, "
        "two workers, two triggerers",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    bootstrap, broker = broker_bootstrap(args.keep)
    settings = KafkaSettings({"bootstrap.servers": bootstrap})
    admin = AdminClient(settings.admin_config())
    try:
        ok = envelope_demo(settings, admin)
        if ok and args.registry:
            ok = registry_demo(settings, admin)
        if ok and not args.skip_airflow:
            ok = airflow_demo(
                bootstrap,
                settings,
                admin,
                keep_running=args.keep_running,
                screenshots=args.screenshots,
                topology=args.topology,
            )
        say(f"[demo]   {'ALL OK' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
        return 0 if ok else 1
    finally:
        close_all_producers()  # the shared producers (emit, dead letters): closed while the broker is up
        del admin  # release the client's connections before the broker goes away
        if broker is not None and not args.keep:
            broker.stop()
            say("[broker] stopped")


if __name__ == "__main__":
    sys.exit(main())

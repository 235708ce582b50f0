"""The partition bridge with a real Airflow: partitioned DAG runs from Kafka asset events.

The bridge runs as a subprocess (``python -m airflow_kafka_events.cli.main bridge``) against the
session stack's api-server, as the simple-auth-manager user ``bridge`` (role ``op``), reading its
password from the stack's passwords file.  Each test uses its own topics, consumer group and
partition keys (the asset and the DAGs are shared by the session).

* use case 1: ``e2e_bridge_ingest`` publishes ``batch-41`` and ``batch-42`` as it commits them and
  fails on ``batch-43``; ``e2e_bridge_process_batch`` (``PartitionedAssetTimetable``) runs once
  for each of 41 and 42, with that partition key, and never for 43;
* three keys give three partitioned runs; publishing an event twice gives one AssetEvent; an
  event for an asset whose URI is only a substring of the real asset's URI is dead-lettered
  (``unknown-asset``) and the bridge goes on;
* the bridge stopped between a POST and its commit (fault hook) and restarted does not post
  that event again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.assets.publish import emit
from airflow_kafka_events.bridge.service import FAULT_EXIT_CODE
from airflow_kafka_events.dead_letters.letter import DeadLetter
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack
from harness.bridge_process import BridgeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

INGEST = "e2e_bridge_ingest"
PROCESS = "e2e_bridge_process_batch"
ASSET_NAME = "e2e_bridge_batches"
ASSET_URI = "x-e2e://bridge/batches"


@pytest.fixture
def bridge_factory(
    airflow_stack: AirflowStack, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Callable[..., BridgeProcess]]:
    topic = new_topic(partitions=3, prefix="e2e-asset-events")
    dlq = new_topic(partitions=1, prefix="e2e-bridge-dlq")
    group = f"e2e-bridge-{uuid.uuid4().hex[:8]}"
    started: list[BridgeProcess] = []

    def start(env: dict[str, str] | None = None) -> BridgeProcess:
        bridge = BridgeProcess(
            airflow_stack,
            kafka_bootstrap,
            topic=topic,
            dlq=dlq,
            group=group,
            log_path=tmp_path / f"bridge-{len(started)}.log",
            assets=["x-e2e://bridge/*"],
            allow=[
                '{"source_kinds": ["task"], "dag_ids": ["e2e_bridge_*"]}',
                '{"source_kinds": ["external"], "producers": ["e2e-bridge"]}',
            ],
            env=env,
        )
        started.append(bridge)
        return bridge

    start.topic = topic  # type: ignore[attr-defined]
    start.dlq = dlq  # type: ignore[attr-defined]
    start.group = group  # type: ignore[attr-defined]
    # the asset becomes active (known to the REST API) once a DAG using it is parsed
    airflow_stack.wait_dag_parsed(PROCESS, timeout=180)
    airflow_stack.wait_dag_parsed(INGEST, timeout=180)
    try:
        yield start
    finally:
        for bridge in started:
            bridge.stop()


def asset_id(stack: AirflowStack) -> int:
    rows = stack.query("SELECT id FROM asset WHERE name = ? AND uri = ?", (ASSET_NAME, ASSET_URI))
    assert len(rows) == 1, rows
    return int(rows[0]["id"])


def asset_events(stack: AirflowStack, keys: set[str]) -> list[dict[str, Any]]:
    rows = stack.query(
        "SELECT id, partition_key, extra FROM asset_event WHERE asset_id = ? ORDER BY id", (asset_id(stack),)
    )
    events = []
    for row in rows:
        if row["partition_key"] in keys:
            row["extra"] = json_column(row["extra"])
            events.append(row)
    return events


def partitioned_runs(stack: AirflowStack, keys: set[str]) -> list[dict[str, Any]]:
    rows = stack.query(
        "SELECT run_id, state, partition_key, run_type FROM dag_run WHERE dag_id = ? ORDER BY id", (PROCESS,)
    )
    return [row for row in rows if row["partition_key"] in keys]


def wait_runs_done(stack: AirflowStack, keys: set[str], timeout: float = 300) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        runs = partitioned_runs(stack, keys)
        finished = {r["partition_key"] for r in runs if r["state"] in ("success", "failed")}
        return runs if finished == keys else None

    return stack.wait_for(
        done, timeout, f"one finished {PROCESS} run for each of {sorted(keys)}", ("scheduler", "api-server")
    )


def committed(bootstrap: str, group: str, topic: str, partitions: int = 3) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def read_dead_letters(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"e2e-dlq-reader-{uuid.uuid4().hex[:8]}"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found.append(msg)
        return found
    finally:
        consumer.close()


def external(bootstrap: str, topic: str, key: str, *, uri: str = ASSET_URI, **kwargs: Any) -> str:
    receipt = emit(
        uri,
        name=ASSET_NAME if uri == ASSET_URI else uri,
        partition_key=key,
        topic=topic,
        producer="e2e-bridge",
        bootstrap_servers=bootstrap,
        **kwargs,
    )
    return receipt.event_id


# --------------------------------------------------------------------------- use case 1
def test_batches_published_before_the_ingestion_failed_each_run_their_partition(
    airflow_stack: AirflowStack, kafka_bootstrap: str, bridge_factory, tmp_path: Path
):
    stack = airflow_stack
    started = time.monotonic()
    suffix = uuid.uuid4().hex[:6]
    batches = [f"41-{suffix}", f"42-{suffix}", f"43-{suffix}"]
    keys = {f"batch-{b}" for b in batches[:2]}
    out = tmp_path / "committed"
    out.mkdir()
    out.chmod(0o777)
    bridge = bridge_factory()

    run_id = stack.trigger_dag(
        INGEST,
        conf={"topic": bridge_factory.topic, "batches": batches, "fail_at": batches[2], "dir": str(out)},
    )
    assert stack.wait_for_dag_run(INGEST, run_id, timeout=300) == "failed"
    assert sorted(p.name for p in out.iterdir()) == sorted(f"batch-{b}.json" for b in batches[:2])

    runs = wait_runs_done(stack, keys)
    assert sorted(r["partition_key"] for r in runs) == sorted(keys), runs  # one run per key
    assert all(r["state"] == "success" for r in runs), (runs, bridge.log()[-3000:])
    assert partitioned_runs(stack, {f"batch-{batches[2]}"}) == []

    events = asset_events(stack, keys | {f"batch-{batches[2]}"})
    assert sorted(e["partition_key"] for e in events) == sorted(keys)
    for event in events:
        extra = event["extra"]
        assert extra["from_rest_api"] is True
        assert extra["partition_date"] == "2026-01-31T00:00:00+00:00"
        assert extra["rows"] == 100
        info = extra["airflow_kafka_events"]
        assert info["source"]["kind"] == "task"
        assert info["source"]["dag_id"] == INGEST and info["source"]["run_id"] == run_id
        assert info["idempotency_key"] and info["event_id"]

    for run in runs:
        seen = stack.xcom(PROCESS, run["run_id"], "process_batch")
        assert seen["partition_key"] == run["partition_key"]
        (extra,) = seen["extras"]
        assert extra["partition_date"] == "2026-01-31T00:00:00+00:00"
        assert extra["batch_id"] == run["partition_key"].removeprefix("batch-")
    print(f"use case 1: {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------------- keys and duplicates
def test_three_keys_three_runs_and_a_duplicate_publish_is_one_asset_event(
    airflow_stack: AirflowStack, kafka_bootstrap: str, bridge_factory
):
    stack = airflow_stack
    suffix = uuid.uuid4().hex[:6]
    keys = [f"day-{n}-{suffix}" for n in (1, 2, 3)]
    bridge = bridge_factory()
    topic = bridge_factory.topic
    # The REST API's uri_pattern is a substring search: this URI finds the real asset
    # (x-e2e://bridge/batches contains it), and only the exact match may be used.
    near_miss = external(kafka_bootstrap, topic, keys[0], uri="x-e2e://bridge/batche")
    first = external(kafka_bootstrap, topic, keys[0], extra={"n": 1})
    repeat = external(kafka_bootstrap, topic, keys[0], extra={"n": 1})  # same content: same idempotency key
    assert first != repeat
    for key in keys[1:]:
        external(kafka_bootstrap, topic, key, extra={"n": 1})

    runs = wait_runs_done(stack, set(keys))
    group = bridge_factory.group
    assert sorted(r["partition_key"] for r in runs) == sorted(keys)
    assert all(r["state"] == "success" for r in runs), runs
    stack.wait_for(
        lambda: sum(o for o in committed(kafka_bootstrap, group, topic).values() if o > 0) == 5,
        60,
        "the bridge to commit all five records",
        ("api-server",),
    )
    events = asset_events(stack, set(keys))
    assert sorted(e["partition_key"] for e in events) == sorted(keys), events
    assert events[0]["extra"]["airflow_kafka_events"]["event_id"] == first
    assert "repeats idempotency key" in bridge.log()
    (dead,) = read_dead_letters(kafka_bootstrap, bridge_factory.dlq, 1)
    letter = DeadLetter.from_headers(dead.headers())
    assert (letter.reason, letter.event_id) == ("unknown-asset", near_miss)
    assert "x-e2e://bridge/batche" in letter.error_message


# --------------------------------------------------------------------------- crash between POST and commit
def test_bridge_stopped_between_post_and_commit_does_not_post_again(
    airflow_stack: AirflowStack, kafka_bootstrap: str, bridge_factory
):
    stack = airflow_stack
    suffix = uuid.uuid4().hex[:6]
    crashed_key, later_key = f"crash-{suffix}", f"after-{suffix}"
    topic, group = bridge_factory.topic, bridge_factory.group
    faulty = bridge_factory({"AIRFLOW_KAFKA_EVENTS_BRIDGE_FAULT": f"exit-after-post:{crashed_key}"})
    crashed_event = external(kafka_bootstrap, topic, crashed_key)
    assert faulty.wait_exit(timeout=180) == FAULT_EXIT_CODE, faulty.log()[-3000:]
    assert "fault injection" in faulty.log()

    (posted,) = asset_events(stack, {crashed_key})  # the POST happened ...
    assert posted["extra"]["airflow_kafka_events"]["event_id"] == crashed_event
    assert all(o < 0 for o in committed(kafka_bootstrap, group, topic).values())  # ... the commit did not

    restarted = bridge_factory()
    external(kafka_bootstrap, topic, later_key)
    runs = wait_runs_done(stack, {crashed_key, later_key})
    stack.wait_for(
        lambda: sum(o for o in committed(kafka_bootstrap, group, topic).values() if o > 0) == 2,
        60,
        "the restarted bridge to commit both records",
        ("api-server",),
    )
    events = asset_events(stack, {crashed_key, later_key})
    assert sorted(e["partition_key"] for e in events) == sorted([crashed_key, later_key]), events
    assert sorted(r["partition_key"] for r in runs) == sorted([crashed_key, later_key])
    assert "already present" in restarted.log()
    assert restarted.stop() == 0
    assert "bridge stopped" in restarted.log()
    assert "bridge-password" not in faulty.log() + restarted.log()

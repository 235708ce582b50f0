"""Asset events in a schema registry's wire format through a real Airflow: the asset watcher (in the
triggerer) and the partition bridge (a subprocess posting to the api-server) each turn them into
exactly one AssetEvent.

The shared stack's ``kafka_registry`` connection reaches the session's broker and schema registry
(tests/e2e/conftest.py).  For each reader, two records: one written by confluent-kafka's own
``AvroSerializer`` against the registry (what a service in another language writes), one by the
package's ``emit_asset_event`` in a task, through that connection.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.envelopes.framing import CONFLUENT_MAGIC, parse_confluent
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.watcher.stream import state_key
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack
from harness.bridge_process import BridgeProcess
from harness.kafka_records import high_watermark
from harness.registry_records import confluent_serialized

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CONN = "kafka_registry"  # as in the DAG file
EMIT, WATCHED_DAG, BRIDGED_DAG = "e2e_registry_emit", "e2e_registry_watched", "e2e_registry_bridged"
WATCHED = AssetRef(name="e2e://registry/watched", uri="e2e://registry/watched")
BRIDGED = AssetRef(name="e2e_registry_bridged", uri="x-e2e://registry/bridged")
PRODUCER = "e2e-registry"
EVENT_TIMEOUT = 180.0


@pytest.fixture
def stack(airflow_stack: AirflowStack, kafka_admin, airflow_extra_env: dict[str, str]) -> AirflowStack:
    assert f"AIRFLOW_CONN_{CONN.upper()}" in airflow_extra_env, "tests/e2e/conftest.py adds the connection"
    run = airflow_extra_env["AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN"]
    ensure_topics(
        kafka_admin,
        [
            TopicSpec(f"e2e.registry.events.{run}", partitions=1),
            TopicSpec(f"e2e.registry.dlq.{run}", partitions=1),
        ],
    )
    for dag_id in (EMIT, WATCHED_DAG, BRIDGED_DAG):
        airflow_stack.wait_dag_parsed(dag_id, timeout=180)
    return airflow_stack


def _raw_values(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-raw-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found.append(msg.value())
        return found
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def _watcher_position(stack: AirflowStack, topic: str) -> int:
    """Where the watcher resumes on ``topic[0]``, from its asset's state store."""
    rows = stack.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.uri = ? AND s.key = ?",
        (WATCHED.uri, state_key(CONN)),
    )
    if not rows:
        return -1
    value = json.loads(rows[0]["value"]) if isinstance(rows[0]["value"], str) else rows[0]["value"]
    return int(value["positions"].get(topic, {}).get("0", -1))


def _event_ids(stack: AirflowStack, asset: AssetRef) -> list[str]:
    """The package event id of each of ``asset``'s AssetEvents, in order (a watcher's event carries
    it in its payload, a bridge's in its provenance)."""
    rows = stack.query(
        "SELECT ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.uri = ? ORDER BY ae.id",
        (asset.uri,),
    )
    ids = []
    for row in rows:
        extra = json_column(row["extra"]) or {}
        found = (extra.get("payload") or extra.get("airflow_kafka_events") or {}).get("event_id")
        ids.append(found)
    return ids


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_registry_framed_events_become_one_asset_event_each_through_the_watcher_and_the_bridge(
    stack: AirflowStack,
    kafka_bootstrap: str,
    schema_registry_url: str,
    airflow_extra_env: dict[str, str],
    new_topic,
    tmp_path: Path,
):
    started = time.monotonic()
    run = airflow_extra_env["AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN"]
    watched_topic = f"e2e.registry.events.{run}"
    bridge_topic = new_topic(partitions=1, prefix="e2e-registry-bridge")
    bridge_dlq = new_topic(partitions=1, prefix="e2e-registry-bridge-dlq")
    tag = uuid.uuid4().hex[:8]
    watched_before, bridged_before = high_watermark(kafka_bootstrap, watched_topic), 0

    # (a) confluent-kafka's AvroSerializer, as a service in another language writes
    source = EventSource(SourceKind.EXTERNAL, producer=PRODUCER)
    serialized = {
        asset.uri: build_envelope(asset=asset, source=source, extra={"tag": tag, "by": "AvroSerializer"})
        for asset in (WATCHED, BRIDGED)
    }
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    for asset, topic in ((WATCHED, watched_topic), (BRIDGED, bridge_topic)):
        value = confluent_serialized(schema_registry_url, topic, serialized[asset.uri])
        producer.send_and_wait(topic, value, key=asset.uri, timeout=30)

    # (b) emit_asset_event in a task, through the connection with the registry
    run_id = stack.trigger_dag(EMIT, conf={"tag": tag, "bridge_topic": bridge_topic})
    assert stack.wait_for_dag_run(EMIT, run_id, timeout=240) == "success"
    emitted = stack.xcom(EMIT, run_id, "emit")

    # both records of each topic are in the registry's wire format, with ids the registry knows
    registry = SchemaRegistryClient({"url": schema_registry_url})
    for topic, before in ((watched_topic, watched_before), (bridge_topic, bridged_before)):
        values = _raw_values(kafka_bootstrap, topic, before + 2)[before:]
        assert len(values) == 2 and all(v[0] == CONFLUENT_MAGIC for v in values), values
        for value in values:
            schema_id, _ = parse_confluent(value)
            assert registry.get_schema(schema_id).schema_type == "AVRO"

    bridge = BridgeProcess(
        stack,
        kafka_bootstrap,
        topic=bridge_topic,
        dlq=bridge_dlq,
        group=f"e2e-registry-bridge-{tag}",
        log_path=tmp_path / "bridge.log",
        assets=["x-e2e://registry/*"],
        allow=[
            '{"source_kinds": ["task"], "dag_ids": ["e2e_registry_*"]}',
            f'{{"source_kinds": ["external"], "producers": ["{PRODUCER}"]}}',
        ],
        extra_args=["--schema-registry-url", schema_registry_url],
    )
    try:
        expected = {
            WATCHED: [serialized[WATCHED.uri].event_id, emitted["watched"]],
            BRIDGED: [serialized[BRIDGED.uri].event_id, emitted["bridged"]],
        }
        for asset, ids in expected.items():
            stack.wait_for(
                lambda asset=asset, ids=ids: set(ids) <= set(_event_ids(stack, asset)),
                EVENT_TIMEOUT,
                f"AssetEvents {ids} of {asset.uri} ({bridge.log()[-2000:]})",
                ("triggerer", "api-server"),
            )
        # both readers are past both records: nothing more can come of them
        watched_end = high_watermark(kafka_bootstrap, watched_topic)
        stack.wait_for(
            lambda: _watcher_position(stack, watched_topic) >= watched_end,
            90,
            "the watcher to store its position at the end of its topic",
            ("triggerer",),
        )
        stack.wait_for(
            lambda: _committed(kafka_bootstrap, f"e2e-registry-bridge-{tag}", bridge_topic) == 2,
            90,
            "the bridge to commit both records",
            ("api-server",),
        )
    finally:
        exit_code = bridge.stop()
    assert exit_code == 0, bridge.log()[-3000:]

    for asset, ids in expected.items():
        found = [event_id for event_id in _event_ids(stack, asset) if event_id in ids]
        assert sorted(found) == sorted(ids), (asset.uri, found)  # exactly one AssetEvent per record
    assert high_watermark(kafka_bootstrap, f"e2e.registry.dlq.{run}") == 0  # nothing dead-lettered
    assert high_watermark(kafka_bootstrap, bridge_dlq) == 0
    print(f"registry e2e: {time.monotonic() - started:.1f}s")

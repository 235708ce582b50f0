"""Asset events against a real Kafka broker: receipts point at the stored records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.assets import publish as external
from airflow_kafka_events.assets.publish import Receipt, build_envelope, publish
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from harness.airflow_free import run_without_airflow
from unit.assets.sdk_contexts import dag_callback_context, task_context

pytestmark = pytest.mark.integration

CONN_ID = "kafka_events_asset_test"


def _record_at(bootstrap: str, topic: str, partition: int, offset: int, timeout: float = 30.0):
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                assert (msg.partition(), msg.offset()) == (partition, offset)
                return msg
        raise AssertionError(f"no record at {topic}[{partition}]@{offset} within {timeout}s")
    finally:
        consumer.close()


def _check_receipt(bootstrap: str, receipt: Receipt) -> tuple[AssetEventEnvelope, object]:
    msg = _record_at(bootstrap, receipt.topic, receipt.partition, receipt.offset)
    envelope = ASSET_EVENT_CODEC.decode(msg.value())
    assert envelope.event_id == receipt.event_id
    _, ts = msg.timestamp()
    assert receipt.timestamp is not None and receipt.timestamp.tzinfo is not None
    assert int(receipt.timestamp.timestamp() * 1000) == ts
    assert msg.key() == envelope.asset.uri.encode()
    headers = dict(msg.headers() or [])
    assert headers["event_id"] == envelope.event_id.encode()
    assert headers["idempotency_key"] == (envelope.idempotency_key or "").encode()
    return envelope, msg


def test_published_envelope_is_the_record_the_receipt_points_at(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    envelope = build_envelope(
        asset=AssetRef(name="orders", uri="s3://lake/orders"),
        source=EventSource(SourceKind.EXTERNAL, producer="itest"),
        partition_key="batch-0042",
        partition_date=datetime(2026, 1, 31, 12, 30, 15, 123456, tzinfo=timezone.utc),
        extra={"rows": 10000, "files": ["a.parquet", "b.parquet"], "ratio": 0.5, "ok": True, "none": None},
        causation=["E0"],
    )
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    receipt = publish(envelope, producer=producer, topic=topic, timeout=30)
    assert receipt.topic == topic
    decoded, _ = _check_receipt(kafka_bootstrap, receipt)
    assert decoded == envelope


def test_external_emit_receipt_matches_the_stored_record(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    receipt = external.emit(
        "s3://lake/orders",
        name="orders",
        partition_key="2026-01-31",
        partition_date=datetime(2026, 1, 31, tzinfo=timezone.utc),
        extra={"rows": 3, "password": "hunter22"},
        producer="itest",
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
    )
    envelope, msg = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.asset == AssetRef(name="orders", uri="s3://lake/orders")
    assert envelope.partition_key == "2026-01-31"
    assert envelope.partition_date == datetime(2026, 1, 31, tzinfo=timezone.utc)
    assert envelope.extra == {"rows": 3, "password": "***"}
    assert envelope.source == EventSource(SourceKind.EXTERNAL, producer="itest")
    assert b"hunter22" not in msg.value()


def test_one_assets_events_stay_in_order_on_one_partition(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=6)
    receipts = [
        external.emit(
            "s3://lake/orders", partition_key=f"batch-{i}", bootstrap_servers=kafka_bootstrap, topic=topic
        )
        for i in range(5)
    ]
    assert len({r.partition for r in receipts}) == 1
    offsets = [r.offset for r in receipts]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5


def test_external_emit_in_a_subprocess_imports_no_airflow(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    stdout = run_without_airflow(
        "from airflow_kafka_events.assets.publish import emit\n"
        f"r = emit('s3://lake/ext', partition_key='p1', extra={{'n': 1}}, producer='ext-proc', "
        f"bootstrap_servers={kafka_bootstrap!r}, topic={topic!r})\n"
        "print(r.to_json())\n",
        clean_env=True,
    )
    payload = json.loads(stdout.strip().splitlines()[-1])
    receipt = Receipt(
        payload["event_id"],
        payload["topic"],
        payload["partition"],
        payload["offset"],
        datetime.fromisoformat(payload["timestamp"]),
    )
    envelope, _ = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.source == EventSource(SourceKind.EXTERNAL, producer="ext-proc")
    assert (envelope.asset.uri, envelope.partition_key, envelope.extra) == ("s3://lake/ext", "p1", {"n": 1})


def test_cli_emit_prints_a_receipt_and_the_record_arrives(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    props = tmp_path / "client.properties"
    props.write_text(f"bootstrap.servers={kafka_bootstrap}\nclient.id=cli-itest\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_events.cli.main",
            "emit",
            "--asset",
            "s3://lake/cli/",
            "--name",
            "cli-asset",
            "--partition-key",
            "2026-02-01",
            "--partition-date",
            "2026-02-01T00:00:00+00:00",
            "--extra",
            '{"rows": 7, "token": "t0k3n"}',
            "--idempotency-key",
            "cli-1",
            "--causation",
            "E9",
            "--properties",
            str(props),
            "--topic",
            topic,
            "--producer",
            "cron-export",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) == {"event_id", "topic", "partition", "offset", "timestamp"}
    receipt = Receipt(
        payload["event_id"],
        payload["topic"],
        payload["partition"],
        payload["offset"],
        datetime.fromisoformat(payload["timestamp"]),
    )
    envelope, _ = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.asset == AssetRef(name="cli-asset", uri="s3://lake/cli")
    assert envelope.partition_date == datetime(2026, 2, 1, tzinfo=timezone.utc)
    assert envelope.extra == {"rows": 7, "token": "***"}
    assert envelope.idempotency_key == "cli-1"
    assert envelope.causation == ("E9",)
    assert envelope.source == EventSource(SourceKind.EXTERNAL, producer="cron-export")


# --------------------------------------------------------------------------- Airflow path, real broker
@pytest.fixture
def kafka_connection(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    return CONN_ID


def test_emit_asset_event_in_a_task_context_reaches_kafka(kafka_bootstrap, new_topic, kafka_connection):
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import set_current_context

    from airflow_kafka_events.assets.emit import emit_asset_event

    topic = new_topic(partitions=3)
    context = task_context(task_id="ingest", try_number=2, partition_key="2026-01-31")
    with set_current_context(context):
        receipt = emit_asset_event(
            Asset(name="orders", uri="s3://lake/orders"),
            inherit_partition=True,
            extra={"batch": 41},
            kafka_config_id=kafka_connection,
            topic=topic,
        )
    envelope, _ = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.partition_key == "2026-01-31"
    assert envelope.source == EventSource(
        SourceKind.TASK,
        dag_id="producer_dag",
        run_id="manual__2026-10-20",
        task_id="ingest",
        map_index=-1,
        try_number=2,
    )


def test_dag_callback_event_reaches_kafka_without_a_task_source(kafka_bootstrap, new_topic, kafka_connection):
    from airflow_kafka_events.assets.emit import emit_from_dag_callback
    from airflow_kafka_events.assets.notifier import AssetEventNotifier

    topic = new_topic(partitions=1)
    context = dag_callback_context(task_id="last_task", try_number=3)
    receipt = emit_from_dag_callback(
        context,
        "ops://incidents",
        extra={"reason": context["reason"]},
        kafka_config_id=kafka_connection,
        topic=topic,
    )
    envelope, _ = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.source == EventSource(
        SourceKind.DAG_CALLBACK, dag_id="producer_dag", run_id="manual__2026-10-20"
    )

    notifier = AssetEventNotifier("ops://incidents", kafka_config_id=kafka_connection, topic=topic)
    notifier(context)
    assert notifier.last_receipt is not None
    from_notifier, _ = _check_receipt(kafka_bootstrap, notifier.last_receipt)
    assert from_notifier.source.kind is SourceKind.DAG_CALLBACK
    assert from_notifier.source.task_id is None
    assert notifier.last_receipt.offset == receipt.offset + 1


def test_an_emit_after_a_failed_send_uses_the_changed_connection(kafka_bootstrap, new_topic, monkeypatch):
    import uuid

    from airflow_kafka_events.assets import emit as emit_module
    from airflow_kafka_events.assets.emit import emit_asset_event
    from airflow_kafka_events.errors import NotSentError

    conn_id = f"kafka_changed_{uuid.uuid4().hex[:8]}"  # this test's own entry of the process's cache
    env = f"AIRFLOW_CONN_{conn_id.upper()}"
    topic = new_topic(partitions=1)
    source = EventSource(SourceKind.TASK, dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)

    def point_at(bootstrap: str) -> None:
        monkeypatch.setenv(env, json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}))

    point_at("127.0.0.1:1")
    with pytest.raises(NotSentError):  # nothing listens there
        emit_asset_event("s3://lake/changed", source=source, kafka_config_id=conn_id, topic=topic, timeout=3)

    point_at(kafka_bootstrap)
    receipt = emit_asset_event("s3://lake/changed", source=source, kafka_config_id=conn_id, topic=topic)
    envelope, _ = _check_receipt(kafka_bootstrap, receipt)
    assert envelope.asset.uri == "s3://lake/changed"
    producer, _ = emit_module._producer_for(conn_id, message_timeout=30.0)
    assert producer.config["linger.ms"] == 0  # an emit waits for no batching delay
    assert producer.config["acks"] == "all" and producer.config["enable.idempotence"] is True

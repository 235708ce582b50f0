"""Topic helper and the Airflow hook against a real broker; exit-time flush in a real process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import ConfigResource

from airflow_kafka_events.kafka.topics import (
    TopicSpec,
    delete_topics,
    ensure_topics,
    topic_max_message_bytes,
)

pytestmark = pytest.mark.integration


def test_ensure_topics_creates_once_with_config_and_delete_removes(kafka_admin):
    name = f"spec-{uuid.uuid4().hex[:10]}"
    spec = TopicSpec(name, partitions=2, retention_ms=3_600_000, cleanup_policy="compact")
    try:
        assert ensure_topics(kafka_admin, [spec]) == [name]
        assert ensure_topics(kafka_admin, [spec]) == []  # already there: not an error, not re-created
        meta = kafka_admin.list_topics(topic=name, timeout=10).topics[name]
        assert len(meta.partitions) == 2
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        configs = kafka_admin.describe_configs([res])[res].result(timeout=10)
        assert configs["retention.ms"].value == "3600000"
        assert configs["cleanup.policy"].value == "compact"
    finally:
        delete_topics(kafka_admin, [name])
    assert name not in kafka_admin.list_topics(timeout=10).topics


def test_hook_builds_clients_from_an_airflow_connection_env_var(kafka_bootstrap, new_topic, monkeypatch):
    from airflow_kafka_events.provider.hook import KafkaEventsHook

    topic = new_topic(partitions=3)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_EVENTS_IT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap, "linger.ms": 1}}),
    )
    hook = KafkaEventsHook(kafka_config_id="kafka_events_it")
    settings = hook.get_settings()
    assert settings.bootstrap_servers == kafka_bootstrap
    producer = hook.get_producer()
    assert producer is hook.get_producer()  # process-wide
    assert producer.config["acks"] == "all" and producer.config["linger.ms"] == 1
    receipt = producer.send_and_wait(topic, b"via-hook", key="k")
    created = hook.ensure_topics([TopicSpec(f"hook-{uuid.uuid4().hex[:8]}", partitions=1)])
    try:
        assert len(created) == 1
        # aligned with the connection's producers: what they may send, the topic takes
        assert topic_max_message_bytes(hook.get_admin_client(), created[0]) == 1_000_000
    finally:
        delete_topics(hook.get_admin_client(), created)
    consumer = Consumer({**settings.consumer_config("hook-" + topic)})
    consumer.subscribe([topic])
    try:
        msgs = []
        import time

        deadline = time.monotonic() + 30
        while not msgs and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(1, timeout=1.0) if m.error() is None]
    finally:
        consumer.close()
    assert (msgs[0].value(), msgs[0].offset(), msgs[0].partition()) == (
        b"via-hook",
        receipt.offset,
        receipt.partition,
    )


def test_queued_messages_are_flushed_when_the_process_exits(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    script = textwrap.dedent(
        f"""
        from airflow_kafka_events.kafka import KafkaSettings, get_producer
        p = get_producer(KafkaSettings({{"bootstrap.servers": {kafka_bootstrap!r}}}).producer_config())
        for i in range(50):
            p.send({topic!r}, b"m%d" % i, key="k")   # no flush, no wait: exit must deliver them
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": "exit-" + topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        import time

        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(50, timeout=1.0) if m.error() is None]
    finally:
        consumer.close()
    assert got == [b"m%d" % i for i in range(50)]

"""Refused credentials end an inspection command at once, with the cause, on a real SASL_SSL broker.

One single-node SASL_SSL (SCRAM-SHA-512 over TLS) broker for the module; the commands run through
the installed ``airflow-kafka-events`` entry point with its client properties file, once with the
right password and once with a wrong one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.kafka.settings import load_properties
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ENTRY_POINT = Path(sys.executable).with_name("airflow-kafka-events")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state_dir = tmp_path_factory.mktemp("cli-sasl")
    cluster = LocalKafkaCluster(state_dir=state_dir, brokers=1, security="sasl_ssl")
    cluster.start(timeout=240.0)
    try:
        yield state_dir / "client.properties"
    finally:
        cluster.stop(timeout=20.0)


def test_a_wrong_password_exits_non_zero_at_once_with_the_cause(secured: Path):
    topic = "cli-sasl-dlq"
    ensure_topics(AdminClient(load_properties(secured)), [TopicSpec(topic, partitions=1)])
    argv = [str(ENTRY_POINT), "dlq", "ls", "--properties", str(secured), "--topic", topic, "--json"]
    good = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["records"] == []

    started = time.monotonic()
    wrong = subprocess.run(
        [*argv, "--property", "sasl.password=not-the-password", "--timeout", "20"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert wrong.returncode == 1 and took < 20, (took, wrong.stderr)  # the refusal, not the timeout
    assert json.loads(wrong.stdout)["error"]["type"] == "KafkaAuthenticationError"
    assert "refused the credentials" in wrong.stderr and "user 'airflow'" in wrong.stderr
    assert "not-the-password" not in wrong.stderr + wrong.stdout
    print(f"wrong password: exit {wrong.returncode} after {took:.1f}s")

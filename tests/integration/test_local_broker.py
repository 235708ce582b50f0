"""The local broker for real: a JVM running Kafka, started, checked, stopped by pid, restarted.

Besides the session broker (``kafka_bootstrap``) this module starts one more broker, through the
CLI, in its own state dir; the lifecycle tests share it and restart it only where the test is
about restarting.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker.broker import LocalKafkaBroker

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "airflow_kafka_events.cli.main"]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _produce(bootstrap: str, topic: str, value: bytes, key: bytes = b"k") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    producer.produce(topic, value=value, key=key)
    assert producer.flush(30) == 0


def _consume_one(bootstrap: str, topic: str, timeout: float = 30.0):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg
    finally:
        consumer.close()
    raise AssertionError(f"nothing consumed from {topic} within {timeout}s")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def _alive(pid: int) -> bool:
    return bool([a for a in _cmdline(pid) if a])


# --------------------------------------------------------------------------- the session broker
def test_the_session_broker_round_trips_a_message(kafka_bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=3)

    _produce(kafka_bootstrap, topic, b"hello", key=b"key-1")
    msg = _consume_one(kafka_bootstrap, topic)

    assert (msg.key(), msg.value()) == (b"key-1", b"hello")


def test_topics_are_not_auto_created(kafka_bootstrap: str, kafka_admin) -> None:
    missing = f"never-created-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.timeout.ms": 2000})
    producer.produce(missing, b"x")
    producer.flush(5)

    assert missing not in kafka_admin.list_topics(timeout=10).topics


# --------------------------------------------------------------------------- one more broker, via the CLI
@dataclass
class CliBroker:
    state_dir: Path
    bootstrap: str
    start_output: str

    def broker(self, **kwargs) -> LocalKafkaBroker:
        return LocalKafkaBroker(state_dir=self.state_dir, **kwargs)


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliBroker]:
    state_dir = tmp_path_factory.mktemp("kafka-cli")
    started = _cli("kafka", "start", "--state-dir", str(state_dir), "--timeout", "240")
    try:
        assert started.returncode == 0, started.stderr
        match = re.fullmatch(r"bootstrap\.servers=(127\.0\.0\.1:\d+)", started.stdout.strip())
        assert match, started.stdout
        yield CliBroker(state_dir, match.group(1), started.stdout)
    finally:
        LocalKafkaBroker(state_dir=state_dir).stop()


def test_cli_status_reports_the_running_broker(cli_broker: CliBroker) -> None:
    result = _cli("kafka", "status", "--state-dir", str(cli_broker.state_dir))

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("running pid=")
    assert f"bootstrap.servers={cli_broker.bootstrap}" in result.stdout


def test_status_reports_the_pid_of_our_java_process(cli_broker: CliBroker) -> None:
    broker = cli_broker.broker()
    broker.start()  # idempotent: no-op when running

    status = broker.status()

    assert status.running and status.bootstrap_servers == cli_broker.bootstrap
    assert status.pid == int(broker.pid_file.read_text())
    args = _cmdline(status.pid)
    assert "kafka.Kafka" in args and str(broker.properties_file) in args
    assert status.version == "4.4.0"


def test_a_second_start_returns_the_running_broker(cli_broker: CliBroker) -> None:
    broker = cli_broker.broker()
    pid = broker.start().pid

    began = time.monotonic()
    again = _cli("kafka", "start", "--state-dir", str(cli_broker.state_dir))

    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"bootstrap.servers={cli_broker.bootstrap}"
    assert broker.status().pid == pid
    assert time.monotonic() - began < 30


def test_stop_by_pid_then_a_warm_start_keeps_storage_and_data(
    cli_broker: CliBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = cli_broker.broker()
    broker.start()
    admin = AdminClient({"bootstrap.servers": cli_broker.bootstrap})
    topic = f"survives-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    _produce(cli_broker.bootstrap, topic, b"before restart")
    meta_before = broker.meta_properties.read_text()
    cluster_id = re.search(r"cluster\.id=(\S+)", meta_before)
    assert cluster_id is not None
    old_pid = broker.status().pid
    assert old_pid is not None

    broker.stop()

    assert not broker.status().running
    assert not _alive(old_pid)
    assert _cli("kafka", "status", "--state-dir", str(cli_broker.state_dir)).returncode == 3

    commands: list[list[str]] = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):
        commands.append(list(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    status = LocalKafkaBroker(state_dir=cli_broker.state_dir).start(timeout=240)

    assert status.running and status.pid != old_pid
    assert status.bootstrap_servers == cli_broker.bootstrap  # the recorded port is reused
    assert not [c for c in commands if "kafka.tools.StorageTool" in c]  # no re-format
    assert broker.meta_properties.read_text() == meta_before
    assert cluster_id.group(1) in (cli_broker.state_dir / "broker.json").read_text()
    assert _consume_one(cli_broker.bootstrap, topic).value() == b"before restart"


def test_cli_stop_stops_the_broker_by_pid(cli_broker: CliBroker) -> None:
    broker = cli_broker.broker()
    pid = broker.start().pid
    assert pid is not None

    stopped = _cli("kafka", "stop", "--state-dir", str(cli_broker.state_dir))

    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"stopped (pid {pid})"
    assert not _alive(pid)
    assert not broker.pid_file.exists()
    status = _cli("kafka", "status", "--state-dir", str(cli_broker.state_dir))
    assert status.returncode == 3 and status.stdout.startswith("stopped")


def test_a_broker_that_dies_during_start_is_reported_with_its_log(cli_broker: CliBroker) -> None:
    broker = cli_broker.broker(heap="1k")  # the JVM refuses to boot with such a heap
    broker.stop()

    with pytest.raises(BrokerError) as info:
        broker.start(timeout=120)

    message = str(info.value)
    assert message.startswith("the Kafka broker exited during start")
    assert "tail of" in message and "heap" in message.lower()
    assert not broker.status().running
    assert not broker.pid_file.exists()


def test_the_jvm_logs_to_the_state_dir_not_the_console(cli_broker: CliBroker) -> None:
    log = cli_broker.state_dir / "logs" / "server.log"

    text = log.read_text()
    assert "Kafka version: 4.4.0" in text and "Kafka Server started" in text
    assert "SLF4J" not in (cli_broker.state_dir / "kafka.out").read_text()  # the binding is there
    assert os.path.getsize(cli_broker.state_dir / "kafka.out") < 64 * 1024

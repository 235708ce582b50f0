"""SASL_SSL (SCRAM-SHA-512 over TLS) on the local broker, through the CLI's printed settings.

One single-node SASL_SSL cluster for the module, started with ``kafka start --security sasl_ssl``.
A wrong password and an untrusted CA must fail within a bounded time, not hang.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.kafka.settings import load_properties
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster
from airflow_kafka_events.local_broker.security import write_ca
from integration.cluster.support import read_all

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CLI = [sys.executable, "-m", "airflow_kafka_events.cli.main"]
FAIL_WITHIN = 15.0


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _connection(stdout: str) -> dict[str, Any]:
    match = re.search(r"^AIRFLOW_CONN_KAFKA_DEFAULT='(.+)'$", stdout, re.M)
    assert match, stdout
    conn = json.loads(match.group(1))
    assert conn["conn_type"] == "kafka"
    return dict(conn["extra"])


class Secured:
    def __init__(self, state_dir: Path, start_output: str) -> None:
        self.state_dir = state_dir
        self.start_output = start_output
        shown = _cli("kafka", "status", "--state-dir", str(state_dir), "--show-password")
        assert shown.returncode == 0, shown.stderr
        self.extras = _connection(shown.stdout)
        self.password = self.extras["sasl.password"]

    def topic(self) -> str:
        name = f"s-{uuid.uuid4().hex[:10]}"
        ensure_topics(AdminClient(self.extras), [TopicSpec(name, partitions=1)])
        return name


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    state_dir = tmp_path_factory.mktemp("sasl-ssl")
    began = time.monotonic()
    started = _cli(
        "kafka", "start", "--security", "sasl_ssl", "--state-dir", str(state_dir), "--timeout", "240"
    )
    try:
        assert started.returncode == 0, started.stderr
        print(f"\nsingle-node sasl_ssl cluster started in {time.monotonic() - began:.1f}s")
        yield Secured(state_dir, started.stdout)
    finally:
        LocalKafkaCluster(state_dir=state_dir).stop(timeout=20.0)


def _first_error(config: dict[str, Any], *, within: float) -> tuple[KafkaError | None, float]:
    """The first error librdkafka reports for ``config`` (error callback or delivery), and when."""
    errors: list[KafkaError] = []
    producer = Producer(
        {**config, "error_cb": errors.append, "message.timeout.ms": int(within * 1000), "log_level": 0}
    )
    began = time.monotonic()
    producer.produce("never-delivered", b"x", on_delivery=lambda err, _m: errors.append(err) if err else None)
    while not errors and time.monotonic() - began < within + 5:
        producer.poll(0.1)
    elapsed = time.monotonic() - began
    producer.purge()
    producer.flush(1)
    return (errors[0] if errors else None), elapsed


def test_the_printed_connection_produces_and_consumes(secured: Secured) -> None:
    extras = secured.extras
    assert extras["security.protocol"] == "SASL_SSL"
    assert extras["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert extras["sasl.username"] == "airflow"
    assert Path(extras["ssl.ca.location"]).is_file()
    assert re.fullmatch(r"127\.0\.0\.1:\d+", extras["bootstrap.servers"])
    topic = secured.topic()

    producer = Producer({**extras, "acks": "all", "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, value=f"secret-{i}".encode())
    assert producer.flush(30) == 0

    assert sorted(read_all(extras, topic, 10)) == sorted(f"secret-{i}".encode() for i in range(10))


def test_the_password_is_masked_unless_asked_for_and_its_files_are_private(secured: Secured) -> None:
    status = _cli("kafka", "status", "--state-dir", str(secured.state_dir))

    assert status.returncode == 0
    assert secured.password not in status.stdout + status.stderr
    assert secured.password not in secured.start_output
    assert _connection(status.stdout)["sasl.password"] == "********"
    properties = re.search(r"^properties=(\S+)", status.stdout, re.M)
    assert properties is not None
    for path in (Path(properties.group(1)), secured.state_dir / "security" / "credentials.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert load_properties(properties.group(1))["sasl.password"] == secured.password
    # no node's command line carries a password (SCRAM users are formatted salted)
    for node in LocalKafkaCluster(state_dir=secured.state_dir).status().nodes:
        assert node.pid is not None
        assert secured.password not in Path(f"/proc/{node.pid}/cmdline").read_text()


def test_cli_emit_with_the_properties_file(secured: Secured) -> None:
    topic = secured.topic()
    properties = secured.state_dir / "client.properties"

    emitted = _cli(
        "emit",
        "--asset",
        "s3://bucket/secured",
        "--topic",
        topic,
        "--properties",
        str(properties),
        timeout=120,
    )

    assert emitted.returncode == 0, emitted.stderr
    assert secured.password not in emitted.stdout + emitted.stderr
    assert len(read_all(secured.extras, topic, 1)) == 1


def test_a_wrong_password_fails_promptly(secured: Secured) -> None:
    err, elapsed = _first_error({**secured.extras, "sasl.password": "not-the-password"}, within=FAIL_WITHIN)

    assert err is not None, f"no error within {FAIL_WITHIN}s"
    assert elapsed < FAIL_WITHIN
    print(f"\nwrong password: {err.name()} after {elapsed:.2f}s ({err.str()})")


def test_an_unknown_user_fails_promptly(secured: Secured) -> None:
    err, elapsed = _first_error({**secured.extras, "sasl.username": "nobody"}, within=FAIL_WITHIN)

    assert err is not None and elapsed < FAIL_WITHIN
    print(f"\nunknown user: {err.name()} after {elapsed:.2f}s")


def test_an_untrusted_ca_fails_promptly(secured: Secured, tmp_path: Path) -> None:
    other_ca = write_ca(tmp_path / "other-ca.pem", "some other CA")

    err, elapsed = _first_error({**secured.extras, "ssl.ca.location": str(other_ca)}, within=FAIL_WITHIN)

    assert err is not None and elapsed < FAIL_WITHIN
    print(f"\nuntrusted CA: {err.name()} after {elapsed:.2f}s ({err.str()})")


def test_plaintext_to_the_secured_port_gets_nothing(secured: Secured) -> None:
    plain = {"bootstrap.servers": secured.extras["bootstrap.servers"]}

    err, elapsed = _first_error(plain, within=FAIL_WITHIN)

    assert err is not None and elapsed < FAIL_WITHIN + 5
    print(f"\nplaintext client on the SASL_SSL port: {err.name()} after {elapsed:.2f}s")


def test_a_3_node_sasl_ssl_cluster(tmp_path_factory: pytest.TempPathFactory) -> None:
    state_dir = tmp_path_factory.mktemp("sasl-ssl-3")
    began = time.monotonic()
    started = _cli(
        "kafka", "start", "--brokers", "3", "--security", "sasl_ssl", "--state-dir", str(state_dir)
    )
    try:
        assert started.returncode == 0, started.stderr
        print(f"\n3-node sasl_ssl cluster started in {time.monotonic() - began:.1f}s")
        assert len(re.findall(r"^node \d running", started.stdout, re.M)) == 3
        extras = _connection(_cli("kafka", "status", "--state-dir", str(state_dir), "--show-password").stdout)
        assert len(extras["bootstrap.servers"].split(",")) == 3
        topic = f"s3-{uuid.uuid4().hex[:10]}"
        admin = AdminClient(extras)
        ensure_topics(admin, [TopicSpec(topic, partitions=3)])
        assert all(
            len(p.isrs) == 3 for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        )
        producer = Producer({**extras, "acks": "all", "enable.idempotence": True})
        for i in range(30):
            producer.produce(topic, value=f"r-{i}".encode())
        assert producer.flush(30) == 0
        assert sorted(read_all(extras, topic, 30)) == sorted(f"r-{i}".encode() for i in range(30))
    finally:
        stopped = _cli("kafka", "stop", "--state-dir", str(state_dir))
        assert stopped.returncode == 0 and stopped.stdout.startswith("stopped (pids ")


# --------------------------------------------------------------------------- typed, prompt refusals
AUTH_WITHIN = 10.0  # the bound: a typed error within 10 s, never the whole timeout


def _end_offset(extras: dict[str, Any], topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**extras, "group.id": f"end-{uuid.uuid4().hex[:8]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def _emit_with(extras: dict[str, Any], topic: str) -> tuple[BaseException, float]:
    from airflow_kafka_events.assets import publish as external
    from airflow_kafka_events.kafka.settings import KafkaSettings

    began = time.monotonic()
    with pytest.raises(Exception) as raised:
        external.emit("s3://bucket/refused", topic=topic, settings=KafkaSettings(extras), timeout=30)
    return raised.value, time.monotonic() - began


def test_emit_with_a_wrong_password_raises_a_typed_error_naming_mechanism_user_and_brokers(
    secured: Secured,
) -> None:
    from airflow_kafka_events.errors import AuthenticationNotSentError, KafkaAuthenticationError, NotSentError

    topic = secured.topic()
    error, elapsed = _emit_with({**secured.extras, "sasl.password": "not-the-password"}, topic)
    print(f"\nemit, wrong password: {type(error).__name__} after {elapsed:.2f}s")
    assert isinstance(error, AuthenticationNotSentError)
    assert isinstance(error, KafkaAuthenticationError) and isinstance(error, NotSentError)
    assert elapsed < AUTH_WITHIN  # not the 30 s timeout
    text = str(error)
    assert "SCRAM-SHA-512" in text and "'airflow'" in text and secured.extras["bootstrap.servers"] in text
    assert "not-the-password" not in text and secured.password not in text
    # an unknown user is the same error (the broker answers alike)
    error, elapsed = _emit_with({**secured.extras, "sasl.username": "nobody"}, topic)
    assert isinstance(error, AuthenticationNotSentError) and elapsed < AUTH_WITHIN
    assert "'nobody'" in str(error)
    # nothing published: the refused messages were purged from the producers, so not later either
    assert _end_offset(secured.extras, topic) == 0


def test_emit_with_an_untrusted_ca_raises_a_tls_error(secured: Secured, tmp_path: Path) -> None:
    from airflow_kafka_events.errors import KafkaTlsError, TlsNotSentError

    other_ca = write_ca(tmp_path / "other-ca.pem", "some other CA")
    error, elapsed = _emit_with({**secured.extras, "ssl.ca.location": str(other_ca)}, secured.topic())
    print(f"\nemit, untrusted CA: {type(error).__name__} after {elapsed:.2f}s")
    assert isinstance(error, TlsNotSentError) and isinstance(error, KafkaTlsError)
    assert elapsed < AUTH_WITHIN and "ssl.ca.location" in str(error)


def test_cli_emit_with_a_wrong_password_exits_promptly(secured: Secured, tmp_path: Path) -> None:
    props = load_properties(secured.state_dir / "client.properties")
    props["sasl.password"] = "not-the-password"
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    began = time.monotonic()
    result = _cli(
        "emit",
        "--asset",
        "s3://bucket/cli",
        "--topic",
        secured.topic(),
        "--properties",
        str(wrong),
        timeout=120,
    )
    elapsed = time.monotonic() - began
    print(f"\nCLI emit, wrong password: exit {result.returncode} after {elapsed:.2f}s")
    assert result.returncode != 0 and elapsed < AUTH_WITHIN + 5  # + interpreter start-up
    assert "authentication failed" in result.stderr and "SCRAM-SHA-512" in result.stderr
    assert "not-the-password" not in result.stdout + result.stderr


def test_the_watchers_reader_stops_with_a_typed_error_instead_of_spinning(secured: Secured) -> None:
    import asyncio

    from airflow_kafka_events.errors import KafkaAuthenticationError
    from airflow_kafka_events.kafka.assigned_reader import AssignedReader

    async def read() -> float:
        reader = AssignedReader(
            {**secured.extras, "sasl.password": "not-the-password"}, [secured.topic()], name="refused"
        )
        began = time.monotonic()
        await reader.open()
        try:
            with pytest.raises(KafkaAuthenticationError, match="SCRAM-SHA-512"):
                while time.monotonic() - began < AUTH_WITHIN:
                    await reader.poll_batch(1, 0.2)
            return time.monotonic() - began
        finally:
            await reader.close()

    elapsed = asyncio.run(read())
    print(f"\nwatcher reader, wrong password: KafkaAuthenticationError after {elapsed:.2f}s")
    assert elapsed < AUTH_WITHIN


def test_the_bridge_stops_with_a_typed_error_instead_of_spinning(secured: Secured) -> None:
    from dataclasses import replace

    from airflow_kafka_events.bridge.service import BridgeService
    from airflow_kafka_events.errors import KafkaAuthenticationError
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from integration.bridge.fake_airflow import FakeAirflow
    from integration.bridge.test_bridge_kafka import PASSWORD, make_config

    with FakeAirflow(users={"bridge": PASSWORD}) as api:
        config = make_config(secured.extras["bootstrap.servers"], api, secured.topic(), secured.topic())
        config = replace(config, kafka=KafkaSettings({**secured.extras, "sasl.password": "not-the-password"}))
        began = time.monotonic()
        with pytest.raises(KafkaAuthenticationError, match="SCRAM-SHA-512") as raised:
            BridgeService(config).run()
        elapsed = time.monotonic() - began
    print(f"\nbridge, wrong password: {type(raised.value).__name__} after {elapsed:.2f}s")
    assert elapsed < AUTH_WITHIN
    assert "not-the-password" not in str(raised.value)

"""The partition bridge against a real Kafka broker and a fake Airflow REST API on 127.0.0.1.

The REST side is :class:`~integration.bridge.fake_airflow.FakeAirflow` (what is tested is the
bridge's client logic); Kafka, consumer groups, commits and the dead-letter topic are real.
Crashes are injected with the ``after_post`` hook (between the POST and the commit), never by
timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.bridge.errors import RetriesExhaustedError
from airflow_kafka_events.bridge.service import FAULT_EXIT_CODE, BridgeService
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import RetryPolicy
from integration.bridge.fake_airflow import FakeAirflow

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PASSWORD = "bridge-it-password"
ASSET = AssetRef(name="batches", uri="s3://lake/batches")
SRC_DIR = Path(__file__).resolve().parents[3] / "src"
#: What a broker answers while it is still loading the offsets topic (right after it started).
_COORDINATOR_NOT_READY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


class Crash(Exception):
    """Raised by the after_post hook: the process 'dies' between the POST and the commit."""


# --------------------------------------------------------------------------- helpers
def envelope(key: str | None, **kwargs: Any) -> AssetEventEnvelope:
    return build_envelope(
        asset=kwargs.pop("asset", ASSET),
        source=EventSource(SourceKind.EXTERNAL, producer="bridge-it"),
        partition_key=key,
        **kwargs,
    )


def send(bootstrap: str, topic: str, *envelopes: AssetEventEnvelope) -> None:
    producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    for env in envelopes:
        publish(env, producer=producer, topic=topic, timeout=30)


def send_raw(bootstrap: str, topic: str, value: bytes, key: bytes = b"s3://lake/batches") -> None:
    producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    producer.send_and_wait(topic, value, key=key, timeout=30)


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1, timeout: float = 30) -> list[int]:
    """The group's committed offsets; a coordinator still loading (fresh broker) is waited out."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                tps = consumer.committed(
                    [TopicPartition(topic, p) for p in range(partitions)], timeout=timeout
                )
                return [tp.offset for tp in tps]
            except KafkaException as exc:
                error = exc.args[0]
                passing = error.retriable() or error.code() in _COORDINATOR_NOT_READY
                if not passing or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
        return messages
    finally:
        consumer.close()


def make_config(bootstrap: str, fake: FakeAirflow, topic: str, dlq: str, **options: Any) -> BridgeConfig:
    options.setdefault("retry", RetryPolicy(max_attempts=5, initial_backoff=0.05, max_backoff=0.2))
    return BridgeConfig(
        kafka=KafkaSettings({"bootstrap.servers": bootstrap}),
        api_url=fake.base_url,
        username="bridge",
        password=PASSWORD,
        topic=topic,
        group_id=options.pop("group_id", f"bridge-it-{uuid.uuid4().hex[:8]}"),
        dlq_topic=dlq,
        poll_timeout=0.2,
        **options,
    )


class Running:
    def __init__(self, service: BridgeService) -> None:
        self.service = service
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bridge", daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:
            self.error = exc

    def wait_done(self, timeout: float = 60) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the bridge did not stop"


@contextmanager
def running(config: BridgeConfig, **kwargs: Any) -> Iterator[Running]:
    handle = Running(BridgeService(config, **kwargs))
    handle.thread.start()
    try:
        yield handle
    finally:
        handle.service.request_stop()
        handle.wait_done()
    assert handle.error is None, repr(handle.error)


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def fake() -> Iterator[FakeAirflow]:
    with FakeAirflow(users={"bridge": PASSWORD}) as api:
        api.add_asset(ASSET.name, ASSET.uri)
        yield api


@pytest.fixture
def topics(new_topic: Callable[..., str]) -> tuple[str, str]:
    return new_topic(partitions=1, prefix="bridge-in"), new_topic(partitions=1, prefix="bridge-dlq")


# --------------------------------------------------------------------------- tests
def test_commit_only_after_2xx_and_no_second_post_after_a_restart(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    first, second = envelope("batch-41"), envelope("batch-42")
    send(kafka_bootstrap, topic, first, second)

    def crash(env: AssetEventEnvelope) -> None:
        raise Crash(env.event_id)

    handle = Running(BridgeService(config, after_post=crash))
    handle.thread.start()
    handle.wait_done()
    assert isinstance(handle.error, Crash) and str(handle.error) == first.event_id
    assert [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events] == [first.event_id]
    assert committed(kafka_bootstrap, config.group_id, topic) == [-1001]  # nothing committed

    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 60, "offset 2")
        stats = dict(bridge.service.stats)
    assert stats == {"already_present": 1, "posted": 1}
    assert [e["partition_key"] for e in fake.events] == ["batch-41", "batch-42"]
    assert len({e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events}) == 2


def test_client_errors_are_dead_lettered_with_the_reason_and_committed(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    fake.reject_partition_key("batch-bad")
    refused = envelope("batch-bad")
    unknown = envelope("batch-1", asset=AssetRef(name="nope", uri="s3://lake/nope"))
    good = envelope("batch-2")
    send(kafka_bootstrap, topic, refused, unknown, good)
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [3], 60, "offset 3")
        assert bridge.service.stats == {"dead_lettered": 2, "posted": 1}
    assert [e["partition_key"] for e in fake.events] == ["batch-2"]
    dead = read_all(kafka_bootstrap, dlq, 2)
    assert len(dead) == 2
    by_event = {DeadLetter.from_headers(m.headers()).event_id: m for m in dead}
    first = DeadLetter.from_headers(by_event[refused.event_id].headers())
    assert first.reason == "rejected-by-airflow"
    assert "answered 422" in first.error_message and "partition key batch-bad refused" in first.error_message
    assert (first.source_topic, first.source_partition, first.source_offset) == (topic, 0, 0)
    second = DeadLetter.from_headers(by_event[unknown.event_id].headers())
    assert second.reason == "unknown-asset" and second.asset_uri == "s3://lake/nope"
    assert "no active asset named 'nope'" in second.error_message
    # the dead letter is the original record: it can be replayed as is
    assert by_event[unknown.event_id].key() == b"s3://lake/nope"
    assert ASSET_EVENT_CODEC.decode(by_event[unknown.event_id].value()).event_id == unknown.event_id


def test_poison_is_dead_lettered_and_the_next_event_is_posted(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    send_raw(kafka_bootstrap, topic, b"garbage: not an envelope")
    good = envelope("batch-7")
    send(kafka_bootstrap, topic, good)
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 60, "offset 2")
        assert bridge.service.stats == {"dead_lettered": 1, "posted": 1}
    (dead,) = read_all(kafka_bootstrap, dlq, 1)
    assert dead.value() == b"garbage: not an envelope"
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == "undecodable" and letter.source_offset == 0
    (event,) = fake.events
    assert event["extra"]["airflow_kafka_events"]["event_id"] == good.event_id


def test_server_errors_are_retried_and_a_lost_acknowledgement_posts_once(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    fake.fail_posts(503, 502)  # refused twice, nothing stored ...
    fake.fail_after_apply(500)  # ... then stored, but the answer is lost
    send(kafka_bootstrap, topic, envelope("batch-9"))
    config = make_config(kafka_bootstrap, fake, topic, dlq, recheck_records=0)
    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [1], 60, "offset 1")
        assert bridge.service.stats == {"already_present": 1}
    assert len(fake.events) == 1
    assert fake.count("POST", "/api/v2/assets/events") == 3


def test_exhausted_retries_stop_the_bridge_without_commit(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    fake.fail_posts(*[503] * 3)
    send(kafka_bootstrap, topic, envelope("batch-5"))
    config = make_config(
        kafka_bootstrap, fake, topic, dlq, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01)
    )
    handle = Running(BridgeService(config))
    handle.thread.start()
    handle.wait_done()
    assert isinstance(handle.error, RetriesExhaustedError)
    assert committed(kafka_bootstrap, config.group_id, topic) == [-1001]
    assert fake.events == []
    with running(config):  # the API is back: the same record is posted, once
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [1], 60, "offset 1")
    assert [e["partition_key"] for e in fake.events] == ["batch-5"]


def test_duplicate_publish_becomes_one_airflow_event(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    send(
        kafka_bootstrap, topic, envelope("batch-3", extra={"rows": 1}), envelope("batch-3", extra={"rows": 1})
    )
    config = make_config(kafka_bootstrap, fake, topic, dlq, recheck_records=0)
    with running(config) as bridge:
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 60, "offset 2")
        assert bridge.service.stats == {"posted": 1, "duplicate": 1}
    assert len(fake.events) == 1


def test_token_is_renewed_after_a_401(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config):
        send(kafka_bootstrap, topic, envelope("k1"))
        wait_until(lambda: len(fake.events) == 1, 60, "the first event")
        fake.revoke_tokens()
        send(kafka_bootstrap, topic, envelope("k2"))
        wait_until(lambda: committed(kafka_bootstrap, config.group_id, topic) == [2], 60, "offset 2")
    assert fake.logins == 2
    assert [e["partition_key"] for e in fake.events] == ["k1", "k2"]


def test_stop_finishes_and_commits_the_event_in_flight(kafka_bootstrap, fake, topics):
    topic, dlq = topics
    send(kafka_bootstrap, topic, envelope("k1"), envelope("k2"), envelope("k3"))
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    holder: dict[str, BridgeService] = {}

    def stop_after_first(env: AssetEventEnvelope) -> None:
        holder["service"].request_stop()  # a SIGTERM arriving while k1 is in flight

    service = BridgeService(config, after_post=stop_after_first)
    holder["service"] = service
    handle = Running(service)
    handle.thread.start()
    handle.wait_done()
    assert handle.error is None
    assert [e["partition_key"] for e in fake.events] == ["k1"]
    assert committed(kafka_bootstrap, config.group_id, topic) == [1]


def test_replicas_share_partitions_and_post_each_event_once(kafka_bootstrap, fake, new_topic):
    topic = new_topic(partitions=3, prefix="bridge-in")
    dlq = new_topic(partitions=1, prefix="bridge-dlq")
    assets = [AssetRef(name=f"a{i}", uri=f"s3://lake/a{i}") for i in range(6)]
    for asset in assets:
        fake.add_asset(asset.name, asset.uri)
    first_half = [envelope(f"k{i}", asset=assets[i % 6]) for i in range(30)]
    second_half = [envelope(f"k{i}", asset=assets[i % 6]) for i in range(30, 60)]
    send(kafka_bootstrap, topic, *first_half)
    config = make_config(kafka_bootstrap, fake, topic, dlq)
    with running(config):
        wait_until(lambda: len(fake.events) >= 10, 60, "some events")
        with running(config):  # a second replica joins: partitions are rebalanced
            send(kafka_bootstrap, topic, *second_half)
            wait_until(
                lambda: sum(committed(kafka_bootstrap, config.group_id, topic, 3)) == 60, 120, "60 commits"
            )
    ids = [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events]
    assert sorted(ids) == sorted(e.event_id for e in first_half + second_half)


# --------------------------------------------------------------------------- the command
def _bridge_process(
    bootstrap: str, fake: FakeAirflow, topic: str, dlq: str, tmp_path: Path, **env: str
) -> subprocess.Popen[str]:
    password_file = tmp_path / "passwords.json"
    password_file.write_text(f'{{"bridge": "{PASSWORD}"}}')
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "PYTHONPATH": str(SRC_DIR),
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE": str(password_file),
        **env,
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_kafka_events.cli.main",
            "bridge",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--group",
            f"bridge-cli-{uuid.uuid4().hex[:8]}",
            "--dlq-topic",
            dlq,
            "--api-url",
            fake.base_url,
            "--username",
            "bridge",
        ],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_command_stops_gracefully_on_sigterm(kafka_bootstrap, fake, topics, tmp_path):
    topic, dlq = topics
    send(kafka_bootstrap, topic, envelope("k1"))
    proc = _bridge_process(kafka_bootstrap, fake, topic, dlq, tmp_path)
    try:
        fake.wait_for(lambda f: len(f.events) == 1, 120, "the event to be posted")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "received SIGTERM" in err and "bridge stopped" in err
    assert PASSWORD not in err


def test_command_fault_hook_exits_between_post_and_commit(kafka_bootstrap, fake, topics, tmp_path):
    topic, dlq = topics
    send(kafka_bootstrap, topic, envelope("k1"), envelope("k2"))
    proc = _bridge_process(
        kafka_bootstrap, fake, topic, dlq, tmp_path, AIRFLOW_KAFKA_EVENTS_BRIDGE_FAULT="exit-after-post:k2"
    )
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == FAULT_EXIT_CODE, err
    assert [e["partition_key"] for e in fake.events] == ["k1", "k2"]
    assert "fault injection" in err


def test_command_with_wrong_credentials_exits_1(kafka_bootstrap, fake, topics, tmp_path):
    topic, dlq = topics
    fake.users["bridge"] = "rotated"
    proc = _bridge_process(kafka_bootstrap, fake, topic, dlq, tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "refused the credentials of user 'bridge'" in err
    assert PASSWORD not in err and "rotated" not in err

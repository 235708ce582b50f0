"""One Airflow deployment for the Kafka Events view tests (API and browser), seeded with data.

* ``ui_stack`` -- a deployment of its own on the e2e topology (``e2e_topology``: PostgreSQL, two
  Celery workers and two triggerers in CI) with the users ``admin`` (admin),
  ``viewer`` (viewer) and ``bridge`` (op, the partition bridge's); its Kafka connection carries a
  password and a secret in its extras, a second connection a signing key: none of them may reach a
  page.  Asset events and dead letters go to topics of their own (``[kafka_events]
  asset_events_topic`` / ``dlq_topic``); the Health page shows the bridge group ``ui_bridge_group``
  (``[kafka_events] ui_bridge_group_ids``).
* ``ui_data`` -- a finished run of ``e2e_ui_streams`` (a 12-page stream and its consumer), three
  asset events on the asset topic (one whose ``extra`` holds the secrets) and a dead letter of two
  of them (its headers and payload hold the secrets too).
* ``artifacts_dir`` -- where screenshots go (``$KAFKA_EVENTS_UI_ARTIFACTS``, else the pytest
  tmp dir); its path is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.airflow_stack import AirflowStack
from harness.kafka_records import record_at

DAGS = Path(__file__).parent / "ui_dags"
DAG_ID = "e2e_ui_streams"
PAGES = 12
USERS = {"admin": "admin", "viewer": "viewer", "bridge": "op"}
CONSUMER = "e2e-ui-consumer"


@dataclass
class UiSecrets:
    connection_password: str = field(default_factory=lambda: f"conn-pw-{uuid.uuid4().hex}")
    extra_secret: str = field(default_factory=lambda: f"extra-secret-{uuid.uuid4().hex}")
    signing_key: str = field(default_factory=lambda: f"signing-key-{uuid.uuid4().hex}")

    def all(self) -> list[str]:
        return [self.connection_password, self.extra_secret, self.signing_key]


@dataclass
class UiTopics:
    asset_events: str
    dlq: str
    trigger_events: str
    stream_index: str


@dataclass
class UiData:
    run_id: str
    stream_id: str
    asset_uri: str
    event_ids: list[str]
    dead_letters: list[tuple[int, int]]  # (partition, offset) in the DLQ topic


@pytest.fixture(scope="package")
def ui_secrets() -> UiSecrets:
    return UiSecrets()


@pytest.fixture(scope="package")
def ui_bridge_group() -> str:
    """The consumer group of the bridge the Health page shows (none runs until a test starts it)."""
    return f"e2e-ui-bridge-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="package")
def ui_topics(kafka_admin, trigger_events_topic) -> UiTopics:
    from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = UiTopics(
        f"ui-asset-events-{suffix}", f"ui-dlq-{suffix}", trigger_events_topic, f"ui-stream-index-{suffix}"
    )
    ensure_topics(
        kafka_admin,
        [
            TopicSpec(topics.asset_events, partitions=2),
            TopicSpec(topics.dlq, partitions=2),
            TopicSpec(topics.stream_index, partitions=3, cleanup_policy="compact"),
        ],
    )
    return topics


@pytest.fixture(scope="package")
def ui_stack(
    tmp_path_factory,
    kafka_bootstrap: str,
    ui_topics: UiTopics,
    ui_secrets: UiSecrets,
    ui_bridge_group: str,
    e2e_topology: str,
) -> Iterator[AirflowStack]:
    dags = tmp_path_factory.mktemp("ui-dags")
    for path in DAGS.glob("*.py"):
        shutil.copy2(path, dags / path.name)
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {
                "conn_type": "kafka",
                "password": ui_secrets.connection_password,
                "extra": {"bootstrap.servers": kafka_bootstrap, "sasl.password": ui_secrets.extra_secret},
            }
        ),
        "AIRFLOW_CONN_KAFKA_EVENTS_SIGNING": json.dumps(
            {"conn_type": "generic", "password": ui_secrets.signing_key}
        ),
        "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": ui_topics.asset_events,
        "AIRFLOW__KAFKA_EVENTS__DLQ_TOPIC": ui_topics.dlq,
        "AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC": ui_topics.stream_index,
        "AIRFLOW__KAFKA_EVENTS__UI_WINDOW_MINUTES": "120",
        "AIRFLOW__KAFKA_EVENTS__UI_BRIDGE_GROUP_IDS": ui_bridge_group,
    }
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("ui-home"),
        dags_folder=dags,
        extra_env=env,
        users=USERS,
        topology=e2e_topology,
    )
    try:
        stack.start(timeout=400.0, dag_ids=[DAG_ID])
        yield stack
    finally:
        stack.stop()


def _dead_letters(kafka_bootstrap: str, topics: UiTopics, receipts: list, secrets: UiSecrets) -> list:
    from airflow_kafka_events.dead_letters.headers import DeadLetterReason
    from airflow_kafka_events.dead_letters.letter import DeadLetter
    from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
    from airflow_kafka_events.kafka.producer import get_producer
    from airflow_kafka_events.kafka.settings import KafkaSettings

    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    writer = DeadLetterWriter(get_producer(settings.producer_config()), topics.dlq)
    out = []
    for receipt in receipts:
        msg = record_at(kafka_bootstrap, receipt)
        letter = DeadLetter(
            reason=DeadLetterReason.NOT_ALLOWED,
            error_type="SourceNotAllowedError",
            error_message="source external:e2e-ui is not in the allowlist",
            source_topic=receipt.topic,
            source_partition=receipt.partition,
            source_offset=receipt.offset,
            consumer=CONSUMER,
            event_id=receipt.event_id,
        )
        headers = [*(msg.headers() or []), ("authorization", f"Bearer {secrets.extra_secret}".encode())]
        delivered = writer.write(letter, value=msg.value(), key=msg.key(), headers=headers)
        out.append((delivered.partition, delivered.offset))
    return out


@pytest.fixture(scope="package")
def ui_data(
    ui_stack: AirflowStack, kafka_bootstrap: str, ui_topics: UiTopics, ui_secrets: UiSecrets
) -> UiData:
    from airflow_kafka_events.assets.publish import emit
    from airflow_kafka_events.streams.descriptor import stream_id

    run_id = ui_stack.trigger_dag(DAG_ID)
    asset_uri = f"kafka-events://e2e-ui/{uuid.uuid4().hex[:6]}"
    receipts = [
        emit(
            asset_uri,
            partition_key=f"2026-12-0{i + 1}",
            extra={"rows": i, "api_key": ui_secrets.signing_key, "note": ui_secrets.connection_password},
            producer="e2e-ui",
            topic=ui_topics.asset_events,
            bootstrap_servers=kafka_bootstrap,
        )
        for i in range(3)
    ]
    letters = _dead_letters(kafka_bootstrap, ui_topics, receipts[:2], ui_secrets)
    state = ui_stack.wait_for_dag_run(DAG_ID, run_id, timeout=240)
    assert state == "success", ui_stack.diagnostics()
    return UiData(
        run_id=run_id,
        stream_id=stream_id(DAG_ID, run_id, "produce"),
        asset_uri=asset_uri,
        event_ids=[r.event_id for r in receipts],
        dead_letters=letters,
    )


@pytest.fixture(scope="package")
def artifacts_dir(tmp_path_factory) -> Path:
    configured = os.environ.get("KAFKA_EVENTS_UI_ARTIFACTS")
    path = Path(configured) if configured else tmp_path_factory.mktemp("ui-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nUI test artifacts (screenshots): {path}")
    return path

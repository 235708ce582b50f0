"""The six assets ``e2e://multi/0..5`` of the watcher fault tests (``tests/e2e/faults``, their DAG
``watcher_dags/e2e_watchers_multi.py``): publishing their events and counting what Airflow made of them."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack

ASSETS = [AssetRef(name=f"e2e://multi/{i}", uri=f"e2e://multi/{i}") for i in range(6)]


def stack_env(
    bootstrap: str, *, topic: str, stops: str, group_id: str, dlq: str | None = None
) -> dict[str, str]:
    """The environment of a stack running the DAG: its topic (and dead-letter topic), the watchers'
    stops topic, and the ``kafka_default`` and ``kafka_watcher`` connections (one consumer group for
    every watcher, auto-commit off)."""
    env = {
        "AIRFLOW_KAFKA_EVENTS_E2E_MULTI_TOPIC": topic,
        "AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC": stops,
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        ),
        "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": bootstrap,
                    "group.id": group_id,
                    "enable.auto.commit": "false",
                },
            }
        ),
    }
    if dlq is not None:
        env["AIRFLOW_KAFKA_EVENTS_E2E_MULTI_DLQ"] = dlq
    return env


def publish(bootstrap: str, topic: str, per_asset: int, *, pause: float = 0.0) -> list[str]:
    """``per_asset`` events of each asset, spread over the topic's 3 partitions; their event ids."""
    producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    ids: list[str] = []
    for n in range(per_asset):
        for asset in ASSETS:
            envelope = build_envelope(
                asset=asset,
                source=EventSource(SourceKind.EXTERNAL, producer="e2e"),
                extra={"n": n, "u": uuid.uuid4().hex},
            )
            value = ASSET_EVENT_CODEC.encode(envelope, topic=topic)
            producer.send_and_wait(topic, value, key=asset.uri, partition=(n + len(ids)) % 3)
            ids.append(envelope.event_id)
        if pause:
            time.sleep(pause)
    return ids


def event_ids(stack: AirflowStack) -> Counter[str]:
    """How many Airflow asset events each published event id became."""
    rows = stack.query(
        "SELECT ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id WHERE a.uri LIKE ?",
        ("e2e://multi/%",),
    )
    found: Counter[str] = Counter()
    for row in rows:
        extra = json_column(row["extra"])
        found[((extra or {}).get("payload") or {}).get("event_id")] += 1
    return found

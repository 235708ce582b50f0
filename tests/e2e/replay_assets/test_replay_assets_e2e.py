"""``airflow-kafka-events replay-assets`` against the session Airflow: only what Airflow lacks is posted.

Kafka holds five asset events of one asset (and a repeat of one of them, same idempotency key);
Airflow already has two of them (posted the way the bridge posts them, as after a database restore
from a backup taken midway).  ``replay-assets --from`` posts the three missing ones once; a second
run posts nothing.  The AssetEvents are counted through the REST API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_events.assets.airflow_api import AirflowApiClient
from airflow_kafka_events.assets.publish import emit
from airflow_kafka_events.bridge.airflow_event import event_extra
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.ui.inspection.reader import TopicReader
from harness.airflow_stack import AirflowStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ENTRY_POINT = Path(sys.executable).with_name("airflow-kafka-events")
ASSET_NAME, ASSET_URI = "e2e_replay_assets", "x-e2e://replay/assets"


def replay_assets(
    stack: AirflowStack, bootstrap: str, topic: str, since: datetime, *flags: str
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env["AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE"] = str(stack.passwords_file)
    result = subprocess.run(
        [
            str(ENTRY_POINT), "replay-assets", "--from", since.isoformat(), "--asset", ASSET_URI,
            "--topic", topic, "--bootstrap-servers", bootstrap,
            "--airflow-url", stack.base_url, "--username", "bridge", "--allow-any-source", "--json", *flags,
        ],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


def airflow_events(stack: AirflowStack, asset_id: int) -> list[dict[str, Any]]:
    body = stack.api_json("GET", "assets/events", params={"asset_id": asset_id, "limit": 100})
    return body["asset_events"]


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_replay_assets_posts_only_the_events_airflow_does_not_have(
    airflow_stack: AirflowStack, kafka_bootstrap: str, new_topic
):
    stack = airflow_stack
    stack.wait_dag_parsed("e2e_replay_assets", timeout=180)
    (asset,) = [
        a
        for a in stack.api_json("GET", "assets", params={"uri_pattern": ASSET_URI})["assets"]
        if a["uri"] == ASSET_URI
    ]
    before = {e["id"] for e in airflow_events(stack, asset["id"])}
    topic = new_topic(partitions=3, prefix="e2e-replay-assets")
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    receipts = [
        emit(ASSET_URI, name=ASSET_NAME, partition_key=f"day-{n}", extra={"n": n}, topic=topic,
             producer="e2e-replay", bootstrap_servers=kafka_bootstrap)
        for n in range(5)
    ]  # fmt: skip
    emit(ASSET_URI, name=ASSET_NAME, partition_key="day-0", extra={"n": 0}, topic=topic,
         producer="e2e-replay", bootstrap_servers=kafka_bootstrap)  # fmt: skip  # same idempotency key
    ids = {r.event_id for r in receipts}

    # Airflow already has the first two (posted as the bridge posts them)
    with TopicReader({"bootstrap.servers": kafka_bootstrap}, topic, timeout=30) as reader:
        kept = [reader.read_one(r.partition, r.offset) for r in receipts[:2]]
    with AirflowApiClient(stack.base_url, "bridge", stack.passwords["bridge"]) as api:
        for msg in kept:
            envelope = ASSET_EVENT_CODEC.decode(msg.value())
            api.post_asset_event(
                asset["id"], partition_key=envelope.partition_key, extra=event_extra(envelope)
            )

    dry = replay_assets(stack, kafka_bootstrap, topic, since, "--dry-run")
    assert dry["dry_run"] and dry["counts"] == {"already_present": 2, "duplicate": 1, "missing": 3}, dry
    assert len([e for e in airflow_events(stack, asset["id"]) if e["id"] not in before]) == 2

    started = time.monotonic()
    first = replay_assets(stack, kafka_bootstrap, topic, since)
    took = time.monotonic() - started
    assert first["counts"] == {"already_present": 2, "duplicate": 1, "posted": 3}, first
    posted = {e["event_id"] for e in first["events"] if e["outcome"] == "posted"}
    assert posted == {r.event_id for r in receipts[2:]}
    assert not first["window"]["truncated"] and first["window"]["records_scanned"] == 6

    events = [e for e in airflow_events(stack, asset["id"]) if e["id"] not in before]
    made_from = [e["extra"]["airflow_kafka_events"]["event_id"] for e in events]
    assert sorted(made_from) == sorted(ids)  # each of the five exactly once
    assert {e["partition_key"] for e in events} == {f"day-{n}" for n in range(5)}

    second = replay_assets(stack, kafka_bootstrap, topic, since)
    assert second["counts"] == {"already_present": 5, "duplicate": 1}, second
    assert len([e for e in airflow_events(stack, asset["id"]) if e["id"] not in before]) == 5
    print(f"replay-assets: first run {took:.1f}s")

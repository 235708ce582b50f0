"""``airflow-kafka-events replay-assets`` when the Airflow API fails part of the way.

A fake Airflow (scripted faults, never timed) answers the first POST with 503 storing nothing, and
another with 502 *after* storing the event (a lost acknowledgement).  The command retries both with
the bridge's policy; the ambiguous one is looked up before it is posted again, so every Kafka event
ends up in Airflow exactly once and the report says what happened to each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import ASSET, PASSWORD, envelope, send

pytestmark = pytest.mark.integration

ENTRY_POINT = Path(sys.executable).with_name("airflow-kafka-events")


def test_transient_and_ambiguous_failures_post_every_event_once(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=1, prefix="replay-faults")
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    sent = [envelope(f"day-{n}") for n in range(4)]
    send(kafka_bootstrap, topic, *sent)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = "/nonexistent-airflow-home"

    with FakeAirflow(users={"bridge": PASSWORD}) as fake:
        asset_id = fake.add_asset(ASSET.name, ASSET.uri)
        fake.fail_posts(503)  # the first POST: refused, nothing stored
        fake.fail_after_apply(502)  # the next one: stored, then the answer is lost
        result = subprocess.run(
            [str(ENTRY_POINT), "replay-assets", "--from", since.isoformat(), "--topic", topic,
             "--bootstrap-servers", kafka_bootstrap, "--airflow-url", fake.base_url,
             "--username", "bridge", "--password-file", str(password_file), "--allow-any-source", "--json"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        report = json.loads(result.stdout)
        stored = fake.events_of(asset_id)

    keys = sorted(event["partition_key"] for event in stored)
    assert keys == ["day-0", "day-1", "day-2", "day-3"], stored  # each once: no lost, no duplicate
    # day-0: refused (503), retried, stored but unacknowledged (502): found on the recheck, not re-posted
    assert report["counts"] == {"posted": 3, "already_present": 1}, report
    assert [e["outcome"] for e in report["events"] if e["partition_key"] == "day-0"] == ["already_present"]
    # 4 events stored plus the one 503 that stored nothing: at least 5 POSTs were attempted
    assert fake.count("POST", "/api/v2/assets/events") >= 5, fake.requests

"""``airflow-kafka-events replay-assets`` applies the bridge's authorization, or does not run.

An event the bridge refuses (its source matches no allow rule) must not be posted by a replay.
Without the bridge's allow rules or signing keys the command cannot know what the bridge refuses:
it refuses to run (nothing read, nothing posted) unless ``--allow-any-source`` says the bridge has
none.  Given the rules (``--allow``), the refused event is reported ``refused`` and only the
allowed one is posted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.envelopes.model import EventSource, SourceKind
from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import ASSET, PASSWORD, envelope, send

pytestmark = pytest.mark.integration

ENTRY_POINT = Path(sys.executable).with_name("airflow-kafka-events")
TASKS_ONLY = '{"source_kinds": ["task"]}'


def test_replay_assets_applies_the_bridges_allow_rules_or_refuses_to_run(
    kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic(partitions=1, prefix="replay-authz")
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    from_task = build_envelope(
        asset=ASSET, source=EventSource(SourceKind.TASK, dag_id="etl", task_id="load"), partition_key="day-1"
    )
    send(kafka_bootstrap, topic, envelope("day-0"), from_task)  # day-0: an external source
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = "/nonexistent-airflow-home"

    with FakeAirflow(users={"bridge": PASSWORD}) as fake:
        asset_id = fake.add_asset(ASSET.name, ASSET.uri)

        def replay(*flags: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [str(ENTRY_POINT), "replay-assets", "--from", since.isoformat(), "--topic", topic,
                 "--bootstrap-servers", kafka_bootstrap, "--airflow-url", fake.base_url,
                 "--username", "bridge", "--password-file", str(password_file), *flags],
                env=env, capture_output=True, text=True, timeout=180,
            )  # fmt: skip

        unstated = replay("--dry-run")
        assert unstated.returncode == 1, unstated.stdout + unstated.stderr
        for named in (
            "--allow",
            "--signing-key-file",
            "--allow-any-source",
            "AIRFLOW_KAFKA_EVENTS_BRIDGE_ALLOW",
        ):
            assert named in unstated.stderr, unstated.stderr
        contradictory = replay("--allow", TASKS_ONLY, "--allow-any-source")
        assert contradictory.returncode == 1 and "contradicts" in contradictory.stderr, contradictory.stderr
        assert fake.count("POST", "/api/v2/assets/events") == 0

        ruled = replay("--allow", TASKS_ONLY, "--json")
        assert ruled.returncode == 0, ruled.stdout[-3000:] + ruled.stderr[-3000:]
        report = json.loads(ruled.stdout)
        stored = fake.events_of(asset_id)

    outcomes = {e["partition_key"]: (e["outcome"], e["detail"] or "") for e in report["events"]}
    assert outcomes["day-0"][0] == "refused" and "not-allowed" in outcomes["day-0"][1], outcomes
    assert outcomes["day-1"][0] == "posted", outcomes
    assert [event["partition_key"] for event in stored] == ["day-1"], stored

"""``airflow-kafka-events topics ensure`` against the real broker, in a process that imports no Airflow.

The topic names and settings come from the environment (``AIRFLOW__KAFKA_EVENTS__*``), an airflow.cfg
(read as a file) and flags; a second run creates nothing; differences are reported and only
``--apply-configs`` changes configs; partitions are never added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource

from airflow_kafka_events.kafka.topics import delete_topics

pytestmark = pytest.mark.integration

SRC_DIR = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def names(kafka_admin) -> Iterator[dict[str, str]]:
    run = uuid.uuid4().hex[:8]
    topics = {
        role: f"ensure-{role}-{run}" for role in ("trigger", "asset", "dlq", "results", "stops", "index")
    }
    yield topics
    delete_topics(kafka_admin, topics.values())


def _ensure(bootstrap: str, home: Path, env: dict[str, str], *flags: str) -> list[dict[str, Any]]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    environ.update({"PYTHONPATH": str(SRC_DIR), "AIRFLOW_HOME": str(home), **env})
    code = (
        "import sys\nfrom airflow_kafka_events.cli.main import main\nrc = main(sys.argv[1:])\n"
        "assert not [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')]\nsys.exit(rc)\n"
    )
    command = [sys.executable, "-c", code, "topics", "ensure", "--bootstrap-servers", bootstrap, "--json"]
    result = subprocess.run([*command, *flags], env=environ, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _config(admin, topic: str, name: str) -> str:
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return next(iter(futures.values())).result(timeout=30)[name].value


def _retention(admin, topic: str) -> str:
    return _config(admin, topic, "retention.ms")


def test_topics_ensure_creates_what_the_configuration_names_once_and_changes_only_on_request(
    kafka_bootstrap, kafka_admin, names, tmp_path
):
    (tmp_path / "airflow.cfg").write_text(
        f"[kafka_events]\ndlq_topic = {names['dlq']}\nresults_topic = {names['results']}\n"
        "topic_partitions = 2\n"
    )
    env = {
        "AIRFLOW__KAFKA_EVENTS__TRIGGER_EVENTS_TOPIC": names["trigger"],
        "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": names["asset"],
        "AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC": names["stops"],
        "AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC": names["index"],
    }
    retained = [name for role, name in names.items() if role != "index"]  # --retention-ms: not the index's
    first = _ensure(kafka_bootstrap, tmp_path, env, "--retention-ms", "86400000")
    assert [(r["topic"], r["action"]) for r in first] == [
        (names["trigger"], "created"),
        (names["asset"], "created"),
        (names["dlq"], "created"),
        (names["results"], "created"),
        (names["stops"], "created"),
        (names["index"], "created"),
    ]
    assert first[2]["roles"] == ["dead-letters"] and first[0]["roles"] == ["trigger-events"]
    assert _config(kafka_admin, names["stops"], "cleanup.policy") == "compact"  # the clean-stop marks
    assert _config(kafka_admin, names["dlq"], "cleanup.policy") == "delete"
    # the stream index: compacted, a stream leaving it 7 days after its last record
    assert _config(kafka_admin, names["index"], "cleanup.policy") == "compact,delete"
    assert _retention(kafka_admin, names["index"]) == str(7 * 24 * 3600 * 1000)
    topics = kafka_admin.list_topics(timeout=30).topics
    assert all(len(topics[name].partitions) == 2 for name in names.values())  # from airflow.cfg
    assert {_retention(kafka_admin, name) for name in retained} == {"86400000"}

    again = _ensure(kafka_bootstrap, tmp_path, env, "--retention-ms", "86400000")
    assert {r["action"] for r in again} == {"ok"} and all(not r["differences"] for r in again)

    wanted_more = _ensure(kafka_bootstrap, tmp_path, env, "--partitions", "4", "--retention-ms", "3600000")
    assert {r["action"] for r in wanted_more} == {"differs"}
    differences = wanted_more[0]["differences"]
    assert any(d.startswith("partitions: has 2, wanted 4") and "keyed" in d for d in differences), differences
    assert "retention.ms: has 86400000, wanted 3600000" in differences
    topics = kafka_admin.list_topics(timeout=30).topics
    assert all(len(topics[name].partitions) == 2 for name in names.values())  # never added
    assert _retention(kafka_admin, names["asset"]) == "86400000"  # not asked to change

    applied = _ensure(
        kafka_bootstrap, tmp_path, env, "--partitions", "4", "--retention-ms", "3600000", "--apply-configs"
    )
    assert {r["action"] for r in applied[:-1]} == {"updated"} and applied[-1]["action"] == "differs"
    assert all(r["applied"] == ["retention.ms=3600000"] for r in applied[:-1]) and not applied[-1]["applied"]
    assert {_retention(kafka_admin, name) for name in retained} == {"3600000"}
    topics = kafka_admin.list_topics(timeout=30).topics
    assert all(len(topics[name].partitions) == 2 for name in names.values())


def test_text_output_names_created_topics(kafka_bootstrap, kafka_admin, tmp_path):
    topic = f"ensure-text-{uuid.uuid4().hex[:8]}"
    try:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        environ.update({"PYTHONPATH": str(SRC_DIR), "AIRFLOW_HOME": str(tmp_path)})
        command = [sys.executable, "-m", "airflow_kafka_events.cli.main", "topics", "ensure"]
        command += ["--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--partitions", "1"]
        result = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"created  {topic} (--topic) partitions=1 replication=1"), (
            result.stdout
        )
    finally:
        delete_topics(kafka_admin, [topic])

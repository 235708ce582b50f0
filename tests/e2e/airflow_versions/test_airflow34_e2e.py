"""Airflow 3.4's features on a real deployment (``make test-compat``; skipped on Airflow 3.3).

* a watcher on a trigger queue (``kafka_watched_asset(..., queue=...)``) is registered on that
  queue and held by the triggerer started with ``--queues`` for it, not by the one without;
* with Airflow's default ``[scheduler] batch_asset_events = False``, a watched asset gives one DAG
  run per asset event, even for events that arrive together.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kafka_events.airflow_versions import watcher_queues_supported
from airflow_kafka_events.assets import publish as external
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.compat,
    pytest.mark.skipif(not watcher_queues_supported(), reason="Airflow 3.4's features (make test-compat)"),
]

QUEUE = "e2e-kafka-watchers"  # as in the DAG file
QUEUED_URI, PER_EVENT_URI = "e2e://v34/queued", "e2e://v34/per-event"
EVENT_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def topic(kafka_admin, airflow_extra_env: dict[str, str]) -> str:
    name = f"e2e.v34.events.{airflow_extra_env['AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN']}"
    ensure_topics(kafka_admin, [TopicSpec(name, partitions=1)])
    return name


@pytest.fixture(scope="module")
def stack(airflow_stack: AirflowStack, topic: str) -> AirflowStack:
    for dag_id in ("e2e_v34_queued", "e2e_v34_per_event"):
        airflow_stack.wait_dag_parsed(dag_id, timeout=180)
    return airflow_stack


def _watcher_trigger(stack: AirflowStack, uri: str) -> dict[str, Any] | None:
    """The trigger row of the watcher of ``uri`` (``None`` until the DAG processor registered it)."""
    rows = stack.query(
        "SELECT t.id, t.queue, t.triggerer_id FROM trigger t "
        "JOIN asset_watcher w ON w.trigger_id = t.id JOIN asset a ON a.id = w.asset_id WHERE a.uri = ?",
        (uri,),
    )
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def _assigned(stack: AirflowStack, uri: str) -> dict[str, Any] | None:
    row = _watcher_trigger(stack, uri)
    return row if row is not None and row["triggerer_id"] is not None else None


def _runs_and_events(stack: AirflowStack, dag_id: str) -> dict[int, list[str]]:
    """Each DAG run of ``dag_id`` and the watcher event ids of the asset events it consumed."""
    rows = stack.query(
        "SELECT r.id AS run, e.extra FROM dag_run r "
        "LEFT JOIN dagrun_asset_event x ON x.dag_run_id = r.id LEFT JOIN asset_event e ON e.id = x.event_id "
        "WHERE r.dag_id = ? ORDER BY r.id",
        (dag_id,),
    )
    runs: dict[int, list[str]] = {}
    for row in rows:
        events = runs.setdefault(row["run"], [])
        extra = json_column(row["extra"])
        if extra:
            events.append(extra["payload"]["event_id"])
    return runs


def _emit(bootstrap: str, topic: str, uri: str, n: int) -> str:
    receipt = external.emit(uri, topic=topic, bootstrap_servers=bootstrap, producer="e2e-v34", extra={"n": n})
    return receipt.event_id


def _newest_triggerer_job(stack: AirflowStack) -> int:
    (row,) = stack.query("SELECT max(id) AS id FROM job WHERE job_type = 'TriggererJob'")
    return int(row["id"] or 0)


def test_a_queued_watcher_is_held_by_the_triggerer_of_its_queue(stack):
    queued = stack.wait_for(
        lambda: _watcher_trigger(stack, QUEUED_URI), EVENT_TIMEOUT, "the queued watcher's trigger"
    )
    assert queued["queue"] == QUEUE
    plain = stack.wait_for(
        lambda: _assigned(stack, PER_EVENT_URI),
        EVENT_TIMEOUT,
        "the default triggerer to take the watcher on no queue",
        components=("triggerer",),
    )
    assert plain["queue"] is None
    # the default triggerer (no --queues) runs only the triggers on no queue
    assert _assigned(stack, QUEUED_URI) is None

    before = _newest_triggerer_job(stack)
    stack.add_triggerer(
        "triggerer-queued", env={"AIRFLOW__TRIGGERER__QUEUES_ENABLED": "True"}, args=("--queues", QUEUE)
    )
    try:
        stack.restart_component("triggerer-queued")
        newest = stack.wait_for(
            lambda: (job := _newest_triggerer_job(stack)) > before and {"id": job},
            EVENT_TIMEOUT,
            "the job of the triggerer started with --queues",
            components=("triggerer-queued",),
        )
        held = stack.wait_for(
            lambda: _assigned(stack, QUEUED_URI),
            EVENT_TIMEOUT,
            "the triggerer started with --queues to take the queued watcher",
            components=("triggerer-queued",),
        )
        assert held["triggerer_id"] == newest["id"]
        # the watcher on no queue stays with the triggerers on no queue (of the two the stack runs, either:
        # a busy machine can let one miss its health check and the other take its triggers)
        still = stack.wait_for(
            lambda: _assigned(stack, PER_EVENT_URI), EVENT_TIMEOUT, "the watcher on no queue to be held"
        )
        assert still["triggerer_id"] != newest["id"]
    finally:
        stack.stop_component("triggerer-queued")


def test_with_the_default_batch_asset_events_each_asset_event_is_one_run(stack, kafka_bootstrap, topic):
    sent = [_emit(kafka_bootstrap, topic, PER_EVENT_URI, n) for n in range(3)]  # arriving together

    def three_runs() -> dict[int, list[str]] | None:
        runs = _runs_and_events(stack, "e2e_v34_per_event")
        return runs if sorted(e for events in runs.values() for e in events) == sorted(sent) else None

    runs = stack.wait_for(
        three_runs, EVENT_TIMEOUT, "runs of e2e_v34_per_event for the 3 events", components=("scheduler",)
    )
    assert sorted(runs.values()) == sorted([e] for e in sent), runs

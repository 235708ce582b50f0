"""The demo's watcher steps (part of ``examples/demo.py``): a failed DAG run's callback emits an asset
event, the Kafka watcher turns it into an AssetEvent, and the investigation DAG runs; an event emitted
from outside Airflow runs a DAG whose watcher is Airflow's own ``MessageQueueTrigger``."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.assets.watcher_payload import watcher_payload

if TYPE_CHECKING:
    from harness.airflow_stack import AirflowStack

FAILING_DAG = "nightly_load"
INVESTIGATE_DAG = "investigate_failure"
INVESTIGATE_ASSET = "ops://investigate"
REFRESH_DAG = "refresh_reports"  # examples/dags/refresh_on_event.py
REPORTS_ASSET = "ops://reports"


def say(msg: str) -> None:
    print(msg, flush=True)


def _registered_watcher(stack: AirflowStack) -> dict[str, Any] | None:
    """The AssetWatcher of the investigation asset, once the dag-processor registered it."""
    from harness.airflow_stack import AirflowStackError

    def watchers() -> list[dict[str, Any]]:
        return stack.query(
            "SELECT w.name, w.trigger_id FROM asset_watcher w JOIN asset a ON a.id = w.asset_id "
            "WHERE a.name = ?",
            (INVESTIGATE_ASSET,),
        )

    try:  # the dag-processor registers the watcher once investigate_failure is unpaused
        (watcher,) = stack.wait_for(
            watchers, 60, f"the AssetWatcher of {INVESTIGATE_ASSET}", ("dag-processor",)
        )
    except AirflowStackError:
        say(
            f"[assets] FAILED: Airflow registered no AssetWatcher for {INVESTIGATE_ASSET} within 60s, so "
            "nothing consumes its events (no asset_watcher row: the trigger's kwargs must hash the same "
            "before and after Airflow stores them)"
        )
        return None
    return dict(watcher)


def _investigation_events(stack: AirflowStack) -> list[dict[str, Any]]:
    """The investigation asset's events, oldest first, with the watcher's payload of each."""
    rows = stack.query(
        "SELECT ae.id, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.name = ? ORDER BY ae.id",
        (INVESTIGATE_ASSET,),
    )
    return [{"id": row["id"], "payload": watcher_payload(json.loads(row["extra"]))} for row in rows]


def _event_of_run(stack: AirflowStack, run_id: str) -> dict[str, Any] | None:
    """The watcher's asset event of the failing DAG's run ``run_id``."""
    for event in _investigation_events(stack):
        payload = event["payload"]
        if payload and payload["source"].get("run_id") == run_id:
            return event
    return None


def _stored_position(stack: AirflowStack, kafka: dict[str, Any]) -> int | None:
    """The watcher's stored position past the record ``kafka`` names, once it is stored."""
    rows = stack.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = ? AND s.key LIKE 'airflow_kafka_events.watcher[%'",
        (INVESTIGATE_ASSET,),
    )
    for row in rows:
        stored = json.loads(row["value"]) if isinstance(row["value"], str) else row["value"]
        position = stored["positions"].get(kafka["topic"], {}).get(str(kafka["partition"]))
        if position is not None and position > kafka["offset"]:
            return int(position)
    return None


def _is_callback_event(payload: dict[str, Any] | None) -> bool:
    if not payload:
        return False
    return payload["source"].get("dag_id") == FAILING_DAG and payload["source"].get("kind") == "dag_callback"


def _investigation(stack: AirflowStack) -> dict[str, Any] | None:
    """The finished investigation run that a failure-callback event of the failing DAG triggered.

    Events of the manual run and of the @daily run that unpausing started can coalesce into one
    investigation run (Airflow does not promise one run per event): take the run that any
    failure-callback event of the failing DAG triggered.
    """
    ids = [event["id"] for event in _investigation_events(stack) if _is_callback_event(event["payload"])]
    marks = ",".join("?" * len(ids)) or "NULL"
    rows = stack.query(
        "SELECT DISTINCT dr.run_id, dr.state FROM dag_run dr "
        "JOIN dagrun_asset_event dae ON dae.dag_run_id = dr.id "
        f"WHERE dr.dag_id = ? AND dae.event_id IN ({marks}) ORDER BY dr.id",
        (INVESTIGATE_DAG, *ids),
    )
    done = [r for r in rows if r["state"] in ("success", "failed")]
    return done[0] if done else None


def _fail_the_dag(stack: AirflowStack) -> tuple[str, str]:
    """Trigger the failing DAG; its run id and final state."""
    t0 = time.monotonic()
    run_id = stack.trigger_dag(FAILING_DAG)
    state = stack.wait_for_dag_run(FAILING_DAG, run_id, timeout=180)
    tries = len(stack.task_instance_tries(FAILING_DAG, run_id, "load"))
    say(f"[assets] {FAILING_DAG} run {run_id}: {state} after {tries} tries in {time.monotonic() - t0:.1f}s")
    others = stack.query("SELECT run_id FROM dag_run WHERE dag_id = ? AND run_id != ?", (FAILING_DAG, run_id))
    if others:
        say(
            f"[assets] (unpausing the @daily {FAILING_DAG} also started "
            f"{', '.join(r['run_id'] for r in others)}; it fails the same way and gets its own event)"
        )
    return run_id, state


def watcher_demo(stack: AirflowStack) -> bool:
    """Use case 2: a DAG failure callback emits; the asset watcher schedules the investigation."""
    watcher = _registered_watcher(stack)
    if watcher is None:
        return False
    say(f"[assets] {watcher['name']} registered as trigger {watcher['trigger_id']} (runs in the triggerer)")
    t0 = time.monotonic()
    run_id, state = _fail_the_dag(stack)
    event = stack.wait_for(
        lambda: _event_of_run(stack, run_id), 180, "the watcher's asset event", ("triggerer", "dag-processor")
    )
    payload = event["payload"]
    source = payload["source"]
    say(
        f"[assets] watcher asset event {time.monotonic() - t0:.1f}s after the trigger: event_id "
        f"{payload['event_id']}, source {source['kind']} of {source['dag_id']} run {source['run_id']}, "
        f"reason {payload['extra'].get('reason')!r}, from {payload['kafka']['topic']}"
        f"[{payload['kafka']['partition']}]@{payload['kafka']['offset']}"
    )
    kafka = payload["kafka"]
    position = stack.wait_for(
        lambda: _stored_position(stack, kafka), 30, "the watcher's stored position", ("triggerer",)
    )
    say(
        f"[assets] the watcher stored its position {kafka['topic']}[{kafka['partition']}]@{position} in the "
        "asset's state store (no consumer group: correct on any number of triggerers)"
    )
    inv = stack.wait_for(
        lambda: _investigation(stack), 180, f"the {INVESTIGATE_DAG} run", ("scheduler", "triggerer")
    )
    handled = stack.xcom(INVESTIGATE_DAG, inv["run_id"], "investigate") if inv["state"] == "success" else []
    mine = [p for p in handled if p["extra"].get("failed_dag_id") == FAILING_DAG][:1]
    say(
        f"[assets] {INVESTIGATE_DAG} run {inv['run_id']}: {inv['state']} "
        f"{time.monotonic() - t0:.1f}s after the trigger; it investigated "
        f"{', '.join(p['extra']['failed_dag_id'] + ' run ' + p['extra']['failed_run_id'] for p in handled)}"
    )
    return (
        state == "failed"
        and source["kind"] == "dag_callback"
        and source["dag_id"] == FAILING_DAG
        and inv["state"] == "success"
        and len(mine) == 1
        and _kill_the_triggerer(stack, run_id)
    )


def _kill_the_triggerer(stack: AirflowStack, run_id: str) -> bool:
    """``kill -9`` of the triggerer, then a restart: the watcher resumes from its stored position and,
    its last run not having stopped cleanly, asks the api-server which of its asset's events exist
    (``[kafka_events] watcher_airflow_api_conn_id``); the failure's event stays one asset event."""
    t0 = time.monotonic()
    stack.kill_component("triggerer")
    stack.restart_component("triggerer", timeout=180)

    def resumed() -> str | None:
        lines = stack.logs("triggerer", current_only=True).splitlines()
        # the investigation's watcher (the triggerer runs the reports watcher too)
        mine = f"watcher of {INVESTIGATE_ASSET}"
        return next((x for x in lines if "after an unclean stop" in x and mine in x), None)

    line = stack.wait_for(resumed, 120, "the watcher's resume after the kill", ("triggerer",))
    said = line.split("] ", 1)[-1].split(" [airflow_kafka_events", 1)[0]
    known = re.search(r"unclean stop: (\d+) recent events", line)
    events = [
        e
        for e in _investigation_events(stack)
        if (e["payload"] or {}).get("source", {}).get("run_id") == run_id
    ]
    say(f"[assets] kill -9 of the triggerer, restarted in {time.monotonic() - t0:.1f}s: {said}")
    say(f"[assets] the failure of run {run_id} is still {len(events)} asset event")
    return known is not None and int(known.group(1)) > 0 and len(events) == 1


def message_queue_demo(stack: AirflowStack, bootstrap: str, topic: str) -> bool:
    """Use case 3: ``MessageQueueTrigger(scheme="kafka-events")`` watches ``ops://reports``; an event
    emitted from outside Airflow (``assets.external.emit``) runs ``refresh_reports``."""
    from airflow_kafka_events.assets import publish as external

    t0 = time.monotonic()
    extra = {"report_day": f"demo-{uuid.uuid4().hex[:8]}"}
    receipt = external.emit(
        REPORTS_ASSET, topic=topic, bootstrap_servers=bootstrap, producer="demo", extra=extra
    )
    say(
        f"[assets] emitted {receipt.event_id} for {REPORTS_ASSET} from outside Airflow to "
        f"{receipt.topic}[{receipt.partition}]@{receipt.offset}"
    )

    def refreshed() -> dict[str, Any] | None:
        rows = stack.query("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id", (REFRESH_DAG,))
        for row in rows:
            if row["state"] == "success" and extra in stack.xcom(REFRESH_DAG, row["run_id"], "refresh"):
                return row
        return None

    run = stack.wait_for(refreshed, 180, f"the {REFRESH_DAG} run on the event", ("scheduler", "triggerer"))
    say(
        f"[assets] {REFRESH_DAG} run {run['run_id']}: {run['state']} {time.monotonic() - t0:.1f}s after the "
        f"emit; its watcher is MessageQueueTrigger(scheme='kafka-events'), it refreshed {extra}"
    )
    return True

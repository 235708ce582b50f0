"""The plugin's listener on a real Airflow metadata database: the record commits with the event.

A fresh Airflow home (SQLite, ``airflow db migrate``), an asset with a watcher trigger, and Airflow's
own ``Trigger.submit_event`` (what the triggerer's supervisor calls for each event a watcher fired),
with the plugin loaded by Airflow's plugin manager from the package's entry point:

* an event carrying a watcher's run and number is persisted, and so is the record of that number
  under the run's key in the asset's state store, readable as a watcher reads it;
* an event whose transaction is rolled back leaves no record (the record never claims an event
  Airflow does not have);
* an event without the watcher's mark (another trigger's) leaves none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import json

    from airflow.models.asset import AssetActive, AssetModel, AssetWatcherModel
    from airflow.models.trigger import Trigger
    from airflow.state import AssetScope, get_state_backend
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session

    from airflow_kafka_events.watcher.confirmations import fired_mark, persisted_key

    with create_session() as session:
        asset = AssetModel(name="it://persisted/a", uri="it://persisted/a")
        session.add(asset)
        session.flush()
        session.add(AssetActive.for_asset(asset))
        trigger = Trigger(classpath="airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger",
                          kwargs={})
        session.add(trigger)
        session.flush()
        session.add(AssetWatcherModel(name="w", asset_id=asset.id, trigger_id=trigger.id))
        asset_id, trigger_id = asset.id, trigger.id

    def payload(run, seq):
        return {"event_id": f"{run}-{seq}", "watcher": fired_mark(run, seq)}

    Trigger.submit_event(trigger_id=trigger_id, event=TriggerEvent(payload("run-a", 0)))
    Trigger.submit_event(trigger_id=trigger_id, event=TriggerEvent(payload("run-a", 1)))
    # a transaction that does not commit: its record must not stay either
    from airflow import settings

    rolled = settings.Session()
    try:
        Trigger.submit_event(trigger_id=trigger_id, event=TriggerEvent(payload("run-b", 5)), session=rolled)
    finally:
        rolled.rollback()
        rolled.close()
    Trigger.submit_event(trigger_id=trigger_id, event=TriggerEvent({"event_id": "other"}))

    backend = get_state_backend()
    scope = AssetScope(asset_id=asset_id)
    with create_session() as session:
        from sqlalchemy import func, select

        from airflow.models.asset import AssetEvent

        events = session.scalar(select(func.count()).select_from(AssetEvent))
        out = {
            "events": events,
            "run-a": backend.get(scope, persisted_key("run-a"), session=session),
            "run-b": backend.get(scope, persisted_key("run-b"), session=session),
        }
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("persisted-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
    }
    env.pop("AIRFLOW__STATE_STORE__BACKEND", None)
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def test_the_record_commits_with_the_event_and_only_with_it(airflow_home):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=airflow_home, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["events"] == 3  # run-a's two and the other trigger's: run-b's was rolled back
    assert json.loads(result["run-a"]) == {"seq": 1}  # the last of run-a's events Airflow persisted
    assert result["run-b"] is None  # its event was rolled back, so is the record

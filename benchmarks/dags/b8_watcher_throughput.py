"""B8 DAG: asset-event throughput, Airflow's own ceiling vs the Kafka watcher path.

One DAG, ``b8_consumer``, scheduled on every B8 asset and on ``bench://b8/never``, which gets no
event: the schedule is a list (ALL of them), so the benchmark's thousands of events make no DAG
run.  (A run would consume them all, and with SQLite starting its task holds the database for
seconds: measured, a run consuming 6,760 asset events made ``PATCH .../run`` take 9.3 s and the
triggerer died of ``database is locked``.)  Which assets have a watcher depends on the phase
in ``$AIRFLOW_KAFKA_EVENTS_B8_DIR/phase`` (written by ``benchmarks/b8``; the dag-processor
re-parses this file every few seconds, and Airflow then adds and removes the watchers):

* ``ceiling``: ``bench://b8/ceiling`` has a :class:`b8_triggers.BurstTrigger` watcher (no Kafka);
* ``ceiling-<n>``: the ``n`` assets of ``kafka-<n>`` below each have a
  :class:`b8_triggers.BurstTrigger` watcher (``c<n>-<i>``): Airflow's own ceiling in that shape; the
  triggers look for the benchmark's request every ``n / 500`` s (at least 0.02 s), so that ``n`` of
  them wake the triggerer's loop about 500 times a second, whatever ``n``;
* ``kafka-<n>``: the ``n`` assets ``bench://b8/k<n>/a<i>`` are
  ``kafka_watched_asset``\\ s on ONE topic, ``bench.b8.k<n>.$AIRFLOW_KAFKA_EVENTS_B8_RUN``
  (connection ``kafka_watcher``);
* anything else: no watcher at all.

The counts ``n`` the DAG has assets for are ``$AIRFLOW_KAFKA_EVENTS_B8_COUNTS`` (comma-separated;
``1,10,100`` when unset): the benchmark sets the counts of the phases it runs.

Without ``$AIRFLOW_KAFKA_EVENTS_B8_RUN`` (another benchmark's stack sharing this DAGs folder) the
file defines no DAG.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task

RUN = os.environ.get("AIRFLOW_KAFKA_EVENTS_B8_RUN")
CONTROL_DIR = os.environ.get("AIRFLOW_KAFKA_EVENTS_B8_DIR", "")
ASSET_COUNTS = tuple(int(n) for n in os.environ.get("AIRFLOW_KAFKA_EVENTS_B8_COUNTS", "1,10,100").split(","))
REQUESTS_PER_SECOND = 500  # how often all ceiling-<n> triggers together look for a request
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def current_phase() -> str:
    try:
        return (Path(CONTROL_DIR) / "phase").read_text().strip()
    except OSError:
        return ""


def kafka_asset_ids(count: int) -> list[tuple[str, str]]:
    """(name, uri) of the assets of configuration ``kafka-<count>``."""
    return [(f"b8_k{count}_a{i:03d}", f"bench://b8/k{count}/a{i:03d}") for i in range(count)]


def ceiling_trigger_name(count: int, asset_name: str) -> str:
    """The :class:`b8_triggers.BurstTrigger` name of an asset of phase ``ceiling-<count>``."""
    return f"c{count}-{asset_name.rsplit('_', 1)[-1]}"


def ceiling_poll_interval(count: int) -> float:
    """How often each of the ``count`` triggers of phase ``ceiling-<count>`` looks for a request."""
    return max(0.02, count / REQUESTS_PER_SECOND)


if RUN and CONTROL_DIR:
    from b8_triggers import BurstTrigger

    from airflow_kafka_events.watcher.trigger import kafka_watched_asset

    PHASE = current_phase()
    assets: list[Asset] = [Asset(name="b8_never", uri="bench://b8/never")]  # no event: no DAG run
    if PHASE == "ceiling":
        watchers = [
            AssetWatcher(name="b8_ceiling", trigger=BurstTrigger(control_dir=CONTROL_DIR, name="ceiling"))
        ]
        assets.append(Asset(name="b8_ceiling", uri="bench://b8/ceiling", watchers=watchers))
    else:
        assets.append(Asset(name="b8_ceiling", uri="bench://b8/ceiling"))
    for count in ASSET_COUNTS:
        for name, uri in kafka_asset_ids(count):
            if PHASE == f"ceiling-{count}":
                trigger = BurstTrigger(
                    control_dir=CONTROL_DIR,
                    name=ceiling_trigger_name(count, name),
                    poll_interval=ceiling_poll_interval(count),
                )
                assets.append(Asset(name=name, uri=uri, watchers=[AssetWatcher(name=name, trigger=trigger)]))
            elif PHASE == f"kafka-{count}":
                assets.append(
                    kafka_watched_asset(
                        uri,
                        name=name,
                        topics=[f"bench.b8.k{count}.{RUN}"],
                        kafka_config_id="kafka_watcher",
                        dlq_topic=f"bench.b8.dlq.{RUN}",
                    )
                )
            else:
                assets.append(Asset(name=name, uri=uri))

    with DAG(dag_id="b8_consumer", schedule=assets, start_date=START, catchup=False, tags=["bench"]):

        @task
        def consume() -> None:
            """Nothing to do: the benchmark counts AssetEvent rows."""

        consume()

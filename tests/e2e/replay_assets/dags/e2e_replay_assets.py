"""Makes the asset of the ``replay-assets`` e2e test active (an asset is active once a parsed DAG uses it)."""

from __future__ import annotations

import pendulum
from airflow.sdk import Asset, dag, task

REPLAYED = Asset(name="e2e_replay_assets", uri="x-e2e://replay/assets")


@dag(
    dag_id="e2e_replay_assets",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "replay-assets"],
)
def e2e_replay_assets() -> None:
    @task(outlets=[REPLAYED])
    def publish() -> None:
        pass

    publish()


e2e_replay_assets()

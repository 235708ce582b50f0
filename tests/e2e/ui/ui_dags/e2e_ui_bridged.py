"""End-to-end DAG of the UI tests: scheduled on the asset the Health page's partition bridge posts to.

Parsing it makes the asset known to Airflow (the bridge posts only to an asset Airflow has); its
runs do nothing.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

DAG_ID = "e2e_ui_bridged"
ASSET = Asset(name="e2e_ui_bridged_orders", uri="kafka-events://e2e-ui-bridge/orders")

with DAG(
    dag_id=DAG_ID,
    schedule=[ASSET],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "ui"],
):
    EmptyOperator(task_id="nothing")

"""End-to-end DAG: a worker reads the ``kafka_default`` connection the harness put into the environment."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Connection, dag, task


@dag(
    dag_id="e2e_connection_probe",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e"],
)
def e2e_connection_probe() -> None:
    @task
    def read_connection(conn_id: str = "kafka_default") -> dict[str, Any]:
        conn = Connection.get(conn_id)
        return {"conn_type": conn.conn_type, "extra": conn.extra_dejson}

    read_connection()


e2e_connection_probe()

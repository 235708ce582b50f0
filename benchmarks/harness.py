"""What the benchmarks share: the broker and topics, an Airflow stack's settings, SQL on its metadata DB,
and the tail that writes a benchmark's results."""

from __future__ import annotations

from collections.abc import Sequence

#: Airflow's own failure detection (its defaults), not the test stack's quick one: under a benchmark's
#: load a late heartbeat must not fail a component's job and hand its work to another (with the test
#: stack's 15 s a scheduler marked its own job failed at 200 stream pairs, B13; a triggerer late past
#: the threshold loses its triggers to another triggerer)
AIRFLOW_DEFAULT_HEALTH = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "30",
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
}


def json_text(database: str, column: str, keys: Sequence[str]) -> str:
    """SQL for the text at ``keys`` inside JSON column ``column`` on ``database`` (``sqlite`` or
    ``postgres``), e.g. ``extra`` at ``("payload", "b8")``."""
    if database == "postgres":
        return f"CAST({column} AS json) #>> '{{{','.join(keys)}}}'"
    return f"json_extract({column}, '$.{'.'.join(keys)}')"

"""The Airflow plugin (``airflow.plugins`` entry point): the Kafka Events view.

* ``fastapi_apps``: the view's app (:mod:`airflow_kafka_events.plugin.app`), mounted by the
  api-server at ``/kafka-events``; it is built the first time the api-server asks for it, so the
  other Airflow processes that load plugins (scheduler, workers, triggerer) never import it;
* ``listeners``: :mod:`airflow_kafka_events.plugin.persisted_events`, which records in the asset state
  store, in the transaction persisting it, each asset event of a watcher (so that a watcher stopped
  gracefully knows at its next start which of its last events Airflow has);
* ``external_views``: the entries of Airflow's UI that open its pages in the UI's frame -- "Kafka
  Events" in the navigation bar, and a "Kafka streams" tab on a DAG, a DAG run and a task instance
  (the stream of that task instance).  Airflow 3.3 has no asset destination.

Nothing in the package imports the plugin.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.plugin import persisted_events

__all__ = ["EXTERNAL_VIEWS", "URL_PREFIX", "KafkaEventsPlugin"]

#: Where the view's app is mounted (kept equal to ``plugin.app.URL_PREFIX``, which imports FastAPI).
URL_PREFIX = "/kafka-events"

EXTERNAL_VIEWS: list[dict[str, Any]] = [
    {
        "name": "Kafka Events",
        "href": f"{URL_PREFIX}/streams",
        "destination": "nav",
        "url_route": "kafka-events",
    },
    {
        "name": "Kafka streams",
        "href": f"{URL_PREFIX}/streams?dag_id={{DAG_ID}}",
        "destination": "dag",
        "url_route": "kafka-events-dag",
    },
    {
        "name": "Kafka streams",
        "href": f"{URL_PREFIX}/streams?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
        "destination": "dag_run",
        "url_route": "kafka-events-dag-run",
    },
    {
        "name": "Kafka stream",
        "href": f"{URL_PREFIX}/streams?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
        "&map_index={MAP_INDEX}",
        "destination": "task_instance",
        "url_route": "kafka-events-task-instance",
    },
]


class KafkaEventsPlugin(AirflowPlugin):
    """Registers airflow-kafka-events with Airflow's plugin manager."""

    name = "airflow_kafka_events"
    version = __version__
    external_views = EXTERNAL_VIEWS
    listeners = [persisted_events]

    # built on first use, by the api-server only
    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_kafka_events.plugin.app import get_app

        return [{"app": get_app(), "url_prefix": URL_PREFIX, "name": "Kafka Events"}]

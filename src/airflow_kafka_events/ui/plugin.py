"""The Airflow plugin (``airflow.plugins`` entry point): the Kafka Events view.

* ``fastapi_apps``: the view's app (:mod:`airflow_kafka_events.ui.app`), mounted by the
  api-server at ``/kafka-events``: its JSON API and the view's JavaScript bundle; it is built the
  first time the api-server asks for it, so the other Airflow processes that load plugins
  (scheduler, workers, triggerer) never import it;
* ``listeners``: :mod:`airflow_kafka_events.watcher.persisted_events`, which records in the asset state
  store, in the transaction persisting it, each asset event of a watcher (so that a watcher stopped
  gracefully knows at its next start which of its last events Airflow has), and
  :mod:`airflow_kafka_events.triggerer_heap`, which freezes the heap a triggerer's runner inherits
  from its supervisor at the fork (so its full collections do not block its event loop);
* ``react_apps``: the entries of Airflow's UI that show the view -- "Kafka Events" in the
  navigation bar, and a "Kafka streams" tab on a DAG, a DAG run and a task instance.  Airflow's
  UI imports the bundle into its own page (no frame): links go through its router, the page takes
  its theme (light and dark mode).  Airflow 3.3 has no asset destination.

Each entry names the bundle with a query of its own: the UI imports an entry's ``bundle_url``
the first time it shows it and then reads the component the module left on
``globalThis.AirflowPlugin`` -- a module already imported under the same URL would not run again
and leave nothing there for a second entry.

Nothing in the package imports the plugin.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_kafka_events import triggerer_heap
from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.watcher import persisted_events

__all__ = ["REACT_APPS", "URL_PREFIX", "VIEW_URL_ROUTE", "KafkaEventsPlugin"]

#: Where the view's app is mounted (kept equal to ``plugin.app.URL_PREFIX``, which imports FastAPI).
URL_PREFIX = "/kafka-events"
#: The navigation bar's page: ``/plugin/kafka-events`` in Airflow's UI (the bundle's own routes
#: -- ``/streams``, ``/dead-letters/<partition>/<offset>`` ... -- are under it).
VIEW_URL_ROUTE = "kafka-events"


def _bundle_url(entry: str) -> str:
    return f"{URL_PREFIX}/static/kafka-events.js?v={__version__}&entry={entry}"


REACT_APPS: list[dict[str, Any]] = [
    {"name": name, "bundle_url": _bundle_url(destination), "destination": destination, "url_route": route}
    for name, destination, route in (
        ("Kafka Events", "nav", VIEW_URL_ROUTE),
        ("Kafka streams", "dag", "kafka-events-dag"),
        ("Kafka streams", "dag_run", "kafka-events-dag-run"),
        ("Kafka stream", "task_instance", "kafka-events-task-instance"),
    )
]


class KafkaEventsPlugin(AirflowPlugin):
    """Registers airflow-kafka-events with Airflow's plugin manager."""

    name = "airflow_kafka_events"
    version = __version__
    react_apps = REACT_APPS
    listeners = [persisted_events, triggerer_heap]

    # built on first use, by the api-server only
    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_kafka_events.ui.app import get_app

        return [{"app": get_app(), "url_prefix": URL_PREFIX, "name": "Kafka Events"}]

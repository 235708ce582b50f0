"""The Airflow plugin (``airflow.plugins`` entry point).

The plugin layer sits on top of everything else; it grows views, listeners and macros
as features land. Nothing in the package imports it.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_kafka_events.__about__ import __version__


class KafkaEventsPlugin(AirflowPlugin):
    """Registers airflow-kafka-events with Airflow's plugin manager."""

    name = "airflow_kafka_events"
    version = __version__

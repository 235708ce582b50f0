"""airflow-kafka-events: stream Airflow trigger events and explicit asset events through Kafka.

Importing this package imports no Airflow module, so external producers can use its
codec and emit client without Airflow installed in their process.
"""

from __future__ import annotations

from airflow_kafka_events.__about__ import __version__

__all__ = ["__version__"]

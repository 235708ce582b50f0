"""airflow-kafka-events: stream Airflow trigger events and explicit asset events through Kafka.

Importing this package imports no Airflow module, so external producers can use its
codec and emit client without Airflow installed in their process.  ``emit_asset_event``
(Airflow-aware) is imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from airflow_kafka_events.assets.emit import emit_asset_event

__all__ = ["__version__", "emit_asset_event"]


__getattr__, __dir__ = lazy_exports(
    __name__, {"emit_asset_event": "airflow_kafka_events.assets.emit"}, globals()
)

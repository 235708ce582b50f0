"""airflow-kafka-events: stream Airflow trigger events and explicit asset events through Kafka.

Importing this package imports no Airflow module, so external producers can use its
codec and emit client without Airflow installed in their process.  ``emit_asset_event``
(Airflow-aware) is imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_kafka_events.__about__ import __version__

if TYPE_CHECKING:
    from airflow_kafka_events.assets.emit import emit_asset_event

__all__ = ["__version__", "emit_asset_event"]


def __getattr__(name: str) -> Any:
    if name == "emit_asset_event":
        from airflow_kafka_events.assets.emit import emit_asset_event

        globals()[name] = emit_asset_event
        return emit_asset_event
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "emit_asset_event"})

"""Asset events from Kafka into Airflow through an AssetWatcher."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from airflow_kafka_events.watcher.trigger import (
        KafkaAssetEventTrigger,
        kafka_watched_asset,
        kafka_watcher_trigger,
    )

__all__ = [
    "KafkaAssetEventTrigger",
    "kafka_watched_asset",
    "kafka_watcher_trigger",
]

_LAZY = {
    "KafkaAssetEventTrigger": "airflow_kafka_events.watcher.trigger",
    "kafka_watched_asset": "airflow_kafka_events.watcher.trigger",
    "kafka_watcher_trigger": "airflow_kafka_events.watcher.trigger",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

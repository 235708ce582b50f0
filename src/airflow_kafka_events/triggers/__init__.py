"""Triggers of airflow-kafka-events: streaming triggers that write every page to Kafka."""

from __future__ import annotations

from airflow_kafka_events.triggers.asset_watcher import KafkaAssetEventTrigger
from airflow_kafka_events.triggers.streaming import Page, StreamingTrigger
from airflow_kafka_events.triggers.wrapper import StreamingWrapperTrigger

__all__ = ["KafkaAssetEventTrigger", "Page", "StreamingTrigger", "StreamingWrapperTrigger"]

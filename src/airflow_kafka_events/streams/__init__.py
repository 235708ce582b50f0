"""Trigger event streams.

A trigger writes every page to Kafka (``producing``); a task reads them back
in order (``consuming``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.lazy_exports import lazy_exports
from airflow_kafka_events.streams.descriptor import StreamDescriptor, parse_stream_id, stream_id

if TYPE_CHECKING:
    from airflow_kafka_events.streams.consuming.consumption import ConsumptionSummary, StreamEvent
    from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task
    from airflow_kafka_events.streams.consuming.operator import (
        StreamConsumerOperator,
        StreamRef,
        consumer_group_id,
    )
    from airflow_kafka_events.streams.producing.operator import (
        StreamingOperatorMixin,
        StreamingTriggerOperator,
    )
    from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger
    from airflow_kafka_events.streams.producing.wrapper import StreamingWrapperTrigger

__all__ = [
    "ConsumptionSummary",
    "Page",
    "StreamConsumerOperator",
    "StreamDescriptor",
    "StreamEvent",
    "StreamRef",
    "StreamingOperatorMixin",
    "StreamingTrigger",
    "StreamingTriggerOperator",
    "StreamingWrapperTrigger",
    "consumer_group_id",
    "parse_stream_id",
    "stream_consumer_task",
    "stream_id",
]

_LAZY = {
    "Page": "airflow_kafka_events.streams.producing.trigger",
    "StreamingTrigger": "airflow_kafka_events.streams.producing.trigger",
    "StreamingWrapperTrigger": "airflow_kafka_events.streams.producing.wrapper",
    "StreamingOperatorMixin": "airflow_kafka_events.streams.producing.operator",
    "StreamingTriggerOperator": "airflow_kafka_events.streams.producing.operator",
    "StreamConsumerOperator": "airflow_kafka_events.streams.consuming.operator",
    "StreamRef": "airflow_kafka_events.streams.consuming.operator",
    "consumer_group_id": "airflow_kafka_events.streams.consuming.operator",
    "stream_consumer_task": "airflow_kafka_events.streams.consuming.decorator",
    "StreamEvent": "airflow_kafka_events.streams.consuming.consumption",
    "ConsumptionSummary": "airflow_kafka_events.streams.consuming.consumption",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

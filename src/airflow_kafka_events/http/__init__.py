"""Paginated HTTP APIs as streaming triggers: every page becomes one Kafka envelope."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from airflow_kafka_events.http.trigger import GraphPaginationTrigger, HttpPaginationTrigger

__all__ = [
    "GraphPaginationTrigger",
    "HttpPaginationTrigger",
]

_LAZY = {
    "HttpPaginationTrigger": "airflow_kafka_events.http.trigger",
    "GraphPaginationTrigger": "airflow_kafka_events.http.trigger",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

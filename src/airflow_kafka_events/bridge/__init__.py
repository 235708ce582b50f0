"""The partition bridge: Kafka asset events -> Airflow asset events with their partition key.

``airflow-kafka-events bridge`` runs :class:`~airflow_kafka_events.bridge.service.BridgeService`
with a :class:`~airflow_kafka_events.bridge.config.BridgeConfig`; the REST client is
:mod:`airflow_kafka_events.assets.airflow_api`.  Importing this package imports no Airflow
module (the bridge is a plain process beside Airflow, talking to its REST API).
"""

from __future__ import annotations

from airflow_kafka_events.assets.airflow_api import (
    AirflowApiClient,
    AirflowApiError,
    AssetIdCache,
    AuthenticationError,
    ForbiddenError,
    NotFoundError,
    RejectedError,
    TransientApiError,
    UnknownAssetError,
)
from airflow_kafka_events.assets.errors import CausationTooDeepError
from airflow_kafka_events.bridge.airflow_event import event_extra
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.bridge.errors import BridgeError, DeadLetterError, RetriesExhaustedError
from airflow_kafka_events.bridge.service import BridgeService, Outcome
from airflow_kafka_events.retry import RetryPolicy

__all__ = [
    "AirflowApiClient",
    "AirflowApiError",
    "AssetIdCache",
    "AuthenticationError",
    "BridgeConfig",
    "BridgeError",
    "BridgeService",
    "CausationTooDeepError",
    "DeadLetterError",
    "ForbiddenError",
    "NotFoundError",
    "Outcome",
    "RejectedError",
    "RetriesExhaustedError",
    "RetryPolicy",
    "TransientApiError",
    "UnknownAssetError",
    "event_extra",
]

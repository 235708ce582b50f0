"""Explicit asset events: publish "this asset changed" to Kafka when it becomes true.

Airflow-free (importable by external producers without Airflow):

* :func:`airflow_kafka_events.assets.publish.emit` — emit from any Python process (not
  re-exported here: ``airflow_kafka_events.assets.emit`` is the Airflow-aware module);
* :class:`Receipt`, :func:`causation_depth`, :func:`provenance_extra`,
  :func:`default_idempotency_key`, :class:`SeenKeys`;
* :class:`AdmissionPipeline`, :class:`AdmissionConfig`, :class:`AdmissionVerdict`,
  :class:`CausationTooDeepError` (:mod:`airflow_kafka_events.assets.admission`, imported on
  first use): what consumers let into Airflow.

Airflow-aware, imported on first use (importing this package imports no Airflow module):

* :func:`emit_asset_event`, :func:`emit_from_dag_callback`, :func:`emit_from_task_callback`
  (:mod:`airflow_kafka_events.assets.emit`);
* :class:`AssetEventNotifier` (:mod:`airflow_kafka_events.assets.notifier`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_events.assets.idempotency import SeenKeys, default_idempotency_key
from airflow_kafka_events.assets.publish import (
    PROVENANCE_EXTRA_KEY,
    Receipt,
    causation_depth,
    causation_from_extra,
    provenance_extra,
    record_key,
)
from airflow_kafka_events.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from airflow_kafka_events.assets.admission import AdmissionConfig, AdmissionPipeline, AdmissionVerdict
    from airflow_kafka_events.assets.emit import (
        emit_asset_event,
        emit_from_dag_callback,
        emit_from_task_callback,
    )
    from airflow_kafka_events.assets.errors import CausationTooDeepError
    from airflow_kafka_events.assets.notifier import AssetEventNotifier

__all__ = [
    "PROVENANCE_EXTRA_KEY",
    "AdmissionConfig",
    "AdmissionPipeline",
    "AdmissionVerdict",
    "AssetEventNotifier",
    "CausationTooDeepError",
    "Receipt",
    "SeenKeys",
    "causation_depth",
    "causation_from_extra",
    "default_idempotency_key",
    "emit_asset_event",
    "emit_from_dag_callback",
    "emit_from_task_callback",
    "provenance_extra",
    "record_key",
]

_LAZY = {
    "AdmissionConfig": "airflow_kafka_events.assets.admission",
    "AdmissionPipeline": "airflow_kafka_events.assets.admission",
    "AdmissionVerdict": "airflow_kafka_events.assets.admission",
    "CausationTooDeepError": "airflow_kafka_events.assets.admission",
    "emit_asset_event": "airflow_kafka_events.assets.emit",
    "emit_from_dag_callback": "airflow_kafka_events.assets.emit",
    "emit_from_task_callback": "airflow_kafka_events.assets.emit",
    "AssetEventNotifier": "airflow_kafka_events.assets.notifier",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

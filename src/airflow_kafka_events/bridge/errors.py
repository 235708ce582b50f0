"""The partition bridge's errors, all under :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`.

* :class:`BridgeError` -- the bridge cannot go on (it exits non-zero);
* :class:`RetriesExhaustedError`, :class:`DeadLetterError` -- nothing was committed.

A failed call to Airflow's REST API raises the client's errors
(:class:`~airflow_kafka_events.assets.airflow_api.AirflowApiError` and its kinds).  This module
imports no Airflow module.
"""

from __future__ import annotations

from airflow_kafka_events.errors import AirflowKafkaEventsError

__all__ = [
    "BridgeError",
    "DeadLetterError",
    "RetriesExhaustedError",
]


class BridgeError(AirflowKafkaEventsError):
    """The partition bridge cannot go on."""


class RetriesExhaustedError(BridgeError):
    """Transient failures outlasted the retry policy; nothing was committed."""


class DeadLetterError(BridgeError):
    """A record could not be written to the dead-letter topic; nothing was committed."""

"""The partition bridge's errors, all under :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`.

* :class:`BridgeError` -- the bridge cannot go on (it exits non-zero);
* :class:`AirflowApiError` and its kinds -- a call to Airflow's REST API failed:
  :class:`TransientApiError` (retry), :class:`RejectedError` / :class:`NotFoundError` /
  :class:`UnknownAssetError` (dead-letter the record), :class:`AuthenticationError` /
  :class:`ForbiddenError` (configuration);
* :class:`RetriesExhaustedError`, :class:`DeadLetterError` -- nothing was committed.

They stay importable from :mod:`~airflow_kafka_events.assets.airflow_api` and
:mod:`~airflow_kafka_events.bridge.service`, the type names they are recorded under.  This
module imports no Airflow module.
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

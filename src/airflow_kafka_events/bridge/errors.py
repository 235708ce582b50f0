"""The partition bridge's errors, all under :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`.

* :class:`BridgeError` -- the bridge cannot go on (it exits non-zero);
* :class:`AirflowApiError` and its kinds -- a call to Airflow's REST API failed:
  :class:`TransientApiError` (retry), :class:`RejectedError` / :class:`NotFoundError` /
  :class:`UnknownAssetError` (dead-letter the record), :class:`AuthenticationError` /
  :class:`ForbiddenError` (configuration);
* :class:`RetriesExhaustedError`, :class:`DeadLetterError` -- nothing was committed.

They stay importable from :mod:`~airflow_kafka_events.bridge.airflow_api` and
:mod:`~airflow_kafka_events.bridge.service`, the type names they are recorded under.  This
module imports no Airflow module.
"""

from __future__ import annotations

from airflow_kafka_events.errors import AirflowKafkaEventsError

__all__ = [
    "AirflowApiError",
    "AuthenticationError",
    "BridgeError",
    "DeadLetterError",
    "ForbiddenError",
    "NotFoundError",
    "RejectedError",
    "RetriesExhaustedError",
    "TransientApiError",
    "UnknownAssetError",
]


class BridgeError(AirflowKafkaEventsError):
    """The partition bridge cannot go on."""


class AirflowApiError(BridgeError):
    """A call to Airflow's REST API failed; ``status`` is the HTTP status (``None``: no answer)."""

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class TransientApiError(AirflowApiError):
    """Worth retrying.  ``ambiguous``: a POST may have been applied although no 2xx came back."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        detail: str | None = None,
        ambiguous: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, detail=detail)
        self.ambiguous = ambiguous
        self.retry_after = retry_after


class RejectedError(AirflowApiError):
    """A 4xx about the request itself (validation, unknown asset ...): retrying cannot help."""


class NotFoundError(RejectedError):
    """404: the asset (or route) does not exist."""


class AuthenticationError(AirflowApiError):
    """The credentials were refused, or a fresh token was refused."""


class ForbiddenError(AirflowApiError):
    """403: the user is authenticated but its role may not do this (the bridge needs role ``op``)."""


class UnknownAssetError(RejectedError):
    """No active Airflow asset has the event's exact name and URI."""


class RetriesExhaustedError(BridgeError):
    """Transient failures outlasted the retry policy; nothing was committed."""


class DeadLetterError(BridgeError):
    """A record could not be written to the dead-letter topic; nothing was committed."""

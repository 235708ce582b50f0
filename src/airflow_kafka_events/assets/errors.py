"""The asset events' consumer-side errors, all under ``AirflowKafkaEventsError``.

* :class:`AuthorizationError` -- refused by a consumer's checks: :class:`NotAllowedError`
  (allowlist), :class:`SignatureMissingError` / :class:`SignatureInvalidError` (signatures),
  :class:`CausationTooDeepError` (causation depth); ``reason`` is the dead letter's ``x-reason``;
* :class:`ConsumedRecordTooLargeError` -- a record over the consumer's ``max_record_bytes``
  (the producer's refusal of a record too large to send is
  :class:`~airflow_kafka_events.errors.RecordTooLargeError`).

Validation errors of the events themselves live in :mod:`airflow_kafka_events.errors`.  Dead
letters record these classes' qualified names (``x-error-type``).  This module imports no Airflow
module.
"""

from __future__ import annotations

from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.errors import AirflowKafkaEventsError, ValidationError

__all__ = [
    "AuthorizationError",
    "CausationTooDeepError",
    "ConsumedRecordTooLargeError",
    "NotAllowedError",
    "SignatureError",
    "SignatureInvalidError",
    "SignatureMissingError",
]


class AuthorizationError(AirflowKafkaEventsError):
    """An asset event was refused by a consumer's authorization checks.

    ``reason`` is the short code written to the dead-letter record's ``x-reason`` header.
    """

    reason = "not-authorized"


class NotAllowedError(AuthorizationError):
    """The event's source matches no rule of the consumer's allowlist."""

    reason = "not-allowed"


class SignatureError(AuthorizationError):
    """The event's signature could not be verified."""

    reason = "signature-invalid"


class SignatureMissingError(SignatureError):
    """The consumer requires signed events and this one carries no signature."""

    reason = "signature-missing"


class SignatureInvalidError(SignatureError):
    """The signature does not match the envelope under any accepted key (``reason`` as its base's)."""


class CausationTooDeepError(AuthorizationError):
    """An event's causation chain is longer than the consumer's ``max_causation_depth``."""

    reason = DeadLetterReason.CAUSATION_TOO_DEEP.value


class ConsumedRecordTooLargeError(ValidationError):
    """A record is larger than the consumer's ``max_record_bytes``."""

"""Errors of the inspection functions: each names the topic, the brokers and the fix.

All of them are :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`; the Kafka ones are
:class:`~airflow_kafka_events.errors.KafkaOperationError` (with librdkafka's error when there is
one).  A refused login or TLS handshake is raised as the package's
:class:`~airflow_kafka_events.errors.KafkaAuthenticationError` / ``KafkaTlsError`` instead.
"""

from __future__ import annotations

from airflow_kafka_events.errors import KafkaOperationError, ValidationError

__all__ = [
    "BrokerTimeoutError",
    "InspectionError",
    "InvalidWindowError",
    "NotADeadLetterError",
    "RecordNotFoundError",
    "ReplayError",
    "ReplayTargetRefusedError",
    "StreamIndexNotFoundError",
    "StreamNotFoundError",
    "TopicNotFoundError",
]


class InspectionError(KafkaOperationError):
    """Reading (or replaying) records for inspection failed."""


class TopicNotFoundError(InspectionError):
    """The topic does not exist (or this client may not see it)."""


class StreamIndexNotFoundError(TopicNotFoundError):
    """The stream index topic does not exist: ``airflow-kafka-events topics ensure`` creates it."""


class BrokerTimeoutError(InspectionError, TimeoutError):
    """The brokers did not answer within the call's timeout (unreachable, or overloaded)."""


class RecordNotFoundError(InspectionError):
    """No record at the asked coordinates (beyond the end, or removed by retention)."""


class NotADeadLetterError(InspectionError):
    """The record at the asked coordinates (or every record of a listing's window) has no dead-letter
    headers."""


class StreamNotFoundError(InspectionError):
    """No envelope of the stream in the scanned window."""


class ReplayError(InspectionError):
    """A dead letter cannot be replayed (e.g. the original of a reference is gone)."""


class ReplayTargetRefusedError(ValidationError):
    """A replay to a topic its caller may not publish to (not the dead letter's source topic, nor a
    configured extra target); nothing is published."""


class InvalidWindowError(ValidationError):
    """A scan window that cannot be read (naive datetime, non-positive record bound ...)."""

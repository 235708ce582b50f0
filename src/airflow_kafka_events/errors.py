"""One error hierarchy for the whole package.

Every exception raised on purpose by ``airflow_kafka_events`` derives from
:class:`AirflowKafkaEventsError`.  Errors about bytes on the wire also derive from
confluent-kafka's :class:`~confluent_kafka.serialization.SerializationError`, so code
that already catches serializer errors keeps working; errors that come from the Kafka
client keep librdkafka's error code (``.code``) and the original ``KafkaError``.

This module imports no Airflow module: external producers use it too.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.serialization import SerializationError as _ConfluentSerializationError


class AirflowKafkaEventsError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(AirflowKafkaEventsError, ValueError):
    """Settings that are missing, contradictory, or weaken a guarantee the package relies on."""


# --------------------------------------------------------------------------- serialization
class EnvelopeSerializationError(AirflowKafkaEventsError, _ConfluentSerializationError):
    """Bytes could not be produced from, or decoded into, an envelope."""


class EnvelopeEncodeError(EnvelopeSerializationError):
    """An envelope (or its payload) cannot be encoded, e.g. a payload that is not JSON."""


class EnvelopeDecodeError(EnvelopeSerializationError):
    """Bytes could not be decoded into an envelope."""


class TruncatedMessageError(EnvelopeDecodeError):
    """The message is shorter than its framing header or its Avro body says."""


class UnknownFramingError(EnvelopeDecodeError):
    """The leading bytes match neither Avro single-object encoding nor the registry wire format."""


class UnknownSchemaError(EnvelopeDecodeError):
    """The fingerprint or registry schema id names a writer schema we do not know."""


# --------------------------------------------------------------------------- validation
class ValidationError(AirflowKafkaEventsError, ValueError):
    """Input rejected before anything was sent."""


# --------------------------------------------------------------------------- kafka
class KafkaOperationError(AirflowKafkaEventsError, KafkaException):
    """A Kafka client operation failed; keeps librdkafka's error and code.

    ``code`` is a ``confluent_kafka.KafkaError`` code (e.g. ``KafkaError._MSG_TIMED_OUT``)
    or ``None`` when the failure did not come with one.
    """

    def __init__(self, message: str, *, kafka_error: KafkaError | None = None) -> None:
        self.kafka_error = kafka_error
        self.code: int | None = kafka_error.code() if kafka_error is not None else None
        detail = f" [{kafka_error.name()}: {kafka_error.str()}]" if kafka_error is not None else ""
        super().__init__(f"{message}{detail}")
        self.message = message

    @property
    def retriable(self) -> bool:
        return bool(self.kafka_error is not None and self.kafka_error.retriable())

    @classmethod
    def from_exception(cls, message: str, exc: BaseException) -> KafkaOperationError:
        err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        return cls(message, kafka_error=err if isinstance(err, KafkaError) else None)


class DeliveryError(KafkaOperationError):
    """A produced message was not acknowledged by the broker (delivery report error)."""


class TopicError(KafkaOperationError):
    """Topic creation / deletion / description failed."""


class BrokerError(AirflowKafkaEventsError, RuntimeError):
    """The embedded local broker could not be fetched, started, or stopped."""

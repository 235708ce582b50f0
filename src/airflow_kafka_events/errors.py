"""One error hierarchy for the whole package.

Every exception raised on purpose by ``airflow_kafka_events`` derives from
:class:`AirflowKafkaEventsError`.  Errors about bytes on the wire also derive from
confluent-kafka's :class:`~confluent_kafka.serialization.SerializationError`, so code
that already catches serializer errors keeps working; errors that come from the Kafka
client keep librdkafka's error code (``.code``) and the original ``KafkaError``.

Each subpackage with errors of its own has one ``errors`` module (``assets.errors``,
``bridge.errors``, ``http.errors``, ``iteration.errors``, ``ui.inspection.errors``), all under
:class:`AirflowKafkaEventsError`.  An error's qualified type name is recorded in Kafka (a failed
stream's ``StreamError.type``, a dead letter's ``x-error-type``).

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


class UnsupportedByAirflowError(ConfigurationError):
    """An argument the installed Airflow version cannot honour (it would silently ignore it)."""


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


class SchemaRegistryUnavailableError(EnvelopeSerializationError):
    """The schema registry did not answer (unreachable, timed out, a server error): retry later; the
    record is not at fault, so it is never dead-lettered for this."""


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
    """A produced message was not acknowledged by the broker (delivery report error).

    Raised as one of two subclasses: :class:`NotSentError` (nothing will be published) or
    :class:`DeliveryOutcomeUnknownError` (it may have been written).
    """


class NotSentError(DeliveryError):
    """Not sent — nothing will be published: the message never left the client.

    E.g. no broker was reachable during its whole life, authentication failed, the topic or
    partition is unknown, or it timed out in the local queue without ever being transmitted.
    The client no longer holds it, so a retry cannot produce a second copy.
    """


class KafkaAuthenticationError(KafkaOperationError):
    """The brokers refused the client's credentials (SASL).

    Brokers answer the same for a wrong password and an unknown user, so this is one error.  Its
    message names the mechanism, the user and the bootstrap servers, never the password.
    """


class KafkaTlsError(KafkaOperationError):
    """The TLS handshake with the brokers failed: an untrusted certificate, a hostname that does
    not match the certificate, or a protocol mismatch (a TLS client on a plaintext listener)."""


class AuthenticationNotSentError(NotSentError, KafkaAuthenticationError):
    """Not sent — nothing will be published: the brokers refused the producer's credentials."""


class TlsNotSentError(NotSentError, KafkaTlsError):
    """Not sent — nothing will be published: the TLS handshake with the brokers failed."""


class DeliveryOutcomeUnknownError(DeliveryError):
    """Outcome unknown — retry with the same idempotency key: the message may have been written.

    E.g. it timed out while a produce request carrying it was in flight, or the caller stopped
    waiting before the client gave up on it.  Readers drop a repeated idempotency key.
    """


class RecordTooLargeError(NotSentError, ValidationError):
    """A record larger than the client's ``message.max.bytes`` or the topic's ``max.message.bytes``.

    Refused before anything is produced (client limit) or rejected by the broker (topic limit);
    nothing is published either way.  ``size`` is the record's size, ``limit`` the limit it broke
    and ``limit_name`` that limit's setting.
    """

    def __init__(
        self,
        message: str,
        *,
        size: int,
        limit: int | None,
        limit_name: str,
        kafka_error: KafkaError | None = None,
    ) -> None:
        super().__init__(message, kafka_error=kafka_error)
        self.size = size
        self.limit = limit
        self.limit_name = limit_name


class TopicError(KafkaOperationError):
    """Topic creation / deletion / description failed."""


class BrokerError(AirflowKafkaEventsError, RuntimeError):
    """The embedded local broker could not be fetched, started, or stopped."""


# --------------------------------------------------------------------------- streams
class StreamIdentityError(ConfigurationError):
    """A streaming trigger cannot tell which stream it writes (no trigger_run_id, no task instance)."""


class StreamProgressError(KafkaOperationError):
    """Finding how far a stream got in Kafka failed: metadata, watermarks, reads or a timeout."""


class StreamTimeoutError(AirflowKafkaEventsError, TimeoutError):
    """A wrapped trigger did not finish within the stream's timeout."""


class WrappedTaskFailedError(AirflowKafkaEventsError):
    """A wrapped trigger ended its task as failed (it yielded a ``TaskFailedEvent``)."""


# --------------------------------------------------------------------------- trigger event streams
def _rebuild_error(cls: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An error of keyword-only attributes, unpickled (``__reduce__`` of the errors below)."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class StreamReadError(AirflowKafkaEventsError):
    """Reading one trigger run's event stream cannot go on.

    ``topic`` and ``trigger_run_id`` name the stream (``None`` when not known).
    """

    def __init__(self, message: str, *, topic: str | None = None, trigger_run_id: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.trigger_run_id = trigger_run_id

    def __reduce__(self) -> tuple[Any, ...]:
        # keyword-only attributes survive pickling (task runners ship exceptions between processes)
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


class StreamNotStartedError(StreamReadError, TimeoutError):
    """No element of the stream arrived within the start timeout: its producer never started."""


class StreamGapError(StreamReadError, TimeoutError):
    """The next expected ``sequence_index`` (``missing_index``) did not arrive in time.

    ``present`` lists (sorted) the later sequence indexes of the same ``attempt`` that did
    arrive; it is empty when nothing arrived at all.
    """

    def __init__(
        self,
        message: str,
        *,
        missing_index: int,
        attempt: int,
        present: tuple[int, ...] = (),
        topic: str | None = None,
        trigger_run_id: str | None = None,
    ) -> None:
        super().__init__(message, topic=topic, trigger_run_id=trigger_run_id)
        self.missing_index = missing_index
        self.attempt = attempt
        self.present = present


class StreamFailedError(StreamReadError):
    """The producer ended the stream with an error (``is_last`` with ``error``).

    ``type`` and ``message`` are the producer's error; ``envelope`` is the failing element.
    """

    def __init__(
        self,
        type: str,  # the producer's error type, named as in StreamFailure
        message: str,
        *,
        attempt: int | None = None,
        sequence_index: int | None = None,
        envelope: Any = None,
        topic: str | None = None,
        trigger_run_id: str | None = None,
    ) -> None:
        where = f"stream {trigger_run_id!r}" if trigger_run_id is not None else "stream"
        if topic is not None:
            where += f" on topic {topic!r}"
        position = ""
        if attempt is not None and sequence_index is not None:
            position = f" (attempt {attempt}, sequence_index {sequence_index})"
        super().__init__(
            f"{where} failed{position}: {type}: {message}", topic=topic, trigger_run_id=trigger_run_id
        )
        self.type = type
        self.message = message
        self.attempt = attempt
        self.sequence_index = sequence_index
        self.envelope = envelope


# --------------------------------------------------------------------------- trigger arguments
class TriggerSerializationError(ValidationError):
    """A trigger argument does not survive Airflow's trigger-kwargs serialization round trip.

    ``owner`` names who passed it (an operator and its task id), ``argument`` is the path of
    the value inside the trigger keyword arguments (e.g. ``"options['transform']"``) and
    ``reason`` what went wrong.  Raised while a DAG file is parsed (so it is an import error of
    that file) or when a task defers.
    """

    def __init__(self, message: str, *, owner: str, argument: str, reason: str) -> None:
        super().__init__(message)
        self.owner = owner
        self.argument = argument
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


# --------------------------------------------------------------------------- asset events
class AssetEventValidationError(ValidationError):
    """An asset event was rejected before anything was sent to Kafka."""


class InvalidAssetError(AssetEventValidationError):
    """The asset is not one Airflow would accept (empty, whitespace-only, too long, reserved scheme)."""


class PartitionKeyError(AssetEventValidationError):
    """A partition key Airflow would reject: not a str, blank or whitespace-only, or over 250 characters."""


class PartitionDateError(AssetEventValidationError):
    """A partition date that is not a ``datetime``."""


class NaiveDatetimeError(PartitionDateError):
    """A datetime without a timezone where an instant is needed."""


class PartitionDateWithoutKeyError(AssetEventValidationError):
    """A ``partition_date`` was given without a ``partition_key``."""


class PartitionInheritanceError(AssetEventValidationError):
    """``inherit_partition=True`` cannot be honoured (no run partition, or an explicit key as well)."""


class ExtraError(AssetEventValidationError):
    """The event's ``extra`` cannot be published."""


class ExtraNotSerializableError(ExtraError):
    """``extra`` is not a JSON object (str keys, strict JSON values)."""


class ExtraTooLargeError(ExtraError):
    """``extra`` is larger, as compact UTF-8 JSON, than the configured bound."""


class IdempotencyKeyError(AssetEventValidationError):
    """An explicit idempotency key that is not a non-blank str of bounded length."""


class CausationError(AssetEventValidationError):
    """A causation entry that is not a non-empty event id."""


class CausationLoopError(CausationError):
    """The causation chain is longer than allowed: most likely a feedback loop between DAGs."""


class ParseTimeEmissionError(AssetEventValidationError):
    """An asset event was emitted while a DAG file was being parsed (top-level DAG code)."""


class NoEmissionContextError(AssetEventValidationError):
    """No running task or callback context to take the event's source from."""

"""The replay of a dead letter: its ORIGINAL record published again.

:func:`replay_dead_letter` publishes the original's key, value and original headers (the ``x-*``
headers of :mod:`airflow_kafka_events.dead_letters.letter` removed) to its source topic or another
one the configuration allows (:mod:`airflow_kafka_events.ui.inspection.replay_targets`), and waits
for the broker's acknowledgement.  The value is the original's byte for byte, so the envelope's
``event_id`` and idempotency key are unchanged and a consumer that already handled it (the
watcher's and the bridge's idempotency checks) does not handle it twice.  A *reference* dead letter
holds only a prefix of the value: the original is read back at its source coordinates (while that
topic keeps it) and must have the size and the prefix the dead letter records, else
:class:`ReplayError` and nothing is published.  A replay given the
:attr:`~airflow_kafka_events.ui.inspection.dead_letters.DeadLetterRecord.fingerprint` an operator
confirmed publishes nothing if the record at those coordinates is another one now.  Every replay
writes one line to the logger :data:`AUDIT_LOGGER`.

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.dead_letters.headers import DEAD_LETTER_HEADERS, REFERENCE_HEADERS
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes.codec import EnvelopeCodecs
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.ui.inspection.dead_letters import LoadedDeadLetter, cluster_of, load_dead_letter
from airflow_kafka_events.ui.inspection.errors import RecordNotFoundError, ReplayError, TopicNotFoundError
from airflow_kafka_events.ui.inspection.reader import DEFAULT_TIMEOUT, TopicReader, message_headers
from airflow_kafka_events.ui.inspection.replay_targets import ReplayTargets

__all__ = [
    "AUDIT_LOGGER",
    "REPLAY_ROLE",
    "ReplayReceipt",
    "replay_dead_letter",
]

#: Logger of the replay audit lines.
AUDIT_LOGGER = "airflow_kafka_events.audit"
#: Producer role of replays (its own producer: a replay's timeout is the caller's).
REPLAY_ROLE = "replay"
_DLQ_NAMES = DEAD_LETTER_HEADERS | REFERENCE_HEADERS
audit = logging.getLogger(AUDIT_LOGGER)


@dataclass(frozen=True)
class ReplayReceipt:
    """Where a replayed record came from and where the broker stored it."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    source_topic: str
    source_partition: int
    source_offset: int
    target_topic: str
    target_partition: int
    target_offset: int
    idempotency_key: str | None
    event_id: str | None
    from_reference: bool
    actor: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _where(coordinates: tuple[str, str, int, int]) -> str:
    return "{1}[{2}]@{3} on {0}".format(*coordinates)


def _original(
    config: Mapping[str, Any], msg: Message, letter: DeadLetter, timeout: float
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Key, value and headers of the original record."""
    if not letter.truncated:
        headers = [(n, v) for n, v in message_headers(msg) if n not in _DLQ_NAMES]
        return msg.key(), msg.value(), headers
    where = f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset}"
    try:
        with TopicReader(config, letter.source_topic, timeout=timeout, name="replay source") as reader:
            original = reader.read_one(letter.source_partition, letter.source_offset)
    except RecordNotFoundError as exc:
        raise ReplayError(
            f"{msg.topic()}[{msg.partition()}]@{msg.offset()} is a reference dead letter (it keeps only a "
            f"prefix of the {letter.original_value_bytes}-byte value) and the original at {where} is gone: "
            f"{exc}; it cannot be replayed whole"
        ) from exc
    _check_original(msg, letter, original.value(), where)
    return original.key(), original.value(), message_headers(original)


def _check_original(msg: Message, letter: DeadLetter, value: bytes | None, where: str) -> None:
    """Refuse a record at the source coordinates that is not the one dead-lettered (size, prefix)."""
    prefix, size = msg.value() or b"", len(value or b"")
    if letter.original_value_bytes is not None and size != letter.original_value_bytes:
        why = f"its value is {size} bytes, the dead-lettered one was {letter.original_value_bytes}"
    elif not (value or b"").startswith(prefix):
        why = f"its value does not begin with the {len(prefix)}-byte prefix the dead letter keeps"
    else:
        return
    raise ReplayError(
        f"{msg.topic()}[{msg.partition()}]@{msg.offset()} is a reference dead letter and the record now "
        f"at {where} is not its original ({why}): the topic was deleted and re-created, or compacted; "
        "nothing replayed (fix: replay the original from a copy of that topic, if one is kept)"
    )


def _check_target(config: Mapping[str, Any], topic: str, timeout: float) -> None:
    """Refuse at once a replay to a topic that does not exist (a producer would wait out its timeout)."""
    with TopicReader(config, topic, timeout=timeout, name="replay target") as reader:
        try:
            reader.partitions()
        except TopicNotFoundError as exc:
            raise TopicNotFoundError(
                f"cannot replay to topic {topic!r}: it does not exist at {reader.servers} (or this client "
                "may not see it); nothing replayed; fix: create it (`airflow-kafka-events topics ensure` "
                "creates the package's topics), or replay to an existing topic (--to, or the confirmation's "
                "topic)",
                kafka_error=exc.kafka_error,
            ) from exc


def _idempotency(value: bytes | None, codecs: EnvelopeCodecs) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    try:
        envelope = codecs.asset.decode(value)
    except (EnvelopeDecodeError, ValidationError):
        return None, None
    return envelope.idempotency_key, envelope.event_id


def replay_dead_letter(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    *,
    targets: ReplayTargets,
    target_topic: str | None = None,
    actor: str,
    timeout: float = DEFAULT_TIMEOUT,
    loaded: LoadedDeadLetter | None = None,
    fingerprint: str | None = None,
) -> ReplayReceipt:
    """Publish the original of the dead letter at ``topic[partition]@offset`` again (see the module doc).

    ``targets``: where replays of ``topic``'s dead letters may go, by configuration
    (:meth:`ReplayTargets.target_for`: the source topic the configuration names, or an extra target;
    ``target_topic`` asks for one of them); anything else is refused with
    :class:`~airflow_kafka_events.ui.inspection.errors.ReplayTargetRefusedError` before anything is read
    from the source topic or published.

    ``loaded``: that dead letter as :func:`load_dead_letter` already read it (the one a caller showed
    and had confirmed), published without reading it again; one read at other coordinates or from
    another cluster is refused.  ``fingerprint``: the :attr:`DeadLetterRecord.fingerprint` an operator
    confirmed; a dead letter whose fingerprint differs (another record at these coordinates) is
    refused with :class:`ReplayError` and nothing is published.  A reference dead letter's original is
    read at its source coordinates and must have the dead letter's size and prefix (else
    :class:`ReplayError`).
    A target topic that does not exist is refused at once (:class:`TopicNotFoundError`, nothing
    published).  Waits for the broker's acknowledgement (``acks=all``); a failure is
    :class:`~airflow_kafka_events.errors.NotSentError` (nothing was published) or
    :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` (it may have been: replaying
    again is safe, the idempotency key is the same).
    """
    if not isinstance(actor, str) or not actor.strip():
        raise ValidationError("a replay needs an actor (who asked for it) for the audit line")
    if targets.dlq_topic != topic:
        raise ValidationError(
            f"the replay targets passed are those of dead-letter topic {targets.dlq_topic!r}, not {topic!r}"
        )
    if loaded is None:
        loaded = load_dead_letter(config, topic, partition, offset, timeout=timeout)
    elif loaded.coordinates != (wanted := (cluster_of(config), topic, partition, offset)):
        raise ValidationError(
            f"the dead letter passed to replay was read at {_where(loaded.coordinates)}, not "
            f"{_where(wanted)}; fix: pass the one load_dead_letter read at these coordinates"
        )
    if fingerprint is not None and fingerprint != loaded.fingerprint:
        raise ReplayError(
            f"the dead letter at {_where(loaded.coordinates)} is not the one confirmed (fingerprint "
            f"{loaded.fingerprint}, confirmed {fingerprint}): another record is at these coordinates now "
            "(the topic was re-created?); nothing replayed (fix: open it again and confirm what it is now)"
        )
    msg, letter = loaded.message, loaded.letter
    target = targets.target_for(letter.source_topic, target_topic)
    key, value, headers = _original(config, msg, letter, timeout)
    _check_target(config, target, timeout)
    producer = get_producer(
        KafkaSettings(config).producer_config(), role=REPLAY_ROLE, message_timeout=timeout
    )
    stored = producer.send_and_wait(target, value, key=key, headers=headers, timeout=timeout)
    idempotency_key, event_id = _idempotency(value, KafkaSettings(config).codecs)
    receipt = ReplayReceipt(
        dlq_topic=topic,
        dlq_partition=partition,
        dlq_offset=offset,
        source_topic=letter.source_topic,
        source_partition=letter.source_partition,
        source_offset=letter.source_offset,
        target_topic=stored.topic,
        target_partition=stored.partition,
        target_offset=stored.offset,
        idempotency_key=idempotency_key,
        event_id=event_id or letter.event_id,
        from_reference=letter.truncated,
        actor=actor,
    )
    audit.info(
        "dead letter replayed: actor=%s dlq=%s[%d]@%d source=%s[%d]@%d target=%s[%d]@%d reason=%s "
        "event_id=%s idempotency_key=%s reference=%s",
        actor,
        topic,
        partition,
        offset,
        letter.source_topic,
        letter.source_partition,
        letter.source_offset,
        stored.topic,
        stored.partition,
        stored.offset,
        letter.reason,
        receipt.event_id,
        idempotency_key,
        letter.truncated,
    )
    return receipt

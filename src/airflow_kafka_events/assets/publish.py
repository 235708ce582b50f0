"""Asset events from outside Airflow, and the Airflow-free core every emit path shares.

:func:`emit` publishes an :class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` with
source kind ``external`` from any Python process: Kafka settings come from arguments, the
environment (``KAFKA_BOOTSTRAP_SERVERS``, ``AIRFLOW_KAFKA_EVENTS_PROPERTIES``) or a librdkafka
properties file (:meth:`KafkaSettings.from_sources`).  No Airflow service, credential or module
is needed: this module imports no Airflow module.

The core (:func:`build_envelope`, :func:`publish`, :class:`Receipt`) is what the Airflow-aware
``emit_asset_event`` uses too: every check runs before anything is sent, the record is keyed
by the asset URI (so one asset's events stay in order on one partition), produced with
``acks=all`` and idempotence, and the call returns once the broker acknowledged it.

A :class:`Receipt` acknowledges persistence in Kafka, not in Airflow: the event becomes an
Airflow asset event only when a watcher/bridge consumes it, and it says nothing about
downstream DAG runs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_kafka_events.assets.idempotency import default_idempotency_key
from airflow_kafka_events.assets.validation import (
    DEFAULT_MAX_CAUSATION_DEPTH,
    DEFAULT_MAX_EXTRA_BYTES,
    Redactor,
    check_asset,
    check_causation,
    check_extra,
    check_idempotency_key,
    check_partition,
    check_timeout,
    redact_external,
)
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import ExtraNotSerializableError, InvalidAssetError
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.producer import RecordProducer, get_producer
from airflow_kafka_events.kafka.settings import LINGER_KEYS, KafkaSettings

__all__ = [
    "DEFAULT_TOPIC",
    "EMIT_LINGER_MS",
    "EMIT_ROLE",
    "ENV_PRODUCER",
    "ENV_TOPIC",
    "PROVENANCE_EXTRA_KEY",
    "Receipt",
    "build_envelope",
    "causation_depth",
    "causation_from_extra",
    "emit",
    "emit_config",
    "emit_producer",
    "provenance_extra",
    "publish",
    "record_key",
    "resolve_asset",
]

#: Default topic of asset events (the provider's ``[kafka_events] asset_events_topic``).
DEFAULT_TOPIC = "airflow.asset-events"
#: Outside Airflow, the topic may come from Airflow's own environment variable for that option.
ENV_TOPIC = "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC"
#: Default producer name of external events.
ENV_PRODUCER = "AIRFLOW_KAFKA_EVENTS_PRODUCER"
#: Key, in an Airflow asset event's ``extra``, of the provenance a bridge copies from the envelope.
PROVENANCE_EXTRA_KEY = "airflow_kafka_events"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Producer role of asset-event emits: its message timeout is the emit's timeout.
EMIT_ROLE = "emit"
#: ``linger.ms`` of the emit producers unless the connection sets one: each emit waits for its own
#: receipt, so a batching delay is pure latency; emits from several threads still batch, as
#: librdkafka gathers what is queued while earlier requests are in flight (B4).
EMIT_LINGER_MS = 0


# --------------------------------------------------------------------------- receipt
@dataclass(frozen=True)
class Receipt:
    """Where Kafka stored an asset event.

    It acknowledges persistence in Kafka (all in-sync replicas, ``acks=all``) — not that
    Airflow recorded an asset event, nor that any DAG ran.  ``timestamp`` is the record's
    timestamp as the broker stored it (with the default ``CreateTime`` topics the producer's
    send time, with ``LogAppendTime`` the broker's), as an aware UTC datetime; ``None`` only if
    the broker reported none.
    """

    event_id: str
    topic: str
    partition: int
    offset: int
    timestamp: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": None if self.timestamp is None else self.timestamp.isoformat(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def of(cls, event_id: str, delivered: DeliveryReceipt) -> Receipt:
        """The receipt of event ``event_id``, stored where (and when) ``delivered`` says."""
        ms = delivered.timestamp_ms
        timestamp = None if ms is None else _EPOCH + timedelta(milliseconds=ms)
        return cls(event_id, delivered.topic, delivered.partition, delivered.offset, timestamp)


# --------------------------------------------------------------------------- provenance / causation
def record_key(asset: AssetRef) -> bytes:
    """The Kafka record key of an asset's events: its URI in UTF-8."""
    return asset.uri.encode("utf-8")


def causation_depth(envelope: AssetEventEnvelope) -> int:
    """How many ancestor events ``envelope`` records (``0`` for an event nothing caused).

    For a single chain this is its depth: an event emitted by a run that an event with depth
    ``n`` triggered has depth ``n + 1``.  When a run was triggered by several events their
    chains are merged (without repeats), so the value is then an upper bound on the depth.
    """
    return len(envelope.causation)


def provenance_extra(envelope: AssetEventEnvelope) -> dict[str, Any]:
    """What a bridge should add to the ``extra`` of the Airflow asset event made from ``envelope``.

    ``{"airflow_kafka_events": {"event_id": ..., "causation": [...], "idempotency_key": ...}}``;
    emitting from a run triggered by that asset event then extends the causation chain.
    """
    return {
        PROVENANCE_EXTRA_KEY: {
            "event_id": envelope.event_id,
            "causation": list(envelope.causation),
            "idempotency_key": envelope.idempotency_key,
        }
    }


def causation_from_extra(extra: Any) -> tuple[str, ...]:
    """The chain (ancestors oldest first, then the event itself) carried by an asset event's extra.

    Reads :data:`PROVENANCE_EXTRA_KEY` as written by :func:`provenance_extra` — at the top
    level (events posted by the partition bridge) or inside ``extra["payload"]`` (events an
    AssetWatcher made, ``{"from_trigger": True, "payload": ...}``); anything else (an event from
    outlets, the REST API, another producer) gives ``()``.
    """
    if not isinstance(extra, Mapping):
        return ()
    info = extra.get(PROVENANCE_EXTRA_KEY)
    if info is None and extra.get("from_trigger") and isinstance(extra.get("payload"), Mapping):
        info = extra["payload"].get(PROVENANCE_EXTRA_KEY)
    if not isinstance(info, Mapping):
        return ()
    event_id = info.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        return ()
    ancestors = info.get("causation")
    chain = [a for a in ancestors if isinstance(a, str) and a] if isinstance(ancestors, list) else []
    return (*chain, event_id)


# --------------------------------------------------------------------------- envelope
def resolve_asset(asset: Any, name: str | None = None) -> AssetRef:
    """An :class:`AssetRef` from a URI str (``name`` defaults to it), an ``AssetRef``, or any object
    with str ``name`` and ``uri`` attributes (such as an ``airflow.sdk.Asset``, not imported here)."""
    if isinstance(asset, AssetRef):
        if name is not None:
            raise InvalidAssetError("name cannot be given with an AssetRef (it has one)")
        asset_name, uri = check_asset(asset.uri, asset.name)
    elif isinstance(asset, str):
        asset_name, uri = check_asset(asset, name)
    elif isinstance(getattr(asset, "name", None), str) and isinstance(getattr(asset, "uri", None), str):
        if name is not None:
            raise InvalidAssetError(f"name cannot be given with {type(asset).__qualname__} (it has one)")
        asset_name, uri = check_asset(asset.uri, asset.name)
    else:
        raise InvalidAssetError(
            "asset must be a URI str, an AssetRef or an object with name and uri, "
            f"got {type(asset).__qualname__}"
        )
    return AssetRef(name=asset_name, uri=uri)


def build_envelope(
    *,
    asset: AssetRef,
    source: EventSource,
    partition_key: str | None = None,
    partition_date: datetime | None = None,
    extra: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    causation: Iterable[str] | None = None,
    redactor: Redactor = redact_external,
    max_extra_bytes: int = DEFAULT_MAX_EXTRA_BYTES,
    max_causation_depth: int = DEFAULT_MAX_CAUSATION_DEPTH,
) -> AssetEventEnvelope:
    """Validate every input and build the envelope; nothing is sent.

    Raises an :class:`~airflow_kafka_events.errors.AssetEventValidationError` subclass for the
    first problem found.  The idempotency key defaults to
    :func:`~airflow_kafka_events.assets.idempotency.default_idempotency_key` over the redacted
    extra.
    """
    key, date = check_partition(partition_key, partition_date)
    published_extra = check_extra(extra, redactor=redactor, max_bytes=max_extra_bytes)
    ancestors = check_causation(causation, max_depth=max_causation_depth)
    explicit_key = check_idempotency_key(idempotency_key)
    if explicit_key is None:
        explicit_key = default_idempotency_key(
            asset_uri=asset.uri,
            partition_key=key,
            partition_date=date,
            extra=published_extra,
            source=source,
        )
    envelope = AssetEventEnvelope(
        asset=asset,
        partition_key=key,
        partition_date=date,
        extra=published_extra,
        idempotency_key=explicit_key,
        source=source,
        causation=ancestors,
    )
    try:
        envelope.to_avro()  # the last check: everything in it encodes
    except Exception as exc:  # pragma: no cover - check_extra already proved extra is JSON
        raise ExtraNotSerializableError(f"the asset event cannot be encoded: {exc}") from exc
    return envelope


def publish(
    envelope: AssetEventEnvelope,
    *,
    producer: RecordProducer,
    topic: str,
    timeout: float = 30.0,
    codec: EnvelopeCodec[AssetEventEnvelope] = ASSET_EVENT_CODEC,
) -> Receipt:
    """Send ``envelope`` (keyed by its asset URI) and wait for the broker's acknowledgement.

    A :class:`Receipt` means the event is durable in Kafka.  Failures are typed:
    :class:`~airflow_kafka_events.errors.NotSentError` — not sent, nothing will be published
    (e.g. no broker reachable, unknown topic; :class:`~airflow_kafka_events.errors.RecordTooLargeError`
    before anything is produced) — or
    :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` — it may have been written:
    retry with the same idempotency key (readers drop a repeated key).  With a producer whose
    message timeout is ``timeout`` (``get_producer(..., role=EMIT_ROLE, message_timeout=timeout)``,
    as :func:`emit` uses), a failed event is never published later.
    """
    value = codec.encode(envelope, topic=topic)
    headers: list[tuple[str, bytes | str | None]] = [("event_id", envelope.event_id)]
    if envelope.idempotency_key is not None:
        headers.append(("idempotency_key", envelope.idempotency_key))
    delivered = producer.send_and_wait(
        topic, value, key=record_key(envelope.asset), headers=headers, timeout=timeout
    )
    return Receipt.of(envelope.event_id, delivered)


def emit_config(settings: KafkaSettings) -> dict[str, Any]:
    """The producer configuration of emits: ``settings.producer_config()`` (``acks=all``,
    idempotence) with ``linger.ms`` :data:`EMIT_LINGER_MS` unless the settings set one."""
    config = settings.producer_config()
    if not LINGER_KEYS & settings.config.keys():
        config["linger.ms"] = EMIT_LINGER_MS
    return config


def emit_producer(settings: KafkaSettings, *, message_timeout: float) -> RecordProducer:
    """This process's emit producer for ``settings`` (:func:`emit_config`, role :data:`EMIT_ROLE`),
    its message timeout the caller's wait."""
    return get_producer(emit_config(settings), role=EMIT_ROLE, message_timeout=message_timeout)


# --------------------------------------------------------------------------- external emit
def default_topic(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(ENV_TOPIC) or DEFAULT_TOPIC


def default_producer_name(environ: Mapping[str, str] | None = None) -> str:
    """``$AIRFLOW_KAFKA_EVENTS_PRODUCER``, else the program's name, else ``external``."""
    env = os.environ if environ is None else environ
    argv0 = sys.argv[0] if sys.argv else ""
    program = "" if argv0 in {"", "-c", "-m"} else Path(argv0).name
    return env.get(ENV_PRODUCER) or program or "external"


def emit(
    asset: Any,
    *,
    name: str | None = None,
    partition_key: str | None = None,
    partition_date: datetime | None = None,
    extra: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    causation: Iterable[str] | None = None,
    topic: str | None = None,
    producer: str | None = None,
    bootstrap_servers: str | None = None,
    properties_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    settings: KafkaSettings | None = None,
    timeout: float = 30.0,
    max_extra_bytes: int = DEFAULT_MAX_EXTRA_BYTES,
    max_causation_depth: int = DEFAULT_MAX_CAUSATION_DEPTH,
) -> Receipt:
    """Publish one asset event from outside Airflow and return its :class:`Receipt`.

    ``asset`` is the asset URI (``name`` defaults to it) or an object with ``name``/``uri``.
    ``producer`` names the sending application (default ``$AIRFLOW_KAFKA_EVENTS_PRODUCER``, else
    the program name).  Kafka settings: ``settings``, else :meth:`KafkaSettings.from_sources`
    with ``bootstrap_servers`` / ``properties_file`` / ``overrides`` and the environment.
    ``topic`` defaults to ``$AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC``, else
    ``airflow.asset-events``.  ``extra`` values under sensitive key names
    (:data:`~airflow_kafka_events.assets.validation.EXTERNAL_SENSITIVE_KEYS`) are replaced by
    ``"***"``.  Without ``idempotency_key`` the key depends on the content only: pass distinct
    keys to publish two identical events on purpose.
    """
    wait = check_timeout(timeout)
    source = EventSource(SourceKind.EXTERNAL, producer=producer or default_producer_name())
    envelope = build_envelope(
        asset=resolve_asset(asset, name),
        source=source,
        partition_key=partition_key,
        partition_date=partition_date,
        extra=extra,
        idempotency_key=idempotency_key,
        causation=causation,
        max_extra_bytes=max_extra_bytes,
        max_causation_depth=max_causation_depth,
    )
    if settings is None:
        settings = KafkaSettings.from_sources(
            bootstrap_servers=bootstrap_servers, properties_file=properties_file, overrides=overrides
        )
    return publish(
        envelope,
        producer=emit_producer(settings, message_timeout=wait),
        topic=topic or default_topic(),
        timeout=wait,
        codec=settings.codecs.asset,
    )

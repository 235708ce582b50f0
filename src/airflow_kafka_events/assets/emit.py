"""Emit asset events from Airflow: running tasks, task- and DAG-level callbacks.

``emit_asset_event(asset, ...)`` publishes one
:class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` to Kafka *now* and returns a
:class:`~airflow_kafka_events.assets.publish.Receipt` once the broker acknowledged it
(``acks=all``).  Semantics:

* immediate publication: the event is in Kafka when the call returns, whatever the task or
  DAG run does next; a later failure does not retract it;
* no state transition: emitting marks nothing successful; outlets are unchanged (a task with
  an outlet and an explicit emission produces separate events);
* explicit partitions: ``partition_key`` / ``partition_date`` are only what the caller passes
  (a date requires a key, and must be timezone-aware); ``inherit_partition=True`` opts in to
  the current run's partition;
* runtime-only: emitting while a DAG file is parsed raises :class:`ParseTimeEmissionError`;
* the receipt acknowledges persistence in Kafka, not in Airflow: the event becomes an Airflow
  asset event only when the watcher/bridge consumes it;
* ``extra`` is redacted with Airflow's secrets masker (registered secrets anywhere in
  strings, values under sensitive key names) before anything leaves the process;
* every event carries an idempotency key (default: see
  :mod:`airflow_kafka_events.assets.idempotency`) and a causation chain;
* exact failures: :class:`~airflow_kafka_events.errors.NotSentError` means nothing will be
  published (the client drops the event at ``timeout``), and
  :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` means it may have been
  written: retry with the same idempotency key.

Source attribution: ``emit_asset_event`` takes it from the running task (kind ``task``);
callbacks say what they are — :func:`emit_from_task_callback` (kind ``task_callback``, with the
task instance) and :func:`emit_from_dag_callback` (kind ``dag_callback``, DAG id and run id
only: in Airflow 3.3 a DAG callback's context may carry the run's *last* task instance, which
did not produce the event, so it is never used).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from airflow_kafka_events.assets.publish import Receipt, build_envelope, emit_producer, publish, resolve_asset
from airflow_kafka_events.assets.validation import (
    DEFAULT_MAX_CAUSATION_DEPTH,
    DEFAULT_MAX_EXTRA_BYTES,
    check_causation,
    check_max_bytes,
    check_timeout,
    redact_by_key,
)
from airflow_kafka_events.assets.watcher_payload import _field, watcher_causation
from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import (
    EnvelopeSerializationError,
    InvalidAssetError,
    KafkaOperationError,
    NoEmissionContextError,
    ParseTimeEmissionError,
    PartitionDateError,
    PartitionInheritanceError,
    ValidationError,
)
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

__all__ = [
    "EmitKwargs",
    "EmitOptions",
    "airflow_redact",
    "emit_asset_event",
    "emit_event",
    "emit_from_dag_callback",
    "emit_from_task_callback",
    "is_dag_callback_context",
    "parsing_dag_file",
    "reject_parse_time",
    "run_partition",
    "source_from_dag_context",
    "source_from_task_context",
    "to_asset_ref",
    "triggering_causation",
]

CONFIG_SECTION = "kafka_events"


# --------------------------------------------------------------------------- Airflow facts
def parsing_dag_file() -> bool:
    """Whether a DAG file is being parsed right now in this process.

    Airflow 3.3's DAG importer (used by the DAG processor, ``DagBag`` and the task runner's own
    parse of the DAG file) sets ``DagContext.current_autoregister_module_name`` while a DAG
    file's module executes and clears it once the file is imported.  Code inside a
    ``with DAG(...)`` block with no task running is DAG definition too.  (The
    ``_AIRFLOW_PARSING_CONTEXT_*`` environment variables are not a signal: the task runner sets
    them to parse the file and leaves them set while the task runs.)
    """
    from airflow.sdk.definitions._internal.contextmanager import _CURRENT_CONTEXT, DagContext

    if DagContext.current_autoregister_module_name is not None:
        return True
    return bool(DagContext.active) and not _CURRENT_CONTEXT


def reject_parse_time() -> None:
    if parsing_dag_file():
        raise ParseTimeEmissionError(
            "asset events cannot be emitted while a DAG file is parsed (top-level DAG code runs on "
            "every parse); emit from a task, a callback or a notifier"
        )


def _current_context() -> Mapping[str, Any] | None:
    from airflow.sdk import get_current_context

    try:
        return get_current_context()
    except RuntimeError:
        return None


def is_dag_callback_context(context: Mapping[str, Any]) -> bool:
    """Whether ``context`` is a DAG-level callback's: Airflow 3.3 sets ``reason`` only there."""
    return "reason" in context


def source_from_task_context(
    context: Mapping[str, Any], *, kind: SourceKind = SourceKind.TASK, producer: str | None = None
) -> EventSource:
    """The source of an event produced by the context's task instance (``ti``)."""
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        raise NoEmissionContextError(
            "the context has no task instance ('ti'); for a DAG-level event use emit_from_dag_callback"
        )
    return EventSource(
        kind,
        dag_id=_field(ti, "dag_id"),
        run_id=_field(ti, "run_id"),
        task_id=_field(ti, "task_id"),
        map_index=_field(ti, "map_index"),
        try_number=_field(ti, "try_number"),
        producer=producer,
    )


def source_from_dag_context(
    context: Mapping[str, Any], *, kind: SourceKind = SourceKind.DAG_CALLBACK, producer: str | None = None
) -> EventSource:
    """The DAG-level source of an event: DAG id and run id only, never the context's ``ti``."""
    dag_run = context.get("dag_run")
    dag_id = _field(context.get("dag"), "dag_id") or _field(dag_run, "dag_id")
    run_id = context.get("run_id") or _field(dag_run, "run_id")
    if not isinstance(dag_id, str) or not dag_id:
        raise NoEmissionContextError("the callback context names no DAG (no 'dag' nor 'dag_run')")
    return EventSource(
        kind, dag_id=dag_id, run_id=run_id if isinstance(run_id, str) else None, producer=producer
    )


def _as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):  # a DAG run serialized to JSON (deadline callbacks)
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise PartitionDateError(f"the run's partition_date {value!r} is not ISO-8601") from exc
    raise PartitionDateError(f"the run's partition_date has type {type(value).__qualname__}")


def run_partition(context: Mapping[str, Any] | None) -> tuple[str | None, datetime | None]:
    """The partition key and date of the context's DAG run (``dag_run.partition_key`` in 3.3)."""
    if not context:
        return None, None
    dag_run = context.get("dag_run")
    key = _field(dag_run, "partition_key")
    if key is None:
        key = context.get("partition_key")
    date = _field(dag_run, "partition_date")
    if date is None:
        date = context.get("partition_date")
    return key, _as_datetime(date)


#: Event ids of the chains of this package's events that triggered the context's run (watcher
#: and bridge events alike); one implementation: ``assets.watcher_payload.watcher_causation``.
triggering_causation = watcher_causation


def airflow_redact(extra: dict[str, Any]) -> Any:
    """Airflow's secrets masker over ``extra``, then every scalar under a key it deems sensitive.

    ``redact`` masks registered secrets (connection passwords, ``mask_secret`` values) anywhere
    in strings and strings under sensitive key names (``password``, ``token``, ``api_key`` ...
    plus ``[core] sensitive_var_conn_names``); the second pass also masks numbers and booleans
    under those keys, which Airflow's masker leaves as they are.
    """
    from airflow.sdk._shared.secrets_masker import should_hide_value_for_key
    from airflow.sdk.log import redact

    return redact_by_key(redact(extra), should_hide_value_for_key)


def to_asset_ref(asset: Any) -> AssetRef:
    """``AssetRef`` of an ``airflow.sdk.Asset``, a str (``Asset(str)``: name and URI) or an ``AssetRef``."""
    from airflow.sdk import Asset, AssetAlias
    from airflow.sdk.definitions.asset import AssetRef as AirflowAssetRef

    if isinstance(asset, Asset):
        return AssetRef(name=asset.name, uri=asset.uri)
    if isinstance(asset, str):
        try:
            built = Asset(asset)
        except (TypeError, ValueError) as exc:
            raise InvalidAssetError(f"invalid asset {asset!r}: {exc}") from exc
        return AssetRef(name=built.name, uri=built.uri)
    if isinstance(asset, (AssetAlias, AirflowAssetRef)):
        raise InvalidAssetError(
            f"{type(asset).__name__} cannot be emitted to: pass the Asset itself (name and uri)"
        )
    return resolve_asset(asset)


def _config(option: str, fallback: str) -> str:
    from airflow.sdk.configuration import conf

    return str(conf.get(CONFIG_SECTION, option, fallback=fallback))


def _max_extra_bytes(value: int | None) -> int:
    if value is not None:
        return check_max_bytes(value)
    raw = _config("asset_event_max_extra_bytes", str(DEFAULT_MAX_EXTRA_BYTES))
    try:
        return check_max_bytes(int(raw))
    except ValueError as exc:
        raise ValidationError(
            f"[{CONFIG_SECTION}] asset_event_max_extra_bytes={raw!r} is not an int"
        ) from exc


#: Seconds an emit reuses the Kafka settings read from a connection: a connection changed while
#: a process emits is used by its emits within this time (at once after a failed send).
CONNECTION_TTL = 30.0


class ConnectionSettings:
    """This process's Kafka settings per connection id, read at most once per :data:`CONNECTION_TTL`.

    Reading a connection is the costliest step of an emit after the broker's acknowledgement
    (secrets backends; in a task, a round trip to the API server), and consecutive emits use the
    same connection.  Process-wide on purpose, as the producers are; keyed by pid, so that a
    forked child reads the connection itself.  A failed send forgets its connection.
    """

    def __init__(self, ttl: float = CONNECTION_TTL) -> None:
        self.ttl = ttl
        self.lock = threading.Lock()
        self._settings: dict[tuple[int, str], tuple[float, KafkaSettings]] = {}

    def get(self, conn_id: str) -> KafkaSettings:
        key, now = (os.getpid(), conn_id), time.monotonic()
        cached = self._settings.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        settings = KafkaEventsHook(kafka_config_id=conn_id).get_settings()  # may raise: nothing cached
        with self.lock:
            self._settings[key] = (now, settings)
        return settings

    def forget(self, conn_id: str) -> None:
        with self.lock:
            self._settings.pop((os.getpid(), conn_id), None)


#: The Kafka settings of the connections this process emits through.
CONNECTION_SETTINGS = ConnectionSettings()
# Held across fork(), so that a forked child never inherits the lock taken by a thread it does not have.
os.register_at_fork(
    before=CONNECTION_SETTINGS.lock.acquire,
    after_in_parent=CONNECTION_SETTINGS.lock.release,
    after_in_child=CONNECTION_SETTINGS.lock.release,
)


def _producer_for(
    kafka_config_id: str, *, message_timeout: float
) -> tuple[RecordProducer, EnvelopeCodec[AssetEventEnvelope]]:
    settings = CONNECTION_SETTINGS.get(kafka_config_id)
    return emit_producer(settings, message_timeout=message_timeout), settings.codecs.asset


# --------------------------------------------------------------------------- the one emit path
class EmitKwargs(TypedDict, total=False):
    """The keyword arguments every emit helper takes (see :func:`emit_asset_event`)."""

    partition_key: str | None
    partition_date: datetime | None
    extra: Mapping[str, Any] | None
    idempotency_key: str | None
    kafka_config_id: str | None
    topic: str | None
    inherit_partition: bool
    causation: Iterable[str] | None
    timeout: float
    max_extra_bytes: int | None
    max_causation_depth: int


@dataclass(frozen=True)
class EmitOptions:
    """What to emit and where, validated on construction (parameters as :func:`emit_asset_event`).

    An unknown option is a ``TypeError`` naming it; a bad value raises the validation error the
    emit itself would (:func:`~airflow_kafka_events.assets.validation.check_timeout` ...).
    """

    partition_key: str | None = None
    partition_date: datetime | None = None
    extra: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    kafka_config_id: str | None = None
    topic: str | None = None
    inherit_partition: bool = False
    causation: Iterable[str] | None = None  # kept as a tuple
    timeout: float = 30.0
    max_extra_bytes: int | None = None
    max_causation_depth: int = DEFAULT_MAX_CAUSATION_DEPTH

    def __post_init__(self) -> None:
        check_timeout(self.timeout)
        if not isinstance(self.inherit_partition, bool):
            raise ValidationError(f"inherit_partition must be a bool, got {self.inherit_partition!r}")
        if self.causation is not None and not isinstance(self.causation, tuple):
            if isinstance(self.causation, str):
                raise ValidationError("causation must be an iterable of event ids, not one str")
            object.__setattr__(self, "causation", tuple(self.causation))
        if isinstance(self.extra, Mapping) and not isinstance(self.extra, dict):
            object.__setattr__(self, "extra", dict(self.extra))


def emit_event(
    asset: Any, *, context: Mapping[str, Any] | None, source: EventSource, options: EmitOptions
) -> Receipt:
    """The one emit path every helper takes: ``asset`` from ``source`` with ``options``."""
    partition_key, partition_date = options.partition_key, options.partition_date
    wait = check_timeout(options.timeout)
    ref = to_asset_ref(asset)
    if options.inherit_partition:
        if partition_key is not None:
            raise PartitionInheritanceError(
                "inherit_partition=True takes the run's partition key: do not pass partition_key as well"
            )
        partition_key, run_date = run_partition(context)
        if partition_key is None:
            raise PartitionInheritanceError(
                "inherit_partition=True, but the current DAG run has no partition key to inherit"
            )
        if partition_date is None:
            partition_date = run_date
    explicit = check_causation(options.causation, max_depth=options.max_causation_depth)
    envelope = build_envelope(
        asset=ref,
        source=source,
        partition_key=partition_key,
        partition_date=partition_date,
        extra=options.extra,
        idempotency_key=options.idempotency_key,
        causation=(*triggering_causation(context), *explicit),
        redactor=airflow_redact,
        max_extra_bytes=_max_extra_bytes(options.max_extra_bytes),
        max_causation_depth=options.max_causation_depth,
    )
    conn_id = options.kafka_config_id or _config("kafka_config_id", "kafka_default")
    target = options.topic or _config("asset_events_topic", "airflow.asset-events")
    producer, codec = _producer_for(conn_id, message_timeout=wait)
    try:
        return publish(envelope, producer=producer, topic=target, timeout=wait, codec=codec)
    except (KafkaOperationError, EnvelopeSerializationError):
        CONNECTION_SETTINGS.forget(conn_id)  # the next emit reads the connection again (it may have changed)
        raise


def emit_asset_event(
    asset: Any, *, source: EventSource | None = None, **options: Unpack[EmitKwargs]
) -> Receipt:
    """Publish an asset event now and return its :class:`Receipt` (persisted in Kafka, not Airflow).

    :param asset: an ``airflow.sdk.Asset`` (name and URI) or a str (``Asset(str)``).
    :param partition_key: partition of the event; ``None`` means none (see ``inherit_partition``).
    :param partition_date: timezone-aware date of the partition; requires a key.
    :param extra: JSON object; redacted with Airflow's secrets masker, at most 64 KiB (default of
        ``max_extra_bytes`` / ``[kafka_events] asset_event_max_extra_bytes``) as compact UTF-8 JSON.
    :param idempotency_key: default derived from asset, partition, extra and the source without
        ``try_number`` (a retry re-emitting the same event gets the same key).
    :param kafka_config_id: Airflow Kafka connection (default ``[kafka_events] kafka_config_id``,
        ``kafka_default``).
    :param topic: default ``[kafka_events] asset_events_topic`` (``airflow.asset-events``).
    :param source: who produced the event; default: the running task (kind ``task``).
    :param inherit_partition: take the current DAG run's partition key (and date, unless
        ``partition_date`` is given); raises :class:`PartitionInheritanceError` if it has none.
    :param causation: ids of events that led to this one; the ids of this package's events that
        triggered the current run are prepended automatically.
    :param timeout: seconds to wait for the broker's acknowledgement; after it the event is
        dropped by the client, never published later.  Raises
        :class:`~airflow_kafka_events.errors.NotSentError` (not sent, nothing will be published) or
        :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` (it may have been written:
        retry with the same idempotency key).
    :param max_causation_depth: refuse (:class:`CausationLoopError`) an event with more ancestors.
    """
    reject_parse_time()
    context = _current_context()
    if source is None:
        if context is None:
            raise NoEmissionContextError(
                "emit_asset_event() needs a running task to take the source from; in a DAG callback use "
                "emit_from_dag_callback(context, ...), in a task callback emit_from_task_callback(context, "
                "...), outside Airflow airflow_kafka_events.assets.publish.emit(...), or pass source="
            )
        source = source_from_task_context(context)
    elif not isinstance(source, EventSource):
        raise ValidationError(f"source must be an EventSource, got {type(source).__qualname__}")
    return emit_event(
        asset,
        context=context,
        source=source,
        options=EmitOptions(**options),
    )


def _callback_context(context: Any) -> Mapping[str, Any]:
    if not isinstance(context, Mapping):
        raise NoEmissionContextError(
            f"pass the callback's context (a mapping) as the first argument, got {type(context).__qualname__}"
        )
    return context


def emit_from_dag_callback(context: Mapping[str, Any], asset: Any, **options: Unpack[EmitKwargs]) -> Receipt:
    """Emit from a DAG-level callback: kind ``dag_callback``, DAG id and run id, no task instance.

    Use it in ``DAG(on_success_callback=..., on_failure_callback=...)``: the context's ``ti``
    (Airflow 3.3 passes the run's last task instance when there is one) is never used as the
    event's source.  Other parameters as :func:`emit_asset_event`.
    """
    reject_parse_time()
    ctx = _callback_context(context)
    return emit_event(
        asset,
        context=ctx,
        source=source_from_dag_context(ctx),
        options=EmitOptions(**options),
    )


def emit_from_task_callback(context: Mapping[str, Any], asset: Any, **options: Unpack[EmitKwargs]) -> Receipt:
    """Emit from a task-level callback (``on_failure_callback`` ...): kind ``task_callback``, with the TI.

    A DAG-level callback's context (it has ``reason``) is refused with
    :class:`NoEmissionContextError`.  Other parameters as :func:`emit_asset_event`.
    """
    reject_parse_time()
    ctx = _callback_context(context)
    if is_dag_callback_context(ctx):
        raise NoEmissionContextError(
            "this is a DAG-level callback's context (its 'ti' is only the run's last task instance): "
            "use emit_from_dag_callback(context, ...)"
        )
    return emit_event(
        asset,
        context=ctx,
        source=source_from_task_context(ctx, kind=SourceKind.TASK_CALLBACK),
        options=EmitOptions(**options),
    )
